//! Reading a role's outputs from its state: `OutputsValid` and `InfrastructureHealthy`, as
//! every kind reports them.

use captf_api::conditions::{Status, reasons, types};
use captf_contract::{Decoded, Health, Role, RoleOutputs};
use k8s_openapi::jiff::Timestamp;

use crate::conditions::Conditions;

/// The role's outputs decoded from `state`, with `OutputsValid` saying why there are none.
/// The engines drop null root outputs from the state; the generated root declares every
/// contract output, so an absent one is null, not undeclared.
pub fn decode(
    role: Role,
    state: &captf_state::DecodedState,
    conds: &mut Conditions,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<RoleOutputs> {
    let mut outputs = state.outputs.clone();
    for name in captf_contract::required_outputs(role) {
        outputs
            .entry((*name).to_owned())
            .or_insert(serde_json::Value::Null);
    }
    let (status, reason, message, valid) = match captf_contract::decode_outputs(role, &outputs) {
        Decoded::Valid(o) => (Status::True, reasons::OUTPUTS_VALID, String::new(), Some(o)),
        Decoded::Pending(names) => (
            Status::Unknown,
            reasons::OUTPUTS_PENDING,
            format!("outputs not known yet: {}", names.join(", ")),
            None,
        ),
        Decoded::Missing(names) => (
            Status::False,
            reasons::OUTPUTS_MISSING,
            format!("the module does not declare {}", names.join(", ")),
            None,
        ),
        Decoded::Invalid(violations) => {
            let text: Vec<String> = violations.iter().map(ToString::to_string).collect();
            (
                Status::False,
                reasons::OUTPUTS_INVALID,
                text.join("; "),
                None,
            )
        }
    };
    conds.set(
        types::OUTPUTS_VALID,
        status,
        reason,
        &message,
        generation,
        now,
    );
    valid
}

/// `InfrastructureHealthy` from the module's `health` output (none: unknown); returns the
/// reason it set.
pub fn health(
    health: &Option<Health>,
    conds: &mut Conditions,
    generation: Option<i64>,
    now: Timestamp,
) -> &'static str {
    let hc = captf_contract::health_condition(health);
    let status = match hc.status {
        "True" => Status::True,
        "False" => Status::False,
        _ => Status::Unknown,
    };
    conds.set(
        types::INFRASTRUCTURE_HEALTHY,
        status,
        hc.reason,
        &hc.message,
        generation,
        now,
    );
    hc.reason
}

/// What a health reading means for the refresh schedule.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reading {
    /// The instance is pending: refreshes follow until it is not.
    pub pending: bool,
    /// Neither pending nor unknown: no refresh needs to follow the apply.
    pub definite: bool,
}

impl Reading {
    /// From the `InfrastructureHealthy` reason a reading set.
    pub fn from_reason(reason: &str) -> Self {
        Reading {
            pending: reason == reasons::INSTANCE_PENDING,
            definite: !matches!(
                reason,
                reasons::INSTANCE_PENDING | reasons::HEALTH_UNKNOWN | reasons::PROVIDER_ID_MISSING
            ),
        }
    }
}
