//! The TerraformCluster as an [`Adapter`] of the one flow: its owner is the CAPI Cluster, its
//! inputs render every pass, and what is its own: the Manual apply policy and the approvals of
//! plans, its outputs written to status and spec (endpoint, failure domains, exports), and a
//! deletion that waits for its machines and pools.

pub mod dependents;

use std::time::Duration;

use captf_api::conditions::{Status, reasons, types};
use captf_api::names::WorkloadKind;
use captf_api::{Initialization, TerraformCluster, TerraformClusterStatus, annotations, labels};
use captf_contract::{Role, RoleInputs};
use kube::ResourceExt;
use kube::api::Api;

use crate::capi;
use crate::conditions::Conditions;
use crate::decide::Finished;
use crate::decide::approvals;
use crate::decide::book::Shown;
use crate::decide::{self, Approvals, Lifecycle, Policy, Snapshot, StateView};
use crate::decide::{Counter, Effect, Note};
use crate::error::{KubeContext, Result};
use crate::job::{EffectivePolicy, PolicyLayers};
use crate::reconcile::act::Acted;
use crate::reconcile::adapter::{Adapter, Found, Rendering, Work, provisioned, shared_parts};
use crate::reconcile::kinds::cluster::dependents::Dependents;
use crate::reconcile::observe::outputs::Reading;
use crate::reconcile::observe::owner::Hold;
use crate::reconcile::pass::Pass;
use crate::reconcile::{Context, observe::outputs};

/// What a cluster carries between its own steps.
#[derive(Default)]
pub struct Own {
    /// Deleting with machines or pools left: the destroy waits for them.
    dependents: bool,
    /// A plan waits for approval and the plan key it was made with is gone.
    plan_key_lost: bool,
}

/// A cluster: its owner is the CAPI Cluster; it renders every pass from that Cluster and its
/// variables; Manual apply policy and the approvals of plans are its own, and so is holding
/// its deletion while machines or pools remain.
impl Adapter for TerraformCluster {
    const WORKLOAD: WorkloadKind = WorkloadKind::Cluster;
    const WITHOUT_OWNER: (Status, &'static str) = (Status::Unknown, reasons::WAITING_FOR_OWNER);
    type Owner = capi::Cluster;
    type Deps = capi::Cluster;
    type Inputs = captf_contract::Variables;
    type Own = Own;

    shared_parts!(TerraformClusterStatus);

    /// The variables sources are not needed to destroy: that runs from the durable inputs.
    async fn dependencies(
        pass: &Pass<'_, Self>,
        cluster: capi::Cluster,
        _provisioned: bool,
        deleting: bool,
    ) -> Result<Found<Self>> {
        if deleting {
            return Ok(Ok((cluster, None)));
        }
        let (tc, workspace) = (pass.object, &pass.object.spec.workspace);
        let layers = PolicyLayers::for_cluster(tc);
        let ns = pass.key.namespace();
        Ok(crate::reconcile::observe::variables::resolve(
            pass.ctx,
            ns,
            Role::Cluster,
            workspace,
            layers,
        )
        .await?
        .map(|variables| (cluster, Some(variables)))
        .map_err(Hold::from))
    }
    fn paused_by(cluster: &capi::Cluster) -> bool {
        cluster.paused()
    }
    fn cluster_name(&self, cluster: Option<&capi::Cluster>) -> String {
        cluster
            .and_then(|c| c.metadata.name.clone())
            .or_else(|| self.labels().get(labels::CLUSTER_NAME).cloned())
            .unwrap_or_default()
    }
    fn identity(&self, _: Option<&capi::Cluster>, _: &Context) -> Option<String> {
        let identity = self.spec.workspace.identity_ref.as_ref();
        identity.map(|r| r.name.clone())
    }
    fn max_active_jobs(&self, _: Option<&capi::Cluster>) -> Option<i32> {
        self.spec.max_active_jobs
    }
    fn job_policy(&self, _: Option<&capi::Cluster>) -> EffectivePolicy {
        EffectivePolicy::resolve(&PolicyLayers::for_cluster(self))
    }
    fn policy(&self, _: Option<&capi::Cluster>, ctx: &Context, jobs: &EffectivePolicy) -> Policy {
        Policy {
            apply_policy: self.spec.apply_policy.unwrap_or_default(),
            drift_interval: drift_interval(self, ctx),
            drift_action: self
                .spec
                .drift
                .as_ref()
                .and_then(|d| d.action)
                .unwrap_or_default(),
            failed_history_limit: jobs.failed_jobs_history_limit,
            refresh_after_apply: false,
            membership_interval: None,
            health_check_interval: None,
        }
    }

    async fn record(
        pass: &Pass<'_, Self>,
        f: &Finished,
        work: &mut Work<Self>,
    ) -> Result<Vec<Effect>> {
        let before = decide::book::PlanBefore {
            key: pass.key,
            shown: work.status.plan.as_ref().map(|p| p.plan_hash.as_str()),
            approve_plan: pass
                .object
                .annotations()
                .get(annotations::APPROVE_PLAN)
                .map(String::as_str),
        };
        let (shown, booked) = decide::book::plan(f, &before, pass.now);
        match shown {
            Shown::Keep => {}
            Shown::Clear => work.status.plan = None,
            Shown::Plan(plan) => work.status.plan = Some(plan),
        }
        let workspace = &mut work.status.workspace;
        Ok(pass.booked(booked, &mut work.conds, workspace))
    }

    async fn observe(pass: &Pass<'_, Self>, work: &mut Work<Self>) -> Result<()> {
        if !work.deleting {
            work.own.plan_key_lost = match &work.status.plan {
                Some(plan) if !approvals::is_empty(&plan.plan_hash) => plan_key_lost(pass).await?,
                _ => false,
            };
            return Ok(());
        }
        let name = pass.object.cluster_name(work.deps.as_ref());
        let dependents = Dependents::of(&pass.ctx.client, pass.key.namespace(), &name).await?;
        work.own.dependents = !dependents.is_empty();
        work.frame.dependents = Some(match dependents.message() {
            Some(message) => decide::status::Dependents::Left(message),
            None => decide::status::Dependents::None,
        });
        Ok(())
    }

    async fn outputs(
        pass: &Pass<'_, Self>,
        state: &captf_state::DecodedState,
        work: &mut Work<Self>,
    ) -> Result<Reading> {
        let cluster = work.deps.as_ref();
        let (conds, status, writes) = (&mut work.conds, &mut work.status, &mut work.writes);
        apply_outputs(pass, cluster, state, (conds, status, writes)).await?;
        Ok(Reading::default())
    }

    async fn render(
        pass: &Pass<'_, Self>,
        variables: Option<&captf_contract::Variables>,
        _: &StateView,
        work: &mut Work<Self>,
    ) -> Result<Option<Rendering>> {
        let (Some(cluster), Some(variables)) = (&work.deps, variables) else {
            return Ok(None);
        };
        let tc = pass.object;
        let history = crate::inputs::ClusterHistory {
            control_plane_initialized: work.durable.rendered_bool("control_plane_initialized"),
            endpoint_from_module: tc
                .annotations()
                .get(annotations::ENDPOINT_SOURCE)
                .is_some_and(|v| v == annotations::ENDPOINT_SOURCE_MODULE),
        };
        let inputs = RoleInputs::Cluster(crate::inputs::cluster_inputs(tc, cluster, &history));
        let image = &tc.spec.workspace.source.image;
        Ok(Some(Rendering {
            rendered: captf_contract::render(Role::Cluster, image, &inputs, variables)?,
            exports: None,
            approval_hash: None,
        }))
    }

    fn complete(&self, snapshot: &mut Snapshot, work: &mut Work<Self>) {
        if self.spec.apply_policy.unwrap_or_default() == captf_api::ApplyPolicy::Automatic {
            // Back to Automatic: the apply that waited runs (guarded); the plan is moot.
            work.status.plan = None;
        }
        if let Lifecycle::Deleting(deletion) = &mut snapshot.lifecycle {
            deletion.dependents = work.own.dependents;
        }
        let annotations = self.annotations();
        snapshot.approvals = Approvals {
            destructive: annotations
                .get(annotations::APPROVE_DESTRUCTIVE_PLAN)
                .cloned(),
            plan: annotations.get(annotations::APPROVE_PLAN).cloned(),
        };
        snapshot.plan = work.status.plan.as_ref().map(|p| decide::PendingPlan {
            inputs_hash: p.inputs_hash.clone(),
            plan_hash: p.plan_hash.clone(),
            empty: approvals::is_empty(&p.plan_hash),
            key_lost: work.own.plan_key_lost,
        });
    }

    fn wait(pass: &Pass<'_, Self>, reason: decide::Reason, work: &mut Work<Self>) {
        if reason == decide::Reason::PlanAwaitingApproval
            && let Some(plan) = &work.status.plan
        {
            await_approval(pass, &mut work.conds, plan);
        }
    }

    fn launched(start: &decide::Start, acted: &Acted) -> Vec<Effect> {
        let approved = acted.active.is_some() && start.expect_plan.is_some();
        approved
            .then_some(Effect::Count(Counter::Approval("approved")))
            .into_iter()
            .collect()
    }
}

/// Whether the object's plan key is gone (asked of the API server when the cache does not
/// hold it, so a cache that lags never voids a plan).
async fn plan_key_lost(pass: &Pass<'_, TerraformCluster>) -> Result<bool> {
    let (ns, name) = (pass.key.namespace(), pass.key.plan_key_secret());
    if pass.ctx.caches.secrets.contains(ns, &name) {
        return Ok(false);
    }
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(pass.ctx.client.clone(), ns);
    let found = secrets
        .get_metadata_opt(&name)
        .await
        .during(|| format!("reading the plan key {ns}/{name}"))?;
    if found.is_none() {
        tracing::info!(namespace = %ns, name = %pass.key.name(), "the plan key is gone: the plan that waits is made again with a new key");
    }
    Ok(found.is_none())
}

/// `ApplyJobSucceeded=Unknown/PlanAwaitingApproval` for `plan`, naming an approval of another
/// plan if one is set; returns the message.
fn await_approval(
    pass: &Pass<'_, TerraformCluster>,
    conds: &mut Conditions,
    plan: &captf_api::PlanStatus,
) -> String {
    let (key, generation, now) = (pass.key, pass.generation, pass.now);
    let approval = pass.object.annotations().get(annotations::APPROVE_PLAN);
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

fn drift_interval(tc: &TerraformCluster, ctx: &Context) -> Option<Duration> {
    match tc.spec.drift.as_ref().and_then(|d| d.interval_seconds) {
        Some(0) => None,
        Some(s) => Some(Duration::from_secs(u64::try_from(s).unwrap_or(0))),
        None => Some(ctx.settings.drift_default_interval),
    }
}

/// Outputs from state into status: provisioned latch, health, endpoint write-back, exports.
async fn apply_outputs(
    pass: &Pass<'_, TerraformCluster>,
    cluster: Option<&capi::Cluster>,
    state: &captf_state::DecodedState,
    (conds, status, writes): (
        &mut Conditions,
        &mut TerraformClusterStatus,
        &mut Vec<Effect>,
    ),
) -> Result<()> {
    let (tc, generation, now) = (pass.object, pass.generation, pass.now);
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
    if state.inputs_hash.is_some()
        && cluster_outputs.is_some()
        && !pending
        && !provisioned(&status.workspace)
    {
        status.workspace.initialization = Some(Initialization {
            provisioned: Some(true),
        });
        writes.push(Effect::Event(Note::normal(
            captf_api::events::PROVISIONED,
            format!("provisioned at state serial {}", state.serial),
        )));
    }
    let Some(outputs) = cluster_outputs else {
        return Ok(());
    };
    let failure_domains_before = status.failure_domains.clone();
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
    if status.failure_domains != failure_domains_before {
        let names: Vec<&str> = outputs
            .failure_domains
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        writes.push(Effect::Event(Note::normal(
            captf_api::events::FAILURE_DOMAINS_CHANGED,
            format!("status.failureDomains: [{}]", names.join(", ")),
        )));
    }
    let exports = captf_contract::canonical_json(&outputs.exports);
    let withheld = match exports_published(state, exports.len()) {
        Published::Yes => {
            status.exports = Some(outputs.exports.clone());
            None
        }
        Published::TooLarge => {
            Some("exports are over 65536 bytes and were not published in status.exports")
        }
        Published::Sensitive => Some(
            "the module marks its exports output sensitive, so they are not published in status.exports (anyone who may view the object could read them); machines and pools still read them from the state",
        ),
        Published::Unknown => Some(
            "the state does not say whether the module's exports are sensitive (an engine before 1.8 cannot tell, or the state was written before CAPTF asked), so they are not published in status.exports; machines and pools still read them from the state",
        ),
    };
    if let Some(text) = withheld {
        status.exports = None;
        writes.push(Effect::Event(Note::warning(
            captf_api::events::EXPORTS_NOT_PUBLISHED,
            text.into(),
        )));
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
        writes.push(Effect::PatchObject {
            patch,
            what: "spec.controlPlaneEndpoint",
        });
        writes.push(Effect::Event(Note::normal(captf_api::events::CONTROL_PLANE_ENDPOINT_SET, format!(
                "spec.controlPlaneEndpoint set to {}:{} from the module's control_plane_endpoint output",
                endpoint.host, endpoint.port
            ))));
    }
    if provisioned(&status.workspace) {
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

/// Whether a cluster's exports go to `status.exports`, which anyone who may view the object
/// reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Published {
    Yes,
    /// The module marks its `exports` output sensitive.
    Sensitive,
    /// The state does not say (an engine without `issensitive()`, or written before).
    Unknown,
    /// Over [`captf_api::cluster::MAX_PUBLISHED_EXPORTS_BYTES`].
    TooLarge,
}

/// Decides [`Published`] from the root's `captf_exports_sensitive` output in `state` and the
/// size of the exports' canonical JSON.
fn exports_published(state: &captf_state::DecodedState, bytes: usize) -> Published {
    match state
        .outputs
        .get(captf_contract::EXPORTS_SENSITIVE_OUTPUT)
        .and_then(serde_json::Value::as_bool)
    {
        Some(true) => Published::Sensitive,
        None => Published::Unknown,
        Some(false) if bytes > captf_api::cluster::MAX_PUBLISHED_EXPORTS_BYTES => {
            Published::TooLarge
        }
        Some(false) => Published::Yes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(flag: Option<serde_json::Value>) -> captf_state::DecodedState {
        captf_state::DecodedState {
            serial: 2,
            lineage: "l".into(),
            terraform_version: "1.12.6".into(),
            outputs: flag
                .map(|v| (captf_contract::EXPORTS_SENSITIVE_OUTPUT.to_owned(), v))
                .into_iter()
                .collect(),
            sensitive_outputs: Default::default(),
            managed_resources: 0,
            compressed_bytes: 0,
            decompressed_bytes: 0,
            chunks: 1,
            inputs_hash: None,
        }
    }

    #[test]
    fn sensitive_or_unknown_exports_are_never_published() {
        let max = captf_api::cluster::MAX_PUBLISHED_EXPORTS_BYTES;
        let rows = [
            ("plain exports", Some(false.into()), 20, Published::Yes),
            ("at the size limit", Some(false.into()), max, Published::Yes),
            ("over it", Some(false.into()), max + 1, Published::TooLarge),
            ("sensitive", Some(true.into()), 20, Published::Sensitive),
            (
                "sensitive and large",
                Some(true.into()),
                max + 1,
                Published::Sensitive,
            ),
            ("a state from before the flag", None, 20, Published::Unknown),
            (
                "a flag that is not a bool",
                Some("false".into()),
                20,
                Published::Unknown,
            ),
        ];
        for (row, flag, bytes, want) in rows {
            assert_eq!(exports_published(&state(flag), bytes), want, "{row}");
        }
    }
}
