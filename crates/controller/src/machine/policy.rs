//! The operational policy a machine inherits from its TerraformCluster, field by field: its
//! own field, then the cluster's `spec.defaults`, then the cluster's own field where one
//! exists, then the built-in default. Source and variables are never inherited.

use std::time::Duration;

use captf_api::{IdentityReference, TerraformCluster, TerraformMachine};

/// Built-in `remediation.unhealthyThreshold`.
pub const DEFAULT_UNHEALTHY_THRESHOLD: u32 = 3;
/// Built-in `remediation.healthCheckIntervalSeconds`.
pub const DEFAULT_HEALTH_CHECK_INTERVAL: Duration = Duration::from_secs(300);

/// Health-driven remediation, merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remediation {
    pub annotate_machine: bool,
    pub unhealthy_threshold: u32,
    pub health_check_interval: Duration,
}

/// A machine's effective policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachinePolicy {
    /// The TerraformClusterIdentity its Jobs run with, if any layer names one.
    pub identity: Option<String>,
    /// Between drift checks; `None` when disabled.
    pub drift_interval: Option<Duration>,
    pub remediation: Remediation,
}

/// The identity of a machine or pool whose own `identityRef` is `own`: its own, else the
/// cluster's `spec.defaults.identityRef`, else the cluster's own `spec.identityRef`.
pub fn inherited_identity(
    own: Option<&IdentityReference>,
    cluster: Option<&TerraformCluster>,
) -> Option<String> {
    own.or_else(|| {
        cluster
            .and_then(|c| c.spec.defaults.as_ref())
            .and_then(|d| d.identity_ref.as_ref())
    })
    .or_else(|| cluster.and_then(|c| c.spec.workspace.identity_ref.as_ref()))
    .map(|r| r.name.clone())
}

/// Whether `intervalSeconds: 0` turns drift checks off: a machine's may be, a pool's never
/// (its drift check is also how membership changes made outside CAPTF are found).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroInterval {
    Disables,
    Ignored,
}

/// The drift interval of a machine or pool whose own `drift.intervalSeconds` is `own`: its own,
/// else the cluster's `spec.defaults.drift`, else `default` (`--drift-default-interval`).
/// `None` when the checks are off.
pub fn inherited_drift_interval(
    own: Option<i32>,
    cluster: Option<&TerraformCluster>,
    default: Duration,
    zero: ZeroInterval,
) -> Option<Duration> {
    let inherited = cluster
        .and_then(|c| c.spec.defaults.as_ref())
        .and_then(|d| d.drift.as_ref())
        .and_then(|d| d.interval_seconds);
    match own.or(inherited) {
        Some(0) if zero == ZeroInterval::Disables => None,
        Some(s) if s > 0 => Some(Duration::from_secs(u64::try_from(s).unwrap_or(0))),
        _ => Some(default),
    }
}

/// The policy of `tm` under `cluster` (`None` while its TerraformCluster is unknown), with the
/// manager's `--drift-default-interval`.
pub fn machine_policy(
    tm: &TerraformMachine,
    cluster: Option<&TerraformCluster>,
    drift_default: Duration,
) -> MachinePolicy {
    let defaults = cluster.and_then(|c| c.spec.defaults.as_ref());
    let identity = inherited_identity(tm.spec.workspace.identity_ref.as_ref(), cluster);
    let drift_interval = inherited_drift_interval(
        tm.spec.drift.as_ref().and_then(|d| d.interval_seconds),
        cluster,
        drift_default,
        ZeroInterval::Disables,
    );
    let own = tm.spec.remediation.as_ref();
    let inherited = defaults.and_then(|d| d.remediation.as_ref());
    let field = |f: fn(&captf_api::MachineRemediation) -> Option<i32>| {
        own.and_then(f)
            .or_else(|| inherited.and_then(f))
            .filter(|v| *v > 0)
            .and_then(|v| u32::try_from(v).ok())
    };
    let remediation = Remediation {
        annotate_machine: own
            .and_then(|r| r.annotate_machine)
            .or_else(|| inherited.and_then(|r| r.annotate_machine))
            .unwrap_or(false),
        unhealthy_threshold: field(|r| r.unhealthy_threshold)
            .unwrap_or(DEFAULT_UNHEALTHY_THRESHOLD),
        health_check_interval: field(|r| r.health_check_interval_seconds)
            .map_or(DEFAULT_HEALTH_CHECK_INTERVAL, |s| {
                Duration::from_secs(u64::from(s))
            }),
    };
    MachinePolicy {
        identity,
        drift_interval,
        remediation,
    }
}
