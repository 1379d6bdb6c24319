//! The CAPTF v1alpha1 module contract: no Kubernetes client, no I/O.
//!
//! - [`Role`], [`VERSION`] and reserved names ([`role`]);
//! - typed inputs per role and `captf_tags` ([`inputs`]), what the root declares ([`input_specs`]);
//! - user variables and their name rules ([`variables`]), the variables schema an image
//!   publishes ([`varschema`]), and how large variables may be ([`bounds`]);
//! - the generated `main.tf.json` and `terraform.tfvars.json` ([`render()`]);
//! - the `h2:` inputs hash and the pool approval hash ([`hash`], byte layout documented there);
//! - canonical JSON, including the exports canonicalizability check ([`canonical`]);
//! - required outputs, their typed shapes and decoding ([`outputs`], [`decode_outputs`]);
//! - health and its condition mapping ([`health`]).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bounds;
pub mod canonical;
mod decode;
pub mod error;
pub mod hash;
pub mod health;
pub mod inputs;
pub mod outputs;
pub mod render;
pub mod role;
mod spec;
pub mod variables;
pub mod varschema;

pub use canonical::{canonical_json, canonical_json_pretty, canonicalize_exports};
pub use decode::decode_outputs;
pub use error::{Error, Result};
pub use hash::{HASH_SCHEME, approval_hash, inputs_hash};
pub use health::{Health, HealthCondition, HealthState, health_condition};
pub use inputs::{
    Autoscaling, ClusterInputs, ClusterNetwork, ClusterRef, CommonInputs, Endpoint, MachineInputs,
    MachinePoolInputs, ObjectRef, RoleInputs, tags,
};
pub use outputs::{
    Address, AddressType, ClusterOutputs, Decoded, FailureDomain, MachineOutputs,
    MachinePoolOutputs, PoolInstance, RoleOutputs, Violation, required_outputs,
};
pub use render::{
    EXPORTS_SENSITIVE_FILE, EXPORTS_SENSITIVE_OUTPUT, MAX_RENDERED_BYTES, Rendered,
    exports_sensitive_root, render, render_restore_root,
};
pub use role::{MAX_VARIABLES, META_ARGUMENTS, RESERVED_PREFIX, Role, VERSION, versions};
pub use spec::{InputSpec, input_names, input_specs};
pub use variables::{Variable, Variables, parse_variables, validate_variable_name};
