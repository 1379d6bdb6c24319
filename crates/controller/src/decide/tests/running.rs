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
    use HoldEffect::*;
    use JobRun::{None as Idle, Ready, Unready};
    let active = |requeue: Duration| {
        Some(Hold {
            reason: Reason::JobActive,
            requeue: Some(requeue),
            effects: vec![
                PersistBlockMove,
                ExplainUnstarted,
                PatchStatus,
                BookFinished,
            ],
        })
    };
    let paused = |effects: Vec<HoldEffect>| {
        Some(Hold {
            reason: Reason::Paused,
            requeue: None,
            effects,
        })
    };
    let ready = crate::schedule::ACTIVE_JOB_REQUEUE;
    let unready = crate::schedule::UNREADY_JOB_REQUEUE;
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
            "paused: the sync period, and clusterctl may move it",
            true,
            false,
            Idle,
            paused(vec![ClearBlockMove, PatchStatus, BookFinished]),
        ),
        (
            "paused with a running Job: block-move stays",
            true,
            false,
            Ready,
            paused(vec![PatchStatus, BookFinished]),
        ),
        (
            "a paused deletion says it waits",
            true,
            true,
            Idle,
            paused(vec![
                ExplainPausedDeletion,
                ClearBlockMove,
                PatchStatus,
                BookFinished,
            ]),
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
        let effects = d.effects();
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
                    Effect::KeepState,
                    Effect::Write,
                    Effect::CleanUp,
                    Effect::BookFinished,
                    Effect::RemoveFinalizer,
                    Effect::AnnounceRelease
                ],
                "{name}: a released object's Secrets go before its finalizer, and no status is written to an object that goes"
            ),
            Action::Start(start) => assert_eq!(
                effects[..4],
                [
                    Effect::EnsureCredentials,
                    Effect::KeepState,
                    Effect::Write,
                    Effect::StartJob(start.clone())
                ],
                "{name}: the credentials are in place and a new serial is backed up before a Job may write the next, and the Job starts before the status that names it is written"
            ),
            Action::Wait => {
                assert!(!effects.iter().any(|e| matches!(e, Effect::StartJob(_))));
                assert_eq!(
                    effects.first(),
                    Some(&Effect::EnsureCredentials),
                    "{name}: a waiting object still shows how far its credentials got"
                );
                assert_eq!(
                    effects.contains(&Effect::ExplainHeldDeletion),
                    d.reason == Reason::DeletionHeld,
                    "{name}"
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
