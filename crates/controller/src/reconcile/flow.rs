//! The one reconcile flow of the workload kinds: the preamble, the bookkeeping of finished
//! Jobs, observe, [`decide`], act, and one status patch. A kind is an [`Adapter`]: what it
//! belongs to, what it renders, what its outputs write and what it adds to the snapshot. Every
//! step that every kind takes is written here, once.

use std::sync::Arc;
use std::time::Duration;

use captf_api::conditions::{Status, reasons, types};
use captf_api::names::ObjectKey;
use captf_api::{Condition, Operation, WorkspaceStatus, annotations};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;

use crate::conditions::Conditions;
use crate::decide::restore::{LastRestore, RestoreAsk};
use crate::decide::{self, Action as Decided, Effect, Gauge};
use crate::error::{Error, KubeContext, Result};
use crate::reconcile::Context;
use crate::reconcile::act::launch::GATE_REQUEUE;
use crate::reconcile::adapter::{Adapter, Seen, Work, owner_reference, provisioned};
use crate::reconcile::finished::bookkeeping;
use crate::reconcile::finished::status::Source;
use crate::reconcile::interpret::{Scene, carry_out};
use crate::reconcile::observe::jobs::Phase;
use crate::reconcile::observe::outputs::Reading;
use crate::reconcile::observe::owner::Hold;
use crate::reconcile::observe::snapshot::Observation;
use crate::reconcile::observe::state::{self, StateRead};
use crate::reconcile::observe::unstarted;
use crate::reconcile::pass::Pass;

/// One pass over one workload object.
pub async fn run<A: Adapter>(object: Arc<A>, ctx: Arc<Context>) -> Result<Action> {
    let object = object.as_ref();
    let kind = A::WORKLOAD.kind();
    let namespace = object
        .namespace()
        .ok_or_else(|| Error::InvalidObject(format!("{kind} without a namespace")))?;
    let key = ObjectKey::new(&namespace, A::WORKLOAD, object.name_any())
        .map_err(|e| Error::InvalidObject(e.to_string()))?;
    let pass = Pass {
        ctx: &ctx,
        object,
        key: &key,
        kind,
        generation: object.meta().generation,
        now: Timestamp::now(),
    };
    let deleting = object.meta().deletion_timestamp.is_some();
    if let Some(effects) = pass.externally_managed(deleting) {
        carry_out(
            &pass,
            effects,
            &mut Work::of(object, deleting),
            Scene::Entry,
        )
        .await?;
        return Ok(Action::await_change());
    }
    match begin(&pass, deleting).await? {
        Begun::Done(action) => Ok(action),
        Begun::Go(work, inputs) => go(&pass, work, inputs.as_ref()).await,
    }
}

/// How the preamble ended.
enum Begun<A: Adapter> {
    /// Gated, paused, a Job running or the finalizer just added: nothing more this pass.
    Done(Action),
    Go(Box<Work<A>>, Option<A::Inputs>),
}

/// The entry ([`decide::admit`]): the first reads, owner and dependencies, and the finalizer.
/// Ends the pass while it is gated or held for the cluster's Job, or once the finalizer is added.
async fn enter<A: Adapter>(pass: &Pass<'_, A>, deleting: bool) -> Result<Entered<A>> {
    let object = pass.object;
    let mut work = Work::of(object, deleting);
    let defaults = decide::status::first_visit(|t| work.conds.get(t).is_some());
    work.conds.say(defaults, pass.generation, pass.now);
    let (jobs, owner, durable, said) = pass.first_reads::<A::Owner>(A::WITHOUT_OWNER).await?;
    (work.jobs, work.durable) = (jobs, durable);
    let found = match owner {
        Ok(owner) => {
            let provisioned = provisioned(A::workspace(&work.status));
            A::dependencies(pass, owner, provisioned, deleting).await?
        }
        Err(gate) => Err(Hold::Gate(gate)),
    };
    let entry = decide::Entry {
        deleting,
        dependencies: match &found {
            Ok(_) => decide::Dependencies::Ready,
            Err(Hold::Gate(_)) => decide::Dependencies::Missing,
            Err(Hold::ClusterBusy { .. }) => decide::Dependencies::ClusterBusy,
        },
        finalizer: object
            .finalizers()
            .iter()
            .any(|f| f == A::WORKLOAD.finalizer()),
    };
    carry_out(pass, said, &mut work, Scene::Entry).await?;
    let admit = decide::admit(entry);
    if admit == decide::Admit::ClusterBusy {
        let (cluster, job) = found.err().and_then(Hold::busy).unwrap_or_default();
        tracing::debug!(namespace = pass.key.namespace(), name = pass.key.name(), %cluster, %job, "the cluster's Job may be writing its state; looking again soon");
        // One never provisioned says so; a provisioned one keeps its conditions, so its Ready
        // does not flap at every refresh of the cluster, and writes nothing.
        if !provisioned(A::workspace(&work.status)) {
            work.frame.cluster_busy = Some((cluster, job));
            carry_out(pass, vec![Effect::PatchStatus], &mut work, Scene::Entry).await?;
        }
        return Ok(Entered::Done(Action::requeue(
            crate::schedule::ACTIVE_JOB_REQUEUE,
        )));
    }
    let found = found.map_err(|hold| match hold {
        Hold::Gate(gate) => gate,
        Hold::ClusterBusy { cluster, job } => (
            Status::Unknown,
            captf_api::conditions::reasons::WAITING_FOR_CLUSTER_OPERATION,
            format!("TerraformCluster {cluster}: its Job {job} may be writing its state"),
        ),
    });
    let found = match found {
        Ok(found) => {
            work.frame.dependencies = Some(decide::status::Dependencies::Ready);
            Some(found)
        }
        Err((status, reason, message)) => {
            let missing = decide::status::Dependencies::Missing(status, reason, message);
            work.frame.dependencies = Some(missing);
            None
        }
    };
    let done = match admit {
        decide::Admit::Go | decide::Admit::ClusterBusy => None,
        // A live object whose dependencies are not ready: status written, nothing else done.
        decide::Admit::Gated => Some((Effect::PatchStatus, GATE_REQUEUE)),
        decide::Admit::AddFinalizer => Some((Effect::AddFinalizer, Duration::from_millis(100))),
    };
    if let Some((effect, requeue)) = done {
        carry_out(pass, vec![effect], &mut work, Scene::Entry).await?;
        return Ok(Entered::Done(Action::requeue(requeue)));
    }
    // Deleting without its owner: destroy from the durable inputs.
    let (deps, inputs) = found.map_or((None, None), |(deps, inputs)| (Some(deps), inputs));
    work.deps = deps;
    Ok(Entered::In(Box::new(work), inputs))
}

/// How the entry ended.
enum Entered<A: Adapter> {
    /// Gated, held for the cluster's Job, or the finalizer just added.
    Done(Action),
    /// Admitted: the pass so far, and what a live object renders from.
    In(Box<Work<A>>, Option<A::Inputs>),
}

/// The preamble: the entry, pause, and every finished Job recorded. Ends the pass while it
/// is gated, paused or a Job runs.
async fn begin<A: Adapter>(pass: &Pass<'_, A>, deleting: bool) -> Result<Begun<A>> {
    let (object, ctx, key) = (pass.object, pass.ctx, pass.key);
    let (mut work, inputs) = match enter(pass, deleting).await? {
        Entered::Done(action) => return Ok(Begun::Done(action)),
        Entered::In(work, inputs) => (work, inputs),
    };
    let w = work.as_mut();
    let paused = object.annotations().contains_key(annotations::PAUSED)
        || w.deps.as_ref().is_some_and(A::paused_by);
    w.frame.paused = Some(paused);

    let finished = bookkeeping::collect(&ctx.client, key.namespace(), &w.jobs).await?;
    let stopping = match pass.stopping(&w.jobs).await? {
        Some((job, note)) => {
            carry_out(pass, vec![Effect::Event(note)], w, Scene::Entry).await?;
            Some(job)
        }
        None => None,
    };
    let vanished = pass.vanished_apply(&w.jobs, stopping.as_ref()).await?;
    let interruptions = decide::book::interruptions(&finished, vanished.as_deref());
    // The durable inputs were read before the finished Jobs were recorded: read again if an
    // interrupted apply or the kind's record of one changed them.
    let mut reread = interruptions
        .effects
        .iter()
        .any(Effect::changes_durable_inputs);
    let effects = pass.booked(interruptions, &mut w.conds, A::workspace_mut(&mut w.status));
    carry_out(pass, effects, w, Scene::Entry).await?;
    let pinned = w.durable.pinned_image();
    for f in &finished {
        let source = Source {
            spec_image: &object.spec().source.image,
            pinned: pinned.as_deref(),
        };
        let workspace = A::workspace_mut(&mut w.status);
        let effects = pass.record(f, &mut w.conds, workspace, source);
        carry_out(pass, effects, w, Scene::Entry).await?;
        // A successful apply re-pinned the image on the durable inputs.
        reread |= f.op == Operation::Apply && f.succeeded;
        let effects = A::record(pass, f, w).await?;
        reread |= effects.iter().any(Effect::changes_durable_inputs);
        carry_out(pass, effects, w, Scene::Entry).await?;
    }
    w.finished = finished;
    if reread {
        w.durable = state::durable_inputs(&ctx.client, key).await?;
    }
    let active = w
        .jobs
        .iter()
        .find(|j| j.phase == Phase::Active)
        .or(stopping.as_ref())
        .cloned();
    let preamble = decide::Preamble {
        paused,
        deleting,
        job: match &active {
            None => decide::JobRun::None,
            Some(job) if crate::reconcile::observe::image_pull::no_ready_pod(job) => {
                // Only a listed Job can be stuck: a stopping one is gone already.
                let listed = stopping.as_ref().is_none_or(|s| s.name != job.name);
                let seen = if listed {
                    unstarted::of_unready(&ctx.client, key.namespace(), job, pass.now).await?
                } else {
                    None
                };
                match seen {
                    Some(seen) if decide::stuck(&seen) => {
                        w.frame.stuck = Some((job.name.clone(), job.op));
                        decide::JobRun::Stuck
                    }
                    _ => decide::JobRun::Unready,
                }
            }
            Some(_) => decide::JobRun::Ready,
        },
    };
    // No Job runs: none waits to start either.
    let unstarted = active.is_none().then_some(Effect::Gauge(Gauge::Unstarted {
        op: None,
        waited: None,
    }));
    if let Some(hold) = decide::hold(preamble) {
        let mut effects = vec![pass.count_hold(&hold)];
        effects.extend(unstarted);
        effects.extend(hold.effects);
        let scene = Scene::Held {
            active: active.as_ref(),
        };
        carry_out(pass, effects, w, scene).await?;
        let requeue = hold.requeue.unwrap_or(ctx.settings.sync_period);
        return Ok(Begun::Done(Action::requeue(requeue)));
    }
    w.writes.extend(unstarted);
    Ok(Begun::Go(work, inputs))
}

/// No Job runs and the object is not paused: observe, decide, act, and patch status once.
async fn go<A: Adapter>(
    pass: &Pass<'_, A>,
    mut work: Box<Work<A>>,
    inputs: Option<&A::Inputs>,
) -> Result<Action> {
    let (object, ctx, key) = (pass.object, pass.ctx, pass.key);
    let w = work.as_mut();
    let seen = observe(pass, w, inputs).await?;
    let rendered = seen.rendering.as_ref().map(|r| &r.rendered);
    let job_policy = object.job_policy(w.deps.as_ref());
    let asked = restore_asked(pass, w).await?;
    if asked == RestoreAsk::Release {
        A::workspace_mut(&mut w.status).last_restored_serial = None;
    }
    let (restore, refused) = pass
        .restore_request(asked, A::workspace(&w.status), (&w.conds, &mut w.writes))
        .await?;
    w.frame.restore = refused;
    let mut snapshot = pass.snapshot(Observation {
        jobs: &w.jobs,
        state: seen.view.clone(),
        inputs_hash: rendered.map(|r| r.inputs_hash.clone()),
        durable: &w.durable,
        restore: restore.as_ref(),
        deleting: w.deleting,
        workspace: A::workspace(&w.status),
        conds: &w.conds,
        policy: object.policy(w.deps.as_ref(), ctx, &job_policy),
    });
    snapshot.observed.health_pending = seen.health.pending;
    snapshot.observed.apply_health_definite = seen.health.definite;
    object.complete(&mut snapshot, w);
    let decision = decide::decide(&snapshot, pass.now);
    let counted = pass.count_decision(&decision);
    if decision.reason == decide::Reason::DeletionHeld {
        w.frame.held = Some(pass.held_deletion(&seen.view));
    }
    let unreported = w
        .conds
        .get(types::APPLY_JOB_SUCCEEDED)
        .is_some_and(|c| c.reason == reasons::NO_APPLY_YET);
    let applied = decide::status::applied_per_state(&snapshot, &decision, unreported);
    w.conds.say(applied, pass.generation, pass.now);

    A::workspace_mut(&mut w.status).state_secret_suffix = Some(key.state_suffix());
    let mut effects = vec![counted];
    effects.extend(decision.effects(std::mem::take(&mut w.writes)));
    let scene = Scene::Decided {
        seen: &seen,
        decision: &decision,
        restore: restore.as_ref(),
    };
    let acted = carry_out(pass, effects, w, scene).await?;
    Ok(match decision.action {
        Decided::RemoveFinalizer => Action::await_change(),
        _ => pass.requeue(acted.requeue.or(decision.requeue)),
    })
}

/// What `captf.io/restore-state` asks (spec §11.8: the annotation and the restore recorded
/// last, read live), so a stale cache neither runs a failed serial again nor misses a request
/// set again after a success.
async fn restore_asked<A: Adapter>(pass: &Pass<'_, A>, w: &Work<A>) -> Result<RestoreAsk> {
    // Nothing asked nor recorded in the cache: no read. A request set since brings a watch
    // event, and with it the pass that reads it.
    let cached = pass
        .object
        .annotations()
        .contains_key(annotations::RESTORE_STATE)
        || A::workspace(&w.status).last_restored_serial.is_some();
    if !cached {
        return Ok(RestoreAsk::Nothing);
    }
    let api: Api<A> = Api::namespaced(pass.ctx.client.clone(), pass.key.namespace());
    let Some(live) = api
        .get_opt(pass.key.name())
        .await
        .during(|| "reading the object live".to_owned())?
    else {
        return Ok(RestoreAsk::Nothing);
    };
    let annotation = live.annotations().get(annotations::RESTORE_STATE);
    let last = |workspace: &WorkspaceStatus, condition: Option<&Condition>| LastRestore {
        serial: workspace.last_restored_serial,
        failed: condition.is_some_and(|c| c.reason == reasons::RESTORE_FAILED),
    };
    // A restore booked by this pass is in its status, not yet in the live one.
    let last = if w.finished.iter().any(|f| f.op == Operation::Restore) {
        last(
            A::workspace(&w.status),
            w.conds.get(types::RESTORE_JOB_SUCCEEDED),
        )
    } else {
        live.status().map_or_else(LastRestore::default, |status| {
            let condition = A::conditions(status)
                .and_then(|c| c.iter().find(|c| c.type_ == types::RESTORE_JOB_SUCCEEDED));
            last(A::workspace(status), condition)
        })
    };
    Ok(decide::restore::ask(annotation.map(String::as_str), last))
}

/// What every live pass reads once no Job runs: state, lock and outputs (the
/// kind's own reads first), and what the Jobs would render now.
async fn observe<A: Adapter>(
    pass: &Pass<'_, A>,
    w: &mut Work<A>,
    inputs: Option<&A::Inputs>,
) -> Result<Seen> {
    let (object, ctx) = (pass.object, pass.ctx);
    A::observe(pass, w).await?;
    let owner_ref = owner_reference(object)?;
    let identity = object.identity(w.deps.as_ref(), ctx);
    let observed = pass.observe().await?;
    let mut state = observed.state;
    let (view, readable) = pass
        .state_view(
            &mut state,
            &w.durable,
            provisioned(A::workspace(&w.status)),
            &w.finished,
            A::workspace_mut(&mut w.status),
            (&w.conds, &mut w.writes),
        )
        .await?;
    w.frame.state = Some(readable);
    let cluster_name = object.cluster_name(w.deps.as_ref());
    // Before the outputs record the serial read now.
    let observed_serial = A::workspace(&w.status).observed_state_serial;
    let previous = Conditions::from(object.status().and_then(A::conditions));
    let lock = &observed.lock;
    let (force_unlock, locked) = pass.inspect_lock(&state, lock, &previous, &mut w.writes);
    w.frame.locked = locked;
    let health = match &state {
        StateRead::Found(s, _) => A::outputs(pass, s, w).await?,
        _ => Reading::default(),
    };
    let rendering = A::render(pass, inputs, &view, w).await?;
    if let Some(r) = rendering.as_ref().map(|r| &r.rendered) {
        let bytes = i64::try_from(r.main_tf_json.len() + r.tfvars_json.len()).unwrap_or(i64::MAX);
        w.writes.push(Effect::Gauge(Gauge::InputsBytes(bytes)));
    }
    Ok(Seen {
        identity,
        state,
        view,
        force_unlock,
        health,
        rendering,
        owner_ref,
        cluster_name,
        observed_serial,
    })
}
