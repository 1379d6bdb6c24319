//! Recording a finished Job in the object's status: what every kind records alike.

use captf_api::conditions::{Status, reasons, types};
use captf_api::{Operation, SourceStatus, WorkspaceStatus, annotations};
use captf_runner::result::ErrorKind;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use crate::conditions::Conditions;
use crate::error::Result;
use crate::reconcile::act::object::Workload;
use crate::reconcile::finished::bookkeeping::{self, Finished};
use crate::reconcile::pass::Pass;
use crate::reconcile::{act::approvals, act::secrets};

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

/// The module image of the object as the pass found it.
#[derive(Clone, Copy, Debug)]
pub struct Source<'a> {
    /// `spec.source.image`.
    pub spec_image: &'a str,
    /// The digest the last successful apply ran (`captf.io/image-digest`), before this pass.
    pub pinned: Option<&'a str>,
}

impl<K> Pass<'_, K>
where
    K: Workload + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// Records one finished Job: `status.lastRun`, the Job counters, the condition of its
    /// operation, what a success leaves behind (state adopted, source pinned, approvals and
    /// restore requests used up) and an event for a failure. Manual plans are left to the kind.
    pub async fn record(
        &self,
        f: &Finished,
        conds: &mut Conditions,
        workspace: &mut WorkspaceStatus,
        owner_ref: &OwnerReference,
        source: Source<'_>,
    ) -> Result<()> {
        let (g, now) = (self.generation, self.now);
        workspace.last_run = Some(f.last_run());
        bookkeeping::count(&self.ctx.metrics, self.kind, self.key, f);
        match (f.op, f.succeeded) {
            (Operation::Apply, true) => {
                let summary = f.summary();
                conds.set(
                    types::APPLY_JOB_SUCCEEDED,
                    Status::True,
                    reasons::APPLY_SUCCEEDED,
                    &summary,
                    g,
                    now,
                );
                self.applied(f, owner_ref).await?;
                self.pinned(f, source.pinned).await;
                workspace.source = Some(SourceStatus {
                    image: Some(source.spec_image.to_owned()),
                    image_digest: f.image_id.clone(),
                    runtime_version: f
                        .result
                        .as_ref()
                        .and_then(|r| r.runtime.as_ref())
                        .map(|r| r.version.clone())
                        .filter(|v| !v.is_empty()),
                });
            }
            // The runner stopped before the engine touched a state that was not the one the
            // Job was started for. This pass's own read says what the state is now.
            (op, false)
                if op != Operation::Restore
                    && f.markers.contains_key(annotations::STATE_MISMATCH) =>
            {
                let message = format!(
                    "{}. Nothing ran against that state; StateReadable says what the state is now and what to do",
                    f.summary()
                );
                let type_ = crate::reconcile::act::launch::condition_of(op);
                conds.set(
                    type_,
                    Status::False,
                    reasons::STATE_MISMATCH,
                    &message,
                    g,
                    now,
                );
            }
            // Manual plans are the kind's own (only clusters have them).
            (Operation::Plan, true) => {}
            (Operation::Apply, false) if f.markers.contains_key(annotations::PLAN_CHANGED) => {}
            (Operation::Destroy, true) => {
                let summary = f.summary();
                conds.set(
                    types::APPLY_JOB_SUCCEEDED,
                    Status::True,
                    reasons::DESTROY_SUCCEEDED,
                    &summary,
                    g,
                    now,
                );
            }
            (Operation::Apply, false)
                if f.markers
                    .contains_key(annotations::DESTRUCTIVE_PLAN_BLOCKED) =>
            {
                self.blocked(f, conds);
            }
            (Operation::Apply | Operation::Plan | Operation::Destroy, false) => {
                self.failed(f, conds);
            }
            (Operation::Drift | Operation::Refresh, ok) => {
                self.refreshed(f, ok, conds, workspace);
            }
            (Operation::Restore, ok) => {
                self.restored(f, ok, conds, workspace, owner_ref).await?;
            }
        }
        self.announce_finished(f, conds).await;
        Ok(())
    }

    /// What a successful apply leaves behind: the state adopted, the exports it rendered
    /// recorded, and the destructive approval it applied used up.
    async fn applied(&self, f: &Finished, owner_ref: &OwnerReference) -> Result<()> {
        let (ctx, key) = (self.ctx, self.key);
        secrets::adopt_state(&ctx.client, key, owner_ref, f).await?;
        if let Some(exports) = f.annotations.get(annotations::CLUSTER_OUTPUTS_HASH) {
            secrets::record_applied_cluster_outputs(&ctx.client, key, exports).await?;
        }
        let api: Api<K> = Api::namespaced(ctx.client.clone(), key.namespace());
        // The apply a destructive approval let through uses it up: a cluster's names the plan,
        // a pool's its approval hash (the inputs without bootstrap data), so a later apply is
        // guarded again. An approval of a cluster's inputs (before approvals named plans) goes
        // with any successful apply of those inputs.
        let approval = self
            .object
            .annotations()
            .get(annotations::APPROVE_DESTRUCTIVE_PLAN)
            .map(String::as_str);
        let mut used = [
            annotations::APPROVED_DESTRUCTIVE_PLAN,
            annotations::APPROVAL_HASH,
            annotations::INPUTS_HASH,
        ]
        .into_iter()
        .filter_map(|k| f.annotations.get(k).map(String::as_str));
        if let Some(approved) = approval.filter(|a| used.any(|u| u == *a))
            && approvals::consume(
                &api,
                key.name(),
                annotations::APPROVE_DESTRUCTIVE_PLAN,
                approved,
            )
            .await?
        {
            let note = format!(
                "Job {} applied what {approved} approved; the approval is removed",
                f.name
            );
            let reason = captf_api::events::DESTRUCTIVE_PLAN_APPROVAL_CONSUMED;
            self.publish(EventType::Normal, reason, &note).await;
        }
        Ok(())
    }

    /// `DigestPinned` when a successful apply recorded another digest than the one pinned
    /// before (the first, or a spec change that moved it); `DigestUnknown` when the runtime
    /// reported none, so the next destroy, refresh or drift check runs the spec's image.
    async fn pinned(&self, f: &Finished, before: Option<&str>) {
        let durable = self.key.durable_inputs_secret();
        match f.pin.as_deref() {
            Some(pin) if Some(pin) != before => {
                let note = format!(
                    "{} ran {pin}; later destroy, refresh, drift and restore Jobs run it until an apply of changed inputs succeeds (captf.io/image-digest on Secret {durable})",
                    f.name
                );
                let reason = captf_api::events::DIGEST_PINNED;
                self.publish(EventType::Normal, reason, &note).await;
            }
            Some(_) => {}
            None => {
                let id = f.image_id.as_deref().unwrap_or("nothing");
                let note = format!(
                    "{} ran an image the runtime reported as {id}, which is no repo@sha256 digest: later Jobs run spec.source.image as written, and a moved tag would run another module. Name the image by digest in spec.source.image to pin it",
                    f.name
                );
                let reason = captf_api::events::DIGEST_UNKNOWN;
                self.publish(EventType::Warning, reason, &note).await;
            }
        }
    }

    /// `DestructivePlanBlocked`: what the plan would delete or replace, an approved plan it
    /// differs from, and the command that approves it: a cluster's names the plan's hash, a
    /// pool's the approval hash of its exports change.
    fn blocked(&self, f: &Finished, conds: &mut Conditions) {
        let key = self.key;
        let guard = &f.markers[annotations::DESTRUCTIVE_PLAN_BLOCKED];
        let hash = match f.markers.get(annotations::PLAN_HASH) {
            Some(plan) if key.kind() == captf_api::names::WorkloadKind::Cluster => plan,
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
        let message = format!(
            "Job {}: the plan would delete or replace {resources}{differs}; nothing was applied. To apply it anyway: kubectl annotate {} {} -n {} {}={hash} --overwrite",
            f.name,
            self.kind.to_lowercase(),
            key.name(),
            key.namespace(),
            annotations::APPROVE_DESTRUCTIVE_PLAN
        );
        let (g, now) = (self.generation, self.now);
        conds.set(
            types::APPLY_JOB_SUCCEEDED,
            Status::False,
            reasons::DESTRUCTIVE_PLAN_BLOCKED,
            &message,
            g,
            now,
        );
    }

    /// A failed apply, plan or destroy, naming an image that could not be pulled or laid out.
    fn failed(&self, f: &Finished, conds: &mut Conditions) {
        // A Job with a result ran its runner, so its images were pulled; one without may have
        // waited for them. Its pod may be gone by now: what an earlier pass saw of it counts
        // too.
        let no_result = f.result.is_none();
        let seen_earlier = conds
            .get(types::APPLY_JOB_SUCCEEDED)
            .filter(|c| c.reason == reasons::IMAGE_PULL_FAILED)
            .and_then(|c| {
                crate::reconcile::act::image_pull::said_while_running(&c.message, &f.name)
            })
            .map(str::to_owned);
        let pull = f
            .pull_failure
            .clone()
            .or(seen_earlier)
            .filter(|_| no_result)
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
        let message = match (&pull, f.deadline) {
            (Some(why), true) => format!("{why}; it reached its deadline without it"),
            (Some(why), false) => why.clone(),
            (None, _) => f.summary(),
        };
        let reason = apply_failure_reason(f.op, f.deadline, trouble);
        let (g, now) = (self.generation, self.now);
        conds.set(
            types::APPLY_JOB_SUCCEEDED,
            Status::False,
            reason,
            &message,
            g,
            now,
        );
    }

    /// A refresh or drift check: `DriftJobSucceeded`, and after a drift check that succeeded,
    /// what it found.
    fn refreshed(
        &self,
        f: &Finished,
        ok: bool,
        conds: &mut Conditions,
        workspace: &mut WorkspaceStatus,
    ) {
        let (g, now) = (self.generation, self.now);
        let (s, r) = if ok {
            (Status::True, reasons::DRIFT_CHECKED)
        } else {
            (Status::False, failure_reason(f.op, f.deadline))
        };
        conds.set(types::DRIFT_JOB_SUCCEEDED, s, r, &f.summary(), g, now);
        if !ok {
            return;
        }
        workspace.last_refresh = Some(Time(now));
        if f.op != Operation::Drift {
            return;
        }
        workspace.last_drift_check = Some(Time(now));
        match f.result.as_ref().and_then(|r| r.drift.as_ref()) {
            Some(d) if d.detected => {
                let message = format!(
                    "drift: {} to create, {} to update, {} to replace, {} to delete",
                    d.create, d.update, d.replace, d.delete
                );
                conds.set(
                    types::DRIFT_DETECTED,
                    Status::True,
                    reasons::DRIFT_REPORTED,
                    &message,
                    g,
                    now,
                );
            }
            _ => conds.set(
                types::DRIFT_DETECTED,
                Status::False,
                reasons::NO_DRIFT,
                "",
                g,
                now,
            ),
        }
    }

    /// A restore: `RestoreJobSucceeded`, the serial recorded either way (a failed restore is
    /// never retried for the same serial: remove the annotation, wait for this to clear, set
    /// it again), and after a success the state adopted and the request used up.
    async fn restored(
        &self,
        f: &Finished,
        ok: bool,
        conds: &mut Conditions,
        workspace: &mut WorkspaceStatus,
        owner_ref: &OwnerReference,
    ) -> Result<()> {
        let (ctx, key) = (self.ctx, self.key);
        let serial = f.annotations.get(annotations::RESTORE_SERIAL).cloned();
        workspace.last_restored_serial = serial.as_deref().and_then(|s| s.parse().ok());
        let (s, r) = if ok {
            (Status::True, reasons::STATE_RESTORED)
        } else {
            (Status::False, failure_reason(f.op, f.deadline))
        };
        let message = if ok {
            format!(
                "Job {} restored the state of serial {}",
                f.name,
                serial.as_deref().unwrap_or("?")
            )
        } else {
            format!(
                "{}. The state is unchanged; this serial is not retried: to try again remove captf.io/restore-state, wait for status.lastRestoredSerial to clear, and set it again",
                f.summary()
            )
        };
        conds.set(
            types::RESTORE_JOB_SUCCEEDED,
            s,
            r,
            &message,
            self.generation,
            self.now,
        );
        let result = if ok { "succeeded" } else { "failed" };
        ctx.metrics
            .state_restores_total
            .get_or_create(&crate::metrics::KindResult {
                kind: self.kind,
                result,
            })
            .inc();
        if !ok {
            return Ok(());
        }
        secrets::adopt_state(&ctx.client, key, owner_ref, f).await?;
        let api: Api<K> = Api::namespaced(ctx.client.clone(), key.namespace());
        if let Some(serial) = &serial {
            approvals::consume(&api, key.name(), annotations::RESTORE_STATE, serial).await?;
        }
        self.publish(
            EventType::Normal,
            captf_api::events::STATE_RESTORED,
            &message,
        )
        .await;
        Ok(())
    }

    /// The event a finished Job gets, if any.
    async fn announce_finished(&self, f: &Finished, conds: &Conditions) {
        match finished_event(f) {
            Some(FinishedEvent::Blocked) => {
                let message = conds
                    .get(types::APPLY_JOB_SUCCEEDED)
                    .map(|c| c.message.clone())
                    .unwrap_or_default();
                let reason = captf_api::events::DESTRUCTIVE_PLAN_BLOCKED;
                self.publish(EventType::Warning, reason, &message).await;
            }
            Some(FinishedEvent::Succeeded) => {
                let note = format!("Job {} ({}) succeeded", f.name, f.op);
                self.publish(EventType::Normal, captf_api::events::JOB_SUCCEEDED, &note)
                    .await;
            }
            Some(FinishedEvent::Failed(reason)) => {
                self.publish(EventType::Warning, reason, &f.summary()).await;
            }
            None => {}
        }
    }
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

/// The Event a finished Job is announced with.
#[derive(Debug, PartialEq, Eq)]
enum FinishedEvent {
    /// The destructive guard stopped it (the condition's message says what to approve).
    Blocked,
    Succeeded,
    /// The Warning reason of a failure.
    Failed(&'static str),
}

fn finished_event(f: &Finished) -> Option<FinishedEvent> {
    use captf_api::events;
    if f.markers
        .contains_key(annotations::DESTRUCTIVE_PLAN_BLOCKED)
    {
        return Some(FinishedEvent::Blocked);
    }
    if f.succeeded {
        // A plan is announced by its own events (PlanReady and the approvals'); a restore by
        // StateRestored.
        return matches!(
            f.op,
            Operation::Apply | Operation::Destroy | Operation::Refresh | Operation::Drift
        )
        .then_some(FinishedEvent::Succeeded);
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
    Some(FinishedEvent::Failed(if f.deadline {
        events::JOB_DEADLINE_EXCEEDED
    } else if interrupted {
        events::JOB_INTERRUPTED
    } else {
        events::JOB_FAILED
    }))
}

#[cfg(test)]
mod tests {
    use captf_runner::result::{ResultDocument, RunError};

    use super::*;

    #[test]
    fn failure_reasons_follow_the_operation() {
        use Operation::*;
        let rows = [
            (Apply, false, reasons::APPLY_FAILED),
            (Apply, true, reasons::JOB_DEADLINE_EXCEEDED),
            (Plan, false, reasons::APPLY_FAILED),
            (Destroy, false, reasons::DESTROY_FAILED),
            (Destroy, true, reasons::JOB_DEADLINE_EXCEEDED),
            (Drift, false, reasons::DRIFT_JOB_FAILED),
            (Drift, true, reasons::DRIFT_JOB_DEADLINE_EXCEEDED),
            (Refresh, true, reasons::DRIFT_JOB_DEADLINE_EXCEEDED),
            (Restore, false, reasons::RESTORE_FAILED),
            (Restore, true, reasons::RESTORE_FAILED),
        ];
        for (op, deadline, want) in rows {
            assert_eq!(
                failure_reason(op, deadline),
                want,
                "{op} deadline={deadline}"
            );
        }
    }

    #[test]
    fn image_trouble_is_told_before_the_deadline() {
        use ImageTrouble::*;
        use Operation::*;
        let rows = [
            (Apply, true, Some(Pull), reasons::IMAGE_PULL_FAILED),
            (Destroy, false, Some(Pull), reasons::IMAGE_PULL_FAILED),
            (Apply, false, Some(Layout), reasons::IMAGE_INVALID),
            (Plan, false, Some(Layout), reasons::IMAGE_INVALID),
            (Apply, true, Some(Layout), reasons::JOB_DEADLINE_EXCEEDED),
            (Apply, true, None, reasons::JOB_DEADLINE_EXCEEDED),
            (Destroy, false, None, reasons::DESTROY_FAILED),
        ];
        for (op, deadline, image, want) in rows {
            assert_eq!(
                apply_failure_reason(op, deadline, image),
                want,
                "{op} deadline={deadline} {image:?}"
            );
        }
    }

    fn finished(op: Operation, succeeded: bool, deadline: bool) -> Finished {
        Finished::for_test(op, succeeded, deadline)
    }

    fn with_error(mut f: Finished, kind: ErrorKind) -> Finished {
        let mut doc = ResultDocument::new(&f.op.to_string(), "img", &[]);
        doc.error = Some(RunError {
            kind,
            step: None,
            tail: String::new(),
            resources: Vec::new(),
        });
        f.result = Some(doc);
        f
    }

    fn marked(mut f: Finished, marker: &str) -> Finished {
        f.markers.insert(marker.into(), "x".into());
        f
    }

    #[test]
    fn each_finished_job_is_announced_once_by_what_happened() {
        use FinishedEvent::*;
        use Operation::*;
        use captf_api::events;
        let rows = [
            (
                "apply succeeded",
                finished(Apply, true, false),
                Some(Succeeded),
            ),
            (
                "destroy succeeded",
                finished(Destroy, true, false),
                Some(Succeeded),
            ),
            (
                "drift succeeded",
                finished(Drift, true, false),
                Some(Succeeded),
            ),
            (
                "refresh succeeded",
                finished(Refresh, true, false),
                Some(Succeeded),
            ),
            (
                "a plan has events of its own",
                finished(Plan, true, false),
                None,
            ),
            (
                "a restore has StateRestored",
                finished(Restore, true, false),
                None,
            ),
            (
                "apply failed",
                finished(Apply, false, false),
                Some(Failed(events::JOB_FAILED)),
            ),
            (
                "deadline",
                finished(Drift, false, true),
                Some(Failed(events::JOB_DEADLINE_EXCEEDED)),
            ),
            (
                "stopped from outside",
                with_error(finished(Apply, false, false), ErrorKind::Interrupted),
                Some(Failed(events::JOB_INTERRUPTED)),
            ),
            (
                "a step failure",
                with_error(finished(Destroy, false, false), ErrorKind::Step),
                Some(Failed(events::JOB_FAILED)),
            ),
            (
                "blocked by the destructive guard",
                marked(
                    finished(Apply, false, false),
                    annotations::DESTRUCTIVE_PLAN_BLOCKED,
                ),
                Some(Blocked),
            ),
            (
                "an approved plan that changed",
                marked(finished(Apply, false, false), annotations::PLAN_CHANGED),
                None,
            ),
        ];
        for (what, f, want) in rows {
            assert_eq!(finished_event(&f), want, "{what}");
        }
    }
}
