//! Required outputs and their typed, normalized shapes (api.md §2.4.1, §2.4.3).

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::health::{Health, HealthState};
use crate::inputs::Endpoint;
use crate::role::Role;

/// Status keeps at most this many pool instances.
pub const MAX_POOL_INSTANCES: usize = 1000;

/// The outputs each role must declare, in documented order.
pub fn required_outputs(role: Role) -> &'static [&'static str] {
    match role {
        Role::Cluster => &[
            "control_plane_endpoint",
            "failure_domains",
            "exports",
            "health",
        ],
        Role::Machine => &[
            "provider_id",
            "addresses",
            "failure_domain",
            "interruptible",
            "health",
        ],
        Role::MachinePool => &[
            "provider_id",
            "provider_id_list",
            "replicas",
            "instances",
            "health",
        ],
    }
}

/// A failure domain reported by the cluster, defaults applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureDomain {
    /// Name, 1–256 characters, unique within the list.
    pub name: String,
    /// Suitable for control-plane machines (`true` when absent or null).
    pub control_plane: bool,
    /// Free-form attributes (`{}` when absent or null).
    pub attributes: BTreeMap<String, String>,
}

/// Kind of a machine address; declaration order is the canonical sort order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum AddressType {
    /// `InternalIP`.
    #[serde(rename = "InternalIP")]
    InternalIp,
    /// `InternalDNS`.
    #[serde(rename = "InternalDNS")]
    InternalDns,
    /// `ExternalIP`.
    #[serde(rename = "ExternalIP")]
    ExternalIp,
    /// `ExternalDNS`.
    #[serde(rename = "ExternalDNS")]
    ExternalDns,
    /// `Hostname`.
    Hostname,
}

impl AddressType {
    /// Every type, in canonical sort order.
    pub const ALL: [AddressType; 5] = [
        AddressType::InternalIp,
        AddressType::InternalDns,
        AddressType::ExternalIp,
        AddressType::ExternalDns,
        AddressType::Hostname,
    ];

    /// The CAPI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AddressType::InternalIp => "InternalIP",
            AddressType::InternalDns => "InternalDNS",
            AddressType::ExternalIp => "ExternalIP",
            AddressType::ExternalDns => "ExternalDNS",
            AddressType::Hostname => "Hostname",
        }
    }

    /// Parses the CAPI spelling.
    pub fn parse(s: &str) -> Option<AddressType> {
        AddressType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

impl fmt::Display for AddressType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A machine address. `Ord` is the canonical order: by type, then address.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Address {
    /// Address type.
    #[serde(rename = "type")]
    pub address_type: AddressType,
    /// The address, 1–256 characters.
    pub address: String,
}

/// One pool member as reported by the module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolInstance {
    /// Provider ID, 1–512 characters.
    pub provider_id: String,
    /// Cloud instance ID, 1–256 characters.
    pub instance_id: Option<String>,
    /// Addresses, sorted canonically (`[]` when absent or null).
    pub addresses: Vec<Address>,
    /// Failure domain name.
    pub failure_domain: Option<String>,
    /// Member state.
    pub state: Option<HealthState>,
}

/// Decoded outputs of the `cluster` role.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterOutputs {
    /// Endpoint created by the module; may stay `None` forever.
    pub control_plane_endpoint: Option<Endpoint>,
    /// Failure domains (`[]` for null or empty; both clear status).
    pub failure_domains: Vec<FailureDomain>,
    /// Exports for machines and pools (`{}` when null); canonicalizable.
    pub exports: Value,
    /// Health.
    pub health: Health,
}

/// Decoded outputs of the `machine` role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MachineOutputs {
    /// Provider ID; non-null here (null or `""` decodes as pending).
    pub provider_id: String,
    /// Addresses, sorted canonically.
    pub addresses: Vec<Address>,
    /// Failure domain the machine landed in.
    pub failure_domain: Option<String>,
    /// Spot/preemptible (`false` when null).
    pub interruptible: bool,
    /// Health.
    pub health: Health,
}

/// Decoded outputs of the `machinepool` role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MachinePoolOutputs {
    /// Group provider ID (`""` treated as null).
    pub provider_id: Option<String>,
    /// Member provider IDs, sorted and de-duplicated.
    pub provider_id_list: Vec<String>,
    /// Observed desired capacity; `None` when not reported (null or absent, e.g. the scaling
    /// group is gone).
    pub replicas: Option<i32>,
    /// Members, at most [`MAX_POOL_INSTANCES`].
    pub instances: Vec<PoolInstance>,
    /// More than [`MAX_POOL_INSTANCES`] members were reported.
    pub instances_truncated: bool,
    /// Health.
    pub health: Health,
}

/// Decoded outputs of any role.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum RoleOutputs {
    /// `cluster` outputs.
    Cluster(ClusterOutputs),
    /// `machine` outputs.
    Machine(MachineOutputs),
    /// `machinepool` outputs.
    MachinePool(MachinePoolOutputs),
}

impl RoleOutputs {
    /// The health every role reports.
    pub fn health(&self) -> &Health {
        match self {
            RoleOutputs::Cluster(o) => &o.health,
            RoleOutputs::Machine(o) => &o.health,
            RoleOutputs::MachinePool(o) => &o.health,
        }
    }
}

/// One contract violation in the outputs. Never quotes the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Output name.
    pub output: &'static str,
    /// Path inside the output (`""` for the output itself), e.g. `[2].type` or `state`.
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "output {}: {}", self.output, self.problem)
        } else if self.field.starts_with('[') {
            write!(f, "output {}{}: {}", self.output, self.field, self.problem)
        } else {
            write!(f, "output {}.{}: {}", self.output, self.field, self.problem)
        }
    }
}

/// Result of [`crate::decode_outputs`], in precedence order.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// Required outputs not declared by the module (`OutputsMissing`; no retry).
    Missing(Vec<&'static str>),
    /// Values violating the contract (`OutputsInvalid`; nothing is written).
    Invalid(Vec<Violation>),
    /// Required outputs still null (`OutputsPending`; keep waiting).
    Pending(Vec<&'static str>),
    /// Every output valid, defaults and normalizations applied.
    Valid(RoleOutputs),
}
