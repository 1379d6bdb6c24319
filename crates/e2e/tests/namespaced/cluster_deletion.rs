//! Deleting a TerraformCluster: a paused object's deletion waits and says why, then destroys
//! once unpaused, and the namespace's last object takes its runner accounts along; an object
//! that never applied loses its finalizer at once, with no Job; a look-alike destroy Job a
//! tenant made never stands in for the object's own.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

/// How many destroy Jobs `ns` holds.
async fn destroy_jobs(client: &kube::Client, ns: &str) -> usize {
    job_names(client, ns)
        .await
        .iter()
        .filter(|j| j.contains("-destroy-"))
        .count()
}

/// Abandons the TerraformCluster `name` with its `uid` and checks it is released without a
/// destroy, its `InfrastructureAbandoned` note saying `why`.
async fn abandoned(
    client: &kube::Client,
    ns: &str,
    manager: &captf_e2e::Manager,
    name: &str,
    uid: &str,
    why: &str,
) {
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    annotate(&api, name, "captf.io/abandon-infrastructure", Some(uid)).await;
    wait_for("the TerraformCluster to be released", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let note = event(client, ns, "InfrastructureAbandoned")
        .await
        .note
        .unwrap_or_default();
    assert!(
        note.contains("without a destroy") && note.contains(why),
        "{note}"
    );
    assert_eq!(
        destroy_jobs(client, ns).await,
        0,
        "released without a destroy"
    );
}

#[tokio::test]
async fn a_paused_deletion_waits_and_says_why_then_destroys_when_unpaused() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("pausedel", &[]).await;
    let name = "pausedel";
    create_cluster(&client, &ns, name, IMAGE, "").await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait_until(&api, name, "Ready", &manager, |t| {
        has(t, "Ready", "True", "Ready")
    })
    .await;

    annotate(&api, name, "cluster.x-k8s.io/paused", Some("")).await;
    wait_until(&api, name, "Paused", &manager, |t| {
        has(t, "Paused", "True", "Paused")
    })
    .await;
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    let waiting = wait_until(&api, name, "the deletion to say it waits", &manager, |t| {
        condition(t, "Deleting").is_some_and(|c| c.0 == "True" && c.2.contains("unpaused"))
    })
    .await;
    assert!(waiting.metadata.deletion_timestamp.is_some());
    let (_, _, message) = condition(&waiting, "Deleting").expect("Deleting");
    assert!(message.contains("cluster.x-k8s.io/paused"), "{message}");
    // Ready falls with the deletion; no reason of its own says so: ConditionChanged does, as a
    // warning.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    let fell = wait_for("Ready's fall announced", TIMEOUT, || async {
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("ConditionChanged")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.starts_with("Ready True -> False"))
            }))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    assert_eq!(fell.type_.as_deref(), Some("Warning"), "{fell:?}");
    let series = fell.series.as_ref().map_or(1, |s| s.count);
    assert_eq!(series, 1, "announced once: {fell:?}");
    assert!(
        !job_names(&client, &ns)
            .await
            .iter()
            .any(|j| j.contains("-destroy-")),
        "a paused object never destroys"
    );

    annotate(&api, name, "cluster.x-k8s.io/paused", None).await;
    wait_for_job(&client, &ns, "-destroy-", &manager).await;
    wait_for("the TerraformCluster to be gone", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));

    // It was the namespace's last object: the runner's account and binding and the managed
    // Leases go right after the finalizer, not at the next periodic sweep (10 minutes away).
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let managed = ListParams::default().labels("captf.io/managed=true");
    wait_for(
        "the namespace's runner objects removed",
        TIMEOUT,
        || async {
            let gone = accounts.list_metadata(&managed).await?.items.is_empty()
                && bindings.list_metadata(&managed).await?.items.is_empty()
                && leases.list_metadata(&managed).await?.items.is_empty();
            Ok(gone.then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    manager
        .logged("the sweep to log what it removed", TIMEOUT, |l| {
            l.contains("orphan sweep: no TerraformCluster")
                && l.contains(&ns)
                && l.contains("ServiceAccount/captf-runner")
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
}

#[tokio::test]
async fn an_object_that_never_applied_loses_its_finalizer_at_once() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("neverapplied", &[]).await;
    let name = "neverapplied";
    // A Job policy the manager refuses (the lock timeout must be below the deadline): the apply
    // never starts, and the object says why.
    create_cluster(
        &client,
        &ns,
        name,
        IMAGE,
        "  jobs: {activeDeadlineSeconds: 120, lockTimeoutSeconds: 300}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let held = wait_until(&api, name, "JobPolicyInvalid", &manager, |t| {
        has(t, "ApplyJobSucceeded", "False", "JobPolicyInvalid")
    })
    .await;
    assert!(
        held.metadata
            .finalizers
            .clone()
            .unwrap_or_default()
            .contains(&"terraformcluster.infrastructure.cluster.x-k8s.io".to_owned()),
        "the finalizer is on"
    );
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_for("the TerraformCluster to be gone", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    assert!(
        job_names(&client, &ns).await.is_empty(),
        "no Job ran for an object that never applied"
    );
}

#[tokio::test]
async fn a_deletion_without_state_is_held_until_abandoned_by_uid() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("held", &[]).await;
    let name = "held";
    create_cluster(&client, &ns, name, IMAGE, "").await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let ready = wait_until(&api, name, "Ready", &manager, |t| {
        has(t, "Ready", "True", "Ready")
    })
    .await;
    let uid = ready.metadata.uid.clone().expect("uid");
    let suffix = ready
        .status
        .as_ref()
        .and_then(|s| s.workspace.state_secret_suffix.clone())
        .expect("suffix");

    // The state goes missing (an operator's mistakes: its protection removed, then the
    // Secret deleted); the object then cannot be destroyed.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    delete_for_good(&secrets, &format!("tfstate-default-{suffix}")).await;
    wait_until(&api, name, "StateLost", &manager, |t| {
        has(t, "StateReadable", "False", "StateLost")
    })
    .await;
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    let held = wait_until(&api, name, "the deletion held", &manager, |t| {
        condition(t, "Deleting").is_some_and(|c| c.2.contains("deletion is held"))
    })
    .await;
    let (_, _, message) = condition(&held, "Deleting").expect("Deleting");
    assert!(
        message.contains(&format!("captf.io/abandon-infrastructure={uid}")),
        "the message gives the exact release command: {message}"
    );

    // A value copied from another object does nothing, and says so.
    annotate(
        &api,
        name,
        "captf.io/abandon-infrastructure",
        Some("not-this-uid"),
    )
    .await;
    wait_until(&api, name, "the wrong UID named", &manager, |t| {
        condition(t, "Deleting").is_some_and(|c| c.2.contains("not-this-uid"))
    })
    .await;
    assert_eq!(
        destroy_jobs(&client, &ns).await,
        0,
        "no destroy without state"
    );

    abandoned(&client, &ns, &manager, name, &uid, "StateLost").await;
}

#[tokio::test]
async fn a_deleted_cluster_waits_for_its_machines_before_the_destroy() {
    let (
        Scene {
            client,
            ns,
            manager,
            ..
        },
        name,
    ) = ready_cluster("depwait").await;
    // A TerraformMachine of the cluster, by its label; it needs no Machine to count.
    captf_e2e::apply_yaml(
        &client,
        &format!(
            r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformMachine
metadata:
  name: worker-0
  namespace: {ns}
  labels: {{cluster.x-k8s.io/cluster-name: {name}}}
spec:
  source: {{image: "captf.local/modules/noop-machine:e2e"}}
"#
        ),
    )
    .await
    .expect("TerraformMachine");

    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    api.delete(&name, &DeleteParams::default())
        .await
        .expect("delete");
    let blocked = wait_until(&api, &name, "DeletionBlocked", &manager, |t| {
        has(t, "DeletionBlocked", "True", "DependentsExist")
    })
    .await;
    let (_, _, message) = condition(&blocked, "DeletionBlocked").expect("condition");
    assert!(
        message.starts_with("1 TerraformMachine(s) left: worker-0;"),
        "{message}"
    );
    let (_, _, deleting) = condition(&blocked, "Deleting").expect("Deleting");
    assert!(deleting.contains("machines and pools"), "{deleting}");
    assert!(
        !job_names(&client, &ns)
            .await
            .iter()
            .any(|j| j.contains("-destroy-")),
        "no destroy while a machine is left"
    );

    let machines: Api<captf_api::TerraformMachine> = Api::namespaced(client.clone(), &ns);
    machines
        .delete("worker-0", &DeleteParams::default())
        .await
        .expect("delete the machine");
    // The destroy runs once the machine is gone (its Job is garbage-collected with the
    // cluster, so it is looked for before).
    wait_for_job(&client, &ns, "-destroy-", &manager).await;
    wait_for("the TerraformCluster gone", TIMEOUT, || async {
        Ok(api.get_opt(&name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
}

/// A tenant may create Jobs in its namespace, labels and all. A destroy Job that succeeded
/// under the object's labels but is not the object's (no controller reference to its UID) is
/// no part of its history: the deletion runs its own destroy, and an event names the forgery.
#[tokio::test]
async fn a_lookalike_destroy_job_changes_nothing() {
    use captf_api::labels;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("forged", &[]).await;
    let name = "forged";
    create_cluster(&client, &ns, name, IMAGE, "").await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait_until(&api, name, "Ready", &manager, ready).await;

    let restricted = serde_json::json!({
        "runAsNonRoot": true, "runAsUser": 65532, "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
    });
    let lookalike: Job = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "lookalike",
            "labels": {
                labels::OWNER_KIND: "TerraformCluster",
                labels::OWNER_NAME: name,
                labels::OP: "destroy",
                labels::ATTEMPT: "4294967295",
                labels::CLUSTER_NAME: name,
            },
        },
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "source", "image": IMAGE, "command": ["/captf/runtime", "version"],
                    "securityContext": restricted,
                }],
            }},
        },
    }))
    .expect("Job");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    jobs.create(&PostParams::default(), &lookalike)
        .await
        .expect("look-alike Job");
    wait_for("the look-alike to succeed", TIMEOUT, || async {
        let job = jobs.get("lookalike").await?;
        let done = job.status.and_then(|s| s.conditions).is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        });
        Ok(done.then_some(()))
    })
    .await
    .expect("the look-alike ran");

    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_for_job(&client, &ns, &format!("captf-c-{name}-destroy-"), &manager).await;
    wait_for("the TerraformCluster to be gone", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let ignored = event(&client, &ns, "ForeignJobIgnored").await;
    let note = ignored.note.unwrap_or_default();
    assert!(note.contains("lookalike"), "{note}");
}

/// The durable inputs Secret deleted by hand (docs/runbooks/stuck-destroy.md): the destroy
/// cannot be rendered, so no destroy Job starts and `ApplyJobSucceeded` says so; abandon then
/// releases the object, as the runbook promises, without a destroy.
#[tokio::test]
async fn a_deletion_without_its_durable_inputs_starts_no_destroy_and_can_be_abandoned() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("inputs-gone", &[]).await;
    let name = "inputs-gone";
    create_cluster(&client, &ns, name, IMAGE, "").await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let ready = wait_until(&api, name, "Ready", &manager, |t| {
        has(t, "Ready", "True", "Ready")
    })
    .await;
    let uid = ready.metadata.uid.clone().expect("uid");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    delete_for_good(&secrets, &format!("captf-inputs-c-{name}")).await;
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    let stuck = wait_until(&api, name, "the destroy cannot render", &manager, |t| {
        has(t, "ApplyJobSucceeded", "False", "DestroyFailed")
            && condition(t, "ApplyJobSucceeded")
                .is_some_and(|c| c.2.contains("durable inputs Secret is missing"))
    })
    .await;
    assert!(stuck.metadata.deletion_timestamp.is_some());
    assert_eq!(destroy_jobs(&client, &ns).await, 0, "no destroy Job");

    abandoned(
        &client,
        &ns,
        &manager,
        name,
        &uid,
        "durable inputs Secret is gone",
    )
    .await;
}

/// [`a_deletion_without_its_durable_inputs_starts_no_destroy_and_can_be_abandoned`] for a
/// TerraformMachine and a TerraformMachinePool: without their durable inputs neither starts a
/// destroy, each says why, and abandon by UID releases each.
#[tokio::test]
async fn a_machine_or_pool_without_its_durable_inputs_starts_no_destroy_and_can_be_abandoned() {
    use captf_api::names::{ObjectKey, WorkloadKind};
    use captf_api::{TerraformMachine, TerraformMachinePool};

    let (scene, cluster) = ready_cluster("inputs-gone-members").await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    let (machine, pool) = ("machine-0", "workers");
    write_bootstrap(client, ns, machine).await;
    write_bootstrap(client, ns, pool).await;
    create_machine(
        client,
        ns,
        &cluster,
        machine,
        "captf.local/modules/noop-machine:e2e",
        "",
        "",
    )
    .await;
    create_machine_pool(
        client,
        ns,
        &cluster,
        pool,
        "captf.local/modules/noop-machinepool:e2e",
        1,
        "",
    )
    .await;
    let machines: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);
    let pools: Api<TerraformMachinePool> = Api::namespaced(client.clone(), ns);
    let tm = wait_until(&machines, machine, "the machine Ready", manager, ready).await;
    let tmp = wait_until(&pools, pool, "the pool Ready", manager, ready).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    for (kind, name) in [
        (WorkloadKind::Machine, machine),
        (WorkloadKind::MachinePool, pool),
    ] {
        let key = ObjectKey::new(ns, kind, name).expect("key");
        delete_for_good(&secrets, &key.durable_inputs_secret()).await;
    }
    machines
        .delete(machine, &DeleteParams::default())
        .await
        .expect("delete the machine");
    pools
        .delete(pool, &DeleteParams::default())
        .await
        .expect("delete the pool");
    let cannot_render = |c: Option<(String, String, String)>| {
        c.is_some_and(|(s, r, m)| {
            s == "False" && r == "DestroyFailed" && m.contains("durable inputs Secret is missing")
        })
    };
    wait_until(
        &machines,
        machine,
        "the machine's destroy cannot render",
        manager,
        |t| cannot_render(condition(t, "ApplyJobSucceeded")),
    )
    .await;
    wait_until(
        &pools,
        pool,
        "the pool's destroy cannot render",
        manager,
        |t| cannot_render(condition(t, "ApplyJobSucceeded")),
    )
    .await;
    assert_eq!(destroy_jobs(client, ns).await, 0, "no destroy Job");

    let abandon = |uid: &str| serde_json::json!({"metadata": {"annotations": {"captf.io/abandon-infrastructure": uid}}});
    merge_patch(
        &machines,
        machine,
        abandon(&tm.metadata.uid.clone().expect("uid")),
    )
    .await;
    merge_patch(
        &pools,
        pool,
        abandon(&tmp.metadata.uid.clone().expect("uid")),
    )
    .await;
    wait_for("the machine and the pool released", TIMEOUT, || async {
        let gone =
            machines.get_opt(machine).await?.is_none() && pools.get_opt(pool).await?.is_none();
        Ok(gone.then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    assert_eq!(
        destroy_jobs(client, ns).await,
        0,
        "released without a destroy"
    );
}
