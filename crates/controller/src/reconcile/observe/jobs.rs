//! An object's Jobs: listed live by owner labels, classified, and turned into the decision's
//! history.

use std::collections::BTreeMap;

use captf_api::names::ObjectKey;
use captf_api::{ActiveJob, Operation, annotations, labels};
use k8s_openapi::api::batch::v1::{Job, JobStatus};
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

    /// A failure that counts toward backoff (interrupted, blocked, plan-changed and
    /// state-mismatch runs do not).
    pub fn counts_as_failure(&self) -> bool {
        self.phase == Phase::Failed
            && !self.annotations.contains_key(annotations::INTERRUPTED)
            && !self.annotations.contains_key(annotations::STATE_MISMATCH)
            && !self
                .annotations
                .contains_key(annotations::DESTRUCTIVE_PLAN_BLOCKED)
            && !self.annotations.contains_key(annotations::PLAN_CHANGED)
    }
}

/// The Jobs under the object's owner labels.
#[derive(Debug, Default)]
pub struct Listed {
    /// The object's own (its UID's controller reference), oldest first.
    pub jobs: Vec<ObservedJob>,
    /// Look-alikes: the labels without the object's controller reference. Anyone who may
    /// create a Job in the namespace can make one, so it is no part of the history.
    pub foreign: Vec<String>,
}

/// Lists the object's Jobs live: those under its owner labels that the object with `uid`
/// controls.
pub async fn list(client: &kube::Client, key: &ObjectKey, uid: &str) -> Result<Listed> {
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
    let (own, foreign): (Vec<Job>, Vec<Job>) =
        jobs.items.into_iter().partition(|j| controlled_by(j, uid));
    let mut out: Vec<ObservedJob> = own.into_iter().filter_map(observe).collect();
    out.sort_by_key(|j| (j.created_at, j.attempt));
    Ok(Listed {
        jobs: out,
        foreign: foreign
            .into_iter()
            .filter_map(|j| j.metadata.name)
            .collect(),
    })
}

/// The Job's controller reference names `uid`: the manager sets it on every Job it creates.
fn controlled_by(job: &Job, uid: &str) -> bool {
    job.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == uid)
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

/// The Job `status.activeJob` named, as it was when it started: for a Job that is gone while
/// its pod still runs, which the pass treats as running.
pub fn as_started(active: &ActiveJob) -> ObservedJob {
    let job = Job {
        metadata: kube::api::ObjectMeta {
            name: Some(active.name.clone()),
            ..Default::default()
        },
        status: Some(JobStatus {
            start_time: active.start_time.clone(),
            ..Default::default()
        }),
        ..Default::default()
    };
    ObservedJob {
        job,
        name: active.name.clone(),
        op: active.operation,
        attempt: u32::try_from(active.attempt).unwrap_or(1),
        phase: Phase::Active,
        finished_at: None,
        created_at: active.start_time.as_ref().map(|t| t.0),
        annotations: BTreeMap::new(),
    }
}

/// The next attempt number of `op`: one more than any retained Job of it.
pub fn next_attempt(jobs: &[ObservedJob], op: Operation) -> u32 {
    jobs.iter()
        .filter(|j| j.op == op)
        .map(|j| j.attempt)
        .max()
        .unwrap_or(0)
        .saturating_add(1)
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
                    plan_hash: j.annotations.get(annotations::PLAN_HASH).cloned(),
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

/// Remediation applies that failed since the last successful drift check, counted newest
/// first until an apply succeeded (pure): remediation stops at the failed-history limit.
pub fn failed_remediations(jobs: &[ObservedJob], last_drift_check: Option<Timestamp>) -> u32 {
    let mut count = 0;
    for job in jobs
        .iter()
        .rev()
        .filter(|j| j.op == Operation::Apply && j.phase != Phase::Active)
    {
        if job.phase == Phase::Succeeded {
            break;
        }
        let after_check = match (job.finished_at, last_drift_check) {
            (Some(f), Some(c)) => f > c,
            _ => true,
        };
        if job.annotations.contains_key(annotations::DRIFT_REMEDIATION)
            && job.counts_as_failure()
            && after_check
        {
            count += 1;
        }
    }
    count
}

/// Finished Jobs beyond the history limits, per operation, oldest first (pure).
///
/// Kept: the newest `successful_limit` successes (at least one, so the last success stays on
/// record) and the newest `failed_limit` failures, plus the newest failure while no newer
/// success exists (backoff and the remediation cap read it). Running Jobs and Jobs whose
/// result is not recorded yet (`captf.io/bookkept`) are never pruned.
pub fn prune_plan(jobs: &[ObservedJob], successful_limit: u32, failed_limit: u32) -> Vec<String> {
    let mut out = Vec::new();
    for op in Operation::ALL {
        let finished: Vec<&ObservedJob> = jobs
            .iter()
            .filter(|j| j.op == op && j.phase != Phase::Active)
            .collect();
        let newest_success = finished.iter().rposition(|j| j.phase == Phase::Succeeded);
        let newest_failure = finished.iter().rposition(|j| j.phase == Phase::Failed);
        let successes: Vec<usize> = (0..finished.len())
            .filter(|i| finished[*i].phase == Phase::Succeeded)
            .collect();
        let failures: Vec<usize> = (0..finished.len())
            .filter(|i| finished[*i].phase == Phase::Failed)
            .collect();
        let keep_successes = successful_limit.max(1) as usize;
        let keep_failures = failed_limit as usize;
        let mut doomed: Vec<usize> = Vec::new();
        doomed.extend(successes.iter().rev().skip(keep_successes).copied());
        doomed.extend(
            failures
                .iter()
                .rev()
                .skip(keep_failures)
                .copied()
                .filter(|i| {
                    let newest_unanswered =
                        Some(*i) == newest_failure && newest_success.is_none_or(|s| s < *i);
                    !newest_unanswered
                }),
        );
        doomed.sort_unstable();
        out.extend(
            doomed
                .into_iter()
                .map(|i| finished[i])
                .filter(|j| j.bookkept())
                .map(|j| j.name.clone()),
        );
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An observed Job of the object, bookkept or not.
    pub(crate) fn job(name: &str, op: Operation, phase: Phase, bookkept: bool) -> ObservedJob {
        let mut annotations = BTreeMap::new();
        if bookkept {
            annotations.insert(annotations::BOOKKEPT.to_owned(), "true".to_owned());
        }
        ObservedJob {
            job: Job::default(),
            name: name.to_owned(),
            op,
            attempt: 1,
            phase,
            finished_at: None,
            created_at: None,
            annotations,
        }
    }

    use Operation::{Apply, Drift};
    use Phase::{Active, Failed, Succeeded};

    #[test]
    fn only_a_job_the_object_controls_is_its_own() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        const UID: &str = "3f7c1c3e-0000-4000-8000-000000000001";
        let owned = |uid: &str, controller: Option<bool>| {
            let mut job = Job::default();
            job.metadata.owner_references = Some(vec![OwnerReference {
                uid: uid.into(),
                controller,
                ..Default::default()
            }]);
            job
        };
        let rows = [
            ("its controller reference", owned(UID, Some(true)), true),
            ("another object's", owned("another", Some(true)), false),
            (
                "a reference that is no controller's",
                owned(UID, None),
                false,
            ),
            ("no owner at all", Job::default(), false),
        ];
        for (what, job, own) in rows {
            assert_eq!(controlled_by(&job, UID), own, "{what}");
        }
    }

    #[test]
    fn a_forged_attempt_label_cannot_overflow_the_next() {
        let mut forged = job("x", Apply, Failed, true);
        forged.attempt = u32::MAX;
        assert_eq!(next_attempt(&[forged], Apply), u32::MAX);
    }

    #[test]
    fn failed_remediations_count_since_the_check_until_a_success() {
        let at = |s: i64| Timestamp::from_second(1_800_000_000 + s).expect("time");
        let apply = |name: &str, phase: Phase, remediation: bool, finished: i64| {
            let mut j = job(name, Apply, phase, true);
            j.finished_at = Some(at(finished));
            if remediation {
                j.annotations
                    .insert(annotations::DRIFT_REMEDIATION.to_owned(), "true".to_owned());
            }
            j
        };
        let rows: Vec<(&str, Vec<ObservedJob>, Option<i64>, u32)> = vec![
            ("none", vec![], Some(0), 0),
            (
                "two failed remediations after the check",
                vec![apply("a", Failed, true, 10), apply("b", Failed, true, 20)],
                Some(5),
                2,
            ),
            (
                "a failure before the check does not count",
                vec![apply("a", Failed, true, 3), apply("b", Failed, true, 20)],
                Some(5),
                1,
            ),
            (
                "a success ends the count",
                vec![
                    apply("a", Failed, true, 10),
                    apply("b", Succeeded, true, 20),
                    apply("c", Failed, true, 30),
                ],
                Some(5),
                1,
            ),
            (
                "plain failed applies are not remediations",
                vec![apply("a", Failed, false, 10)],
                Some(5),
                0,
            ),
        ];
        for (name, jobs, check, want) in rows {
            assert_eq!(failed_remediations(&jobs, check.map(at)), want, "{name}");
        }
    }

    #[test]
    fn prune_table() {
        // (history oldest first as (name, op, phase, bookkept), limits, pruned)
        type Row = (
            &'static str,
            Vec<(&'static str, Operation, Phase, bool)>,
            (u32, u32),
            Vec<&'static str>,
        );
        let rows: Vec<Row> = vec![
            ("empty", vec![], (3, 3), vec![]),
            (
                "within limits",
                vec![("s1", Apply, Succeeded, true), ("f1", Apply, Failed, true)],
                (3, 3),
                vec![],
            ),
            (
                "oldest successes beyond the limit",
                vec![
                    ("s1", Apply, Succeeded, true),
                    ("s2", Apply, Succeeded, true),
                    ("s3", Apply, Succeeded, true),
                    ("s4", Apply, Succeeded, true),
                    ("s5", Apply, Succeeded, true),
                ],
                (3, 3),
                vec!["s1", "s2"],
            ),
            (
                "limit 0 keeps the newest success",
                vec![
                    ("s1", Apply, Succeeded, true),
                    ("s2", Apply, Succeeded, true),
                ],
                (0, 3),
                vec!["s1"],
            ),
            (
                "failed limit 0 keeps an unanswered newest failure",
                vec![
                    ("f1", Apply, Failed, true),
                    ("s1", Apply, Succeeded, true),
                    ("f2", Apply, Failed, true),
                ],
                (3, 0),
                vec!["f1"],
            ),
            (
                "failed limit 0 drops a failure a success answered",
                vec![("f1", Apply, Failed, true), ("s1", Apply, Succeeded, true)],
                (3, 0),
                vec!["f1"],
            ),
            (
                "oldest failures beyond the limit",
                vec![
                    ("f1", Apply, Failed, true),
                    ("f2", Apply, Failed, true),
                    ("f3", Apply, Failed, true),
                ],
                (3, 2),
                vec!["f1"],
            ),
            (
                "per operation: drift history never evicts applies",
                vec![
                    ("a1", Apply, Succeeded, true),
                    ("d1", Drift, Succeeded, true),
                    ("d2", Drift, Succeeded, true),
                ],
                (1, 1),
                vec!["d1"],
            ),
            (
                "running and unrecorded Jobs stay",
                vec![
                    ("s1", Apply, Succeeded, false),
                    ("s2", Apply, Succeeded, true),
                    ("s3", Apply, Succeeded, true),
                    ("r", Apply, Active, false),
                ],
                (1, 1),
                vec!["s2"],
            ),
        ];
        for (name, history, (ok, failed), want) in rows {
            let jobs: Vec<ObservedJob> = history
                .into_iter()
                .map(|(n, op, phase, b)| job(n, op, phase, b))
                .collect();
            let got = prune_plan(&jobs, ok, failed);
            assert_eq!(got, want, "{name}");
        }
    }
}
