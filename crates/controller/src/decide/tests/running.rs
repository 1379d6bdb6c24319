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
