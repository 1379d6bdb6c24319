//! TerraformMachinePool through the real control plane, with a MachinePool made by hand as
//! CAPI would make it: the pool applies its MachinePool's replicas and reports its members,
//! re-applies when the replicas or the cluster's exports change (the latter guarded), writes
//! the module's count back while the autoscaler's annotations are set, and is destroyed on
//! delete. A destructive exports change is held while the pool applies its other changes.

use captf_api::names::{ObjectKey, WorkloadKind};
use captf_api::{TerraformCluster, TerraformMachinePool};
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};

const POOL_IMAGE: &str = "captf.local/modules/noop-machinepool:e2e";

fn members(pool: &TerraformMachinePool) -> usize {
    pool.spec.provider_id_list.as_ref().map_or(0, Vec::len)
}

fn replicas(pool: &TerraformMachinePool) -> Option<i32> {
    pool.status.as_ref().and_then(|s| s.replicas)
}

/// A Ready cluster (named for `prefix`) with the pool `name` of `replicas` on it, its bootstrap
/// data written; `extra` adds lines to the pool's spec.
async fn pool_scene(
    prefix: &str,
    name: &str,
    replicas: i32,
    extra: &str,
) -> (Scene, String, Api<TerraformMachinePool>) {
    let (scene, cluster) = ready_cluster(prefix).await;
    write_bootstrap(&scene.client, &scene.ns, name).await;
    create_machine_pool(
        &scene.client,
        &scene.ns,
        &cluster,
        name,
        POOL_IMAGE,
        replicas,
        extra,
    )
    .await;
    let api = Api::namespaced(scene.client.clone(), &scene.ns);
    (scene, cluster, api)
}

#[tokio::test]
async fn a_pool_follows_its_machinepool_and_the_cluster_exports() {
    let name = "workers";
    let (scene, cluster, api) = pool_scene("pool", name, 2, "").await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    let pool = wait_until(
        &api,
        name,
        "the pool Ready with two members",
        manager,
        |p| ready(p) && members(p) == 2,
    )
    .await;
    let status = pool.status.clone().expect("status");
    assert_eq!(status.replicas, Some(2));
    assert_eq!(
        status.ready,
        Some(true),
        "status.ready is what CAPI's MachinePool reads"
    );
    assert_eq!(
        status.workspace.initialization.and_then(|i| i.provisioned),
        Some(true)
    );
    assert_eq!(
        pool.spec.provider_id_list,
        Some(vec![
            format!("noop:///{ns}/{name}/0"),
            format!("noop:///{ns}/{name}/1")
        ])
    );
    assert_eq!(status.instances.map(|i| i.len()), Some(2));
    assert!(has(
        &pool,
        "AutoscalingActive",
        "False",
        "AutoscalingDisabled"
    ));

    // Fixed mode: the MachinePool's replicas are applied.
    let machine_pools: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &capi_machine_pool_resource());
    machine_pools
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scale the MachinePool");
    wait_until(&api, name, "three members", manager, |p| {
        members(p) == 3 && replicas(p) == Some(3)
    })
    .await;

    // A change of the cluster's exports re-applies the pool, guarded against deletes (this
    // one only updates the group in place, so the guard lets it through).
    let clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    merge_patch(
        &clusters,
        &cluster,
        serde_json::json!({"spec": {"variables": {"extra_exports": {"tier": "gold"}}}}),
    )
    .await;
    let prefix = format!("captf-mp-{name}-apply-");
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), ns);
    let guarded = wait_for(
        "a guarded pool apply for the new exports",
        TIMEOUT,
        || async {
            let list = jobs.list(&Default::default()).await?.items;
            Ok(list.into_iter().find(|j| {
                j.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(&prefix))
                    && j.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key("captf.io/approval-hash"))
            }))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    assert!(
        guarded
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("captf.io/cluster-outputs-hash")
    );
    wait_until(&api, name, "Ready after the exports change", manager, |p| {
        ready(p) && has(p, "ApplyJobSucceeded", "True", "ApplySucceeded")
    })
    .await;

    // Autoscaling: the module's count is written back to the MachinePool.
    machine_pools
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"metadata": {"annotations": {
                "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "1",
                "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "5",
            }}})),
        )
        .await
        .expect("annotate the MachinePool");
    // The cloud scales the group out of band; the module reports four members.
    merge_patch_pool(
        &api,
        name,
        serde_json::json!({"spec": {"variables": {"observed_replicas": 4}}}),
    )
    .await;
    wait_until(
        &api,
        name,
        "AutoscalingActive with four members",
        manager,
        |p| {
            has(p, "AutoscalingActive", "True", "ReplicasManagedByModule") && replicas(p) == Some(4)
        },
    )
    .await;
    wait_for(
        "MachinePool spec.replicas written back",
        TIMEOUT,
        || async {
            let mp = machine_pools.get(name).await?;
            let claimed = mp
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("cluster.x-k8s.io/replicas-managed-by"))
                .is_some_and(|v| v == "captf");
            Ok((claimed && mp.data["spec"]["replicas"] == 4).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));

    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete the TerraformMachinePool");
    wait_for("the TerraformMachinePool gone", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let metrics = captf_e2e::Manager::get(&manager.metrics).expect("metrics");
    let destroyed =
        "captf_jobs_total{kind=\"TerraformMachinePool\",op=\"destroy\",result=\"succeeded\"}";
    assert_eq!(
        sample(&metrics, destroyed),
        Some(1.0),
        "destroyed:\n{metrics}"
    );
}

async fn merge_patch_pool(api: &Api<TerraformMachinePool>, name: &str, patch: serde_json::Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch the TerraformMachinePool");
}

/// Sets (or with `None` removes) the pool's `captf.io/approve-destructive-plan`.
async fn set_approval(api: &Api<TerraformMachinePool>, name: &str, hash: Option<&str>) {
    merge_patch_pool(
        api,
        name,
        serde_json::json!({"metadata": {"annotations": {
            "captf.io/approve-destructive-plan": hash,
        }}}),
    )
    .await;
}

/// A pool's apply Job deleted while it runs is noticed as for a cluster: recorded on the
/// durable inputs and run again under a new name, marked as following the lost one.
#[tokio::test]
async fn a_pool_apply_deleted_mid_run_runs_again() {
    let name = "slow";
    let (scene, _, api) =
        pool_scene("pool-lost", name, 1, "  variables: {sleep_seconds: 120}").await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    delete_apply_mid_run(&api, client, name, manager, |p| {
        p.status.as_ref().map(|s| &s.workspace)
    })
    .await;
    event(client, ns, "JobFailed").await;
}

/// The pool's durable inputs Secret.
async fn durable_inputs(client: &kube::Client, ns: &str, name: &str) -> Secret {
    let key = ObjectKey::new(ns, WorkloadKind::MachinePool, name).expect("key");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .get(&key.durable_inputs_secret())
        .await
        .expect("durable inputs")
}

fn annotation(secret: &Secret, key: &str) -> Option<String> {
    secret.metadata.annotations.as_ref()?.get(key).cloned()
}

/// The pending (blocked) exports change recorded on the durable inputs, once there is one
/// whose approval hash differs from `not`.
async fn pending_change(
    client: &kube::Client,
    ns: &str,
    name: &str,
    not: Option<&str>,
    manager: &captf_e2e::Manager,
) -> serde_json::Value {
    wait_for("a pending exports change", TIMEOUT, || async {
        let secret = durable_inputs(client, ns, name).await;
        Ok(annotation(&secret, "captf.io/pending-cluster-outputs")
            .and_then(|p| serde_json::from_str::<serde_json::Value>(&p).ok())
            .filter(|p| p["approvalHash"].as_str() != not))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()))
}

fn blocked_held(pool: &TerraformMachinePool) -> bool {
    condition(pool, "ApplyJobSucceeded").is_some_and(|(s, r, m)| {
        s == "False" && r == "DestructivePlanBlocked" && m.contains("the change is held")
    })
}

/// A destructive change of the cluster's exports is held: the pool goes on applying its other
/// changes (a bootstrap rotation, a replica change) with the exports of its last successful
/// apply, reports the change as blocked until it is approved, and applies it once approved. A
/// change withdrawn before its approval is forgotten.
#[tokio::test]
async fn a_blocked_exports_change_is_held_until_approved() {
    let name = "held";
    let (scene, cluster, api) = pool_scene(
        "pool-held",
        name,
        1,
        "  variables: {replace_on_exports: true}\n  drift: {intervalSeconds: 20, action: Report}",
    )
    .await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    wait_until(&api, name, "the pool Ready with one member", manager, |p| {
        ready(p) && members(p) == 1
    })
    .await;
    let applied = wait_for("the applied exports recorded", TIMEOUT, || async {
        let secret = durable_inputs(client, ns, name).await;
        let recorded = secret
            .data
            .as_ref()
            .is_some_and(|d| d.contains_key("applied-cluster-outputs.json"));
        Ok(annotation(&secret, "captf.io/applied-cluster-outputs-hash").filter(|_| recorded))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));

    // The exports change would replace terraform_data.exports[0]: blocked, then held.
    let clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    merge_patch(
        &clusters,
        &cluster,
        serde_json::json!({"spec": {"variables": {"extra_exports": {"tier": "gold"}}}}),
    )
    .await;
    let pool = wait_until(&api, name, "the exports change held", manager, blocked_held).await;
    let pending = pending_change(client, ns, name, None, manager).await;
    let approval = pending["approvalHash"]
        .as_str()
        .expect("approvalHash")
        .to_owned();
    let (_, _, message) = condition(&pool, "ApplyJobSucceeded").expect("condition");
    assert!(message.contains("terraform_data.exports[0]"), "{message}");
    assert!(
        message.contains(&format!("captf.io/approve-destructive-plan={approval}")),
        "{message}"
    );
    assert!(!ready(&pool), "a held change keeps the pool not Ready");
    event(client, ns, "DestructivePlanBlocked").await;

    // A bootstrap rotation applies with the held exports; the change stays blocked.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .patch(
            &format!("{name}-bootstrap"),
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"stringData": {
                "value": "#cloud-config\nruncmd: [\"echo rotated\"]\n",
            }})),
        )
        .await
        .expect("rotate the bootstrap data");
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let prefix = format!("captf-mp-{name}-apply-");
    let held = wait_for("a held apply that succeeded", TIMEOUT, || async {
        let list = jobs.list(&Default::default()).await?.items;
        Ok(list.into_iter().find(|j| {
            j.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&prefix))
                && j.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.get("captf.io/held-cluster-outputs") == Some(&approval))
                && j.status.as_ref().and_then(|s| s.succeeded) == Some(1)
        }))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let held_annotations = held.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        held_annotations.get("captf.io/cluster-outputs-hash"),
        Some(&applied),
        "a held apply renders the applied exports"
    );
    assert!(
        !held_annotations.contains_key("captf.io/approval-hash"),
        "a held apply is not guarded"
    );
    let held_name = held.metadata.name.clone().expect("name");
    wait_until(
        &api,
        name,
        "still blocked after the held apply",
        manager,
        |p| {
            blocked_held(p)
                && condition(p, "ApplyJobSucceeded").is_some_and(|(_, _, m)| m.contains(&held_name))
        },
    )
    .await;
    let secret = durable_inputs(client, ns, name).await;
    assert_eq!(
        annotation(&secret, "captf.io/applied-cluster-outputs-hash"),
        Some(applied.clone())
    );
    // Drift checks render the held exports: the pending change is not drift.
    let since = pool
        .status
        .as_ref()
        .and_then(|s| s.workspace.last_drift_check.clone());
    wait_until(
        &api,
        name,
        "a drift check while held finds no drift",
        manager,
        |p| {
            let checked = p
                .status
                .as_ref()
                .and_then(|s| s.workspace.last_drift_check.clone());
            checked.is_some()
                && checked != since
                && has(p, "DriftDetected", "False", "NoDrift")
                && blocked_held(p)
        },
    )
    .await;

    // A replica change moves the approval hash: the change is guarded afresh, blocked again,
    // and the replicas are applied with the held exports.
    let machine_pools: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &capi_machine_pool_resource());
    machine_pools
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("scale the MachinePool");
    let pending = pending_change(client, ns, name, Some(&approval), manager).await;
    let approval = pending["approvalHash"]
        .as_str()
        .expect("approvalHash")
        .to_owned();
    wait_until(&api, name, "two members, still held", manager, |p| {
        members(p) == 2 && blocked_held(p)
    })
    .await;

    // Approved: the change applies, is recorded, and the approval is used up.
    set_approval(&api, name, Some(&approval)).await;
    let pool = wait_until(&api, name, "Ready with the change applied", manager, |p| {
        ready(p) && has(p, "ApplyJobSucceeded", "True", "ApplySucceeded")
    })
    .await;
    assert_eq!(members(&pool), 2);
    let secret = wait_for("the new exports recorded", TIMEOUT, || async {
        let secret = durable_inputs(client, ns, name).await;
        let moved = annotation(&secret, "captf.io/applied-cluster-outputs-hash")
            .is_some_and(|h| h != applied && Some(h.as_str()) == pending["exportsHash"].as_str());
        let cleared = annotation(&secret, "captf.io/pending-cluster-outputs").is_none();
        Ok((moved && cleared).then_some(secret))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let record = secret
        .data
        .as_ref()
        .and_then(|d| d.get("applied-cluster-outputs.json"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default();
    assert!(record.contains("gold"), "{record}");
    wait_until(&api, name, "the approval removed", manager, |p| {
        !p.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("captf.io/approve-destructive-plan"))
    })
    .await;

    // Withdrawn: a new change blocks, then the exports return to those applied.
    merge_patch(
        &clusters,
        &cluster,
        serde_json::json!({"spec": {"variables": {"extra_exports": {"tier": "platinum"}}}}),
    )
    .await;
    let pending = pending_change(client, ns, name, Some(&approval), manager).await;
    let blocked_job = pending["job"].as_str().expect("job").to_owned();
    wait_until(&api, name, "the second change held", manager, blocked_held).await;
    merge_patch(
        &clusters,
        &cluster,
        serde_json::json!({"spec": {"variables": {"extra_exports": {"tier": "gold"}}}}),
    )
    .await;
    let pool = wait_until(&api, name, "the change withdrawn", manager, |p| {
        ready(p)
            && condition(p, "ApplyJobSucceeded").is_some_and(|(s, r, m)| {
                s == "True" && r == "ApplySucceeded" && m.contains("withdrawn")
            })
    })
    .await;
    let (_, _, message) = condition(&pool, "ApplyJobSucceeded").expect("condition");
    assert!(message.contains(&blocked_job), "{message}");
    let secret = durable_inputs(client, ns, name).await;
    assert_eq!(
        annotation(&secret, "captf.io/pending-cluster-outputs"),
        None
    );
}

/// An approved exports change whose apply fails may be partly applied: recorded as such, the
/// pool holds nothing any more, and every apply is guarded by its own approval hash (here, the
/// retry is blocked and waits) until one succeeds.
#[tokio::test]
async fn a_failed_exports_change_guards_every_apply() {
    let name = "partial";
    let (scene, cluster, api) = pool_scene(
        "pool-partial",
        name,
        1,
        "  variables: {replace_on_exports: true}",
    )
    .await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    wait_until(&api, name, "the pool Ready", manager, ready).await;

    // The new exports make the pool's apply fail after it got past the guard.
    let clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    merge_patch(
        &clusters,
        &cluster,
        serde_json::json!({"spec": {"variables": {"extra_exports": {"fail_pool_apply": true}}}}),
    )
    .await;
    wait_until(&api, name, "the exports change held", manager, blocked_held).await;
    let pending = pending_change(client, ns, name, None, manager).await;
    let approval = pending["approvalHash"]
        .as_str()
        .expect("approvalHash")
        .to_owned();
    set_approval(&api, name, Some(&approval)).await;
    let partial = wait_for("the change recorded as partly applied", TIMEOUT, || async {
        let secret = durable_inputs(client, ns, name).await;
        Ok(annotation(&secret, "captf.io/partial-cluster-outputs")
            .and_then(|p| serde_json::from_str::<serde_json::Value>(&p).ok()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let failed = partial["job"].as_str().expect("job").to_owned();
    assert_eq!(partial["exportsHash"], pending["exportsHash"]);
    wait_until(&api, name, "the failure reported", manager, |p| {
        has(p, "ApplyJobSucceeded", "False", "ApplyFailed")
    })
    .await;
    set_approval(&api, name, None).await;

    // Without the approval the retry is guarded, not held, and is blocked: the pool waits.
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let prefix = format!("captf-mp-{name}-apply-");
    let retry = wait_for("a guarded retry after the failure", TIMEOUT, || async {
        let list = jobs.list(&Default::default()).await?.items;
        let after = list
            .iter()
            .position(|j| j.metadata.name.as_deref() == Some(failed.as_str()));
        Ok(after.and_then(|i| {
            list[i + 1..]
                .iter()
                .find(|j| {
                    j.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(&prefix))
                        && j.metadata
                            .annotations
                            .as_ref()
                            .is_some_and(|a| a.get("captf.io/approval-hash") == Some(&approval))
                })
                .cloned()
        }))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let retry_annotations = retry.metadata.annotations.unwrap_or_default();
    assert!(
        !retry_annotations.contains_key("captf.io/held-cluster-outputs"),
        "a partly applied change holds nothing: {retry_annotations:?}"
    );
    let pool = wait_until(&api, name, "the retry blocked, not held", manager, |p| {
        condition(p, "ApplyJobSucceeded").is_some_and(|(s, r, m)| {
            s == "False" && r == "DestructivePlanBlocked" && !m.contains("the change is held")
        })
    })
    .await;
    assert!(!ready(&pool));
    let secret = durable_inputs(client, ns, name).await;
    assert!(annotation(&secret, "captf.io/partial-cluster-outputs").is_some());
}
