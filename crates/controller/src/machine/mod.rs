//! What a TerraformMachine decides apart from the shared flow, as pure functions over what the
//! pass observed: the policy it inherits from its cluster, its health samples and the
//! remediation request on its Machine, and the checks of its outputs against its inputs.

mod health;
mod policy;

pub use health::{
    RemediationChange, missing_provider_id, next_unhealthy_samples, remediation_change,
};
pub use policy::{
    MachinePolicy, Remediation, ZeroInterval, inherited_drift_interval, inherited_identity,
    machine_policy,
};

#[cfg(test)]
mod tests;
