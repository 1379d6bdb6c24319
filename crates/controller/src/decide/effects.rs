//! Every write of a pass as data: the one [`Effect`] type, and the effects of a decision in
//! order. The order carries the invariants: the status that records the finished Jobs is
//! written before they are marked bookkept, a released object's Secrets and leases go before
//! its finalizer, and block-move is persisted while a Job runs (the Job's own start persists it
//! before the Job exists, see [`super::launch::Step::Inputs`]).

use captf_api::Operation;

use super::book::Adoption;
use super::{Action, Decision, Reason, Start};

/// Every write a pass makes, as data, in the order it is made: what observe found due, what
/// recording a finished Job does, what holds a pass and what a decision does. One interpreter
/// carries them out (`reconcile::interpret`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    // The object itself.
    /// Add the kind's finalizer; the pass ends there and the next one starts from it.
    AddFinalizer,
    /// `clusterctl.cluster.x-k8s.io/block-move`: set while a Job runs, so clusterctl never
    /// moves an object whose state a Job may be writing; cleared once none runs.
    BlockMove(bool),
    /// A merge patch of the object (what its outputs set in its spec); `what` names it in an
    /// error.
    PatchObject {
        patch: serde_json::Value,
        what: &'static str,
    },
    /// An annotation of the object used up, if it still holds `value`; `announce` once it was.
    Consume {
        annotation: &'static str,
        value: String,
        announce: Option<Note>,
    },
    /// An event about the object (and its Job, when it names one).
    Event(Note),
    /// A merge patch of the CAPI object `name` of kind `object` in the object's namespace.
    PatchCapi {
        object: CapiObject,
        name: String,
        patch: serde_json::Value,
        what: String,
    },

    // The state and the durable inputs.
    /// The state a Job wrote becomes the object's.
    AdoptState(Adoption),
    /// An annotation of the durable inputs set (`None`: removed): an interrupted apply, a
    /// pool's exports marks.
    MarkInputs {
        annotation: &'static str,
        value: Option<String>,
    },
    /// The state's lineage recorded on the durable inputs, where it survives a lost state
    /// (left alone while they do not exist).
    RecordLineage(String),
    /// A pool's record of the exports values last applied, on its durable inputs (`None`:
    /// removed).
    AppliedExports(Option<Vec<u8>>),
    /// The leases Job `0` took are released (only while it still holds them).
    ReleaseLeases(String),

    // Metrics.
    /// One more of a counter.
    Count(Counter),
    /// A gauge of the object set to what the pass found.
    Gauge(Gauge),

    // A pass that stops before it observes.
    /// Say why the running Job has not started, if it has not (`JobNotStarted`).
    ExplainUnstarted,
    /// Delete the stuck Job (background propagation), release its leases as bookkeeping
    /// does, and say so (`StuckJobDeleted`, naming the Job). After the status patch.
    DeleteStuckJob,

    // A pass that observed and decided.
    /// Mirror the identity's credentials into the namespace and keep its runner RBAC
    /// current, and say how far they got (a Job starts only with both in place).
    EnsureCredentials,
    /// Record the state's lineage where it survives a lost state, use up an adoption, back up
    /// a serial not backed up yet and re-own the object's Secrets: before anything can write a
    /// new serial, and before the status that lists the backups.
    KeepState,
    /// The kind says what it waits for (a cluster: the plan awaiting approval).
    ExplainWait,
    /// Start the decided Job (its own steps are [`super::launch::launch`]'s).
    StartJob(Start),
    /// Delete the object's Secrets and leases: a released object leaves nothing.
    CleanUp,
    /// Write status, once.
    PatchStatus,
    /// Mark the finished Jobs bookkept, delete their per-run Secrets, release their leases.
    BookFinished,
    /// Delete the Jobs beyond the history limits.
    PruneJobs,
    /// Remove the finalizer: the object goes.
    RemoveFinalizer,
    /// Say how the object was released (destroyed, abandoned, or nothing to destroy).
    AnnounceRelease,
}

/// The counters a pass adds to, with their label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// `captf_state_restores_total{result}`.
    Restore(&'static str),
    /// `captf_plan_approvals_total{result}`: a Manual plan's way from created to applied.
    Approval(&'static str),
    /// `captf_state_read_errors_total{reason}`.
    StateReadError(&'static str),
    /// `captf_remediation_requests_total{action}`.
    Remediation(&'static str),
    /// `captf_reconcile_op_decisions_total{op, reason}`: what a pass decided, or why it held.
    Decision { op: &'static str, reason: Reason },
}

/// The object's gauges a pass sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gauge {
    /// `captf_state_resources`: the resources the state manages.
    StateResources(i64),
    /// `captf_state_bytes`: the state's compressed size.
    StateBytes(i64),
    /// `captf_inputs_bytes`: the inputs as rendered this pass.
    InputsBytes(i64),
    /// `captf_job_unstarted_seconds`: how long `op`'s Job has waited to start (`None`: no
    /// series; only `op`'s is kept).
    Unstarted {
        op: Option<Operation>,
        waited: Option<i64>,
    },
}

/// The CAPI objects a pass writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapiObject {
    Machine,
    MachinePool,
}

/// An Event: `Normal` unless `warning`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
    /// The Job the event is about: its related object, so each Job's event is its own and not
    /// folded into the series of the object's first event of that reason.
    pub job: Option<String>,
}

impl Note {
    pub fn normal(reason: &'static str, message: String) -> Note {
        Note {
            warning: false,
            reason,
            message,
            job: None,
        }
    }

    pub fn warning(reason: &'static str, message: String) -> Note {
        Note {
            warning: true,
            reason,
            message,
            job: None,
        }
    }
}

impl Effect {
    /// Whether carrying it out changes the durable inputs, which the pass then reads again.
    pub fn changes_durable_inputs(&self) -> bool {
        matches!(
            self,
            Effect::AdoptState(_) | Effect::MarkInputs { .. } | Effect::AppliedExports(_)
        )
    }
}

impl Decision {
    /// The effects of this decision, in the order they are carried out; `observed` are the
    /// writes observe found due (outputs, a pool's exports records, events), carried out
    /// after the state is kept and before a Job can start.
    pub fn effects(&self, observed: Vec<Effect>) -> Vec<Effect> {
        use Effect::*;
        let (before, after) = match &self.action {
            Action::RemoveFinalizer => (
                vec![KeepState],
                vec![CleanUp, BookFinished, RemoveFinalizer, AnnounceRelease],
            ),
            Action::Start(start) => (
                vec![EnsureCredentials, KeepState],
                vec![
                    StartJob(start.clone()),
                    PatchStatus,
                    BookFinished,
                    PruneJobs,
                ],
            ),
            // A held deletion is explained in status (`decide::status`); anything else the
            // kind says.
            Action::Wait if self.reason == Reason::DeletionHeld => (
                vec![EnsureCredentials, KeepState],
                vec![PatchStatus, BookFinished, PruneJobs],
            ),
            Action::Wait => (
                vec![EnsureCredentials, KeepState],
                vec![ExplainWait, PatchStatus, BookFinished, PruneJobs],
            ),
        };
        // No Job runs once a pass observes: clusterctl may move the object until one starts
        // (the Job's own start sets block-move before the Job exists).
        let mut effects = vec![BlockMove(false)];
        effects.extend(before);
        effects.extend(observed);
        effects.extend(after);
        effects
    }
}
