//! What starts an apply, and an object with nothing to do.

use super::*;

pub(super) fn rows() -> Rows {
    use Operation::*;
    use Want::*;
    vec![
        // Apply triggers.
        (
            "no state",
            cluster().with(|s| s.state = StateView::NotFound),
            Run(Apply, Reason::NoState),
        ),
        (
            "machine without state",
            machine().with(|s| s.state = StateView::NotFound),
            Run(Apply, Reason::NoState),
        ),
        (
            "state without inputs hash",
            cluster().with(|s| s.state = StateView::Found { inputs_hash: None }),
            Run(Apply, Reason::StateWithoutInputsHash),
        ),
        (
            "state without inputs hash on an immutable machine",
            machine().with(|s| s.state = StateView::Found { inputs_hash: None }),
            Run(Apply, Reason::StateWithoutInputsHash),
        ),
        (
            "state without hash backs off after a failure",
            machine().with(|s| {
                s.state = StateView::Found { inputs_hash: None };
                failed_apply(s, "h2:a", 1, NOW - 30)
            }),
            WaitFor(
                Reason::StateWithoutInputsHashBackoff,
                j(MIN) - Duration::from_secs(30),
            ),
        ),
        (
            "state without hash retries after backoff",
            machine().with(|s| {
                s.state = StateView::Found { inputs_hash: None };
                failed_apply(s, "h2:a", 1, NOW - 600)
            }),
            Run(Apply, Reason::StateWithoutInputsHash),
        ),
        (
            "mutable kind, inputs changed",
            cluster().with(|s| s.inputs_hash = Some("h2:b".into())),
            Run(Apply, Reason::InputsChanged),
        ),
        (
            "pool, inputs changed",
            pool().with(|s| s.inputs_hash = Some("h2:b".into())),
            Run(Apply, Reason::InputsChanged),
        ),
        (
            "mutable kind whose inputs cannot be built does not apply",
            cluster().with(|s| s.inputs_hash = None),
            Wait(Reason::UpToDate),
        ),
        (
            "immutable machine ignores a hash difference",
            machine().with(|s| s.inputs_hash = Some("h2:b".into())),
            Wait(Reason::UpToDate),
        ),
        (
            "failed apply retried with equal hashes after backoff",
            cluster().with(|s| failed_apply(s, "h2:a", 1, NOW - 600)),
            Run(Apply, Reason::LastApplyFailed),
        ),
        (
            "failed apply waits for its backoff",
            cluster().with(|s| failed_apply(s, "h2:a", 2, NOW - 60)),
            WaitFor(Reason::LastApplyFailedBackoff, j(2 * MIN) - MIN),
        ),
        (
            "immutable machine never re-applies a failure",
            machine().with(|s| failed_apply(s, "h2:a", 1, NOW - 600)),
            Wait(Reason::UpToDate),
        ),
        (
            "input change after a failure waits for the backoff",
            cluster().with(|s| {
                failed_apply(s, "h2:a", 1, NOW - 10);
                s.inputs_hash = Some("h2:b".into())
            }),
            Wait(Reason::InputsChangedBackoff),
        ),
        (
            "interrupted apply stays due with equal hashes",
            cluster().with(|s| s.interrupted_apply = true),
            Run(Apply, Reason::ApplyInterrupted),
        ),
        (
            "interrupted apply ignored on a provisioned machine (it renders nothing)",
            machine().with(|s| {
                s.interrupted_apply = true;
                s.inputs_hash = None;
            }),
            Wait(Reason::UpToDate),
        ),
        (
            "interrupted apply runs again on a machine that still renders",
            machine().with(|s| s.interrupted_apply = true),
            Run(Apply, Reason::ApplyInterrupted),
        ),
        // Up to date.
        (
            "up to date",
            cluster().with(|s| s.observed.last_drift_check = Some(t(NOW - 60))),
            Wait(Reason::UpToDate),
        ),
    ]
}

#[test]
fn table() {
    run(rows());
}
