//! The template the fleet is cloned from: a TerraformCluster on the no-op cluster module and
//! (unless `--machines-per-cluster 0`) one TerraformMachine of it on the no-op machine module,
//! created as CAPI would in the namespace `bench-tpl`, and applied for real by a manager.

use std::fmt::Debug;
use std::time::Duration;

use anyhow::Context as _;
use captf_controller::reconcile::pass::WithWorkspaceStatus;
use captf_e2e::fixture::Conditioned;
use k8s_openapi::api::batch::v1::Job;
use kube::Resource;
use kube::api::{Api, DynamicObject, ListParams};
use serde::de::DeserializeOwned;

use crate::{IDENTITY, TEMPLATE, TEMPLATE_NS, wait_until_async};

/// The template machine's name.
pub fn machine() -> String {
    crate::seed_machines::machine_name(TEMPLATE, 0)
}

/// A CAPI Cluster `name` of the template namespace and its TerraformCluster on `image`.
pub async fn create_cluster(client: &kube::Client, name: &str, image: &str) -> anyhow::Result<()> {
    captf_e2e::apply_yaml(
        client,
        &format!(
            r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {{name: {name}, namespace: {TEMPLATE_NS}}}
spec:
  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: TerraformCluster, name: {name}}}
"#
        ),
    )
    .await?;
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        TEMPLATE_NS,
        &captf_e2e::fixture::capi_cluster_resource(),
    );
    let uid = clusters
        .get(name)
        .await?
        .metadata
        .uid
        .context("Cluster uid")?;
    captf_e2e::apply_yaml(
        client,
        &format!(
            r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformCluster
metadata:
  name: {name}
  namespace: {TEMPLATE_NS}
  labels: {{cluster.x-k8s.io/cluster-name: {name}}}
  ownerReferences:
  - {{apiVersion: cluster.x-k8s.io/v1beta2, kind: Cluster, name: {name}, uid: {uid}}}
spec:
  source: {{image: "{image}"}}
  identityRef: {{name: {IDENTITY}}}
"#
        ),
    )
    .await
}

/// The template machine: its Machine, bootstrap data and TerraformMachine.
pub async fn create_machine(client: &kube::Client) -> anyhow::Result<()> {
    crate::seed_machines::create_template(client, TEMPLATE_NS, TEMPLATE, &machine()).await
}

/// Object `name` Ready, no Job running, and its state backed up (what the fleet is cloned
/// from).
pub async fn wait_applied<K>(api: &Api<K>, name: &str, timeout: Duration) -> anyhow::Result<()>
where
    K: Resource + Conditioned + WithWorkspaceStatus + Clone + DeserializeOwned + Debug,
{
    wait_until_async(
        &format!("the template {name} Ready with a state backup"),
        timeout,
        || async {
            let o = api.get(name).await.ok()?;
            let w = o.workspace_status()?;
            (captf_e2e::fixture::ready(&o)
                && w.active_job.is_none()
                && w.state_backups.as_ref().is_some_and(|b| !b.is_empty()))
            .then_some(())
        },
    )
    .await
}

/// Every Job of the template's namespace bookkept by its manager.
pub async fn jobs_bookkept(client: &kube::Client) -> anyhow::Result<()> {
    wait_until_async(
        "the template's Jobs bookkept",
        Duration::from_secs(120),
        || async {
            let jobs: Api<Job> = Api::namespaced(client.clone(), TEMPLATE_NS);
            let list = jobs.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .all(|j| {
                    j.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(captf_api::annotations::BOOKKEPT))
                })
                .then_some(())
        },
    )
    .await
}
