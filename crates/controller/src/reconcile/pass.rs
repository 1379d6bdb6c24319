//! The steps of a pass that every workload kind shares, called by [`crate::reconcile::flow`]. Each works
//! on the object's key, its conditions and the shared part of its status.

use captf_api::conditions::{Status, reasons, types};
use captf_api::names::ObjectKey;
use captf_api::{ActiveJob, WorkspaceStatus, annotations};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};

use crate::conditions::Conditions;
use crate::decide::{self, StateView};
use crate::error::{KubeContext, Result};
use crate::reconcile::act::object::{patch_status, set_block_move};
use crate::reconcile::finished::bookkeeping::{self, Finished};
use crate::reconcile::observe::jobs::{self, ObservedJob, Phase};
use crate::reconcile::observe::state::{DurableInputs, StateRead};
use crate::reconcile::{Context, act::credentials};

/// One pass over one object: who it is and when the pass runs.
pub struct Pass<'a, K> {
    pub ctx: &'a Context,
    pub object: &'a K,
    pub key: &'a ObjectKey,
    /// The kind, as metrics label it.
    pub kind: &'static str,
    pub generation: Option<i64>,
    pub now: Timestamp,
    /// The writes observe found due, in order ([`Pass::defer`]).
    pub deferred: std::sync::Mutex<Vec<Write>>,
}

/// What [`Pass::first_reads`] read: the Jobs, the owner or its gate, the durable inputs.
pub type FirstReads<O> = (
    Vec<ObservedJob>,
    std::result::Result<O, crate::reconcile::observe::owner::Gate>,
    DurableInputs,
);

/// What [`Pass::observe`] read.
pub struct Observed {
    pub state: StateRead,
    pub lock: crate::reconcile::observe::locks::Lock,
}

/// A write observe found due, carried out after the decision ([`decide::Effect::Write`]):
/// observe only reads.
#[derive(Clone, Debug)]
pub enum Write {
    /// An event about the object.
    Note {
        type_: EventType,
        reason: &'static str,
        text: String,
    },
    /// A merge patch of the object itself (what its outputs set in its spec); `what` names it
    /// in an error.
    Own {
        patch: serde_json::Value,
        what: &'static str,
    },
    /// A merge patch of the CAPI object `name` in the object's namespace.
    Capi {
        resource: kube::core::ApiResource,
        name: String,
        patch: serde_json::Value,
        what: String,
    },
    /// A pool's exports mark on its durable inputs (`None`: removed).
    ExportsMark {
        annotation: &'static str,
        value: Option<String>,
    },
    /// A pool's record of the exports last applied, on its durable inputs (`None`: removed).
    AppliedExports(Option<Vec<u8>>),
    /// An approval annotation used up, if it still holds `value`.
    Consume {
        annotation: &'static str,
        value: String,
    },
}

/// What [`Pass::keep_state`] keeps: the state the pass read and what it found beside it.
#[derive(Clone, Copy)]
pub struct Keep<'a> {
    pub state: &'a StateRead,
    pub jobs: &'a [ObservedJob],
    pub owner_ref: &'a OwnerReference,
    pub cluster_name: &'a str,
    /// The serial a pending `captf.io/restore-state` names.
    pub pending_restore: Option<u64>,
    pub deleting: bool,
    /// `status.observedStateSerial` as the pass found it, before the outputs recorded the
    /// serial read now: a serial not seen before is backed up.
    pub observed_serial: Option<i64>,
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
        futures::try_join!(
            jobs::list(&self.ctx.client, self.key),
            crate::reconcile::observe::owner::owner::<O, K>(self.ctx, self.object, others),
            crate::reconcile::observe::state::durable_inputs(&self.ctx.client, self.key),
        )
    }

    /// What every pass of a live object reads once no Job runs: its state and the engine's
    /// lock, at once, since neither depends on the other.
    pub async fn observe(&self) -> Result<Observed> {
        let client = &self.ctx.client;
        let (state, lock) = futures::try_join!(
            crate::reconcile::observe::state::read(client, self.key),
            crate::reconcile::observe::locks::inspect(client, self.key),
        )?;
        Ok(Observed { state, lock })
    }

    /// The object's credentials mirrored and its namespace's runner RBAC kept current, at
    /// once (each is a round trip or two), and what they say in IdentityAllowed,
    /// CredentialsMirrored and RunnerRBACReady.
    pub async fn ensure_credentials(
        &self,
        identity: Option<&str>,
        owner_ref: &OwnerReference,
        conds: &mut Conditions,
    ) -> Result<credentials::Outcome> {
        let (client, caches, ns) = (&self.ctx.client, &self.ctx.caches, self.key.namespace());
        let (creds, runner_rbac) = futures::try_join!(
            credentials::ensure(client, caches, ns, identity, owner_ref),
            // Not the pass's error: RunnerRBACReady says what failed.
            async { Ok(credentials::ensure_runner_rbac(client, caches, ns).await) },
        )?;
        if let Some(mirror) = &creds.mirror_removed {
            self.publish(
                EventType::Normal,
                captf_api::events::MIRROR_REMOVED,
                &format!(
                    "deleted the credential mirror {ns}/{mirror}: TerraformClusterIdentity {} no longer allows the namespace",
                    identity.unwrap_or_default()
                ),
            )
            .await;
        }
        Ok(self.note_credentials(creds, runner_rbac, conds))
    }

    /// IdentityAllowed, CredentialsMirrored and RunnerRBACReady, from what
    /// [`ensure_credentials`](Self::ensure_credentials) found.
    fn note_credentials(
        &self,
        creds: credentials::Outcome,
        runner_rbac: Result<()>,
        conds: &mut Conditions,
    ) -> credentials::Outcome {
        let (status, reason, _) = &creds.identity_allowed;
        let denied = match *reason {
            reasons::IDENTITY_NOT_FOUND => Some("notfound"),
            reasons::NAMESPACE_NOT_ALLOWED => Some("namespace"),
            _ => None,
        }
        .filter(|_| *status == Status::False);
        // Once per refusal, not once per pass: the condition held its reason already (its
        // status says so after a restart), or this manager counted it (a pass may start from a
        // cached object that lags its last status patch).
        let held = conds
            .get(types::IDENTITY_ALLOWED)
            .is_some_and(|c| c.reason == *reason);
        let uid = self.object.meta().uid.clone().unwrap_or_default();
        let first = self
            .ctx
            .metrics
            .counted
            .first(&uid, "identity_denied", denied);
        if let Some(denied) = denied.filter(|_| !held && first) {
            self.ctx
                .metrics
                .identity_denied_total
                .get_or_create(&crate::metrics::Reason { reason: denied })
                .inc();
        }
        conds.set(
            types::IDENTITY_ALLOWED,
            creds.identity_allowed.0,
            creds.identity_allowed.1,
            &creds.identity_allowed.2,
            self.generation,
            self.now,
        );
        conds.set(
            types::CREDENTIALS_MIRRORED,
            creds.mirrored.0,
            creds.mirrored.1,
            &creds.mirrored.2,
            self.generation,
            self.now,
        );
        match runner_rbac {
            Ok(()) => conds.set(
                types::RUNNER_RBAC_READY,
                Status::True,
                reasons::RBAC_READY,
                "",
                self.generation,
                self.now,
            ),
            Err(e) => conds.set(
                types::RUNNER_RBAC_READY,
                Status::False,
                reasons::RBAC_FAILED,
                &e.to_string(),
                self.generation,
                self.now,
            ),
        }
        creds
    }

    /// What [`state_view`](Self::state_view) found must be written about the state's lineage,
    /// and said.
    pub async fn keep_lineage(
        &self,
        writes: &crate::reconcile::observe::lineage::LineageWrites,
    ) -> Result<()> {
        if let Some(lineage) = &writes.record {
            crate::reconcile::act::secrets::record_lineage(&self.ctx.client, self.key, lineage)
                .await?;
        }
        if let Some(note) = &writes.adopted {
            self.publish(EventType::Normal, captf_api::events::STATE_ADOPTED, note)
                .await;
        }
        if let Some(lineage) = &writes.adoption_done {
            let api: Api<K> = Api::namespaced(self.ctx.client.clone(), self.key.namespace());
            let adopt = annotations::ADOPT_STATE;
            crate::reconcile::act::approvals::consume(&api, self.key.name(), adopt, lineage)
                .await?;
        }
        if let Some(message) = &writes.mismatch {
            let reason = reasons::STATE_LINEAGE_MISMATCH;
            self.publish(EventType::Warning, reason, message).await;
        }
        Ok(())
    }

    /// A backup of each new serial (`status.stateBackups`), and the owner references of the
    /// object's Secrets repaired (one OwnerReferencesRepaired event).
    pub async fn keep_state(&self, keep: &Keep<'_>, workspace: &mut WorkspaceStatus) -> Result<()> {
        let Keep {
            state,
            jobs,
            owner_ref,
            cluster_name,
            pending_restore,
            deleting,
            observed_serial,
        } = *keep;
        // Secrets re-owned in this pass, for one event.
        let mut repaired: Vec<String> = Vec::new();
        // A serial not seen before, or one no listed backup holds yet (the state of an object that
        // applied before backups were on).
        let serial = i64::try_from(state_serial(state)).ok();
        let listed = workspace
            .state_backups
            .as_ref()
            .is_some_and(|b| b.iter().any(|b| Some(b.serial) == serial));
        let backups_on = self.ctx.settings.state_backups > 0 && serial.is_some_and(|s| s >= 1);
        if let StateRead::Found(s, chunks) = state
            && (observed_serial != serial || (backups_on && !listed && !deleting))
        {
            // The Job whose state this is.
            let source_job = jobs
                .iter()
                .rev()
                .find(|j| j.phase == Phase::Succeeded)
                .map(|j| j.name.as_str());
            let request = crate::reconcile::act::backups::Request {
                key: self.key,
                owner: owner_ref,
                cluster_name,
                chunks,
                state: Some(s),
                source_job,
                keep: self.ctx.settings.state_backups,
                pending_restore,
                deleting,
                now: self.now,
            };
            repaired.extend(self.back_up(&request, workspace).await?);
        }
        // Owner references lost in a restore or a move: re-owned here, unpaused and with no Job
        // running (state chunks are never touched while a Job may write them).
        let mut own_secrets = vec![self.key.durable_inputs_secret(), self.key.plan_key_secret()];
        if let StateRead::Found(_, chunks) = state {
            own_secrets.extend(chunks.iter().map(|c| c.name.clone()));
        }
        let orphans = crate::reconcile::act::owners::to_repair(
            &self.ctx.caches,
            self.key.namespace(),
            &own_secrets,
            owner_ref,
        );
        if !orphans.is_empty() {
            let client = &self.ctx.client;
            repaired.extend(
                crate::reconcile::act::owners::repair(client, self.key, &orphans, owner_ref).await,
            );
        }
        if !repaired.is_empty() {
            self.publish(
                EventType::Normal,
                captf_api::events::OWNER_REFERENCES_REPAIRED,
                &format!("re-owned {}", repaired.join(", ")),
            )
            .await;
        }
        Ok(())
    }

    /// A backup of the serial `request` names, `status.stateBackups` listed again, and the
    /// backups restored without owner references owned by the object again (returned). A
    /// failed copy fails the pass, so the serial is not recorded as observed and the next pass
    /// tries again.
    async fn back_up(
        &self,
        request: &crate::reconcile::act::backups::Request<'_>,
        workspace: &mut WorkspaceStatus,
    ) -> Result<Vec<String>> {
        let counter = |result| {
            self.ctx
                .metrics
                .state_backups_total
                .get_or_create(&crate::metrics::KindResult {
                    kind: self.kind,
                    result,
                })
                .inc();
        };
        let (outcome, sets) =
            match crate::reconcile::act::backups::take(&self.ctx.client, request).await {
                Ok(taken) => taken,
                Err(e) => {
                    counter(crate::reconcile::act::backups::RESULT_FAILED);
                    return Err(e);
                }
            };
        if let Some(result) = outcome.result() {
            counter(result);
        }
        let (ns, name) = (self.key.namespace(), self.key.name());
        let serial = request.state.map_or(0, |s| s.serial);
        match &outcome {
            crate::reconcile::act::backups::Outcome::Skipped(reason) => {
                tracing::info!(namespace = %ns, name = %name, serial, reason = reason.as_str(), "state backup skipped");
            }
            crate::reconcile::act::backups::Outcome::Taken {
                name: backup,
                pruned,
            } => {
                tracing::info!(namespace = %ns, name = %name, serial, backup = %backup, pruned = pruned.len(), "state backed up");
            }
            crate::reconcile::act::backups::Outcome::AlreadyBackedUp { .. } => {}
        }
        let entries = crate::reconcile::act::backups::status_entries(&sets);
        workspace.state_backups = (!entries.is_empty()).then_some(entries);
        // Backups restored without owner references (a namespace restore leaves
        // status.stateBackups empty, so this listing runs once after it): owned by the object
        // again, as a plain owner so they outlive a manual state deletion.
        let names: Vec<String> = sets.iter().flat_map(|s| s.secrets.clone()).collect();
        let backup_owner = OwnerReference {
            controller: None,
            block_owner_deletion: None,
            ..request.owner.clone()
        };
        let orphans =
            crate::reconcile::act::owners::to_repair(&self.ctx.caches, ns, &names, &backup_owner);
        if orphans.is_empty() {
            return Ok(Vec::new());
        }
        let client = &self.ctx.client;
        Ok(crate::reconcile::act::owners::repair(client, self.key, &orphans, &backup_owner).await)
    }

    /// The engine's lock, while no Job runs: a dead runner's is handed to the next Job to
    /// release (`Some((lock id, pod))`), anyone else's is reported as StateLocked and never
    /// forced. `previous` are the conditions the pass started from: a lock new to them is
    /// counted, and its warning deferred (posted after the decision).
    pub fn inspect_lock(
        &self,
        state: &StateRead,
        lock: &crate::reconcile::observe::locks::Lock,
        previous: &Conditions,
        conds: &mut Conditions,
    ) -> Option<(String, String)> {
        match lock {
            crate::reconcile::observe::locks::Lock::Stale { id, pod } => {
                Some((id.clone(), pod.clone()))
            }
            crate::reconcile::observe::locks::Lock::Foreign(holder)
                if matches!(state, StateRead::Found(..)) =>
            {
                let message = format!(
                    "the state lock is {holder}: not taken by this object's Jobs, so CAPTF never forces it. Release it where it was taken (`tofu force-unlock {}` or `terraform force-unlock {}` with the same backend); until then every Job waits lockTimeoutSeconds for it and fails",
                    holder.id, holder.id
                );
                let was_locked = previous
                    .get(types::STATE_READABLE)
                    .is_some_and(|c| c.reason == reasons::STATE_LOCKED);
                conds.set(
                    types::STATE_READABLE,
                    Status::False,
                    reasons::STATE_LOCKED,
                    &message,
                    self.generation,
                    self.now,
                );
                if !was_locked {
                    self.ctx
                        .metrics
                        .state_read_errors_total
                        .get_or_create(&crate::metrics::KindReason {
                            kind: self.kind,
                            reason: "locked",
                        })
                        .inc();
                    self.defer(Write::Note {
                        type_: EventType::Warning,
                        reason: captf_api::events::STATE_LOCKED,
                        text: message,
                    });
                }
                None
            }
            _ => None,
        }
    }

    /// A pass that [`decide::hold`] stopped before it observed: its effects in order, then
    /// when to look again.
    #[allow(clippy::too_many_arguments)]
    pub async fn hold<S: serde::Serialize>(
        &self,
        hold: &decide::Hold,
        before: Option<&S>,
        status: &S,
        mut conds: Conditions,
        provisioned: bool,
        active: Option<&ObservedJob>,
        finished: &[Finished],
    ) -> Result<Action> {
        use decide::HoldEffect;

        let api: Api<K> = Api::namespaced(self.ctx.client.clone(), self.key.namespace());
        for effect in &hold.effects {
            match effect {
                HoldEffect::ExplainPausedDeletion => conds.set(types::DELETING, Status::True, reasons::DELETING, "Deletion waits until the object is unpaused (Cluster spec.paused or the cluster.x-k8s.io/paused annotation); a paused object never runs a destroy", self.generation, self.now),
                HoldEffect::ClearBlockMove => set_block_move(&api, self.object, false).await?,
                HoldEffect::PersistBlockMove => set_block_move(&api, self.object, true).await?,
                HoldEffect::ExplainUnstarted => {
                    if let Some(job) = active {
                        self.unstarted(job, &mut conds).await?;
                    }
                }
                HoldEffect::PatchStatus => {
                    conds.summarize_ready(self.key.kind(), provisioned, self.generation, self.now);
                    let active = active_job(&active.cloned());
                    let g = self.generation;
                    patch_status(&api, self.key, before, status, conds.clone(), g, active).await?;
                }
                HoldEffect::BookFinished => finish_bookkeeping(self.ctx, self.key, finished).await?,
            }
        }
        Ok(Action::requeue(
            hold.requeue.unwrap_or(self.ctx.settings.sync_period),
        ))
    }

    /// Records a write observe found due, for [`write_deferred`](Self::write_deferred).
    pub fn defer(&self, write: Write) {
        self.deferred
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(write);
    }

    /// Carries out the deferred writes in the order they were found, and stops at the first
    /// that fails (the next pass finds them due again).
    pub async fn write_deferred(&self) -> Result<()> {
        let writes = std::mem::take(
            &mut *self
                .deferred
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let (client, key, ns) = (&self.ctx.client, self.key, self.key.namespace());
        for write in &writes {
            match write {
                Write::Note {
                    type_,
                    reason,
                    text,
                } => self.publish(*type_, reason, text).await,
                Write::Own { patch, what } => {
                    let api: Api<K> = Api::namespaced(client.clone(), ns);
                    api.patch(key.name(), &PatchParams::default(), &Patch::Merge(patch))
                        .await
                        .during(|| format!("writing {what}"))?;
                }
                Write::Capi {
                    resource,
                    name,
                    patch,
                    what,
                } => {
                    let api: Api<kube::api::DynamicObject> =
                        Api::namespaced_with(client.clone(), ns, resource);
                    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
                        .await
                        .during(|| what.clone())?;
                }
                Write::ExportsMark { annotation, value } => {
                    let value = value.as_deref();
                    crate::reconcile::act::secrets::set_pool_exports_mark(
                        client, key, annotation, value,
                    )
                    .await?;
                }
                Write::AppliedExports(record) => {
                    let record = record.as_deref();
                    crate::reconcile::act::secrets::write_applied_exports(client, key, record)
                        .await?;
                }
                Write::Consume { annotation, value } => {
                    let api: Api<K> = Api::namespaced(client.clone(), ns);
                    crate::reconcile::act::approvals::consume(&api, key.name(), annotation, value)
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// An event about the object.
    pub async fn publish(&self, type_: EventType, reason: &str, note: &str) {
        publish(self.ctx, self.object, type_, reason, note).await;
    }
}

impl<K> Pass<'_, K>
where
    K: crate::reconcile::act::object::Workload
        + crate::reconcile::act::object::WithWorkspaceStatus
        + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// The Job `status.activeJob` names when it is not listed any more but one of its pods
    /// still runs: it may still write the state, so the pass holds as if it ran, and says so.
    /// The object is read live first, so a stale cache never names a Job already booked.
    pub async fn stopping(&self, jobs: &[ObservedJob]) -> Result<Option<ObservedJob>> {
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
        self.publish(
            EventType::Normal,
            captf_api::events::WAITING_FOR_JOB_POD,
            &note,
        )
        .await;
        Ok(Some(jobs::as_started(&active)))
    }

    /// Apply Jobs that disappeared while they ran (deleted by hand or by a namespace
    /// clean-up) may have applied part of their change. One is recorded on the durable inputs,
    /// so the apply runs again under a new name even with unchanged inputs; its run lease is
    /// released, and `ApplyJobSucceeded` and an event say so. `status.activeJob` names it; the
    /// object is read live first, so a stale cache never takes a finished Job for a lost one.
    /// The apply that followed it ends the record when it succeeds. Returns whether the
    /// durable inputs changed.
    pub async fn interrupted_applies(
        &self,
        jobs: &[ObservedJob],
        stopping: Option<&ObservedJob>,
        finished: &[Finished],
        conds: &mut Conditions,
    ) -> Result<bool> {
        let client = &self.ctx.client;
        let followed = finished.iter().any(|f| {
            f.op == captf_api::Operation::Apply
                && f.succeeded
                && jobs.iter().any(|j| {
                    j.name == f.name
                        && j.annotations
                            .contains_key(annotations::AFTER_INTERRUPTED_APPLY)
                })
        });
        if followed {
            crate::reconcile::act::secrets::clear_interrupted_apply(client, self.key).await?;
        }
        let named = |object: &K| {
            object
                .workspace_status()
                .and_then(|s| s.active_job.as_ref())
                .filter(|a| a.operation == captf_api::Operation::Apply)
                .map(|a| a.name.clone())
        };
        let Some(name) = named(self.object) else {
            return Ok(followed);
        };
        // Listed, or gone with its pod still running: not lost (yet).
        if jobs.iter().chain(stopping).any(|j| j.name == name) {
            return Ok(followed);
        }
        let api: Api<K> = Api::namespaced(self.ctx.client.clone(), self.key.namespace());
        let live = api
            .get_opt(self.key.name())
            .await
            .during(|| "reading the object live".to_owned())?;
        if live.as_ref().and_then(named).as_ref() != Some(&name) {
            return Ok(followed);
        }
        crate::reconcile::act::secrets::record_interrupted_apply(client, self.key, &name).await?;
        bookkeeping::release_run_lease(client, self.key, &name).await;
        conds.set(
            types::APPLY_JOB_SUCCEEDED,
            Status::False,
            reasons::APPLY_FAILED,
            &format!("Job {name}: disappeared while it ran and may have applied part of its change; an apply of the current inputs is due (guarded by the destructive-plan check)"),
            self.generation,
            self.now,
        );
        self.publish(
            EventType::Warning,
            captf_api::events::JOB_FAILED,
            &format!("Job {name} disappeared while it ran; the apply runs again"),
        )
        .await;
        Ok(true)
    }
}

/// An event about `object` (best effort: a lost event never fails the pass).
pub async fn publish<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    object: &K,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1024).collect()),
        action: reason.into(),
        secondary: None,
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
/// Conditions a fresh object shows before anything happened.
pub fn first_visit(conds: &mut Conditions, generation: Option<i64>, now: Timestamp) {
    let defaults: [(&str, Status, &str, &str); 6] = [
        (
            types::DRIFT_DETECTED,
            Status::Unknown,
            reasons::DRIFT_NOT_CHECKED,
            "no drift check yet",
        ),
        (
            types::DRIFT_JOB_SUCCEEDED,
            Status::Unknown,
            reasons::DRIFT_NOT_CHECKED,
            "no drift check yet",
        ),
        (
            types::DELETION_BLOCKED,
            Status::False,
            reasons::NOT_BLOCKED,
            "",
        ),
        (
            types::APPLY_JOB_SUCCEEDED,
            Status::Unknown,
            reasons::NO_APPLY_YET,
            "no apply has completed yet",
        ),
        (
            types::OUTPUTS_VALID,
            Status::Unknown,
            reasons::OUTPUTS_PENDING,
            "no outputs yet",
        ),
        (
            types::INFRASTRUCTURE_HEALTHY,
            Status::Unknown,
            reasons::WAITING_FOR_PROVISIONING,
            "waiting for the first apply",
        ),
    ];
    for (t, s, r, m) in defaults {
        if conds.get(t).is_none() {
            conds.set(t, s, r, m, generation, now);
        }
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
pub fn abandon_cause(conds: &Conditions, state: &StateView) -> String {
    match state {
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
/// their per-run Secrets and releases their leases.
pub async fn finish_bookkeeping(
    ctx: &Context,
    key: &ObjectKey,
    finished: &[Finished],
) -> Result<()> {
    for f in finished {
        bookkeeping::finish(&ctx.client, key, f).await?;
    }
    Ok(())
}
