//! The TerraformMachinePool as an [`Adapter`] of the one flow: only what is a pool's own. Its owner
//! is a CAPI MachinePool that names it back; it is found in its cluster by its cluster-name label;
//! its inputs are rendered every pass, so any change re-applies it, and an apply that renders a
//! change of the cluster's exports is guarded against deleting anything. Its outputs give
//! `spec.providerIDList` and `status.replicas`; with the autoscaler's annotations the module owns
//! the replica count and the pool writes it back to the MachinePool.

pub mod exports;
mod guard;

use std::time::Duration;

use captf_api::conditions::{Status, reasons, types};
use captf_api::names::WorkloadKind;
use captf_api::{
    Initialization, MachinePoolInstance, TerraformMachinePool, TerraformMachinePoolStatus,
    annotations, labels,
};
use captf_contract::{Autoscaling, MachinePoolOutputs, Role, RoleInputs};
use kube::ResourceExt;

use crate::capi;
use crate::conditions::Conditions;
use crate::decide::Finished;
use crate::decide::{self, Policy, Snapshot, StateView};
use crate::decide::{CapiObject, Effect, Note};
use crate::error::Result;
use crate::job::{EffectivePolicy, PolicyLayers};
use crate::reconcile::adapter::{Adapter, Found, Rendering, Work, provisioned, shared_parts};
use crate::reconcile::kinds::pool::guard::{exports_guard, newest_blocked, record_exports};
use crate::reconcile::observe::owner::{Gate, Hold};
use crate::reconcile::pass::Pass;
use crate::reconcile::{Context, observe::member, observe::outputs};
use exports::{PendingFate, Render, Verdict};

/// Built-in `membershipRefreshIntervalSeconds`.
const DEFAULT_MEMBERSHIP_INTERVAL: Duration = Duration::from_secs(60);

/// What a pool belongs to, found from its verified MachinePool.
pub struct Dependencies {
    owner: capi::MachinePool,
    of: member::ClusterOf,
}

/// The inputs a live pool renders now, and what its exports guard needs to decide.
pub struct Prepared {
    pub(super) inputs: captf_contract::MachinePoolInputs,
    pub(super) variables: captf_contract::Variables,
    pub(super) current: captf_contract::Rendered,
    /// Hash of the exports rendered now.
    pub(super) exports_hash: String,
    /// The approval hash of the inputs rendered now (without `bootstrap_data`).
    pub(super) approval_hash: String,
}

/// What the exports guard decided this pass, for the decision.
#[derive(Default)]
pub struct Own {
    /// The guard's verdict and the approval hash of the inputs rendered now.
    guard: Option<(Verdict, String)>,
}

/// A pool: its owner is a CAPI MachinePool; it renders every pass, so any change re-applies
/// it, and an apply that renders a change of the cluster's exports is guarded against
/// deleting anything. Its outputs give `spec.providerIDList` and `status.replicas`; with the
/// autoscaler's annotations the module owns the replica count.
impl Adapter for TerraformMachinePool {
    const WORKLOAD: WorkloadKind = WorkloadKind::MachinePool;
    const WITHOUT_OWNER: (Status, &'static str) =
        (Status::False, reasons::WAITING_FOR_OWNER_MACHINE_POOL);
    type Owner = capi::MachinePool;
    type Deps = Dependencies;
    type Inputs = Prepared;
    type Own = Own;

    shared_parts!(TerraformMachinePoolStatus);

    async fn dependencies(
        pass: &Pass<'_, Self>,
        owner: capi::MachinePool,
        _provisioned: bool,
        deleting: bool,
    ) -> Result<Found<Self>> {
        let (ctx, pool, namespace) = (pass.ctx, pass.object, pass.key.namespace());
        let deps = match dependencies(ctx, pool, namespace, owner).await? {
            Ok(deps) => deps,
            Err(gate) => return Ok(Err(gate.into())),
        };
        if deleting {
            return Ok(Ok((deps, None)));
        }
        Ok(render(ctx, pool, namespace, &deps)
            .await?
            .map(|prepared| (deps, Some(prepared))))
    }
    fn paused_by(deps: &Dependencies) -> bool {
        deps.of.cluster.paused()
    }
    fn cluster_name(&self, _: Option<&Dependencies>) -> String {
        self.labels()
            .get(labels::CLUSTER_NAME)
            .cloned()
            .unwrap_or_default()
    }
    fn identity(&self, deps: Option<&Dependencies>, _: &Context) -> Option<String> {
        let own = self.spec.workspace.identity_ref.as_ref();
        crate::machine::inherited_identity(own, deps.map(|d| &d.of.infra))
    }
    fn max_active_jobs(&self, deps: Option<&Dependencies>) -> Option<i32> {
        deps.and_then(|d| d.of.infra.spec.max_active_jobs)
    }
    fn job_policy(&self, deps: Option<&Dependencies>) -> EffectivePolicy {
        let own = self.spec.workspace.jobs.as_deref();
        EffectivePolicy::resolve(&PolicyLayers::for_member(own, deps.map(|d| &d.of.infra)))
    }
    fn policy(&self, deps: Option<&Dependencies>, ctx: &Context, jobs: &EffectivePolicy) -> Policy {
        pool_policy(self, deps.map(|d| &d.of.infra), ctx, jobs)
    }

    async fn record(
        pass: &Pass<'_, Self>,
        f: &Finished,
        work: &mut Work<Self>,
    ) -> Result<Vec<Effect>> {
        record_exports(&pass.ctx.client, pass.key, f, &work.durable).await
    }

    async fn outputs(
        pass: &Pass<'_, Self>,
        state: &captf_state::DecodedState,
        work: &mut Work<Self>,
    ) -> Result<outputs::Reading> {
        let (conds, status, writes) = (&mut work.conds, &mut work.status, &mut work.writes);
        let health = read_outputs(pass, state, conds, status, writes).await?;
        if let Some(deps) = work.deps.as_ref().filter(|_| !work.deleting) {
            autoscale(pass, &deps.owner, status, conds, writes).await?;
        }
        Ok(health)
    }

    async fn render(
        pass: &Pass<'_, Self>,
        prepared: Option<&Prepared>,
        state: &StateView,
        work: &mut Work<Self>,
    ) -> Result<Option<Rendering>> {
        let Some(prepared) = prepared else {
            return Ok(None);
        };
        let (durable, jobs) = (&work.durable, &work.jobs);
        let out = (&mut work.conds, &mut work.writes);
        let (rendering, verdict) = exports_guard(pass, prepared, durable, state, jobs, out).await?;
        work.own.guard = Some((verdict, prepared.approval_hash.clone()));
        Ok(Some(rendering))
    }

    fn complete(&self, snapshot: &mut Snapshot, work: &mut Work<Self>) {
        let annotations = self.annotations();
        snapshot.approvals.destructive = annotations
            .get(annotations::APPROVE_DESTRUCTIVE_PLAN)
            .cloned();
        let listed = self.spec.provider_id_list.as_ref().map_or(0, Vec::len);
        snapshot.observed.membership_converging = work
            .status
            .replicas
            .is_some_and(|r| usize::try_from(r).ok() != Some(listed));
        let guard = newest_blocked(&work.jobs, &work.finished);
        snapshot.exports_guard = work.own.guard.as_ref().map(|(v, approval_hash)| {
            let pending_kept = v.pending == PendingFate::Keep
                && work
                    .durable
                    .annotations
                    .contains_key(annotations::PENDING_CLUSTER_OUTPUTS);
            decide::ExportsGuard {
                blocked: exports::blocked_apply(v, guard.as_deref(), approval_hash, pending_kept),
                approved: (v.render == (Render::Guarded { approved: true }))
                    .then(|| approval_hash.clone()),
            }
        });
    }
}

/// The pool's drift and membership schedule: its own, else its cluster's defaults, else its
/// cluster's.
fn pool_policy(
    pool: &TerraformMachinePool,
    infra: Option<&captf_api::TerraformCluster>,
    ctx: &Context,
    jobs: &EffectivePolicy,
) -> Policy {
    let defaults = infra.and_then(|c| c.spec.defaults.as_ref());
    let drift_interval = crate::machine::inherited_drift_interval(
        pool.spec.drift.as_ref().and_then(|d| d.interval_seconds),
        infra,
        ctx.settings.drift_default_interval,
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
    Policy {
        apply_policy: captf_api::ApplyPolicy::Automatic,
        drift_interval,
        drift_action,
        failed_history_limit: jobs.failed_jobs_history_limit,
        refresh_after_apply: true,
        membership_interval: Some(membership),
        health_check_interval: None,
    }
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
) -> Result<std::result::Result<Prepared, Hold>> {
    let handoff = match member::handoff(ctx, namespace, &deps.of.infra).await? {
        Ok(h) => h,
        Err(hold) => return Ok(Err(hold)),
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
        Err(gate) => return Ok(Err(gate.into())),
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
    let variables = match crate::reconcile::observe::variables::resolve(
        ctx,
        namespace,
        Role::MachinePool,
        workspace,
        layers,
    )
    .await?
    {
        Ok(variables) => variables,
        Err(gate) => return Ok(Err(gate.into())),
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
    state: &captf_state::DecodedState,
    conds: &mut Conditions,
    status: &mut TerraformMachinePoolStatus,
    writes: &mut Vec<Effect>,
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
    // Not reported (the scaling group is gone): keep the last observed count.
    status.replicas = p.replicas.or(status.replicas);
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
        writes.push(Effect::PatchObject {
            patch: serde_json::json!({"spec": {
                "providerIDList": p.provider_id_list,
                "providerID": p.provider_id,
            }}),
            what: "spec.providerIDList",
        });
        writes.push(Effect::Event(Note::normal(
            captf_api::events::PROVIDER_ID_SET,
            format!(
                "spec.providerID {} and {} member(s) in spec.providerIDList",
                p.provider_id.as_deref().unwrap_or("(none)"),
                p.provider_id_list.len()
            ),
        )));
    }
    if state.inputs_hash.is_some() && !health.pending && !provisioned(&status.workspace) {
        status.workspace.initialization = Some(Initialization {
            provisioned: Some(true),
        });
        status.ready = Some(true);
        writes.push(Effect::Event(Note::normal(
            captf_api::events::PROVISIONED,
            format!("provisioned at state serial {}", state.serial),
        )));
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
    writes: &mut Vec<Effect>,
) -> Result<()> {
    let (g, now) = (pass.generation, pass.now);
    let name = owner.metadata.name.clone().unwrap_or_default();
    let claim = owner
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::REPLICAS_MANAGED_BY))
        .cloned();
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
                writes.push(Effect::PatchCapi {
                    object: CapiObject::MachinePool,
                    name: name.clone(),
                    patch,
                    what: format!("releasing MachinePool {name}'s replicas"),
                });
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
            writes.push(Effect::Event(Note::warning(
                reasons::REPLICAS_MANAGED_EXTERNALLY,
                message.clone(),
            )));
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
        writes.push(Effect::Event(Note::normal(
            captf_api::events::REPLICAS_WRITTEN_BACK,
            format!(
                "MachinePool {name} spec.replicas: {} -> {replicas} (observed by the module)",
                owner.spec.replicas.unwrap_or(1)
            ),
        )));
    }
    writes.push(Effect::PatchCapi {
        object: CapiObject::MachinePool,
        name: name.clone(),
        patch,
        what: format!("writing MachinePool {name}'s replicas"),
    });
    Ok(())
}
