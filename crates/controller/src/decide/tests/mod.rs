//! The decision table: the conformance suite of the reconcile loop. One row per behaviour of
//! spec/concepts.md §11.8–11.9 and the original's `TestDecideOp` groups, one file per group of
//! concerns; this file holds the snapshot builders and how a row is checked.

use std::time::Duration;

use captf_api::names::WorkloadKind;
use captf_api::{ApplyPolicy, DriftAction, Operation};
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::schedule::jitter;

mod apply;
mod book;
mod deletion;
mod drift;
mod guards;
mod health;
mod images;
mod launch;
mod pools;
mod requests;
mod running;
mod status;

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
        lifecycle: Lifecycle::Live,
        state: StateView::Found {
            inputs_hash: Some("h2:a".into()),
        },
        inputs_hash: Some("h2:a".into()),
        interrupted_apply: false,
        restore_requested: false,
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
        pinned_image: None,
        exports_guard: None,
        requests: Requests::default(),
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

/// Makes `s` a deletion (if it was not one) and hands over what the deletion found.
fn deleting(s: &mut Snapshot) -> &mut Deletion {
    if !s.lifecycle.deleting() {
        s.lifecycle = Lifecycle::Deleting(Deletion::default());
    }
    match &mut s.lifecycle {
        Lifecycle::Deleting(d) => d,
        Lifecycle::Live => unreachable!("set above"),
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

/// Manual policy with plan `p2:x` of the inputs `h2:b` waiting for approval.
fn awaiting_approval(s: &mut Snapshot) {
    s.policy.apply_policy = ApplyPolicy::Manual;
    s.inputs_hash = Some("h2:b".into());
    s.plan = Some(PendingPlan {
        inputs_hash: "h2:b".into(),
        plan_hash: "p2:x".into(),
        empty: false,
        key_lost: false,
    });
}

/// The blocked plan of [`blocked`].
const BLOCKED_PLAN: &str = "p2:blocked";

/// The newest apply, of inputs `hash`, was guarded by `guard` and blocked before
/// [`BLOCKED_PLAN`].
fn blocked(s: &mut Snapshot, hash: &str, guard: &str) {
    s.inputs_hash = Some(hash.into());
    s.history.newest_apply = Some(ApplyAttempt {
        inputs_hash: hash.into(),
        outcome: ApplyOutcome::Blocked {
            guard_hash: guard.into(),
            plan_hash: Some(BLOCKED_PLAN.into()),
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

/// Rows: a name, the snapshot, what the decision must be.
type Rows = Vec<(&'static str, Snapshot, Want)>;

/// `d` with the object's jitter, as the schedule adds it.
fn j(d: Duration) -> Duration {
    d + jitter(UID, d)
}

fn run(rows: Rows) {
    for (name, snapshot, want) in rows {
        check(name, snapshot, want);
    }
}

/// Every row of the decision table.
fn all_rows() -> Rows {
    [
        running::rows(),
        deletion::rows(),
        apply::rows(),
        drift::rows(),
        guards::rows(),
        health::rows(),
        pools::rows(),
        requests::rows(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[test]
fn the_table_keeps_every_row() {
    let count = all_rows().len();
    assert!(count >= 100, "the table keeps every row: {count}");
}

#[test]
fn approved_starts_carry_their_hashes() {
    let d = decide(
        &cluster().with(|s| {
            blocked(s, "h2:b", "h2:b");
            s.approvals.destructive = Some(BLOCKED_PLAN.into())
        }),
        t(NOW),
    );
    let plan = DestructiveApproval::Plan(BLOCKED_PLAN.into());
    assert!(
        matches!(d.action, Action::Start(Start { allow_destructive: Some(ref a), .. }) if *a == plan)
    );
    let d = decide(
        &pool().with(|s| {
            blocked(s, "h2:b", "h2:approval");
            s.approvals.destructive = Some("h2:approval".into())
        }),
        t(NOW),
    );
    let inputs = DestructiveApproval::Inputs("h2:approval".into());
    assert!(
        matches!(d.action, Action::Start(Start { allow_destructive: Some(ref a), .. }) if *a == inputs)
    );
    let d = decide(
        &cluster().with(|s| {
            awaiting_approval(s);
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

#[test]
fn the_state_speaks_for_an_apply_no_job_reports() {
    let moved = |s: &mut Snapshot| {
        s.history = History::default();
        s.observed.last_refresh = Some(t(NOW - 1));
        s.observed.last_drift_check = Some(t(NOW - 1));
    };
    let rows: Vec<(&str, Snapshot, bool)> = vec![
        ("moved, current inputs", cluster().with(moved), true),
        (
            "moved pool, current inputs",
            base(WorkloadKind::MachinePool).with(moved),
            true,
        ),
        (
            "moved machine, provisioned (renders no inputs)",
            base(WorkloadKind::Machine).with(|s| {
                moved(s);
                s.inputs_hash = None;
            }),
            true,
        ),
        (
            "an apply reported here",
            cluster().with(|s| s.observed.last_drift_check = Some(t(NOW - 1))),
            false,
        ),
        (
            "inputs changed since the state",
            cluster().with(|s| {
                moved(s);
                s.inputs_hash = Some("h2:b".into());
            }),
            false,
        ),
        (
            "a state without its inputs hash",
            cluster().with(|s| {
                moved(s);
                s.state = StateView::Found { inputs_hash: None };
            }),
            false,
        ),
        (
            "state lost",
            cluster().with(|s| {
                moved(s);
                s.state = StateView::Lost;
            }),
            false,
        ),
        (
            "a drift check due",
            cluster().with(|s| {
                moved(s);
                s.observed.last_drift_check = None;
            }),
            false,
        ),
    ];
    for (name, s, want) in rows {
        let d = decide(&s, t(NOW));
        assert_eq!(applied_per_state(&s, &d).is_some(), want, "{name}: {d:?}");
    }
}
