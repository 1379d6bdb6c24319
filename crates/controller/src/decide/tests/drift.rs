//! Drift remediation and the drift-check schedule.

use super::*;

pub(super) fn rows() -> Rows {
    use Operation::*;
    use Want::*;
    vec![
        // Drift remediation.
        (
            "drift remediation",
            cluster().with(|s| {
                s.observed.drift_found = true;
                s.policy.drift_action = DriftAction::Remediate
            }),
            Run(Apply, Reason::DriftRemediation),
        ),
        (
            "drift reported only",
            cluster().with(|s| {
                s.observed.drift_found = true;
                s.observed.last_drift_check = Some(t(NOW - 60))
            }),
            Wait(Reason::UpToDate),
        ),
        (
            "remediation ranks below an input change",
            cluster().with(|s| {
                s.observed.drift_found = true;
                s.policy.drift_action = DriftAction::Remediate;
                s.inputs_hash = Some("h2:b".into())
            }),
            Run(Apply, Reason::InputsChanged),
        ),
        (
            "remediation ranks above a due drift",
            cluster().with(|s| {
                s.observed.drift_found = true;
                s.policy.drift_action = DriftAction::Remediate;
                s.observed.last_drift_check = Some(t(0))
            }),
            Run(Apply, Reason::DriftRemediation),
        ),
        (
            "remediation stops at the failed limit",
            cluster().with(|s| {
                s.observed.drift_found = true;
                s.policy.drift_action = DriftAction::Remediate;
                s.observed.failed_remediations = 3;
                s.observed.last_drift_check = Some(t(NOW - 60))
            }),
            Wait(Reason::UpToDate),
        ),
        (
            "remediation backs off after a failure",
            cluster().with(|s| {
                s.observed.drift_found = true;
                s.policy.drift_action = DriftAction::Remediate;
                s.observed.failed_remediations = 1;
                s.history.apply.failures = 1;
                s.history.apply.last_failure = Some(t(NOW - 10));
                s.history.newest_apply = Some(ApplyAttempt {
                    inputs_hash: "h2:a".into(),
                    outcome: ApplyOutcome::Failed,
                    remediation: true,
                })
            }),
            Wait(Reason::DriftRemediationBackoff),
        ),
        (
            "machines never remediate",
            machine().with(|s| {
                s.observed.drift_found = true;
                s.policy.drift_action = DriftAction::Remediate;
                s.observed.last_drift_check = Some(t(NOW - 60))
            }),
            Wait(Reason::UpToDate),
        ),
        // Drift schedule.
        (
            "drift never checked, one interval after the apply",
            cluster().with(|s| s.history.apply.last_success = Some(t(NOW - 31 * 60 - 200))),
            Run(Drift, Reason::DriftDue),
        ),
        (
            "drift due after the interval",
            cluster().with(|s| s.observed.last_drift_check = Some(t(NOW - 40 * 60))),
            Run(Drift, Reason::DriftDue),
        ),
        (
            "drift not yet due: requeue at the deadline with jitter",
            cluster().with(|s| s.observed.last_drift_check = Some(t(NOW - 60))),
            WaitFor(Reason::UpToDate, j(30 * MIN) - MIN),
        ),
        (
            "drift interval 0 never checks",
            cluster().with(|s| {
                s.policy.drift_interval = None;
                s.observed.last_drift_check = Some(t(0))
            }),
            Wait(Reason::UpToDate),
        ),
        (
            "first drift after creation when no apply is known",
            cluster().with(|s| {
                s.history.apply.last_success = None;
                s.created_at = t(NOW - 10)
            }),
            WaitFor(Reason::UpToDate, j(30 * MIN) - Duration::from_secs(10)),
        ),
        (
            "a failed drift backs off",
            cluster().with(|s| {
                s.observed.last_drift_check = Some(t(0));
                s.history.drift.failures = 1;
                s.history.drift.last_failure = Some(t(NOW - 10))
            }),
            WaitFor(Reason::UpToDate, j(MIN) - Duration::from_secs(10)),
        ),
    ]
}

#[test]
fn table() {
    run(rows());
}
