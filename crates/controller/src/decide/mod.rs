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

mod effects;
pub mod launch;
mod reason;
#[cfg(test)]
mod tests;

use std::time::Duration;

use captf_api::names::WorkloadKind;
use captf_api::{ApplyPolicy, DriftAction, Operation};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

pub use effects::{Effect, HoldEffect};
pub use reason::Reason;

use crate::schedule::{self, jitter, pending_refresh_delay, retry_delay};

/// Everything the decision needs, observed once per pass.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub kind: WorkloadKind,
    /// Seeds the jitter.
    pub uid: String,
    pub created_at: Timestamp,
    /// Live, or deleted and what stands in the deletion's way.
    pub lifecycle: Lifecycle,
    pub state: StateView,
    /// Hash of the inputs rendered now; `None` when they cannot be built (e.g. an immutable kind
    /// after provisioning, or missing dependencies).
    pub inputs_hash: Option<String>,
    /// A cluster or pool apply Job vanished while running: an apply stays due.
    pub interrupted_apply: bool,
    /// A restore the object asked for, already checked to name a complete backup that was not
    /// consumed yet.
    pub restore_requested: bool,
    pub history: History,
    pub policy: Policy,
    pub approvals: Approvals,
    /// The plan shown in `status.plan` (Manual apply policy).
    pub plan: Option<PendingPlan>,
    pub observed: Observed,
    /// The image the last successful apply ran, by digest (`captf.io/image-digest` on the
    /// durable inputs), when the runtime reported one.
    pub pinned_image: Option<String>,
    /// Pools: what their guard of the cluster's exports says about an apply.
    pub exports_guard: Option<ExportsGuard>,
}

impl Snapshot {
    /// The newest finished apply, unless a pool's exports guard hides it.
    fn newest_apply(&self) -> Option<&ApplyAttempt> {
        let hidden = self
            .exports_guard
            .as_ref()
            .is_some_and(|g| g.blocked == BlockedApply::Hide);
        self.history.newest_apply.as_ref().filter(|_| !hidden)
    }
}

/// A pool's guard of its cluster's exports, for the apply it would start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportsGuard {
    /// What the newest apply, if the guard blocked it, means now.
    pub blocked: BlockedApply,
    /// The apply renders a guarded change whose approval hash the approval annotation names:
    /// that hash.
    pub approved: Option<String>,
}

/// What a pool's newest finished apply means for the decision when the guard blocked it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockedApply {
    /// Not blocked, or blocked for other inputs: the decision sees it as it is.
    Leave,
    /// Hidden from the decision: the pool holds the change or has none any more, so the blocked
    /// run says nothing about what the pool applies now (a drift remediation runs, a change that
    /// returned after a withdrawal is guarded afresh).
    Hide,
    /// The change waits for its approval (it cannot be held): no apply, not even one a bootstrap
    /// rotation made due, since the approval hash did not move.
    Wait,
}

/// Where the object is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    Live,
    /// `metadata.deletionTimestamp` is set.
    Deleting(Deletion),
}

impl Lifecycle {
    pub fn deleting(&self) -> bool {
        matches!(self, Lifecycle::Deleting(_))
    }
}

/// What a deletion found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deletion {
    /// A TerraformCluster's machines or pools still exist: its destroy waits for them.
    pub dependents: bool,
    /// What the destroys since the newest apply did.
    pub destroy: Destroyed,
    /// `captf.io/abandon-infrastructure` names this object's UID.
    pub abandon: bool,
}

/// What the destroys since the newest apply did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Destroyed {
    /// None ran.
    #[default]
    No,
    /// The newest failed: the infrastructure may be partly gone, and an abandon may release
    /// the object.
    Failed,
    /// One succeeded: the infrastructure is gone.
    Yes,
}

/// What the state reader found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateView {
    /// No state and the object never applied.
    NotFound,
    /// No state although the object applied before.
    Lost,
    /// State Secrets exist but cannot be read (corrupt, inconsistent, encrypted, unsupported).
    Unreadable,
    /// A readable state of another lineage than the object's: not its state.
    Foreign,
    /// The object applied before, and its state carries no inputs hash: nothing says what
    /// produced it, and nobody adopted it.
    Unadopted,
    /// Readable state; the inputs hash of the apply that wrote it, when recorded.
    Found { inputs_hash: Option<String> },
}

impl StateView {
    /// Nothing but a restore (or abandoning a deletion) may run on this state.
    pub fn held(&self) -> bool {
        !matches!(self, StateView::NotFound | StateView::Found { .. })
    }
}

/// Outcomes of the object's retained Jobs.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub apply: OpHistory,
    pub destroy: OpHistory,
    pub refresh: OpHistory,
    pub drift: OpHistory,
    pub plan: OpHistory,
    pub restore: OpHistory,
    /// The newest finished apply.
    pub newest_apply: Option<ApplyAttempt>,
}

impl History {
    fn of(&self, op: Operation) -> &OpHistory {
        match op {
            Operation::Apply => &self.apply,
            Operation::Destroy => &self.destroy,
            Operation::Refresh => &self.refresh,
            Operation::Drift => &self.drift,
            Operation::Plan => &self.plan,
            Operation::Restore => &self.restore,
        }
    }
}

/// One operation's retained history.
#[derive(Clone, Debug, Default)]
pub struct OpHistory {
    pub last_success: Option<Timestamp>,
    /// Failures since the last success (interrupted, blocked and plan-changed runs excluded).
    pub failures: u32,
    pub last_failure: Option<Timestamp>,
}

/// The newest finished apply.
#[derive(Clone, Debug)]
pub struct ApplyAttempt {
    pub inputs_hash: String,
    pub outcome: ApplyOutcome,
    /// It was a drift remediation.
    pub remediation: bool,
}

/// How an apply ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyOutcome {
    Succeeded,
    Failed,
    /// The guard stopped it before a deleting or replacing plan: `guard_hash` is the hash it
    /// was guarded by (the inputs, or a pool's approval hash), `plan_hash` the plan it made.
    Blocked {
        guard_hash: String,
        plan_hash: Option<String>,
    },
    /// The approved plan no longer matched.
    PlanChanged,
}

/// Effective policy (spec merged with inherited defaults and manager flags).
#[derive(Clone, Debug)]
pub struct Policy {
    pub apply_policy: ApplyPolicy,
    /// `None` when drift checks are disabled.
    pub drift_interval: Option<Duration>,
    pub drift_action: DriftAction,
    /// `failedJobsHistoryLimit`: saturates backoff and caps failed remediations.
    pub failed_history_limit: u32,
    /// The kind refreshes once after a successful apply (machines, pools).
    pub refresh_after_apply: bool,
    /// Pools: membership refresh interval.
    pub membership_interval: Option<Duration>,
    /// Machines with `remediation.annotateMachine`: health sampling interval.
    pub health_check_interval: Option<Duration>,
}

/// Approval annotations on the object.
#[derive(Clone, Debug, Default)]
pub struct Approvals {
    /// `captf.io/approve-destructive-plan`.
    pub destructive: Option<String>,
    /// `captf.io/approve-plan`.
    pub plan: Option<String>,
}

/// A plan waiting for approval under `applyPolicy: Manual`.
#[derive(Clone, Debug)]
pub struct PendingPlan {
    pub inputs_hash: String,
    pub plan_hash: String,
    /// The plan changes nothing: it applies without approval.
    pub empty: bool,
}

/// Health and schedule facts from status and state.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The health output reads `pending`.
    pub health_pending: bool,
    /// Consecutive pending samples (`status.pendingRefreshes`).
    pub pending_refreshes: u32,
    /// Pools: `len(spec.providerIDList) != status.replicas`.
    pub membership_converging: bool,
    /// The last successful apply's own outputs gave a definite health (neither pending nor
    /// unknown): no refresh needs to follow it.
    pub apply_health_definite: bool,
    pub last_refresh: Option<Timestamp>,
    pub last_drift_check: Option<Timestamp>,
    /// The last drift check found drift.
    pub drift_found: bool,
    /// Remediation applies that failed since the last successful drift check.
    pub failed_remediations: u32,
}

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
}

impl Start {
    fn op(op: Operation) -> Self {
        Start {
            op,
            expect_plan: None,
            allow_destructive: None,
            remediation: false,
            image: ModuleImage::Spec,
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

/// What a pass found first: the object's dependencies, its deletion and its finalizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub deleting: bool,
    pub dependencies: Dependencies,
    /// The object carries its kind's finalizer.
    pub finalizer: bool,
}

/// What the object's owner and dependencies are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dependencies {
    Ready,
    /// Missing or not ready (`DependenciesReady` says which).
    Missing,
    /// A member whose cluster's Job may be writing the state the member reads.
    ClusterBusy,
}

/// Whether the pass goes on past its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Book the finished Jobs, then [`hold`] or observe.
    Go,
    /// A live object without its dependencies: write its conditions, look again later.
    Gated,
    /// Read nothing of the cluster's state while its Job may write it: look again soon.
    ClusterBusy,
    /// A live object without its finalizer: add it, and look again at once (the change wakes
    /// the object), so nothing runs that a deletion could not clean up.
    AddFinalizer,
}

/// The first decision of a pass. A deleted object goes on without its dependencies (it is
/// destroyed from what its last apply rendered) and needs no finalizer added; a cluster's
/// running Job holds a member's pass either way.
pub fn admit(e: Entry) -> Admit {
    match e.dependencies {
        Dependencies::ClusterBusy => Admit::ClusterBusy,
        Dependencies::Missing if !e.deleting => Admit::Gated,
        _ if !e.deleting && !e.finalizer => Admit::AddFinalizer,
        _ => Admit::Go,
    }
}

/// What a pass knows before it reads anything a Job of the object could be writing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Preamble {
    /// The object, or the Cluster it belongs to, is paused.
    pub paused: bool,
    pub deleting: bool,
    pub job: JobRun,
}

/// Whether one of the object's Jobs has not finished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JobRun {
    #[default]
    None,
    /// Its pod is ready (a running runner is).
    Ready,
    /// No pod of it is ready yet: it may wait for an image, a node or a quota.
    Unready,
}

/// A pass that stops before it observes, and what it does instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// [`Reason::Paused`] or [`Reason::JobActive`].
    pub reason: Reason,
    /// When to look again (absent: at the sync period).
    pub requeue: Option<Duration>,
    pub effects: Vec<HoldEffect>,
}

/// Whether the pass stops before it observes: a paused object only books its finished Jobs
/// (a deletion waits too, and says so), and while a Job runs nothing is read that it may be
/// writing (the state, its lock) and nothing else starts; block-move stays set. `None`:
/// observe, then [`decide`].
pub fn hold(p: Preamble) -> Option<Hold> {
    use HoldEffect::*;
    let book = [PatchStatus, BookFinished];
    if p.paused {
        let mut effects = Vec::new();
        if p.deleting {
            effects.push(ExplainPausedDeletion);
        }
        // A paused object's running Job keeps block-move set; once none runs it may move.
        if p.job == JobRun::None {
            effects.push(ClearBlockMove);
        }
        effects.extend(book);
        return Some(Hold {
            reason: Reason::Paused,
            requeue: None,
            effects,
        });
    }
    let requeue = match p.job {
        JobRun::None => return None,
        JobRun::Ready => schedule::ACTIVE_JOB_REQUEUE,
        JobRun::Unready => schedule::UNREADY_JOB_REQUEUE,
    };
    let mut effects = vec![PersistBlockMove, ExplainUnstarted];
    effects.extend(book);
    Some(Hold {
        reason: Reason::JobActive,
        requeue: Some(requeue),
        effects,
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
    // cannot hide it; only where no destroy could succeed.
    if deletion.abandon && (held || deletion.destroy == Destroyed::Failed) {
        return Decision {
            action: Action::RemoveFinalizer,
            reason: Reason::Abandoned,
            requeue: None,
        };
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

/// Starts `what` unless its op failed recently; then waits out the rest of the retry delay.
fn backoff(s: &Snapshot, now: Timestamp, what: Start, reason: Reason) -> Decision {
    match retry_at(s, what.op) {
        Some(at) if at > now => wait(reason.backoff(), until(now, at)),
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

    // A failed op waits out its own backoff; other checks go on.
    let candidates: Vec<_> = candidates
        .into_iter()
        .map(|(op, reason, due)| (op, reason, retry_at(s, op).map_or(due, |r| r.max(due))))
        .collect();
    if let Some((op, reason, _)) = candidates.iter().find(|(_, _, due)| *due <= now) {
        return start(Start::op(*op), *reason);
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
