//! When a failed pass is tried again: by what a retry can do about its error ([`Retry`]), and
//! later the more often it failed in a row. A pass that succeeds forgets the count.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::error::Retry;

/// Failures in a row, per object.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Counts a failure of `object`; returns how many in a row, this one included.
    pub fn failed(&self, object: &str) -> u32 {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = failures.entry(object.to_owned()).or_default();
        *n = n.saturating_add(1);
        *n
    }

    /// `object` passed: its next failure is a first again.
    pub fn succeeded(&self, object: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        failures.remove(object);
    }
}

/// What a pass context keeps the failure counts in.
pub trait Retries {
    fn backoff(&self) -> &Backoff;
}

/// When to try again after the `n`-th failure in a row (counted from 1); `None`: when the
/// object changes. Transient trouble retries within seconds, what needs an operator (a quota
/// refusal, RBAC) after half a minute, both doubling to five minutes; a bug doubles from a
/// minute to fifteen.
pub fn delay(retry: Retry, n: u32) -> Option<Duration> {
    let doubling = |first: u64, cap: u64| {
        let factor = 1u64 << n.saturating_sub(1).min(20);
        Duration::from_secs(first.saturating_mul(factor).min(cap))
    };
    match retry {
        Retry::Transient => Some(doubling(2, 300)),
        Retry::Operator => Some(doubling(30, 300)),
        Retry::ObjectChange => None,
        Retry::Bug => Some(doubling(60, 900)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_by_retry_and_failures_in_a_row() {
        let s = |n: u64| Some(Duration::from_secs(n));
        let cases = [
            (Retry::Transient, 1, s(2)),
            (Retry::Transient, 2, s(4)),
            (Retry::Transient, 8, s(256)),
            (Retry::Transient, 9, s(300)),
            (Retry::Transient, u32::MAX, s(300)),
            (Retry::Operator, 1, s(30)),
            (Retry::Operator, 4, s(240)),
            (Retry::Operator, 40, s(300)),
            (Retry::ObjectChange, 1, None),
            (Retry::Bug, 1, s(60)),
            (Retry::Bug, 4, s(480)),
            (Retry::Bug, 5, s(900)),
        ];
        for (retry, n, want) in cases {
            assert_eq!(delay(retry, n), want, "{retry:?} after {n}");
        }
    }

    #[test]
    fn a_success_forgets_the_failures() {
        let backoff = Backoff::default();
        assert_eq!(backoff.failed("a"), 1);
        assert_eq!(backoff.failed("a"), 2);
        assert_eq!(backoff.failed("b"), 1);
        backoff.succeeded("a");
        assert_eq!(backoff.failed("a"), 1);
        assert_eq!(backoff.failed("b"), 2);
    }
}
