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
    let held = |paused, job_active| {
        hold(Preamble { paused, job_active }).map(|d| (d.action, d.reason, d.requeue))
    };
    let active = Some((
        Action::Wait,
        Reason::JobActive,
        Some(crate::schedule::ACTIVE_JOB_REQUEUE),
    ));
    let paused = Some((Action::Wait, Reason::Paused, None));
    let cases = [
        ("nothing holds it", false, false, None),
        (
            "a running Job: nothing else is read or started",
            false,
            true,
            active,
        ),
        ("paused: the sync period", true, false, paused.clone()),
        ("paused with a running Job: paused", true, true, paused),
    ];
    for (case, p, j, want) in cases {
        assert_eq!(held(p, j), want, "{case}");
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
