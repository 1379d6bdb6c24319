//! The destructive-change guard under the Automatic policy, and the Manual apply policy.

use super::*;

pub(super) fn rows() -> Rows {
    use Operation::*;
    use Want::*;
    vec![
        // Destructive guard (Automatic).
        (
            "blocked input change waits",
            cluster().with(|s| blocked(s, "h2:b", "h2:b")),
            WaitFor(Reason::DestructivePlanBlocked, 10 * MIN),
        ),
        (
            "approval naming another hash does not unblock",
            cluster().with(|s| {
                blocked(s, "h2:b", "h2:b");
                s.approvals.destructive = Some("h2:zzz".into())
            }),
            Wait(Reason::DestructivePlanBlocked),
        ),
        (
            "an approval of the blocked plan applies",
            cluster().with(|s| {
                blocked(s, "h2:b", "h2:b");
                s.approvals.destructive = Some(BLOCKED_PLAN.into())
            }),
            Run(Apply, Reason::DestructiveApproved),
        ),
        (
            "a cluster approval naming the inputs, not the plan, does not unblock",
            cluster().with(|s| {
                blocked(s, "h2:b", "h2:b");
                s.approvals.destructive = Some("h2:b".into())
            }),
            Wait(Reason::DestructivePlanBlocked),
        ),
        (
            "a blocked apply that reported no plan is approved by its guard hash",
            cluster().with(|s| {
                blocked(s, "h2:b", "h2:b");
                if let Some(ApplyAttempt {
                    outcome: ApplyOutcome::Blocked { plan_hash, .. },
                    ..
                }) = &mut s.history.newest_apply
                {
                    *plan_hash = None;
                }
                s.approvals.destructive = Some("h2:b".into())
            }),
            Run(Apply, Reason::DestructiveApproved),
        ),
        (
            "new inputs apply again (the runner re-guards)",
            cluster().with(|s| {
                blocked(s, "h2:b", "h2:b");
                s.inputs_hash = Some("h2:c".into())
            }),
            Run(Apply, Reason::InputsChanged),
        ),
        (
            "a blocked input change pauses a due drift",
            cluster().with(|s| {
                blocked(s, "h2:b", "h2:b");
                s.observed.last_drift_check = Some(t(0))
            }),
            Wait(Reason::DestructivePlanBlocked),
        ),
        (
            "a blocked remediation keeps the drift schedule",
            cluster().with(|s| {
                s.observed.drift_found = true;
                s.policy.drift_action = DriftAction::Remediate;
                s.observed.last_drift_check = Some(t(0));
                s.history.newest_apply = Some(ApplyAttempt {
                    inputs_hash: "h2:a".into(),
                    outcome: ApplyOutcome::Blocked {
                        guard_hash: "h2:a".into(),
                        plan_hash: Some(BLOCKED_PLAN.into()),
                    },
                    remediation: true,
                })
            }),
            Run(Drift, Reason::DriftDue),
        ),
        (
            "pool approvals name the approval hash",
            pool().with(|s| {
                blocked(s, "h2:b", "h2:approval");
                s.approvals.destructive = Some("h2:approval".into())
            }),
            Run(Apply, Reason::DestructiveApproved),
        ),
        (
            "pool approval naming the inputs hash does not unblock",
            pool().with(|s| {
                blocked(s, "h2:b", "h2:approval");
                s.approvals.destructive = Some("h2:b".into())
            }),
            Wait(Reason::DestructivePlanBlocked),
        ),
        (
            "a blocked apply without state checks nothing",
            cluster().with(|s| {
                blocked(s, "h2:b", "h2:b");
                s.state = StateView::NotFound
            }),
            Run(Apply, Reason::NoState),
        ),
        // Manual apply policy.
        (
            "manual: first apply is not gated",
            cluster().with(|s| {
                s.policy.apply_policy = ApplyPolicy::Manual;
                s.state = StateView::NotFound
            }),
            Run(Apply, Reason::NoState),
        ),
        (
            "manual: a change plans first",
            cluster().with(|s| {
                s.policy.apply_policy = ApplyPolicy::Manual;
                s.inputs_hash = Some("h2:b".into())
            }),
            Run(Plan, Reason::PlanNeeded),
        ),
        (
            "manual: plan waits for approval",
            cluster().with(awaiting_approval),
            WaitFor(Reason::PlanAwaitingApproval, 10 * MIN),
        ),
        (
            "manual: approval of another plan does nothing",
            cluster().with(|s| {
                awaiting_approval(s);
                s.approvals.plan = Some("p2:y".into())
            }),
            Wait(Reason::PlanAwaitingApproval),
        ),
        (
            "manual: approved plan applies",
            cluster().with(|s| {
                s.policy.apply_policy = ApplyPolicy::Manual;
                s.inputs_hash = Some("h2:b".into());
                s.plan = Some(PendingPlan {
                    inputs_hash: "h2:b".into(),
                    plan_hash: "p2:x".into(),
                    empty: false,
                    key_lost: false,
                });
                s.approvals.plan = Some("p2:x".into())
            }),
            Run(Apply, Reason::PlanApproved),
        ),
        (
            "manual: an empty plan applies without approval",
            cluster().with(|s| {
                s.policy.apply_policy = ApplyPolicy::Manual;
                s.inputs_hash = Some("h2:b".into());
                s.plan = Some(PendingPlan {
                    inputs_hash: "h2:b".into(),
                    plan_hash: "p2:e".into(),
                    empty: true,
                    key_lost: false,
                })
            }),
            Run(Apply, Reason::PlanEmpty),
        ),
        (
            "manual: a plan whose key is lost is planned again, approved or not",
            cluster().with(|s| {
                awaiting_approval(s);
                s.plan.as_mut().expect("plan").key_lost = true;
                s.approvals.plan = Some("p2:x".into())
            }),
            Run(Plan, Reason::PlanNeeded),
        ),
        (
            "manual: an empty plan applies though its key is lost (it needs no approval)",
            cluster().with(|s| {
                s.policy.apply_policy = ApplyPolicy::Manual;
                s.inputs_hash = Some("h2:b".into());
                s.plan = Some(PendingPlan {
                    inputs_hash: "h2:b".into(),
                    plan_hash: "p2:e".into(),
                    empty: true,
                    key_lost: true,
                })
            }),
            Run(Apply, Reason::PlanEmpty),
        ),
        (
            "manual: a plan for older inputs is replanned",
            cluster().with(|s| {
                s.policy.apply_policy = ApplyPolicy::Manual;
                s.inputs_hash = Some("h2:c".into());
                s.plan = Some(PendingPlan {
                    inputs_hash: "h2:b".into(),
                    plan_hash: "p2:x".into(),
                    empty: false,
                    key_lost: false,
                });
                s.approvals.plan = Some("p2:x".into())
            }),
            Run(Plan, Reason::PlanNeeded),
        ),
        (
            "manual: a failed plan backs off",
            cluster().with(|s| {
                s.policy.apply_policy = ApplyPolicy::Manual;
                s.inputs_hash = Some("h2:b".into());
                s.history.plan.failures = 1;
                s.history.plan.last_failure = Some(t(NOW - 5))
            }),
            Wait(Reason::PlanNeededBackoff),
        ),
        (
            "manual: drift checks continue while a plan waits",
            cluster().with(|s| {
                s.policy.apply_policy = ApplyPolicy::Manual;
                s.observed.drift_found = true;
                s.policy.drift_action = DriftAction::Report;
                s.observed.last_drift_check = Some(t(0))
            }),
            Run(Drift, Reason::DriftDue),
        ),
        (
            "manual ignored on pools",
            pool().with(|s| {
                s.policy.apply_policy = ApplyPolicy::Manual;
                s.inputs_hash = Some("h2:b".into())
            }),
            Run(Apply, Reason::InputsChanged),
        ),
    ]
}

#[test]
fn table() {
    run(rows());
}
