//! TerraformCluster, TerraformMachine and TerraformMachinePool (operations.md §6.3).

use captf_api::cluster::TerraformClusterSpec;
use captf_api::{TerraformCluster, TerraformMachine, TerraformMachinePool};
use captf_contract::Role;

use kube::ResourceExt;

use super::jobs::job_policy;
use super::meta::requests;
use super::workspace::workspace;
use super::{Change, ManagerUser};
use crate::webhook::violations::Violations;

/// Whether a cluster spec must name its identity (a template may leave it to a ClusterClass
/// patch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdentityRef {
    Required,
    Optional,
}

pub fn cluster(c: &Change<'_, TerraformCluster>) -> Violations {
    let mut v = Violations::default();
    requests(&mut v, c.new.annotations());
    cluster_spec(
        &mut v,
        "spec",
        &c.new.spec,
        c.old.map(|o| &o.spec),
        IdentityRef::Required,
    );
    if let Some(old) = c.old {
        let complete = |spec: &TerraformClusterSpec| {
            spec.control_plane_endpoint
                .as_ref()
                .filter(|e| e.is_complete())
                .cloned()
        };
        if let Some(was) = complete(&old.spec)
            && c.new.spec.control_plane_endpoint.as_ref() != Some(&was)
        {
            v.immutable(
                "spec.controlPlaneEndpoint",
                "it cannot change once it has both host and port: CAPI and every kubeconfig already use it; create a new cluster to move the endpoint",
            );
        }
    }
    v
}

/// The rules of a cluster spec at `path` (`spec`, or `spec.template.spec` of a template).
/// `spec.defaults.jobs` is checked whenever it changes, deleting or not: the destroy Jobs of
/// the cluster's machines and pools run with it.
pub fn cluster_spec(
    v: &mut Violations,
    path: &str,
    new: &TerraformClusterSpec,
    old: Option<&TerraformClusterSpec>,
    identity: IdentityRef,
) {
    workspace(
        v,
        path,
        Role::Cluster,
        &new.workspace,
        old.map(|o| &o.workspace),
    );
    let defaults_jobs =
        |spec: &TerraformClusterSpec| spec.defaults.as_ref().and_then(|d| d.jobs.clone());
    if old.is_none_or(|old| defaults_jobs(old) != defaults_jobs(new))
        && let Some(policy) = defaults_jobs(new)
    {
        job_policy(v, &format!("{path}.defaults.jobs"), &policy);
    }
    if identity == IdentityRef::Required && new.workspace.identity_ref.is_none() {
        v.required(
            format!("{path}.identityRef"),
            "name the TerraformClusterIdentity whose credentials the cluster's Jobs use (spec.defaults.identityRef only applies to machines and pools)",
        );
    }
    if let Some(endpoint) = &new.control_plane_endpoint
        && endpoint.host.is_some() != endpoint.port.is_some()
    {
        v.invalid(
            format!("{path}.controlPlaneEndpoint"),
            "set host and port together, or neither (the module's outputs can supply the endpoint)",
        );
    }
}

pub fn machine(c: &Change<'_, TerraformMachine>, manager: &ManagerUser) -> Violations {
    let mut v = Violations::default();
    requests(&mut v, c.new.annotations());
    machine_spec(&mut v, "spec", c);
    if let Some(old) = c.old {
        provider_id(
            &mut v,
            c.new.spec.provider_id.as_deref(),
            old.spec.provider_id.as_deref(),
            c.user,
            manager,
        );
    }
    v
}

/// Workspace rules and the immutable fields of a machine spec.
fn machine_spec(v: &mut Violations, path: &str, c: &Change<'_, TerraformMachine>) {
    let (new, old) = (&c.new.spec.workspace, c.old.map(|o| &o.spec.workspace));
    workspace(v, path, Role::Machine, new, old);
    let Some(old) = old else { return };
    const REPLACE: &str = "a machine is replaced, never changed: roll its MachineDeployment to a new TerraformMachineTemplate, or delete the Machine";
    if new.source != old.source {
        v.immutable(format!("{path}.source"), REPLACE);
    }
    if new.identity_ref != old.identity_ref {
        v.immutable(format!("{path}.identityRef"), REPLACE);
    }
    // Compared as JSON values: a client that re-serialises the same variables changes nothing.
    if new.variables != old.variables {
        v.immutable(format!("{path}.variables"), REPLACE);
    }
    if new.variables_from != old.variables_from {
        v.immutable(format!("{path}.variablesFrom"), REPLACE);
    }
}

/// `spec.providerID` is written once, from empty, by the manager itself; `clusterctl move`
/// recreates objects with theirs, which is a create and allowed.
fn provider_id(
    v: &mut Violations,
    new: Option<&str>,
    old: Option<&str>,
    user: &str,
    manager: &ManagerUser,
) {
    let (new, old) = (new.filter(|s| !s.is_empty()), old.filter(|s| !s.is_empty()));
    match (old, new) {
        (Some(was), now) if now != Some(was) => v.forbidden(
            "spec.providerID",
            format!(
                "providerID can only be set once, from empty to non-empty; it is {was:?} and stays so for the machine's life"
            ),
        ),
        (None, Some(_)) => match manager.name() {
            Some(own) if own == user => {}
            Some(own) => v.forbidden(
                "spec.providerID",
                format!(
                    "only the provider's controller ({own}) may set providerID on an existing TerraformMachine; it comes from the module output provider_id, so leave it unset"
                ),
            ),
            None => v.forbidden(
                "spec.providerID",
                "only the provider's controller may set providerID on an existing TerraformMachine, and this manager does not know its own user: set POD_NAMESPACE and SERVICE_ACCOUNT_NAME on the manager Deployment (config/manager does)",
            ),
        },
        _ => {}
    }
}

pub fn machine_pool(c: &Change<'_, TerraformMachinePool>) -> Violations {
    let mut v = Violations::default();
    requests(&mut v, c.new.annotations());
    workspace(
        &mut v,
        "spec",
        Role::MachinePool,
        &c.new.spec.workspace,
        c.old.map(|o| &o.spec.workspace),
    );
    v
}
