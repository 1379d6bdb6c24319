//! Deletion (destroy, release, held deletions) and state problems outside deletion.

use super::*;

pub(super) fn rows() -> Rows {
    use Operation::*;
    use Want::*;
    vec![
        // Deletion.
        (
            "deleting without state",
            cluster().with(|s| {
                deleting(s);
                s.state = StateView::NotFound
            }),
            Release(Reason::DeletingWithoutState),
        ),
        (
            "deleting with state",
            cluster().with(|s| {
                deleting(s);
            }),
            Run(Destroy, Reason::Deleting),
        ),
        (
            "deleting with machines or pools left: the destroy waits for them",
            cluster().with(|s| {
                deleting(s);
                deleting(s).dependents = true
            }),
            WaitFor(Reason::DependentsExist, Duration::from_secs(30)),
        ),
        (
            "dependents are waited for before abandon releases a held deletion",
            cluster().with(|s| {
                deleting(s);
                deleting(s).dependents = true;
                s.state = StateView::Lost;
                deleting(s).abandon = true
            }),
            WaitFor(Reason::DependentsExist, Duration::from_secs(30)),
        ),
        (
            "dependents are waited for even without state",
            cluster().with(|s| {
                deleting(s);
                deleting(s).dependents = true;
                s.state = StateView::NotFound
            }),
            WaitFor(Reason::DependentsExist, Duration::from_secs(30)),
        ),
        (
            "deleting after a successful destroy releases",
            cluster().with(|s| {
                deleting(s);
                deleting(s).destroy = Destroyed::Yes;
            }),
            Release(Reason::Destroyed),
        ),
        (
            "a destroyed object whose state cleanup was interrupted still releases",
            cluster().with(|s| {
                deleting(s);
                deleting(s).destroy = Destroyed::Yes;
                s.state = StateView::Lost;
            }),
            Release(Reason::Destroyed),
        ),
        (
            "deleting, state lost: held",
            cluster().with(|s| {
                deleting(s);
                s.state = StateView::Lost
            }),
            WaitFor(Reason::DeletionHeld, MIN),
        ),
        (
            "deleting, state unreadable: held",
            cluster().with(|s| {
                deleting(s);
                s.state = StateView::Unreadable
            }),
            Wait(Reason::DeletionHeld),
        ),
        (
            "held deletion released by abandon",
            cluster().with(|s| {
                deleting(s);
                s.state = StateView::Lost;
                deleting(s).abandon = true
            }),
            Release(Reason::Abandoned),
        ),
        (
            "abandon wins over a pending restore",
            cluster().with(|s| {
                deleting(s);
                s.state = StateView::Unreadable;
                s.restore_requested = true;
                deleting(s).abandon = true
            }),
            Release(Reason::Abandoned),
        ),
        (
            "a failed destroy may be abandoned",
            cluster().with(|s| {
                deleting(s);
                deleting(s).destroy = Destroyed::Failed;
                deleting(s).abandon = true;
                s.history.destroy.failures = 1;
                s.history.destroy.last_failure = Some(t(NOW - 5))
            }),
            Release(Reason::Abandoned),
        ),
        (
            "durable inputs gone: abandon releases a destroy that cannot start",
            cluster().with(|s| {
                deleting(s);
                deleting(s).inputs_lost = true;
                deleting(s).abandon = true
            }),
            Release(Reason::Abandoned),
        ),
        (
            "durable inputs gone without abandon: the destroy is still what is due (the launch says why it cannot render)",
            cluster().with(|s| {
                deleting(s);
                deleting(s).inputs_lost = true
            }),
            Run(Destroy, Reason::Deleting),
        ),
        (
            "durable inputs gone: dependents are still waited for before abandon",
            cluster().with(|s| {
                deleting(s);
                deleting(s).dependents = true;
                deleting(s).inputs_lost = true;
                deleting(s).abandon = true
            }),
            WaitFor(Reason::DependentsExist, Duration::from_secs(30)),
        ),
        (
            "namespace being deleted: no destroy can start, the deletion is held",
            cluster().with(|s| {
                deleting(s);
                deleting(s).namespace_terminating = true
            }),
            WaitFor(Reason::DeletionHeld, MIN),
        ),
        (
            "namespace being deleted: a restore cannot start either",
            cluster().with(|s| {
                deleting(s);
                deleting(s).namespace_terminating = true;
                s.state = StateView::Lost;
                s.restore_requested = true
            }),
            WaitFor(Reason::DeletionHeld, MIN),
        ),
        (
            "namespace being deleted: abandon releases a readable state",
            cluster().with(|s| {
                deleting(s);
                deleting(s).namespace_terminating = true;
                deleting(s).abandon = true
            }),
            Release(Reason::Abandoned),
        ),
        (
            "namespace being deleted: an object that never applied goes at once",
            cluster().with(|s| {
                deleting(s);
                deleting(s).namespace_terminating = true;
                s.state = StateView::NotFound
            }),
            Release(Reason::DeletingWithoutState),
        ),
        (
            "namespace being deleted after the destroy succeeded: released",
            cluster().with(|s| {
                deleting(s);
                deleting(s).namespace_terminating = true;
                deleting(s).destroy = Destroyed::Yes
            }),
            Release(Reason::Destroyed),
        ),
        (
            "identity lost: abandon releases a destroy that cannot start",
            cluster().with(|s| {
                deleting(s);
                deleting(s).credentials_lost = true;
                deleting(s).abandon = true
            }),
            Release(Reason::Abandoned),
        ),
        (
            "identity lost without abandon: the destroy is still what is due (the launch says why it cannot start)",
            cluster().with(|s| {
                deleting(s);
                deleting(s).credentials_lost = true
            }),
            Run(Destroy, Reason::Deleting),
        ),
        (
            "readable state and a destroy that can run: abandon is ignored",
            cluster().with(|s| {
                deleting(s);
                deleting(s).abandon = true
            }),
            Run(Destroy, Reason::Deleting),
        ),
        (
            "held deletion ignores destroy backoff",
            cluster().with(|s| {
                deleting(s);
                s.state = StateView::Lost;
                s.history.destroy.failures = 3;
                s.history.destroy.last_failure = Some(t(NOW - 5))
            }),
            WaitFor(Reason::DeletionHeld, MIN),
        ),
        (
            "deletion wins over an input change",
            cluster().with(|s| {
                deleting(s);
                s.inputs_hash = Some("h2:b".into())
            }),
            Run(Destroy, Reason::Deleting),
        ),
        (
            "failed destroy backs off",
            cluster().with(|s| {
                deleting(s);
                s.history.destroy.failures = 1;
                s.history.destroy.last_failure = Some(t(NOW - 20))
            }),
            WaitFor(Reason::DeletingBackoff, j(MIN) - Duration::from_secs(20)),
        ),
        (
            "failed destroy retries after backoff",
            cluster().with(|s| {
                deleting(s);
                s.history.destroy.failures = 1;
                s.history.destroy.last_failure = Some(t(NOW - 200))
            }),
            Run(Destroy, Reason::Deleting),
        ),
        (
            "machine deleting with state",
            machine().with(|s| {
                deleting(s);
            }),
            Run(Destroy, Reason::Deleting),
        ),
        // State problems outside deletion.
        (
            "lost state: nothing runs",
            cluster().with(|s| s.state = StateView::Lost),
            WaitFor(Reason::StateLost, MIN),
        ),
        (
            "unreadable state: nothing runs",
            cluster().with(|s| {
                s.state = StateView::Unreadable;
                s.inputs_hash = Some("h2:b".into())
            }),
            Wait(Reason::StateUnreadable),
        ),
        // The state is not the object's: another lineage, or no inputs hash after an apply.
        (
            "a state of another lineage: nothing runs, not even a due drift check",
            cluster().with(|s| {
                s.state = StateView::Foreign;
                s.observed.last_drift_check = Some(t(NOW - 7200))
            }),
            WaitFor(Reason::StateLineageMismatch, MIN),
        ),
        (
            "a state of another lineage: new inputs do not apply into it",
            pool().with(|s| {
                s.state = StateView::Foreign;
                s.inputs_hash = Some("h2:b".into())
            }),
            WaitFor(Reason::StateLineageMismatch, MIN),
        ),
        (
            "an applied object's state without inputs hash never starts an apply by itself",
            cluster().with(|s| s.state = StateView::Unadopted),
            WaitFor(Reason::StateNotAdopted, MIN),
        ),
        (
            "an unadopted machine state: no refresh either",
            machine().with(|s| {
                s.state = StateView::Unadopted;
                s.policy.refresh_after_apply = true
            }),
            WaitFor(Reason::StateNotAdopted, MIN),
        ),
        (
            "an adopted state without inputs hash applies (guarded as any apply)",
            cluster().with(|s| s.state = StateView::Found { inputs_hash: None }),
            Run(Apply, Reason::StateWithoutInputsHash),
        ),
        (
            "a restore replaces a state of another lineage",
            cluster().with(|s| {
                s.state = StateView::Foreign;
                s.restore_requested = true
            }),
            Run(Restore, Reason::RestoreRequested),
        ),
        (
            "a restore replaces an unadopted state while the deletion is held",
            cluster().with(|s| {
                deleting(s);
                s.state = StateView::Unadopted;
                s.restore_requested = true
            }),
            Run(Restore, Reason::RestoreRequested),
        ),
        (
            "deleting with a state of another lineage: held, never destroyed",
            cluster().with(|s| {
                deleting(s);
                s.state = StateView::Foreign
            }),
            WaitFor(Reason::DeletionHeld, MIN),
        ),
        (
            "deleting with an unadopted state: held",
            machine().with(|s| {
                deleting(s);
                s.state = StateView::Unadopted
            }),
            WaitFor(Reason::DeletionHeld, MIN),
        ),
        (
            "abandon releases a deletion held on a foreign state",
            cluster().with(|s| {
                deleting(s);
                s.state = StateView::Foreign;
                deleting(s).abandon = true
            }),
            Release(Reason::Abandoned),
        ),
    ]
}

#[test]
fn table() {
    run(rows());
}
