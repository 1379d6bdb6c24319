//! Delays of the reconcile loop: retry backoff, the pending-health cadence, and the
//! deterministic per-object jitter. Pure functions of their inputs.

use std::time::Duration;

use sha2::{Digest, Sha256};

/// First retry delay after a failure.
pub const RETRY_BASE: Duration = Duration::from_secs(60);
/// Longest retry delay.
pub const RETRY_MAX: Duration = Duration::from_secs(600);
/// Requeue while a Job runs.
pub const ACTIVE_JOB_REQUEUE: Duration = Duration::from_secs(60);
/// Requeue while a Job has no ready pod: its pod may be waiting for an image, and nothing
/// else wakes the pass (the manager does not watch pods).
pub const UNREADY_JOB_REQUEUE: Duration = Duration::from_secs(30);
/// How old an active Job must be before it can be stuck (never started, its per-run Secret
/// gone): the Job controller, the scheduler and the kubelet have had their turn.
pub const STUCK_JOB_AGE: Duration = Duration::from_secs(60);
/// Requeue after a stuck Job was deleted: the next pass starts its operation again, once the
/// garbage collector had a moment to take the Job's pods.
pub const STUCK_JOB_REQUEUE: Duration = Duration::from_secs(5);
/// Requeue while a deletion is held on lost or unreadable state.
pub const STATE_PROBLEM_REQUEUE: Duration = Duration::from_secs(60);
/// Requeue while a TerraformCluster's deletion waits for its machines and pools.
pub const DEPENDENTS_REQUEUE: Duration = Duration::from_secs(30);
/// Longest requeue while waiting for an approval (annotation edits trigger a pass anyway).
pub const APPROVAL_REQUEUE: Duration = Duration::from_secs(600);
/// First delay of the pending-health refresh cadence (and the pools' flat cadence).
pub const PENDING_BASE: Duration = Duration::from_secs(30);
/// Longest delay of the pending-health cadence.
pub const PENDING_MAX: Duration = Duration::from_secs(300);

/// Delay before retry number `failures` (1 for the first retry): 1 min doubling, at most
/// 10 min. Once `failures` reaches the failed-history `limit` (0 counts as 1) the delay is
/// 10 min at once: the history keeps no more failures than that, so a longer streak could not
/// be counted and must not look shorter than it is.
pub fn retry_delay(failures: u32, limit: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    if failures >= limit.max(1) {
        return RETRY_MAX;
    }
    let exponent = (failures - 1).min(16);
    RETRY_BASE.saturating_mul(1 << exponent).min(RETRY_MAX)
}

/// Delay before the next refresh while health reads `pending`, after `pending` consecutive
/// pending samples: 30 s, 30 s, 1 min, 2 min, 4 min, then 5 min.
pub fn pending_refresh_delay(pending: u32) -> Duration {
    if pending <= 2 {
        return PENDING_BASE;
    }
    PENDING_BASE
        .saturating_mul(1 << (pending - 2).min(16))
        .min(PENDING_MAX)
}

/// Deterministic jitter for `interval`: at most a tenth of it, derived from the object's UID so
/// a fleet does not run its checks in lockstep and one object always gets the same offset.
pub fn jitter(uid: &str, interval: Duration) -> Duration {
    let digest = Sha256::digest(uid.as_bytes());
    let seed = u64::from_be_bytes([
        digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7],
    ]);
    let fraction = (seed % 10_000) as f64 / 10_000.0;
    interval.mul_f64(0.1 * fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn retry_delay_doubles_caps_and_saturates() {
        // spec/concepts.md §14.1: limit 0 or 1 → 10m always; 3 → 1m, 2m, 10m; 5 → 1, 2, 4, 8, 10.
        let table = [
            (0, 3, Duration::ZERO),
            (1, 0, 10 * MIN),
            (2, 0, 10 * MIN),
            (1, 1, 10 * MIN),
            (5, 1, 10 * MIN),
            (1, 3, MIN),
            (2, 3, 2 * MIN),
            (3, 3, 10 * MIN),
            (4, 3, 10 * MIN),
            (1, 5, MIN),
            (2, 5, 2 * MIN),
            (3, 5, 4 * MIN),
            (4, 5, 8 * MIN),
            (5, 5, 10 * MIN),
            (40, 100, 10 * MIN), // capped by the maximum
        ];
        for (failures, limit, want) in table {
            assert_eq!(
                retry_delay(failures, limit),
                want,
                "failures={failures} limit={limit}"
            );
        }
    }

    #[test]
    fn pending_cadence() {
        let want = [30, 30, 60, 120, 240, 300, 300];
        for (i, secs) in want.into_iter().enumerate() {
            let n = u32::try_from(i).expect("small") + 1;
            assert_eq!(
                pending_refresh_delay(n),
                Duration::from_secs(secs),
                "sample {n}"
            );
        }
        assert_eq!(pending_refresh_delay(0), Duration::from_secs(30));
    }

    #[test]
    fn jitter_is_bounded_deterministic_and_spread() {
        let interval = Duration::from_secs(1800);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..200 {
            let uid = format!("uid-{i}");
            let j = jitter(&uid, interval);
            assert!(j <= interval / 10, "{j:?}");
            assert_eq!(j, jitter(&uid, interval));
            seen.insert(j.as_secs());
        }
        assert!(
            seen.len() > 100,
            "jitter barely varies: {} distinct values",
            seen.len()
        );
    }
}
