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
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::act::Acted;
use super::jobs::Phase;
use super::launch::{Launch, RenderedExports};
use super::object::{add_finalizer, set_block_move};
use super::pass::{Pass, first_visit};
use super::pool_exports::{self, BlockedApply, PendingFate, Render};
use super::pool_guard::{exports_guard, newest_blocked, record_exports};
use super::snapshot::Observation;
use super::state::{self, StateRead};
use super::verify_owner::Gate;
use super::{Context, bookkeeping, member, outputs};
use crate::capi;
use crate::conditions::Conditions;
use crate::decide::{self, Action as Decided, Policy};
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
pub(super) struct Prepared {
    pub(super) inputs: captf_contract::MachinePoolInputs,
    pub(super) variables: captf_contract::Variables,
    pub(super) current: captf_contract::Rendered,
    /// Hash of the exports rendered now.
    pub(super) exports_hash: String,
    /// The approval hash of the inputs rendered now (without `bootstrap_data`).
    pub(super) approval_hash: String,
}

/// What the pool's Jobs render once the exports guard decided.
pub(super) struct Rendering {
    pub(super) rendered: captf_contract::Rendered,
    pub(super) exports: RenderedExports,
    /// Set when the apply is guarded: an approval names this hash.
    pub(super) approval_hash: Option<String>,
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
    let (jobs, owner, durable) = pass
        .first_reads::<capi::MachinePool>((Status::False, reasons::WAITING_FOR_OWNER_MACHINE_POOL))
        .await?;
    let active = jobs.iter().find(|j| j.phase == Phase::Active).cloned();
    let found = match owner {
        Ok(owner) => dependencies(&ctx, &pool, &namespace, owner).await?,
        Err(gate) => Err(gate),
    };
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
    let observed = pass.observe(identity.as_deref(), &owner_ref).await?;
    let creds = pass.note_credentials(observed.credentials, observed.runner_rbac, &mut conds);
    let mut state = observed.state;
    let state_view = pass
        .state_view(
            &mut state,
            &durable,
            provisioned(&status),
            &finished,
            &mut status.workspace,
            &mut conds,
        )
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
    let force_unlock = pass
        .inspect_lock(&state, &observed.lock, &previous, &mut conds)
        .await;
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
        pool.spec.workspace.jobs.as_deref(),
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
    pass.applied_per_state(&snapshot, &decision, &mut conds);
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
                exports: rendering.as_ref().map(|r| r.exports.clone()),
                expect_state: super::lineage::expected(&state),
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
    Ok(member::cluster_of(&ctx.client, namespace, name)
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
    let layers = PolicyLayers::for_member(workspace.jobs.as_deref(), Some(&deps.of.infra));
    let variables =
        match super::variables::resolve(ctx, namespace, Role::MachinePool, workspace, layers)
            .await?
        {
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

fn provisioned(status: &TerraformMachinePoolStatus) -> bool {
    status
        .workspace
        .initialization
        .as_ref()
        .and_then(|i| i.provisioned)
        .unwrap_or(false)
}
