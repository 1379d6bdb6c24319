//! The TerraformMachinePool pass: the shared flow, plus what is a pool's own. Its owner is a
//! CAPI MachinePool that names it back; it is found in its cluster by its cluster-name label;
//! its inputs are rendered every pass, so any change re-applies it, and an apply that renders
//! a change of the cluster's exports is guarded against deleting anything. Its outputs give
//! `spec.providerIDList` and `status.replicas`; with the autoscaler's annotations the module
//! owns the replica count and the pool writes it back to the MachinePool.

use std::sync::Arc;
use std::time::Duration;

use captf_api::Operation;
use captf_api::conditions::{Status, reasons, types};
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_api::{
    Initialization, MachinePoolInstance, TerraformMachinePool, TerraformMachinePoolStatus,
    annotations, labels,
};
use captf_contract::{Autoscaling, MachinePoolOutputs, Role, RoleInputs};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::act::Acted;
use super::bookkeeping::Finished;
use super::jobs::{self, ObservedJob, Phase};
use super::launch::{Launch, RenderedExports};
use super::object::{add_finalizer, set_block_move};
use super::pass::{Pass, first_visit};
use super::pool_exports::{self, BlockedApply, Facts, Pending, PendingFate, Render, Verdict};
use super::snapshot::Observation;
use super::state::{self, DurableInputs, StateRead};
use super::verify_owner::{self, Gate};
use super::{Context, approvals, bookkeeping, member, outputs, secrets};
use crate::capi;
use crate::conditions::Conditions;
use crate::decide::{self, Action as Decided, Policy, StateView};
use crate::error::{Error, KubeContext, Result};
use crate::job::{EffectivePolicy, PolicyLayers};

const KIND: &str = "TerraformMachinePool";
/// Built-in `membershipRefreshIntervalSeconds`.
const DEFAULT_MEMBERSHIP_INTERVAL: Duration = Duration::from_secs(60);

/// What a pool belongs to, found from its verified MachinePool.
struct Dependencies {
    owner: capi::MachinePool,
    of: member::ClusterOf,
}

/// The inputs a live pool renders now, and what its exports guard needs to decide.
struct Prepared {
    inputs: captf_contract::MachinePoolInputs,
    variables: captf_contract::Variables,
    current: captf_contract::Rendered,
    /// Hash of the exports rendered now.
    exports_hash: String,
    /// The approval hash of the inputs rendered now (without `bootstrap_data`).
    approval_hash: String,
}

/// What the pool's Jobs render once the exports guard decided.
struct Rendering {
    rendered: captf_contract::Rendered,
    exports: RenderedExports,
    /// Set when the apply is guarded: an approval names this hash.
    approval_hash: Option<String>,
}

/// One pass over a TerraformMachinePool.
pub async fn reconcile(pool: Arc<TerraformMachinePool>, ctx: Arc<Context>) -> Result<Action> {
    let namespace = pool
        .namespace()
        .ok_or_else(|| Error::InvalidObject("TerraformMachinePool without a namespace".into()))?;
    let key = ObjectKey::new(&namespace, WorkloadKind::MachinePool, pool.name_any())
        .map_err(|e| Error::InvalidObject(e.to_string()))?;
    let client = ctx.client.clone();
    let api: Api<TerraformMachinePool> = Api::namespaced(client.clone(), &namespace);
    let now = Timestamp::now();
    let generation = pool.metadata.generation;
    let deleting = pool.metadata.deletion_timestamp.is_some();
    let pass = Pass {
        ctx: &ctx,
        object: pool.as_ref(),
        key: &key,
        kind: KIND,
        generation,
        now,
    };
    if let Some(done) = pass.externally_managed(deleting).await? {
        return Ok(done);
    }

    let mut conds = Conditions::from(pool.status.as_ref().and_then(|s| s.conditions.as_ref()));
    let mut status = pool.status.clone().unwrap_or_default();
    first_visit(&mut conds, generation, now);
    let jobs = jobs::list(&client, &key).await?;
    let active = jobs.iter().find(|j| j.phase == Phase::Active).cloned();

    let owner = verify_owner::owner::<capi::MachinePool, _>(
        &ctx,
        pool.as_ref(),
        (Status::False, reasons::WAITING_FOR_OWNER_MACHINE_POOL),
    )
    .await?;
    let found = match owner {
        Ok(owner) => dependencies(&ctx, &pool, &namespace, owner).await?,
        Err(gate) => Err(gate),
    };
    let durable = state::durable_inputs(&client, &key).await?;
    let found = match found {
        Ok(deps) if !deleting => match render(&ctx, &pool, &namespace, &deps).await? {
            Ok(prepared) => Ok((Some(deps), Some(prepared))),
            Err(gate) => Err(gate),
        },
        Ok(deps) => Ok((Some(deps), None)),
        Err(gate) => Err(gate),
    };
    let (deps, prepared) = match pass.dependencies(found, &mut conds) {
        Some(found) => found,
        None if !deleting => {
            return pass
                .gate(pool.status.as_ref(), &status, conds, provisioned(&status))
                .await;
        }
        // Deleting without its MachinePool: destroy from the durable inputs.
        None => (None, None),
    };
    let finalizer = WorkloadKind::MachinePool.finalizer();
    if !deleting && !pool.finalizers().iter().any(|f| f == finalizer) {
        add_finalizer(&api, &pool, WorkloadKind::MachinePool).await?;
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    let paused = pool.annotations().contains_key(annotations::PAUSED)
        || deps.as_ref().is_some_and(|d| d.of.cluster.paused());
    pass.lifecycle(&mut conds, deleting, paused);

    let finished = bookkeeping::collect(&client, &namespace, &jobs).await?;
    // The durable inputs were read before the finished Jobs were recorded: read again if an
    // interrupted apply or one of the exports guard's records changed.
    let mut reread = pass
        .interrupted_applies(&jobs, &finished, &mut conds)
        .await?;
    let owner_ref = pool
        .controller_owner_ref(&())
        .ok_or_else(|| Error::InvalidObject("TerraformMachinePool without a UID".into()))?;
    for f in &finished {
        pass.record(
            f,
            &mut conds,
            &mut status.workspace,
            &owner_ref,
            &pool.spec.workspace.source.image,
        )
        .await?;
        reread |= record_exports(&client, &key, f, &durable).await?;
    }
    let mut durable = if reread {
        state::durable_inputs(&client, &key).await?
    } else {
        durable
    };
    if paused || active.is_some() {
        return pass
            .hold(
                pool.status.as_ref(),
                &status,
                conds,
                provisioned(&status),
                active.as_ref(),
                &finished,
                paused,
                deleting,
            )
            .await;
    }
    set_block_move(&api, &pool, false).await?;

    let infra = deps.as_ref().map(|d| &d.of.infra);
    let defaults = infra.and_then(|c| c.spec.defaults.as_ref());
    let identity =
        crate::machine::inherited_identity(pool.spec.workspace.identity_ref.as_ref(), infra);
    let creds = pass
        .credentials(identity.as_deref(), &owner_ref, &mut conds)
        .await?;
    let (state, state_view) = pass
        .observe_state(&durable, provisioned(&status), &mut conds)
        .await?;
    let cluster_name = pool
        .labels()
        .get(labels::CLUSTER_NAME)
        .cloned()
        .unwrap_or_default();
    pass.keep_state(
        &state,
        &jobs,
        &mut status.workspace,
        &owner_ref,
        &cluster_name,
        pool.annotations()
            .get(annotations::RESTORE_STATE)
            .and_then(|v| v.parse().ok()),
        deleting,
    )
    .await?;
    let previous = Conditions::from(pool.status.as_ref().and_then(|s| s.conditions.as_ref()));
    let force_unlock = pass.inspect_lock(&state, &previous, &mut conds).await?;
    let health = match &state {
        StateRead::Found(s, _) => read_outputs(&pass, &api, s, &mut conds, &mut status).await?,
        _ => outputs::Reading::default(),
    };
    if let Some(deps) = deps.as_ref().filter(|_| !deleting) {
        autoscale(&pass, &deps.owner, &status, &mut conds).await?;
    }

    let mut verdict = None;
    let rendering = match &prepared {
        Some(prepared) => {
            let (rendering, v) = exports_guard(
                &pass,
                &api,
                prepared,
                &mut durable,
                &state_view,
                &jobs,
                &mut conds,
            )
            .await?;
            verdict = Some(v);
            Some(rendering)
        }
        None => None,
    };
    let rendered = rendering.as_ref().map(|r| &r.rendered);
    pass.measure_inputs(rendered);
    let job_policy = EffectivePolicy::resolve(&PolicyLayers::for_member(
        pool.spec.workspace.jobs.as_ref(),
        infra,
    ));
    let drift_interval = crate::machine::inherited_drift_interval(
        pool.spec.drift.as_ref().and_then(|d| d.interval_seconds),
        infra,
        ctx.args.drift_default_interval,
        crate::machine::ZeroInterval::Ignored,
    );
    let drift_action = pool
        .spec
        .drift
        .as_ref()
        .and_then(|d| d.action)
        .or_else(|| {
            defaults
                .and_then(|d| d.drift.as_ref())
                .and_then(|d| d.action)
        })
        .or_else(|| {
            infra
                .and_then(|c| c.spec.drift.as_ref())
                .and_then(|d| d.action)
        })
        .unwrap_or_default();
    let membership = pool
        .spec
        .membership_refresh_interval_seconds
        .or_else(|| defaults.and_then(|d| d.membership_refresh_interval_seconds))
        .filter(|s| *s > 0)
        .map_or(DEFAULT_MEMBERSHIP_INTERVAL, |s| {
            Duration::from_secs(u64::try_from(s).unwrap_or(60))
        });
    let restore = pass.restore_request(&status.workspace, &mut conds).await?;
    let mut snapshot = pass.snapshot(Observation {
        jobs: &jobs,
        state: state_view.clone(),
        inputs_hash: rendered.map(|r| r.inputs_hash.clone()),
        durable: &durable,
        restore: restore.as_ref(),
        deleting,
        workspace: &status.workspace,
        conds: &conds,
        policy: Policy {
            apply_policy: captf_api::ApplyPolicy::Automatic,
            drift_interval,
            drift_action,
            failed_history_limit: job_policy.failed_jobs_history_limit,
            refresh_after_apply: true,
            membership_interval: Some(membership),
            health_check_interval: None,
        },
    });
    snapshot.approvals.destructive = pool
        .annotations()
        .get(annotations::APPROVE_DESTRUCTIVE_PLAN)
        .cloned();
    snapshot.observed.health_pending = health.pending;
    snapshot.observed.apply_health_definite = health.definite;
    snapshot.observed.membership_converging = status.replicas.is_some_and(|r| {
        usize::try_from(r).ok() != Some(pool.spec.provider_id_list.as_ref().map_or(0, Vec::len))
    });
    let guard = newest_blocked(&jobs, &finished);
    let blocked = match (&verdict, &prepared) {
        (Some(v), Some(p)) => pool_exports::blocked_apply(
            v,
            guard.as_deref(),
            &p.approval_hash,
            v.pending == PendingFate::Keep
                && durable
                    .annotations
                    .contains_key(annotations::PENDING_CLUSTER_OUTPUTS),
        ),
        _ => BlockedApply::Leave,
    };
    if blocked == BlockedApply::Hide {
        snapshot.history.newest_apply = None;
    }
    let mut decision = decide::decide(&snapshot, now);
    if let Decided::Start(start) = &mut decision.action
        && start.op == Operation::Apply
    {
        if blocked == BlockedApply::Wait {
            decision = decide::Decision {
                action: Decided::Wait,
                reason: decide::Reason::DestructivePlanBlocked,
                requeue: Some(crate::schedule::APPROVAL_REQUEUE),
            };
        } else if let (Some(v), Some(p)) = (&verdict, &prepared)
            && v.render == (Render::Guarded { approved: true })
        {
            // The approval names the approval hash, not a plan: a bootstrap rotation since the
            // block does not invalidate it.
            start.allow_destructive = Some(p.approval_hash.clone());
        }
    }
    pass.count_decision(&decision);
    let acted = match &decision.action {
        Decided::Wait if decision.reason == decide::Reason::DeletionHeld => {
            pass.hold_deletion(&mut conds, &state_view);
            Acted::default()
        }
        Decided::Wait => Acted::default(),
        Decided::RemoveFinalizer => {
            return pass
                .release(decision.reason, &conds, &state_view, &finished)
                .await;
        }
        Decided::Start(start) => {
            let launch = Launch {
                cluster_name: cluster_name.clone(),
                max_active_jobs: infra.and_then(|c| c.spec.max_active_jobs),
                policy: job_policy.clone(),
                image: &pool.spec.workspace.source.image,
                pull_policy: pool.spec.workspace.source.image_pull_policy,
                owner_ref: &owner_ref,
                last_active: pool
                    .status
                    .as_ref()
                    .and_then(|s| s.workspace.active_job.as_ref()),
                provisioned: provisioned(&status),
                approval_hash: rendering.as_ref().and_then(|r| r.approval_hash.clone()),
                exports_hash: rendering.as_ref().map(|r| r.exports.clone()),
            };
            pass.launch(
                decision.requeue,
                &creds,
                &launch,
                &jobs,
                start,
                rendered,
                durable.interrupted_apply(),
                restore.as_ref(),
                force_unlock.as_ref(),
                &mut conds,
            )
            .await?
        }
    };
    let acted = Acted {
        requeue: acted.requeue.or(decision.requeue),
        ..acted
    };
    status.workspace.state_secret_suffix = Some(key.state_suffix());
    pass.finish(
        pool.status.as_ref(),
        &status,
        conds,
        provisioned(&status),
        acted,
        &finished,
        &jobs,
        &job_policy,
    )
    .await
}

/// The MachinePool's Cluster, by the pool's own cluster-name label (CAPI sets it; the
/// MachinePool's `spec.clusterName` is not used), and its TerraformCluster.
async fn dependencies(
    ctx: &Context,
    pool: &TerraformMachinePool,
    namespace: &str,
    owner: capi::MachinePool,
) -> Result<std::result::Result<Dependencies, Gate>> {
    let Some(name) = pool.labels().get(labels::CLUSTER_NAME) else {
        return Ok(Err((
            Status::Unknown,
            reasons::WAITING_FOR_OWNER,
            "waiting for the cluster.x-k8s.io/cluster-name label (CAPI sets it from the MachinePool)"
                .to_owned(),
        )));
    };
    Ok(member::cluster_of(ctx, namespace, name)
        .await?
        .map(|of| Dependencies { owner, of }))
}

/// The pool's inputs as they render now, and their approval hash; the exports guard decides
/// later, once this pass's finished Jobs are recorded.
async fn render(
    ctx: &Context,
    pool: &TerraformMachinePool,
    namespace: &str,
    deps: &Dependencies,
) -> Result<std::result::Result<Prepared, Gate>> {
    let handoff = match member::handoff(ctx, namespace, &deps.of.infra).await? {
        Ok(h) => h,
        Err(gate) => return Ok(Err(gate)),
    };
    let owner = format!(
        "MachinePool {}",
        deps.owner.metadata.name.as_deref().unwrap_or_default()
    );
    let secret = deps
        .owner
        .spec
        .template
        .spec
        .bootstrap
        .data_secret_name
        .as_deref();
    let bootstrap = match member::bootstrap(ctx, namespace, secret, &owner).await? {
        Ok(b) => b,
        Err(gate) => return Ok(Err(gate)),
    };
    let scaling = scaling(&deps.owner).unwrap_or(Autoscaling {
        enabled: false,
        min: 0,
        max: 0,
    });
    let exports_hash = member::exports_hash(&handoff.exports);
    let inputs = crate::inputs::machinepool_inputs(
        pool,
        &deps.owner,
        &bootstrap,
        handoff.exports,
        handoff.failure_domains,
        scaling,
    );
    let image = &pool.spec.workspace.source.image;
    let workspace = &pool.spec.workspace;
    let variables =
        match super::variables::resolve(ctx, namespace, Role::MachinePool, workspace).await? {
            Ok(variables) => variables,
            Err(gate) => return Ok(Err(gate)),
        };
    let role_inputs = RoleInputs::MachinePool(inputs.clone());
    let current = captf_contract::render(Role::MachinePool, image, &role_inputs, &variables)?;
    let approval_hash = captf_contract::approval_hash(&role_inputs, image, &variables)?;
    Ok(Ok(Prepared {
        inputs,
        variables,
        current,
        exports_hash,
        approval_hash,
    }))
}

/// Autoscaling from the MachinePool's annotations (see [`crate::inputs::autoscaling`]).
fn scaling(owner: &capi::MachinePool) -> std::result::Result<Autoscaling, String> {
    crate::inputs::autoscaling(
        owner
            .metadata
            .annotations
            .as_ref()
            .unwrap_or(&Default::default()),
    )
}

/// Outputs from state into spec and status: providerIDList, replicas, instances, health, and
/// the provisioned latch (`status.ready` too, which CAPI's MachinePool controller reads).
async fn read_outputs(
    pass: &Pass<'_, TerraformMachinePool>,
    api: &Api<TerraformMachinePool>,
    state: &captf_state::DecodedState,
    conds: &mut Conditions,
    status: &mut TerraformMachinePoolStatus,
) -> Result<outputs::Reading> {
    let (pool, g, now) = (pass.object, pass.generation, pass.now);
    status.workspace.observed_state_serial = i64::try_from(state.serial).ok().filter(|s| *s >= 1);
    let decoded: Option<MachinePoolOutputs> =
        match outputs::decode(Role::MachinePool, state, conds, g, now) {
            Some(captf_contract::RoleOutputs::MachinePool(p)) => Some(p),
            _ => None,
        };
    let reason = outputs::health(&decoded.as_ref().map(|p| p.health.clone()), conds, g, now);
    let health = outputs::Reading::from_reason(reason);
    let Some(p) = decoded else {
        return Ok(health);
    };
    if p.instances_truncated {
        conds.set(
            types::OUTPUTS_VALID,
            Status::True,
            reasons::INSTANCES_TRUNCATED,
            "the module reported more than 1000 instances; status.instances lists the first 1000",
            g,
            now,
        );
    }
    status.replicas = Some(p.replicas);
    status.instances = Some(
        p.instances
            .iter()
            .map(|i| -> Result<MachinePoolInstance> {
                Ok(MachinePoolInstance {
                    provider_id: i.provider_id.clone(),
                    instance_id: i.instance_id.clone(),
                    addresses: Some(serde_json::from_value(serde_json::to_value(&i.addresses)?)?)
                        .filter(|a: &Vec<_>| !a.is_empty()),
                    failure_domain: i.failure_domain.clone(),
                    state: i
                        .state
                        .map(|s| serde_json::from_value(serde_json::to_value(s)?))
                        .transpose()?,
                })
            })
            .collect::<Result<Vec<_>>>()?,
    )
    .filter(|i| !i.is_empty());
    let list = Some(p.provider_id_list.clone());
    if pool.spec.provider_id_list != list || pool.spec.provider_id != p.provider_id {
        api.patch(
            &pool.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {
                "providerIDList": p.provider_id_list,
                "providerID": p.provider_id,
            }})),
        )
        .await
        .during(|| "writing spec.providerIDList".to_owned())?;
    }
    if state.inputs_hash.is_some() && !health.pending && !provisioned(status) {
        status.workspace.initialization = Some(Initialization {
            provisioned: Some(true),
        });
        status.ready = Some(true);
    }
    Ok(health)
}

/// `AutoscalingActive`, and while the module owns the replica count, the observed count
/// written back to `MachinePool.spec.replicas` under CAPTF's `replicas-managed-by` claim. A
/// claim someone else holds is left alone.
async fn autoscale(
    pass: &Pass<'_, TerraformMachinePool>,
    owner: &capi::MachinePool,
    status: &TerraformMachinePoolStatus,
    conds: &mut Conditions,
) -> Result<()> {
    let (g, now) = (pass.generation, pass.now);
    let name = owner.metadata.name.clone().unwrap_or_default();
    let claim = owner
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::REPLICAS_MANAGED_BY))
        .cloned();
    let machine_pools: Api<DynamicObject> = Api::namespaced_with(
        pass.ctx.client.clone(),
        pass.key.namespace(),
        &capi::machine_pool_resource(),
    );
    let ours = claim.as_deref() == Some(annotations::REPLICAS_MANAGED_BY_CAPTF);
    let scaling = match scaling(owner) {
        Ok(s) if s.enabled => s,
        result => {
            let (reason, message) = match result {
                Err(problem) => (
                    reasons::AUTOSCALING_ANNOTATIONS_INVALID,
                    format!("{problem}; the pool applies MachinePool {name}'s spec.replicas"),
                ),
                Ok(_) => (reasons::AUTOSCALING_DISABLED, String::new()),
            };
            conds.set(
                types::AUTOSCALING_ACTIVE,
                Status::False,
                reason,
                &message,
                g,
                now,
            );
            if ours {
                // Autoscaling ended: give the claim back.
                let patch = serde_json::json!({"metadata": {"annotations": {annotations::REPLICAS_MANAGED_BY: null}}});
                machine_pools
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .during(|| format!("releasing MachinePool {name}'s replicas"))?;
            }
            return Ok(());
        }
    };
    if let Some(other) = claim.as_deref().filter(|_| !ours) {
        let message = format!(
            "MachinePool {name} is annotated {}={other}: its replicas are left to that controller",
            annotations::REPLICAS_MANAGED_BY
        );
        if conds
            .get(types::AUTOSCALING_ACTIVE)
            .is_none_or(|c| c.reason != reasons::REPLICAS_MANAGED_EXTERNALLY)
        {
            pass.publish(
                EventType::Warning,
                reasons::REPLICAS_MANAGED_EXTERNALLY,
                &message,
            )
            .await;
        }
        conds.set(
            types::AUTOSCALING_ACTIVE,
            Status::False,
            reasons::REPLICAS_MANAGED_EXTERNALLY,
            &message,
            g,
            now,
        );
        return Ok(());
    }
    conds.set(
        types::AUTOSCALING_ACTIVE,
        Status::True,
        reasons::REPLICAS_MANAGED_BY_MODULE,
        &format!(
            "the module scales between {} and {}; the observed count is written to MachinePool {name}",
            scaling.min, scaling.max
        ),
        g,
        now,
    );
    let observed = status.replicas;
    if ours && (observed.is_none() || observed == owner.spec.replicas) {
        return Ok(());
    }
    let mut patch = serde_json::json!({"metadata": {"annotations": {
        annotations::REPLICAS_MANAGED_BY: annotations::REPLICAS_MANAGED_BY_CAPTF,
    }}});
    if let Some(replicas) = observed.filter(|r| Some(*r) != owner.spec.replicas) {
        patch["spec"] = serde_json::json!({"replicas": replicas});
        pass.publish(
            EventType::Normal,
            captf_api::events::REPLICAS_WRITTEN_BACK,
            &format!(
                "MachinePool {name} spec.replicas: {} -> {replicas} (observed by the module)",
                owner.spec.replicas.unwrap_or(1)
            ),
        )
        .await;
    }
    machine_pools
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .during(|| format!("writing MachinePool {name}'s replicas"))?;
    Ok(())
}

/// The hash the newest finished apply was blocked for, if the guard stopped it. The markers of
/// a Job recorded this pass are not on the listed Job yet: `finished` has them.
fn newest_blocked(jobs: &[ObservedJob], finished: &[Finished]) -> Option<String> {
    let newest = jobs
        .iter()
        .rev()
        .find(|j| j.op == Operation::Apply && j.phase != Phase::Active)?;
    let marker = newest
        .annotations
        .get(annotations::DESTRUCTIVE_PLAN_BLOCKED)
        .or_else(|| {
            finished
                .iter()
                .find(|f| f.name == newest.name)
                .and_then(|f| f.markers.get(annotations::DESTRUCTIVE_PLAN_BLOCKED))
        })?;
    Some(
        newest
            .annotations
            .get(annotations::APPROVAL_HASH)
            .unwrap_or(marker)
            .clone(),
    )
}

/// After a finished apply, the exports guard's records on the durable inputs: a success
/// records the exports values it rendered and ends a partly applied change; a blocked exports
/// change becomes the pending change; a guarded apply that failed otherwise may have applied
/// part of its change. `true` when something was written.
async fn record_exports(
    client: &kube::Client,
    key: &ObjectKey,
    f: &Finished,
    durable: &DurableInputs,
) -> Result<bool> {
    if f.op != Operation::Apply {
        return Ok(false);
    }
    let exports = f.annotations.get(annotations::CLUSTER_OUTPUTS_HASH);
    if f.succeeded {
        // The apply recorded its exports hash and may have used up the approval: the guard
        // reads the durable inputs again either way.
        if durable
            .annotations
            .contains_key(annotations::PARTIAL_CLUSTER_OUTPUTS)
        {
            secrets::set_pool_exports_mark(client, key, annotations::PARTIAL_CLUSTER_OUTPUTS, None)
                .await?;
        }
        let Some(hash) = exports else {
            return Ok(true);
        };
        let recorded = durable
            .applied_exports
            .as_deref()
            .and_then(|r| serde_json::from_slice::<serde_json::Value>(r).ok())
            .map(|v| member::exports_hash(&v));
        if recorded.as_deref() == Some(hash.as_str()) {
            return Ok(true);
        }
        let record = applied_exports_of(client, key, f, hash, durable)
            .await?
            .and_then(|v| captf_contract::canonicalize_exports(&v).ok())
            .filter(|r| pool_exports::fits(durable.rendered_size, r.len()));
        // Stale values never stay: without the new ones the record is dropped (unrecorded).
        if record.is_some() || durable.applied_exports.is_some() {
            secrets::write_applied_exports(client, key, record.as_deref()).await?;
        }
        return Ok(true);
    }
    // Only an apply guarded for an exports change carries an approval hash.
    let Some(approval) = f.annotations.get(annotations::APPROVAL_HASH) else {
        return Ok(false);
    };
    let exports_hash = exports.cloned().unwrap_or_default();
    if f.markers
        .contains_key(annotations::DESTRUCTIVE_PLAN_BLOCKED)
    {
        let pending = Pending {
            job: f.name.clone(),
            approval_hash: approval.clone(),
            exports_hash,
            resources: super::record::destructive_resources(f),
        };
        secrets::set_pool_exports_mark(
            client,
            key,
            annotations::PENDING_CLUSTER_OUTPUTS,
            Some(&pending.to_annotation()),
        )
        .await?;
        return Ok(true);
    }
    if f.markers.contains_key(annotations::PLAN_CHANGED) {
        return Ok(false);
    }
    // It got past the guard and failed: part of the change may be applied.
    let partial = pool_exports::Partial {
        job: f.name.clone(),
        exports_hash,
    };
    secrets::set_pool_exports_mark(
        client,
        key,
        annotations::PARTIAL_CLUSTER_OUTPUTS,
        Some(&partial.to_annotation()),
    )
    .await?;
    Ok(true)
}

/// The exports values a successful apply rendered, checked against the hash it recorded: from
/// its per-run Secret (immutable, lives as long as the Job), else from the durable inputs if
/// they still hold the same exports.
async fn applied_exports_of(
    client: &kube::Client,
    key: &ObjectKey,
    f: &Finished,
    hash: &str,
    durable: &DurableInputs,
) -> Result<Option<serde_json::Value>> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), key.namespace());
    let name = captf_api::names::per_run_secret(&f.name);
    let per_run = secrets
        .get_opt(&name)
        .await
        .during(|| format!("reading the per-run Secret {name}"))?
        .and_then(|s| s.data)
        .and_then(|d| d.get(captf_contract::render::TFVARS_FILE).cloned())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b.0).ok());
    Ok([per_run.as_ref(), durable.tfvars.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|t| t.get(CLUSTER_OUTPUTS_VAR))
        .find(|v| member::exports_hash(v) == hash)
        .cloned())
}

/// The tfvars key of the cluster's exports.
const CLUSTER_OUTPUTS_VAR: &str = "captf_cluster_outputs";

/// Decides the exports guard for this pass and carries out what it says about the pending
/// change: the record proven for a pool applied before it existed, the budget, a lost Job's
/// partial change, a withdrawn or superseded change and its approval. Returns what the Jobs
/// render.
async fn exports_guard(
    pass: &Pass<'_, TerraformMachinePool>,
    api: &Api<TerraformMachinePool>,
    prepared: &Prepared,
    durable: &mut DurableInputs,
    state_view: &StateView,
    jobs: &[ObservedJob],
    conds: &mut Conditions,
) -> Result<(Rendering, Verdict)> {
    let (client, key) = (&pass.ctx.client, pass.key);
    const APPLIED: &str = annotations::APPLIED_CLUSTER_OUTPUTS_HASH;
    // A pool applied before the exports were recorded: the exports rendered now are proven
    // applied when the inputs rendered now are those the state was written from.
    if !durable.annotations.contains_key(APPLIED)
        && durable.applied()
        && matches!(state_view, StateView::Found { inputs_hash: Some(h) } if *h == prepared.current.inputs_hash)
    {
        secrets::set_pool_exports_mark(client, key, APPLIED, Some(&prepared.exports_hash)).await?;
        durable
            .annotations
            .insert(APPLIED.into(), prepared.exports_hash.clone());
    }
    let applied = durable.annotations.get(APPLIED).cloned();
    let parse = |bytes: &[u8]| serde_json::from_slice::<serde_json::Value>(bytes).ok();
    let mut record = durable
        .applied_exports
        .as_deref()
        .and_then(parse)
        .filter(|v| applied.as_deref() == Some(member::exports_hash(v).as_str()));
    let room = prepared.current.size().max(durable.rendered_size);
    if record.is_none()
        && let Some(applied) = &applied
    {
        // Values that hash to the applied hash are the applied values: the exports rendered
        // now, or those of the durable inputs' last render.
        let found = [
            Some(&prepared.inputs.captf_cluster_outputs),
            durable
                .tfvars
                .as_ref()
                .and_then(|t| t.get(CLUSTER_OUTPUTS_VAR)),
        ]
        .into_iter()
        .flatten()
        .find(|v| member::exports_hash(v) == *applied)
        .cloned();
        if let Some(bytes) = found
            .as_ref()
            .and_then(|v| captf_contract::canonicalize_exports(v).ok())
            .filter(|b| pool_exports::fits(room, b.len()))
        {
            secrets::write_applied_exports(client, key, Some(&bytes)).await?;
            durable.applied_exports = Some(bytes);
            record = found;
        }
    }
    // The record shares the durable inputs' budget with what the next apply writes.
    if let Some(len) = durable.applied_exports.as_ref().map(Vec::len)
        && record.is_some()
        && !pool_exports::fits(room, len)
    {
        secrets::write_applied_exports(client, key, None).await?;
        durable.applied_exports = None;
        record = None;
    }
    // A lost apply that rendered an exports change may have applied part of it.
    const PARTIAL: &str = annotations::PARTIAL_CLUSTER_OUTPUTS;
    let lost_exports = durable
        .tfvars
        .as_ref()
        .and_then(|t| t.get(CLUSTER_OUTPUTS_VAR))
        .map(member::exports_hash);
    if let Some(lost) = durable.interrupted_apply().map(str::to_owned)
        && !durable.annotations.contains_key(PARTIAL)
        && let (Some(applied), Some(lost_exports)) = (&applied, lost_exports)
        && *applied != lost_exports
    {
        let partial = pool_exports::Partial {
            job: lost,
            exports_hash: lost_exports,
        }
        .to_annotation();
        secrets::set_pool_exports_mark(client, key, PARTIAL, Some(&partial)).await?;
        durable.annotations.insert(PARTIAL.into(), partial);
    }

    let pending = Pending::parse(
        durable
            .annotations
            .get(annotations::PENDING_CLUSTER_OUTPUTS),
    );
    let approval = pass
        .object
        .annotations()
        .get(annotations::APPROVE_DESTRUCTIVE_PLAN)
        .map(String::as_str);
    let verdict = pool_exports::decide(&Facts {
        applied_hash: applied.as_deref(),
        recorded: record.is_some(),
        applied_before: durable.applied(),
        current_hash: &prepared.exports_hash,
        approval_hash: &prepared.approval_hash,
        approval,
        pending: pending.as_ref(),
        partial: durable.annotations.contains_key(PARTIAL),
    });
    match &verdict.pending {
        PendingFate::Keep => {}
        PendingFate::Applied(_) => {}
        PendingFate::Withdrawn(p) | PendingFate::Superseded(p) => {
            // Its approval approved that change only; a change that returns is guarded anew.
            approvals::consume(
                api,
                key.name(),
                annotations::APPROVE_DESTRUCTIVE_PLAN,
                &p.approval_hash,
            )
            .await?;
        }
    }
    if verdict.pending != PendingFate::Keep {
        secrets::set_pool_exports_mark(client, key, annotations::PENDING_CLUSTER_OUTPUTS, None)
            .await?;
        durable
            .annotations
            .remove(annotations::PENDING_CLUSTER_OUTPUTS);
    }
    let (g, now) = (pass.generation, pass.now);
    if let PendingFate::Withdrawn(p) = &verdict.pending {
        withdrawn(p, jobs, conds, g, now);
    }
    let rendering = match (verdict.render, record, &pending) {
        (Render::Held, Some(held), Some(p)) => {
            let inputs = RoleInputs::MachinePool(captf_contract::MachinePoolInputs {
                captf_cluster_outputs: held,
                ..prepared.inputs.clone()
            });
            let image = &pass.object.spec.workspace.source.image;
            let rendered =
                captf_contract::render(Role::MachinePool, image, &inputs, &prepared.variables)?;
            let newest = jobs
                .iter()
                .rev()
                .find(|j| j.op == Operation::Apply && j.phase != Phase::Active);
            // A held apply that failed reports its failure; otherwise the change stays blocked.
            let held_failed = newest.is_some_and(|j| {
                j.phase == Phase::Failed
                    && j.annotations
                        .contains_key(annotations::HELD_CLUSTER_OUTPUTS)
            });
            if !held_failed {
                let held_apply = newest
                    .filter(|j| {
                        j.phase == Phase::Succeeded
                            && j.annotations
                                .contains_key(annotations::HELD_CLUSTER_OUTPUTS)
                    })
                    .map(|j| j.name.as_str());
                conds.set(
                    types::APPLY_JOB_SUCCEEDED,
                    Status::False,
                    reasons::DESTRUCTIVE_PLAN_BLOCKED,
                    &pool_exports::held_message(key.namespace(), key.name(), p, held_apply),
                    g,
                    now,
                );
            }
            Rendering {
                rendered,
                exports: RenderedExports {
                    hash: applied.clone().unwrap_or_default(),
                    held: Some(p.approval_hash.clone()),
                },
                approval_hash: None,
            }
        }
        (render, _, _) => Rendering {
            rendered: prepared.current.clone(),
            exports: RenderedExports {
                hash: prepared.exports_hash.clone(),
                held: None,
            },
            // Held needs the record and the pending change; should either be missing, the
            // current exports render guarded, never unguarded.
            approval_hash: (render != Render::Current).then(|| prepared.approval_hash.clone()),
        },
    };
    Ok((rendering, verdict))
}

/// The condition once a held change is withdrawn: the last apply's real outcome, naming the
/// withdrawn Job (only over the blocked report it replaces).
fn withdrawn(
    p: &Pending,
    jobs: &[ObservedJob],
    conds: &mut Conditions,
    g: Option<i64>,
    now: Timestamp,
) {
    if conds
        .get(types::APPLY_JOB_SUCCEEDED)
        .is_some_and(|c| c.reason != reasons::DESTRUCTIVE_PLAN_BLOCKED)
    {
        return;
    }
    let note = pool_exports::withdrawn_note(p);
    let last = jobs.iter().rev().find(|j| {
        j.op == Operation::Apply
            && j.phase != Phase::Active
            && !j
                .annotations
                .contains_key(annotations::DESTRUCTIVE_PLAN_BLOCKED)
            && j.name != p.job
    });
    let (status, reason, message) = match last {
        Some(j) if j.phase == Phase::Failed => (
            Status::False,
            reasons::APPLY_FAILED,
            format!("Job {} failed; {note}", j.name),
        ),
        Some(j) => (
            Status::True,
            reasons::APPLY_SUCCEEDED,
            format!("Job {} succeeded; {note}", j.name),
        ),
        None => (
            Status::True,
            reasons::APPLY_SUCCEEDED,
            format!("the last apply succeeded; {note}"),
        ),
    };
    conds.set(types::APPLY_JOB_SUCCEEDED, status, reason, &message, g, now);
}

fn provisioned(status: &TerraformMachinePoolStatus) -> bool {
    status
        .workspace
        .initialization
        .as_ref()
        .and_then(|i| i.provisioned)
        .unwrap_or(false)
}
