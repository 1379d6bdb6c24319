//! A Job that has not started, said on the object: the pass that holds for an active Job
//! asks [`crate::reconcile::observe::unstarted`] why, and says it on the operation's condition,
//! in an event and in the metrics.

use captf_api::conditions::{Status, reasons, types};
use kube::Resource;
use kube::runtime::events::EventType;

use crate::conditions::Conditions;
use crate::error::Result;
use crate::reconcile::act::object::Workload;
use crate::reconcile::observe::jobs::ObservedJob;
use crate::reconcile::pass::Pass;

impl<K> Pass<'_, K>
where
    K: Workload + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// What holds an active Job's runner, on its operation's condition: `ImagePullFailed` (an
    /// apply, plan or destroy; its deadline failure keeps that reason) or `JobNotStarted`,
    /// announced by an event and `captf_jobs_not_started_total` when it says something new. How long
    /// it has waited is `captf_job_unstarted_seconds` while it has no ready pod.
    pub async fn unstarted(&self, job: &ObservedJob, conds: &mut Conditions) -> Result<()> {
        use crate::reconcile::act::image_pull;
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
