//! What the one reconcile flow asks of a workload kind ([`Adapter`]), and what a pass carries
//! from one step to the next ([`Work`], [`Seen`]): the types the flow, the interpreter and the
//! kinds share.

use std::future::Future;

use captf_api::conditions::Status;
use captf_api::names::WorkloadKind;
use captf_api::{Condition, WorkspaceSpec, WorkspaceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

use crate::conditions::Conditions;
use crate::decide::Finished;
use crate::decide::{self, Effect, Policy, Snapshot, StateView};
use crate::error::{Error, Result};
use crate::job::EffectivePolicy;
use crate::reconcile::Context;
use crate::reconcile::act::Acted;
use crate::reconcile::act::launch::RenderedExports;
use crate::reconcile::observe::jobs::ObservedJob;
use crate::reconcile::observe::outputs::Reading;
use crate::reconcile::observe::owner::Hold;
use crate::reconcile::observe::state::{DurableInputs, StateRead};
use crate::reconcile::pass::Pass;
use crate::reconcile::pass::{WithWorkspaceStatus, Workload};

/// What a kind found from its verified owner: what it belongs to and, while it renders, its
/// inputs; or the gate saying what is still missing.
pub type Found<A> =
    std::result::Result<(<A as Adapter>::Deps, Option<<A as Adapter>::Inputs>), Hold>;

/// What the Jobs of a live object render.
pub struct Rendering {
    pub rendered: captf_contract::Rendered,
    /// Pools: the cluster exports the apply renders.
    pub exports: Option<RenderedExports>,
    /// Pools: set when the apply is guarded; an approval names this hash.
    pub approval_hash: Option<String>,
}

/// What a pass carries from one step to the next.
pub struct Work<A: Adapter> {
    /// The status being built; patched once at the end.
    pub status: A::Status,
    pub conds: Conditions,
    pub jobs: Vec<ObservedJob>,
    /// The Jobs that finished since the last pass, recorded in this one.
    pub finished: Vec<Finished>,
    /// What the last apply rendered.
    pub durable: DurableInputs,
    /// What the object belongs to; `None` only while it is deleted without it.
    pub deps: Option<A::Deps>,
    pub deleting: bool,
    /// The writes observe found due, in the order found; [`Decision::effects`] places them
    /// among the decision's, so observe only reads.
    ///
    /// [`Decision::effects`]: crate::decide::Decision::effects
    pub writes: Vec<Effect>,
    /// What the frame's conditions are composed from ([`decide::status::frame`]).
    pub frame: decide::status::Frame,
    /// What the kind carries between its own steps.
    pub own: A::Own,
}

impl<A: Adapter> Work<A> {
    /// The conditions as this pass says them: those it set so far, and its frame's
    /// ([`decide::status::frame`]).
    pub fn said(&self, pass: &Pass<'_, A>) -> Conditions {
        let mut conds = self.conds.clone();
        let frame = decide::status::frame(&self.frame, pass.key);
        conds.say(frame, pass.generation, pass.now);
        conds
    }

    /// A pass before it read anything: the object's status and conditions as they are.
    pub fn of(object: &A, deleting: bool) -> Self {
        Work {
            status: object.status().cloned().unwrap_or_default(),
            conds: Conditions::from(object.status().and_then(A::conditions)),
            jobs: Vec::new(),
            finished: Vec::new(),
            durable: DurableInputs::default(),
            deps: None,
            deleting,
            writes: Vec::new(),
            frame: decide::status::Frame {
                deleting,
                ..Default::default()
            },
            own: A::Own::default(),
        }
    }
}

/// A workload kind: only what is its own. The flow asks it in this order: its dependencies
/// (and inputs), its side of each finished Job, its own reads, its outputs, its rendering, its
/// part of the snapshot, and its side of a wait or a launch.
pub trait Adapter:
    Workload
    + WithWorkspaceStatus
    + Resource<Scope = kube::core::NamespaceResourceScope>
    + Send
    + Sync
    + 'static
{
    const WORKLOAD: WorkloadKind;
    /// `DependenciesReady` while no owner names the object back yet.
    const WITHOUT_OWNER: (Status, &'static str);
    /// The CAPI object that owns it.
    type Owner: crate::capi::Owner + Send + Sync;
    type Status: Default + Clone + serde::Serialize + Send + Sync;
    /// What the object belongs to, found from its owner.
    type Deps: Send + Sync;
    /// What a live object renders from.
    type Inputs: Send + Sync;
    /// What the kind carries from one of its steps to a later one.
    type Own: Default + Send + Sync;

    fn status(&self) -> Option<&Self::Status>;
    fn conditions(status: &Self::Status) -> Option<&Vec<Condition>>;
    fn workspace(status: &Self::Status) -> &WorkspaceStatus;
    fn workspace_mut(status: &mut Self::Status) -> &mut WorkspaceStatus;
    fn spec(&self) -> &WorkspaceSpec;

    /// What the object belongs to and, unless `deleting` (or, for a kind applied once,
    /// `provisioned`), its inputs.
    fn dependencies(
        pass: &Pass<'_, Self>,
        owner: Self::Owner,
        provisioned: bool,
        deleting: bool,
    ) -> impl Future<Output = Result<Found<Self>>> + Send;
    /// What it belongs to pauses it (the CAPI Cluster's `spec.paused`).
    fn paused_by(deps: &Self::Deps) -> bool;
    /// The CAPI Cluster's name.
    fn cluster_name(&self, deps: Option<&Self::Deps>) -> String;
    /// The TerraformClusterIdentity its Jobs run with.
    fn identity(&self, deps: Option<&Self::Deps>, ctx: &Context) -> Option<String>;
    /// `spec.maxActiveJobs` of its cluster.
    fn max_active_jobs(&self, deps: Option<&Self::Deps>) -> Option<i32>;
    fn job_policy(&self, deps: Option<&Self::Deps>) -> EffectivePolicy;
    fn policy(&self, deps: Option<&Self::Deps>, ctx: &Context, jobs: &EffectivePolicy) -> Policy;

    /// The kind's side of a finished Job: what it records in status (edited in `work`) and
    /// the effects that follow, carried out before the durable inputs are read again.
    fn record(
        pass: &Pass<'_, Self>,
        finished: &Finished,
        work: &mut Work<Self>,
    ) -> impl Future<Output = Result<Vec<Effect>>> + Send {
        let _ = (pass, finished, work);
        async { Ok(Vec::new()) }
    }
    /// Reads of its own once no Job runs.
    fn observe(
        pass: &Pass<'_, Self>,
        work: &mut Work<Self>,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (pass, work);
        async { Ok(()) }
    }
    /// Outputs from a readable state into status (and spec), and what health says.
    fn outputs(
        pass: &Pass<'_, Self>,
        state: &captf_state::DecodedState,
        work: &mut Work<Self>,
    ) -> impl Future<Output = Result<Reading>> + Send;
    /// What its Jobs render now.
    fn render(
        pass: &Pass<'_, Self>,
        inputs: Option<&Self::Inputs>,
        state: &StateView,
        work: &mut Work<Self>,
    ) -> impl Future<Output = Result<Option<Rendering>>> + Send;
    /// Its part of the snapshot.
    fn complete(&self, snapshot: &mut Snapshot, work: &mut Work<Self>) {
        let _ = (snapshot, work);
    }
    /// What it says while it waits for `reason`.
    fn wait(pass: &Pass<'_, Self>, reason: decide::Reason, work: &mut Work<Self>) {
        let _ = (pass, reason, work);
    }
    /// What follows once a Job was started (or had to wait).
    fn launched(start: &decide::Start, acted: &Acted) -> Vec<Effect> {
        let _ = (start, acted);
        Vec::new()
    }
}

/// The part of an [`Adapter`] every kind writes alike, for a kind whose status is `$status`
/// with the shared `workspace` and `conditions`, and whose spec has the shared `workspace`.
macro_rules! shared_parts {
    ($status:ty) => {
        type Status = $status;
        fn status(&self) -> Option<&Self::Status> {
            self.status.as_ref()
        }
        fn conditions(status: &Self::Status) -> Option<&Vec<captf_api::Condition>> {
            status.conditions.as_ref()
        }
        fn workspace(status: &Self::Status) -> &captf_api::WorkspaceStatus {
            &status.workspace
        }
        fn workspace_mut(status: &mut Self::Status) -> &mut captf_api::WorkspaceStatus {
            &mut status.workspace
        }
        fn spec(&self) -> &captf_api::WorkspaceSpec {
            &self.spec.workspace
        }
    };
}
pub(crate) use shared_parts;

/// The `provisioned` latch.
pub fn provisioned(workspace: &WorkspaceStatus) -> bool {
    workspace
        .initialization
        .as_ref()
        .and_then(|i| i.provisioned)
        .unwrap_or(false)
}

/// What the pass observed once no Job runs, for the decision and the launch.
pub struct Seen {
    /// The TerraformClusterIdentity its Jobs run with.
    pub identity: Option<String>,
    pub state: StateRead,
    pub view: StateView,
    /// A dead runner's lock, handed to the next Job to release.
    pub force_unlock: Option<(String, String)>,
    pub health: Reading,
    pub rendering: Option<Rendering>,
    pub owner_ref: OwnerReference,
    pub cluster_name: String,
    /// `status.observedStateSerial` before the outputs recorded the serial read now.
    pub observed_serial: Option<i64>,
}

/// The owner reference every Secret and lease of the object carries.
pub fn owner_reference<A: Resource<DynamicType = ()>>(object: &A) -> Result<OwnerReference> {
    object
        .controller_owner_ref(&())
        .ok_or_else(|| Error::InvalidObject(format!("{} without a UID", A::kind(&()))))
}
