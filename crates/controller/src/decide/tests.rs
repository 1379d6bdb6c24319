//! The decision table: the conformance suite of the reconcile loop. One row per behaviour of
//! spec/concepts.md §11.8–11.9 and the original's `TestDecideOp` groups.

use std::time::Duration;

use captf_api::names::WorkloadKind;
use captf_api::{ApplyPolicy, DriftAction, Operation};
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::schedule::jitter;

const UID: &str = "3f7c1c3e-0000-4000-8000-000000000001";
const MIN: Duration = Duration::from_secs(60);

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).expect("valid time")
}

/// "now" in every row.
const NOW: i64 = 100_000;

fn base(kind: WorkloadKind) -> Snapshot {
    Snapshot {
        kind,
        uid: UID.into(),
        created_at: t(0),
        deleting: false,
        job_active: false,
        state: StateView::Found {
            inputs_hash: Some("h2:a".into()),
        },
        inputs_hash: Some("h2:a".into()),
        interrupted_apply: false,
        destroyed: false,
        restore_requested: false,
        abandon_requested: false,
        last_destroy_failed: false,
        history: History {
            apply: OpHistory {
                last_success: Some(t(NOW - 60)),
                ..Default::default()
            },
            newest_apply: Some(ApplyAttempt {
                inputs_hash: "h2:a".into(),
                outcome: ApplyOutcome::Succeeded,
                remediation: false,
            }),
            ..Default::default()
        },
        policy: Policy {
            apply_policy: ApplyPolicy::Automatic,
            drift_interval: Some(30 * MIN),
            drift_action: DriftAction::Report,
            failed_history_limit: 3,
            refresh_after_apply: matches!(kind, WorkloadKind::Machine | WorkloadKind::MachinePool),
            membership_interval: matches!(kind, WorkloadKind::MachinePool).then_some(MIN),
            health_check_interval: None,
        },
        approvals: Approvals::default(),
        plan: None,
        observed: Observed {
            apply_health_definite: true,
            last_refresh: Some(t(NOW - 60)),
            ..Default::default()
        },
    }
}

fn cluster() -> Snapshot {
    base(WorkloadKind::Cluster)
}
fn machine() -> Snapshot {
    base(WorkloadKind::Machine)
}
fn pool() -> Snapshot {
    base(WorkloadKind::MachinePool)
}

/// Builders for the rows.
trait Row: Sized {
    fn with(self, f: impl FnOnce(&mut Snapshot)) -> Snapshot;
}
impl Row for Snapshot {
    fn with(mut self, f: impl FnOnce(&mut Snapshot)) -> Snapshot {
        f(&mut self);
        self
    }
}

fn failed_apply(s: &mut Snapshot, hash: &str, failures: u32, at: i64) {
    s.history.apply.failures = failures;
    s.history.apply.last_failure = Some(t(at));
    s.history.newest_apply = Some(ApplyAttempt {
        inputs_hash: hash.into(),
        outcome: ApplyOutcome::Failed,
        remediation: false,
    });
}

fn blocked(s: &mut Snapshot, hash: &str, guard: &str) {
    s.inputs_hash = Some(hash.into());
    s.history.newest_apply = Some(ApplyAttempt {
        inputs_hash: hash.into(),
        outcome: ApplyOutcome::Blocked {
            guard_hash: guard.into(),
        },
        remediation: false,
    });
}

/// What a row expects.
#[derive(Debug)]
enum Want {
    Run(Operation, Reason),
    Wait(Reason),
    WaitFor(Reason, Duration),
    Release(Reason),
}

fn check(name: &str, s: Snapshot, want: Want) -> Decision {
    let d = decide(&s, t(NOW));
    match want {
        Want::Run(op, reason) => {
            assert!(
                matches!(&d.action, Action::Start(st) if st.op == op),
                "{name}: want {op} got {d:?}"
            );
            assert_eq!(d.reason, reason, "{name}");
        }
        Want::Wait(reason) => {
            assert_eq!(d.action, Action::Wait, "{name}: {d:?}");
            assert_eq!(d.reason, reason, "{name}");
        }
        Want::WaitFor(reason, requeue) => {
            assert_eq!(d.action, Action::Wait, "{name}: {d:?}");
            assert_eq!(d.reason, reason, "{name}");
            assert_eq!(d.requeue, Some(requeue), "{name}");
        }
        Want::Release(reason) => {
            assert_eq!(d.action, Action::RemoveFinalizer, "{name}: {d:?}");
            assert_eq!(d.reason, reason, "{name}");
        }
    }
    d
}

#[test]
fn decision_table() {
    use Operation::*;
    use Want::*;
    let j = |d: Duration| d + jitter(UID, d);
    let rows: Vec<(&str, Snapshot, Want)> = vec![
        // A running Job: nothing else happens.
        (
            "job active",
            cluster().with(|s| s.job_active = true),
            WaitFor(Reason::JobActive, MIN),
        ),
        (
            "job active beats deletion",
            cluster().with(|s| {
                s.job_active = true;
                s.deleting = true
            }),
            Wait(Reason::JobActive),
        ),
        (
            "job active beats input change",
            cluster().with(|s| {
                s.job_active = true;
                s.inputs_hash = Some("h2:b".into())
            }),
            Wait(Reason::JobActive),
        ),
        // Restore.
        (
            "restore requested",
            cluster().with(|s| s.restore_requested = true),
            Run(Restore, Reason::RestoreRequested),
        ),
        (
            "restore beats an input change",
            cluster().with(|s| {
                s.restore_requested = true;
                s.inputs_hash = Some("h2:b".into())
            }),
            Run(Restore, Reason::RestoreRequested),
        ),
        (
            "restore of lost state",
            cluster().with(|s| {
                s.restore_requested = true;
                s.state = StateView::Lost
            }),
            Run(Restore, Reason::RestoreRequested),
        ),
        (
            "restore runs on a held deletion",
            cluster().with(|s| {
                s.restore_requested = true;
                s.deleting = true;
                s.state = StateView::Unreadable
            }),
            Run(Restore, Reason::RestoreRequested),
        ),
        (
            "deletion wins over a restore when it can proceed",
            cluster().with(|s| {
                s.restore_requested = true;
                s.deleting = true
            }),
            Run(Destroy, Reason::Deleting),
        ),
        (
            "restore ignores apply backoff",
            cluster().with(|s| {
                s.restore_requested = true;
                failed_apply(s, "h2:a", 2, NOW - 10)
            }),
            Run(Restore, Reason::RestoreRequested),
        ),
        // Deletion.
        (
            "deleting without state",
            cluster().with(|s| {
                s.deleting = true;
                s.state = StateView::NotFound
            }),
            Release(Reason::DeletingWithoutState),
        ),
        (
            "deleting with state",
            cluster().with(|s| s.deleting = true),
            Run(Destroy, Reason::Deleting),
        ),
        (
            "deleting after a successful destroy releases",
            cluster().with(|s| {
                s.deleting = true;
                s.destroyed = true;
            }),
            Release(Reason::Destroyed),
        ),
        (
            "a destroyed object whose state cleanup was interrupted still releases",
            cluster().with(|s| {
                s.deleting = true;
                s.destroyed = true;
                s.state = StateView::Lost;
            }),
            Release(Reason::Destroyed),
        ),
        (
            "a successful destroy means nothing when not deleting",
            cluster().with(|s| {
                s.destroyed = true;
                s.observed.last_drift_check = Some(t(NOW - 60));
            }),
            Wait(Reason::UpToDate),
        ),
        (
            "deleting, state lost: held",
            cluster().with(|s| {
                s.deleting = true;
                s.state = StateView::Lost
            }),
            WaitFor(Reason::DeletionHeld, MIN),
        ),
        (
            "deleting, state unreadable: held",
            cluster().with(|s| {
                s.deleting = true;
                s.state = StateView::Unreadable
            }),
            Wait(Reason::DeletionHeld),
        ),
        (
            "held deletion released by abandon",
            cluster().with(|s| {
                s.deleting = true;
                s.state = StateView::Lost;
                s.abandon_requested = true
            }),
            Release(Reason::Abandoned),
        ),
        (
            "abandon wins over a pending restore",
            cluster().with(|s| {
                s.deleting = true;
                s.state = StateView::Unreadable;
                s.restore_requested = true;
                s.abandon_requested = true
            }),
            Release(Reason::Abandoned),
        ),
        (
            "a failed destroy may be abandoned",
            cluster().with(|s| {
                s.deleting = true;
                s.last_destroy_failed = true;
                s.abandon_requested = true;
                s.history.destroy.failures = 1;
                s.history.destroy.last_failure = Some(t(NOW - 5))
            }),
            Release(Reason::Abandoned),
        ),
        (
            "readable state and a destroy that can run: abandon is ignored",
            cluster().with(|s| {
                s.deleting = true;
                s.abandon_requested = true
            }),
            Run(Destroy, Reason::Deleting),
        ),
        (
            "abandon means nothing when not deleting",
            cluster().with(|s| {
                s.state = StateView::Lost;
                s.abandon_requested = true
            }),
            WaitFor(Reason::StateLost, MIN),
        ),
        (
            "held deletion ignores destroy backoff",
            cluster().with(|s| {
                s.deleting = true;
                s.state = StateView::Lost;
                s.history.destroy.failures = 3;
                s.history.destroy.last_failure = Some(t(NOW - 5))
            }),
            WaitFor(Reason::DeletionHeld, MIN),
        ),
        (
            "deletion wins over an input change",
            cluster().with(|s| {
                s.deleting = true;
                s.inputs_hash = Some("h2:b".into())
            }),
            Run(Destroy, Reason::Deleting),
        ),
        (
            "failed destroy backs off",
            cluster().with(|s| {
                s.deleting = true;
                s.history.destroy.failures = 1;
                s.history.destroy.last_failure = Some(t(NOW - 20))
            }),
            WaitFor(Reason::DeletingBackoff, j(MIN) - Duration::from_secs(20)),
        ),
        (
            "failed destroy retries after backoff",
            cluster().with(|s| {
                s.deleting = true;
                s.history.destroy.failures = 1;
                s.history.destroy.last_failure = Some(t(NOW - 200))
            }),
            Run(Destroy, Reason::Deleting),
        ),
        (
            "machine deleting with state",
            machine().with(|s| s.deleting = true),
            Run(Destroy, Reason::Deleting),
        ),
        // State problems outside deletion.
        (
            "lost state: nothing runs",
            cluster().with(|s| s.state = StateView::Lost),
            WaitFor(Reason::StateLost, MIN),
        ),
        (
            "unreadable state: nothing runs",
            cluster().with(|s| {
                s.state = StateView::Unreadable;
                s.inputs_hash = Some("h2:b".into())
            }),
            Wait(Reason::StateUnreadable),
        ),
        // Apply triggers.
        (
            "no state",
            cluster().with(|s| s.state = StateView::NotFound),
            Run(Apply, Reason::NoState),
        ),
        (
            "machine without state",
            machine().with(|s| s.state = StateView::NotFound),
            Run(Apply, Reason::NoState),
        ),
        (
            "state without inputs hash",
            cluster().with(|s| s.state = StateView::Found { inputs_hash: None }),
            Run(Apply, Reason::StateWithoutInputsHash),
        ),
        (
            "state without inputs hash on an immutable machine",
            machine().with(|s| s.state = StateView::Found { inputs_hash: None }),
            Run(Apply, Reason::StateWithoutInputsHash),
        ),
        (
            "state without hash backs off after a failure",
            machine().with(|s| {
                s.state = StateView::Found { inputs_hash: None };
                failed_apply(s, "h2:a", 1, NOW - 30)
            }),
            WaitFor(
                Reason::StateWithoutInputsHashBackoff,
                j(MIN) - Duration::from_secs(30),
            ),
        ),
        (
            "state without hash retries after backoff",
            machine().with(|s| {
                s.state = StateView::Found { inputs_hash: None };
                failed_apply(s, "h2:a", 1, NOW - 600)
            }),
            Run(Apply, Reason::StateWithoutInputsHash),
        ),
        (
            "mutable kind, inputs changed",
            cluster().with(|s| s.inputs_hash = Some("h2:b".into())),
            Run(Apply, Reason::InputsChanged),
        ),
        (
            "pool, inputs changed",
            pool().with(|s| s.inputs_hash = Some("h2:b".into())),
            Run(Apply, Reason::InputsChanged),
        ),
        (
            "mutable kind whose inputs cannot be built does not apply",
            cluster().with(|s| s.inputs_hash = None),
            Wait(Reason::UpToDate),
        ),
        (
            "immutable machine ignores a hash difference",
            machine().with(|s| s.inputs_hash = Some("h2:b".into())),
            Wait(Reason::UpToDate),
        ),
        (
            "failed apply retried with equal hashes after backoff",
            cluster().with(|s| failed_apply(s, "h2:a", 1, NOW - 600)),
            Run(Apply, Reason::LastApplyFailed),
        ),
        (
            "failed apply waits for its backoff",
            cluster().with(|s| failed_apply(s, "h2:a", 2, NOW - 60)),
            WaitFor(Reason::LastApplyFailedBackoff, j(2 * MIN) - MIN),
        ),
        (
            "immutable machine never re-applies a failure",
            machine().with(|s| failed_apply(s, "h2:a", 1, NOW - 600)),
            Wait(Reason::UpToDate),
        ),
        (
            "input change after a failure waits for the backoff",
            cluster().with(|s| {
                failed_apply(s, "h2:a", 1, NOW - 10);
                s.inputs_hash = Some("h2:b".into())
            }),
            Wait(Reason::InputsChangedBackoff),
        ),
        (
            "interrupted apply stays due with equal hashes",
            cluster().with(|s| s.interrupted_apply = true),
            Run(Apply, Reason::ApplyInterrupted),
        ),
        (
            "interrupted apply ignored on a provisioned machine (it renders nothing)",
            machine().with(|s| {
                s.interrupted_apply = true;
                s.inputs_hash = None;
            }),
            Wait(Reason::UpToDate),
        ),
        (
            "interrupted apply runs again on a machine that still renders",
            machine().with(|s| s.interrupted_apply = true),
            Run(Apply, Reason::ApplyInterrupted),
        ),
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
            "matching approval applies",
            cluster().with(|s| {
                blocked(s, "h2:b", "h2:b");
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
            cluster().with(|s| {
                s.policy.apply_policy = ApplyPolicy::Manual;
                s.inputs_hash = Some("h2:b".into());
                s.plan = Some(PendingPlan {
                    inputs_hash: "h2:b".into(),
                    plan_hash: "p2:x".into(),
                    empty: false,
                })
            }),
            WaitFor(Reason::PlanAwaitingApproval, 10 * MIN),
        ),
        (
            "manual: approval of another plan does nothing",
            cluster().with(|s| {
                s.policy.apply_policy = ApplyPolicy::Manual;
                s.inputs_hash = Some("h2:b".into());
                s.plan = Some(PendingPlan {
                    inputs_hash: "h2:b".into(),
                    plan_hash: "p2:x".into(),
                    empty: false,
                });
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
        // Up to date.
        (
            "up to date",
            cluster().with(|s| s.observed.last_drift_check = Some(t(NOW - 60))),
            Wait(Reason::UpToDate),
        ),
    ];
    assert!(
        rows.len() >= 75,
        "the table keeps every row: {}",
        rows.len()
    );
    for (name, snapshot, want) in rows {
        check(name, snapshot, want);
    }
}

#[test]
fn approved_starts_carry_their_hashes() {
    let d = decide(
        &cluster().with(|s| {
            blocked(s, "h2:b", "h2:b");
            s.approvals.destructive = Some("h2:b".into())
        }),
        t(NOW),
    );
    assert!(
        matches!(d.action, Action::Start(Start { allow_destructive: Some(ref h), .. }) if h == "h2:b")
    );
    let d = decide(
        &cluster().with(|s| {
            s.policy.apply_policy = ApplyPolicy::Manual;
            s.inputs_hash = Some("h2:b".into());
            s.plan = Some(PendingPlan {
                inputs_hash: "h2:b".into(),
                plan_hash: "p2:x".into(),
                empty: false,
            });
            s.approvals.plan = Some("p2:x".into());
        }),
        t(NOW),
    );
    assert!(
        matches!(d.action, Action::Start(Start { expect_plan: Some(ref p), .. }) if p == "p2:x")
    );
    let d = decide(
        &cluster().with(|s| {
            s.observed.drift_found = true;
            s.policy.drift_action = DriftAction::Remediate
        }),
        t(NOW),
    );
    assert!(matches!(
        d.action,
        Action::Start(Start {
            remediation: true,
            ..
        })
    ));
}

#[test]
fn decisions_are_deterministic() {
    let s = cluster().with(|s| s.observed.last_drift_check = Some(t(NOW - 60)));
    assert_eq!(decide(&s, t(NOW)), decide(&s.clone(), t(NOW)));
}
