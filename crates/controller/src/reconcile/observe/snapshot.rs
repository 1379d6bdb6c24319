//! The snapshot [`crate::decide`] reads, as far as every kind observes it alike; a kind adds
//! its own approvals, plan and health facts.

use captf_api::conditions::{Status, types};
use captf_api::{WorkspaceStatus, annotations};
use kube::{Resource, ResourceExt};

use crate::conditions::Conditions;
use crate::decide;
use crate::decide::restore::RestoreAsk;
use crate::decide::status::{self, RestoreRefused};
use crate::decide::{
    Approvals, Counter, Deletion, Destroyed, Effect, Lifecycle, Note, Observed, Policy, Requests,
    Snapshot, StateView,
};
use crate::error::Result;
use crate::reconcile::backups::{self, BackupSet};
use crate::reconcile::observe::jobs::{self, ObservedJob};
use crate::reconcile::observe::state::DurableInputs;
use crate::reconcile::pass::Pass;
use crate::reconcile::pass::Workload;

/// What a pass observed that every kind's snapshot holds.
pub struct Observation<'a> {
    pub jobs: &'a [ObservedJob],
    pub state: StateView,
    /// The hash of the inputs as they would render now (`None`: not rendered this pass).
    pub inputs_hash: Option<String>,
    pub durable: &'a DurableInputs,
    pub restore: Option<&'a BackupSet>,
    pub deleting: bool,
    pub workspace: &'a WorkspaceStatus,
    pub conds: &'a Conditions,
    pub policy: Policy,
}

impl<K> Pass<'_, K>
where
    K: Workload + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// The complete backup a pending `captf.io/restore-state` names (see `backup_named`), or
    /// why it cannot run; a refusal is counted once, not once per pass. `conds` are the
    /// conditions so far, which a refusal said before is in.
    pub async fn restore_request(
        &self,
        asked: RestoreAsk,
        workspace: &WorkspaceStatus,
        (conds, writes): (&Conditions, &mut Vec<Effect>),
    ) -> Result<(Option<BackupSet>, Option<RestoreRefused>)> {
        let (restore, refused) = self.backup_named(asked, workspace, writes).await?;
        let uid = self.object.meta().uid.as_deref().unwrap_or_default();
        let counted = &self.ctx.metrics.counted;
        if let Some(refusal) = &refused {
            let said = status::restore_refused(refusal);
            let before = conds
                .get(types::RESTORE_JOB_SUCCEEDED)
                .map(|c| (c.reason.as_str(), c.message.as_ref()));
            let new = before != Some((said.reason, said.message.as_str()));
            // The request is read live and the conditions may come from a cache that lags
            // the status this manager wrote: the transition record keeps a refusal counted
            // once.
            if counted.first(uid, "restore_not_found", Some(&said.message)) && new {
                writes.push(Effect::Count(Counter::Restore("not_found")));
            }
        } else {
            counted.first(uid, "restore_not_found", None);
        }
        Ok((restore, refused))
    }

    /// The complete backup of the serial `asked` names, or `None` (with why, when the request
    /// cannot be honoured).
    async fn backup_named(
        &self,
        asked: RestoreAsk,
        workspace: &WorkspaceStatus,
        writes: &mut Vec<Effect>,
    ) -> Result<(Option<BackupSet>, Option<RestoreRefused>)> {
        let serial = match asked {
            RestoreAsk::Serial(serial) => serial,
            RestoreAsk::NotASerial(value) => {
                return Ok((None, Some(RestoreRefused::NotASerial(value))));
            }
            // The RestoreFailed condition says how to try that serial again.
            RestoreAsk::Nothing | RestoreAsk::Release | RestoreAsk::FailedBefore(_) => {
                return Ok((None, None));
            }
        };
        let sets = self.backups(self.own_lineage(workspace), writes).await?;
        Ok(match crate::reconcile::backups::restorable(&sets, serial) {
            Some(set) => (Some(set.clone()), None),
            None => {
                let kept = sets
                    .iter()
                    .filter(|s| s.complete())
                    .map(|s| s.serial.to_string())
                    .collect();
                let serial = serial.to_string();
                (None, Some(RestoreRefused::NoBackup { serial, kept }))
            }
        })
    }

    /// The object's backup sets that count ([`backups::trusted`]), newest first, with their data
    /// checked; those that do not are named in a `ForeignBackupIgnored` event, pushed to
    /// `writes`. `lineage` is the object's own, when known.
    pub async fn backups(
        &self,
        lineage: Option<&str>,
        writes: &mut Vec<Effect>,
    ) -> Result<Vec<BackupSet>> {
        let whose = backups::Whose {
            key: self.key,
            uid: self.object.meta().uid.as_deref().unwrap_or_default(),
            lineage,
        };
        let listed = backups::list(&self.ctx.client, &self.ctx.state_reads, &whose).await?;
        writes.extend(self.ignored_backups(&listed).map(Effect::Event));
        Ok(listed.sets)
    }

    /// The event naming the sets a listing ignored (`ForeignBackupIgnored`), if any.
    pub fn ignored_backups(&self, listed: &backups::Listed) -> Option<Note> {
        if listed.ignored.is_empty() {
            return None;
        }
        let names = listed.ignored.join(", ");
        let (ns, name) = (self.key.namespace(), self.key.name());
        tracing::warn!(namespace = ns, name, sets = %names, "backup sets under the object's label that it does not own are ignored");
        let note = format!(
            "Secret set(s) {names} carry the backup label of {} {name} but are not its backups (another owner, or no owner and another lineage): they are never restored, pruned or listed. Delete them",
            self.kind
        );
        Some(Note::warning(
            captf_api::events::FOREIGN_BACKUP_IGNORED,
            note,
        ))
    }

    /// The object's lineage as recorded in its status (restored with it by `captf dr import`).
    /// The object's namespace is being deleted (as the cache shows it): nothing can be created
    /// in it.
    pub fn namespace_terminating(&self) -> bool {
        let namespace = kube::runtime::reflector::ObjectRef::new(self.key.namespace());
        self.ctx
            .caches
            .namespaces
            .get(&namespace)
            .is_some_and(|ns| ns.metadata.deletion_timestamp.is_some())
    }

    fn own_lineage<'w>(&self, workspace: &'w WorkspaceStatus) -> Option<&'w str> {
        workspace.state_lineage.as_deref()
    }

    /// The snapshot of `seen`, with no approvals, no plan and no health facts yet.
    pub fn snapshot(&self, seen: Observation<'_>) -> Snapshot {
        let history = jobs::history(seen.jobs);
        let lifecycle = if seen.deleting {
            let destroy = if history.destroy.failures > 0 {
                Destroyed::Failed
            } else if history
                .destroy
                .last_success
                .is_some_and(|d| history.apply.last_success.is_none_or(|a| d > a))
            {
                Destroyed::Yes
            } else {
                Destroyed::No
            };
            Lifecycle::Deleting(Deletion {
                // The cluster's adapter knows its members.
                dependents: false,
                destroy,
                abandon: abandon_requested(self.object),
                inputs_lost: !seen.durable.renders_destroy(),
                namespace_terminating: self.namespace_terminating(),
                credentials_lost: [types::IDENTITY_ALLOWED, types::CREDENTIALS_MIRRORED]
                    .iter()
                    .any(|t| {
                        seen.conds
                            .get(t)
                            .is_some_and(|c| c.status.as_str() == Status::False.as_str())
                    }),
            })
        } else {
            Lifecycle::Live
        };
        let observed = Observed {
            drift_found: drift_found(seen.conds, &history),
            failed_remediations: jobs::failed_remediations(seen.jobs, history.drift.last_success),
            apply_health_definite: true,
            last_refresh: seen.workspace.last_refresh.as_ref().map(|t| t.0),
            last_drift_check: seen.workspace.last_drift_check.as_ref().map(|t| t.0),
            ..Default::default()
        };
        Snapshot {
            kind: self.key.kind(),
            uid: self.object.uid().unwrap_or_default(),
            created_at: self
                .object
                .meta()
                .creation_timestamp
                .as_ref()
                .map_or(self.now, |t| t.0),
            lifecycle,
            state: seen.state,
            inputs_hash: seen.inputs_hash,
            interrupted_apply: seen.durable.interrupted_apply().is_some(),
            restore_requested: seen.restore.is_some(),
            history,
            policy: seen.policy,
            approvals: Approvals::default(),
            plan: None,
            observed,
            pinned_image: seen.durable.pinned_image(),
            exports_guard: None,
            requests: requests(self.object.annotations(), seen.jobs),
        }
    }
}

/// The `captf.io/retry` and `captf.io/replan` tokens on the object that no Job carries yet.
/// An empty value asks for nothing (a tool that clears by setting ""); a token over
/// [`annotations::MAX_REQUEST_TOKEN`] bytes, which the webhook refuses, is not honoured.
pub fn requests(
    object: &std::collections::BTreeMap<String, String>,
    jobs: &[ObservedJob],
) -> Requests {
    let pending = |asked: &str, answered: &str| {
        object
            .get(asked)
            .filter(|token| {
                !token.trim().is_empty() && token.len() <= annotations::MAX_REQUEST_TOKEN
            })
            .filter(|token| {
                !jobs
                    .iter()
                    .any(|j| j.annotations.get(answered) == Some(*token))
            })
            .cloned()
    };
    Requests {
        retry: pending(annotations::RETRY, annotations::RETRY_TOKEN),
        replan: pending(annotations::REPLAN, annotations::REPLAN_TOKEN),
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use captf_api::{Operation, annotations};

    use super::requests;
    use crate::decide::Requests;
    use crate::reconcile::observe::jobs::{ObservedJob, Phase};

    fn job(annotations: &[(&str, &str)]) -> ObservedJob {
        ObservedJob {
            job: Default::default(),
            name: "j".into(),
            op: Operation::Apply,
            attempt: 1,
            phase: Phase::Active,
            finished_at: None,
            created_at: None,
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn a_token_is_pending_until_a_job_carries_it() {
        let object = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let long = "x".repeat(annotations::MAX_REQUEST_TOKEN + 1);
        type Row = (
            &'static str,
            BTreeMap<String, String>,
            Vec<ObservedJob>,
            Requests,
        );
        let rows: Vec<Row> = vec![
            ("nothing asked", object(&[]), vec![], Requests::default()),
            (
                "both asked, no Job yet",
                object(&[(annotations::RETRY, "a"), (annotations::REPLAN, "b")]),
                vec![job(&[])],
                Requests {
                    retry: Some("a".into()),
                    replan: Some("b".into()),
                },
            ),
            (
                "a Job answered the retry",
                object(&[(annotations::RETRY, "a"), (annotations::REPLAN, "b")]),
                vec![job(&[]), job(&[(annotations::RETRY_TOKEN, "a")])],
                Requests {
                    retry: None,
                    replan: Some("b".into()),
                },
            ),
            (
                "a Job answered an older token: the new one is pending",
                object(&[(annotations::RETRY, "c")]),
                vec![job(&[(annotations::RETRY_TOKEN, "a")])],
                Requests {
                    retry: Some("c".into()),
                    replan: None,
                },
            ),
            (
                "the retry token does not answer a replan",
                object(&[(annotations::REPLAN, "a")]),
                vec![job(&[(annotations::RETRY_TOKEN, "a")])],
                Requests {
                    retry: None,
                    replan: Some("a".into()),
                },
            ),
            (
                "empty and oversized tokens ask nothing",
                object(&[(annotations::RETRY, " "), (annotations::REPLAN, &long)]),
                vec![],
                Requests::default(),
            ),
        ];
        for (name, object, jobs, want) in rows {
            assert_eq!(requests(&object, &jobs), want, "{name}");
        }
    }
}
