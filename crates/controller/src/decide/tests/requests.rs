//! The operator's `captf.io/retry` and `captf.io/replan`: the next attempt now.

use super::*;

fn retry(s: &mut Snapshot) {
    s.requests.retry = Some("t1".into());
}

fn replan(s: &mut Snapshot) {
    s.requests.replan = Some("t1".into());
}

pub(super) fn rows() -> Rows {
    use Operation::*;
    use Want::*;
    vec![
        (
            "retry: a failed apply starts before its backoff ends",
            cluster().with(|s| {
                failed_apply(s, "h2:a", 2, NOW - 60);
                retry(s)
            }),
            Run(Apply, Reason::LastApplyFailed),
        ),
        (
            "retry: a changed input after a failure starts at once",
            cluster().with(|s| {
                failed_apply(s, "h2:a", 1, NOW - 10);
                s.inputs_hash = Some("h2:b".into());
                retry(s)
            }),
            Run(Apply, Reason::InputsChanged),
        ),
        (
            "retry: a failing destroy starts before its backoff ends",
            cluster().with(|s| {
                deleting(s);
                s.history.destroy.failures = 1;
                s.history.destroy.last_failure = Some(t(NOW - 20));
                retry(s)
            }),
            Run(Destroy, Reason::Deleting),
        ),
        (
            "retry: a failed plan starts again (Manual)",
            cluster().with(|s| {
                s.policy.apply_policy = ApplyPolicy::Manual;
                s.inputs_hash = Some("h2:b".into());
                s.history.plan.failures = 1;
                s.history.plan.last_failure = Some(t(NOW - 10));
                retry(s)
            }),
            Run(Plan, Reason::PlanNeeded),
        ),
        (
            "retry: a failed drift check runs before its backoff ends",
            cluster().with(|s| {
                s.observed.last_drift_check = Some(t(NOW - 40 * 60));
                s.history.drift.failures = 3;
                s.history.drift.last_failure = Some(t(NOW - 10));
                retry(s)
            }),
            Run(Drift, Reason::DriftDue),
        ),
        (
            "retry: no approval is skipped",
            cluster().with(|s| {
                awaiting_approval(s);
                retry(s)
            }),
            Wait(Reason::PlanAwaitingApproval),
        ),
        (
            "retry: a blocked destructive plan stays blocked",
            cluster().with(|s| {
                blocked(s, "h2:b", "h2:b");
                retry(s)
            }),
            Wait(Reason::DestructivePlanBlocked),
        ),
        (
            "retry: a held state stays held",
            cluster().with(|s| {
                s.state = StateView::Lost;
                retry(s)
            }),
            Wait(Reason::StateLost),
        ),
        (
            "retry: a settled object starts nothing",
            cluster().with(|s| {
                s.observed.last_drift_check = Some(t(NOW - 60));
                retry(s)
            }),
            Wait(Reason::UpToDate),
        ),
        (
            "replan: a plan awaiting approval is made again",
            cluster().with(|s| {
                awaiting_approval(s);
                replan(s)
            }),
            Run(Plan, Reason::ReplanRequested),
        ),
        (
            "replan: a blocked destructive apply runs again, unapproved",
            cluster().with(|s| {
                blocked(s, "h2:b", "h2:b");
                replan(s)
            }),
            Run(Apply, Reason::ReplanRequested),
        ),
        (
            "replan: a blocked remediation runs again",
            cluster().with(|s| {
                blocked(s, "h2:a", "h2:a");
                s.observed.drift_found = true;
                s.policy.drift_action = DriftAction::Remediate;
                replan(s)
            }),
            Run(Apply, Reason::ReplanRequested),
        ),
        (
            "replan: a settled object checks for drift now",
            cluster().with(|s| {
                s.observed.last_drift_check = Some(t(NOW - 60));
                replan(s)
            }),
            Run(Drift, Reason::ReplanRequested),
        ),
        (
            "replan: a settled machine checks for drift now",
            machine().with(|s| {
                s.observed.last_drift_check = Some(t(NOW - 60));
                replan(s)
            }),
            Run(Drift, Reason::ReplanRequested),
        ),
        (
            "replan: what is due anyway runs first",
            cluster().with(|s| {
                s.inputs_hash = Some("h2:b".into());
                replan(s)
            }),
            Run(Apply, Reason::InputsChanged),
        ),
        (
            "replan: a backoff is not skipped",
            cluster().with(|s| {
                failed_apply(s, "h2:a", 2, NOW - 60);
                replan(s)
            }),
            Wait(Reason::LastApplyFailedBackoff),
        ),
        (
            "replan: a deletion is not planned",
            cluster().with(|s| {
                deleting(s).destroy = Destroyed::Failed;
                s.history.destroy.failures = 1;
                s.history.destroy.last_failure = Some(t(NOW - 20));
                replan(s)
            }),
            Wait(Reason::DeletingBackoff),
        ),
        (
            "replan: a restore comes first",
            cluster().with(|s| {
                s.restore_requested = true;
                replan(s)
            }),
            Run(Restore, Reason::RestoreRequested),
        ),
    ]
}

#[test]
fn a_started_job_answers_every_pending_request() {
    let s = cluster().with(|s| {
        failed_apply(s, "h2:a", 2, NOW - 60);
        s.requests = Requests {
            retry: Some("r1".into()),
            replan: Some("p1".into()),
        };
    });
    let d = decide(&s, t(NOW));
    let Action::Start(start) = d.action else {
        panic!("want a start, got {d:?}");
    };
    assert_eq!(start.answers, s.requests);
    let idle = cluster().with(|s| s.observed.last_drift_check = Some(t(NOW - 60)));
    let d = decide(&idle, t(NOW));
    assert_eq!(d.action, Action::Wait, "no request, nothing to answer");
}

#[test]
fn table() {
    run(rows());
}
