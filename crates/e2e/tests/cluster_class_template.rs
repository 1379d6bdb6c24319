//! `templates/clusterclass-terraform.yaml` with `cluster-template-topology.yaml` as a Cluster API
//! user takes them: the real `clusterctl generate` fills their variables, and the real core
//! (topology), kubeadm control plane and bootstrap controllers run beside CAPTF. The topology
//! controller clones the class's templates with the Cluster's identity, the kubeadm control
//! plane creates its first Machine on the class's TerraformMachineTemplate, and CAPTF
//! provisions both; deleting the Cluster destroys them. (A test binary of its own: the Cluster
//! API managers watch every namespace, so no other test may run its own beside them.)

use captf_api::{TerraformCluster, TerraformMachine, TerraformMachineTemplate};
use captf_e2e::capi::{CapiManager, Controllers};
use captf_e2e::fixture::*;
use captf_e2e::templates::*;
use captf_testenv::wait_for;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};

#[tokio::test]
async fn the_cluster_class_template_provisions_a_topology_cluster() {
    let (env, client, ns) = namespace_with_identity("classtmpl").await;
    let kubeconfig = captf_e2e::manager_kubeconfig(&env, &client)
        .await
        .expect("RBAC");
    let (manager, _registered) =
        captf_e2e::webhooks::manager_with_webhooks(&env, &client, &kubeconfig, &ns, &[]).await;
    let core = CapiManager::start_with(
        &env,
        &client,
        &ns,
        &["--feature-gates=ClusterTopology=true"],
    )
    .await
    .expect("capi-manager");
    let bootstrap = CapiManager::run(Controllers::KubeadmBootstrap, &env, &client, &ns, &[])
        .await
        .expect("capi-kubeadm-bootstrap-manager");
    let control_plane = CapiManager::run(
        Controllers::KubeadmControlPlane,
        &env,
        &client,
        &ns,
        &["--feature-gates=ClusterTopology=true"],
    )
    .await
    .expect("capi-kubeadm-control-plane-manager");
    let logs = || {
        format!(
            "manager log:\n{}\ncapi-manager log:\n{}\nkubeadm bootstrap log:\n{}\nkubeadm control plane log:\n{}",
            manager.log(),
            core.log(),
            bootstrap.log(),
            control_plane.log()
        )
    };

    // The class and its templates, then a Cluster of it. CAPI's webhooks refuse a topology
    // until the class's variables are reconciled: apply until admitted.
    // `generate yaml` takes no namespace: kubectl apply -n would give each object the one.
    let class = in_namespace(
        &clusterctl_generate(&ns, &["yaml"], "clusterclass-terraform.yaml"),
        &ns,
    );
    captf_e2e::apply_yaml(&client, &class)
        .await
        .unwrap_or_else(|e| panic!("apply the class: {e:#}\n{}", logs()));
    let name = "topo";
    let cluster = generate(&env, &ns, name, "cluster-template-topology.yaml");
    wait_for("CAPI to admit the topology Cluster", TIMEOUT, || async {
        Ok(captf_e2e::apply_yaml(&client, &cluster).await.ok())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));

    // The TerraformCluster, cloned from the class's template with the Cluster's identity.
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &capi("cluster.x-k8s.io", "Cluster", "clusters"),
    );
    wait_for("the Cluster's infrastructure provisioned", LONG, || async {
        let c = clusters.get(name).await?;
        let provisioned = c.data["status"]["initialization"]["infrastructureProvisioned"] == true;
        Ok(provisioned.then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    let tcs: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let owned = ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={name}"));
    let tc = tcs
        .list(&owned)
        .await
        .expect("TerraformClusters")
        .items
        .pop()
        .expect("the cloned TerraformCluster");
    assert!(ready(&tc), "{:?}", tc.status);
    assert_eq!(
        tc.spec
            .workspace
            .identity_ref
            .as_ref()
            .map(|i| i.name.as_str()),
        Some(format!("noop-{ns}").as_str())
    );
    assert_eq!(
        tc.annotations()
            .get("cluster.x-k8s.io/cloned-from-name")
            .map(String::as_str),
        Some("terraform-cluster")
    );

    // The kubeadm control plane's first Machine: init data, then its TerraformMachine,
    // cloned from the class's control-plane template, provisioned by CAPTF.
    let machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &capi("cluster.x-k8s.io", "Machine", "machines"),
    );
    let first = provisioned_control_plane(&machines, logs).await;
    let tms: Api<TerraformMachine> = Api::namespaced(client.clone(), &ns);
    let tm = tms
        .get(&first.name_any())
        .await
        .expect("the control plane's TerraformMachine");
    assert!(ready(&tm), "{:?}", tm.status);
    // Cloned from the Cluster's copy of the class's control-plane template.
    let from = tm
        .annotations()
        .get("cluster.x-k8s.io/cloned-from-name")
        .cloned()
        .expect("cloned from a template");
    let templates: Api<TerraformMachineTemplate> = Api::namespaced(client.clone(), &ns);
    let copy = templates.get(&from).await.expect("the Cluster's template");
    assert_eq!(
        copy.annotations()
            .get("cluster.x-k8s.io/cloned-from-name")
            .map(String::as_str),
        Some("terraform-control-plane")
    );

    // Deleting the Cluster takes everything with it; CAPTF destroys what it provisioned.
    delete_and_wait_destroyed(&client, &ns, name, logs).await;
}
