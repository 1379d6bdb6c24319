//! Pending health, the refresh after an apply, and machines' health-check interval.

use super::*;

pub(super) fn rows() -> Rows {
    use Operation::*;
    use Want::*;
    vec![
        // Health pending.
        (
            "pending health, never refreshed",
            machine().with(|s| {
                s.observed.health_pending = true;
                s.observed.apply_health_definite = false;
                s.observed.last_refresh = None;
                s.history.apply.last_success = Some(t(NOW - 40))
            }),
            Run(Refresh, Reason::RefreshAfterApply),
        ),
        (
            "pending health refreshes after 30 s",
            cluster().with(|s| {
                s.observed.health_pending = true;
                s.observed.pending_refreshes = 1;
                s.observed.last_refresh = Some(t(NOW - 40))
            }),
            Run(Refresh, Reason::HealthPending),
        ),
        (
            "pending health waits out the cadence",
            cluster().with(|s| {
                s.observed.health_pending = true;
                s.observed.pending_refreshes = 3;
                s.observed.last_refresh = Some(t(NOW - 10))
            }),
            WaitFor(Reason::UpToDate, j(MIN) - Duration::from_secs(10)),
        ),
        (
            "a pending refresh deadline beats a later drift deadline",
            cluster().with(|s| {
                s.observed.health_pending = true;
                s.observed.pending_refreshes = 1;
                s.observed.last_refresh = Some(t(NOW - 5));
                s.observed.last_drift_check = Some(t(NOW - 5))
            }),
            WaitFor(
                Reason::UpToDate,
                j(Duration::from_secs(30)) - Duration::from_secs(5),
            ),
        ),
        (
            "a sooner drift deadline beats the pending cadence",
            cluster().with(|s| {
                s.observed.health_pending = true;
                s.observed.pending_refreshes = 6;
                s.observed.last_refresh = Some(t(NOW));
                s.observed.last_drift_check = Some(t(NOW - 30 * 60))
            }),
            WaitFor(Reason::UpToDate, j(30 * MIN) - 30 * MIN),
        ),
        // Refresh after apply.
        (
            "refresh once after a successful apply",
            machine().with(|s| {
                s.observed.apply_health_definite = false;
                s.observed.last_refresh = Some(t(NOW - 600))
            }),
            Run(Refresh, Reason::RefreshAfterApply),
        ),
        (
            "no refresh when one already followed the apply",
            machine().with(|s| {
                s.observed.apply_health_definite = false;
                s.observed.last_refresh = Some(t(NOW - 30))
            }),
            Wait(Reason::UpToDate),
        ),
        (
            "no refresh when the apply's health was definite",
            machine().with(|s| s.observed.last_refresh = None),
            Wait(Reason::UpToDate),
        ),
        (
            "clusters do not refresh after apply",
            cluster().with(|s| {
                s.observed.apply_health_definite = false;
                s.observed.last_refresh = None
            }),
            Wait(Reason::UpToDate),
        ),
        (
            "refresh-after-apply beats drift",
            machine().with(|s| {
                s.observed.apply_health_definite = false;
                s.observed.last_refresh = None;
                s.observed.last_drift_check = Some(t(0))
            }),
            Run(Refresh, Reason::RefreshAfterApply),
        ),
        // Health check interval (machines with annotateMachine).
        (
            "health check due",
            machine().with(|s| {
                s.policy.health_check_interval = Some(5 * MIN);
                s.observed.last_refresh = Some(t(NOW - 6 * 60))
            }),
            Run(Refresh, Reason::HealthCheckDue),
        ),
        (
            "health check keeps the pending cadence",
            machine().with(|s| {
                s.policy.health_check_interval = Some(5 * MIN);
                s.observed.health_pending = true;
                s.observed.pending_refreshes = 1;
                s.observed.last_refresh = Some(t(NOW - 40))
            }),
            Run(Refresh, Reason::HealthPending),
        ),
    ]
}

#[test]
fn table() {
    run(rows());
}
