//! The orphan sweep (operations.md §8.5): a namespace that holds no TerraformCluster,
//! TerraformMachine or TerraformMachinePool loses what CAPTF made there for Jobs (labelled
//! `captf.io/managed=true`: the runner ServiceAccount and RoleBinding, Leases), as a
//! `clusterctl move` source namespace keeps them; a namespace with an object keeps its own, and
//! nothing unlabelled is touched.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use captf_e2e::{Manager, apply_yaml, manager_kubeconfig};
use captf_testenv::wait_for;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::Api;

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

/// What `clusterctl move` leaves in its source namespace: the runner's ServiceAccount and
/// RoleBinding and a run Lease, all managed, next to an account of the user's own.
fn leftovers(ns: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: captf-runner, namespace: {ns}, labels: {{captf.io/managed: "true"}}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: users-own, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: captf-runner, namespace: {ns}, labels: {{captf.io/managed: "true"}}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: captf-runner}}
subjects: [{{kind: ServiceAccount, name: captf-runner, namespace: {ns}}}]
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {{name: captf-run-moved-away, namespace: {ns}, labels: {{captf.io/managed: "true"}}}}
spec: {{holderIdentity: captf-c-moved-apply-a1-000000}}
"#
    )
}

#[tokio::test]
async fn a_namespace_without_objects_loses_what_captf_made_there() {
    let (env, client, used) = namespace_with_identity("sweep-used").await;
    let moved = env
        .namespace(&client, "sweep-moved")
        .await
        .expect("namespace");
    apply_yaml(&client, &leftovers(&moved))
        .await
        .expect("leftovers");
    // No --namespace: this test binary's control plane is this test's alone.
    let kubeconfig = manager_kubeconfig(&env, &client)
        .await
        .expect("manager RBAC");
    let manager = Manager::start(&env, &kubeconfig, "sweep", &[]).expect("manager");
    create_cluster(&client, &used, "user", IMAGE, "").await;
    let clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), &used);
    wait_until(&clusters, "user", "Ready", &manager, ready).await;

    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &moved);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &moved);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &moved);
    wait_for("the leftovers removed", TIMEOUT, || async {
        let gone = accounts.get_opt("captf-runner").await?.is_none()
            && bindings.get_opt("captf-runner").await?.is_none()
            && leases.get_opt("captf-run-moved-away").await?.is_none();
        Ok(gone.then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    assert!(
        accounts.get_opt("users-own").await.expect("read").is_some(),
        "an account without captf.io/managed stays"
    );
    manager
        .logged("the sweep to log what it removed", TIMEOUT, |l| {
            l.contains("orphan sweep: no TerraformCluster") && l.contains(&moved)
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));

    // The namespace with an object keeps the runner RBAC its Jobs use, also once the manager
    // has swept again since: a new manager sweeps at its start.
    drop(manager);
    let manager = Manager::start(&env, &kubeconfig, "sweep-again", &[]).expect("manager");
    manager
        .logged("a sweep by the new manager", TIMEOUT, |l| {
            l.contains("orphan sweep finished")
        })
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let own: Api<ServiceAccount> = Api::namespaced(client.clone(), &used);
    let own_bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &used);
    assert!(
        own.get_opt("captf-runner").await.expect("read").is_some(),
        "the used namespace keeps its runner ServiceAccount"
    );
    assert!(
        own_bindings
            .get_opt("captf-runner")
            .await
            .expect("read")
            .is_some(),
        "the used namespace keeps its runner RoleBinding"
    );
}
