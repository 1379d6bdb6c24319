//! What runs before anything else: a running Job holds every decision, and a requested
//! restore comes next.

use super::*;

pub(super) fn rows() -> Rows {
    use Operation::*;
    use Want::*;
    vec![
        // A running Job: nothing else happens.
        (
            "job active",
            cluster().with(|s| s.job_active = true),
            WaitFor(Reason::JobActive, MIN),
        ),
        (
            "job active beats deletion",
            cluster().with(|s| {
                s.job_active = true;
                s.deleting = true
            }),
            Wait(Reason::JobActive),
        ),
        (
            "job active beats input change",
            cluster().with(|s| {
                s.job_active = true;
                s.inputs_hash = Some("h2:b".into())
            }),
            Wait(Reason::JobActive),
        ),
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
                s.deleting = true;
                s.state = StateView::Unreadable
            }),
            Run(Restore, Reason::RestoreRequested),
        ),
        (
            "deletion wins over a restore when it can proceed",
            cluster().with(|s| {
                s.restore_requested = true;
                s.deleting = true
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
