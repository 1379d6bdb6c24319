//! An owner reference counts only when the owner names the object back (spec operations,
//! "Owner back-reference checks"; seed 002): a TerraformMachine whose Machine does not name it
//! in `spec.infrastructureRef`, or whose `cluster.x-k8s.io/cluster-name` label is not its
//! Machine's cluster, reads `DependenciesReady=False/OwnerMismatch` (the message names the
//! check, docs/reference/conditions.md) and runs nothing: no Job, no Secret of its own, nothing
//! written to the Machine. A machine of the same cluster that checks out applies beside them.

use captf_api::TerraformMachine;
use captf_e2e::apply_yaml;
use captf_e2e::fixture::*;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams};

/// A TerraformMachine `name` that claims the Machine `machine` (by its real UID) as its
/// owner, labelled with cluster `label`.
async fn claim(client: &kube::Client, ns: &str, name: &str, machine: &str, label: &str) {
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &capi_machine_resource());
    let uid = machines
        .get(machine)
        .await
        .expect("Machine")
        .metadata
        .uid
        .expect("uid");
    apply_yaml(
        client,
        &format!(
            r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformMachine
metadata:
  name: {name}
  namespace: {ns}
  labels: {{cluster.x-k8s.io/cluster-name: {label}}}
  ownerReferences:
  - {{apiVersion: cluster.x-k8s.io/v1beta2, kind: Machine, name: {machine}, uid: {uid}}}
spec:
  source: {{image: "{}"}}
"#,
            OPENTOFU.image("machine")
        ),
    )
    .await
    .expect("TerraformMachine");
}

/// A CAPI Machine `name` of `cluster` naming the TerraformMachine `name`, with no
/// TerraformMachine made for it.
async fn machine(client: &kube::Client, ns: &str, cluster: &str, name: &str) {
    apply_yaml(
        client,
        &format!(
            r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: {name}
  namespace: {ns}
  labels: {{cluster.x-k8s.io/cluster-name: {cluster}}}
spec:
  clusterName: {cluster}
  bootstrap: {{dataSecretName: {name}-bootstrap}}
  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: TerraformMachine, name: {name}}}
"#
        ),
    )
    .await
    .expect("Machine");
}

fn resource_version(o: &DynamicObject) -> String {
    o.metadata
        .resource_version
        .clone()
        .expect("resourceVersion")
}

#[tokio::test]
async fn an_owner_that_does_not_name_the_machine_back_runs_nothing() {
    let (scene, cluster) = ready_cluster("owner-mismatch").await;
    let (client, ns, manager) = (&scene.client, scene.ns.as_str(), &scene.manager);
    // The honest machine, and a TerraformMachine that claims its Machine.
    write_bootstrap(client, ns, "honest").await;
    create_machine(
        client,
        ns,
        &cluster,
        "honest",
        &OPENTOFU.image("machine"),
        "",
        "",
    )
    .await;
    claim(client, ns, "forged", "honest", &cluster).await;
    // A Machine that names its TerraformMachine, which says it is of another cluster.
    write_bootstrap(client, ns, "mislabelled").await;
    machine(client, ns, &cluster, "mislabelled").await;
    claim(client, ns, "mislabelled", "mislabelled", "elsewhere").await;

    let api: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &capi_machine_resource());
    let cases = [
        (
            "forged",
            "Machine honest spec.infrastructureRef does not name this TerraformMachine",
        ),
        (
            "mislabelled",
            "the cluster.x-k8s.io/cluster-name label elsewhere does not match Machine mislabelled",
        ),
    ];
    for (name, check) in cases {
        let tm = wait_until(&api, name, "OwnerMismatch", manager, |t| {
            has(t, "DependenciesReady", "False", "OwnerMismatch")
        })
        .await;
        let (_, _, message) = condition(&tm, "DependenciesReady").expect("DependenciesReady");
        assert!(message.contains(check), "{name}: {message}");
    }
    let mislabelled_version =
        resource_version(&machines.get("mislabelled").await.expect("Machine"));

    // The honest machine applies: Jobs do run here.
    wait_until(&api, "honest", "the honest machine Ready", manager, ready).await;
    let honest_version = resource_version(&machines.get("honest").await.expect("Machine"));

    // Three passes of each (a spec change each, seen in status.observedGeneration), and
    // still nothing runs for either.
    for (name, _) in cases {
        for n in 0..3 {
            let change = serde_json::json!({"spec": {"variables": {"poke": n}}});
            merge_patch(&api, name, change).await;
            let generation = api.get(name).await.expect("get").metadata.generation;
            let tm = wait_until(&api, name, "a pass of the new generation", manager, |t| {
                t.status
                    .as_ref()
                    .and_then(|s| s.workspace.observed_generation)
                    == generation
            })
            .await;
            assert!(
                has(&tm, "DependenciesReady", "False", "OwnerMismatch"),
                "{name}: {:?}",
                condition(&tm, "DependenciesReady")
            );
            let workspace = tm.status.as_ref().map(|s| &s.workspace);
            assert!(
                workspace.and_then(|w| w.active_job.as_ref()).is_none(),
                "{name}: a Job is active"
            );
        }
    }
    let jobs = job_names(client, ns).await;
    for (name, _) in cases {
        assert!(
            !jobs
                .iter()
                .any(|j| j.starts_with(&format!("captf-m-{name}-"))),
            "{name}: {jobs:?}"
        );
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        let own = secrets
            .list(&ListParams::default().labels(&format!(
                "{}=TerraformMachine,{}={name}",
                captf_api::labels::OWNER_KIND,
                captf_api::labels::OWNER_NAME
            )))
            .await
            .expect("Secrets")
            .items;
        assert!(own.is_empty(), "{name}: Secrets of its own were written");
    }
    // Nothing written to the Machines the forged references name.
    assert_eq!(
        resource_version(&machines.get("honest").await.expect("Machine")),
        honest_version
    );
    assert_eq!(
        resource_version(&machines.get("mislabelled").await.expect("Machine")),
        mislabelled_version
    );
}
