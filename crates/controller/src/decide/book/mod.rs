//! `book`: what recording one finished Job does, as data. The conditions its operation leaves,
//! what it records in the workspace status, and the writes and events that follow from it
//! (the state adopted, approvals and restore requests used up, the digest pinned). The act
//! carries them out in the order given, before the snapshot is taken: what they write is what
//! the snapshot reads.

use captf_api::conditions::{Status, reasons, types};
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_api::{Operation, SourceStatus, annotations, events};
use captf_runner::result::ErrorKind;

use super::Finished;
pub use super::effects::Note;
use super::effects::{Counter, Effect};
use super::launch::condition_of;
pub use super::status::Set;

mod plan;
pub use plan::{PlanBefore, Shown, plan};

/// What the object says as the finished Job is recorded.
#[derive(Clone, Copy, Debug)]
pub struct Before<'a> {
    pub key: &'a ObjectKey,
    /// `spec.source.image`.
    pub spec_image: &'a str,
    /// The digest the last successful apply ran (`captf.io/image-digest`), before this pass.
    pub pinned: Option<&'a str>,
    /// `captf.io/approve-destructive-plan` on the object.
    pub approve_destructive: Option<&'a str>,
    /// The pull failure an earlier pass saw while this Job ran (its pod may be gone by now).
    pub pull_seen: Option<&'a str>,
}

/// What a finished Job records in the workspace status, besides `lastRun`.
#[derive(Clone, Debug, PartialEq)]
pub enum Recorded {
    /// `status.source`: the image the apply ran.
    Source(SourceStatus),
    /// `status.lastRefresh` is now, and `status.lastDriftCheck` too after a drift check.
    Refreshed { drift: bool },
    /// `status.lastRestoredSerial`, recorded whether the restore succeeded or not.
    RestoredSerial(Option<i64>),
}

/// What adopting the state a Job wrote records: its Secrets get the object's owner
/// reference, the durable inputs `captf.io/applied`, and these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adoption {
    /// The inputs the state was written from (`captf.io/inputs-hash` on its base Secret).
    pub inputs_hash: Option<String>,
    /// A restore makes the backup's lineage the object's again.
    pub lineage: Option<String>,
    pub digest: Digest,
}

/// What becomes of the pinned digest (`captf.io/image-digest`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Digest {
    /// A restore pins nothing: only an apply made the resources.
    Keep,
    /// The digest the apply ran.
    Pin(String),
    /// An apply whose digest is unknown unpins, so later Jobs run the spec's image rather than
    /// a module older than the resources.
    Unpin,
}

/// What recording a finished Job does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Booked {
    pub conditions: Vec<Set>,
    pub recorded: Vec<Recorded>,
    pub effects: Vec<Effect>,
}

impl Booked {
    /// Without the effects that count: the Job was counted by a pass whose status patch
    /// recorded it before the pass stopped.
    pub fn uncounted(&mut self) {
        self.effects
            .retain(|e| !matches!(e, Effect::Count(Counter::Approval(_) | Counter::Restore(_))));
    }

    /// Every event of this booking concerns Job `name`.
    fn about(mut self, name: &str) -> Self {
        for effect in &mut self.effects {
            let note = match effect {
                Effect::Event(note)
                | Effect::Consume {
                    announce: Some(note),
                    ..
                } => note,
                _ => continue,
            };
            note.job.get_or_insert_with(|| name.to_owned());
        }
        self
    }

    fn set(&mut self, type_: &'static str, status: Status, reason: &'static str, message: String) {
        self.conditions.push(Set {
            type_,
            status,
            reason,
            message,
        });
    }
}

/// Records one finished Job: the condition of its operation, what a success leaves behind
/// (state adopted, source pinned, approvals and restore requests used up) and an event for
/// what happened. Manual plans are the cluster's own; `status.lastRun` and the Job metrics
/// are every Job's.
pub fn book(f: &Finished, before: &Before) -> Booked {
    let mut booked = Booked::default();
    match (f.op, f.succeeded) {
        (Operation::Apply, true) => applied(f, before, &mut booked),
        // The runner stopped before the engine touched a state that was not the one the Job
        // was started for. This pass's own read says what the state is now.
        (op, false)
            if op != Operation::Restore && f.markers.contains_key(annotations::STATE_MISMATCH) =>
        {
            let message = format!(
                "{}. Nothing ran against that state; StateReadable says what the state is now and what to do",
                f.summary()
            );
            booked.set(
                condition_of(op),
                Status::False,
                reasons::STATE_MISMATCH,
                message,
            );
        }
        // Manual plans are the kind's own (only clusters have them).
        (Operation::Plan, true) => {}
        (Operation::Apply, false) if f.markers.contains_key(annotations::PLAN_CHANGED) => {}
        (Operation::Destroy, true) => booked.set(
            types::APPLY_JOB_SUCCEEDED,
            Status::True,
            reasons::DESTROY_SUCCEEDED,
            f.summary(),
        ),
        (Operation::Apply, false)
            if f.markers
                .contains_key(annotations::DESTRUCTIVE_PLAN_BLOCKED) =>
        {
            booked.set(
                types::APPLY_JOB_SUCCEEDED,
                Status::False,
                reasons::DESTRUCTIVE_PLAN_BLOCKED,
                blocked(f, before),
            );
        }
        (Operation::Apply | Operation::Plan | Operation::Destroy, false) => {
            let (reason, message) = failed(f, before.pull_seen);
            booked.set(types::APPLY_JOB_SUCCEEDED, Status::False, reason, message);
        }
        (Operation::Drift | Operation::Refresh, ok) => refreshed(f, ok, &mut booked),
        (Operation::Restore, ok) => restored(f, ok, &mut booked),
    }
    answered(f, &mut booked);
    if let Some(note) = finished_event(f, &booked) {
        booked.effects.push(Effect::Event(note));
    }
    booked.about(&f.name)
}

/// A Job that answered `captf.io/retry` or `captf.io/replan` uses the request up, whatever it
/// ended in: the operator asked for one attempt now, and its outcome is on the conditions.
fn answered(f: &Finished, booked: &mut Booked) {
    let answers = [
        (annotations::RETRY, annotations::RETRY_TOKEN),
        (annotations::REPLAN, annotations::REPLAN_TOKEN),
    ];
    for (asked, answer) in answers {
        if let Some(token) = f.annotations.get(answer) {
            booked.effects.push(Effect::Consume {
                annotation: asked,
                value: token.clone(),
                announce: None,
            });
        }
    }
}

/// Apply Jobs that disappeared while they ran (deleted by hand or by a namespace clean-up)
/// may have applied part of their change. `vanished` is the one `status.activeJob` names that
/// is neither listed nor stopping while the object, read live, still names it: it is recorded,
/// its leases released, and `ApplyJobSucceeded` and an event say so. A finished apply that
/// followed one ends the record when it succeeded.
pub fn interruptions(finished: &[Finished], vanished: Option<&str>) -> Booked {
    let mut booked = Booked::default();
    let followed = finished.iter().any(|f| {
        f.op == Operation::Apply
            && f.succeeded
            && f.annotations
                .contains_key(annotations::AFTER_INTERRUPTED_APPLY)
    });
    if followed {
        booked.effects.push(Effect::MarkInputs {
            annotation: annotations::INTERRUPTED_APPLY,
            value: None,
        });
    }
    let Some(name) = vanished else {
        return booked;
    };
    booked.effects.extend([
        Effect::MarkInputs {
            annotation: annotations::INTERRUPTED_APPLY,
            value: Some(name.to_owned()),
        },
        Effect::ReleaseLeases(name.to_owned()),
        Effect::Event(Note::warning(
            events::JOB_FAILED,
            format!("Job {name} disappeared while it ran; the apply runs again"),
        )),
    ]);
    booked = booked.about(name);
    booked.set(
        types::APPLY_JOB_SUCCEEDED,
        Status::False,
        reasons::APPLY_FAILED,
        format!("Job {name}: disappeared while it ran and may have applied part of its change; an apply of the current inputs is due (guarded by the destructive-plan check)"),
    );
    booked
}

/// What a successful apply leaves behind: the state adopted, the exports it rendered
/// recorded, the destructive approval it applied used up, and the digest it ran pinned.
fn applied(f: &Finished, before: &Before, booked: &mut Booked) {
    booked.set(
        types::APPLY_JOB_SUCCEEDED,
        Status::True,
        reasons::APPLY_SUCCEEDED,
        f.summary(),
    );
    booked.effects.push(Effect::AdoptState(Adoption {
        inputs_hash: f.inputs_hash().map(str::to_owned),
        lineage: None,
        digest: f.pin.clone().map_or(Digest::Unpin, Digest::Pin),
    }));
    if let Some(exports) = f.annotations.get(annotations::CLUSTER_OUTPUTS_HASH) {
        booked.effects.push(Effect::MarkInputs {
            annotation: annotations::APPLIED_CLUSTER_OUTPUTS_HASH,
            value: Some(exports.clone()),
        });
    }
    // The apply a destructive approval let through uses it up: a cluster's names the plan,
    // a pool's its approval hash (the inputs without bootstrap data), so a later apply is
    // guarded again. An approval of a cluster's inputs (before approvals named plans) goes
    // with any successful apply of those inputs.
    let mut used = [
        annotations::APPROVED_DESTRUCTIVE_PLAN,
        annotations::APPROVAL_HASH,
        annotations::INPUTS_HASH,
    ]
    .into_iter()
    .filter_map(|k| f.annotations.get(k).map(String::as_str));
    if let Some(approved) = before.approve_destructive.filter(|a| used.any(|u| u == *a)) {
        booked.effects.push(Effect::Consume {
            annotation: annotations::APPROVE_DESTRUCTIVE_PLAN,
            value: approved.to_owned(),
            announce: Some(Note::normal(
                events::DESTRUCTIVE_PLAN_APPROVAL_CONSUMED,
                format!(
                    "Job {} applied what {approved} approved; the approval is removed",
                    f.name
                ),
            )),
        });
    }
    if let Some(note) = pinned(f, before) {
        booked.effects.push(Effect::Event(note));
    }
    booked.recorded.push(Recorded::Source(SourceStatus {
        image: Some(before.spec_image.to_owned()),
        image_digest: f.image_id.clone(),
        runtime_version: f
            .result
            .as_ref()
            .and_then(|r| r.runtime.as_ref())
            .map(|r| r.version.clone())
            .filter(|v| !v.is_empty()),
    }));
}

/// `DigestPinned` when a successful apply recorded another digest than the one pinned
/// before (the first, or a spec change that moved it); `DigestUnknown` when the runtime
/// reported none, so the next destroy, refresh or drift check runs the spec's image.
fn pinned(f: &Finished, before: &Before) -> Option<Note> {
    match f.pin.as_deref() {
        Some(pin) if Some(pin) != before.pinned => Some(Note::normal(
            events::DIGEST_PINNED,
            format!(
                "{} ran {pin}; later destroy, refresh, drift and restore Jobs run it until an apply of changed inputs succeeds (captf.io/image-digest on Secret {})",
                f.name,
                before.key.durable_inputs_secret()
            ),
        )),
        Some(_) => None,
        None => {
            let id = f.image_id.as_deref().unwrap_or("nothing");
            Some(Note::warning(
                events::DIGEST_UNKNOWN,
                format!(
                    "{} ran an image the runtime reported as {id}, which is no repo@sha256 digest: later Jobs run spec.source.image as written, and a moved tag would run another module. Name the image by digest in spec.source.image to pin it",
                    f.name
                ),
            ))
        }
    }
}

/// What a blocked apply's plan would have deleted or replaced, `<address> (<actions>)`: the
/// plan lists every change, the destructive ones are named; else the runner's error names them.
pub fn destructive_resources(f: &Finished) -> Vec<String> {
    let result = f.result.as_ref();
    let named: Vec<String> = result
        .and_then(|r| r.plan.as_ref())
        .map(|p| {
            p.resources
                .iter()
                .filter(|r| r.contains("delete") || r.contains("replace"))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if !named.is_empty() {
        return named;
    }
    result
        .and_then(|r| r.error.as_ref())
        .map(|e| e.resources.clone())
        .unwrap_or_default()
}

/// `DestructivePlanBlocked`: what the plan would delete or replace, an approved plan it
/// differs from, and the command that approves it: a cluster's names the plan's hash, a
/// pool's the approval hash of its exports change.
fn blocked(f: &Finished, before: &Before) -> String {
    let guard = &f.markers[annotations::DESTRUCTIVE_PLAN_BLOCKED];
    let hash = match f.markers.get(annotations::PLAN_HASH) {
        Some(plan) if before.key.kind() == WorkloadKind::Cluster => plan,
        _ => guard,
    };
    let named = destructive_resources(f);
    let resources = if named.is_empty() {
        "some resources".to_owned()
    } else {
        named.join(", ")
    };
    let differs = f
        .annotations
        .get(annotations::APPROVED_DESTRUCTIVE_PLAN)
        .map(|approved| format!(", not the approved plan {approved}"))
        .unwrap_or_default();
    format!(
        "Job {}: the plan would delete or replace {resources}{differs}; nothing was applied. To apply it anyway: kubectl annotate {} {} -n {} {}={hash} --overwrite",
        f.name,
        before.key.kind().kind().to_lowercase(),
        before.key.name(),
        before.key.namespace(),
        annotations::APPROVE_DESTRUCTIVE_PLAN
    )
}

/// A failed apply, plan or destroy, naming an image that could not be pulled or laid out.
fn failed(f: &Finished, pull_seen: Option<&str>) -> (&'static str, String) {
    // A Job with a result ran its runner, so its images were pulled; one without may have
    // waited for them, and what an earlier pass saw of its pod counts too.
    let pull = f
        .pull_failure
        .as_deref()
        .or(pull_seen)
        .filter(|_| f.result.is_none())
        .map(|why| format!("Job {}: {why}", f.name));
    let image_layout = f
        .result
        .as_ref()
        .and_then(|r| r.error.as_ref())
        .is_some_and(|e| e.kind == ErrorKind::ImageLayout);
    let trouble = match (&pull, image_layout) {
        (Some(_), _) => Some(ImageTrouble::Pull),
        (None, true) => Some(ImageTrouble::Layout),
        (None, false) => None,
    };
    let message = match (pull, f.deadline) {
        (Some(why), true) => format!("{why}; it reached its deadline without it"),
        (Some(why), false) => why,
        (None, _) => f.summary(),
    };
    (apply_failure_reason(f.op, f.deadline, trouble), message)
}

/// A refresh or drift check: `DriftJobSucceeded`, and after a drift check that succeeded,
/// what it found.
fn refreshed(f: &Finished, ok: bool, booked: &mut Booked) {
    let (s, r) = if ok {
        (Status::True, reasons::DRIFT_CHECKED)
    } else {
        (Status::False, failure_reason(f.op, f.deadline))
    };
    booked.set(types::DRIFT_JOB_SUCCEEDED, s, r, f.summary());
    if !ok {
        return;
    }
    let drift = f.op == Operation::Drift;
    booked.recorded.push(Recorded::Refreshed { drift });
    if !drift {
        return;
    }
    match f.result.as_ref().and_then(|r| r.drift.as_ref()) {
        Some(d) if d.detected => booked.set(
            types::DRIFT_DETECTED,
            Status::True,
            reasons::DRIFT_REPORTED,
            format!(
                "drift: {} to create, {} to update, {} to replace, {} to delete",
                d.create, d.update, d.replace, d.delete
            ),
        ),
        _ => booked.set(
            types::DRIFT_DETECTED,
            Status::False,
            reasons::NO_DRIFT,
            String::new(),
        ),
    }
}

/// A restore: `RestoreJobSucceeded`, the serial recorded either way (a failed restore is
/// not retried for the same serial while its annotation stands, see
/// [`crate::decide::restore`]), and after a success the state adopted and the request used up.
fn restored(f: &Finished, ok: bool, booked: &mut Booked) {
    let serial = f.annotations.get(annotations::RESTORE_SERIAL);
    booked.recorded.push(Recorded::RestoredSerial(
        serial.and_then(|s| s.parse().ok()),
    ));
    let message = if ok {
        format!(
            "Job {} restored the state of serial {}",
            f.name,
            serial.map_or("?", String::as_str)
        )
    } else {
        format!(
            "{}. The state is unchanged; this serial is not retried while captf.io/restore-state stands: to try again run `kubectl captf restore` with it again, or remove the annotation, wait for status.lastRestoredSerial to clear, and set it again",
            f.summary()
        )
    };
    let (s, r) = if ok {
        (Status::True, reasons::STATE_RESTORED)
    } else {
        (Status::False, failure_reason(f.op, f.deadline))
    };
    booked.set(types::RESTORE_JOB_SUCCEEDED, s, r, message.clone());
    let result = if ok { "succeeded" } else { "failed" };
    booked.effects.push(Effect::Count(Counter::Restore(result)));
    if !ok {
        return;
    }
    booked.effects.push(Effect::AdoptState(Adoption {
        inputs_hash: f.inputs_hash().map(str::to_owned),
        lineage: f.annotations.get(annotations::STATE_LINEAGE).cloned(),
        digest: Digest::Keep,
    }));
    if let Some(serial) = serial {
        booked.effects.push(Effect::Consume {
            annotation: annotations::RESTORE_STATE,
            value: serial.clone(),
            announce: None,
        });
    }
    booked
        .effects
        .push(Effect::Event(Note::normal(events::STATE_RESTORED, message)));
}

/// What was wrong with a failed Job's image, if anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ImageTrouble {
    /// Its pod could not pull it.
    Pull,
    /// The runner found no module or engine in it (`image-layout`).
    Layout,
}

/// The reason a failed apply, plan or destroy leaves on `ApplyJobSucceeded`. A pull failure
/// is told before the deadline it ends in (concepts §14.2).
fn apply_failure_reason(
    op: Operation,
    deadline: bool,
    image: Option<ImageTrouble>,
) -> &'static str {
    match image {
        Some(ImageTrouble::Pull) => reasons::IMAGE_PULL_FAILED,
        Some(ImageTrouble::Layout) if !deadline => reasons::IMAGE_INVALID,
        _ => failure_reason(op, deadline),
    }
}

/// The reason a failed Job of `op` leaves on its operation's condition.
fn failure_reason(op: Operation, deadline: bool) -> &'static str {
    match (op, deadline) {
        (Operation::Drift | Operation::Refresh, true) => reasons::DRIFT_JOB_DEADLINE_EXCEEDED,
        (Operation::Drift | Operation::Refresh, false) => reasons::DRIFT_JOB_FAILED,
        (Operation::Restore, _) => reasons::RESTORE_FAILED,
        (_, true) => reasons::JOB_DEADLINE_EXCEEDED,
        (Operation::Destroy, false) => reasons::DESTROY_FAILED,
        (_, false) => reasons::APPLY_FAILED,
    }
}

/// The Event a finished Job is announced with, if any.
fn finished_event(f: &Finished, booked: &Booked) -> Option<Note> {
    if f.markers
        .contains_key(annotations::DESTRUCTIVE_PLAN_BLOCKED)
    {
        // The condition's message says what to approve.
        let message = booked
            .conditions
            .iter()
            .find(|c| c.reason == reasons::DESTRUCTIVE_PLAN_BLOCKED)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        return Some(Note::warning(events::DESTRUCTIVE_PLAN_BLOCKED, message));
    }
    if f.succeeded {
        // A plan is announced by its own events (PlanReady and the approvals'); a restore by
        // StateRestored.
        return matches!(
            f.op,
            Operation::Apply | Operation::Destroy | Operation::Refresh | Operation::Drift
        )
        .then(|| {
            let note = format!("Job {} ({}) succeeded", f.name, f.op);
            Note::normal(events::JOB_SUCCEEDED, note)
        });
    }
    // A plan that changed since its approval is told by PlanChanged on the condition.
    if f.markers.contains_key(annotations::PLAN_CHANGED) {
        return None;
    }
    let interrupted = f
        .result
        .as_ref()
        .and_then(|r| r.error.as_ref())
        .is_some_and(|e| e.kind == ErrorKind::Interrupted);
    let reason = if f.deadline {
        events::JOB_DEADLINE_EXCEEDED
    } else if interrupted {
        events::JOB_INTERRUPTED
    } else {
        events::JOB_FAILED
    };
    Some(Note::warning(reason, f.summary()))
}
