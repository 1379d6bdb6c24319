//! The one interpreter of [`Effect`]: every write a pass makes is a value that this carries
//! out, in the order given, and it stops at the first that fails (the next pass finds what is
//! left due again). Where a pass has come to, and so what the steps may use, is its [`Scene`].

use captf_api::{ActiveJob, annotations};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use crate::decide::{self, CapiObject, Counter, Decision, Effect, Gauge, Note};
use crate::error::{Error, KubeContext, Result};
use crate::reconcile::act::Acted;
use crate::reconcile::act::keep::Keep;
use crate::reconcile::act::launch::Starting;
use crate::reconcile::act::object::{add_finalizer, set_block_move};
use crate::reconcile::act::{approvals, secrets};
use crate::reconcile::adapter::{Adapter, Seen, Work, provisioned};
use crate::reconcile::backups::BackupSet;
use crate::reconcile::finished::bookkeeping::{self, finish_bookkeeping};
use crate::reconcile::observe::jobs::ObservedJob;
use crate::reconcile::pass::Pass;

/// Where a pass has come to when its effects are carried out.
pub enum Scene<'s> {
    /// Nothing observed yet: the entry (a gate, the finalizer) and the records of finished
    /// Jobs.
    Entry,
    /// Stopped before it observed, while the Job `active` runs or the object is paused.
    Held { active: Option<&'s ObservedJob> },
    /// Observed and decided; `restore` is the backup a requested restore reads.
    Decided {
        seen: &'s Seen,
        decision: &'s Decision,
        restore: Option<&'s BackupSet>,
    },
}

/// Carries out `effects` in order, for the object whose pass has come to `scene`; returns
/// what a started Job leaves for the requeue.
pub async fn carry_out<A: Adapter>(
    pass: &Pass<'_, A>,
    effects: Vec<Effect>,
    w: &mut Work<A>,
    scene: Scene<'_>,
) -> Result<Acted> {
    let (object, ctx, key) = (pass.object, pass.ctx, pass.key);
    let (client, ns) = (&ctx.client, key.namespace());
    let api: Api<A> = Api::namespaced(client.clone(), ns);
    let mut acted = Acted::default();
    let mut creds = None;
    // The Job status names as active: the one started now, or the one that runs (not a
    // stuck one being deleted).
    let mut active = match &scene {
        Scene::Held { active } if !effects.contains(&Effect::DeleteStuckJob) => active_job(*active),
        _ => None,
    };
    // What an effect leads to is carried out next, before the rest.
    let mut queue = std::collections::VecDeque::from(effects);
    while let Some(effect) = queue.pop_front() {
        match effect {
            Effect::AddFinalizer => add_finalizer(&api, object, A::WORKLOAD).await?,
            Effect::BlockMove(on) => set_block_move(&api, object, on).await?,
            Effect::PatchObject { patch, what } => {
                api.patch(key.name(), &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .during(|| format!("writing {what}"))?;
            }
            Effect::Consume {
                annotation,
                value,
                announce,
            } => {
                let consumed = approvals::consume(&api, key.name(), annotation, &value).await?;
                if let Some(note) = announce.filter(|_| consumed) {
                    pass.tell(&note).await;
                }
            }
            Effect::Event(note) => pass.tell(&note).await,
            Effect::PatchCapi {
                object: capi,
                name,
                patch,
                what,
            } => {
                let resource = match capi {
                    CapiObject::Machine => crate::capi::machine_resource(),
                    CapiObject::MachinePool => crate::capi::machine_pool_resource(),
                };
                let api: Api<kube::api::DynamicObject> =
                    Api::namespaced_with(client.clone(), ns, &resource);
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .during(|| what.clone())?;
            }
            Effect::AdoptState(adoption) => {
                let owner_ref = crate::reconcile::adapter::owner_reference(object)?;
                secrets::adopt_state(client, key, &owner_ref, &adoption).await?;
            }
            Effect::MarkInputs { annotation, value } => {
                secrets::mark_durable(client, key, annotation, value.as_deref()).await?;
            }
            Effect::AppliedExports(record) => {
                secrets::write_applied_exports(client, key, record.as_deref()).await?;
            }
            Effect::ReleaseLeases(job) => bookkeeping::release_run_lease(client, key, &job).await,
            Effect::Count(counter) => count(pass, counter),
            Effect::Gauge(gauge) => measure(pass, gauge),
            Effect::RecordLineage(lineage) => {
                secrets::record_lineage(client, key, &lineage).await?;
            }
            Effect::ExplainUnstarted => {
                if let Scene::Held { active: Some(job) } = &scene {
                    pass.unstarted(job, &mut w.conds).await?;
                }
            }
            Effect::DeleteStuckJob => {
                if let Scene::Held { active: Some(job) } = &scene {
                    pass.delete_stuck(job).await?;
                }
            }
            Effect::EnsureCredentials => {
                let seen = decided(&scene, "EnsureCredentials")?.0;
                // Nothing can be created in a namespace being deleted, and no Job starts
                // there (decide holds the deletion): a mirror written now would only fail
                // the pass.
                if !(w.deleting && pass.namespace_terminating()) {
                    let policy = object.job_policy(w.deps.as_ref());
                    let account = &policy.service_account_name;
                    let identity = seen.identity.as_deref();
                    let ensured =
                        pass.ensure_credentials(identity, account, &seen.owner_ref, &mut w.conds);
                    creds = Some(ensured.await?);
                }
            }
            Effect::KeepState => {
                let seen = decided(&scene, "KeepState")?.0;
                let keep = Keep {
                    state: &seen.state,
                    jobs: &w.jobs,
                    owner_ref: &seen.owner_ref,
                    cluster_name: &seen.cluster_name,
                    pending_restore: object
                        .annotations()
                        .get(annotations::RESTORE_STATE)
                        .and_then(|v| v.parse().ok()),
                    deleting: w.deleting,
                    observed_serial: seen.observed_serial,
                };
                pass.keep_state(&keep, A::workspace_mut(&mut w.status))
                    .await?;
            }
            Effect::ExplainWait => {
                let decision = decided(&scene, "ExplainWait")?.1;
                A::wait(pass, decision.reason, w);
            }
            Effect::StartJob(start) => {
                let (seen, decision, restore) = decided(&scene, "StartJob")?;
                let mut conds = std::mem::take(&mut w.conds);
                let starting = starting(pass, w, seen, creds.as_ref(), &start, restore);
                let launched = pass.launch(decision.requeue, &starting, &mut conds).await;
                w.conds = conds;
                acted = launched?;
                let mut next = acted
                    .active
                    .as_ref()
                    .map_or_else(Vec::new, |job| announce_start(pass, job, &start, decision));
                next.extend(A::launched(&start, &acted));
                for effect in next.into_iter().rev() {
                    queue.push_front(effect);
                }
                active = acted.active.clone();
            }
            Effect::CleanUp => {
                let uid = object.uid().unwrap_or_default();
                secrets::cleanup(client, key, &uid).await?;
            }
            Effect::PatchStatus => {
                let provisioned = provisioned(A::workspace(&w.status));
                // Announced as written: Ready summarised from the rest.
                let mut conds = w.said(pass);
                conds.summarize_ready(key.kind(), provisioned, pass.generation, pass.now);
                let before = object.status().and_then(A::conditions);
                pass.announce_transitions(before.map_or(&[], Vec::as_slice), &conds)
                    .await;
                let active = active.clone();
                pass.write_status(object.status(), &w.status, conds, provisioned, active)
                    .await?;
            }
            Effect::BookFinished => {
                // Leftover per-run Secrets are cleared once no Job runs.
                let jobs: &[ObservedJob] = match scene {
                    Scene::Decided { .. } => &w.jobs,
                    _ => &[],
                };
                finish_bookkeeping(ctx, key, &w.finished, jobs).await?;
            }
            Effect::PruneJobs => {
                let policy = object.job_policy(w.deps.as_ref());
                pass.prune(&w.jobs, &policy).await?;
            }
            Effect::RemoveFinalizer => pass.remove_finalizer().await?,
            Effect::AnnounceRelease => {
                let (seen, decision, _) = decided(&scene, "AnnounceRelease")?;
                let inputs_lost = !w.durable.renders_destroy();
                pass.announce_release(decision.reason, &w.said(pass), &seen.view, inputs_lost)
                    .await;
            }
        }
    }
    Ok(acted)
}

/// What a step that only a decided pass takes reads: the observation, the decision and the
/// backup a restore reads. Any other scene is a bug in the effects a decision listed.
fn decided<'s>(
    scene: &Scene<'s>,
    effect: &str,
) -> Result<(&'s Seen, &'s Decision, Option<&'s BackupSet>)> {
    match scene {
        Scene::Decided {
            seen,
            decision,
            restore,
        } => Ok((seen, decision, *restore)),
        _ => Err(Error::Panicked(format!(
            "effect {effect} listed before the pass observed and decided"
        ))),
    }
}

/// The decided Job's start, with what the pass observed.
fn starting<'s, A: Adapter>(
    pass: &'s Pass<'_, A>,
    w: &'s Work<A>,
    seen: &'s Seen,
    creds: Option<&'s crate::reconcile::act::credentials::Outcome>,
    start: &'s decide::Start,
    restore: Option<&'s BackupSet>,
) -> Starting<'s> {
    let object = pass.object;
    let launch = crate::reconcile::act::launch::Launch {
        cluster_name: seen.cluster_name.clone(),
        max_active_jobs: object.max_active_jobs(w.deps.as_ref()),
        policy: object.job_policy(w.deps.as_ref()),
        image: &object.spec().source.image,
        pull_policy: object.spec().source.image_pull_policy,
        owner_ref: &seen.owner_ref,
        last_active: object
            .status()
            .and_then(|s| A::workspace(s).active_job.as_ref()),
        provisioned: provisioned(A::workspace(&w.status)),
        approval_hash: seen
            .rendering
            .as_ref()
            .and_then(|r| r.approval_hash.clone()),
        exports: seen.rendering.as_ref().and_then(|r| r.exports.clone()),
        expect_state: crate::reconcile::observe::lineage::expected(&seen.state),
    };
    Starting {
        launch,
        jobs: &w.jobs,
        start,
        rendered: seen.rendering.as_ref().map(|r| &r.rendered),
        creds,
        interrupted: w.durable.interrupted_apply(),
        restore,
        force_unlock: seen.force_unlock.as_ref(),
    }
}

/// `JobCreated` for the Job started, and `DriftRemediationStarted` when it remediates drift.
fn announce_start<A: Adapter>(
    pass: &Pass<'_, A>,
    job: &ActiveJob,
    start: &decide::Start,
    decision: &Decision,
) -> Vec<Effect> {
    let image = match &start.image {
        decide::ModuleImage::Pinned(pin) => pin.as_str(),
        _ => pass.object.spec().source.image.as_str(),
    };
    let about = |reason, message| {
        Effect::Event(Note {
            job: Some(job.name.clone()),
            ..Note::normal(reason, message)
        })
    };
    let mut events = vec![about(
        captf_api::events::JOB_CREATED,
        format!(
            "Created {} Job {} (attempt {}, image {image}): {}",
            job.operation.as_str(),
            job.name,
            job.attempt,
            decision.reason
        ),
    )];
    if start.remediation {
        events.push(about(
            captf_api::events::DRIFT_REMEDIATION_STARTED,
            format!(
                "Job {} applies the module again over the drift found",
                job.name
            ),
        ));
    }
    events
}

/// One more of `counter`, for the pass's kind.
fn count<A: Adapter>(pass: &Pass<'_, A>, counter: Counter) {
    let metrics = &pass.ctx.metrics;
    let kind = pass.kind;
    match counter {
        Counter::Restore(result) => {
            let series = crate::metrics::KindResult { kind, result };
            metrics.state_restores_total.get_or_create(&series).inc();
        }
        Counter::Approval(result) => {
            let series = crate::metrics::KindResult { kind, result };
            metrics.plan_approvals_total.get_or_create(&series).inc();
        }
        Counter::StateReadError(reason) => {
            let series = crate::metrics::KindReason { kind, reason };
            metrics.state_read_errors_total.get_or_create(&series).inc();
        }
        Counter::Decision { op, reason } => {
            let reason = reason.as_str();
            let series = crate::metrics::Decision { kind, op, reason };
            metrics.decisions_total.get_or_create(&series).inc();
        }
        Counter::Remediation(action) => {
            let series = crate::metrics::Action { action };
            metrics
                .remediation_requests_total
                .get_or_create(&series)
                .inc();
        }
    }
}

/// The object's `gauge` set.
fn measure<A: Adapter>(pass: &Pass<'_, A>, gauge: Gauge) {
    let metrics = &pass.ctx.metrics;
    let object = crate::metrics::Object {
        kind: pass.kind,
        namespace: pass.key.namespace().to_owned(),
        name: pass.key.name().to_owned(),
    };
    match gauge {
        Gauge::StateResources(n) => {
            metrics.state_resources.get_or_create(&object).set(n);
        }
        Gauge::StateBytes(n) => {
            metrics.state_bytes.get_or_create(&object).set(n);
        }
        Gauge::InputsBytes(n) => {
            metrics.inputs_bytes.get_or_create(&object).set(n);
        }
        Gauge::Unstarted { op, waited } => pass.note_unstarted(op, waited),
    }
}

/// The Job status names as active.
fn active_job(job: Option<&ObservedJob>) -> Option<ActiveJob> {
    job.map(|j| ActiveJob {
        name: j.name.clone(),
        operation: j.op,
        attempt: i32::try_from(j.attempt.max(1)).unwrap_or(1),
        start_time: j.job.status.as_ref().and_then(|s| s.start_time.clone()),
    })
}
