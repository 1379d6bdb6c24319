//! A namespace with an identity, a CAPI Cluster and its TerraformCluster, as CAPI would set
//! them up, and reading their conditions.

use std::time::Duration;

use captf_api::TerraformCluster;
use captf_testenv::{TestEnv, wait_for};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

use crate::{Manager, apply_file, apply_yaml, workspace, write_images};

pub use crate::engine::{Engine, OPENTOFU, TERRAFORM};
pub use crate::passes::{idle_passes_of, passes, passes_of};

/// Long enough for an apply through the test node on this machine, with margin.
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
    identity(&client, &ns).await;
    (env, client, ns)
}

/// The identity `noop-<ns>`, allowed in `ns` only, with its credentials in `captf-system`
/// (where an installed manager runs).
pub async fn identity(client: &kube::Client, ns: &str) {
    apply_yaml(
        client,
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

/// A workload kind whose conditions the tests read.
pub trait Conditioned {
    fn conditions(&self) -> Option<&Vec<captf_api::Condition>>;
}

/// Every kind here keeps its conditions at `status.conditions`.
macro_rules! conditioned {
    ($($kind:ty),* $(,)?) => {$(
        impl Conditioned for $kind {
            fn conditions(
                &self,
            ) -> Option<&Vec<captf_api::Condition>> {
                self.status.as_ref()?.conditions.as_ref()
            }
        }
    )*};
}

conditioned!(
    TerraformCluster,
    captf_api::TerraformMachine,
    captf_api::TerraformMachinePool,
    captf_api::TerraformMachineTemplate,
    captf_api::TerraformClusterIdentity,
);

/// `(status, reason, message)` of a condition.
pub fn condition<K: Conditioned>(object: &K, type_: &str) -> Option<(String, String, String)> {
    object
        .conditions()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                c.status.to_string(),
                c.reason.to_string(),
                c.message.to_string(),
            )
        })
}

/// Waits until `check` holds for the object; panics with the manager's log tail.
pub async fn wait_until<K, F>(
    api: &Api<K>,
    name: &str,
    what: &str,
    manager: &Manager,
    check: F,
) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    F: Fn(&K) -> bool,
{
    wait_for(what, TIMEOUT, || async {
        let object = api.get(name).await?;
        Ok(check(&object).then_some(object))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()))
}

/// Waits until the cluster `name` has an active Job (its apply, for a new cluster); the
/// cluster as it then reads and the Job's name.
pub async fn active_job(
    api: &Api<TerraformCluster>,
    name: &str,
    manager: &Manager,
) -> (TerraformCluster, String) {
    let running = wait_until(api, name, "an active Job", manager, |t| {
        t.status
            .as_ref()
            .is_some_and(|s| s.workspace.active_job.is_some())
    })
    .await;
    let job = running
        .status
        .as_ref()
        .and_then(|s| s.workspace.active_job.as_ref())
        .map(|j| j.name.clone())
        .expect("active Job");
    (running, job)
}

/// Waits until a Job whose name contains `part` (e.g. `-destroy-`) exists in `ns`; panics
/// with the manager's log. Look for a Job before its owner goes: it is collected with it.
pub async fn wait_for_job(client: &kube::Client, ns: &str, part: &str, manager: &Manager) {
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("a Job named *{part}*"), TIMEOUT, || async {
        let list = jobs
            .list_metadata(&kube::api::ListParams::default())
            .await?
            .items;
        Ok(list
            .iter()
            .any(|j| j.metadata.name.as_deref().is_some_and(|n| n.contains(part)))
            .then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
}

/// Whether a condition has this status and reason.
pub fn has<K: Conditioned>(tc: &K, type_: &str, status: &str, reason: &str) -> bool {
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

/// A test's namespace (with its identity) and a `captf manager` scoped to it, running with the
/// RBAC of config/rbac.
pub struct Scene {
    pub env: TestEnv,
    pub client: kube::Client,
    pub ns: String,
    pub manager: Manager,
}

/// [`namespace_with_identity`] plus a manager with `--namespace=<ns>` and `extra` flags.
pub async fn scene(prefix: &str, extra: &[&str]) -> Scene {
    let (env, client, ns) = namespace_with_identity(prefix).await;
    let kubeconfig = crate::manager_kubeconfig(&env, &client)
        .await
        .expect("manager RBAC");
    let namespace = format!("--namespace={ns}");
    let mut flags = vec![namespace.as_str()];
    flags.extend_from_slice(extra);
    let manager = Manager::start(&env, &kubeconfig, &ns, &flags).expect("manager");
    Scene {
        env,
        client,
        ns,
        manager,
    }
}

/// The names of the Jobs in `ns`.
pub async fn job_names(client: &kube::Client, ns: &str) -> Vec<String> {
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), ns);
    jobs.list(&kube::api::ListParams::default())
        .await
        .expect("Jobs")
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect()
}

/// The Jobs of operation `op` of the TerraformCluster `name`, oldest first.
pub async fn jobs_of(
    client: &kube::Client,
    ns: &str,
    name: &str,
    op: &str,
) -> Vec<k8s_openapi::api::batch::v1::Job> {
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), ns);
    let mut list = jobs
        .list(&kube::api::ListParams::default().labels(&format!(
            "{}=TerraformCluster,{}={name},{}={op}",
            captf_api::labels::OWNER_KIND,
            captf_api::labels::OWNER_NAME,
            captf_api::labels::OP
        )))
        .await
        .expect("list Jobs")
        .items;
    list.sort_by_key(|j| j.metadata.creation_timestamp.clone().map(|t| t.0));
    list
}

/// Sets (or with `None` removes) one annotation of a TerraformCluster.
pub async fn annotate(api: &Api<TerraformCluster>, name: &str, key: &str, value: Option<&str>) {
    merge_patch(
        api,
        name,
        serde_json::json!({"metadata": {"annotations": {key: value}}}),
    )
    .await;
}

/// A JSON merge patch of an object.
pub async fn merge_patch<K>(api: &Api<K>, name: &str, patch: serde_json::Value)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap_or_else(|e| panic!("patch the {} {name}: {e}", K::kind(&())));
}

/// `Ready=True`.
pub fn ready<K: Conditioned>(tc: &K) -> bool {
    has(tc, "Ready", "True", "Ready")
}

/// `status.exports` as compact JSON (for `contains` checks).
pub fn exports(tc: &TerraformCluster) -> String {
    serde_json::to_string(&tc.status.as_ref().and_then(|s| s.exports.clone())).unwrap_or_default()
}

/// Waits for the first event with `reason` in `ns` and returns it.
pub async fn event(
    client: &kube::Client,
    ns: &str,
    reason: &str,
) -> k8s_openapi::api::events::v1::Event {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("a {reason} event"), TIMEOUT, || async {
        Ok(events
            .list(&kube::api::ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason)))
    })
    .await
    .expect("event")
}

/// The runner's progress Events about the object with `uid`, in the order they were posted,
/// once one with `last` (a reason) is among them.
pub async fn runner_events(
    client: &kube::Client,
    ns: &str,
    uid: &str,
    last: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("the runner's {last} Event"), TIMEOUT, || async {
        let mut mine: Vec<_> = events
            .list(&kube::api::ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                e.reporting_controller.as_deref() == Some("captf.io/runner")
                    && e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid)
            })
            .collect();
        mine.sort_by(|a, b| {
            (&a.event_time.as_ref().map(|t| t.0), &a.metadata.name)
                .cmp(&(&b.event_time.as_ref().map(|t| t.0), &b.metadata.name))
        });
        Ok(mine
            .iter()
            .any(|e| e.reason.as_deref() == Some(last))
            .then_some(mine))
    })
    .await
    .expect("runner events")
}

/// `reason: note` of each Event, one per line (for assertions and their messages).
pub fn reasons_and_notes(events: &[k8s_openapi::api::events::v1::Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            format!(
                "{} {}: {}",
                e.type_.as_deref().unwrap_or_default(),
                e.reason.as_deref().unwrap_or_default(),
                e.note.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

/// Asserts that some line of `lines` starts with each of `wanted`.
pub fn assert_lines_start_with(lines: &[String], wanted: &[&str]) {
    for want in wanted {
        assert!(
            lines.iter().any(|l| l.starts_with(want)),
            "no {want:?} among\n{}",
            lines.join("\n")
        );
    }
}

/// The CAPI Machine resource (v1beta2).
pub fn capi_machine_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine"),
        "machines",
    )
}

/// The bootstrap data the tests' machines get (not valid UTF-8 would do too; these bytes
/// carry what JSON encoders like to escape).
pub const BOOTSTRAP_DATA: &str = "#cloud-config\nruncmd: [\"echo <hello & welcome>\"]\n";

/// Writes what a bootstrap provider would for machine `name`: the Secret `<name>-bootstrap`
/// with `value` ([`BOOTSTRAP_DATA`]) and `format`.
pub async fn write_bootstrap(client: &kube::Client, ns: &str, name: &str) {
    let data = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": format!("{name}-bootstrap"), "namespace": ns},
        "stringData": {"value": BOOTSTRAP_DATA, "format": "cloud-config"},
    });
    apply_yaml(client, &serde_json::to_string(&data).expect("json"))
        .await
        .expect("bootstrap Secret");
}

/// Creates, as CAPI would for one Machine of cluster `cluster`: the Machine (naming the
/// bootstrap Secret `<name>-bootstrap`, which [`write_bootstrap`] writes; with
/// `machine_spec_extra` YAML appended under its `spec:`, indented two spaces) and the
/// TerraformMachine it owns on `image` (`spec_extra` likewise).
pub async fn create_machine(
    client: &kube::Client,
    ns: &str,
    cluster: &str,
    name: &str,
    image: &str,
    machine_spec_extra: &str,
    spec_extra: &str,
) {
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
{machine_spec_extra}
"#
        ),
    )
    .await
    .expect("Machine");
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &capi_machine_resource());
    let uid = machines
        .get(name)
        .await
        .expect("Machine exists")
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
  labels: {{cluster.x-k8s.io/cluster-name: {cluster}}}
  ownerReferences:
  - {{apiVersion: cluster.x-k8s.io/v1beta2, kind: Machine, name: {name}, uid: {uid}}}
spec:
  source: {{image: "{image}"}}
{spec_extra}
"#
        ),
    )
    .await
    .expect("TerraformMachine");
}

/// The no-op cluster module's image.
pub const CLUSTER_IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

/// A [`scene`] named `prefix` with a Ready TerraformCluster of the same name on the no-op
/// cluster module.
pub async fn ready_cluster(prefix: &str) -> (Scene, String) {
    let scene = scene(prefix, &[]).await;
    let name = prefix.to_owned();
    create_cluster(&scene.client, &scene.ns, &name, CLUSTER_IMAGE, "").await;
    let api: Api<TerraformCluster> = Api::namespaced(scene.client.clone(), &scene.ns);
    wait_until(&api, &name, "the cluster Ready", &scene.manager, ready).await;
    (scene, name)
}

/// Creates, as CAPI would for a MachinePool of cluster `cluster`: the MachinePool with
/// `replicas` (naming the bootstrap Secret `<name>-bootstrap`, which [`write_bootstrap`]
/// writes) and the TerraformMachinePool it owns on `image` (`spec_extra` YAML appended under its
/// `spec:`, indented two spaces).
pub async fn create_machine_pool(
    client: &kube::Client,
    ns: &str,
    cluster: &str,
    name: &str,
    image: &str,
    replicas: i32,
    spec_extra: &str,
) {
    apply_yaml(
        client,
        &format!(
            r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachinePool
metadata:
  name: {name}
  namespace: {ns}
  labels: {{cluster.x-k8s.io/cluster-name: {cluster}}}
spec:
  clusterName: {cluster}
  replicas: {replicas}
  template:
    metadata: {{labels: {{role: pool}}}}
    spec:
      clusterName: {cluster}
      version: v1.34.4
      bootstrap: {{dataSecretName: {name}-bootstrap}}
      infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: TerraformMachinePool, name: {name}}}
"#
        ),
    )
    .await
    .expect("MachinePool");
    let pools: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &capi_machine_pool_resource());
    let uid = pools
        .get(name)
        .await
        .expect("MachinePool exists")
        .metadata
        .uid
        .expect("uid");
    apply_yaml(
        client,
        &format!(
            r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformMachinePool
metadata:
  name: {name}
  namespace: {ns}
  labels: {{cluster.x-k8s.io/cluster-name: {cluster}}}
  ownerReferences:
  - {{apiVersion: cluster.x-k8s.io/v1beta2, kind: MachinePool, name: {name}, uid: {uid}}}
spec:
  source: {{image: "{image}"}}
{spec_extra}
"#
        ),
    )
    .await
    .expect("TerraformMachinePool");
}

/// The CAPI MachinePool resource (v1beta2).
pub fn capi_machine_pool_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "MachinePool"),
        "machinepools",
    )
}

/// The rendered inputs an object's last apply Job started with, from its durable inputs
/// Secret: `(terraform.tfvars.json, main.tf.json)`.
pub async fn durable_inputs(
    client: &kube::Client,
    ns: &str,
    kind: captf_api::names::WorkloadKind,
    name: &str,
) -> (serde_json::Value, serde_json::Value) {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    let key = captf_api::names::ObjectKey::new(ns, kind, name).expect("key");
    let durable = secrets
        .get(&key.durable_inputs_secret())
        .await
        .expect("durable inputs");
    let data = durable.data.unwrap_or_default();
    let read = |file: &str| -> serde_json::Value {
        serde_json::from_slice(&data.get(file).unwrap_or_else(|| panic!("{file}")).0)
            .unwrap_or_else(|e| panic!("{file}: {e}"))
    };
    (read("terraform.tfvars.json"), read("main.tf.json"))
}

/// Waits until the engine holds the state lock of `suffix` for an apply (so a Job deleted now
/// is cut short mid-apply).
pub async fn wait_for_apply_lock(client: &kube::Client, ns: &str, suffix: &str, manager: &Manager) {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), ns);
    wait_for(
        "the engine to hold the state lock for apply",
        TIMEOUT,
        || async {
            let lease = leases
                .get_opt(&format!("lock-tfstate-default-{suffix}"))
                .await?;
            Ok(lease
                .and_then(|l| l.metadata.annotations)
                .and_then(|a| a.get("app.terraform.io/lock-info").cloned())
                .filter(|info| info.contains("OperationTypeApply")))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
}

/// Waits until the CAPI Machine `name` carries `cluster.x-k8s.io/remediate-machine`; returns
/// the reason CAPTF asked with (`captf.io/remediation-requested`).
pub async fn remediation_requested(
    client: &kube::Client,
    ns: &str,
    name: &str,
    manager: &Manager,
) -> Option<String> {
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &capi_machine_resource());
    let machine = wait_for("the remediate-machine annotation", TIMEOUT, || async {
        let m = machines.get(name).await?;
        Ok(m.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("cluster.x-k8s.io/remediate-machine"))
            .then_some(m))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    machine
        .metadata
        .annotations
        .unwrap_or_default()
        .get("captf.io/remediation-requested")
        .cloned()
}

/// Deletes the apply Job that `status.activeJob` of `name` names once the engine is applying,
/// as a drain or a hasty operator would, and waits for the apply that follows it: that Job
/// must name the lost one in `captf.io/after-interrupted-apply`. `workspace` reads the kind's
/// shared status.
pub async fn delete_apply_mid_run<K>(
    api: &Api<K>,
    client: &kube::Client,
    name: &str,
    manager: &Manager,
    workspace: fn(&K) -> Option<&captf_api::WorkspaceStatus>,
) where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let ns = api.namespace().expect("a namespaced Api").to_owned();
    let running = wait_until(api, name, "an active apply Job", manager, |o| {
        workspace(o)
            .and_then(|w| w.active_job.as_ref())
            .is_some_and(|a| a.operation == captf_api::Operation::Apply)
    })
    .await;
    let status = workspace(&running).expect("status").clone();
    let lost = status.active_job.expect("active").name;
    let suffix = status.state_secret_suffix.expect("suffix");
    wait_for_apply_lock(client, &ns, &suffix, manager).await;
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    jobs.delete(&lost, &kube::api::DeleteParams::background())
        .await
        .expect("delete the Job");
    let selector = format!(
        "{}={},{}={name},{}=apply",
        captf_api::labels::OWNER_KIND,
        K::kind(&()),
        captf_api::labels::OWNER_NAME,
        captf_api::labels::OP
    );
    let retry = wait_for("an apply after the lost one", TIMEOUT, || async {
        Ok(jobs
            .list(&kube::api::ListParams::default().labels(&selector))
            .await?
            .items
            .into_iter()
            .find(|j| j.metadata.name.as_deref() != Some(lost.as_str())))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let after = retry
        .metadata
        .annotations
        .unwrap_or_default()
        .get("captf.io/after-interrupted-apply")
        .cloned();
    assert_eq!(
        after.as_deref(),
        Some(lost.as_str()),
        "the retry names the lost Job"
    );
}

/// The state JSON a state Secret holds (its one chunk, gzip).
pub fn state_document(secret: &k8s_openapi::api::core::v1::Secret) -> serde_json::Value {
    use std::io::Read;
    let data = &secret.data.as_ref().expect("data")["tfstate"].0;
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(data.as_slice())
        .read_to_end(&mut json)
        .expect("gzip");
    serde_json::from_slice(&json).expect("state JSON")
}

/// `doc` as the backend stores it (gzip).
pub fn gzip_state(doc: &serde_json::Value) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(&serde_json::to_vec(doc).expect("json"))
        .expect("gzip");
    enc.finish().expect("gzip")
}

/// What one `kubectl captf` command did.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `captf <args>` (the plugin, as `kubectl captf` runs it) in the scene's namespace with
/// `answer` on its standard input.
pub fn captf(scene: &Scene, args: &[&str], answer: &str) -> Ran {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(crate::captf_binary().expect("captf binary"))
        .args(args)
        .arg("--kubeconfig")
        .arg(scene.env.kubeconfig())
        .args(["-n", &scene.ns])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("captf runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(answer.as_bytes())
        .expect("answer written");
    let out = child.wait_with_output().expect("captf ends");
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// [`captf`] with no input, which must exit 0: its standard output.
pub fn captf_ok(scene: &Scene, args: &[&str]) -> String {
    let ran = captf(scene, args, "");
    assert_eq!(
        ran.code, 0,
        "captf {args:?}\nstdout: {}\nstderr: {}",
        ran.stdout, ran.stderr
    );
    ran.stdout
}

/// Deletes Secret `name` for good, as someone who means it would: its finalizers removed first
/// (the manager's `captf.io/state-protection` would otherwise keep it, Terminating). A Secret
/// already gone is fine.
pub async fn delete_for_good(secrets: &Api<k8s_openapi::api::core::v1::Secret>, name: &str) {
    let strip = serde_json::json!({"metadata": {"finalizers": null}});
    match secrets
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&strip),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return,
        Err(e) => panic!("removing the finalizers of Secret {name}: {e}"),
    }
    match secrets
        .delete(name, &kube::api::DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => panic!("deleting Secret {name}: {e}"),
    }
}
