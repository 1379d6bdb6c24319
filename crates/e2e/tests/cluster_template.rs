//! The templates of `templates/` as a Cluster API user takes them: the real `clusterctl
//! generate` fills their variables, the YAML is applied, and the real core and kubeadm
//! controllers run beside CAPTF in the test namespace.
//!
//! `cluster-template.yaml` (MachineDeployments, no control-plane provider):
//! What a real node would need no fake for, happens: the TerraformCluster is provisioned, the
//! kubeadm provider writes the control-plane Machine's init data, and CAPTF provisions that
//! Machine from its TerraformMachineTemplate. The workers and the pool join a control plane
//! that must answer first (kubeadm waits for a Node of the control-plane Machine, which only a
//! booted machine registers), so their bootstrap data never comes: CAPTF says
//! `WaitingForBootstrapData` and starts nothing for them. Deleting the Cluster then destroys
//! what was provisioned.

use captf_api::{TerraformCluster, TerraformMachine, TerraformMachinePool};
use captf_e2e::capi::{CapiManager, Controllers};
use captf_e2e::fixture::*;
use captf_e2e::templates::*;
use captf_testenv::wait_for;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};

#[tokio::test]
async fn the_cluster_template_generates_and_provisions_under_cluster_api() {
    let Scene {
        env,
        client,
        ns,
        manager,
    } = scene("template", &[]).await;
    let core = CapiManager::start(&env, &client, &ns)
        .await
        .expect("capi-manager");
    let kubeadm = CapiManager::run(Controllers::KubeadmBootstrap, &env, &client, &ns, &[])
        .await
        .expect("capi-kubeadm-bootstrap-manager");
    let logs = || {
        format!(
            "manager log:\n{}\ncapi-manager log:\n{}\nkubeadm bootstrap log:\n{}",
            manager.log(),
            core.log(),
            kubeadm.log()
        )
    };
    let name = "tmpl";
    let yaml = generate(&env, &ns, name, "cluster-template.yaml");
    captf_e2e::apply_yaml(&client, &yaml)
        .await
        .unwrap_or_else(|e| panic!("apply the generated cluster: {e:#}\n{}", logs()));

    // The cluster's infrastructure, from the TerraformCluster the template names.
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &capi("cluster.x-k8s.io", "Cluster", "clusters"),
    );
    wait_for("the Cluster's infrastructure provisioned", LONG, || async {
        let c = clusters.get(name).await?;
        let provisioned = c.data["status"]["initialization"]["infrastructureProvisioned"] == true;
        let endpoint = c.data["spec"]["controlPlaneEndpoint"]["host"].is_string();
        Ok((provisioned && endpoint).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    let tcs: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    assert!(ready(&tcs.get(name).await.expect("TerraformCluster")));

    // The control-plane Machine: kubeadm init data from the real bootstrap provider, then its
    // TerraformMachine, cloned from the control-plane template, provisioned by CAPTF.
    let machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &capi("cluster.x-k8s.io", "Machine", "machines"),
    );
    let control_plane = provisioned_control_plane(&machines, logs).await;
    let cp_name = control_plane.name_any();
    let tms: Api<TerraformMachine> = Api::namespaced(client.clone(), &ns);
    let tm = tms
        .get(&cp_name)
        .await
        .expect("the control plane's TerraformMachine");
    assert!(ready(&tm), "{cp_name}: {:?}", tm.status);
    assert_eq!(
        tm.annotations()
            .get("cluster.x-k8s.io/cloned-from-name")
            .map(String::as_str),
        Some(format!("{name}-control-plane").as_str())
    );
    assert_eq!(
        tm.spec.provider_id.as_deref(),
        control_plane.data["spec"]["providerID"].as_str()
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    let data = secrets
        .get(
            control_plane.data["spec"]["bootstrap"]["dataSecretName"]
                .as_str()
                .expect("data secret"),
        )
        .await
        .expect("bootstrap data");
    let value = data
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .expect("value");
    assert!(
        String::from_utf8_lossy(&value.0).contains("kubeadm init"),
        "the first control-plane Machine runs kubeadm init"
    );

    // The worker and the pool wait for kubeadm join data, which needs the control plane's Node:
    // CAPTF says so and starts nothing for them.
    let workers =
        ListParams::default().labels(&format!("cluster.x-k8s.io/deployment-name={name}-md-0"));
    let worker = wait_for("the worker's TerraformMachine waiting", LONG, || async {
        let Some(machine) = machines.list(&workers).await?.items.pop() else {
            return Ok(None);
        };
        let tm = tms.get_opt(&machine.name_any()).await?;
        Ok(tm.filter(|t| has(t, "DependenciesReady", "Unknown", "WaitingForBootstrapData")))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    assert_eq!(
        worker
            .annotations()
            .get("cluster.x-k8s.io/cloned-from-name")
            .map(String::as_str),
        Some(format!("{name}-md-0").as_str())
    );
    // The control plane is the one Machine asked for: nothing rolls it.
    let all: Vec<String> = machines
        .list(&ListParams::default())
        .await
        .expect("Machines")
        .items
        .iter()
        .map(|m| {
            format!(
                "{} {:?}",
                m.name_any(),
                m.labels().get("cluster.x-k8s.io/deployment-name")
            )
        })
        .collect();
    let control_planes = machines
        .list(&ListParams::default().labels(CONTROL_PLANE))
        .await
        .expect("Machines")
        .items;
    assert_eq!(
        control_planes.len(),
        1,
        "one control-plane Machine: {all:?}\n{}",
        logs()
    );
    let pools: Api<TerraformMachinePool> = Api::namespaced(client.clone(), &ns);
    let pool = pools
        .get(&format!("{name}-mp-0"))
        .await
        .expect("the TerraformMachinePool");
    assert_eq!(pool.spec.workspace.source.image, POOL_IMAGE);
    let jobs = job_names(&client, &ns).await;
    assert!(
        !jobs
            .iter()
            .any(|j| j.contains(&worker.name_any()) || j.contains("-mp-0")),
        "nothing runs for what has no bootstrap data: {jobs:?}"
    );

    // Deleting the Cluster takes everything with it; CAPTF destroys what it provisioned.
    delete_and_wait_destroyed(&client, &ns, name, logs).await;
}
