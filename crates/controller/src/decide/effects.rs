//! What the act step does with a decision, as data: the effects in order. The order carries
//! the invariants: the status that records the finished Jobs is written before they are marked
//! bookkept, a released object's Secrets and leases go before its finalizer, and block-move is
//! persisted while a Job runs (the Job's own start persists it before the Job exists, see
//! [`super::launch::Step::Inputs`]).

use super::{Action, Decision, Reason, Start};

/// One effect of a pass that observed and decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Carry out the writes observe found due, in order: what a kind's outputs set on its
    /// objects, a pool's exports records, and events (a state lock someone else holds).
    Write,
    /// Mirror the identity's credentials into the namespace and keep its runner RBAC
    /// current, and say how far they got (a Job starts only with both in place).
    EnsureCredentials,
    /// Record the state's lineage where it survives a lost state, use up an adoption, back up
    /// a serial not backed up yet and re-own the object's Secrets: before anything can write a
    /// new serial, and before the status that lists the backups.
    KeepState,
    /// `Deleting` says why the destroy cannot run, and both ways out.
    ExplainHeldDeletion,
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

/// One effect of a pass that [`super::hold`] stopped before it observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldEffect {
    /// `Deleting` says the deletion waits until the object is unpaused.
    ExplainPausedDeletion,
    /// No Job runs: clusterctl may move the object.
    ClearBlockMove,
    /// A Job runs: clusterctl must not move the object.
    PersistBlockMove,
    /// Say why the running Job has not started, if it has not (`JobNotStarted`).
    ExplainUnstarted,
    /// The stuck Job's operation condition says it is deleted and starts again.
    ExplainStuck,
    /// Write status (a stuck Job no longer named in `status.activeJob`).
    PatchStatus,
    /// Delete the stuck Job (background propagation), release its leases as bookkeeping
    /// does, and say so (`StuckJobDeleted`, naming the Job). After the status patch.
    DeleteStuckJob,
    BookFinished,
}

impl Decision {
    /// The effects of this decision, in the order act carries them out.
    pub fn effects(&self) -> Vec<Effect> {
        use Effect::*;
        match &self.action {
            Action::RemoveFinalizer => {
                vec![
                    KeepState,
                    Write,
                    CleanUp,
                    BookFinished,
                    RemoveFinalizer,
                    AnnounceRelease,
                ]
            }
            Action::Start(start) => vec![
                EnsureCredentials,
                KeepState,
                Write,
                StartJob(start.clone()),
                PatchStatus,
                BookFinished,
                PruneJobs,
            ],
            Action::Wait if self.reason == Reason::DeletionHeld => {
                vec![
                    EnsureCredentials,
                    KeepState,
                    Write,
                    ExplainHeldDeletion,
                    PatchStatus,
                    BookFinished,
                    PruneJobs,
                ]
            }
            Action::Wait => vec![
                EnsureCredentials,
                KeepState,
                Write,
                ExplainWait,
                PatchStatus,
                BookFinished,
                PruneJobs,
            ],
        }
    }
}
