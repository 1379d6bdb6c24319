//! What every pass reads first: its Jobs, its owner and what its last apply rendered; and,
//! before it books the finished Jobs, whether the Job status names is still stopping or is gone.

use captf_api::conditions::Status;
use kube::Resource;
use kube::api::Api;

use crate::decide::{Effect, Note};
use crate::error::{KubeContext, Result};
use crate::reconcile::observe::jobs::{self, ObservedJob};
use crate::reconcile::observe::state::DurableInputs;
use crate::reconcile::pass::{Pass, WithWorkspaceStatus, Workload};

/// What [`Pass::first_reads`] read: the Jobs, the owner or its gate, the durable inputs, and
/// what is to be said of them.
pub type FirstReads<O> = (
    Vec<ObservedJob>,
    std::result::Result<O, crate::reconcile::observe::owner::Gate>,
    DurableInputs,
    Vec<Effect>,
);

impl<K> Pass<'_, K>
where
    K: Workload + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// What every pass reads first, at once since none depends on another: the object's Jobs,
    /// its verified owner `O` (or why it has none; `others` as in [`owner`]) and
    /// what its last apply rendered.
    ///
    /// [`owner`]: crate::reconcile::observe::owner::owner
    pub async fn first_reads<O: crate::capi::Owner>(
        &self,
        others: (Status, &'static str),
    ) -> Result<FirstReads<O>> {
        let uid = self.object.meta().uid.as_deref().unwrap_or_default();
        let (listed, owner, durable) = futures::try_join!(
            jobs::list(&self.ctx.client, self.key, uid),
            crate::reconcile::observe::owner::owner::<O, K>(self.ctx, self.object, others),
            crate::reconcile::observe::state::durable_inputs(&self.ctx.client, self.key),
        )?;
        let mut said = Vec::new();
        if !listed.foreign.is_empty() {
            let names = listed.foreign.join(", ");
            let (ns, name) = (self.key.namespace(), self.key.name());
            tracing::warn!(namespace = ns, name, jobs = %names, "Jobs under the object's labels that it does not own are ignored");
            let note = format!(
                "Job(s) {names} carry the labels of {} {name} but are not owned by it: they are no part of its history and change nothing. Delete them",
                self.kind
            );
            let reason = captf_api::events::FOREIGN_JOB_IGNORED;
            said.push(Effect::Event(Note::warning(reason, note)));
        }
        Ok((listed.jobs, owner, durable, said))
    }
}

impl<K> Pass<'_, K>
where
    K: Workload + WithWorkspaceStatus + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// The Job `status.activeJob` names when it is not listed any more but one of its pods
    /// still runs: it may still write the state, so the pass holds as if it ran, and says so
    /// (the note).
    /// The object is read live first, so a stale cache never names a Job already booked.
    pub async fn stopping(&self, jobs: &[ObservedJob]) -> Result<Option<(ObservedJob, Note)>> {
        let named = |object: &K| object.workspace_status().and_then(|s| s.active_job.clone());
        let Some(active) = named(self.object).filter(|a| !jobs.iter().any(|j| j.name == a.name))
        else {
            return Ok(None);
        };
        let ns = self.key.namespace();
        let Some(pod) =
            crate::reconcile::pods::running_pod(&self.ctx.client, ns, &active.name).await?
        else {
            return Ok(None);
        };
        let api: Api<K> = Api::namespaced(self.ctx.client.clone(), ns);
        let live = api
            .get_opt(self.key.name())
            .await
            .during(|| "reading the object live".to_owned())?;
        if live.as_ref().and_then(named).map(|a| a.name) != Some(active.name.clone()) {
            return Ok(None);
        }
        let note = format!(
            "Job {} is gone, but its pod {pod} still runs and may still write the state: nothing is read or started until it ends (at most its 600 s grace; delete the pod if it was orphaned)",
            active.name
        );
        tracing::info!(namespace = ns, job = %active.name, %pod, "a deleted Job's pod still runs");
        let note = Note::normal(captf_api::events::WAITING_FOR_JOB_POD, note);
        Ok(Some((jobs::as_started(&active), note)))
    }

    /// The apply Job `status.activeJob` names that is gone ([`crate::decide::book::interruptions`]):
    /// neither listed nor stopping, while the object, read live, still names it, so a stale
    /// cache never takes a finished Job for a lost one.
    pub async fn vanished_apply(
        &self,
        jobs: &[ObservedJob],
        stopping: Option<&ObservedJob>,
    ) -> Result<Option<String>> {
        let named = |object: &K| {
            object
                .workspace_status()
                .and_then(|s| s.active_job.as_ref())
                .filter(|a| a.operation == captf_api::Operation::Apply)
                .map(|a| a.name.clone())
        };
        let Some(name) = named(self.object) else {
            return Ok(None);
        };
        // Listed, or gone with its pod still running: not lost (yet).
        if jobs.iter().chain(stopping).any(|j| j.name == name) {
            return Ok(None);
        }
        let api: Api<K> = Api::namespaced(self.ctx.client.clone(), self.key.namespace());
        let live = api
            .get_opt(self.key.name())
            .await
            .during(|| "reading the object live".to_owned())?;
        Ok(live.as_ref().and_then(named).filter(|live| *live == name))
    }
}
