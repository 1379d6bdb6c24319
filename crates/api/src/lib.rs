//! The CAPTF API (`infrastructure.cluster.x-k8s.io/v1alpha1`): the seven kinds, their CRDs, and
//! every label, annotation, finalizer, condition and event name CAPTF uses, plus the names of
//! the objects it creates. No I/O.
#![forbid(unsafe_code)]
// `#[kube(printcolumn(..))]` repeats `type_ = ..` by design; clippy reads that as a duplicate.
#![allow(clippy::duplicated_attributes)]

pub mod annotations;
pub mod cluster;
pub mod common;
mod condition;
pub mod conditions;
pub mod crds;
pub mod events;
pub mod finalizers;
pub mod identity;
pub mod image;
pub mod labels;
pub mod machine;
pub mod machinepool;
pub mod names;
mod schema;
pub mod templates;

pub use cluster::{
    ApplyPolicy, PlanStatus, TerraformCluster, TerraformClusterDefaults, TerraformClusterSpec,
    TerraformClusterStatus,
};
pub use common::*;
pub use condition::{Condition, Term};
pub use identity::{
    AllowedNamespaces, TerraformClusterIdentity, TerraformClusterIdentitySpec,
    TerraformClusterIdentityStatus,
};
pub use machine::{TerraformMachine, TerraformMachineSpec, TerraformMachineStatus};
pub use machinepool::{
    MachinePoolInstance, TerraformMachinePool, TerraformMachinePoolSpec, TerraformMachinePoolStatus,
};
pub use templates::{
    TerraformClusterTemplate, TerraformClusterTemplateSpec, TerraformMachinePoolTemplate,
    TerraformMachinePoolTemplateSpec, TerraformMachineTemplate, TerraformMachineTemplateSpec,
};

/// The API group.
pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// The API version.
pub const VERSION: &str = "v1alpha1";
/// `group/version`.
pub const API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
/// The field manager of every server-side apply the manager makes.
pub const FIELD_MANAGER: &str = "captf-manager";

/// Errors of this crate: each names the field and what is wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A name or namespace is not a valid Kubernetes name.
    #[error("{field} {value:?} is invalid: it must be {rule}")]
    InvalidName {
        field: &'static str,
        value: String,
        rule: &'static str,
    },
    /// An operation string that is not one of the six operations.
    #[error("operation {0:?} is unknown: use one of apply, destroy, drift, refresh, restore, plan")]
    UnknownOperation(String),
    /// A kind that is not a workload kind.
    #[error(
        "kind {0:?} is not a workload kind: use TerraformCluster, TerraformMachine or TerraformMachinePool"
    )]
    UnknownKind(String),
}

impl Error {
    /// A static category, usable as a metric label or event reason.
    pub fn category(&self) -> &'static str {
        match self {
            Error::InvalidName { .. } => "InvalidName",
            Error::UnknownOperation(_) => "UnknownOperation",
            Error::UnknownKind(_) => "UnknownKind",
        }
    }
}
