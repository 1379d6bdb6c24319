//! What holds a pass before it observes (pause, a running Job), and what comes first once it
//! observes: a requested restore.

use super::*;

pub(super) fn rows() -> Rows {
    use Operation::*;
    use Want::*;
    vec![
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
                deleting(s);
                s.state = StateView::Unreadable
            }),
            Run(Restore, Reason::RestoreRequested),
        ),
        (
            "deletion wins over a restore when it can proceed",
            cluster().with(|s| {
                s.restore_requested = true;
                deleting(s);
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
    ]
}

#[test]
fn table() {
    run(rows());
}

#[test]
fn what_holds_a_pass_before_it_observes() {
    use Effect::*;
    use JobRun::{None as Idle, Ready, Stuck, Unready};
    let active = |requeue: Duration| {
        Some(Hold {
            reason: Reason::JobActive,
            requeue: Some(requeue),
            effects: vec![BlockMove(true), ExplainUnstarted, PatchStatus, BookFinished],
        })
    };
    let paused_until = |requeue: Option<Duration>, effects: Vec<Effect>| {
        Some(Hold {
            reason: Reason::Paused,
            requeue,
            effects,
        })
    };
    let paused = |effects: Vec<Effect>| paused_until(None, effects);
    let ready = crate::schedule::ACTIVE_JOB_REQUEUE;
    let unready = crate::schedule::UNREADY_JOB_REQUEUE;
    let soon = Some(crate::schedule::STUCK_JOB_REQUEUE);
    // The status that no longer names the Job comes before its deletion.
    let delete = || vec![PatchStatus, DeleteStuckJob, BookFinished];
    let cases = [
        ("nothing holds it", false, false, Idle, None),
        ("nothing holds a deletion either", false, true, Idle, None),
        (
            "a running Job: nothing else is read or started, block-move stays",
            false,
            false,
            Ready,
            active(ready),
        ),
        (
            "a Job with no ready pod is looked at sooner (it may never start)",
            false,
            false,
            Unready,
            active(unready),
        ),
        (
            "a running Job holds a deletion",
            false,
            true,
            Ready,
            active(ready),
        ),
        (
            "a stuck Job is deleted, and the operation starts again soon",
            false,
            false,
            Stuck,
            Some(Hold {
                reason: Reason::JobActive,
                requeue: soon,
                effects: delete(),
            }),
        ),
        (
            "a deletion's stuck Job is deleted too",
            false,
            true,
            Stuck,
            Some(Hold {
                reason: Reason::JobActive,
                requeue: soon,
                effects: delete(),
            }),
        ),
        (
            "paused: the sync period, and clusterctl may move it",
            true,
            false,
            Idle,
            paused(vec![BlockMove(false), PatchStatus, BookFinished]),
        ),
        (
            "paused with a running Job: block-move stays",
            true,
            false,
            Ready,
            paused(vec![PatchStatus, BookFinished]),
        ),
        (
            "paused with a Job that has not started: looked at as often as unpaused",
            true,
            false,
            Unready,
            paused_until(Some(unready), vec![PatchStatus, BookFinished]),
        ),
        (
            "paused, a stuck Job is deleted all the same (it would block a move for good)",
            true,
            false,
            Stuck,
            paused_until(soon, delete()),
        ),
        (
            "a paused deletion's stuck Job is deleted, and the deletion still waits",
            true,
            true,
            Stuck,
            paused_until(soon, delete()),
        ),
        (
            "a paused deletion waits (its status says so: decide::status)",
            true,
            true,
            Idle,
            paused(vec![BlockMove(false), PatchStatus, BookFinished]),
        ),
    ];
    for (case, paused, deleting, job, want) in cases {
        let p = Preamble {
            paused,
            deleting,
            job,
        };
        assert_eq!(hold(p), want, "{case}");
    }
}

/// The invariants the order of effects carries, for every decision of the table.
#[test]
fn effects_keep_their_order() {
    for (name, snapshot, _) in all_rows() {
        let d = decide(&snapshot, t(NOW));
        let observed = Effect::Event(crate::decide::Note::normal("Observed", String::new()));
        let effects = d.effects(vec![observed.clone()]);
        let at = |e: &Effect| effects.iter().position(|x| x == e);
        // The status that records the finished Jobs is written before they are bookkept.
        if let Some(book) = at(&Effect::BookFinished) {
            let patched = at(&Effect::PatchStatus).or(at(&Effect::RemoveFinalizer));
            assert!(
                matches!(d.action, Action::RemoveFinalizer) || patched < Some(book),
                "{name}: {effects:?}"
            );
        }
        match &d.action {
            Action::RemoveFinalizer => assert_eq!(
                effects,
                [
                    Effect::BlockMove(false),
                    Effect::KeepState,
                    observed,
                    Effect::CleanUp,
                    Effect::BookFinished,
                    Effect::RemoveFinalizer,
                    Effect::AnnounceRelease
                ],
                "{name}: a released object's Secrets go before its finalizer, and no status is written to an object that goes"
            ),
            Action::Start(start) => assert_eq!(
                effects[..5],
                [
                    Effect::BlockMove(false),
                    Effect::EnsureCredentials,
                    Effect::KeepState,
                    observed,
                    Effect::StartJob(start.clone())
                ],
                "{name}: the credentials are in place and a new serial is backed up before a Job may write the next, what observe found is written before, and the Job starts before the status that names it is written"
            ),
            Action::Wait => {
                assert!(!effects.iter().any(|e| matches!(e, Effect::StartJob(_))));
                assert_eq!(
                    effects.get(1),
                    Some(&Effect::EnsureCredentials),
                    "{name}: a waiting object still shows how far its credentials got"
                );
                assert_eq!(
                    !effects.contains(&Effect::ExplainWait),
                    d.reason == Reason::DeletionHeld,
                    "{name}: a held deletion is explained in status, anything else by the kind"
                );
            }
        }
        assert_eq!(
            effects
                .iter()
                .filter(|e| **e == Effect::PatchStatus)
                .count(),
            usize::from(!matches!(d.action, Action::RemoveFinalizer)),
            "{name}: status is written once"
        );
    }
}

#[test]
fn what_a_pass_does_past_its_entry() {
    use Admit::*;
    use Dependencies::{ClusterBusy as Busy, Missing, Ready};
    let cases = [
        ("ready, finalized: go on", false, Ready, true, Go),
        (
            "ready, no finalizer: add it first",
            false,
            Ready,
            false,
            AddFinalizer,
        ),
        ("dependencies missing: gated", false, Missing, true, Gated),
        (
            "gated before the finalizer is added",
            false,
            Missing,
            false,
            Gated,
        ),
        (
            "the cluster's Job writes: hold",
            false,
            Busy,
            true,
            ClusterBusy,
        ),
        (
            "the cluster's Job holds a deletion too",
            true,
            Busy,
            true,
            ClusterBusy,
        ),
        (
            "a deletion goes on without its dependencies",
            true,
            Missing,
            true,
            Go,
        ),
        ("a deletion adds no finalizer", true, Ready, false, Go),
    ];
    for (case, deleting, dependencies, finalizer, want) in cases {
        let entry = Entry {
            deleting,
            dependencies,
            finalizer,
        };
        assert_eq!(admit(entry), want, "{case}");
    }
}

#[test]
fn a_job_is_stuck_only_when_it_never_started_and_cannot() {
    let age = crate::schedule::STUCK_JOB_AGE;
    let pending = || Some("Pending".to_owned());
    let job =
        |age: Option<Duration>, run_secret: bool, pod_phases: Vec<Option<String>>| UnstartedJob {
            age,
            run_secret,
            pod_phases,
        };
    let cases = [
        (
            "a minute old, its Secret gone, its pod Pending",
            job(Some(age), false, vec![pending()]),
            true,
        ),
        (
            "every pod Pending",
            job(Some(age * 5), false, vec![pending(), pending()]),
            true,
        ),
        (
            "no pod at all (none started): stuck too",
            job(Some(age), false, vec![]),
            true,
        ),
        (
            "younger than a minute: the Job controller, scheduler and kubelet get their turn",
            job(Some(age - Duration::from_secs(1)), false, vec![pending()]),
            false,
        ),
        ("of unknown age", job(None, false, vec![pending()]), false),
        (
            "its Secret is there: it may still start (or says why it does not)",
            job(Some(age * 5), true, vec![pending()]),
            false,
        ),
        (
            "a pod runs: it may be writing the state",
            job(Some(age), false, vec![Some("Running".into())]),
            false,
        ),
        (
            "one pod of two left Pending",
            job(Some(age), false, vec![pending(), Some("Failed".into())]),
            false,
        ),
        (
            "a pod with no phase yet is not known to be Pending",
            job(Some(age), false, vec![None]),
            false,
        ),
    ];
    for (case, job, want) in cases {
        assert_eq!(stuck(&job), want, "{case}");
    }
}
