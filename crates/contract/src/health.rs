//! The `health` output and its mapping to `InfrastructureHealthy` (api.md §2.4.3, §2.4.5).

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// Derived-only state used when a provisioned instance loses its provider ID;
/// never a module value.
pub const HEALTH_PROVIDER_ID_MISSING: &str = "provider_id_missing";

/// Condition status `True`.
pub const STATUS_TRUE: &str = "True";
/// Condition status `False`.
pub const STATUS_FALSE: &str = "False";
/// Condition status `Unknown`.
pub const STATUS_UNKNOWN: &str = "Unknown";

/// Reason for `pending`.
pub const REASON_INSTANCE_PENDING: &str = "InstancePending";
/// Reason for `running` and healthy.
pub const REASON_HEALTHY: &str = "Healthy";
/// Reason for `running` and not healthy.
pub const REASON_INSTANCE_UNHEALTHY: &str = "InstanceUnhealthy";
/// Reason for `degraded`.
pub const REASON_INSTANCE_DEGRADED: &str = "InstanceDegraded";
/// Reason for `stopped`.
pub const REASON_INSTANCE_STOPPED: &str = "InstanceStopped";
/// Reason for `terminated`.
pub const REASON_INSTANCE_TERMINATED: &str = "InstanceTerminated";
/// Reason for `unknown` or no health at all.
pub const REASON_HEALTH_UNKNOWN: &str = "HealthUnknown";

/// The closed set of module-reported health states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// Not ready yet; keeps the object unprovisioned.
    Pending,
    /// Running; `healthy` decides the condition.
    Running,
    /// Running with reduced function.
    Degraded,
    /// Stopped.
    Stopped,
    /// Gone for good.
    Terminated,
    /// The module cannot tell.
    Unknown,
}

impl HealthState {
    /// Every state, in documented order.
    pub const ALL: [HealthState; 6] = [
        HealthState::Pending,
        HealthState::Running,
        HealthState::Degraded,
        HealthState::Stopped,
        HealthState::Terminated,
        HealthState::Unknown,
    ];

    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Pending => "pending",
            HealthState::Running => "running",
            HealthState::Degraded => "degraded",
            HealthState::Stopped => "stopped",
            HealthState::Terminated => "terminated",
            HealthState::Unknown => "unknown",
        }
    }
}

impl fmt::Display for HealthState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error of parsing a string that is not one of [`HealthState::ALL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownHealthState;

impl FromStr for HealthState {
    type Err = UnknownHealthState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HealthState::ALL
            .into_iter()
            .find(|h| h.as_str() == s)
            .ok_or(UnknownHealthState)
    }
}

/// The decoded `health` output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Health {
    /// Reported state.
    pub state: HealthState,
    /// Only consulted when `state` is `running`.
    pub healthy: bool,
    /// Free text for the condition message.
    pub message: Option<String>,
    /// Machine-readable reasons (`[]` when absent or null).
    pub reasons: Vec<String>,
}

/// `InfrastructureHealthy` as derived from health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCondition {
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// One of the `REASON_*` constants.
    pub reason: &'static str,
    /// `<message>; reasons: a, b`, either part omitted when empty; the reason when both are.
    pub message: String,
}

/// Maps health (or its absence) to the `InfrastructureHealthy` condition.
pub fn health_condition(health: &Option<Health>) -> HealthCondition {
    let Some(h) = health else {
        return HealthCondition {
            status: STATUS_UNKNOWN,
            reason: REASON_HEALTH_UNKNOWN,
            message: REASON_HEALTH_UNKNOWN.to_owned(),
        };
    };
    let (status, reason) = match (h.state, h.healthy) {
        (HealthState::Pending, _) => (STATUS_FALSE, REASON_INSTANCE_PENDING),
        (HealthState::Running, true) => (STATUS_TRUE, REASON_HEALTHY),
        (HealthState::Running, false) => (STATUS_FALSE, REASON_INSTANCE_UNHEALTHY),
        (HealthState::Degraded, _) => (STATUS_FALSE, REASON_INSTANCE_DEGRADED),
        (HealthState::Stopped, _) => (STATUS_FALSE, REASON_INSTANCE_STOPPED),
        (HealthState::Terminated, _) => (STATUS_FALSE, REASON_INSTANCE_TERMINATED),
        (HealthState::Unknown, _) => (STATUS_UNKNOWN, REASON_HEALTH_UNKNOWN),
    };
    let text = h.message.as_deref().unwrap_or("");
    let message = match (text.is_empty(), h.reasons.is_empty()) {
        (true, true) => reason.to_owned(),
        (false, true) => text.to_owned(),
        (true, false) => format!("reasons: {}", h.reasons.join(", ")),
        (false, false) => format!("{text}; reasons: {}", h.reasons.join(", ")),
    };
    HealthCondition {
        status,
        reason,
        message,
    }
}
