//! What the interpreter ([`crate::reconcile::interpret`]) calls to write, for every kind
//! alike: the release of an object, starting a Job, the one status write that ends a pass, and
//! the Secrets, credentials, events and approvals those need.

pub mod approvals;
pub mod credentials;
pub mod events;
pub mod keep;
pub mod launch;
pub mod object;
pub mod owners;
pub mod secrets;
pub mod unstarted;

use std::time::Duration;

use captf_api::ActiveJob;
use captf_api::annotations;
use captf_api::conditions::{reasons, types};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use crate::conditions::Conditions;
use crate::decide::{self, StateView};
use crate::error::Result;
use crate::job::EffectivePolicy;
use crate::reconcile::act::launch::{Started, Starting};
use crate::reconcile::act::object::{patch_status, remove_finalizer};
use crate::reconcile::observe::jobs::{self, ObservedJob};
use crate::reconcile::pass::Pass;
use crate::reconcile::pass::Workload;

/// What the act step leaves for the status write.
#[derive(Default)]
pub struct Acted {
    /// The Job started by this pass.
    pub active: Option<ActiveJob>,
    /// Look again after this long at the latest.
    pub requeue: Option<Duration>,
}

impl<K> Pass<'_, K>
where
    K: Workload + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// Externally managed (`cluster.x-k8s.io/managed-by`): CAPTF leaves the object alone and
    /// only lets go of a deletion. `Some` ends the pass, with its effects.
    pub fn externally_managed(&self, deleting: bool) -> Option<Vec<decide::Effect>> {
        if !self
            .object
            .annotations()
            .contains_key(annotations::MANAGED_BY)
        {
            return None;
        }
        let finalizer = self.key.kind().finalizer();
        if !(deleting && self.object.finalizers().iter().any(|f| f == finalizer)) {
            return Some(Vec::new());
        }
        let note = decide::Note::normal(
            captf_api::events::EXTERNALLY_MANAGED_RELEASED,
            "released without a destroy: the object is managed externally".to_owned(),
        );
        Some(vec![
            decide::Effect::RemoveFinalizer,
            decide::Effect::Event(note),
        ])
    }

    /// Logs what [`decide::decide`] chose, and returns its count.
    pub fn count_decision(&self, decision: &decide::Decision) -> decide::Effect {
        let op = match &decision.action {
            decide::Action::Start(s) => s.op.as_str(),
            _ => "none",
        };
        tracing::info!(namespace = %self.key.namespace(), name = %self.key.name(), kind = self.kind, reason = %decision.reason, op, "decided");
        let reason = decision.reason;
        decide::Effect::Count(decide::Counter::Decision { op, reason })
    }

    /// Logs why [`decide::hold`] stopped the pass before it observed, and returns its count.
    pub fn count_hold(&self, hold: &decide::Hold) -> decide::Effect {
        // Every pass while a Job runs: not worth an info line each.
        tracing::debug!(namespace = %self.key.namespace(), name = %self.key.name(), kind = self.kind, reason = %hold.reason, "held");
        let reason = hold.reason;
        decide::Effect::Count(decide::Counter::Decision { op: "none", reason })
    }

    /// What `Deleting` explains of a deletion the decision holds ([`decide::status`]).
    pub fn held_deletion(&self, state: &StateView) -> decide::status::HeldDeletion {
        let uid = self.object.uid().unwrap_or_default();
        let other_abandon = self
            .object
            .annotations()
            .get(annotations::ABANDON_INFRASTRUCTURE)
            .filter(|v| **v != uid)
            .cloned();
        decide::status::HeldDeletion {
            uid,
            namespace_terminating: self.namespace_terminating(),
            state: state.clone(),
            other_abandon,
        }
    }

    /// Removes the finalizer: the object goes, and its metrics with it.
    pub async fn remove_finalizer(&self) -> Result<()> {
        let (ctx, key) = (self.ctx, self.key);
        let api: Api<K> = Api::namespaced(ctx.client.clone(), key.namespace());
        remove_finalizer(&api, self.object, key.kind()).await?;
        ctx.metrics.forget(self.kind, key.namespace(), key.name());
        if let Some(uid) = self.object.meta().uid.as_deref() {
            ctx.metrics.counted.forget(uid);
        }
        crate::sweep::after_release(&ctx.client, key.namespace()).await;
        Ok(())
    }

    /// The event of a release, saying whether anything was destroyed.
    pub async fn announce_release(
        &self,
        reason: decide::Reason,
        conds: &Conditions,
        state: &StateView,
        inputs_lost: bool,
    ) {
        let key = self.key;
        let (type_, event, note) = match reason {
            decide::Reason::Abandoned => (
                EventType::Warning,
                captf_api::events::INFRASTRUCTURE_ABANDONED,
                format!(
                    "removed finalizer {} without a destroy ({}); captf.io/abandon-infrastructure names this object's UID. What the module created keeps running, unmanaged; the backups go with the object",
                    key.kind().finalizer(),
                    abandon_cause(conds, state, inputs_lost, self.namespace_terminating())
                ),
            ),
            decide::Reason::Destroyed => (
                EventType::Normal,
                captf_api::events::DESTROYED,
                "Infrastructure destroyed; state and inputs removed".to_owned(),
            ),
            _ => (
                EventType::Normal,
                captf_api::events::FINALIZER_REMOVED,
                "nothing to destroy: the object never applied".to_owned(),
            ),
        };
        self.publish(type_, event, &note).await;
    }

    /// Starts the decided Job, or says what it waits for. `due` is when the decision wanted
    /// to look again anyway.
    pub async fn launch(
        &self,
        due: Option<Duration>,
        starting: &Starting<'_>,
        conds: &mut Conditions,
    ) -> Result<Acted> {
        Ok(match self.start_job(starting, conds).await? {
            Started::Job(job) => Acted {
                active: Some(job),
                requeue: Some(crate::schedule::ACTIVE_JOB_REQUEUE),
            },
            Started::Waiting(after) => Acted {
                active: None,
                requeue: Some(due.map_or(after, |d| d.min(after))),
            },
        })
    }

    /// `Ready` summarized, the object's gauges and transition counters, and the one status
    /// patch of a pass that got as far as deciding; `active` is the Job it started.
    pub async fn write_status<S: serde::Serialize>(
        &self,
        before: Option<&S>,
        status: &S,
        mut conds: Conditions,
        provisioned: bool,
        active: Option<ActiveJob>,
    ) -> Result<()> {
        let (ctx, key) = (self.ctx, self.key);
        conds.summarize_ready(key.kind(), provisioned, self.generation, self.now);
        let ready = conds.get(types::READY).map(|c| match c.status.as_str() {
            "True" => 1,
            "False" => 0,
            _ => -1,
        });
        let object = crate::metrics::Object {
            kind: self.kind,
            namespace: key.namespace().to_owned(),
            name: key.name().to_owned(),
        };
        ctx.metrics
            .ready
            .get_or_create(&object)
            .set(ready.unwrap_or(-1));
        let drifted = conds
            .get(types::DRIFT_DETECTED)
            .is_some_and(|c| c.status == "True");
        ctx.metrics
            .drift_detected
            .get_or_create(&object)
            .set(i64::from(drifted));
        // Counted on the transition: a condition set False in this pass carries its time.
        if let Some(c) = conds
            .get(types::OUTPUTS_VALID)
            .filter(|c| c.status == "False" && c.last_transition_time.0 == self.now)
            && let Some(reason) = captf_api::conditions::allowed_reasons(types::OUTPUTS_VALID)
                .and_then(|a| a.when_false.iter().find(|r| **r == &*c.reason).copied())
        {
            ctx.metrics
                .outputs_invalid_total
                .get_or_create(&crate::metrics::KindReason {
                    kind: self.kind,
                    reason,
                })
                .inc();
        }
        let api: Api<K> = Api::namespaced(ctx.client.clone(), key.namespace());
        patch_status(&api, key, before, status, conds, self.generation, active).await
    }

    /// Deletes the Jobs beyond the history limits of `policy`.
    pub async fn prune(&self, jobs: &[ObservedJob], policy: &EffectivePolicy) -> Result<()> {
        let pruned = jobs::prune_plan(
            jobs,
            policy.successful_jobs_history_limit,
            policy.failed_jobs_history_limit,
        );
        prune(&self.ctx.client, self.key.namespace(), &pruned).await
    }

    /// When to look again: `after` at the latest, never later than the sync period nor
    /// sooner than a second.
    pub fn requeue(&self, after: Option<Duration>) -> Action {
        let sync = self.ctx.settings.sync_period;
        Action::requeue(after.map_or(sync, |d| d.min(sync).max(Duration::from_secs(1))))
    }
}

/// Deletes the Jobs `names` (background propagation: their pods go too).
pub async fn prune(client: &kube::Client, namespace: &str, names: &[String]) -> Result<()> {
    let api: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), namespace);
    for name in names {
        match api
            .delete(name, &kube::api::DeleteParams::background())
            .await
        {
            Ok(_) => {
                tracing::debug!(%namespace, job = %name, "pruned Job beyond the history limits")
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(crate::Error::Kube {
                    action: format!("pruning Job {namespace}/{name}"),
                    source: e,
                });
            }
        }
    }
    Ok(())
}

/// Why an abandon was allowed, for the event.
pub fn abandon_cause(
    conds: &Conditions,
    state: &StateView,
    inputs_lost: bool,
    namespace_terminating: bool,
) -> String {
    match state {
        _ if namespace_terminating && !state.held() => {
            "the namespace is being deleted, so no destroy Job can start".to_owned()
        }
        _ if inputs_lost && !state.held() => {
            "the durable inputs Secret is gone, so no destroy can be rendered".to_owned()
        }
        _ if !state.held()
            && conds
                .get(types::APPLY_JOB_SUCCEEDED)
                .is_some_and(|c| c.reason == reasons::IDENTITY_NOT_ALLOWED) =>
        {
            "no destroy Job can start without the identity's credentials: ApplyJobSucceeded IdentityNotAllowed (see IdentityAllowed and CredentialsMirrored)".to_owned()
        }
        s if s.held() => format!(
            "StateReadable {}",
            conds
                .get(types::STATE_READABLE)
                .map_or("False", |c| c.reason.as_str())
        ),
        _ => format!(
            "the last destroy failed: ApplyJobSucceeded {}",
            conds
                .get(types::APPLY_JOB_SUCCEEDED)
                .map_or("False", |c| c.reason.as_str())
        ),
    }
}
