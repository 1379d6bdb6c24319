//! The snapshot [`decide`](super::decide) reads: every fact a decision needs, typed.

use std::time::Duration;

use captf_api::names::WorkloadKind;
use captf_api::{ApplyPolicy, DriftAction, Operation};
use k8s_openapi::jiff::Timestamp;

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
    /// `captf.io/retry` and `captf.io/replan` tokens no Job answered yet.
    pub requests: Requests,
}

/// The operator's requests for the next attempt now, by token: set on the object, answered by
/// the next Job that starts (it carries the token), used up when that Job is booked. A token
/// a Job already carries is not pending, so a request is honoured once however often the
/// object is reconciled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    /// `captf.io/retry`: a failed op's backoff is skipped.
    pub retry: Option<String>,
    /// `captf.io/replan`: a pending or blocked plan is made again, else drift is checked.
    pub replan: Option<String>,
}

impl Snapshot {
    /// The newest finished apply, unless a pool's exports guard hides it.
    pub(super) fn newest_apply(&self) -> Option<&ApplyAttempt> {
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
    /// The durable inputs a destroy renders from are gone: no destroy can start.
    pub inputs_lost: bool,
    /// The namespace is being deleted: nothing can be created in it, so no Job can start.
    pub namespace_terminating: bool,
    /// The identity is gone or does not allow the namespace, or its credentials cannot be
    /// mirrored (`IdentityAllowed` or `CredentialsMirrored` False when last looked at): no
    /// destroy can start.
    pub credentials_lost: bool,
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
    pub(super) fn of(&self, op: Operation) -> &OpHistory {
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
    /// The plan key it was fingerprinted with is gone: its hash can never match a plan made
    /// with the key that replaces it, so no approval of it can apply anything.
    pub key_lost: bool,
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
