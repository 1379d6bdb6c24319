//! A finished Job as its pod left it: what the bookkeeping records and [`super::book`]
//! decides from. Everything here is read from the Job and its pod; nothing is trusted beyond
//! the bounds the status fields put on it.

use std::collections::BTreeMap;

use captf_api::{LastRun, Operation, RunErrorKind, RunStep, annotations};
use captf_runner::result::{ErrorKind, ResultDocument};
use k8s_openapi::jiff::Timestamp;

/// What one finished Job told us.
#[derive(Clone, Debug)]
pub struct Finished {
    pub name: String,
    pub op: Operation,
    pub succeeded: bool,
    pub deadline: bool,
    pub result: Option<ResultDocument>,
    /// The pod's resolved image (`imageID`) as the runtime reported it (`status.source`).
    pub image_id: Option<String>,
    /// What a later Job pulls to run this Job's module again, `repo@sha256:<hex>`, when known
    /// ([`captf_api::image::pin`]).
    pub pin: Option<String>,
    /// Markers to write on the Job with `captf.io/bookkept`.
    pub markers: BTreeMap<String, String>,
    /// When the Job was created, started (Kubernetes' `startTime`) and finished.
    pub created_at: Option<Timestamp>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    /// When the `source` container started: the end of the Job's queue time.
    pub container_started_at: Option<Timestamp>,
    /// The Job's annotations at creation (`captf.io/inputs-hash`, `captf.io/approved-plan`, ...).
    pub annotations: BTreeMap<String, String>,
    /// Its pod still waits for an image ([`crate::reconcile::observe::image_pull::pull_failure`]).
    pub pull_failure: Option<String>,
}

impl Finished {
    /// The inputs hash the Job rendered.
    pub fn inputs_hash(&self) -> Option<&str> {
        self.annotations
            .get(annotations::INPUTS_HASH)
            .map(String::as_str)
    }
}

impl Finished {
    /// The `result` label of the Job metrics.
    /// A blocked, plan-changed or interrupted run is not a failure of the module, so the
    /// `CAPTFJobFailing` alert must not count it.
    pub fn result_label(&self) -> &'static str {
        if self.succeeded {
            return "succeeded";
        }
        if self.deadline {
            return "deadline";
        }
        match self
            .result
            .as_ref()
            .and_then(|r| r.error.as_ref())
            .map(|e| e.kind)
        {
            Some(ErrorKind::Blocked) => "blocked",
            Some(ErrorKind::PlanChanged) => "plan_changed",
            Some(ErrorKind::Interrupted) => "interrupted",
            _ => "failed",
        }
    }

    /// `status.lastRun` for this Job.
    pub fn last_run(&self) -> LastRun {
        let result = self.result.as_ref();
        let steps: Vec<RunStep> = result
            .map(|r| {
                r.steps
                    .iter()
                    .take(16)
                    .map(|s| RunStep {
                        name: s.name.chars().take(64).collect(),
                        exit_code: s.exit,
                        duration_milliseconds: Some((s.seconds * 1000.0).round() as i64),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let error = if self.succeeded {
            None
        } else {
            let e = result.and_then(|r| r.error.as_ref());
            Some(captf_api::RunError {
                kind: match e.map(|e| e.kind) {
                    Some(ErrorKind::ImageLayout) => RunErrorKind::ImageLayout,
                    Some(ErrorKind::Interrupted) => RunErrorKind::Interrupted,
                    Some(ErrorKind::Blocked) => RunErrorKind::Blocked,
                    Some(ErrorKind::PlanChanged) => RunErrorKind::PlanChanged,
                    Some(ErrorKind::StateMismatch) => RunErrorKind::StateMismatch,
                    Some(ErrorKind::Step) | None => RunErrorKind::Step,
                },
                step: e
                    .and_then(|e| e.step.clone())
                    .filter(|s| !s.is_empty())
                    .map(|s| s.chars().take(64).collect()),
                summary: match e {
                    Some(e) if !e.tail.is_empty() => Some(e.tail.chars().take(512).collect()),
                    _ if self.deadline => Some("the Job reached its activeDeadlineSeconds".into()),
                    _ if result.is_none() => {
                        Some("the Job's pod left no result (see its logs)".into())
                    }
                    _ => None,
                },
                resources: e.map(|e| e.resources.clone()).filter(|r| !r.is_empty()),
            })
        };
        let drift = result
            .and_then(|r| r.drift.as_ref())
            .filter(|d| d.detected)
            .map(|d| captf_api::DriftSummary {
                create: Some(i32::try_from(d.create).unwrap_or(i32::MAX)),
                update: Some(i32::try_from(d.update).unwrap_or(i32::MAX)),
                replace: Some(i32::try_from(d.replace).unwrap_or(i32::MAX)),
                delete: Some(i32::try_from(d.delete).unwrap_or(i32::MAX)),
                resources: (!d.resources.is_empty())
                    .then(|| d.resources.iter().take(20).cloned().collect()),
            });
        LastRun {
            job: self.name.clone(),
            operation: self.op,
            steps: (!steps.is_empty()).then_some(steps),
            error,
            drift,
        }
    }

    /// A short sentence for condition messages.
    pub fn summary(&self) -> String {
        let error = self.result.as_ref().and_then(|r| r.error.as_ref());
        match (self.succeeded, error) {
            (true, _) => format!("Job {} succeeded", self.name),
            (false, Some(e)) => format!(
                "Job {} failed{}: {}",
                self.name,
                e.step
                    .as_deref()
                    .map(|s| format!(" in step {s}"))
                    .unwrap_or_default(),
                if e.tail.is_empty() {
                    e.kind.as_str()
                } else {
                    e.tail.as_str()
                }
            ),
            (false, None) if self.deadline => format!("Job {} reached its deadline", self.name),
            (false, None) => format!(
                "Job {} failed without a result; see the pod's logs",
                self.name
            ),
        }
    }
}

#[cfg(test)]
impl Finished {
    /// A finished Job of `op` with no result, timestamps or markers.
    pub(crate) fn for_test(op: Operation, succeeded: bool, deadline: bool) -> Finished {
        Finished {
            name: format!("captf-c-demo-{op}-a1-000000"),
            op,
            succeeded,
            deadline,
            result: None,
            image_id: None,
            pin: None,
            markers: BTreeMap::new(),
            created_at: None,
            started_at: None,
            finished_at: None,
            container_started_at: None,
            annotations: BTreeMap::new(),
            pull_failure: None,
        }
    }
}
