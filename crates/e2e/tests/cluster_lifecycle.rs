//! A TerraformCluster from create to delete: the real `captf manager` process, real Jobs on the
//! process node, the runner and OpenTofu (and Terraform) applying the no-op module through the
//! kubernetes backend.

use std::time::Duration;

use captf_api::TerraformCluster;
use captf_e2e::{Manager, apply_file, apply_yaml, manager_kubeconfig, workspace, write_images};
use captf_testenv::{TestEnv, wait_for};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams};

const TIMEOUT: Duration = Duration::from_secs(120);

async fn setup(prefix: &str) -> (TestEnv, kube::Client, String) {
    let env = TestEnv::shared().clone();
    let client = env.client().await.expect("client");
    write_images(&env).expect("images");
    apply_file(
        &client,
        &workspace().join("config/rbac/runner_clusterrole.yaml"),
    )
    .await
    .expect("runner ClusterRole");
    let ns = env.namespace(&client, prefix).await.expect("namespace");
    apply_yaml(
        &client,
        &format!(
            r#"
apiVersion: v1
kind: Namespace
metadata: {{name: captf-system}}
---
apiVersion: v1
kind: Secret
metadata: {{name: noop-credentials, namespace: captf-system}}
stringData: {{NOOP_TOKEN: not-a-real-credential}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformClusterIdentity
metadata: {{name: noop-{ns}}}
spec:
  secretRef: {{name: noop-credentials, namespace: captf-system}}
  allowedNamespaces: {{list: [{ns}]}}
"#
        ),
    )
    .await
    .expect("identity");
    (env, client, ns)
}

/// Creates a CAPI Cluster and its TerraformCluster owned by it, as CAPI would set them up.
async fn create_cluster(client: &kube::Client, ns: &str, name: &str, image: &str) {
    apply_yaml(
        client,
        &format!(
            r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {{name: {name}, namespace: {ns}}}
spec:
  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: TerraformCluster, name: {name}}}
"#
        ),
    )
    .await
    .expect("Cluster");
    let clusters: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &captf_controller_cluster_resource());
    let cluster = clusters.get(name).await.expect("Cluster exists");
    let uid = cluster.metadata.uid.expect("uid");
    apply_yaml(
        client,
        &format!(
            r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformCluster
metadata:
  name: {name}
  namespace: {ns}
  labels: {{cluster.x-k8s.io/cluster-name: {name}}}
  ownerReferences:
  - {{apiVersion: cluster.x-k8s.io/v1beta2, kind: Cluster, name: {name}, uid: {uid}}}
spec:
  source: {{image: "{image}"}}
  identityRef: {{name: noop-{ns}}}
"#
        ),
    )
    .await
    .expect("TerraformCluster");
}

fn captf_controller_cluster_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
        "clusters",
    )
}

fn condition(tc: &TerraformCluster, type_: &str) -> Option<(String, String, String)> {
    tc.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn lifecycle(engine_tag: &str, prefix: &str) {
    let (env, client, ns) = setup(prefix).await;
    // The manager runs as its ServiceAccount with exactly the RBAC of config/rbac.
    let kubeconfig = manager_kubeconfig(&env, &client)
        .await
        .expect("manager RBAC");
    let manager = Manager::start(&env, &kubeconfig, prefix, &[]).expect("manager");
    let name = "demo";
    create_cluster(
        &client,
        &ns,
        name,
        &format!("captf.local/modules/noop-cluster:{engine_tag}"),
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let ready = wait_for("the TerraformCluster to be Ready", TIMEOUT, || async {
        let tc = api.get(name).await?;
        Ok(condition(&tc, "Ready")
            .filter(|c| c.0 == "True")
            .map(|_| tc))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let status = ready.status.clone().expect("status");
    assert_eq!(
        status.workspace.initialization.and_then(|i| i.provisioned),
        Some(true)
    );
    assert_eq!(
        condition(&ready, "StateReadable").map(|c| c.1).as_deref(),
        Some("StateRead")
    );
    assert_eq!(
        condition(&ready, "ApplyJobSucceeded")
            .map(|c| c.1)
            .as_deref(),
        Some("ApplySucceeded")
    );
    // The module's endpoint is written back to spec once.
    let endpoint = ready
        .spec
        .control_plane_endpoint
        .clone()
        .expect("endpoint written back");
    assert_eq!(endpoint.port, Some(6443));
    assert!(status.exports.is_some(), "exports published");
    assert!(status.workspace.state_secret_suffix.is_some());

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let state = secrets
        .list(&ListParams::default().labels("tfstate=true"))
        .await
        .expect("list")
        .items;
    assert_eq!(state.len(), 1, "one state Secret");
    let annotations = state[0].metadata.annotations.clone().unwrap_or_default();
    assert!(
        annotations
            .get("captf.io/inputs-hash")
            .is_some_and(|h| h.starts_with("h2:")),
        "state adopted with the inputs hash"
    );
    let durable = secrets
        .get("captf-inputs-c-demo")
        .await
        .expect("durable inputs");
    assert_eq!(
        durable
            .metadata
            .annotations
            .unwrap_or_default()
            .get("captf.io/applied")
            .map(String::as_str),
        Some("true")
    );

    let metrics = Manager::get(&manager.metrics).expect("metrics");
    for family in [
        "captf_build_info",
        "captf_jobs_total{kind=\"TerraformCluster\",op=\"apply\",result=\"succeeded\"}",
        "captf_ready{kind=\"TerraformCluster\"",
    ] {
        assert!(
            metrics.contains(family),
            "{family} not exported:\n{metrics}"
        );
    }

    // Nothing changes: no second apply.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let applies = |list: Vec<Job>| {
        list.into_iter()
            .filter(|j| {
                j.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.contains("-apply-"))
            })
            .count()
    };
    assert_eq!(
        applies(jobs.list(&ListParams::default()).await.expect("jobs").items),
        1
    );

    // Deletion: a destroy Job, then state, inputs and finalizer go. The destroy Job is owned by
    // the object and collected with it, so watch for it while it exists.
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_for("a destroy Job", TIMEOUT, || async {
        let list = jobs.list(&ListParams::default()).await?.items;
        Ok(list
            .iter()
            .any(|j| {
                j.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.contains("-destroy-"))
            })
            .then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    wait_for("the TerraformCluster to be gone", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    assert!(
        secrets
            .list(&ListParams::default().labels("tfstate=true"))
            .await
            .expect("list")
            .items
            .is_empty(),
        "state removed"
    );
    assert!(
        secrets
            .get_opt("captf-inputs-c-demo")
            .await
            .expect("get")
            .is_none(),
        "durable inputs removed"
    );
}

#[tokio::test]
async fn a_terraform_cluster_goes_from_create_to_ready_to_deleted_with_opentofu() {
    lifecycle("e2e", "tofu-life").await;
}

#[tokio::test]
async fn a_terraform_cluster_goes_from_create_to_ready_to_deleted_with_terraform() {
    lifecycle("e2e-terraform", "tf-life").await;
}
