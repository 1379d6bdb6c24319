//! A Job that has not started, said on the object: the pass that holds for an active Job
//! asks [`crate::reconcile::observe::unstarted`] why, and says it on the operation's condition,
//! in an event and in the metrics. A Job that cannot ever start ([`crate::decide::stuck`]) is
//! deleted instead, and its operation starts again.

use captf_api::conditions::{Status, reasons, types};
use k8s_openapi::api::batch::v1::Job;
use kube::Resource;
use kube::api::{Api, DeleteParams};
use kube::runtime::events::EventType;

use crate::conditions::Conditions;
use crate::error::{Error, Result};
use crate::reconcile::observe::jobs::ObservedJob;
use crate::reconcile::pass::Pass;
use crate::reconcile::pass::Workload;

impl<K> Pass<'_, K>
where
    K: Workload + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// What holds an active Job's runner, on its operation's condition: `ImagePullFailed` (an
    /// apply, plan or destroy; its deadline failure keeps that reason) or `JobNotStarted`,
    /// announced by an event and `captf_jobs_not_started_total` when it says something new. How long
    /// it has waited is `captf_job_unstarted_seconds` while it has no ready pod.
    pub async fn unstarted(&self, job: &ObservedJob, conds: &mut Conditions) -> Result<()> {
        use crate::reconcile::observe::image_pull;
        use crate::reconcile::observe::unstarted::{self, Unstarted};
        let ns = self.key.namespace();
        self.note_unstarted(
            Some(job.op),
            image_pull::overdue(job, self.now)
                .then(|| job.created_at.map(|t| self.now.duration_since(t).as_secs()))
                .flatten(),
        );
        let (g, now) = (self.generation, self.now);
        match unstarted::of_active(&self.ctx.client, ns, job, now).await? {
            Some(Unstarted::Pull(why))
                if matches!(
                    job.op,
                    captf_api::Operation::Apply
                        | captf_api::Operation::Plan
                        | captf_api::Operation::Destroy
                ) =>
            {
                let message = image_pull::while_running(&job.name, &why);
                let type_ = types::APPLY_JOB_SUCCEEDED;
                conds.set(
                    type_,
                    Status::False,
                    reasons::IMAGE_PULL_FAILED,
                    &message,
                    g,
                    now,
                );
            }
            Some(Unstarted::Stuck { cause, message }) => {
                let text = unstarted::message(&job.name, cause, &message);
                self.not_started(job.op, cause, &text, conds).await;
            }
            _ => {}
        }
        Ok(())
    }

    /// Deletes the stuck Job `job` once the status no longer names it, releases its run lease
    /// (and a cluster's write lease) as bookkeeping does for a finished Job, and says so, once:
    /// `StuckJobDeleted`, naming the Job. Nothing records an interrupted apply: no pod of it
    /// ever ran.
    ///
    /// Foreground propagation: the Job stays, being deleted and still stuck, until its pods
    /// are gone, so the next Job of the operation (which takes the same name) can only be
    /// created once no old pod is left to mount its new per-run Secret.
    pub async fn delete_stuck(&self, job: &ObservedJob) -> Result<()> {
        let (client, ns) = (&self.ctx.client, self.key.namespace());
        let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
        match jobs.delete(&job.name, &DeleteParams::foreground()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(Error::Kube {
                    action: format!("deleting the stuck Job {ns}/{}", job.name),
                    source,
                });
            }
        }
        crate::reconcile::finished::bookkeeping::release_run_lease(client, self.key, &job.name)
            .await;
        self.note_unstarted(None, None);
        let uid = self.object.meta().uid.as_deref().unwrap_or_default();
        let reason = captf_api::events::STUCK_JOB_DELETED;
        if !self.ctx.metrics.counted.first(uid, reason, Some(&job.name)) {
            // Deleted already, its pods still going.
            return Ok(());
        }
        tracing::info!(namespace = ns, job = %job.name, "deleted a Job that never started and cannot (its per-run Secret is gone)");
        let note = crate::decide::status::stuck_message(&job.name, job.op);
        self.publish_about(EventType::Warning, reason, &note, &job.name)
            .await;
        Ok(())
    }

    /// `JobNotStarted` with `text` on `op`'s condition; when it says something new, an event
    /// and `captf_jobs_not_started_total` too.
    pub async fn not_started(
        &self,
        op: captf_api::Operation,
        cause: crate::reconcile::observe::unstarted::Cause,
        text: &str,
        conds: &mut Conditions,
    ) {
        let type_ = crate::reconcile::act::launch::condition_of(op);
        let uid = self.object.meta().uid.clone().unwrap_or_default();
        let first = self
            .ctx
            .metrics
            .counted
            .first(&uid, "jobs_not_started", Some(text));
        let new = first
            && conds
                .get(type_)
                .is_none_or(|c| c.reason != reasons::JOB_NOT_STARTED || *c.message != *text);
        let (g, now) = (self.generation, self.now);
        conds.set(type_, Status::False, reasons::JOB_NOT_STARTED, text, g, now);
        if !new {
            return;
        }
        self.ctx
            .metrics
            .jobs_not_started_total
            .get_or_create(&crate::metrics::KindReason {
                kind: self.kind,
                reason: cause.as_str(),
            })
            .inc();
        self.publish(EventType::Warning, captf_api::events::JOB_NOT_STARTED, text)
            .await;
    }

    /// `captf_job_unstarted_seconds` of the object: `waited` for `op` (the series of its other
    /// operations go), or no series at all.
    pub fn note_unstarted(&self, op: Option<captf_api::Operation>, waited: Option<i64>) {
        let gauge = &self.ctx.metrics.job_unstarted_seconds;
        for each in captf_api::Operation::ALL {
            let series = crate::metrics::ObjectOp {
                kind: self.kind,
                namespace: self.key.namespace().to_owned(),
                name: self.key.name().to_owned(),
                op: each.as_str(),
            };
            match waited.filter(|_| op == Some(each)) {
                Some(seconds) => {
                    gauge.get_or_create(&series).set(seconds);
                }
                None => {
                    gauge.remove(&series);
                }
            }
        }
    }
}
