//! The TerraformMachine as an [`Adapter`] of the one flow: only what is a machine's own. Its owner
//! is a CAPI Machine that names it back; its inputs (the Machine's facts, the bootstrap data and
//! the cluster's exports) are rendered only until it is provisioned, so it is applied once and
//! never again; `spec.providerID` is written once from the module's output; and its health samples
//! may ask CAPI to remediate the Machine.

use captf_api::conditions::{Status, reasons, types};
use captf_api::names::WorkloadKind;
use captf_api::{
    Initialization, Operation, TerraformCluster, TerraformMachine, TerraformMachineStatus,
    annotations, labels,
};
use captf_contract::{MachineInputs, Role, RoleInputs};
use kube::ResourceExt;

use crate::capi;
use crate::decide::{CapiObject, Counter, Effect, Note};
use crate::decide::{Policy, Snapshot, StateView};
use crate::error::Result;
use crate::job::{EffectivePolicy, PolicyLayers};
use crate::machine::{self, MachinePolicy, RemediationChange};
use crate::reconcile::Context;
use crate::reconcile::adapter::{Adapter, Found, Rendering, Work, provisioned, shared_parts};
use crate::reconcile::observe::owner::{Gate, Hold};
use crate::reconcile::pass::Pass;
use crate::reconcile::{observe::member, observe::outputs, observe::variables};

/// What a machine belongs to, found from its verified Machine.
pub struct Dependencies {
    machine: capi::Machine,
    /// The CAPI Cluster (its `spec.paused` pauses the machine).
    cluster: capi::Cluster,
    /// The TerraformCluster the Cluster's infrastructureRef names.
    infra: TerraformCluster,
}

impl Adapter for TerraformMachine {
    const WORKLOAD: WorkloadKind = WorkloadKind::Machine;
    const WITHOUT_OWNER: (Status, &'static str) =
        (Status::False, reasons::WAITING_FOR_OWNER_MACHINE);
    type Owner = capi::Machine;
    type Deps = Dependencies;
    type Inputs = (MachineInputs, captf_contract::Variables);
    type Own = ();

    shared_parts!(TerraformMachineStatus);

    /// Inputs are rendered only until provisioned: a machine is applied once.
    async fn dependencies(
        pass: &Pass<'_, Self>,
        machine: capi::Machine,
        provisioned: bool,
        deleting: bool,
    ) -> Result<Found<Self>> {
        let (ctx, tm, namespace) = (pass.ctx, pass.object, pass.key.namespace());
        let deps = match dependencies(ctx, tm, namespace, machine).await? {
            Ok(deps) => deps,
            Err(gate) => return Ok(Err(gate.into())),
        };
        if provisioned || deleting {
            return Ok(Ok((deps, None)));
        }
        let inputs = match machine_inputs(ctx, tm, namespace, &deps).await? {
            Ok(inputs) => inputs,
            Err(hold) => return Ok(Err(hold)),
        };
        let workspace = &tm.spec.workspace;
        let layers = PolicyLayers::for_member(workspace.jobs.as_deref(), Some(&deps.infra));
        Ok(
            variables::resolve(ctx, namespace, Role::Machine, workspace, layers)
                .await?
                .map(|variables| (deps, Some((inputs, variables))))
                .map_err(Hold::from),
        )
    }
    fn paused_by(deps: &Dependencies) -> bool {
        deps.cluster.paused()
    }
    /// The label, else the Machine's `spec.clusterName`.
    fn cluster_name(&self, deps: Option<&Dependencies>) -> String {
        self.labels()
            .get(labels::CLUSTER_NAME)
            .cloned()
            .or_else(|| deps.map(|d| d.machine.spec.cluster_name.clone()))
            .unwrap_or_default()
    }
    fn identity(&self, deps: Option<&Dependencies>, ctx: &Context) -> Option<String> {
        policy(self, deps, ctx).identity
    }
    fn max_active_jobs(&self, deps: Option<&Dependencies>) -> Option<i32> {
        deps.and_then(|d| d.infra.spec.max_active_jobs)
    }
    fn job_policy(&self, deps: Option<&Dependencies>) -> EffectivePolicy {
        let own = self.spec.workspace.jobs.as_deref();
        EffectivePolicy::resolve(&PolicyLayers::for_member(own, deps.map(|d| &d.infra)))
    }
    fn policy(&self, deps: Option<&Dependencies>, ctx: &Context, jobs: &EffectivePolicy) -> Policy {
        let policy = policy(self, deps, ctx);
        Policy {
            apply_policy: captf_api::ApplyPolicy::Automatic,
            drift_interval: policy.drift_interval,
            drift_action: captf_api::DriftAction::Report,
            failed_history_limit: jobs.failed_jobs_history_limit,
            refresh_after_apply: true,
            membership_interval: None,
            health_check_interval: policy
                .remediation
                .annotate_machine
                .then_some(policy.remediation.health_check_interval),
        }
    }

    async fn outputs(
        pass: &Pass<'_, Self>,
        state: &captf_state::DecodedState,
        work: &mut Work<Self>,
    ) -> Result<outputs::Reading> {
        read_outputs(pass, state, work).await
    }

    async fn render(
        pass: &Pass<'_, Self>,
        inputs: Option<&Self::Inputs>,
        _: &StateView,
        _: &mut Work<Self>,
    ) -> Result<Option<Rendering>> {
        let Some((inputs, variables)) = inputs else {
            return Ok(None);
        };
        let image = &pass.object.spec.workspace.source.image;
        let inputs = RoleInputs::Machine(inputs.clone());
        Ok(Some(Rendering {
            rendered: captf_contract::render(Role::Machine, image, &inputs, variables)?,
            exports: None,
            approval_hash: None,
        }))
    }

    fn complete(&self, snapshot: &mut Snapshot, work: &mut Work<Self>) {
        let pending = work.status.workspace.pending_refreshes;
        snapshot.observed.pending_refreshes =
            pending.and_then(|p| u32::try_from(p).ok()).unwrap_or(0);
    }
}

/// The machine's drift, identity and remediation policy, merged with its cluster's.
fn policy(tm: &TerraformMachine, deps: Option<&Dependencies>, ctx: &Context) -> MachinePolicy {
    machine::machine_policy(
        tm,
        deps.map(|d| &d.infra),
        ctx.settings.drift_default_interval,
    )
}

/// The Machine's Cluster (from the label, else the Machine's `spec.clusterName`) and its
/// TerraformCluster.
async fn dependencies(
    ctx: &Context,
    tm: &TerraformMachine,
    namespace: &str,
    machine: capi::Machine,
) -> Result<std::result::Result<Dependencies, Gate>> {
    let name = tm
        .labels()
        .get(labels::CLUSTER_NAME)
        .cloned()
        .unwrap_or_else(|| machine.spec.cluster_name.clone());
    Ok(member::cluster_of(&ctx.client, namespace, &name)
        .await?
        .map(|of| Dependencies {
            machine,
            cluster: of.cluster,
            infra: of.infra,
        }))
}

/// The machine role's inputs, or the gate saying what they still wait for: the cluster's
/// infrastructure and exports, and the Machine's bootstrap data.
async fn machine_inputs(
    ctx: &Context,
    tm: &TerraformMachine,
    namespace: &str,
    deps: &Dependencies,
) -> Result<std::result::Result<MachineInputs, Hold>> {
    let handoff = match member::handoff(ctx, namespace, &deps.infra).await? {
        Ok(h) => h,
        Err(hold) => return Ok(Err(hold)),
    };
    let owner = format!(
        "Machine {}",
        deps.machine.metadata.name.as_deref().unwrap_or_default()
    );
    let secret = deps.machine.spec.bootstrap.data_secret_name.as_deref();
    Ok(member::bootstrap(ctx, namespace, secret, &owner)
        .await?
        .map(|bootstrap| {
            crate::inputs::machine_inputs(tm, &deps.machine, &bootstrap, handoff.exports)
        })
        .map_err(Hold::from))
}

/// Outputs from state into status and spec: providerID (once), addresses, failure domain,
/// health, the provisioned latch, health samples and the remediation request.
async fn read_outputs(
    pass: &Pass<'_, TerraformMachine>,
    state: &captf_state::DecodedState,
    work: &mut Work<TerraformMachine>,
) -> Result<outputs::Reading> {
    let (tm, g, now) = (pass.object, pass.generation, pass.now);
    let (deps, finished) = (work.deps.as_ref(), &work.finished);
    let (conds, status, writes) = (&mut work.conds, &mut work.status, &mut work.writes);
    let policy = &policy(tm, deps, pass.ctx);
    status.workspace.observed_state_serial = i64::try_from(state.serial).ok().filter(|s| *s >= 1);
    let decoded = match outputs::decode(Role::Machine, state, conds, g, now) {
        Some(captf_contract::RoleOutputs::Machine(m)) => Some(m),
        _ => None,
    };
    // One sample per refresh, drift check or apply that finished in this pass.
    let sampled = finished.iter().any(|f| {
        f.succeeded
            && matches!(
                f.op,
                Operation::Refresh | Operation::Drift | Operation::Apply
            )
    });
    let reason = match &decoded {
        None if provisioned(&status.workspace)
            && state
                .outputs
                .get("provider_id")
                .is_none_or(|v| v.is_null() || v == "") =>
        {
            let previous = conds
                .get(types::INFRASTRUCTURE_HEALTHY)
                .map(|c| c.reason.clone());
            let (health, reason) = machine::missing_provider_id(previous.as_deref(), sampled);
            let message = if reason == reasons::INSTANCE_TERMINATED {
                "the module's provider_id output was empty on two refreshes in a row: the instance is treated as terminated; spec.providerID is kept"
            } else {
                "the module's provider_id output is empty; spec.providerID is kept (a second empty refresh in a row means the instance is terminated)"
            };
            conds.set(
                types::INFRASTRUCTURE_HEALTHY,
                health,
                reason,
                message,
                g,
                now,
            );
            reason
        }
        None => outputs::health(&None, conds, g, now),
        Some(m) => outputs::health(&Some(m.health.clone()), conds, g, now),
    };
    let health = outputs::Reading::from_reason(reason);
    if sampled {
        status.workspace.pending_refreshes = health.pending.then(|| {
            status
                .workspace
                .pending_refreshes
                .unwrap_or(0)
                .saturating_add(1)
        });
    }
    // What only a readable set of outputs says; the health samples and the remediation
    // below hold for an empty provider_id too (the instance may be gone).
    if let Some(m) = decoded {
        let requested = deps.and_then(|d| d.machine.spec.failure_domain.as_deref());
        let fresh = state.inputs_hash.is_some() && !health.pending;
        machine_outputs(pass, &m, requested, fresh, (conds, status, writes)).await?;
    }
    if sampled && provisioned(&status.workspace) {
        status.unhealthy_samples =
            machine::next_unhealthy_samples(status.unhealthy_samples, reason);
    }
    if let Some(deps) = deps {
        remediate(
            &deps.machine,
            policy,
            status.unhealthy_samples,
            reason,
            writes,
        )?;
    }
    Ok(health)
}

/// A readable set of machine outputs into status and spec: addresses, failure domain,
/// `spec.providerID` (written once), a mismatch with what was asked, and the provisioned latch
/// once the outputs are `fresh` (the state carries an inputs hash and health is not pending).
async fn machine_outputs(
    pass: &Pass<'_, TerraformMachine>,
    m: &captf_contract::MachineOutputs,
    requested_domain: Option<&str>,
    fresh: bool,
    (conds, status, writes): (
        &mut crate::conditions::Conditions,
        &mut TerraformMachineStatus,
        &mut Vec<Effect>,
    ),
) -> Result<()> {
    let (tm, g, now) = (pass.object, pass.generation, pass.now);
    let mismatch = match (&tm.spec.provider_id, requested_domain) {
        (Some(id), _) if *id != m.provider_id => Some((
            reasons::PROVIDER_ID_CHANGED,
            format!(
                "the module's provider_id output is {}, but spec.providerID was written once as {id}; the machine keeps {id}",
                m.provider_id
            ),
        )),
        (_, Some(domain)) if m.failure_domain.as_deref() != Some(domain) => Some((
            reasons::FAILURE_DOMAIN_MISMATCH,
            format!(
                "the Machine asks for failure domain {domain}, the module placed it in {}",
                m.failure_domain.as_deref().unwrap_or("none")
            ),
        )),
        _ => None,
    };
    if let Some((reason, message)) = &mismatch {
        conds.set(types::OUTPUTS_VALID, Status::False, reason, message, g, now);
    }
    status.addresses = Some(serde_json::from_value(serde_json::to_value(&m.addresses)?)?)
        .filter(|a: &Vec<_>| !a.is_empty());
    status.failure_domain = m.failure_domain.clone();
    status.interruptible = Some(m.interruptible);
    if tm.spec.provider_id.is_none() {
        writes.push(Effect::PatchObject {
            patch: serde_json::json!({"spec": {"providerID": m.provider_id}}),
            what: "spec.providerID",
        });
        writes.push(Effect::Event(Note::normal(
            captf_api::events::PROVIDER_ID_SET,
            format!("spec.providerID set to {}", m.provider_id),
        )));
    }
    if fresh && mismatch.is_none() && !provisioned(&status.workspace) {
        status.workspace.initialization = Some(Initialization {
            provisioned: Some(true),
        });
        writes.push(Effect::Event(Note::normal(
            captf_api::events::PROVISIONED,
            format!("provisioned as {}", m.provider_id),
        )));
    }
    Ok(())
}

/// Keeps `cluster.x-k8s.io/remediate-machine` on the Machine in step with health; only a
/// request CAPTF made (`captf.io/remediation-requested`) is ever taken back.
fn remediate(
    machine: &capi::Machine,
    policy: &MachinePolicy,
    samples: Option<i32>,
    reason: &str,
    writes: &mut Vec<Effect>,
) -> Result<()> {
    let requested = machine
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::REMEDIATION_REQUESTED))
        .map(String::as_str);
    let change = machine::remediation_change(
        policy.remediation.annotate_machine,
        policy.remediation.unhealthy_threshold,
        samples,
        reason,
        requested,
    );
    let patch = match &change {
        RemediationChange::Keep => return Ok(()),
        RemediationChange::Request(why) => serde_json::json!({"metadata": {"annotations": {
            annotations::REMEDIATE_MACHINE: "",
            annotations::REMEDIATION_REQUESTED: why,
        }}}),
        RemediationChange::Withdraw => serde_json::json!({"metadata": {"annotations": {
            annotations::REMEDIATE_MACHINE: null,
            annotations::REMEDIATION_REQUESTED: null,
        }}}),
    };
    let name = machine.metadata.name.clone().unwrap_or_default();
    writes.push(Effect::PatchCapi {
        object: CapiObject::Machine,
        name: name.clone(),
        patch,
        what: format!("annotating Machine {name} for remediation"),
    });
    let (note, action) = match change {
        RemediationChange::Request(why) => (
            Note::warning(
                captf_api::events::REMEDIATION_REQUESTED,
                format!(
                    "asked CAPI to remediate Machine {name}: {why} after {} unhealthy samples",
                    samples.unwrap_or(0)
                ),
            ),
            "requested",
        ),
        _ => (
            Note::normal(
                captf_api::events::REMEDIATION_WITHDRAWN,
                format!(
                    "the machine is healthy again; withdrew the remediation request on Machine {name}"
                ),
            ),
            "withdrawn",
        ),
    };
    writes.push(Effect::Count(Counter::Remediation(action)));
    writes.push(Effect::Event(note));
    Ok(())
}
