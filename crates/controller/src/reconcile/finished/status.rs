//! Recording a finished Job in the object's status: [`decide::book`] says what, this carries
//! it out for every kind alike.

use captf_api::WorkspaceStatus;
use captf_api::conditions::{reasons, types};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use kube::runtime::events::EventType;

use crate::conditions::Conditions;
use crate::decide::book::{self, Booked, Note, Recorded};
use crate::decide::{self, Effect, Finished};
use crate::reconcile::finished::bookkeeping;
use crate::reconcile::observe::image_pull::said_while_running;
use crate::reconcile::pass::Pass;
use crate::reconcile::pass::Workload;

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
    /// Records one finished Job: `status.lastRun`, the Job counters, and what
    /// [`decide::book`] says it leaves behind. Manual plans are left to the kind.
    pub fn record(
        &self,
        f: &Finished,
        conds: &mut Conditions,
        workspace: &mut WorkspaceStatus,
        source: Source<'_>,
    ) -> Vec<Effect> {
        // A pass that stopped after its status patch recorded this Job, before marking it
        // bookkept, counted it already: book it again, count it once.
        let counted = workspace.last_run.as_ref().is_some_and(|r| r.job == f.name);
        workspace.last_run = Some(f.last_run());
        if !counted {
            bookkeeping::count(&self.ctx.metrics, self.kind, self.key, f);
        }
        let pull_seen = conds
            .get(types::APPLY_JOB_SUCCEEDED)
            .filter(|c| c.reason == reasons::IMAGE_PULL_FAILED)
            .and_then(|c| said_while_running(&c.message, &f.name))
            .map(str::to_owned);
        let approve_destructive = self
            .object
            .meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(captf_api::annotations::APPROVE_DESTRUCTIVE_PLAN));
        let before = book::Before {
            key: self.key,
            spec_image: source.spec_image,
            pinned: source.pinned,
            approve_destructive: approve_destructive.map(String::as_str),
            pull_seen: pull_seen.as_deref(),
        };
        let mut booked = decide::book::book(f, &before);
        if counted {
            booked.uncounted();
        }
        self.booked(booked, conds, workspace)
    }

    /// Records in status what [`decide::book`] says of a finished Job, and returns the
    /// effects that follow, in order.
    pub fn booked(
        &self,
        booked: Booked,
        conds: &mut Conditions,
        workspace: &mut WorkspaceStatus,
    ) -> Vec<Effect> {
        let (g, now) = (self.generation, self.now);
        for set in &booked.conditions {
            conds.set(set.type_, set.status, set.reason, &set.message, g, now);
        }
        for recorded in booked.recorded {
            match recorded {
                Recorded::Source(source) => workspace.source = Some(source),
                Recorded::Refreshed { drift } => {
                    workspace.last_refresh = Some(Time(now));
                    if drift {
                        workspace.last_drift_check = Some(Time(now));
                    }
                }
                Recorded::RestoredSerial(serial) => workspace.last_restored_serial = serial,
            }
        }
        booked.effects
    }

    /// Publishes a decided event.
    pub async fn tell(&self, note: &Note) {
        let type_ = if note.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        match &note.job {
            Some(job) => {
                self.publish_about(type_, note.reason, &note.message, job)
                    .await;
            }
            None => self.publish(type_, note.reason, &note.message).await,
        }
    }
}
