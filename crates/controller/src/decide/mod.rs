//! `decide`: what a workload object needs next, as a pure function of an observed [`Snapshot`]
//! and the clock. No I/O, no clock reads, no randomness (jitter derives from the UID).
//!
//! The order of the checks is the contract (first match wins):
//! 1. a Job is active: wait for it ([`hold`], before anything is read);
//! 2. deleting ([`Lifecycle::Deleting`]): wait for a cluster's members, release on abandon
//!    where no destroy can succeed, restore a held state, release after a destroy or without
//!    state, hold on a state problem, else destroy;
//! 3. a restore is requested;
//! 4. lost, unreadable, foreign or unadopted state: nothing runs until a restore (or an
//!    adoption);
//! 5. an apply is due (no state, state without inputs hash, inputs changed, last apply failed or
//!    interrupted, drift to remediate), gated by `applyPolicy: Manual`, the destructive guard and
//!    backoff;
//! 6. the schedule: refresh after apply, pool membership, pending health, health checks, drift.
//!
//! A Job it starts runs the digest the last successful apply ran, unless it is an apply or
//! plan of inputs the state was not written from ([`ModuleImage`]).

pub mod approvals;
pub mod book;
mod effects;
mod finished;
pub mod launch;
mod preamble;
mod reason;
pub mod restore;
mod snapshot;
pub mod status;
#[cfg(test)]
mod tests;
pub mod transitions;

use std::time::Duration;

use captf_api::names::WorkloadKind;
use captf_api::{ApplyPolicy, DriftAction, Operation};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

pub use effects::{CapiObject, Counter, Effect, Gauge, Note};
pub use finished::Finished;
pub use preamble::{
    Admit, Dependencies, Entry, Hold, JobRun, Preamble, UnstartedJob, admit, hold, stuck,
};
pub use reason::Reason;
pub use snapshot::{
    ApplyAttempt, ApplyOutcome, Approvals, BlockedApply, Deletion, Destroyed, ExportsGuard,
    History, Lifecycle, Observed, OpHistory, PendingPlan, Policy, Requests, Snapshot, StateView,
};

use crate::schedule::{self, jitter, pending_refresh_delay, retry_delay};

/// What to do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub action: Action,
    pub reason: Reason,
    /// When to look again (absent: only on a change).
    pub requeue: Option<Duration>,
}

/// The effect the act step carries out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start nothing.
    Wait,
    /// Release the object: nothing to destroy.
    RemoveFinalizer,
    /// Start a Job.
    Start(Start),
}

/// A Job to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    pub op: Operation,
    /// Manual policy: the plan hash the apply must reproduce.
    pub expect_plan: Option<String>,
    /// What a destructive approval lets the guard pass.
    pub allow_destructive: Option<DestructiveApproval>,
    /// The apply remediates drift.
    pub remediation: bool,
    /// The image the Job runs.
    pub image: ModuleImage,
    /// The retry and replan tokens the Job answers: every Job started uses up what is pending.
    pub answers: Requests,
}

impl Start {
    fn op(op: Operation) -> Self {
        Start {
            op,
            expect_plan: None,
            allow_destructive: None,
            remediation: false,
            image: ModuleImage::Spec,
            answers: Requests::default(),
        }
    }
}

/// What a `captf.io/approve-destructive-plan` approval names, and so lets through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DestructiveApproval {
    /// A cluster's blocked plan, by hash: the approved apply must plan exactly that again, and
    /// a plan that deletes anything else is blocked again.
    Plan(String),
    /// A pool's exports change, by its approval hash (the inputs without bootstrap data), so a
    /// bootstrap token rotated since does not void it.
    Inputs(String),
}

impl DestructiveApproval {
    /// The hash the approval annotation holds.
    pub fn hash(&self) -> &str {
        match self {
            DestructiveApproval::Plan(h) | DestructiveApproval::Inputs(h) => h,
        }
    }
}

/// Which image a Job runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleImage {
    /// `spec.source.image` as written: an apply or plan of inputs that changed (the image is
    /// one of them), or of inputs never applied.
    Spec,
    /// The digest the last successful apply ran: a destroy, refresh, drift check, restore or
    /// remediation runs the module that made the resources, whatever its tag names now.
    Pinned(String),
    /// No digest is known (the runtime reported none, or nothing applied here yet):
    /// `spec.source.image` as written, announced by a `DigestUnknown` warning.
    Unpinned,
}

/// The image of a Job `decide` starts. Only an apply or plan of inputs the state was not
/// written from (the image is one of them) takes the spec's word; everything else, a
/// remediation of the applied inputs included, runs what the last apply ran.
fn image(s: &Snapshot, op: Operation) -> ModuleImage {
    let applied_inputs = match &s.state {
        StateView::Found {
            inputs_hash: Some(applied),
        } => s.inputs_hash.as_ref() == Some(applied),
        _ => false,
    };
    let spec_driven = matches!(op, Operation::Apply | Operation::Plan) && !applied_inputs;
    match &s.pinned_image {
        _ if spec_driven => ModuleImage::Spec,
        Some(pin) => ModuleImage::Pinned(pin.clone()),
        None => ModuleImage::Unpinned,
    }
}

fn wait(reason: Reason, requeue: Duration) -> Decision {
    Decision {
        action: Action::Wait,
        reason,
        requeue: Some(requeue),
    }
}

fn start(start: Start, reason: Reason) -> Decision {
    Decision {
        action: Action::Start(start),
        reason,
        requeue: None,
    }
}

fn mutable(kind: WorkloadKind) -> bool {
    !matches!(kind, WorkloadKind::Machine)
}

/// The state's word for the apply that wrote it, when no Job is left to give it: status
/// does not move with `clusterctl move` and the Jobs stay behind, so a moved object's
/// `ApplyJobSucceeded` would read "no apply yet" for good, and a pool's `Ready`, which takes it
/// in, would never be True. When nothing is due and the state was written from the inputs
/// rendered now (a provisioned machine renders none), the state is that word: the message for
/// `ApplyJobSucceeded=True`, which the pass writes only where no apply was ever reported.
pub fn applied_per_state(s: &Snapshot, d: &Decision) -> Option<String> {
    let StateView::Found {
        inputs_hash: Some(applied),
    } = &s.state
    else {
        return None;
    };
    let current = s.inputs_hash.as_ref().is_none_or(|now| now == applied);
    let settled = d.action == Action::Wait && d.reason == Reason::UpToDate;
    (current && settled && s.newest_apply().is_none()).then(|| {
        format!(
            "the state was written by an apply of inputs {applied}, which are current; no Job of that apply is left here (status and Jobs do not move with clusterctl move)"
        )
    })
}

/// Decides the next step for `s` at `now`, once [`hold`] let the pass observe.
pub fn decide(s: &Snapshot, now: Timestamp) -> Decision {
    let mut d = next(s, now);
    if let Some(guard) = &s.exports_guard {
        d = exports_guarded(d, guard);
    }
    if let Action::Start(start) = &mut d.action {
        start.image = image(s, start.op);
        start.answers = s.requests.clone();
    }
    d
}

/// A pool's apply under its exports guard: it waits while a blocked change waits for its
/// approval, and an approved change lets the guard pass what its approval hash names (not a
/// plan: a bootstrap token rotated since does not void it).
fn exports_guarded(mut d: Decision, guard: &ExportsGuard) -> Decision {
    let Action::Start(start) = &mut d.action else {
        return d;
    };
    if start.op != Operation::Apply {
        return d;
    }
    if guard.blocked == BlockedApply::Wait {
        return wait(Reason::DestructivePlanBlocked, schedule::APPROVAL_REQUEUE);
    }
    if let Some(hash) = &guard.approved {
        start.allow_destructive = Some(DestructiveApproval::Inputs(hash.clone()));
    }
    d
}

/// What is due, in the order of the module docs.
fn next(s: &Snapshot, now: Timestamp) -> Decision {
    let held = s.state.held();
    if let Lifecycle::Deleting(deletion) = &s.lifecycle {
        return deleting(s, now, deletion);
    }
    if s.restore_requested {
        return start(Start::op(Operation::Restore), Reason::RestoreRequested);
    }
    if held {
        let reason = match s.state {
            StateView::Lost => Reason::StateLost,
            StateView::Foreign => Reason::StateLineageMismatch,
            StateView::Unadopted => Reason::StateNotAdopted,
            _ => Reason::StateUnreadable,
        };
        return wait(reason, schedule::STATE_PROBLEM_REQUEUE);
    }
    if let Some(reason) = apply_reason(s)
        && let Some(decision) = gate_apply(s, now, reason)
    {
        return decision;
    }
    scheduled(s, now)
}

/// A deletion: wait for the dependents, abandon, restore, release or destroy.
fn deleting(s: &Snapshot, now: Timestamp, deletion: &Deletion) -> Decision {
    // Before abandon too: releasing the cluster's finalizer under live machines would drop
    // the state they were built against.
    if deletion.dependents {
        return wait(Reason::DependentsExist, schedule::DEPENDENTS_REQUEUE);
    }
    let held = s.state.held();
    // Abandon comes first, so a restore that cannot start or a destroy that keeps failing
    // cannot hide it; only where no destroy could succeed (nor start, without its inputs).
    let cannot_destroy = held
        || deletion.destroy == Destroyed::Failed
        || deletion.inputs_lost
        || deletion.namespace_terminating
        || deletion.credentials_lost;
    if deletion.abandon && cannot_destroy {
        return Decision {
            action: Action::RemoveFinalizer,
            reason: Reason::Abandoned,
            requeue: None,
        };
    }
    // No Job can start in a namespace being deleted, neither a restore nor a destroy: the
    // state stays protected until someone destroys out of band and abandons.
    if deletion.namespace_terminating
        && deletion.destroy != Destroyed::Yes
        && s.state != StateView::NotFound
    {
        return wait(Reason::DeletionHeld, schedule::STATE_PROBLEM_REQUEUE);
    }
    // A restore runs on a held deletion only: a readable state is destroyed as it is.
    if s.restore_requested && held {
        return start(Start::op(Operation::Restore), Reason::RestoreRequested);
    }
    if deletion.destroy == Destroyed::Yes {
        // Whatever is left of the state (an empty state, or none after an interrupted
        // cleanup) holds nothing.
        return Decision {
            action: Action::RemoveFinalizer,
            reason: Reason::Destroyed,
            requeue: None,
        };
    }
    match s.state {
        StateView::Lost | StateView::Unreadable | StateView::Foreign | StateView::Unadopted => {
            wait(Reason::DeletionHeld, schedule::STATE_PROBLEM_REQUEUE)
        }
        StateView::NotFound => Decision {
            action: Action::RemoveFinalizer,
            reason: Reason::DeletingWithoutState,
            requeue: None,
        },
        StateView::Found { .. } => backoff(s, now, Start::op(Operation::Destroy), Reason::Deleting),
    }
}

/// Why an apply is due, if it is.
fn apply_reason(s: &Snapshot) -> Option<Reason> {
    let mutable = mutable(s.kind);
    match &s.state {
        StateView::NotFound => return Some(Reason::NoState),
        StateView::Found { inputs_hash: None } => return Some(Reason::StateWithoutInputsHash),
        StateView::Found {
            inputs_hash: Some(applied),
        } => {
            if mutable
                && s.inputs_hash
                    .as_ref()
                    .is_some_and(|current| current != applied)
            {
                return Some(Reason::InputsChanged);
            }
        }
        StateView::Lost | StateView::Unreadable | StateView::Foreign | StateView::Unadopted => {
            return None;
        }
    }
    // An apply cut short runs again, on a machine too while it still renders its inputs (not
    // provisioned yet); once provisioned a machine is never applied again.
    if s.interrupted_apply && (mutable || s.inputs_hash.is_some()) {
        return Some(Reason::ApplyInterrupted);
    }
    if !mutable {
        return None;
    }
    if let Some(newest) = s.newest_apply()
        && newest.outcome == ApplyOutcome::Failed
        && !newest.remediation
    {
        return Some(Reason::LastApplyFailed);
    }
    let remediations_left = s.observed.failed_remediations < s.policy.failed_history_limit.max(1);
    if s.observed.drift_found
        && s.policy.drift_action == DriftAction::Remediate
        && remediations_left
    {
        return Some(Reason::DriftRemediation);
    }
    None
}

/// Applies the Manual plan flow, the destructive guard and backoff to a due apply. `None` means
/// the apply waits in a way that keeps the schedule running (a blocked remediation).
fn gate_apply(s: &Snapshot, now: Timestamp, reason: Reason) -> Option<Decision> {
    let remediation = reason == Reason::DriftRemediation;
    let current = s.inputs_hash.clone();
    let manual = s.kind == WorkloadKind::Cluster && s.policy.apply_policy == ApplyPolicy::Manual;
    if manual && reason != Reason::NoState {
        let plan = s
            .plan
            .as_ref()
            .filter(|p| current.as_deref() == Some(p.inputs_hash.as_str()));
        return Some(match plan {
            None => backoff(s, now, Start::op(Operation::Plan), Reason::PlanNeeded),
            // Seed 002: losing the plan key voids the plan that waits; a new one is made (with
            // a new key) before any approval of the old one can start an apply.
            Some(plan) if plan.key_lost && !plan.empty => {
                backoff(s, now, Start::op(Operation::Plan), Reason::PlanNeeded)
            }
            Some(plan)
                if plan.empty || s.approvals.plan.as_deref() == Some(plan.plan_hash.as_str()) =>
            {
                backoff(
                    s,
                    now,
                    Start {
                        expect_plan: Some(plan.plan_hash.clone()),
                        remediation,
                        ..Start::op(Operation::Apply)
                    },
                    if plan.empty {
                        Reason::PlanEmpty
                    } else {
                        Reason::PlanApproved
                    },
                )
            }
            Some(_) if s.requests.replan.is_some() => {
                start(Start::op(Operation::Plan), Reason::ReplanRequested)
            }
            Some(_) => wait(Reason::PlanAwaitingApproval, schedule::APPROVAL_REQUEUE),
        });
    }
    if let Some(ApplyAttempt {
        inputs_hash,
        outcome: ApplyOutcome::Blocked {
            guard_hash,
            plan_hash,
        },
        ..
    }) = s.newest_apply()
        && reason != Reason::NoState
    {
        // Blocked for these very inputs: only an approval naming the blocked plan (a pool's:
        // its approval hash) lets it run; new inputs are guarded afresh by the runner.
        if current.as_deref() == Some(inputs_hash.as_str()) || reason != Reason::InputsChanged {
            let approvable = match plan_hash {
                Some(plan) if s.kind == WorkloadKind::Cluster => {
                    DestructiveApproval::Plan(plan.clone())
                }
                _ => DestructiveApproval::Inputs(guard_hash.clone()),
            };
            if s.approvals.destructive.as_deref() == Some(approvable.hash()) {
                let approved = Start {
                    allow_destructive: Some(approvable),
                    remediation,
                    ..Start::op(Operation::Apply)
                };
                return Some(start(approved, Reason::DestructiveApproved));
            }
            // Planned again without an approval: the guard blocks it again if it still
            // deletes, under a new plan hash.
            if s.requests.replan.is_some() {
                let again = Start {
                    remediation,
                    ..Start::op(Operation::Apply)
                };
                return Some(start(again, Reason::ReplanRequested));
            }
            if remediation {
                return None;
            }
            return Some(wait(
                Reason::DestructivePlanBlocked,
                schedule::APPROVAL_REQUEUE,
            ));
        }
    }
    Some(backoff(
        s,
        now,
        Start {
            remediation,
            ..Start::op(Operation::Apply)
        },
        reason,
    ))
}

/// Starts `what` unless its op failed recently; then waits out the rest of the retry delay,
/// unless the operator asked for a retry now.
fn backoff(s: &Snapshot, now: Timestamp, what: Start, reason: Reason) -> Decision {
    match retry_at(s, what.op) {
        Some(at) if at > now && s.requests.retry.is_none() => {
            wait(reason.backoff(), until(now, at))
        }
        _ => start(what, reason),
    }
}

/// When `op` may run again after its recent failures.
fn retry_at(s: &Snapshot, op: Operation) -> Option<Timestamp> {
    let h = s.history.of(op);
    let last = h.last_failure?;
    if h.failures == 0 {
        return None;
    }
    let delay = retry_delay(h.failures, s.policy.failed_history_limit);
    Some(add(last, delay + jitter(&s.uid, delay)))
}

/// The refresh and drift schedule once no apply is due.
fn scheduled(s: &Snapshot, now: Timestamp) -> Decision {
    let o = &s.observed;
    let last_apply = s.history.apply.last_success;
    let base = |own: Option<Timestamp>| own.or(last_apply).unwrap_or(s.created_at);
    let pool = s.kind == WorkloadKind::MachinePool;
    let mut candidates: Vec<(Operation, Reason, Timestamp)> = Vec::new();

    if s.policy.refresh_after_apply
        && let Some(applied) = last_apply
        && o.last_refresh.is_none_or(|r| r < applied)
        && !o.apply_health_definite
    {
        candidates.push((Operation::Refresh, Reason::RefreshAfterApply, applied));
    }
    if pool && o.membership_converging {
        let every = s
            .policy
            .membership_interval
            .map_or(schedule::PENDING_BASE, |m| m.min(schedule::PENDING_BASE));
        candidates.push((
            Operation::Refresh,
            Reason::MembershipConverging,
            deadline(s, base(o.last_refresh), every),
        ));
    } else if o.health_pending {
        let every = if pool {
            schedule::PENDING_BASE
        } else {
            pending_refresh_delay(o.pending_refreshes)
        };
        candidates.push((
            Operation::Refresh,
            Reason::HealthPending,
            deadline(s, base(o.last_refresh), every),
        ));
    }
    if let Some(every) = s.policy.membership_interval.filter(|_| pool) {
        candidates.push((
            Operation::Refresh,
            Reason::MembershipRefreshDue,
            deadline(s, base(o.last_refresh), every),
        ));
    }
    if let Some(every) = s.policy.health_check_interval {
        candidates.push((
            Operation::Refresh,
            Reason::HealthCheckDue,
            deadline(s, base(o.last_refresh), every),
        ));
    }
    if let Some(every) = s.policy.drift_interval {
        candidates.push((
            Operation::Drift,
            Reason::DriftDue,
            deadline(s, base(o.last_drift_check), every),
        ));
    }

    // A failed op waits out its own backoff (unless a retry was asked for); other checks go on.
    let backoff = |op| retry_at(s, op).filter(|_| s.requests.retry.is_none());
    let candidates: Vec<_> = candidates
        .into_iter()
        .map(|(op, reason, due)| (op, reason, backoff(op).map_or(due, |r| r.max(due))))
        .collect();
    if let Some((op, reason, _)) = candidates.iter().find(|(_, _, due)| *due <= now) {
        return start(Start::op(*op), *reason);
    }
    // Nothing to plan but the world: a drift check is the plan of a settled object.
    if s.requests.replan.is_some() {
        return start(Start::op(Operation::Drift), Reason::ReplanRequested);
    }
    let soonest = candidates.iter().map(|(_, _, due)| *due).min();
    Decision {
        action: Action::Wait,
        reason: Reason::UpToDate,
        requeue: soonest.map(|at| until(now, at)),
    }
}

fn deadline(s: &Snapshot, base: Timestamp, every: Duration) -> Timestamp {
    add(base, every + jitter(&s.uid, every))
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

fn until(now: Timestamp, at: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)
}
