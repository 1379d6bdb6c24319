//! A namespace with an identity, a CAPI Cluster and its TerraformCluster, as CAPI would set
//! them up, and reading their conditions.

use std::time::Duration;

use captf_api::TerraformCluster;
use captf_testenv::{TestEnv, wait_for};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

use crate::{Manager, apply_file, apply_yaml, workspace, write_images};

/// Long enough for an apply through the process node on this machine, with margin.
pub const TIMEOUT: Duration = Duration::from_secs(180);

/// A fresh namespace (`<prefix>-…`) with the runner ClusterRole and an identity
/// `noop-<namespace>` allowed in it.
pub async fn namespace_with_identity(prefix: &str) -> (TestEnv, kube::Client, String) {
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

/// The CAPI Cluster resource (v1beta2).
pub fn capi_cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
        "clusters",
    )
}

/// Creates a CAPI Cluster and its TerraformCluster owned by it on `image`. `spec_extra` is YAML
/// appended under the TerraformCluster's `spec:` (indented two spaces), e.g.
/// `"  variables: {output_token: one}"`.
pub async fn create_cluster(
    client: &kube::Client,
    ns: &str,
    name: &str,
    image: &str,
    spec_extra: &str,
) {
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
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &capi_cluster_resource());
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
{spec_extra}
"#
        ),
    )
    .await
    .expect("TerraformCluster");
}

/// `(status, reason, message)` of a condition.
pub fn condition(tc: &TerraformCluster, type_: &str) -> Option<(String, String, String)> {
    tc.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until `check` holds for the TerraformCluster; panics with the manager's log tail.
pub async fn wait_until<F>(
    api: &Api<TerraformCluster>,
    name: &str,
    what: &str,
    manager: &Manager,
    check: F,
) -> TerraformCluster
where
    F: Fn(&TerraformCluster) -> bool,
{
    wait_for(what, TIMEOUT, || async {
        let tc = api.get(name).await?;
        Ok(check(&tc).then_some(tc))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()))
}

/// Whether a condition has this status and reason.
pub fn has(tc: &TerraformCluster, type_: &str, status: &str, reason: &str) -> bool {
    condition(tc, type_).is_some_and(|c| c.0 == status && c.1 == reason)
}

/// The value of one sample in Prometheus text (`name{labels}` exactly as exported, labels
/// possibly a prefix), or `None`.
pub fn sample(metrics: &str, series_prefix: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(series_prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
