//! The owner lookup of the preamble (§3.3): an owner reference only counts when the owner
//! names the object back, so a forged owner reference runs nothing.

use captf_api::conditions::{Status, reasons};
use captf_api::labels;
use kube::api::{Api, DynamicObject};
use kube::{Resource, ResourceExt};

use crate::capi::{self, Owner};
use crate::error::{KubeContext, Result};
use crate::reconcile::Context;

/// Why the owner does not count: `DependenciesReady` status, reason and message.
pub type Gate = (Status, &'static str, String);

/// Why the preamble ends the pass before it observes anything of the object's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    /// A dependency is missing or not ready: `DependenciesReady` says which.
    Gate(Gate),
    /// A Job of the cluster may be writing the cluster's state, which the member would read:
    /// the pass looks again soon and changes nothing meanwhile.
    ClusterBusy { cluster: String, job: String },
}

impl Hold {
    /// The cluster and its Job that hold a member's pass.
    pub fn busy(self) -> Option<(String, String)> {
        match self {
            Hold::ClusterBusy { cluster, job } => Some((cluster, job)),
            Hold::Gate(_) => None,
        }
    }
}

impl From<Gate> for Hold {
    fn from(gate: Gate) -> Self {
        Hold::Gate(gate)
    }
}

/// The verified owner `O` of `object`, or the gate saying why there is none. With no owner
/// reference at all the object waits (`Unknown/WaitingForOwner`); `others` is the status and
/// reason when it has owners, but none of kind `O` (a control plane's, before the Machine's).
pub async fn owner<O: Owner, K: Resource<DynamicType = ()>>(
    ctx: &Context,
    object: &K,
    others: (Status, &'static str),
) -> Result<std::result::Result<O, Gate>> {
    let kind = K::kind(&());
    let namespace = object.namespace().unwrap_or_default();
    let reference = object
        .owner_references()
        .iter()
        .find(|o| o.kind == O::KIND && o.api_version.starts_with(&format!("{}/", capi::GROUP)))
        .cloned();
    let Some(reference) = reference else {
        let (status, reason) = if object.owner_references().is_empty() {
            (Status::Unknown, reasons::WAITING_FOR_OWNER)
        } else {
            others
        };
        return Ok(Err((
            status,
            reason,
            format!(
                "waiting for a CAPI {} to reference this {kind} in its infrastructureRef (CAPI then sets the owner reference)",
                O::KIND
            ),
        )));
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &O::resource());
    let Some(found) = api
        .get_opt(&reference.name)
        .await
        .during(|| format!("reading {} {namespace}/{}", O::KIND, reference.name))?
    else {
        return Ok(Err((
            Status::False,
            reasons::OWNER_NOT_FOUND,
            format!("the owner {} {} does not exist", O::KIND, reference.name),
        )));
    };
    let owner: O = serde_json::from_value(serde_json::to_value(&found)?)?;
    let named = owner.infrastructure_ref().is_some_and(|r| {
        r.kind == kind
            && r.name == object.name_any()
            && (r.api_group.is_empty() || r.api_group == captf_api::GROUP)
    });
    let problem = if !named {
        Some(format!(
            "{} {} spec.infrastructureRef does not name this {kind}",
            O::KIND,
            reference.name
        ))
    } else if owner
        .meta()
        .uid
        .as_deref()
        .is_some_and(|uid| uid != reference.uid)
    {
        Some(format!(
            "the owner reference's UID does not match {} {}",
            O::KIND,
            reference.name
        ))
    } else if let Some(label) = object.labels().get(labels::CLUSTER_NAME)
        && owner.cluster_name().is_some_and(|c| c != label)
    {
        Some(format!(
            "the cluster.x-k8s.io/cluster-name label {label} does not match {} {} (its cluster is {})",
            O::KIND,
            reference.name,
            owner.cluster_name().unwrap_or_default()
        ))
    } else {
        None
    };
    Ok(match problem {
        Some(p) => Err((Status::False, reasons::OWNER_MISMATCH, p)),
        None => Ok(owner),
    })
}
