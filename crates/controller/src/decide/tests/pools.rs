//! Pool membership.

use super::*;

pub(super) fn rows() -> Rows {
    use Operation::*;
    use Want::*;
    vec![
        // Pool membership.
        (
            "converging pool refreshes every 30 s",
            pool().with(|s| {
                s.observed.membership_converging = true;
                s.observed.last_refresh = Some(t(NOW - 40))
            }),
            Run(Refresh, Reason::MembershipConverging),
        ),
        (
            "converging replaces the doubling pending delay",
            pool().with(|s| {
                s.observed.membership_converging = true;
                s.observed.health_pending = true;
                s.observed.pending_refreshes = 5;
                s.observed.last_refresh = Some(t(NOW - 40))
            }),
            Run(Refresh, Reason::MembershipConverging),
        ),
        (
            "converging waits for its deadline",
            pool().with(|s| {
                s.observed.membership_converging = true;
                s.observed.last_refresh = Some(t(NOW - 10))
            }),
            WaitFor(
                Reason::UpToDate,
                j(Duration::from_secs(30)) - Duration::from_secs(10),
            ),
        ),
        (
            "refresh-after-apply outranks converging",
            pool().with(|s| {
                s.observed.membership_converging = true;
                s.observed.apply_health_definite = false;
                s.observed.last_refresh = Some(t(NOW - 600))
            }),
            Run(Refresh, Reason::RefreshAfterApply),
        ),
        (
            "a failed refresh backs off while converging",
            pool().with(|s| {
                s.observed.membership_converging = true;
                s.observed.last_refresh = Some(t(NOW - 40));
                s.history.refresh.failures = 1;
                s.history.refresh.last_failure = Some(t(NOW - 10))
            }),
            Wait(Reason::UpToDate),
        ),
        (
            "membership interval due",
            pool().with(|s| s.observed.last_refresh = Some(t(NOW - 90))),
            Run(Refresh, Reason::MembershipRefreshDue),
        ),
        (
            "membership outranks drift",
            pool().with(|s| {
                s.observed.last_refresh = Some(t(NOW - 90));
                s.observed.last_drift_check = Some(t(0))
            }),
            Run(Refresh, Reason::MembershipRefreshDue),
        ),
        (
            "membership interval off",
            pool().with(|s| {
                s.policy.membership_interval = None;
                s.observed.last_refresh = Some(t(NOW - 90));
                s.observed.last_drift_check = Some(t(NOW - 60))
            }),
            Wait(Reason::UpToDate),
        ),
        (
            "an input change outranks converging",
            pool().with(|s| {
                s.observed.membership_converging = true;
                s.inputs_hash = Some("h2:b".into())
            }),
            Run(Apply, Reason::InputsChanged),
        ),
        (
            "pools refresh pending health flat every 30 s",
            pool().with(|s| {
                s.policy.membership_interval = None;
                s.observed.health_pending = true;
                s.observed.pending_refreshes = 6;
                s.observed.last_refresh = Some(t(NOW - 35))
            }),
            Run(Refresh, Reason::HealthPending),
        ),
    ]
}

#[test]
fn table() {
    run(rows());
}
