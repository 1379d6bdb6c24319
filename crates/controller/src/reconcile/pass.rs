//! One pass over one object, as every phase sees it: the read-only context (the object, its
//! key, the time of the pass) and what a pass needs of a kind's object. The reads are in
//! [`crate::reconcile::observe`], the writes in [`crate::reconcile::interpret`] and
//! [`crate::reconcile::act`].

use captf_api::names::ObjectKey;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use crate::reconcile::Context;

/// What a pass needs of a kind's object.
pub trait Workload:
    Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug
{
}

impl<K> Workload for K where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug
{
}

/// A workload kind's status part that every kind shares.
pub trait WithWorkspaceStatus {
    fn workspace_status(&self) -> Option<&captf_api::WorkspaceStatus>;
}

impl WithWorkspaceStatus for captf_api::TerraformCluster {
    fn workspace_status(&self) -> Option<&captf_api::WorkspaceStatus> {
        self.status.as_ref().map(|s| &s.workspace)
    }
}

impl WithWorkspaceStatus for captf_api::TerraformMachine {
    fn workspace_status(&self) -> Option<&captf_api::WorkspaceStatus> {
        self.status.as_ref().map(|s| &s.workspace)
    }
}

impl WithWorkspaceStatus for captf_api::TerraformMachinePool {
    fn workspace_status(&self) -> Option<&captf_api::WorkspaceStatus> {
        self.status.as_ref().map(|s| &s.workspace)
    }
}

/// One pass over one object: who it is and when the pass runs.
pub struct Pass<'a, K> {
    pub ctx: &'a Context,
    pub object: &'a K,
    pub key: &'a ObjectKey,
    /// The kind, as metrics label it.
    pub kind: &'static str,
    pub generation: Option<i64>,
    pub now: Timestamp,
}
