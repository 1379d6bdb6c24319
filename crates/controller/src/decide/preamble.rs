//! The decisions a pass makes before it observes: whether it goes past its entry
//! ([`admit`]) and whether it stops while paused or while a Job runs ([`hold`]).

use std::time::Duration;

use super::{Effect, Reason};
use crate::schedule;

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
    /// It never started and cannot ([`stuck`]): delete it, and start its operation again.
    Stuck,
}

/// What a pass saw of an active Job with no ready pod, for [`stuck`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnstartedJob {
    /// How long ago the Job was created (`None`: it does not say).
    pub age: Option<Duration>,
    /// Its per-run Secret `captf-run-<job>` exists.
    pub run_secret: bool,
    /// The phase of each of its pods (`None`: a pod that has none yet).
    pub pod_phases: Vec<Option<String>>,
}

/// Whether an active Job is stuck (spec §13.4): older than [`schedule::STUCK_JOB_AGE`], its
/// per-run Secret missing, and every pod still `Pending`. Its pods wait for a volume that will
/// never appear (the Secret is written once, before the Job), and none ever ran, so nothing
/// of it can have touched the state: it is deleted and its operation starts again with a
/// Secret of its own. A Job with no pod at all counts (none started). A Job of unknown age,
/// or with a pod that left `Pending` (it may have run), is never stuck.
pub fn stuck(job: &UnstartedJob) -> bool {
    job.age.is_some_and(|age| age >= schedule::STUCK_JOB_AGE)
        && !job.run_secret
        && job
            .pod_phases
            .iter()
            .all(|phase| phase.as_deref() == Some("Pending"))
}

/// A pass that stops before it observes, and what it does instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// [`Reason::Paused`] or [`Reason::JobActive`].
    pub reason: Reason,
    /// When to look again (absent: at the sync period).
    pub requeue: Option<Duration>,
    pub effects: Vec<Effect>,
}

/// Whether the pass stops before it observes: a paused object only books its finished Jobs
/// (a deletion waits too, and says so), and while a Job runs nothing is read that it may be
/// writing (the state, its lock) and nothing else starts; block-move stays set. A stuck Job
/// is deleted, paused or not, after the status that no longer names it as active (so the pass
/// after never takes it for an apply that vanished), and the pass after comes soon: it starts
/// the operation again, or, paused, clears block-move. `None`: observe, then
/// [`decide`](super::decide).
pub fn hold(p: Preamble) -> Option<Hold> {
    use Effect::*;
    let book = [PatchStatus, BookFinished];
    // Its status says it is deleted (`decide::status`).
    let stuck = [PatchStatus, DeleteStuckJob, BookFinished];
    if p.paused {
        // A paused deletion says so in status (`decide::status`).
        let mut effects = Vec::new();
        // A paused object's running Job keeps block-move set; once none runs it may move.
        if p.job == JobRun::None {
            effects.push(BlockMove(false));
        }
        let requeue = match p.job {
            JobRun::Stuck => {
                effects.extend(stuck);
                Some(schedule::STUCK_JOB_REQUEUE)
            }
            // A paused object's Job that may never start is looked at as often as anyone's.
            JobRun::Unready => {
                effects.extend(book);
                Some(schedule::UNREADY_JOB_REQUEUE)
            }
            JobRun::None | JobRun::Ready => {
                effects.extend(book);
                None
            }
        };
        return Some(Hold {
            reason: Reason::Paused,
            requeue,
            effects,
        });
    }
    let requeue = match p.job {
        JobRun::None => return None,
        JobRun::Ready => schedule::ACTIVE_JOB_REQUEUE,
        JobRun::Unready => schedule::UNREADY_JOB_REQUEUE,
        JobRun::Stuck => {
            return Some(Hold {
                reason: Reason::JobActive,
                requeue: Some(schedule::STUCK_JOB_REQUEUE),
                effects: stuck.to_vec(),
            });
        }
    };
    let mut effects = vec![BlockMove(true), ExplainUnstarted];
    effects.extend(book);
    Some(Hold {
        reason: Reason::JobActive,
        requeue: Some(requeue),
        effects,
    })
}
