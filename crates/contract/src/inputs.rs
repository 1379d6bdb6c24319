//! Typed contract inputs per role (api.md §2.2.1–2.2.5, §2.2.8).
//!
//! The structs serialize to exactly the tfvars keys of the contract. Every
//! attribute is always present: optional values render as `null`, lists as
//! `[]` and maps as `{}` (Rust has no nil slice, so the Go "nil → `[]`" rules
//! hold by construction). They also deserialize, leniently accepting `null`
//! for lists and maps, so a durable `terraform.tfvars.json` can be read back.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::role::{Role, VERSION};

/// Value of the `captf.io/managed-by` tag.
pub const MANAGED_BY_VALUE: &str = "captf";

/// The six `captf_tags` keys, in their fixed documented order.
pub const TAG_KEYS: [&str; 6] = [
    "captf.io/cluster",
    "captf.io/namespace",
    "captf.io/kind",
    "captf.io/name",
    "captf.io/managed-by",
    "captf.io/template",
];

/// Builds the six `captf_tags`.
///
/// `namespace` is the Terraform* object's namespace; `template` is its
/// `cluster.x-k8s.io/cloned-from-name` annotation or `""` (the key is always present).
pub fn tags(
    cluster: &str,
    namespace: &str,
    role: Role,
    name: &str,
    template: &str,
) -> BTreeMap<String, String> {
    let values = [
        cluster,
        namespace,
        role.kind(),
        name,
        MANAGED_BY_VALUE,
        template,
    ];
    TAG_KEYS
        .iter()
        .zip(values)
        .map(|(k, v)| ((*k).to_owned(), v.to_owned()))
        .collect()
}

/// `captf_cluster`: the owning CAPI Cluster (no uid or metadata, so a move never re-applies).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterRef {
    /// Cluster name.
    pub name: String,
    /// Cluster namespace.
    pub namespace: String,
}

/// `captf_object`: the Terraform* object the inputs are rendered for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRef {
    /// `TerraformCluster`, `TerraformMachine` or `TerraformMachinePool`.
    pub kind: String,
    /// Object name.
    pub name: String,
    /// Object namespace.
    pub namespace: String,
}

/// The four inputs every role receives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommonInputs {
    /// `captf_contract`: always [`VERSION`].
    #[serde(rename = "captf_contract")]
    pub contract: String,
    /// `captf_cluster`.
    #[serde(rename = "captf_cluster")]
    pub cluster: ClusterRef,
    /// `captf_object`.
    #[serde(rename = "captf_object")]
    pub object: ObjectRef,
    /// `captf_tags`: built by [`tags`].
    #[serde(rename = "captf_tags")]
    pub tags: BTreeMap<String, String>,
}

impl CommonInputs {
    /// Builds the common inputs; tags use the object's namespace, not the cluster's.
    pub fn new(
        cluster: &str,
        cluster_namespace: &str,
        role: Role,
        name: &str,
        namespace: &str,
        template: &str,
    ) -> Self {
        CommonInputs {
            contract: VERSION.to_owned(),
            cluster: ClusterRef {
                name: cluster.to_owned(),
                namespace: cluster_namespace.to_owned(),
            },
            object: ObjectRef {
                kind: role.kind().to_owned(),
                name: name.to_owned(),
                namespace: namespace.to_owned(),
            },
            tags: tags(cluster, namespace, role, name, template),
        }
    }
}

/// A control plane endpoint (input form, and the cluster `control_plane_endpoint` output).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Host name or IP.
    pub host: String,
    /// Port, 1–65535.
    pub port: i32,
}

/// `cluster_network`: present with every attribute once any Cluster field is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterNetwork {
    /// Pod CIDRs (`[]` when unset).
    #[serde(default, deserialize_with = "null_as_default")]
    pub pods: Vec<String>,
    /// Service CIDRs (`[]` when unset).
    #[serde(default, deserialize_with = "null_as_default")]
    pub services: Vec<String>,
    /// Service DNS domain.
    pub service_domain: Option<String>,
    /// API server port.
    pub api_server_port: Option<i32>,
}

impl ClusterNetwork {
    /// Maps `Cluster.spec.clusterNetwork` to the input: `None` (rendered `null`)
    /// only when no field is set. A field is "set" when it is `Some`, even if empty.
    pub fn from_fields(
        pods: Option<Vec<String>>,
        services: Option<Vec<String>>,
        service_domain: Option<String>,
        api_server_port: Option<i32>,
    ) -> Option<Self> {
        if pods.is_none()
            && services.is_none()
            && service_domain.is_none()
            && api_server_port.is_none()
        {
            return None;
        }
        Some(ClusterNetwork {
            pods: pods.unwrap_or_default(),
            services: services.unwrap_or_default(),
            service_domain,
            api_server_port,
        })
    }
}

/// Inputs of the `cluster` role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterInputs {
    /// The four common inputs.
    #[serde(flatten)]
    pub common: CommonInputs,
    /// Endpoint to use instead of creating one; `None` asks the module to create it.
    pub control_plane_endpoint: Option<Endpoint>,
    /// `Cluster.spec.topology.version`, verbatim.
    pub kubernetes_version: Option<String>,
    /// Latched control-plane-initialized flag.
    pub control_plane_initialized: bool,
    /// See [`ClusterNetwork::from_fields`].
    pub cluster_network: Option<ClusterNetwork>,
}

/// Inputs of the `machine` role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineInputs {
    /// The four common inputs.
    #[serde(flatten)]
    pub common: CommonInputs,
    /// The cluster module's `exports` output, or `{}` for an externally managed cluster.
    pub captf_cluster_outputs: Value,
    /// Owning CAPI Machine name.
    pub machine_name: String,
    /// Padded standard base64 of the bootstrap Secret's `value` (sensitive).
    pub bootstrap_data: String,
    /// `cloud-config` or `ignition`.
    pub bootstrap_format: String,
    /// `Machine.spec.failureDomain`.
    pub failure_domain: Option<String>,
    /// `Machine.spec.version`, verbatim.
    pub kubernetes_version: Option<String>,
    /// Whether the Machine carries the control-plane label.
    pub control_plane: bool,
}

/// Autoscaler bounds parsed from the MachinePool annotations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Autoscaling {
    /// Both annotations present and `0 <= min <= max`.
    pub enabled: bool,
    /// Minimum size (0 when disabled).
    pub min: i32,
    /// Maximum size (0 when disabled).
    pub max: i32,
}

/// Inputs of the `machinepool` role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachinePoolInputs {
    /// The four common inputs.
    #[serde(flatten)]
    pub common: CommonInputs,
    /// The cluster module's `exports` output, or `{}` for an externally managed cluster.
    pub captf_cluster_outputs: Value,
    /// Owning MachinePool name.
    pub machinepool_name: String,
    /// Desired replicas (not hashed while autoscaling is enabled).
    pub replicas: i32,
    /// Padded standard base64 of the bootstrap Secret's `value` (sensitive).
    pub bootstrap_data: String,
    /// `cloud-config` or `ignition`.
    pub bootstrap_format: String,
    /// `MachinePool.spec.failureDomains` (`[]` = module chooses).
    #[serde(default, deserialize_with = "null_as_default")]
    pub failure_domains: Vec<String>,
    /// Failure domain names the cluster reports.
    #[serde(default, deserialize_with = "null_as_default")]
    pub cluster_failure_domains: Vec<String>,
    /// `MachinePool.spec.template.spec.version`.
    pub kubernetes_version: Option<String>,
    /// `MachinePool.spec.template.metadata.labels` (`{}` when absent).
    #[serde(default, deserialize_with = "null_as_default")]
    pub node_labels: BTreeMap<String, String>,
    /// Autoscaler bounds.
    pub autoscaling: Autoscaling,
}

/// The inputs of any one role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleInputs {
    /// `cluster` role inputs.
    Cluster(ClusterInputs),
    /// `machine` role inputs.
    Machine(MachineInputs),
    /// `machinepool` role inputs.
    MachinePool(MachinePoolInputs),
}

impl RoleInputs {
    /// The role these inputs belong to.
    pub fn role(&self) -> Role {
        match self {
            RoleInputs::Cluster(_) => Role::Cluster,
            RoleInputs::Machine(_) => Role::Machine,
            RoleInputs::MachinePool(_) => Role::MachinePool,
        }
    }

    /// The common inputs.
    pub fn common(&self) -> &CommonInputs {
        match self {
            RoleInputs::Cluster(i) => &i.common,
            RoleInputs::Machine(i) => &i.common,
            RoleInputs::MachinePool(i) => &i.common,
        }
    }

    /// What the inputs hash covers: for a pool with autoscaling enabled,
    /// `replicas` is zeroed so the observed count never triggers a re-apply.
    pub fn hash_view(&self) -> RoleInputs {
        match self {
            RoleInputs::MachinePool(p) if p.autoscaling.enabled => {
                RoleInputs::MachinePool(MachinePoolInputs {
                    replicas: 0,
                    ..p.clone()
                })
            }
            other => other.clone(),
        }
    }

    /// What an approval covers: for a pool, `bootstrap_data` is blanked so an
    /// approval survives bootstrap token rotation. Hashing applies
    /// [`RoleInputs::hash_view`] on top.
    pub fn approval_view(&self) -> RoleInputs {
        match self {
            RoleInputs::MachinePool(p) => RoleInputs::MachinePool(MachinePoolInputs {
                bootstrap_data: String::new(),
                ..p.clone()
            }),
            other => other.clone(),
        }
    }

    /// The tfvars object of the contract inputs (keys as in [`crate::input_names`]).
    pub fn to_value(&self) -> Result<Value> {
        let v = match self {
            RoleInputs::Cluster(i) => serde_json::to_value(i),
            RoleInputs::Machine(i) => serde_json::to_value(i),
            RoleInputs::MachinePool(i) => serde_json::to_value(i),
        };
        v.map_err(Error::Encode)
    }
}

impl From<ClusterInputs> for RoleInputs {
    fn from(i: ClusterInputs) -> Self {
        RoleInputs::Cluster(i)
    }
}

impl From<MachineInputs> for RoleInputs {
    fn from(i: MachineInputs) -> Self {
        RoleInputs::Machine(i)
    }
}

impl From<MachinePoolInputs> for RoleInputs {
    fn from(i: MachinePoolInputs) -> Self {
        RoleInputs::MachinePool(i)
    }
}

fn null_as_default<'de, D, T>(d: D) -> std::result::Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}
