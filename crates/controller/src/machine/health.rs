//! Health samples of a provisioned machine and the remediation request they lead to.

use captf_api::conditions::{Status, reasons};

/// `status.unhealthySamples` after one more sample read as `reason` (the
/// `InfrastructureHealthy` reason): healthy resets, unhealthy, degraded and stopped count,
/// and pending, unknown and terminated leave the count as it was.
pub fn next_unhealthy_samples(previous: Option<i32>, reason: &str) -> Option<i32> {
    match reason {
        reasons::HEALTHY => None,
        reasons::INSTANCE_UNHEALTHY | reasons::INSTANCE_DEGRADED | reasons::INSTANCE_STOPPED => {
            Some(previous.unwrap_or(0).saturating_add(1))
        }
        _ => previous,
    }
}

/// `InfrastructureHealthy` of a provisioned machine whose `provider_id` output reads empty,
/// from the reason it had (`previous`) and whether a refresh or drift check finished in this
/// pass (`sampled`). The first empty sample may be a module's transient read
/// (`Unknown/ProviderIDMissing`); a second consecutive one means the instance is gone
/// (`False/InstanceTerminated`, which stays until the output comes back).
pub fn missing_provider_id(previous: Option<&str>, sampled: bool) -> (Status, &'static str) {
    match previous {
        Some(reasons::INSTANCE_TERMINATED) => (Status::False, reasons::INSTANCE_TERMINATED),
        Some(reasons::PROVIDER_ID_MISSING) if sampled => {
            (Status::False, reasons::INSTANCE_TERMINATED)
        }
        _ => (Status::Unknown, reasons::PROVIDER_ID_MISSING),
    }
}

/// What to do with the remediation request on the Machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemediationChange {
    /// Ask CAPI to remediate: `cluster.x-k8s.io/remediate-machine` and
    /// `captf.io/remediation-requested=<reason>`.
    Request(String),
    /// Take back a request CAPTF made.
    Withdraw,
    Keep,
}

/// The remediation change for a machine whose health reads `reason` after `samples`
/// consecutive unhealthy samples. `requested` is the reason CAPTF asked with, if it did (a
/// request someone else made is never touched). A terminated instance is asked for at once:
/// it will not come back.
pub fn remediation_change(
    annotate: bool,
    threshold: u32,
    samples: Option<i32>,
    reason: &str,
    requested: Option<&str>,
) -> RemediationChange {
    if reason == reasons::HEALTHY {
        return match requested {
            Some(_) => RemediationChange::Withdraw,
            None => RemediationChange::Keep,
        };
    }
    if !annotate || requested.is_some() {
        return RemediationChange::Keep;
    }
    // Only a reading that counts (or a terminated instance) asks: a pending or unknown one
    // after the threshold says nothing new about the instance.
    let counts = next_unhealthy_samples(Some(0), reason) == Some(1);
    let reached = samples
        .and_then(|s| u32::try_from(s).ok())
        .is_some_and(|s| s >= threshold.max(1));
    if (counts && reached) || reason == reasons::INSTANCE_TERMINATED {
        RemediationChange::Request(reason.to_owned())
    } else {
        RemediationChange::Keep
    }
}
