//! The TerraformCluster pass: preamble (externally managed, owner, finalizer, pause),
//! bookkeeping, credentials, state, inputs, [`decide`], act, and one status patch.

use std::sync::Arc;
use std::time::Duration;

use captf_api::conditions::{Status, reasons, types};
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_api::{
    Initialization, Operation, TerraformCluster, TerraformClusterStatus, annotations, labels,
};
use captf_contract::{Role, RoleInputs};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::act::Acted;
use super::bookkeeping::{self, Finished};
use super::dependents::Dependents;
use super::jobs::Phase;
use super::launch::Launch;
use super::object::{add_finalizer, set_block_move};
use super::pass::{Pass, first_visit};
use super::snapshot::Observation;
use super::state::{self, StateRead};
use super::{Context, approvals, outputs};
use crate::capi;
use crate::conditions::Conditions;
use crate::decide::{self, Action as Decided, Approvals, Policy};
use crate::error::{Error, KubeContext, Result};
use crate::job::{EffectivePolicy, PolicyLayers};

const KIND: &str = "TerraformCluster";

/// One pass over a TerraformCluster.
pub async fn reconcile(tc: Arc<TerraformCluster>, ctx: Arc<Context>) -> Result<Action> {
    let namespace = tc
        .namespace()
        .ok_or_else(|| Error::InvalidObject("TerraformCluster without a namespace".into()))?;
    let key = ObjectKey::new(&namespace, WorkloadKind::Cluster, tc.name_any())
        .map_err(|e| Error::InvalidObject(e.to_string()))?;
    let client = ctx.client.clone();
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &namespace);
    let now = Timestamp::now();
    let generation = tc.metadata.generation;
    let deleting = tc.metadata.deletion_timestamp.is_some();
    let has_finalizer = tc
        .finalizers()
        .iter()
        .any(|f| f == WorkloadKind::Cluster.finalizer());
    let annotations_of = tc.annotations().clone();
    let pass = Pass {
        ctx: &ctx,
        object: tc.as_ref(),
        key: &key,
        kind: KIND,
        generation,
        now,
    };

    if let Some(done) = pass.externally_managed(deleting).await? {
        return Ok(done);
    }

    let mut conds = Conditions::from(tc.status.as_ref().and_then(|s| s.conditions.as_ref()));
    let mut status = tc.status.clone().unwrap_or_default();
    first_visit(&mut conds, generation, now);
    // The Jobs, the owner (the CAPI Cluster that references this object back) and what the
    // last apply rendered, in one round trip.
    let (jobs, owner, mut durable) = pass
        .first_reads::<capi::Cluster>((Status::Unknown, reasons::WAITING_FOR_OWNER))
        .await?;
    let active = jobs.iter().find(|j| j.phase == Phase::Active).cloned();
    // Then the variables sources (not needed to destroy: that runs from the durable inputs).
    let found = match owner {
        Ok(cluster) if !deleting => {
            let workspace = &tc.spec.workspace;
            let layers = PolicyLayers::for_cluster(&tc);
            super::variables::resolve(&ctx, &namespace, Role::Cluster, workspace, layers)
                .await?
                .map(|variables| (cluster, Some(variables)))
        }
        Ok(cluster) => Ok((cluster, None)),
        Err(gate) => Err(gate),
    };
    let (cluster, variables) = match pass.dependencies(found, &mut conds) {
        Some((cluster, variables)) => (Some(cluster), variables),
        None if !deleting => {
            return pass
                .gate(tc.status.as_ref(), &status, conds, provisioned(&status))
                .await;
        }
        // Deleting without a valid owner: destroy from the durable inputs.
        None => (None, None),
    };
    if !deleting && !has_finalizer {
        add_finalizer(&api, &tc, WorkloadKind::Cluster).await?;
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    let paused = annotations_of.contains_key(annotations::PAUSED)
        || cluster.as_ref().is_some_and(capi::Cluster::paused);
    pass.lifecycle(&mut conds, deleting, paused);

    // Bookkeeping: every finished Job's result, read once.
    let finished = bookkeeping::collect(&client, &namespace, &jobs).await?;
    if pass
        .interrupted_applies(&jobs, &finished, &mut conds)
        .await?
    {
        durable = state::durable_inputs(&client, &key).await?;
    }
    for f in &finished {
        pass.record(
            f,
            &mut conds,
            &mut status.workspace,
            &owner_reference(&tc)?,
            &tc.spec.workspace.source.image,
        )
        .await?;
        record_plan(&ctx, &tc, &key, f, &mut conds, &mut status, generation, now).await?;
    }

    if paused || active.is_some() {
        return pass
            .hold(
                tc.status.as_ref(),
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
    set_block_move(&api, &tc, false).await?;
    let dependents = if deleting {
        let name = tc
            .labels()
            .get(labels::CLUSTER_NAME)
            .cloned()
            .or_else(|| cluster.as_ref().and_then(|c| c.metadata.name.clone()))
            .unwrap_or_default();
        let dependents = Dependents::of(&client, &namespace, &name).await?;
        dependents.note(&mut conds, generation, now);
        dependents
    } else {
        Dependents::default()
    };

    // Credentials and runner RBAC, every pass of a live object.
    let owner_ref = owner_reference(&tc)?;
    let identity = tc
        .spec
        .workspace
        .identity_ref
        .as_ref()
        .map(|r| r.name.as_str());
    let observed = pass.observe(identity, &owner_ref).await?;
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
    pass.keep_state(
        &state,
        &jobs,
        &mut status.workspace,
        &owner_ref,
        &cluster_name(&tc, cluster.as_ref()),
        annotations_of
            .get(annotations::RESTORE_STATE)
            .and_then(|v| v.parse().ok()),
        deleting,
    )
    .await?;
    let previous = Conditions::from(tc.status.as_ref().and_then(|s| s.conditions.as_ref()));
    let force_unlock = pass
        .inspect_lock(&state, &observed.lock, &previous, &mut conds)
        .await;
    if let StateRead::Found(s, _) = &state {
        apply_outputs(
            &ctx,
            &api,
            &tc,
            cluster.as_ref(),
            s,
            &mut conds,
            &mut status,
            generation,
            now,
        )
        .await?;
    }

    // Inputs as they would render now.
    let rendered = match (&cluster, &variables) {
        (Some(cluster), Some(variables)) => {
            let history = crate::inputs::ClusterHistory {
                control_plane_initialized: durable.rendered_bool("control_plane_initialized"),
                endpoint_from_module: annotations_of
                    .get(annotations::ENDPOINT_SOURCE)
                    .is_some_and(|v| v == annotations::ENDPOINT_SOURCE_MODULE),
            };
            let inputs = RoleInputs::Cluster(crate::inputs::cluster_inputs(&tc, cluster, &history));
            Some(captf_contract::render(
                Role::Cluster,
                &tc.spec.workspace.source.image,
                &inputs,
                variables,
            )?)
        }
        _ => None,
    };

    pass.measure_inputs(rendered.as_ref());
    if tc.spec.apply_policy.unwrap_or_default() == captf_api::ApplyPolicy::Automatic {
        // Back to Automatic: the apply that waited runs (guarded); the plan is moot.
        status.plan = None;
    }
    let job_policy = EffectivePolicy::resolve(&PolicyLayers::for_cluster(&tc));
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
            apply_policy: tc.spec.apply_policy.unwrap_or_default(),
            drift_interval: drift_interval(&tc, &ctx),
            drift_action: tc
                .spec
                .drift
                .as_ref()
                .and_then(|d| d.action)
                .unwrap_or_default(),
            failed_history_limit: job_policy.failed_jobs_history_limit,
            refresh_after_apply: false,
            membership_interval: None,
            health_check_interval: None,
        },
    });
    snapshot.dependents = !dependents.is_empty();
    snapshot.approvals = Approvals {
        destructive: annotations_of
            .get(annotations::APPROVE_DESTRUCTIVE_PLAN)
            .cloned(),
        plan: annotations_of.get(annotations::APPROVE_PLAN).cloned(),
    };
    snapshot.plan = status.plan.as_ref().map(|p| decide::PendingPlan {
        inputs_hash: p.inputs_hash.clone(),
        plan_hash: p.plan_hash.clone(),
        empty: approvals::is_empty(&p.plan_hash),
    });
    let decision = decide::decide(&snapshot, now);
    pass.count_decision(&decision);
    pass.applied_per_state(&snapshot, &decision, &mut conds);

    let acted = match &decision.action {
        Decided::Wait if decision.reason == decide::Reason::DeletionHeld => {
            pass.hold_deletion(&mut conds, &state_view);
            Acted::default()
        }
        Decided::Wait if decision.reason == decide::Reason::PlanAwaitingApproval => {
            if let Some(plan) = &status.plan {
                await_approval(&mut conds, &key, &tc, plan, generation, now);
            }
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
                cluster_name: cluster_name(&tc, cluster.as_ref()),
                max_active_jobs: tc.spec.max_active_jobs,
                policy: job_policy.clone(),
                image: &tc.spec.workspace.source.image,
                pull_policy: tc.spec.workspace.source.image_pull_policy,
                owner_ref: &owner_ref,
                last_active: tc
                    .status
                    .as_ref()
                    .and_then(|s| s.workspace.active_job.as_ref()),
                provisioned: tc.status.as_ref().is_some_and(provisioned),
                approval_hash: None,
                exports: None,
                expect_state: super::lineage::expected(&state),
            };
            let acted = pass
                .launch(
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
                .await?;
            if acted.active.is_some() && start.expect_plan.is_some() {
                count_approval(&ctx, "approved");
            }
            acted
        }
    };
    let acted = Acted {
        requeue: acted.requeue.or(decision.requeue),
        ..acted
    };
    status.workspace.state_secret_suffix = Some(key.state_suffix());
    pass.finish(
        tc.status.as_ref(),
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

/// The CAPI Cluster's name: the owner's, else the `cluster.x-k8s.io/cluster-name` label.
fn cluster_name(tc: &TerraformCluster, cluster: Option<&capi::Cluster>) -> String {
    cluster
        .and_then(|c| c.metadata.name.clone())
        .or_else(|| tc.labels().get(labels::CLUSTER_NAME).cloned())
        .unwrap_or_default()
}

/// `ApplyJobSucceeded=Unknown/PlanAwaitingApproval` for `plan`, naming an approval of another
/// plan if one is set; returns the message.
fn await_approval(
    conds: &mut Conditions,
    key: &ObjectKey,
    tc: &TerraformCluster,
    plan: &captf_api::PlanStatus,
    generation: Option<i64>,
    now: Timestamp,
) -> String {
    let approval = tc.annotations().get(annotations::APPROVE_PLAN);
    let message = approvals::awaiting_message(
        key.namespace(),
        key.name(),
        plan,
        approval.map(String::as_str),
    );
    conds.set(
        types::APPLY_JOB_SUCCEEDED,
        Status::Unknown,
        reasons::PLAN_AWAITING_APPROVAL,
        &message,
        generation,
        now,
    );
    message
}

fn provisioned(status: &TerraformClusterStatus) -> bool {
    status
        .workspace
        .initialization
        .as_ref()
        .and_then(|i| i.provisioned)
        .unwrap_or(false)
}

fn drift_interval(tc: &TerraformCluster, ctx: &Context) -> Option<Duration> {
    match tc.spec.drift.as_ref().and_then(|d| d.interval_seconds) {
        Some(0) => None,
        Some(s) => Some(Duration::from_secs(u64::try_from(s).unwrap_or(0))),
        None => Some(ctx.args.drift_default_interval),
    }
}

fn owner_reference(tc: &TerraformCluster) -> Result<OwnerReference> {
    tc.controller_owner_ref(&())
        .ok_or_else(|| Error::InvalidObject("TerraformCluster without a UID".into()))
}

/// The Manual plan side of a finished Job (clusters only): a plan to approve, an approved plan
/// applied or superseded, and `captf_plan_approvals_total`.
#[allow(clippy::too_many_arguments)]
async fn record_plan(
    ctx: &Context,
    tc: &TerraformCluster,
    key: &ObjectKey,
    f: &Finished,
    conds: &mut Conditions,
    status: &mut TerraformClusterStatus,
    generation: Option<i64>,
    now: Timestamp,
) -> Result<()> {
    match (f.op, f.succeeded) {
        (Operation::Apply, true) => {
            let api: Api<TerraformCluster> = Api::namespaced(ctx.client.clone(), key.namespace());
            if let Some(approved) = f.annotations.get(annotations::APPROVED_PLAN) {
                count_approval(ctx, "applied");
                status.plan = None;
                let named = tc.annotations().get(annotations::APPROVE_PLAN) == Some(approved);
                if named
                    && approvals::consume(&api, key.name(), annotations::APPROVE_PLAN, approved)
                        .await?
                {
                    publish(
                        ctx,
                        tc,
                        EventType::Normal,
                        captf_api::events::PLAN_APPLIED,
                        &format!("Job {} applied the approved plan {approved}", f.name),
                    )
                    .await;
                }
            }
        }
        (Operation::Plan, true) => {
            let plan = f.result.as_ref().and_then(|r| r.plan.as_ref());
            match (plan, f.inputs_hash()) {
                (Some(plan), Some(inputs)) => {
                    let shown = approvals::plan_status(&f.name, inputs, plan, now);
                    if !approvals::is_empty(&shown.plan_hash) {
                        let pending = status.plan.as_ref().map(|p| p.plan_hash.as_str());
                        if pending.is_some_and(|p| !approvals::is_empty(p) && p != shown.plan_hash)
                        {
                            count_approval(ctx, "superseded");
                        }
                        count_approval(ctx, "created");
                        let message = await_approval(conds, key, tc, &shown, generation, now);
                        publish(
                            ctx,
                            tc,
                            EventType::Normal,
                            captf_api::events::PLAN_READY,
                            &message,
                        )
                        .await;
                    }
                    status.plan = Some(shown);
                }
                _ => {
                    conds.set(
                        types::APPLY_JOB_SUCCEEDED,
                        Status::False,
                        reasons::APPLY_FAILED,
                        &format!("plan Job {} succeeded but left no readable plan; it is planned again after the retry delay", f.name),
                        generation,
                        now,
                    );
                }
            }
        }
        (Operation::Apply, false) if f.markers.contains_key(annotations::PLAN_CHANGED) => {
            count_approval(ctx, "superseded");
            let plan = f.result.as_ref().and_then(|r| r.plan.as_ref());
            let mut message = format!(
                "Job {}: the approved plan no longer matches what would be applied; nothing was applied",
                f.name
            );
            if let (Some(plan), Some(inputs)) = (plan, f.inputs_hash()) {
                let shown = approvals::plan_status(&f.name, inputs, plan, now);
                message.push_str(&format!(
                    ". The new plan: {}",
                    approvals::awaiting_message(key.namespace(), key.name(), &shown, None)
                ));
                status.plan = Some(shown);
            } else {
                status.plan = None;
            }
            conds.set(
                types::APPLY_JOB_SUCCEEDED,
                Status::Unknown,
                reasons::PLAN_CHANGED,
                &message,
                generation,
                now,
            );
            publish(
                ctx,
                tc,
                EventType::Warning,
                captf_api::events::PLAN_CHANGED,
                &message,
            )
            .await;
        }
        (Operation::Apply, false) if f.annotations.contains_key(annotations::APPROVED_PLAN) => {
            count_approval(ctx, "failed");
        }
        _ => {}
    }
    Ok(())
}

/// `captf_plan_approvals_total`: a Manual plan's way from created to applied (or not).
fn count_approval(ctx: &Context, result: &'static str) {
    ctx.metrics
        .plan_approvals_total
        .get_or_create(&crate::metrics::KindResult { kind: KIND, result })
        .inc();
}

/// Outputs from state into status: provisioned latch, health, endpoint write-back, exports.
#[allow(clippy::too_many_arguments)]
async fn apply_outputs(
    ctx: &Context,
    api: &Api<TerraformCluster>,
    tc: &TerraformCluster,
    cluster: Option<&capi::Cluster>,
    state: &captf_state::DecodedState,
    conds: &mut Conditions,
    status: &mut TerraformClusterStatus,
    generation: Option<i64>,
    now: Timestamp,
) -> Result<()> {
    status.workspace.observed_state_serial = i64::try_from(state.serial).ok().filter(|s| *s >= 1);
    let cluster_outputs = match outputs::decode(Role::Cluster, state, conds, generation, now) {
        Some(captf_contract::RoleOutputs::Cluster(c)) => Some(c),
        _ => None,
    };
    let health = cluster_outputs.as_ref().map(|c| c.health.clone());
    outputs::health(&health, conds, generation, now);
    let pending = health
        .as_ref()
        .is_some_and(|h| h.state == captf_contract::HealthState::Pending);
    if state.inputs_hash.is_some() && cluster_outputs.is_some() && !pending && !provisioned(status)
    {
        status.workspace.initialization = Some(Initialization {
            provisioned: Some(true),
        });
    }
    let Some(outputs) = cluster_outputs else {
        return Ok(());
    };
    status.failure_domains = Some(
        outputs
            .failure_domains
            .iter()
            .map(|f| captf_api::FailureDomain {
                name: f.name.clone(),
                control_plane: Some(f.control_plane),
                attributes: Some(f.attributes.clone()),
            })
            .collect(),
    )
    .filter(|v: &Vec<_>| !v.is_empty());
    let exports = captf_contract::canonical_json(&outputs.exports);
    if exports.len() <= captf_api::cluster::MAX_PUBLISHED_EXPORTS_BYTES {
        status.exports = Some(outputs.exports.clone());
    } else {
        status.exports = None;
        publish(
            ctx,
            tc,
            EventType::Warning,
            captf_api::events::EXPORTS_NOT_PUBLISHED,
            "exports are over 65536 bytes and were not published in status.exports",
        )
        .await;
    }
    // The module's endpoint goes to spec once, when the user set none.
    let spec_complete = tc
        .spec
        .control_plane_endpoint
        .as_ref()
        .is_some_and(|e| e.is_complete());
    if let Some(endpoint) = &outputs.control_plane_endpoint
        && !spec_complete
    {
        let patch = serde_json::json!({
            "metadata": {"annotations": {annotations::ENDPOINT_SOURCE: annotations::ENDPOINT_SOURCE_MODULE}},
            "spec": {"controlPlaneEndpoint": {"host": endpoint.host, "port": endpoint.port}},
        });
        api.patch(
            &tc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .during(|| "writing spec.controlPlaneEndpoint".to_owned())?;
    }
    if provisioned(status) {
        let cluster_endpoint = cluster
            .and_then(|c| c.spec.control_plane_endpoint.as_ref())
            .is_some_and(capi::ApiEndpoint::is_valid);
        if outputs.control_plane_endpoint.is_some() || spec_complete || cluster_endpoint {
            conds.set(
                types::ENDPOINT_AVAILABLE,
                Status::True,
                reasons::ENDPOINT_AVAILABLE,
                "",
                generation,
                now,
            );
        } else {
            conds.set(types::ENDPOINT_AVAILABLE, Status::False, reasons::WAITING_FOR_ENDPOINT, "neither the module's control_plane_endpoint output nor the Cluster's spec.controlPlaneEndpoint is set", generation, now);
        }
    }
    Ok(())
}

async fn publish(ctx: &Context, tc: &TerraformCluster, type_: EventType, reason: &str, note: &str) {
    super::pass::publish(ctx, tc, type_, reason, note).await;
}
