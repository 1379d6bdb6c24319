//! `templates/` as a user fills them: `clusterctl generate` with the variables a user exports,
//! for the tests that apply them under the real Cluster API controllers.

use std::process::Command;

use captf_api::{TerraformCluster, TerraformMachine};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};

use crate::fixture::CLUSTER_IMAGE;

pub const MACHINE_IMAGE: &str = "captf.local/modules/noop-machine:e2e";
pub const POOL_IMAGE: &str = "captf.local/modules/noop-machinepool:e2e";
pub const CONTROL_PLANE: &str = "cluster.x-k8s.io/control-plane";
/// Applies and destroys run one after the other through the test node.
pub const LONG: std::time::Duration = std::time::Duration::from_secs(420);

pub fn capi(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1beta2", kind), plural)
}

/// `clusterctl generate cluster <name> --from templates/<template>`, with the variables a
/// user exports.
pub fn generate(env: &captf_testenv::TestEnv, ns: &str, name: &str, template: &str) -> String {
    let kubeconfig = env.kubeconfig().display().to_string();
    clusterctl_generate(
        ns,
        &[
            "cluster",
            name,
            "--target-namespace",
            ns,
            "--kubeconfig",
            &kubeconfig,
            "--kubernetes-version",
            "v1.34.4",
            "--control-plane-machine-count",
            "1",
            "--worker-machine-count",
            "1",
        ],
        template,
    )
}

/// `clusterctl generate <what> --from templates/<template>` in a clusterctl home of its own,
/// with the variables a user exports (the identity of namespace `ns`).
pub fn clusterctl_generate(ns: &str, what: &[&str], template: &str) -> String {
    // A home of its own, empty: no user configuration is read.
    let home = std::env::temp_dir().join(format!("captf-clusterctl-{}", std::process::id()));
    std::fs::create_dir_all(&home).expect("clusterctl home");
    let template = crate::workspace().join("templates").join(template);
    let out = Command::new(captf_testenv::tools::cache_dir().join("bin/clusterctl"))
        .arg("generate")
        .args(what)
        .arg("--from")
        .arg(&template)
        .env("XDG_CONFIG_HOME", &home)
        .env("CAPTF_CLUSTER_MODULE_IMAGE", CLUSTER_IMAGE)
        .env("CAPTF_MACHINE_MODULE_IMAGE", MACHINE_IMAGE)
        .env("CAPTF_MACHINE_POOL_MODULE_IMAGE", POOL_IMAGE)
        .env("CAPTF_IDENTITY", format!("noop-{ns}"))
        .output()
        .expect("clusterctl runs");
    assert!(
        out.status.success(),
        "clusterctl generate {what:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).expect("YAML");
    // Every variable filled: no ${...} is left for the API server to reject.
    assert!(!yaml.contains("${"), "{yaml}");
    yaml
}

/// `yaml` with every object's namespace set to `ns`, as `kubectl apply -n <ns>` applies it.
pub fn in_namespace(yaml: &str, ns: &str) -> String {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| serde_json::Value::deserialize(doc).expect("YAML document"))
        .filter(|object| !object.is_null())
        .map(|mut object| {
            object["metadata"]["namespace"] = ns.into();
            serde_json::to_string(&object).expect("JSON")
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// Waits for a control-plane Machine with bootstrap data, a providerID and its infrastructure
/// provisioned; `logs` says why when it does not come.
pub async fn provisioned_control_plane(
    machines: &Api<DynamicObject>,
    logs: impl Fn() -> String,
) -> DynamicObject {
    captf_testenv::wait_for("a control-plane Machine provisioned", LONG, || async {
        let list = machines
            .list(&ListParams::default().labels(CONTROL_PLANE))
            .await?
            .items;
        Ok(list.into_iter().find(|m| {
            m.data["spec"]["bootstrap"]["dataSecretName"].is_string()
                && m.data["spec"]["providerID"].is_string()
                && m.data["status"]["initialization"]["infrastructureProvisioned"] == true
        }))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()))
}

/// Deletes the Cluster `name` and waits until CAPTF destroyed every TerraformCluster and
/// TerraformMachine of the namespace.
pub async fn delete_and_wait_destroyed(
    client: &kube::Client,
    ns: &str,
    name: &str,
    logs: impl Fn() -> String,
) {
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &capi("cluster.x-k8s.io", "Cluster", "clusters"),
    );
    clusters
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete the Cluster");
    let tcs: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    let tms: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);
    captf_testenv::wait_for(
        "every TerraformCluster and TerraformMachine gone",
        LONG,
        || async {
            let left = tcs.list(&ListParams::default()).await?.items.len()
                + tms.list(&ListParams::default()).await?.items.len();
            Ok((left == 0).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
}
