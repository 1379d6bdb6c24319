//! An object's Jobs: listed live by owner labels, classified, and turned into the decision's
//! history.

use std::collections::BTreeMap;

use captf_api::names::ObjectKey;
use captf_api::{Operation, annotations, labels};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};

use crate::decide::{ApplyAttempt, ApplyOutcome, History, OpHistory};
use crate::error::{KubeContext, Result};

/// How a Job ended, or that it did not yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    Active,
    Succeeded,
    Failed,
}

/// One of the object's Jobs.
#[derive(Clone, Debug)]
pub struct ObservedJob {
    pub job: Job,
    pub name: String,
    pub op: Operation,
    pub attempt: u32,
    pub phase: Phase,
    pub finished_at: Option<Timestamp>,
    pub created_at: Option<Timestamp>,
    /// Outcome markers written at bookkeeping (`captf.io/bookkept`, `interrupted`, ...).
    pub annotations: BTreeMap<String, String>,
}

impl ObservedJob {
    pub fn bookkept(&self) -> bool {
        self.annotations.contains_key(annotations::BOOKKEPT)
    }

    pub fn inputs_hash(&self) -> Option<&str> {
        self.annotations
            .get(annotations::INPUTS_HASH)
            .map(String::as_str)
    }

    /// A failure that counts toward backoff (interrupted, blocked and plan-changed runs do not).
    pub fn counts_as_failure(&self) -> bool {
        self.phase == Phase::Failed
            && !self.annotations.contains_key(annotations::INTERRUPTED)
            && !self
                .annotations
                .contains_key(annotations::DESTRUCTIVE_PLAN_BLOCKED)
            && !self.annotations.contains_key(annotations::PLAN_CHANGED)
    }
}

/// Lists the object's Jobs live, oldest first.
pub async fn list(client: &kube::Client, key: &ObjectKey) -> Result<Vec<ObservedJob>> {
    let api: Api<Job> = Api::namespaced(client.clone(), key.namespace());
    let selector = format!(
        "{}={},{}={}",
        labels::OWNER_KIND,
        key.kind().kind(),
        labels::OWNER_NAME,
        key.owner_name_label()
    );
    let jobs = api
        .list(&ListParams::default().labels(&selector))
        .await
        .during(|| format!("listing Jobs of {}/{}", key.namespace(), key.name()))?;
    let mut out: Vec<ObservedJob> = jobs.items.into_iter().filter_map(observe).collect();
    out.sort_by_key(|j| (j.created_at, j.attempt));
    Ok(out)
}

fn observe(job: Job) -> Option<ObservedJob> {
    let labels = job.metadata.labels.clone().unwrap_or_default();
    let op: Operation = labels.get(labels::OP)?.parse().ok()?;
    let attempt = labels
        .get(labels::ATTEMPT)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let done = |t: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == t && c.status == "True")
    };
    let (phase, finished_at) = if let Some(c) = done("Complete") {
        (
            Phase::Succeeded,
            c.last_transition_time.as_ref().map(|t| t.0),
        )
    } else if let Some(c) = done("Failed") {
        (Phase::Failed, c.last_transition_time.as_ref().map(|t| t.0))
    } else {
        (Phase::Active, None)
    };
    let finished_at = finished_at.or_else(|| {
        job.status
            .as_ref()
            .and_then(|s| s.completion_time.as_ref())
            .map(|t| t.0)
    });
    Some(ObservedJob {
        name: job.metadata.name.clone()?,
        created_at: job.metadata.creation_timestamp.as_ref().map(|t| t.0),
        annotations: job.metadata.annotations.clone().unwrap_or_default(),
        job,
        op,
        attempt,
        phase,
        finished_at,
    })
}

/// The next attempt number of `op`: one more than any retained Job of it.
pub fn next_attempt(jobs: &[ObservedJob], op: Operation) -> u32 {
    jobs.iter()
        .filter(|j| j.op == op)
        .map(|j| j.attempt)
        .max()
        .unwrap_or(0)
        + 1
}

/// The decision's view of the Job history.
pub fn history(jobs: &[ObservedJob]) -> History {
    let mut h = History::default();
    for op in Operation::ALL {
        let mut record = OpHistory::default();
        for job in jobs
            .iter()
            .filter(|j| j.op == op && j.phase != Phase::Active)
        {
            match job.phase {
                Phase::Succeeded => {
                    record.last_success = job.finished_at;
                    record.failures = 0;
                    record.last_failure = None;
                }
                Phase::Failed if job.counts_as_failure() => {
                    record.failures += 1;
                    record.last_failure = job.finished_at;
                }
                _ => {}
            }
        }
        match op {
            Operation::Apply => h.apply = record,
            Operation::Destroy => h.destroy = record,
            Operation::Refresh => h.refresh = record,
            Operation::Drift => h.drift = record,
            Operation::Plan => h.plan = record,
            Operation::Restore => h.restore = record,
        }
    }
    h.newest_apply = jobs
        .iter()
        .rev()
        .find(|j| j.op == Operation::Apply && j.phase != Phase::Active)
        .map(|j| {
            let outcome = if j.phase == Phase::Succeeded {
                ApplyOutcome::Succeeded
            } else if let Some(guard) = j.annotations.get(annotations::DESTRUCTIVE_PLAN_BLOCKED) {
                ApplyOutcome::Blocked {
                    guard_hash: guard.clone(),
                }
            } else if j.annotations.contains_key(annotations::PLAN_CHANGED) {
                ApplyOutcome::PlanChanged
            } else {
                ApplyOutcome::Failed
            };
            ApplyAttempt {
                inputs_hash: j.inputs_hash().unwrap_or_default().to_owned(),
                outcome,
                remediation: j.annotations.contains_key(annotations::DRIFT_REMEDIATION),
            }
        });
    h
}
