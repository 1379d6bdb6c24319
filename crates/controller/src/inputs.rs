//! Module inputs from the CAPI objects and the Terraform* object: pure functions.

use captf_api::TerraformCluster;
use captf_contract::{ClusterInputs, ClusterNetwork, CommonInputs, Endpoint, Role};

use crate::capi;

/// The `captf.io/template` tag: the object's `cluster.x-k8s.io/cloned-from-name` annotation.
pub fn template_tag(meta: &kube::api::ObjectMeta) -> String {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(captf_api::annotations::CLONED_FROM_NAME))
        .cloned()
        .unwrap_or_default()
}

/// Facts about earlier applies that the cluster inputs depend on.
#[derive(Clone, Debug, Default)]
pub struct ClusterHistory {
    /// The last rendered `control_plane_initialized` (from the durable inputs) was true.
    pub control_plane_initialized: bool,
    /// `captf.io/endpoint-source=module`: the module owns the endpoint; the input stays null.
    pub endpoint_from_module: bool,
}

/// The cluster role's inputs.
pub fn cluster_inputs(
    tc: &TerraformCluster,
    cluster: &capi::Cluster,
    history: &ClusterHistory,
) -> ClusterInputs {
    let namespace = tc.metadata.namespace.clone().unwrap_or_default();
    let name = tc.metadata.name.clone().unwrap_or_default();
    let cluster_name = cluster.metadata.name.clone().unwrap_or_default();
    let cluster_namespace = cluster
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| namespace.clone());
    let common = CommonInputs::new(
        &cluster_name,
        &cluster_namespace,
        Role::Cluster,
        &name,
        &namespace,
        &template_tag(&tc.metadata),
    );
    let control_plane_endpoint = if history.endpoint_from_module {
        None
    } else {
        cluster
            .spec
            .control_plane_endpoint
            .as_ref()
            .filter(|e| e.is_valid())
            .map(|e| Endpoint {
                host: e.host.clone(),
                port: e.port,
            })
            .or_else(|| {
                tc.spec
                    .control_plane_endpoint
                    .as_ref()
                    .and_then(|e| match (&e.host, e.port) {
                        (Some(host), Some(port)) => Some(Endpoint {
                            host: host.clone(),
                            port,
                        }),
                        _ => None,
                    })
            })
    };
    let network = cluster.spec.cluster_network.as_ref().and_then(|n| {
        ClusterNetwork::from_fields(
            n.pods.as_ref().map(|p| p.cidr_blocks.clone()),
            n.services.as_ref().map(|s| s.cidr_blocks.clone()),
            n.service_domain.clone(),
            n.api_server_port,
        )
    });
    ClusterInputs {
        common,
        control_plane_endpoint,
        kubernetes_version: cluster
            .spec
            .topology
            .as_ref()
            .and_then(|t| t.version.clone()),
        control_plane_initialized: cluster.control_plane_initialized()
            || history.control_plane_initialized,
        cluster_network: network,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(json: serde_json::Value) -> capi::Cluster {
        serde_json::from_value(json).expect("cluster")
    }

    fn tc(json: serde_json::Value) -> TerraformCluster {
        serde_json::from_value(json).expect("terraformcluster")
    }

    #[test]
    fn inputs_follow_the_cluster() {
        let tc = tc(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformCluster",
            "metadata": {"name": "prod-abc", "namespace": "team-a", "annotations": {"cluster.x-k8s.io/cloned-from-name": "prod-tpl"}},
            "spec": {"source": {"image": "x"}, "identityRef": {"name": "id"}, "controlPlaneEndpoint": {"host": "tc.example", "port": 443}},
        }));
        let c = cluster(serde_json::json!({
            "metadata": {"name": "prod", "namespace": "team-a"},
            "spec": {
                "topology": {"version": "v1.34.2"},
                "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}, "serviceDomain": "cluster.local"},
                "controlPlaneEndpoint": {"host": "api.example", "port": 6443},
            },
            "status": {"initialization": {"controlPlaneInitialized": true}},
        }));
        let inputs = cluster_inputs(&tc, &c, &ClusterHistory::default());
        assert_eq!(inputs.common.cluster.name, "prod");
        assert_eq!(inputs.common.tags["captf.io/template"], "prod-tpl");
        assert_eq!(
            inputs.control_plane_endpoint,
            Some(Endpoint {
                host: "api.example".into(),
                port: 6443
            })
        );
        assert_eq!(inputs.kubernetes_version.as_deref(), Some("v1.34.2"));
        assert!(inputs.control_plane_initialized);
        let net = inputs.cluster_network.expect("network present");
        assert_eq!(net.pods, ["192.168.0.0/16"]);
        assert!(net.services.is_empty());
        assert_eq!(net.api_server_port, None);
    }

    #[test]
    fn endpoint_precedence_and_latches() {
        let t = tc(serde_json::json!({
            "metadata": {"name": "c", "namespace": "n"},
            "spec": {"source": {"image": "x"}, "identityRef": {"name": "id"}, "controlPlaneEndpoint": {"host": "tc.example", "port": 443}},
        }));
        let bare = cluster(serde_json::json!({"metadata": {"name": "c", "namespace": "n"}}));
        let from_spec = cluster_inputs(&t, &bare, &ClusterHistory::default());
        assert_eq!(
            from_spec.control_plane_endpoint,
            Some(Endpoint {
                host: "tc.example".into(),
                port: 443
            })
        );
        assert_eq!(
            from_spec.cluster_network, None,
            "no clusterNetwork field set renders null"
        );
        assert!(!from_spec.control_plane_initialized);
        let module = cluster_inputs(
            &t,
            &bare,
            &ClusterHistory {
                endpoint_from_module: true,
                control_plane_initialized: true,
            },
        );
        assert_eq!(
            module.control_plane_endpoint, None,
            "a module-owned endpoint is always rendered null"
        );
        assert!(
            module.control_plane_initialized,
            "latched from the last rendered inputs"
        );
        let half = cluster(
            serde_json::json!({"metadata": {"name": "c"}, "spec": {"controlPlaneEndpoint": {"host": "only-host"}}}),
        );
        let t2 = tc(
            serde_json::json!({"metadata": {"name": "c", "namespace": "n"}, "spec": {"source": {"image": "x"}}}),
        );
        assert_eq!(
            cluster_inputs(&t2, &half, &ClusterHistory::default()).control_plane_endpoint,
            None
        );
    }
}
