//! Keeping the state (`Effect::KeepState`): the lineage recorded where it survives a lost
//! state, an adoption used up, a backup of each new serial, and the object's Secrets re-owned.

use captf_api::WorkspaceStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::runtime::events::EventType;

use crate::error::Result;
use crate::reconcile::observe::jobs::{ObservedJob, Phase};
use crate::reconcile::observe::state::StateRead;
use crate::reconcile::observe::state::state_serial;
use crate::reconcile::pass::Pass;
use crate::reconcile::pass::Workload;

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
    K: Workload + Resource<Scope = kube::core::NamespaceResourceScope>,
{
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
            let request = crate::reconcile::backups::Request {
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
        } else if let StateRead::Found(s, _) = state {
            // Backups restored without owner references under a status that already lists
            // their serial (`captf dr import`): no backup is due, so they are listed here, once
            // for each set of ownerless names the cache shows.
            repaired.extend(
                self.re_own_backups(&s.lineage, owner_ref, workspace)
                    .await?,
            );
        }
        // Owner references lost in a restore or a move: re-owned here, unpaused and with no Job
        // running. State chunks are never touched while a Job may write them: neither while one
        // runs (the pass holds before it gets here) nor while one holds the run lease, created
        // or about to be (an engine's get-then-update of a chunk would meet a conflict).
        let mut own_secrets = vec![self.key.durable_inputs_secret(), self.key.plan_key_secret()];
        let caches = &self.ctx.caches;
        let ns = self.key.namespace();
        let base = self.key.state_secret();
        let chunks: Vec<String> = match state {
            StateRead::Found(_, chunks) => chunks.iter().map(|c| c.name.clone()).collect(),
            _ => vec![base.clone()],
        };
        let chunk_work = !crate::reconcile::act::owners::to_repair(caches, ns, &chunks, owner_ref)
            .is_empty()
            || caches.secrets.protected(ns, &base) == Some(false);
        let chunks_free = !chunk_work
            || crate::reconcile::leases::run_holder(&self.ctx.client, self.key)
                .await?
                .is_none();
        if chunks_free && matches!(state, StateRead::Found(..)) {
            own_secrets.extend(chunks);
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
        // The last record of what the module created, kept through an operator's slip
        // (act::protection): the state's base chunk, the durable inputs and the backups.
        let mut own = vec![self.key.durable_inputs_secret()];
        if chunks_free {
            own.push(base);
        }
        let mut unprotected = crate::reconcile::protection::to_protect(caches, ns, &own);
        let backups = format!("captf-state-backup-{}-", self.key.state_suffix());
        unprotected.extend(
            caches
                .secrets
                .unprotected_owned(ns, &owner_ref.uid, &backups),
        );
        if !unprotected.is_empty() {
            let client = &self.ctx.client;
            crate::reconcile::protection::protect(client, ns, &unprotected).await;
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
        request: &crate::reconcile::backups::Request<'_>,
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
        let (outcome, listed) =
            match crate::reconcile::backups::take(&self.ctx.client, &self.ctx.state_reads, request)
                .await
            {
                Ok(taken) => taken,
                Err(e) => {
                    counter(crate::reconcile::backups::RESULT_FAILED);
                    return Err(e);
                }
            };
        if let Some(result) = outcome.result() {
            counter(result);
        }
        let (ns, name) = (self.key.namespace(), self.key.name());
        let serial = request.state.map_or(0, |s| s.serial);
        match &outcome {
            crate::reconcile::backups::Outcome::Skipped(reason) => {
                tracing::info!(namespace = %ns, name = %name, serial, reason = reason.as_str(), "state backup skipped");
            }
            crate::reconcile::backups::Outcome::Taken {
                name: backup,
                pruned,
            } => {
                tracing::info!(namespace = %ns, name = %name, serial, backup = %backup, pruned = pruned.len(), "state backed up");
                let note = format!(
                    "serial {serial} backed up as {backup}{}",
                    if pruned.is_empty() {
                        String::new()
                    } else {
                        format!("; {} older backup Secret(s) pruned", pruned.len())
                    }
                );
                let reason = captf_api::events::STATE_BACKED_UP;
                let secret = self.related("v1", "Secret", backup);
                let normal = kube::runtime::events::EventType::Normal;
                self.publish_related(normal, reason, &note, secret).await;
            }
            crate::reconcile::backups::Outcome::AlreadyBackedUp { .. } => {}
        }
        Ok(self.adopt_listed(listed, request.owner, workspace).await)
    }

    /// The object's backups listed (`state` its lineage) and the ownerless ones among them
    /// re-owned, when the cache shows ownerless Secrets under its backup names that were not
    /// listed for yet (a tenant's ownerless look-alike costs one listing, not one a pass).
    async fn re_own_backups(
        &self,
        lineage: &str,
        owner: &OwnerReference,
        workspace: &mut WorkspaceStatus,
    ) -> Result<Vec<String>> {
        let prefix = format!("captf-state-backup-{}-", self.key.state_suffix());
        let ownerless = self
            .ctx
            .caches
            .secrets
            .ownerless(self.key.namespace(), &prefix);
        let seen = (!ownerless.is_empty()).then(|| ownerless.join(","));
        let uid = owner.uid.as_str();
        let new = self
            .ctx
            .metrics
            .counted
            .first(uid, "backups_ownerless", seen.as_deref());
        if !new {
            return Ok(Vec::new());
        }
        let whose = crate::reconcile::backups::Whose {
            key: self.key,
            uid,
            lineage: Some(lineage),
        };
        let listed =
            crate::reconcile::backups::list(&self.ctx.client, &self.ctx.state_reads, &whose)
                .await?;
        Ok(self.adopt_listed(listed, owner, workspace).await)
    }

    /// `status.stateBackups` from `listed`, its ignored sets named in an event, and the
    /// backups restored without owner references owned by the object again (returned).
    async fn adopt_listed(
        &self,
        listed: crate::reconcile::backups::Listed,
        owner: &OwnerReference,
        workspace: &mut WorkspaceStatus,
    ) -> Vec<String> {
        let ns = self.key.namespace();
        if let Some(note) = self.ignored_backups(&listed) {
            self.tell(&note).await;
        }
        let sets = listed.sets;
        let entries = crate::reconcile::backups::status_entries(&sets);
        workspace.state_backups = (!entries.is_empty()).then_some(entries);
        // Backups restored without owner references (a namespace restore, `captf dr import`):
        // owned by the object again, as a plain owner so they outlive a manual state deletion.
        let names: Vec<String> = sets.iter().flat_map(|s| s.secrets.clone()).collect();
        let backup_owner = OwnerReference {
            controller: None,
            block_owner_deletion: None,
            ..owner.clone()
        };
        let orphans =
            crate::reconcile::act::owners::to_repair(&self.ctx.caches, ns, &names, &backup_owner);
        if orphans.is_empty() {
            return Vec::new();
        }
        let client = &self.ctx.client;
        crate::reconcile::act::owners::repair(client, self.key, &orphans, &backup_owner).await
    }
}
