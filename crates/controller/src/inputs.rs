//! Module inputs from the CAPI objects and the Terraform* object: pure functions.

use base64::Engine as _;
use std::collections::BTreeMap;

use captf_api::{TerraformCluster, TerraformMachine, TerraformMachinePool};
use captf_contract::{
    Autoscaling, ClusterInputs, ClusterNetwork, CommonInputs, Endpoint, MachineInputs,
    MachinePoolInputs, Role,
};

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

/// The bootstrap Secret's data, as the bootstrap provider wrote it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bootstrap {
    /// The raw bytes of the `value` key (a gzip payload is not UTF-8).
    pub value: Vec<u8>,
    /// The `format` key, if present.
    pub format: Option<String>,
}

impl Bootstrap {
    /// The `bootstrap_format` input: the `format` key, or `cloud-config` when absent or empty.
    pub fn format_or_default(&self) -> String {
        self.format
            .clone()
            .filter(|f| !f.is_empty())
            .unwrap_or_else(|| DEFAULT_BOOTSTRAP_FORMAT.to_owned())
    }
}

/// The default `bootstrap_format` when the Secret has no `format` key.
pub const DEFAULT_BOOTSTRAP_FORMAT: &str = "cloud-config";

/// The machine role's inputs: the Machine's facts, its bootstrap data (always base64, padded
/// standard alphabet) and the cluster module's `exports` (`{}` when the cluster is managed
/// elsewhere).
pub fn machine_inputs(
    tm: &TerraformMachine,
    machine: &capi::Machine,
    bootstrap: &Bootstrap,
    cluster_outputs: serde_json::Value,
) -> MachineInputs {
    let namespace = tm.metadata.namespace.clone().unwrap_or_default();
    let cluster_namespace = machine
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| namespace.clone());
    MachineInputs {
        common: CommonInputs::new(
            &machine.spec.cluster_name,
            &cluster_namespace,
            Role::Machine,
            tm.metadata.name.as_deref().unwrap_or_default(),
            &namespace,
            &template_tag(&tm.metadata),
        ),
        captf_cluster_outputs: cluster_outputs,
        machine_name: machine.metadata.name.clone().unwrap_or_default(),
        bootstrap_data: base64::engine::general_purpose::STANDARD.encode(&bootstrap.value),
        bootstrap_format: bootstrap.format_or_default(),
        failure_domain: machine.spec.failure_domain.clone(),
        kubernetes_version: machine.spec.version.clone(),
        control_plane: machine.control_plane(),
    }
}

/// The cluster-autoscaler's node-group bounds on a MachinePool.
pub const AUTOSCALER_MIN: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";
pub const AUTOSCALER_MAX: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";

/// Autoscaling from the MachinePool's annotations: on only when both are non-negative integers
/// with min ≤ max; `Err` names what is wrong when they are present but unusable.
pub fn autoscaling(
    annotations: &BTreeMap<String, String>,
) -> std::result::Result<Autoscaling, String> {
    let off = Autoscaling {
        enabled: false,
        min: 0,
        max: 0,
    };
    let (min, max) = match (
        annotations.get(AUTOSCALER_MIN),
        annotations.get(AUTOSCALER_MAX),
    ) {
        (None, None) => return Ok(off),
        (Some(min), Some(max)) => (min, max),
        _ => {
            return Err(format!(
                "set both {AUTOSCALER_MIN} and {AUTOSCALER_MAX}, or neither"
            ));
        }
    };
    match (min.trim().parse::<i32>(), max.trim().parse::<i32>()) {
        (Ok(min), Ok(max)) if 0 <= min && min <= max => Ok(Autoscaling {
            enabled: true,
            min,
            max,
        }),
        _ => Err(format!(
            "{AUTOSCALER_MIN}={min:?} and {AUTOSCALER_MAX}={max:?} must be integers with 0 <= min <= max"
        )),
    }
}

/// The `replicas` input: the MachinePool's `spec.replicas` (1 when unset), or while
/// autoscaling the count the module last observed (`status.replicas`), clamped to the bounds.
pub fn pool_replicas(spec: Option<i32>, observed: Option<i32>, scaling: &Autoscaling) -> i32 {
    let wanted = spec.unwrap_or(1);
    if !scaling.enabled {
        return wanted;
    }
    observed.unwrap_or(wanted).clamp(scaling.min, scaling.max)
}

/// The machinepool role's inputs.
pub fn machinepool_inputs(
    pool: &TerraformMachinePool,
    owner: &capi::MachinePool,
    bootstrap: &Bootstrap,
    cluster_outputs: serde_json::Value,
    cluster_failure_domains: Vec<String>,
    scaling: Autoscaling,
) -> MachinePoolInputs {
    let namespace = pool.metadata.namespace.clone().unwrap_or_default();
    let observed = pool.status.as_ref().and_then(|s| s.replicas);
    MachinePoolInputs {
        common: CommonInputs::new(
            &owner.spec.cluster_name,
            &namespace,
            Role::MachinePool,
            pool.metadata.name.as_deref().unwrap_or_default(),
            &namespace,
            &template_tag(&pool.metadata),
        ),
        captf_cluster_outputs: cluster_outputs,
        machinepool_name: owner.metadata.name.clone().unwrap_or_default(),
        replicas: pool_replicas(owner.spec.replicas, observed, &scaling),
        bootstrap_data: base64::engine::general_purpose::STANDARD.encode(&bootstrap.value),
        bootstrap_format: bootstrap.format_or_default(),
        failure_domains: owner.spec.failure_domains.clone(),
        cluster_failure_domains,
        kubernetes_version: owner.spec.template.spec.version.clone(),
        node_labels: owner.spec.template.metadata.labels.clone(),
        autoscaling: scaling,
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

    #[test]
    fn machine_inputs_follow_the_machine_and_its_bootstrap_secret() {
        let tm: TerraformMachine = serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformMachine",
            "metadata": {"name": "md-0-abc", "namespace": "team-a",
                         "annotations": {"cluster.x-k8s.io/cloned-from-name": "md-0-tpl"}},
            "spec": {"source": {"image": "x"}},
        }))
        .expect("terraformmachine");
        let machine = |labels: serde_json::Value, spec: serde_json::Value| -> capi::Machine {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "md-0-xyz", "namespace": "team-a", "labels": labels},
                "spec": spec,
            }))
            .expect("machine")
        };
        let gzip_bytes = vec![0x1f, 0x8b, 0x08, 0x00, 0xff];
        let exports = serde_json::json!({"subnet": "s-1"});
        // (machine labels, machine spec, bootstrap, want: failure domain, version, control
        // plane, format, data)
        let rows = [
            (
                serde_json::json!({"cluster.x-k8s.io/control-plane": ""}),
                serde_json::json!({"clusterName": "prod", "failureDomain": "fd1", "version": "v1.34.2+rke2r1"}),
                Bootstrap {
                    value: b"#cloud-config\n".to_vec(),
                    format: None,
                },
                (
                    Some("fd1"),
                    Some("v1.34.2+rke2r1"),
                    true,
                    "cloud-config",
                    "I2Nsb3VkLWNvbmZpZwo=",
                ),
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"clusterName": "prod"}),
                Bootstrap {
                    value: gzip_bytes.clone(),
                    format: Some("ignition".into()),
                },
                (None, None, false, "ignition", "H4sIAP8="),
            ),
            (
                serde_json::json!({}),
                serde_json::json!({"clusterName": "prod"}),
                Bootstrap {
                    value: b"ab".to_vec(),
                    format: Some(String::new()),
                },
                (None, None, false, "cloud-config", "YWI="),
            ),
        ];
        for (labels, spec, bootstrap, (fd, version, cp, format, data)) in rows {
            let m = machine(labels, spec);
            let inputs = machine_inputs(&tm, &m, &bootstrap, exports.clone());
            assert_eq!(inputs.common.cluster.name, "prod");
            assert_eq!(inputs.common.tags["captf.io/template"], "md-0-tpl");
            assert_eq!(inputs.machine_name, "md-0-xyz");
            assert_eq!(inputs.captf_cluster_outputs, exports);
            assert_eq!(inputs.failure_domain.as_deref(), fd);
            assert_eq!(inputs.kubernetes_version.as_deref(), version);
            assert_eq!(inputs.control_plane, cp);
            assert_eq!(inputs.bootstrap_format, format);
            assert_eq!(inputs.bootstrap_data, data);
        }
    }

    /// name, min annotation, max annotation, expected
    type AutoscalingCase = (
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
        std::result::Result<Autoscaling, String>,
    );
    /// name, MachinePool spec.replicas, observed, autoscaling, expected input
    type ReplicasCase = (
        &'static str,
        Option<i32>,
        Option<i32>,
        &'static Autoscaling,
        i32,
    );

    #[test]
    fn autoscaling_needs_both_bounds_in_order() {
        let on = |min, max| {
            Ok(Autoscaling {
                enabled: true,
                min,
                max,
            })
        };
        let off = Ok(Autoscaling {
            enabled: false,
            min: 0,
            max: 0,
        });
        let cases: [AutoscalingCase; 4] = [
            ("neither", None, None, off),
            ("both", Some("1"), Some("5"), on(1, 5)),
            ("zero minimum", Some("0"), Some("0"), on(0, 0)),
            ("equal", Some("3"), Some("3"), on(3, 3)),
        ];
        for (name, min, max, want) in cases {
            let mut a = BTreeMap::new();
            if let Some(m) = min {
                a.insert(AUTOSCALER_MIN.to_owned(), m.to_owned());
            }
            if let Some(m) = max {
                a.insert(AUTOSCALER_MAX.to_owned(), m.to_owned());
            }
            assert_eq!(autoscaling(&a), want, "{name}");
        }
        for (name, min, max) in [
            ("one only", Some("1"), None),
            ("reversed", Some("5"), Some("1")),
            ("negative", Some("-1"), Some("2")),
            ("not a number", Some("a"), Some("2")),
        ] {
            let mut a = BTreeMap::new();
            if let Some(m) = min {
                a.insert(AUTOSCALER_MIN.to_owned(), m.to_owned());
            }
            if let Some(m) = max {
                a.insert(AUTOSCALER_MAX.to_owned(), m.to_owned());
            }
            assert!(autoscaling(&a).is_err(), "{name}");
        }
    }

    #[test]
    fn pool_replicas_follow_the_machinepool_or_the_module() {
        const OFF: Autoscaling = Autoscaling {
            enabled: false,
            min: 0,
            max: 0,
        };
        const ON: Autoscaling = Autoscaling {
            enabled: true,
            min: 1,
            max: 4,
        };
        let cases: [ReplicasCase; 6] = [
            ("fixed", Some(3), Some(7), &OFF, 3),
            ("fixed, unset", None, None, &OFF, 1),
            ("autoscaling, first apply", Some(2), None, &ON, 2),
            ("autoscaling, observed", Some(2), Some(3), &ON, 3),
            ("autoscaling, observed above max", Some(2), Some(9), &ON, 4),
            ("autoscaling, spec below min", Some(0), None, &ON, 1),
        ];
        for (name, spec, observed, scaling, want) in cases {
            assert_eq!(pool_replicas(spec, observed, scaling), want, "{name}");
        }
    }
}
