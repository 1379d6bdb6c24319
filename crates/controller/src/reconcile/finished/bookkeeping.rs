//! Reading each finished Job's result exactly once: from its pod's termination message into
//! `status.lastRun` and the conditions, then (after the status patch succeeded) marking the Job
//! `captf.io/bookkept`, deleting its per-run Secret and releasing its run lease.

use std::collections::BTreeMap;

use captf_api::annotations;
use captf_api::names::{self, ObjectKey};
use captf_runner::result::{ErrorKind, ResultDocument};
use captf_runner::steps::step_label;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

use crate::decide::Finished;
use crate::error::{KubeContext, Result};
use crate::metrics::Metrics;
use crate::metrics::{
    JobError, KindAction, KindOp, KindOpAction, KindOpResult, KindOpStep, ObjectOp,
};
use crate::reconcile::Context;
use crate::reconcile::observe::jobs;
use crate::reconcile::observe::jobs::{ObservedJob, Phase};

/// The image the Job's `source` container names.
fn source_image(job: &ObservedJob) -> String {
    job.job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| {
            p.containers
                .iter()
                .find(|c| c.name == crate::job::build::SOURCE_CONTAINER)
        })
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// Reads the result of every finished Job that was not bookkept yet.
pub async fn collect(
    client: &kube::Client,
    namespace: &str,
    jobs: &[ObservedJob],
) -> Result<Vec<Finished>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut out = Vec::new();
    for job in jobs
        .iter()
        .filter(|j| j.phase != Phase::Active && !j.bookkept())
    {
        let list = pods
            .list(&ListParams::default().labels(&format!("job-name={}", job.name)))
            .await
            .during(|| format!("listing pods of Job {namespace}/{}", job.name))?;
        let pod = list
            .items
            .into_iter()
            .max_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
        let status = pod
            .as_ref()
            .and_then(|p| p.status.as_ref())
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.name == "source")
                    .or(cs.first())
                    .cloned()
            });
        let message = status
            .as_ref()
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.message.clone());
        // The kubelet caps a termination message at 4 KiB; one longer is no runner's result.
        let result: Option<ResultDocument> = message
            .filter(|m| m.len() <= captf_runner::result::MAX_RESULT_BYTES)
            .and_then(|m| serde_json::from_str(m.trim()).ok());
        let deadline = job
            .job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Failed" && c.reason.as_deref() == Some("DeadlineExceeded"))
            });
        let mut markers = BTreeMap::from([(annotations::BOOKKEPT.to_owned(), "true".to_owned())]);
        match result
            .as_ref()
            .and_then(|r| r.error.as_ref())
            .map(|e| e.kind)
        {
            Some(ErrorKind::Interrupted) => {
                markers.insert(annotations::INTERRUPTED.into(), "true".into());
            }
            Some(ErrorKind::Blocked) => {
                // What an approval must name: a pool's exports guard compares its approval
                // hash (the inputs without bootstrap data), every other guard the inputs hash.
                let guard = job
                    .annotations
                    .get(annotations::APPROVAL_HASH)
                    .map(String::as_str)
                    .or(job.inputs_hash())
                    .unwrap_or_default()
                    .to_owned();
                markers.insert(annotations::DESTRUCTIVE_PLAN_BLOCKED.into(), guard);
                if let Some(plan) = result.as_ref().and_then(|r| r.plan.as_ref()) {
                    markers.insert(annotations::PLAN_HASH.into(), plan.hash.clone());
                }
            }
            Some(ErrorKind::PlanChanged) => {
                markers.insert(annotations::PLAN_CHANGED.into(), "true".into());
            }
            // Not the module's failure: the state changed under the Job. StateReadable holds
            // the object until an operator acts, so no backoff is owed for it.
            Some(ErrorKind::StateMismatch) => {
                markers.insert(annotations::STATE_MISMATCH.into(), "true".into());
            }
            _ => {}
        }
        out.push(Finished {
            name: job.name.clone(),
            op: job.op,
            succeeded: job.phase == Phase::Succeeded,
            deadline,
            result,
            container_started_at: status
                .as_ref()
                .and_then(|c| c.state.as_ref())
                .and_then(|s| s.terminated.as_ref())
                .and_then(|t| t.started_at.as_ref())
                .map(|t| t.0),
            pin: status
                .as_ref()
                .and_then(|c| captf_api::image::pin(&source_image(job), &c.image_id)),
            image_id: status.map(|c| c.image_id).filter(|i| !i.is_empty()),
            markers,
            created_at: job.created_at,
            started_at: job
                .job
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0),
            finished_at: job.finished_at,
            annotations: job.annotations.clone(),
            pull_failure: pod
                .as_ref()
                .and_then(crate::reconcile::observe::image_pull::pull_failure),
        });
    }
    Ok(out)
}

/// After the status patch: mark the Job, delete its per-run Secret, release its run lease.
pub async fn finish(client: &kube::Client, key: &ObjectKey, finished: &Finished) -> Result<()> {
    let ns = key.namespace();
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({"metadata": {"annotations": finished.markers}});
    jobs.patch(
        &finished.name,
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .during(|| format!("marking Job {ns}/{} bookkept", finished.name))?;
    crate::failpoint::reached("after-bookkept-marker");
    clear_after(client, key, &finished.name).await
}

/// Deletes the per-run Secret of the bookkept Job `job` and releases its leases.
pub async fn clear_after(client: &kube::Client, key: &ObjectKey, job: &str) -> Result<()> {
    let ns = key.namespace();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    match secrets
        .delete(&names::per_run_secret(job), &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => {
            return Err(crate::Error::Kube {
                action: format!("deleting the per-run Secret of {job}"),
                source: e,
            });
        }
    }
    release_run_lease(client, key, job).await;
    Ok(())
}

/// The bookkept Jobs whose per-run Secret is still there (`present`): a pass stopped between
/// the marker and the clean-up after it.
pub fn leftovers(jobs: &[ObservedJob], present: impl Fn(&str) -> bool) -> Vec<&str> {
    jobs.iter()
        .filter(|j| j.bookkept() && present(&names::per_run_secret(&j.name)))
        .map(|j| j.name.as_str())
        .collect()
}

/// Releases the leases the finished Job `holder` took: the object's run lease and, for a
/// cluster, the cluster write lease (each only while `holder` still holds it).
pub async fn release_run_lease(client: &kube::Client, key: &ObjectKey, holder: &str) {
    crate::reconcile::leases::release(client, key.namespace(), &key.run_lease(), holder).await;
    if key.kind() == captf_api::names::WorkloadKind::Cluster {
        crate::reconcile::leases::release_cluster_lease_of(client, key.namespace(), holder).await;
    }
}

/// Counts a finished Job in the metrics: total by result, duration, queue time, errors and the
/// object's last success.
pub fn count(metrics: &Metrics, kind: &'static str, key: &ObjectKey, f: &Finished) {
    let result = f.result_label();
    let op = f.op.as_str();
    metrics
        .jobs_total
        .get_or_create(&KindOpResult { kind, op, result })
        .inc();
    let seconds = |from: Option<Timestamp>, to: Option<Timestamp>| {
        from.zip(to)
            .map(|(a, b)| b.duration_since(a).as_secs_f64())
            .filter(|s| *s >= 0.0)
    };
    if let Some(d) = seconds(f.started_at.or(f.created_at), f.finished_at) {
        metrics
            .job_duration_seconds
            .get_or_create(&KindOpResult { kind, op, result })
            .observe(d);
    }
    if let Some(q) = seconds(f.created_at, f.container_started_at) {
        metrics
            .job_queue_seconds
            .get_or_create(&KindOp { kind, op })
            .observe(q);
    }
    if f.succeeded {
        if let Some(at) = f.finished_at {
            metrics
                .last_success_timestamp_seconds
                .get_or_create(&ObjectOp {
                    kind,
                    namespace: key.namespace().to_owned(),
                    name: key.name().to_owned(),
                    op,
                })
                .set(at.as_second());
        }
    } else {
        let error = f.result.as_ref().and_then(|r| r.error.as_ref());
        metrics
            .job_errors_total
            .get_or_create(&JobError {
                kind,
                op,
                error_kind: error_kind(f.deadline, error.map(|e| e.kind)),
                step: error
                    .and_then(|e| e.step.as_deref())
                    .map_or("none", step_label),
            })
            .inc();
    }
    let Some(result) = &f.result else {
        return;
    };
    // The step names come from a pod: only the runner's own names become label values.
    for step in &result.steps {
        metrics
            .job_step_duration_seconds
            .get_or_create(&KindOpStep {
                kind,
                op,
                step: step_label(&step.name),
            })
            // Untrusted too: a negative or NaN time reads 0.
            .observe(step.seconds.max(0.0));
    }
    if let Some(c) = &result.changes {
        for (action, n) in [
            ("create", c.add),
            ("update", c.change),
            ("delete", c.destroy),
            ("import", c.import),
        ] {
            if n > 0 {
                metrics
                    .resources_changed_total
                    .get_or_create(&KindOpAction { kind, op, action })
                    .inc_by(u64::from(n));
            }
        }
    }
    if let Some(d) = result.drift.as_ref().filter(|d| d.detected) {
        for (action, n) in [
            ("create", d.create),
            ("update", d.update),
            ("replace", d.replace),
            ("delete", d.delete),
        ] {
            if n > 0 {
                metrics
                    .drift_resources_total
                    .get_or_create(&KindAction { kind, action })
                    .inc_by(u64::from(n));
            }
        }
    }
}

/// The `error_kind` label of a Job that did not succeed (operations.md §11.2).
fn error_kind(deadline: bool, kind: Option<ErrorKind>) -> &'static str {
    match (deadline, kind) {
        (true, _) => "deadline",
        (false, Some(ErrorKind::ImageLayout)) => "image-layout",
        (false, Some(ErrorKind::Interrupted)) => "interrupted",
        (false, Some(ErrorKind::Blocked)) => "blocked",
        (false, Some(ErrorKind::PlanChanged)) => "plan-changed",
        (false, Some(ErrorKind::StateMismatch)) => "state-mismatch",
        (false, Some(ErrorKind::Step)) => "step",
        (false, None) => "unknown",
    }
}

/// Marks the finished Jobs `captf.io/bookkept` (after the status patch recorded them), deletes
/// their per-run Secrets and releases their leases; and does the last two for a bookkept Job
/// among `jobs` whose per-run Secret is still there.
pub async fn finish_bookkeeping(
    ctx: &Context,
    key: &ObjectKey,
    finished: &[Finished],
    jobs: &[jobs::ObservedJob],
) -> Result<()> {
    if !finished.is_empty() {
        crate::failpoint::reached("after-status-patch");
    }
    for f in finished {
        finish(&ctx.client, key, f).await?;
    }
    let present = |name: &str| ctx.caches.secrets.contains(key.namespace(), name);
    for job in leftovers(jobs, present) {
        clear_after(&ctx.client, key, job).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use captf_api::Operation;
    use captf_api::names::WorkloadKind;
    use captf_runner::drift::Drift;
    use captf_runner::result::{Changes, RunError, StepRecord};

    use super::*;

    fn finished(op: Operation, succeeded: bool) -> Finished {
        let mut f = Finished::for_test(op, succeeded, false);
        f.result = Some(ResultDocument::new(op.as_str(), "img", &[]));
        f
    }

    #[test]
    fn a_bookkept_jobs_leftover_per_run_secret_is_cleared() {
        let job = |name: &str, phase: Phase, bookkept: bool| {
            crate::reconcile::observe::jobs::tests::job(name, Operation::Apply, phase, bookkept)
        };
        let jobs = [
            job("booked-left", Phase::Succeeded, true),
            job("booked-clean", Phase::Succeeded, true),
            job("finished-not-booked", Phase::Failed, false),
            job("running", Phase::Active, false),
        ];
        let present = |name: &str| name != names::per_run_secret("booked-clean");
        assert_eq!(leftovers(&jobs, present), ["booked-left"]);
        assert!(leftovers(&jobs, |_| false).is_empty());
    }

    /// The series `count` leaves, as the scrape shows them.
    fn counted(f: &Finished) -> anyhow::Result<String> {
        let metrics = Metrics::new();
        let key = ObjectKey::new("ns", WorkloadKind::Cluster, "demo")?;
        count(&metrics, "TerraformCluster", &key, f);
        Ok(metrics.encode())
    }

    #[test]
    fn error_kinds_and_steps_are_the_specified_label_values() -> anyhow::Result<()> {
        let mut f = finished(Operation::Apply, false);
        let error = |kind, step: Option<&str>| RunError {
            kind,
            step: step.map(str::to_owned),
            tail: String::new(),
            resources: Vec::new(),
        };
        let rows = [
            (
                Some(error(ErrorKind::Step, Some("apply"))),
                r#"error_kind="step",step="apply""#,
            ),
            (
                Some(error(ErrorKind::ImageLayout, None)),
                r#"error_kind="image-layout",step="none""#,
            ),
            (
                Some(error(ErrorKind::PlanChanged, None)),
                r#"error_kind="plan-changed",step="none""#,
            ),
            // A step name from a pod is never a label value of its own.
            (
                Some(error(ErrorKind::Step, Some("rm -rf /"))),
                r#"error_kind="step",step="other""#,
            ),
            (None, r#"error_kind="unknown",step="none""#),
        ];
        for (error, want) in rows {
            if let Some(doc) = f.result.as_mut() {
                doc.error = error;
            }
            let text = counted(&f)?;
            assert!(
                text.lines()
                    .any(|l| l.starts_with("captf_job_errors_total{") && l.contains(want)),
                "{want}:\n{text}"
            );
        }
        Ok(())
    }

    #[test]
    fn steps_changes_and_drift_are_counted() -> anyhow::Result<()> {
        let mut f = finished(Operation::Apply, true);
        if let Some(doc) = f.result.as_mut() {
            doc.steps = vec![
                StepRecord::new("init", 0, std::time::Duration::from_millis(1500)),
                StepRecord::new("apply", 0, std::time::Duration::from_secs(20)),
            ];
            doc.changes = Some(Changes {
                add: 2,
                change: 0,
                destroy: 1,
                import: 0,
            });
        }
        let text = counted(&f)?;
        for want in [
            r#"captf_job_step_duration_seconds_count{kind="TerraformCluster",op="apply",step="init"} 1"#,
            r#"captf_job_step_duration_seconds_bucket{le="5.0",kind="TerraformCluster",op="apply",step="init"} 1"#,
            r#"captf_resources_changed_total{kind="TerraformCluster",op="apply",action="create"} 2"#,
            r#"captf_resources_changed_total{kind="TerraformCluster",op="apply",action="delete"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == want), "{want}:\n{text}");
        }
        assert!(!text.contains(r#"action="update""#), "{text}");

        let mut f = finished(Operation::Drift, true);
        if let Some(doc) = f.result.as_mut() {
            doc.drift = Some(Drift {
                detected: true,
                create: 0,
                update: 3,
                replace: 1,
                delete: 0,
                resources: Vec::new(),
            });
        }
        let text = counted(&f)?;
        for want in [
            r#"captf_drift_resources_total{kind="TerraformCluster",action="update"} 3"#,
            r#"captf_drift_resources_total{kind="TerraformCluster",action="replace"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == want), "{want}:\n{text}");
        }
        Ok(())
    }
}
