//! The TerraformMachine pass: the shared flow, plus what is a machine's own. Its owner is a
//! CAPI Machine that names it back; its inputs (the Machine's facts, the bootstrap data and
//! the cluster's exports) are rendered only until it is provisioned, so it is applied once and
//! never again; `spec.providerID` is written once from the module's output; and its health
//! samples may ask CAPI to remediate the Machine.

use std::sync::Arc;
use std::time::Duration;

use captf_api::conditions::{Status, reasons, types};
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_api::{
    Initialization, Operation, TerraformCluster, TerraformMachine, TerraformMachineStatus,
    annotations, labels,
};
use captf_contract::{MachineInputs, Role, RoleInputs};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::Context;
use super::act::Acted;
use super::bookkeeping::{self, Finished};
use super::jobs::Phase;
use super::launch::Launch;
use super::object::{add_finalizer, set_block_move};
use super::pass::{Pass, first_visit};
use super::snapshot::Observation;
use super::state::{self, StateRead};
use super::verify_owner::Gate;
use super::{member, outputs, variables};
use crate::capi;
use crate::conditions::Conditions;
use crate::decide::{self, Action as Decided, Policy};
use crate::error::{Error, KubeContext, Result};
use crate::job::{EffectivePolicy, PolicyLayers};
use crate::machine::{self, MachinePolicy, RemediationChange};

const KIND: &str = "TerraformMachine";

/// What a machine belongs to, found from its verified Machine.
struct Dependencies {
    machine: capi::Machine,
    /// The CAPI Cluster (its `spec.paused` pauses the machine).
    cluster: capi::Cluster,
    /// The TerraformCluster the Cluster's infrastructureRef names.
    infra: TerraformCluster,
}

/// One pass over a TerraformMachine.
pub async fn reconcile(tm: Arc<TerraformMachine>, ctx: Arc<Context>) -> Result<Action> {
    let namespace = tm
        .namespace()
        .ok_or_else(|| Error::InvalidObject("TerraformMachine without a namespace".into()))?;
    let key = ObjectKey::new(&namespace, WorkloadKind::Machine, tm.name_any())
        .map_err(|e| Error::InvalidObject(e.to_string()))?;
    let client = ctx.client.clone();
    let api: Api<TerraformMachine> = Api::namespaced(client.clone(), &namespace);
    let now = Timestamp::now();
    let generation = tm.metadata.generation;
    let deleting = tm.metadata.deletion_timestamp.is_some();
    let pass = Pass {
        ctx: &ctx,
        object: tm.as_ref(),
        key: &key,
        kind: KIND,
        generation,
        now,
    };
    if let Some(done) = pass.externally_managed(deleting).await? {
        return Ok(done);
    }

    let mut conds = Conditions::from(tm.status.as_ref().and_then(|s| s.conditions.as_ref()));
    let mut status = tm.status.clone().unwrap_or_default();
    first_visit(&mut conds, generation, now);
    let (jobs, owner, mut durable) = pass
        .first_reads::<capi::Machine>((Status::False, reasons::WAITING_FOR_OWNER_MACHINE))
        .await?;
    let active = jobs.iter().find(|j| j.phase == Phase::Active).cloned();
    let was_provisioned = provisioned(&status);
    let found = match owner {
        Ok(m) => dependencies(&ctx, &tm, &namespace, m).await?,
        Err(gate) => Err(gate),
    };
    // Rendered only until provisioned: a machine is applied once.
    let found = match found {
        Ok(deps) if !was_provisioned && !deleting => {
            match machine_inputs(&ctx, &tm, &namespace, &deps).await? {
                Ok(inputs) => {
                    let workspace = &tm.spec.workspace;
                    let layers =
                        PolicyLayers::for_member(workspace.jobs.as_deref(), Some(&deps.infra));
                    variables::resolve(&ctx, &namespace, Role::Machine, workspace, layers)
                        .await?
                        .map(|variables| (deps, Some((inputs, variables))))
                }
                Err(gate) => Err(gate),
            }
        }
        Ok(deps) => Ok((deps, None)),
        Err(gate) => Err(gate),
    };
    let (deps, inputs) = match pass.dependencies(found, &mut conds) {
        Some((deps, inputs)) => (Some(deps), inputs),
        None if !deleting => {
            return pass
                .gate(tm.status.as_ref(), &status, conds, was_provisioned)
                .await;
        }
        // Deleting without its Machine: destroy from the durable inputs.
        None => (None, None),
    };
    let finalizer = WorkloadKind::Machine.finalizer();
    if !deleting && !tm.finalizers().iter().any(|f| f == finalizer) {
        add_finalizer(&api, &tm, WorkloadKind::Machine).await?;
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    let paused = tm.annotations().contains_key(annotations::PAUSED)
        || deps.as_ref().is_some_and(|d| d.cluster.paused());
    pass.lifecycle(&mut conds, deleting, paused);

    let finished = bookkeeping::collect(&client, &namespace, &jobs).await?;
    if pass
        .interrupted_applies(&jobs, &finished, &mut conds)
        .await?
    {
        durable = state::durable_inputs(&client, &key).await?;
    }
    let owner_ref = tm
        .controller_owner_ref(&())
        .ok_or_else(|| Error::InvalidObject("TerraformMachine without a UID".into()))?;
    for f in &finished {
        pass.record(
            f,
            &mut conds,
            &mut status.workspace,
            &owner_ref,
            &tm.spec.workspace.source.image,
        )
        .await?;
    }
    if paused || active.is_some() {
        return pass
            .hold(
                tm.status.as_ref(),
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
    set_block_move(&api, &tm, false).await?;

    let infra = deps.as_ref().map(|d| &d.infra);
    let policy = machine::machine_policy(&tm, infra, ctx.args.drift_default_interval);
    let observed = pass.observe(policy.identity.as_deref(), &owner_ref).await?;
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
    let cluster_name = cluster_name(&tm, deps.as_ref());
    pass.keep_state(
        &state,
        &jobs,
        &mut status.workspace,
        &owner_ref,
        &cluster_name,
        tm.annotations()
            .get(annotations::RESTORE_STATE)
            .and_then(|v| v.parse().ok()),
        deleting,
    )
    .await?;
    let previous = Conditions::from(tm.status.as_ref().and_then(|s| s.conditions.as_ref()));
    let force_unlock = pass
        .inspect_lock(&state, &observed.lock, &previous, &mut conds)
        .await;
    let health = match &state {
        StateRead::Found(s, _) => {
            read_outputs(
                &pass,
                &api,
                deps.as_ref(),
                &policy,
                s,
                &finished,
                &mut conds,
                &mut status,
            )
            .await?
        }
        _ => outputs::Reading::default(),
    };

    let rendered = match &inputs {
        Some((inputs, variables)) => Some(captf_contract::render(
            Role::Machine,
            &tm.spec.workspace.source.image,
            &RoleInputs::Machine(inputs.clone()),
            variables,
        )?),
        None => None,
    };
    pass.measure_inputs(rendered.as_ref());
    let job_policy = EffectivePolicy::resolve(&PolicyLayers::for_member(
        tm.spec.workspace.jobs.as_deref(),
        infra,
    ));
    let restore = pass.restore_request(&status.workspace, &mut conds).await?;
    let mut snapshot = pass.snapshot(Observation {
        jobs: &jobs,
        state: state_view.clone(),
        inputs_hash: rendered.as_ref().map(|r| r.inputs_hash.clone()),
        durable: &durable,
        restore: restore.as_ref(),
        deleting,
        workspace: &status.workspace,
        conds: &conds,
        policy: Policy {
            apply_policy: captf_api::ApplyPolicy::Automatic,
            drift_interval: policy.drift_interval,
            drift_action: captf_api::DriftAction::Report,
            failed_history_limit: job_policy.failed_jobs_history_limit,
            refresh_after_apply: true,
            membership_interval: None,
            health_check_interval: policy
                .remediation
                .annotate_machine
                .then_some(policy.remediation.health_check_interval),
        },
    });
    snapshot.observed.health_pending = health.pending;
    snapshot.observed.apply_health_definite = health.definite;
    snapshot.observed.pending_refreshes = status
        .workspace
        .pending_refreshes
        .and_then(|p| u32::try_from(p).ok())
        .unwrap_or(0);
    let decision = decide::decide(&snapshot, now);
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
                image: &tm.spec.workspace.source.image,
                pull_policy: tm.spec.workspace.source.image_pull_policy,
                owner_ref: &owner_ref,
                last_active: tm
                    .status
                    .as_ref()
                    .and_then(|s| s.workspace.active_job.as_ref()),
                provisioned: tm.status.as_ref().is_some_and(provisioned),
                approval_hash: None,
                exports: None,
                expect_state: super::lineage::expected(&state),
            };
            pass.launch(
                decision.requeue,
                &creds,
                &launch,
                &jobs,
                start,
                rendered.as_ref(),
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
        tm.status.as_ref(),
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
) -> Result<std::result::Result<MachineInputs, Gate>> {
    let handoff = match member::handoff(ctx, namespace, &deps.infra).await? {
        Ok(h) => h,
        Err(gate) => return Ok(Err(gate)),
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
        }))
}

/// Outputs from state into status and spec: providerID (once), addresses, failure domain,
/// health, the provisioned latch, health samples and the remediation request.
#[allow(clippy::too_many_arguments)]
async fn read_outputs(
    pass: &Pass<'_, TerraformMachine>,
    api: &Api<TerraformMachine>,
    deps: Option<&Dependencies>,
    policy: &MachinePolicy,
    state: &captf_state::DecodedState,
    finished: &[Finished],
    conds: &mut Conditions,
    status: &mut TerraformMachineStatus,
) -> Result<outputs::Reading> {
    let (tm, g, now) = (pass.object, pass.generation, pass.now);
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
        None if provisioned(status)
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
        let requested_domain = deps.and_then(|d| d.machine.spec.failure_domain.as_deref());
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
            api.patch(
                &tm.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&serde_json::json!({"spec": {"providerID": m.provider_id}})),
            )
            .await
            .during(|| "writing spec.providerID".to_owned())?;
        }
        if state.inputs_hash.is_some()
            && !health.pending
            && mismatch.is_none()
            && !provisioned(status)
        {
            status.workspace.initialization = Some(Initialization {
                provisioned: Some(true),
            });
        }
    }
    if sampled && provisioned(status) {
        status.unhealthy_samples =
            machine::next_unhealthy_samples(status.unhealthy_samples, reason);
    }
    if let Some(deps) = deps {
        remediate(
            pass,
            &deps.machine,
            policy,
            status.unhealthy_samples,
            reason,
        )
        .await?;
    }
    Ok(health)
}

/// Keeps `cluster.x-k8s.io/remediate-machine` on the Machine in step with health; only a
/// request CAPTF made (`captf.io/remediation-requested`) is ever taken back.
async fn remediate(
    pass: &Pass<'_, TerraformMachine>,
    machine: &capi::Machine,
    policy: &MachinePolicy,
    samples: Option<i32>,
    reason: &str,
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
    let machines: Api<DynamicObject> = Api::namespaced_with(
        pass.ctx.client.clone(),
        pass.key.namespace(),
        &capi::machine_resource(),
    );
    machines
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .during(|| format!("annotating Machine {name} for remediation"))?;
    let (type_, event, note, action) = match change {
        RemediationChange::Request(why) => (
            kube::runtime::events::EventType::Warning,
            captf_api::events::REMEDIATION_REQUESTED,
            format!(
                "asked CAPI to remediate Machine {name}: {why} after {} unhealthy samples",
                samples.unwrap_or(0)
            ),
            "requested",
        ),
        _ => (
            kube::runtime::events::EventType::Normal,
            captf_api::events::REMEDIATION_WITHDRAWN,
            format!(
                "the machine is healthy again; withdrew the remediation request on Machine {name}"
            ),
            "withdrawn",
        ),
    };
    pass.ctx
        .metrics
        .remediation_requests_total
        .get_or_create(&crate::metrics::Action { action })
        .inc();
    pass.publish(type_, event, &note).await;
    Ok(())
}

/// The CAPI Cluster's name: the label, else the Machine's `spec.clusterName`.
fn cluster_name(tm: &TerraformMachine, deps: Option<&Dependencies>) -> String {
    tm.labels()
        .get(labels::CLUSTER_NAME)
        .cloned()
        .or_else(|| deps.map(|d| d.machine.spec.cluster_name.clone()))
        .unwrap_or_default()
}

fn provisioned(status: &TerraformMachineStatus) -> bool {
    status
        .workspace
        .initialization
        .as_ref()
        .and_then(|i| i.provisioned)
        .unwrap_or(false)
}
