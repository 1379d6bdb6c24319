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
        // The exports guard.
        (
            "an exports change that waits for its approval holds every apply, a rotation's too",
            pool().with(|s| {
                blocked(s, "h2:a", "h2:approval");
                s.inputs_hash = Some("h2:rotated".into());
                guarded(s, BlockedApply::Wait, None)
            }),
            Wait(Reason::DestructivePlanBlocked),
        ),
        (
            "the exports guard never holds a destroy",
            pool().with(|s| {
                blocked(s, "h2:a", "h2:approval");
                deleting(s);
                guarded(s, BlockedApply::Wait, None)
            }),
            Run(Destroy, Reason::Deleting),
        ),
        (
            "a held change hides the blocked apply: a drift remediation runs",
            pool().with(|s| {
                blocked(s, "h2:a", "h2:approval");
                s.observed.drift_found = true;
                s.policy.drift_action = DriftAction::Remediate;
                guarded(s, BlockedApply::Hide, None)
            }),
            Run(Apply, Reason::DriftRemediation),
        ),
        (
            "the same blocked apply, seen as it is, holds the remediation",
            pool().with(|s| {
                blocked(s, "h2:a", "h2:approval");
                s.observed.drift_found = true;
                s.policy.drift_action = DriftAction::Remediate;
                s.observed.last_drift_check = Some(t(NOW - 60));
                guarded(s, BlockedApply::Leave, None)
            }),
            Wait(Reason::UpToDate),
        ),
        (
            "a withdrawn change hides its blocked apply: the state speaks for the apply again",
            pool().with(|s| {
                blocked(s, "h2:a", "h2:approval");
                s.observed.last_drift_check = Some(t(NOW - 60));
                guarded(s, BlockedApply::Hide, None)
            }),
            Wait(Reason::UpToDate),
        ),
    ]
}

/// The pool's exports guard says `blocked` about its newest apply, and `approved` names the
/// approval hash of the change it renders when the annotation approves it.
fn guarded(s: &mut Snapshot, blocked: BlockedApply, approved: Option<&str>) {
    s.exports_guard = Some(ExportsGuard {
        blocked,
        approved: approved.map(str::to_owned),
    });
}

#[test]
fn an_approved_exports_change_passes_its_approval_hash() {
    let d = decide(
        &pool().with(|s| {
            s.inputs_hash = Some("h2:b".into());
            guarded(s, BlockedApply::Leave, Some("h2:approval"))
        }),
        t(NOW),
    );
    let approved = DestructiveApproval::Inputs("h2:approval".into());
    assert!(
        matches!(&d.action, Action::Start(Start { op: Operation::Apply, allow_destructive: Some(a), .. }) if *a == approved),
        "{d:?}"
    );
    // Not a refresh: only an apply renders the change.
    let d = decide(
        &pool().with(|s| {
            s.observed.membership_converging = true;
            s.observed.last_refresh = Some(t(NOW - 40));
            guarded(s, BlockedApply::Leave, Some("h2:approval"))
        }),
        t(NOW),
    );
    assert!(
        matches!(
            &d.action,
            Action::Start(Start {
                op: Operation::Refresh,
                allow_destructive: None,
                ..
            })
        ),
        "{d:?}"
    );
}

#[test]
fn table() {
    run(rows());
}
