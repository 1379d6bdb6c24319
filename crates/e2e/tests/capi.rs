//! TerraformCluster, TerraformMachines and a TerraformMachinePool under the real Cluster API
//! core controllers: a Cluster with a MachineDeployment of three Machines on our
//! TerraformCluster and TerraformMachineTemplate, and a MachinePool of two on our pool. CAPI
//! clones the TerraformMachines; CAPTF provisions them, every Machine gets its providerID, the
//! MachinePool gets its members, and scaling the MachineDeployment to one destroys two.

use captf_api::TerraformMachine;
use captf_e2e::capi::CapiManager;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};

const MACHINE_IMAGE: &str = "captf.local/modules/noop-machine:e2e";
const POOL_IMAGE: &str = "captf.local/modules/noop-machinepool:e2e";
/// Several applies and destroys run one after the other through the test node.
const LONG: std::time::Duration = std::time::Duration::from_secs(420);

fn capi(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", kind),
        plural,
    )
}

#[tokio::test]
async fn machines_and_a_pool_on_captf_provision_and_scale_down() {
    let Scene {
        env,
        client,
        ns,
        manager,
    } = scene("capi", &[]).await;
    let capi_manager = CapiManager::start(&env, &client, &ns)
        .await
        .expect("capi-manager");
    let logs = || {
        format!(
            "manager log:\n{}\ncapi-manager log:\n{}",
            manager.log(),
            capi_manager.log()
        )
    };
    let cluster = "capi";
    apply_yaml_in(
        &client,
        &format!(
            r##"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformCluster
metadata: {{name: {cluster}, namespace: {ns}}}
spec:
  source: {{image: "{CLUSTER_IMAGE}"}}
  identityRef: {{name: noop-{ns}}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {{name: {cluster}, namespace: {ns}}}
spec:
  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: TerraformCluster, name: {cluster}}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformMachineTemplate
metadata: {{name: worker, namespace: {ns}}}
spec:
  template:
    spec:
      source: {{image: "{MACHINE_IMAGE}"}}
---
apiVersion: v1
kind: Secret
metadata: {{name: worker-bootstrap, namespace: {ns}}}
stringData: {{value: "#cloud-config\n", format: cloud-config}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {{name: workers, namespace: {ns}}}
spec:
  clusterName: {cluster}
  replicas: 3
  selector: {{matchLabels: {{pool: workers}}}}
  template:
    metadata: {{labels: {{pool: workers}}}}
    spec:
      clusterName: {cluster}
      version: v1.34.4
      bootstrap: {{dataSecretName: worker-bootstrap}}
      infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: TerraformMachineTemplate, name: worker}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformMachinePool
metadata: {{name: pool, namespace: {ns}}}
spec:
  source: {{image: "{POOL_IMAGE}"}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachinePool
metadata: {{name: pool, namespace: {ns}}}
spec:
  clusterName: {cluster}
  replicas: 2
  template:
    spec:
      clusterName: {cluster}
      version: v1.34.4
      bootstrap: {{dataSecretName: worker-bootstrap}}
      infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: TerraformMachinePool, name: pool}}
"##
        ),
    )
    .await;

    // CAPI sees the cluster's infrastructure provisioned and its endpoint.
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &capi("Cluster", "clusters"));
    wait_for("the Cluster's infrastructure provisioned", LONG, || async {
        let c = clusters.get(cluster).await?;
        let provisioned = c.data["status"]["initialization"]["infrastructureProvisioned"] == true;
        let endpoint = c.data["spec"]["controlPlaneEndpoint"]["host"].is_string();
        Ok((provisioned && endpoint).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));

    // Three Machines, each with its TerraformMachine's providerID and provisioned infrastructure.
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &capi("Machine", "machines"));
    let provisioned = |list: &[DynamicObject]| {
        list.iter()
            .filter(|m| {
                m.data["spec"]["providerID"].is_string()
                    && m.data["status"]["initialization"]["infrastructureProvisioned"] == true
            })
            .count()
    };
    let list = wait_for("three Machines provisioned", LONG, || async {
        let list = machines.list(&ListParams::default()).await?.items;
        Ok((list.len() == 3 && provisioned(&list) == 3).then_some(list))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    let tms: Api<TerraformMachine> = Api::namespaced(client.clone(), &ns);
    for machine in &list {
        let name = machine.metadata.name.clone().expect("name");
        let tm = tms
            .get(&name)
            .await
            .expect("a TerraformMachine per Machine");
        assert_eq!(
            machine.data["spec"]["providerID"].as_str(),
            Some(format!("noop:///{ns}/{name}").as_str())
        );
        assert_eq!(
            tm.spec.provider_id.as_deref(),
            machine.data["spec"]["providerID"].as_str()
        );
        assert!(ready(&tm), "{name}: {:?}", tm.status);
        assert!(
            tm.annotations()
                .contains_key("cluster.x-k8s.io/cloned-from-name"),
            "CAPI cloned it from the template"
        );
    }

    // The MachinePool on our pool: CAPI reads the pool's status.ready, then, once it reaches
    // the workload cluster (the test's own apiserver, through the kubeconfig Secret a control
    // plane provider would write), copies its providerIDList and replicas. No Node carries
    // those provider IDs, so CAPI leaves every Node alone.
    let kubeconfig = std::fs::read_to_string(env.kubeconfig()).expect("kubeconfig");
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "cluster.x-k8s.io/secret",
        "metadata": {
            "name": format!("{cluster}-kubeconfig"),
            "namespace": ns,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster},
        },
        "stringData": {"value": kubeconfig},
    });
    captf_e2e::apply_yaml(&client, &serde_json::to_string(&secret).expect("json"))
        .await
        .expect("the workload cluster's kubeconfig");
    let machine_pools: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &capi("MachinePool", "machinepools"));
    wait_for("the MachinePool with two members", TIMEOUT, || async {
        let mp = machine_pools.get("pool").await?;
        let provisioned = mp.data["status"]["initialization"]["infrastructureProvisioned"] == true;
        let members = mp.data["spec"]["providerIDList"]
            .as_array()
            .map_or(0, Vec::len);
        let replicas = mp.data["status"]["replicas"] == 2;
        Ok((provisioned && members == 2 && replicas).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));

    // Scale to one: CAPI deletes two Machines, CAPTF destroys their infrastructure.
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &capi("MachineDeployment", "machinedeployments"),
    );
    deployments
        .patch(
            "workers",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("scale the MachineDeployment");
    wait_for(
        "one Machine and one TerraformMachine left",
        LONG,
        || async {
            let machines = machines.list(&ListParams::default()).await?.items.len();
            let infra = tms.list(&ListParams::default()).await?.items.len();
            Ok((machines == 1 && infra == 1).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    // The Jobs went with their objects; the manager counted them.
    let metrics = captf_e2e::Manager::get(&manager.metrics).expect("metrics");
    let destroyed =
        "captf_jobs_total{kind=\"TerraformMachine\",op=\"destroy\",result=\"succeeded\"}";
    assert_eq!(
        sample(&metrics, destroyed),
        Some(2.0),
        "two destroys ran:\n{metrics}"
    );
}

/// Applies YAML in the test's namespace (objects name it themselves).
async fn apply_yaml_in(client: &kube::Client, yaml: &str) {
    captf_e2e::apply_yaml(client, yaml).await.expect("apply");
}
