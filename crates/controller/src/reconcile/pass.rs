//! The steps of a pass that every workload kind shares, called by [`crate::reconcile::flow`]. Each works
//! on the object's key, its conditions and the shared part of its status.

use captf_api::conditions::{Status, reasons, types};
use captf_api::names::ObjectKey;
use captf_api::{ActiveJob, annotations};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::Api;
use kube::runtime::events::{Event, EventType};

use crate::conditions::Conditions;
use crate::decide::status;
use crate::decide::{self, StateView};
use crate::decide::{Counter, Effect, Finished, Note};
use crate::error::{KubeContext, Result};
use crate::reconcile::Context;
use crate::reconcile::finished::bookkeeping;
use crate::reconcile::observe::jobs::{self, ObservedJob};
use crate::reconcile::observe::state::{DurableInputs, StateRead};

/// One pass over one object: who it is and when the pass runs.
pub struct Pass<'a, K> {
    pub ctx: &'a Context,
    pub object: &'a K,
    pub key: &'a ObjectKey,
    /// The kind, as metrics label it.
    pub kind: &'static str,
    pub generation: Option<i64>,
    pub now: Timestamp,
}

/// What [`Pass::first_reads`] read: the Jobs, the owner or its gate, the durable inputs, and
/// what is to be said of them.
pub type FirstReads<O> = (
    Vec<ObservedJob>,
    std::result::Result<O, crate::reconcile::observe::owner::Gate>,
    DurableInputs,
    Vec<Effect>,
);

/// What [`Pass::observe`] read.
pub struct Observed {
    pub state: StateRead,
    pub lock: crate::reconcile::observe::locks::Lock,
}

impl<K> Pass<'_, K>
where
    K: crate::reconcile::act::object::Workload
        + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// The pass's part of [`decide::applied_per_state`]: writes it only where no apply was ever
    /// reported, so a Job's own word is never overwritten.
    pub fn applied_per_state(
        &self,
        snapshot: &decide::Snapshot,
        decision: &decide::Decision,
        conds: &mut Conditions,
    ) {
        let unreported = conds
            .get(types::APPLY_JOB_SUCCEEDED)
            .is_some_and(|c| c.reason == reasons::NO_APPLY_YET);
        if let Some(message) = decide::applied_per_state(snapshot, decision).filter(|_| unreported)
        {
            conds.set(
                types::APPLY_JOB_SUCCEEDED,
                Status::True,
                reasons::APPLY_SUCCEEDED,
                &message,
                self.generation,
                self.now,
            );
        }
    }

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

    /// What every pass of a live object reads once no Job runs: its state and the engine's
    /// lock, at once, since neither depends on the other.
    pub async fn observe(&self) -> Result<Observed> {
        let client = &self.ctx.client;
        let (state, lock) = futures::try_join!(
            crate::reconcile::observe::state::read(self.ctx, self.key),
            crate::reconcile::observe::locks::inspect(client, self.key),
        )?;
        Ok(Observed { state, lock })
    }

    /// The engine's lock, while no Job runs: a dead runner's is handed to the next Job to
    /// release (`(Some((lock id, pod)), None)`), anyone else's on a readable state is reported
    /// as StateLocked and never forced (`(None, Some(locked))`). `previous` are the
    /// conditions the pass started from: a lock new to them is counted, and its warning queued
    /// in `writes` (posted after the decision).
    pub fn inspect_lock(
        &self,
        state: &StateRead,
        lock: &crate::reconcile::observe::locks::Lock,
        previous: &Conditions,
        writes: &mut Vec<Effect>,
    ) -> (Option<(String, String)>, Option<status::Locked>) {
        use crate::reconcile::observe::locks::Lock;
        match lock {
            Lock::Stale { id, pod } => (Some((id.clone(), pod.clone())), None),
            Lock::Foreign(holder) if matches!(state, StateRead::Found(..)) => {
                let locked = status::Locked {
                    holder: holder.to_string(),
                    id: holder.id.clone(),
                };
                let was_locked = previous
                    .get(types::STATE_READABLE)
                    .is_some_and(|c| c.reason == reasons::STATE_LOCKED);
                if !was_locked {
                    let readable = status::Readable::Read;
                    let said = status::state_readable(&readable, Some(&locked), self.key);
                    writes.push(Effect::Count(Counter::StateReadError("locked")));
                    let reason = captf_api::events::STATE_LOCKED;
                    writes.push(Effect::Event(Note::warning(reason, said.message)));
                }
                (None, Some(locked))
            }
            _ => (None, None),
        }
    }

    /// The events the conditions announce by changing from `before` to `after`
    /// ([`decide::transitions`]), just before the status that holds them is written.
    pub async fn announce_transitions(&self, before: &[captf_api::Condition], after: &Conditions) {
        let uid = self.object.meta().uid.as_deref().unwrap_or_default();
        let of = |c: Option<&captf_api::Condition>| {
            c.map_or(String::new(), |c| format!("{}/{}", c.status, c.reason))
        };
        for a in decide::transitions::transitions(before, after) {
            // A pass that starts from a cached object older than its own last status patch
            // sees the same change again: announced once.
            let was = of(before.iter().find(|c| c.type_ == a.condition));
            let change = format!("{} {was} -> {}", a.reason, of(after.get(a.condition)));
            if !self
                .ctx
                .metrics
                .counted
                .first(uid, a.condition, Some(&change))
            {
                continue;
            }
            let type_ = if a.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            self.publish(type_, a.reason, &a.note).await;
        }
    }

    /// An event about the object.
    pub async fn publish(&self, type_: EventType, reason: &str, note: &str) {
        publish(self.ctx, self.object, type_, reason, note, None).await;
    }

    /// An event about the object and its Job `job` (the related object): each Job's event is
    /// a series of its own, not folded into the first one of that reason.
    pub async fn publish_about(&self, type_: EventType, reason: &str, note: &str, job: &str) {
        let related = self.related("batch/v1", "Job", job);
        publish(self.ctx, self.object, type_, reason, note, Some(related)).await;
    }

    /// An object in the object's namespace, as an event's related object.
    pub fn related(&self, api_version: &str, kind: &str, name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some(api_version.to_owned()),
            kind: Some(kind.to_owned()),
            name: Some(name.to_owned()),
            namespace: Some(self.key.namespace().to_owned()),
            ..Default::default()
        }
    }

    /// An event about the object and `related`.
    pub async fn publish_related(
        &self,
        type_: EventType,
        reason: &str,
        note: &str,
        related: ObjectReference,
    ) {
        publish(self.ctx, self.object, type_, reason, note, Some(related)).await;
    }
}

impl<K> Pass<'_, K>
where
    K: crate::reconcile::act::object::Workload
        + crate::reconcile::act::object::WithWorkspaceStatus
        + Resource<Scope = kube::core::NamespaceResourceScope>,
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
        let Some(pod) = jobs::running_pod(&self.ctx.client, ns, &active.name).await? else {
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

    /// The apply Job `status.activeJob` names that is gone ([`decide::book::interruptions`]):
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

/// An event about `object` (best effort: a lost event never fails the pass).
pub async fn publish<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    object: &K,
    type_: EventType,
    reason: &str,
    note: &str,
    related: Option<ObjectReference>,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1024).collect()),
        action: reason.into(),
        secondary: related,
    };
    if let Err(error) = ctx.recorder.publish(&event, &object.object_ref(&())).await {
        tracing::debug!(%error, "event not published");
    }
}

/// The serial of a state, 0 when there is none.
pub fn state_serial(state: &StateRead) -> u64 {
    match state {
        StateRead::Found(s, _) => s.serial,
        _ => 0,
    }
}
/// The newest drift check found drift, and no apply ran since (a remediation that succeeded
/// waits for the next check before another one).
pub fn drift_found(conds: &Conditions, history: &decide::History) -> bool {
    let detected = conds
        .get(types::DRIFT_DETECTED)
        .is_some_and(|c| c.status == Status::True.as_str());
    let checked = history.drift.last_success;
    detected && checked.is_some_and(|c| history.apply.last_success.is_none_or(|a| c > a))
}

pub fn active_job(job: &Option<jobs::ObservedJob>) -> Option<ActiveJob> {
    job.as_ref().map(|j| ActiveJob {
        name: j.name.clone(),
        operation: j.op,
        attempt: i32::try_from(j.attempt.max(1)).unwrap_or(1),
        start_time: j.job.status.as_ref().and_then(|s| s.start_time.clone()),
    })
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

/// `captf.io/abandon-infrastructure` names exactly this object's UID (a value copied from
/// another object does nothing).
pub fn abandon_requested<K: kube::ResourceExt>(tc: &K) -> bool {
    let uid = tc.uid().unwrap_or_default();
    !uid.is_empty()
        && tc
            .annotations()
            .get(annotations::ABANDON_INFRASTRUCTURE)
            .is_some_and(|v| *v == uid)
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
        bookkeeping::finish(&ctx.client, key, f).await?;
    }
    let present = |name: &str| ctx.caches.secrets.contains(key.namespace(), name);
    for job in bookkeeping::leftovers(jobs, present) {
        bookkeeping::clear_after(&ctx.client, key, job).await?;
    }
    Ok(())
}
