//! What a pass writes in status, composed from what it found and decided: the conditions of its
//! frame (`Deleting`, `Paused`, `DependenciesReady`, `DeletionBlocked`, `StateReadable`, a
//! restore that cannot run, a member waiting for its cluster's Job, a stuck Job deleted) and
//! the defaults of a fresh object. A pass gathers the [`Frame`] as it goes; the status patch
//! applies [`frame`] once, just before it writes.

use captf_api::conditions::{Status, reasons, types};
use captf_api::names::ObjectKey;
use captf_api::{Operation, annotations};

use super::{Decision, Snapshot, StateView};

/// A condition as a pass says it; applied in order, the last word on a type wins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Set {
    pub type_: &'static str,
    pub status: Status,
    pub reason: &'static str,
    pub message: String,
}

impl Set {
    pub fn new(type_: &'static str, status: Status, reason: &'static str, message: &str) -> Set {
        Set {
            type_,
            status,
            reason,
            message: message.to_owned(),
        }
    }
}

/// What the frame of a pass found: the facts its conditions are composed from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    pub deleting: bool,
    /// Paused by the annotation or the Cluster (`None`: not looked at yet this pass, the
    /// condition stays as it was).
    pub paused: Option<bool>,
    /// What the object belongs to, as the entry found it (`None`: not looked at this pass,
    /// the condition stays as it was).
    pub dependencies: Option<Dependencies>,
    /// A cluster being deleted: its machines and pools (`None`: not listed this pass).
    pub dependents: Option<Dependents>,
    /// The decision holds the deletion ([`super::Reason::DeletionHeld`]): what `Deleting`
    /// explains.
    pub held: Option<HeldDeletion>,
    /// The state as observe found it (`None`: not read this pass).
    pub state: Option<Readable>,
    /// Someone else holds the lock of the readable state.
    pub locked: Option<Locked>,
    /// A `captf.io/restore-state` request that cannot be honoured.
    pub restore: Option<RestoreRefused>,
    /// A member never provisioned whose cluster's Job may be writing the state it renders
    /// from: the cluster and the Job.
    pub cluster_busy: Option<(String, String)>,
    /// A Job that never started ([`super::stuck`]), deleted by this pass: its name and
    /// operation.
    pub stuck: Option<(String, Operation)>,
}

/// Why a requested restore cannot run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreRefused {
    /// The annotation's value is not a serial.
    NotASerial(String),
    /// No complete backup of `serial`; `kept` are the serials of those kept.
    NoBackup { serial: String, kept: Vec<String> },
}

/// What the pass found of the state, for `StateReadable`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readable {
    /// Read, and the object's own.
    Read,
    /// None yet: the first apply creates it.
    NotFound,
    /// Gone, though the object applied before.
    Lost,
    /// Not decodable: the reader's reason and what it says.
    Unreadable {
        reason: &'static str,
        message: String,
    },
    /// Of another lineage than the object's own.
    Foreign {
        found: String,
        expected: String,
        serial: u64,
    },
    /// The object's, but without the inputs hash of a CAPTF apply.
    Unadopted { lineage: String, serial: u64 },
}

/// The lock of the state, held by someone else than the object's Jobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Locked {
    /// Who holds it, as shown.
    pub holder: String,
    pub id: String,
}

/// `DependenciesReady` as the entry found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dependencies {
    Ready,
    /// Not ready: the condition's status, reason and message.
    Missing(Status, &'static str, String),
}

/// A cluster's machines and pools while it is deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dependents {
    None,
    /// Some are left: the message naming them.
    Left(String),
}

/// A deletion the decision holds, and what `Deleting` says of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldDeletion {
    pub uid: String,
    /// The namespace is being deleted, so no destroy Job can start in it.
    pub namespace_terminating: bool,
    pub state: StateView,
    /// `captf.io/abandon-infrastructure` when it names another UID than the object's.
    pub other_abandon: Option<String>,
}

/// The frame's conditions for the object `key`, in the order they are applied.
pub fn frame(f: &Frame, key: &ObjectKey) -> Vec<Set> {
    let mut said = vec![deleting(f, key)];
    said.extend(f.paused.map(paused));
    match &f.dependencies {
        Some(Dependencies::Ready) => said.push(Set::new(
            types::DEPENDENCIES_READY,
            Status::True,
            reasons::DEPENDENCIES_READY,
            "",
        )),
        Some(Dependencies::Missing(status, reason, message)) => {
            said.push(Set::new(
                types::DEPENDENCIES_READY,
                *status,
                reason,
                message,
            ));
        }
        None => {}
    }
    match &f.dependents {
        Some(Dependents::None) => said.push(Set::new(
            types::DELETION_BLOCKED,
            Status::False,
            reasons::NOT_BLOCKED,
            "",
        )),
        Some(Dependents::Left(message)) => said.push(Set::new(
            types::DELETION_BLOCKED,
            Status::True,
            reasons::DEPENDENTS_EXIST,
            message,
        )),
        None => {}
    }
    if let Some(state) = &f.state {
        said.push(state_readable(state, f.locked.as_ref(), key));
    }
    if let Some(refused) = &f.restore {
        said.push(restore_refused(refused));
    }
    if let Some((job, op)) = &f.stuck {
        said.push(Set {
            type_: super::launch::condition_of(*op),
            status: Status::False,
            reason: reasons::JOB_NOT_STARTED,
            message: stuck_message(job, *op),
        });
    }
    if let Some((cluster, job)) = &f.cluster_busy {
        said.push(Set {
            type_: types::APPLY_JOB_SUCCEEDED,
            status: Status::Unknown,
            reason: reasons::WAITING_FOR_CLUSTER_OPERATION,
            message: format!(
                "TerraformCluster {cluster}: its Job {job} may be writing its state, which holds the exports this object renders; they are read once it ends"
            ),
        });
    }
    said
}

/// `RestoreJobSucceeded` of a restore that cannot run, and what to ask instead.
pub fn restore_refused(refused: &RestoreRefused) -> Set {
    let message = match refused {
        RestoreRefused::NotASerial(value) => format!(
            "captf.io/restore-state={value:?} is not a state serial: use one of status.stateBackups[].serial"
        ),
        RestoreRefused::NoBackup { serial, kept } => format!(
            "no complete backup of serial {serial}; the backups kept hold serials [{}] (status.stateBackups)",
            kept.join(", ")
        ),
    };
    Set {
        type_: types::RESTORE_JOB_SUCCEEDED,
        status: Status::False,
        reason: reasons::RESTORE_BACKUP_NOT_FOUND,
        message,
    }
}

/// What is said of a stuck Job, on its operation's condition and in `StuckJobDeleted`.
pub fn stuck_message(job: &str, op: Operation) -> String {
    format!(
        "Job {job} never started: its per-run Secret {} is gone and its pods were still Pending after {} s, so CAPTF deleted it; the {} starts again with a Secret of its own",
        captf_api::names::per_run_secret(job),
        crate::schedule::STUCK_JOB_AGE.as_secs(),
        op.as_str()
    )
}

/// `StateReadable`: what was found of the state, or the lock someone else holds on it.
pub fn state_readable(state: &Readable, locked: Option<&Locked>, key: &ObjectKey) -> Set {
    let kind = key.kind().kind().to_lowercase();
    let (ns, name) = (key.namespace(), key.name());
    let adopt = annotations::ADOPT_STATE;
    let (status, reason, message) = match (state, locked) {
        (_, Some(Locked { holder, id })) => (
            Status::False,
            reasons::STATE_LOCKED,
            format!(
                "the state lock is {holder}: not taken by this object's Jobs, so CAPTF never forces it. Release it where it was taken (`tofu force-unlock {id}` or `terraform force-unlock {id}` with the same backend); until then every Job waits lockTimeoutSeconds for it and fails"
            ),
        ),
        (Readable::Read, None) => (Status::True, reasons::STATE_READ, String::new()),
        (Readable::NotFound, None) => (
            Status::Unknown,
            reasons::STATE_NOT_FOUND,
            "no state yet: the first apply creates it".to_owned(),
        ),
        (Readable::Lost, None) => (
            Status::False,
            reasons::STATE_LOST,
            "the object applied before but its state Secret is gone; nothing runs until it is restored from a backup: captf.io/restore-state=<serial> with a serial of status.stateBackups, or, when it lists none, the captf.io/state-backup-serial of a backup Secret labelled captf.io/state-backup-suffix=<suffix> (docs/runbooks/total-state-loss.md)".to_owned(),
        ),
        (Readable::Unreadable { reason, message }, None) => {
            (Status::False, *reason, message.clone())
        }
        (
            Readable::Foreign {
                found,
                expected,
                serial,
            },
            None,
        ) => (
            Status::False,
            reasons::STATE_LINEAGE_MISMATCH,
            format!(
                "the state Secrets hold lineage {found} (serial {serial}), but this object's state is lineage {expected}: it is not this object's state, so nothing runs against it. Restore the object's own state with captf.io/restore-state=<serial> (status.stateBackups), or, if lineage {found} is this object's state now, adopt it: kubectl annotate {kind} {name} -n {ns} {adopt}={found} (docs/backups.md)"
            ),
        ),
        (Readable::Unadopted { lineage, serial }, None) => (
            Status::False,
            reasons::STATE_WITHOUT_INPUTS_HASH,
            format!(
                "the object applied before, but its state (lineage {lineage}, serial {serial}) has no {} annotation: CAPTF cannot tell which inputs produced it (a state pushed by hand, or written outside a CAPTF apply), so nothing runs against it. Check it, then let CAPTF apply the current inputs over it (guarded as usual): kubectl annotate {kind} {name} -n {ns} {adopt}={lineage}; or restore a backup with captf.io/restore-state=<serial> (docs/backups.md)",
                annotations::INPUTS_HASH,
            ),
        ),
    };
    Set {
        type_: types::STATE_READABLE,
        status,
        reason,
        message,
    }
}

/// `Deleting`: why a deletion waits, the most pressing reason first.
fn deleting(f: &Frame, key: &ObjectKey) -> Set {
    let message = match (&f.held, &f.dependents) {
        _ if !f.deleting => {
            return Set::new(types::DELETING, Status::False, reasons::NOT_DELETING, "");
        }
        _ if f.paused == Some(true) => {
            "Deletion waits until the object is unpaused (Cluster spec.paused or the cluster.x-k8s.io/paused annotation); a paused object never runs a destroy".to_owned()
        }
        (Some(held), _) => held_deletion(held, key),
        (None, Some(Dependents::Left(_))) => {
            "deleting: waiting for the cluster's machines and pools to be deleted before the destroy".to_owned()
        }
        (None, _) => "deleting: the infrastructure is destroyed first".to_owned(),
    };
    Set {
        type_: types::DELETING,
        status: Status::True,
        reason: reasons::DELETING,
        message,
    }
}

fn paused(paused: bool) -> Set {
    if paused {
        Set::new(
            types::PAUSED,
            Status::True,
            reasons::PAUSED,
            "paused by the cluster.x-k8s.io/paused annotation or the Cluster's spec.paused",
        )
    } else {
        Set::new(types::PAUSED, Status::False, reasons::NOT_PAUSED, "")
    }
}

/// Why the destroy cannot run, and both ways out.
fn held_deletion(h: &HeldDeletion, key: &ObjectKey) -> String {
    let (ns, name, uid) = (key.namespace(), key.name(), &h.uid);
    let kind = key.kind().kind().to_lowercase();
    let abandon = annotations::ABANDON_INFRASTRUCTURE;
    let mut message = if h.namespace_terminating && h.state != StateView::NotFound {
        format!(
            "deletion is held: namespace {ns} is being deleted, so no destroy Job can start in it. The state, its backups and the durable inputs are kept ({protection}) until the object is released. Destroy what the module created out of band (docs/runbooks/stuck-destroy.md), then release the object without a destroy: kubectl annotate {kind} {name} -n {ns} {abandon}={uid}",
            protection = captf_api::finalizers::STATE_PROTECTION,
        )
    } else {
        let state = match h.state {
            StateView::Lost => "lost",
            StateView::Foreign => "of another lineage",
            StateView::Unadopted => "without an inputs hash",
            _ => "unreadable",
        };
        format!(
            "deletion is held: the state is {state} (StateReadable), so a destroy cannot know what to remove. Restore a backup with captf.io/restore-state=<serial> (the destroy follows), or release the object without a destroy: kubectl annotate {kind} {name} -n {ns} {abandon}={uid} (what the module created then keeps running, unmanaged)"
        )
    };
    if let Some(other) = &h.other_abandon {
        message.push_str(&format!(
            "; {abandon} names {other}, not this object's UID: ignored"
        ));
    }
    message
}

/// The conditions a fresh object shows before anything happened: those it lacks.
pub fn first_visit(has: impl Fn(&str) -> bool) -> Vec<Set> {
    [
        (
            types::DRIFT_DETECTED,
            Status::Unknown,
            reasons::DRIFT_NOT_CHECKED,
            "no drift check yet",
        ),
        (
            types::DRIFT_JOB_SUCCEEDED,
            Status::Unknown,
            reasons::DRIFT_NOT_CHECKED,
            "no drift check yet",
        ),
        (
            types::DELETION_BLOCKED,
            Status::False,
            reasons::NOT_BLOCKED,
            "",
        ),
        (
            types::APPLY_JOB_SUCCEEDED,
            Status::Unknown,
            reasons::NO_APPLY_YET,
            "no apply has completed yet",
        ),
        (
            types::OUTPUTS_VALID,
            Status::Unknown,
            reasons::OUTPUTS_PENDING,
            "no outputs yet",
        ),
        (
            types::INFRASTRUCTURE_HEALTHY,
            Status::Unknown,
            reasons::WAITING_FOR_PROVISIONING,
            "waiting for the first apply",
        ),
    ]
    .into_iter()
    .filter(|(t, ..)| !has(t))
    .map(|(t, s, r, m)| Set::new(t, s, r, m))
    .collect()
}

/// `ApplyJobSucceeded` as the state proves it ([`super::applied_per_state`]), said only where
/// no apply was ever reported (`unreported`: the condition still reads `NoApplyYet`), so a
/// Job's own word is never overwritten.
pub fn applied_per_state(s: &Snapshot, d: &Decision, unreported: bool) -> Option<Set> {
    let message = super::applied_per_state(s, d).filter(|_| unreported)?;
    Some(Set {
        type_: types::APPLY_JOB_SUCCEEDED,
        status: Status::True,
        reason: reasons::APPLY_SUCCEEDED,
        message,
    })
}
