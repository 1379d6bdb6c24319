//! Contract version, roles and reserved names (api.md §2.1).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The contract version this crate implements; independent of the CRD API version.
pub const VERSION: &str = "v1alpha1";

/// Prefix of every controller-injected variable; modules may not declare others.
pub const RESERVED_PREFIX: &str = "captf_";

/// Maximum number of inline user variables (`spec.variables`), enforced at admission.
pub const MAX_VARIABLES: usize = 256;

/// Module meta-arguments; a user variable with one of these names would be
/// parsed by Terraform as the meta-argument instead of being forwarded.
pub const META_ARGUMENTS: [&str; 8] = [
    "source",
    "version",
    "providers",
    "count",
    "for_each",
    "depends_on",
    "lifecycle",
    "locals",
];

/// Supported contract versions, newest last.
pub fn versions() -> &'static [&'static str] {
    &[VERSION]
}

/// Which contract a module implements; implied by the kind referencing its image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Infrastructure of a whole cluster (TerraformCluster).
    Cluster,
    /// One machine (TerraformMachine).
    Machine,
    /// A group of machines scaled by the module (TerraformMachinePool).
    MachinePool,
}

impl Role {
    /// Every role, in documentation order.
    pub const ALL: [Role; 3] = [Role::Cluster, Role::Machine, Role::MachinePool];

    /// The role's name as used in the contract (`cluster`, `machine`, `machinepool`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Cluster => "cluster",
            Role::Machine => "machine",
            Role::MachinePool => "machinepool",
        }
    }

    /// The CAPTF kind that renders this role.
    pub fn kind(self) -> &'static str {
        match self {
            Role::Cluster => "TerraformCluster",
            Role::Machine => "TerraformMachine",
            Role::MachinePool => "TerraformMachinePool",
        }
    }

    /// The short kind used in object names such as `captf-inputs-<short>-<name>`.
    pub fn kind_short(self) -> &'static str {
        match self {
            Role::Cluster => "c",
            Role::Machine => "m",
            Role::MachinePool => "mp",
        }
    }

    /// The role rendered by a kind, if `kind` is one of the three Terraform* kinds.
    pub fn from_kind(kind: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.kind() == kind)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| Error::UnknownRole { role: s.to_owned() })
    }
}
