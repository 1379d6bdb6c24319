//! The stand-in control-plane and bootstrap kinds. No control-plane or bootstrap provider runs
//! on the test control plane (no machine runs kubeadm here), so the tests and the demo define
//! these kinds and answer for them: the Cluster API controllers only clone them, read their
//! status and follow their references, which is all CAPTF's kinds meet of them.

use anyhow::Context;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::apply_yaml;

/// The stand-in control plane's group; its kinds are `TestControlPlane` and
/// `TestControlPlaneTemplate`.
pub const CONTROL_PLANE_GROUP: &str = "controlplane.e2e.captf.io";
/// The stand-in bootstrap provider's group; its kinds are `TestConfig` and `TestConfigTemplate`.
pub const BOOTSTRAP_GROUP: &str = "bootstrap.e2e.captf.io";

/// A kind of the stand-in providers: it keeps whatever is written to it, and carries the
/// contract label Cluster API looks for and clusterctl's label (so `clusterctl move` moves
/// its objects). A template kind has no status.
fn crd(group: &str, kind: &str, status: bool) -> serde_json::Value {
    let plural = format!("{}s", kind.to_lowercase());
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let mut properties = json!({"spec": open});
    let mut version = json!({"name": "v1alpha1", "served": true, "storage": true});
    if status {
        properties["status"] = open.clone();
        version["subresources"] = json!({"status": {}});
    }
    version["schema"] = json!({"openAPIV3Schema": {"type": "object", "properties": properties}});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{plural}.{group}"),
            "labels": {"cluster.x-k8s.io/v1beta2": "v1alpha1", "clusterctl.cluster.x-k8s.io": ""}
        },
        "spec": {
            "group": group,
            "names": {
                "kind": kind, "listKind": format!("{kind}List"),
                "plural": plural, "singular": kind.to_lowercase()
            },
            "scope": "Namespaced",
            "versions": [version]
        }
    })
}

/// What a provider's components grant Cluster API's manager on its kinds: a ClusterRole that
/// Cluster API's aggregated manager role takes in (`aggregate-to-manager`).
const MANAGER_ROLE: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: e2e-stand-in-providers
  labels: {cluster.x-k8s.io/aggregate-to-manager: "true"}
rules:
  - apiGroups: [controlplane.e2e.captf.io, bootstrap.e2e.captf.io]
    resources: ["*"]
    verbs: [get, list, watch, create, update, patch, delete]
"#;

/// Installs the stand-in control plane and bootstrap config kinds, with their templates, and
/// Cluster API's access to them.
pub async fn install(client: &kube::Client) -> anyhow::Result<()> {
    apply_yaml(client, MANAGER_ROLE).await?;
    for (group, kind, status) in [
        (CONTROL_PLANE_GROUP, "TestControlPlane", true),
        (CONTROL_PLANE_GROUP, "TestControlPlaneTemplate", false),
        (BOOTSTRAP_GROUP, "TestConfig", true),
        (BOOTSTRAP_GROUP, "TestConfigTemplate", false),
    ] {
        apply_yaml(client, &crd(group, kind, status).to_string()).await?;
    }
    Ok(())
}

/// What the stand-in control plane's provider does once its control plane is up: marks the
/// `TestControlPlane` initialized, as Cluster API reads it, and writes the workload cluster's
/// kubeconfig Secret `<cluster>-kubeconfig`. The workload cluster is the test's own control
/// plane (`workload`'s admin kubeconfig): its API is reachable from every test node, and the
/// Nodes [`join_nodes`] registers there are the workload cluster's nodes.
pub async fn initialize_control_plane(
    client: &kube::Client,
    ns: &str,
    name: &str,
    workload: &captf_testenv::TestEnv,
) -> anyhow::Result<()> {
    let kubeconfig = std::fs::read_to_string(workload.kubeconfig())
        .with_context(|| workload.kubeconfig().display().to_string())?;
    apply_yaml(
        client,
        &json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {
                "name": format!("{name}-kubeconfig"), "namespace": ns,
                "labels": {"cluster.x-k8s.io/cluster-name": name}
            },
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"value": kubeconfig}
        })
        .to_string(),
    )
    .await?;
    let control_planes: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(CONTROL_PLANE_GROUP, "v1alpha1", "TestControlPlane"),
            "testcontrolplanes",
        ),
    );
    let version = control_planes.get(name).await?.data["spec"]["version"].clone();
    control_planes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "version": version,
                "initialization": {"controlPlaneInitialized": true}
            }})),
        )
        .await
        .with_context(|| format!("marking TestControlPlane {ns}/{name} initialized"))?;
    Ok(())
}

/// What a machine joining the workload cluster does: a Node whose `spec.providerID` is the
/// machine's, so Cluster API sets the Machine's `status.nodeRef` (and a MachinePool's
/// `status.nodeRefs`). The Node is unschedulable: no kubelet runs behind it.
pub async fn join_nodes(workload: &kube::Client, provider_ids: &[String]) -> anyhow::Result<()> {
    for id in provider_ids {
        let (_, path) = id
            .split_once(":///")
            .ok_or_else(|| anyhow::anyhow!("a providerID of the form <scheme>:///<path>: {id}"))?;
        let name = format!("stand-in.{}", path.replace('/', "."));
        apply_yaml(
            workload,
            &json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {"captf.io/stand-in": "true"}},
                "spec": {"providerID": id, "unschedulable": true}
            })
            .to_string(),
        )
        .await?;
    }
    Ok(())
}
