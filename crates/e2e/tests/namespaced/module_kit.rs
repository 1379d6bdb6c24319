//! The module kit's examples (`modules/example/<role>`), built into images by the project's
//! recipe with the real `gavinbunney/kubectl` provider in their mirror, run as a user runs
//! them: the provider creates ConfigMaps in the namespace with the Job's ServiceAccount, which
//! a Role of the user's lets it. An edit made outside CAPTF is real drift: the drift check
//! reports it, and remediation puts the object back.

use captf_api::{TerraformCluster, TerraformMachine, TerraformMachinePool};
use captf_e2e::fixture::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};

const CLUSTER: &str = "captf.local/modules/example-cluster:e2e";
const MACHINE: &str = "captf.local/modules/example-machine:e2e";
const POOL: &str = "captf.local/modules/example-machinepool:e2e-terraform";

/// What docs/modules.md asks of the user: the Job's ServiceAccount may manage ConfigMaps here.
async fn grant_config_maps(client: &kube::Client, ns: &str) {
    captf_e2e::apply_yaml(
        client,
        &format!(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: example-modules, namespace: {ns}}}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: example-modules, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: example-modules}}
subjects:
- {{kind: ServiceAccount, name: captf-runner, namespace: {ns}}}
"#
        ),
    )
    .await
    .expect("the example's Role");
}

fn data(cm: &ConfigMap, key: &str) -> Option<String> {
    cm.data.as_ref()?.get(key).cloned()
}

#[tokio::test]
async fn the_example_modules_provision_and_their_drift_is_real() {
    let scene = scene("kit", &[]).await;
    let (client, ns) = (&scene.client, scene.ns.as_str());
    grant_config_maps(client, ns).await;
    let name = "kit";
    create_cluster(
        client,
        ns,
        name,
        CLUSTER,
        "  variables: {port: 6443}\n  drift: {intervalSeconds: 0, action: Report}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    let cluster = wait_until(
        &api,
        name,
        "the example cluster Ready",
        &scene.manager,
        ready,
    )
    .await;
    let endpoint = cluster
        .spec
        .control_plane_endpoint
        .clone()
        .expect("the module's endpoint");
    assert_eq!(
        (endpoint.host.as_deref(), endpoint.port),
        (
            Some(format!("example-lb-{name}.{ns}.svc").as_str()),
            Some(6443)
        )
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let lb = format!("example-lb-{name}");
    let made = config_maps.get(&lb).await.expect("the load balancer");
    assert_eq!(data(&made, "port").as_deref(), Some("6443"));
    assert_eq!(
        made.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("captf-managed-by"))
            .map(String::as_str),
        Some("captf"),
        "the tags as labels"
    );

    // A machine and a pool on the cluster's exports (the pool's image runs Terraform).
    write_bootstrap(client, ns, "kit-m").await;
    create_machine(client, ns, name, "kit-m", MACHINE, "", "").await;
    write_bootstrap(client, ns, "kit-p").await;
    create_machine_pool(client, ns, name, "kit-p", POOL, 2, "").await;
    let machines: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);
    let machine = wait_until(
        &machines,
        "kit-m",
        "the example machine Ready",
        &scene.manager,
        ready,
    )
    .await;
    assert_eq!(
        machine.spec.provider_id.as_deref(),
        Some(format!("example:///{ns}/kit-m").as_str())
    );
    let instance = config_maps
        .get("example-machine-kit-m")
        .await
        .expect("the machine's instance");
    assert_eq!(
        data(&instance, "load_balancer"),
        Some(lb.clone()),
        "the cluster's exports"
    );
    assert!(
        !format!("{:?}", instance.data).contains("cloud-config\\nruncmd"),
        "the bootstrap data itself is never written"
    );
    let pools: Api<TerraformMachinePool> = Api::namespaced(client.clone(), ns);
    let pool = wait_until(
        &pools,
        "kit-p",
        "the example pool Ready",
        &scene.manager,
        ready,
    )
    .await;
    assert_eq!(
        pool.spec.provider_id_list.as_ref().map(Vec::len),
        Some(2),
        "{:?}",
        pool.spec
    );
    for member in ["example-pool-kit-p-0", "example-pool-kit-p-1"] {
        config_maps.get(member).await.expect("a pool member");
    }

    // Drift made outside CAPTF: the check, run now with replan, reports the change.
    config_maps
        .patch(
            &lb,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"port": "1"}})),
        )
        .await
        .expect("edit the load balancer");
    captf_e2e::fixture::annotate(&api, name, captf_api::annotations::REPLAN, Some("drift-1")).await;
    let drifted = wait_until(&api, name, "the drift reported", &scene.manager, |t| {
        has(t, "DriftDetected", "True", "DriftReported")
    })
    .await;
    let (_, _, message) = condition(&drifted, "DriftDetected").expect("DriftDetected");
    assert!(message.contains("1 to update"), "{message}");
    assert_eq!(
        data(&config_maps.get(&lb).await.expect("lb"), "port").as_deref(),
        Some("1"),
        "Report leaves the object as it is"
    );

    // Remediate: the apply puts the object back.
    merge_patch(
        &api,
        name,
        serde_json::json!({"spec": {"drift": {"action": "Remediate"}}}),
    )
    .await;
    captf_testenv::wait_for("the load balancer put back", TIMEOUT, || async {
        let cm = config_maps.get(&lb).await?;
        Ok((data(&cm, "port").as_deref() == Some("6443")).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", scene.manager.log()));
}
