//! The three template kinds (operations.md §6.3): the rules of the kind they stamp out, and
//! `spec.template.spec` frozen, because CAPI compares clones against it to decide rollouts.
//! ClusterClass topology dry-runs are exempt: the topology controller server-side-applies a
//! changed template with `dryRun` to compute what a rebase would do, and must not be refused.

use captf_api::common::ObjectMeta;
use captf_api::templates::{
    TerraformClusterTemplateResource, TerraformMachinePoolTemplateResource,
    TerraformMachineTemplateResource,
};
use captf_api::{TerraformClusterTemplate, TerraformMachinePoolTemplate, TerraformMachineTemplate};
use captf_contract::Role;
use kube::ResourceExt;

use super::Change;
use super::meta::{annotations, labels};
use super::workloads::{IdentityRef, cluster_spec};
use super::workspace::workspace;
use crate::webhook::violations::Violations;

/// The annotation CAPI's topology controller puts on the objects of its dry-run requests.
pub const TOPOLOGY_DRY_RUN: &str = "topology.cluster.x-k8s.io/dry-run";

const SPEC: &str = "spec.template.spec";

pub fn cluster_template(c: &Change<'_, TerraformClusterTemplate>) -> Violations {
    let mut v = Violations::default();
    fn template(t: &TerraformClusterTemplate) -> &TerraformClusterTemplateResource {
        &t.spec.template
    }
    cluster_spec(
        &mut v,
        SPEC,
        &template(c.new).spec,
        c.old.map(|o| &template(o).spec),
        c.deleting(),
        IdentityRef::Optional,
    );
    metadata(&mut v, template(c.new).metadata.as_ref());
    frozen(
        &mut v,
        c,
        |t| &template(t).spec,
        "TerraformClusterTemplate",
        "the ClusterClass",
    );
    v
}

pub fn machine_template(c: &Change<'_, TerraformMachineTemplate>) -> Violations {
    let mut v = Violations::default();
    fn template(t: &TerraformMachineTemplate) -> &TerraformMachineTemplateResource {
        &t.spec.template
    }
    workspace(
        &mut v,
        SPEC,
        Role::Machine,
        &template(c.new).spec.workspace,
        c.old.map(|o| &template(o).spec.workspace),
        c.deleting(),
    );
    metadata(&mut v, template(c.new).metadata.as_ref());
    frozen(
        &mut v,
        c,
        |t| &template(t).spec,
        "TerraformMachineTemplate",
        "the MachineDeployment (or ClusterClass)",
    );
    v
}

pub fn machine_pool_template(c: &Change<'_, TerraformMachinePoolTemplate>) -> Violations {
    let mut v = Violations::default();
    fn template(t: &TerraformMachinePoolTemplate) -> &TerraformMachinePoolTemplateResource {
        &t.spec.template
    }
    workspace(
        &mut v,
        SPEC,
        Role::MachinePool,
        &template(c.new).spec.workspace,
        c.old.map(|o| &template(o).spec.workspace),
        c.deleting(),
    );
    metadata(&mut v, template(c.new).metadata.as_ref());
    frozen(
        &mut v,
        c,
        |t| &template(t).spec,
        "TerraformMachinePoolTemplate",
        "the ClusterClass",
    );
    v
}

/// `spec.template.spec` may not change, except in a topology dry-run.
fn frozen<K: kube::Resource, S: PartialEq>(
    v: &mut Violations,
    c: &Change<'_, K>,
    spec: impl Fn(&K) -> &S,
    kind: &str,
    user: &str,
) {
    let Some(old) = c.old else { return };
    if spec(old) != spec(c.new) && !topology_dry_run(c) {
        v.immutable(
            SPEC,
            &format!(
                "create a new {kind} with the change and point {user} at it; objects already stamped out keep the old template"
            ),
        );
    }
}

/// CAPI's `topology.IsDryRunRequest`: a dry-run whose object carries the dry-run annotation.
fn topology_dry_run<K: kube::Resource>(c: &Change<'_, K>) -> bool {
    c.dry_run && c.new.annotations().contains_key(TOPOLOGY_DRY_RUN)
}

fn metadata(v: &mut Violations, meta: Option<&ObjectMeta>) {
    let Some(meta) = meta else { return };
    if let Some(l) = &meta.labels {
        labels(v, "spec.template.metadata.labels", l);
    }
    if let Some(a) = &meta.annotations {
        annotations(v, "spec.template.metadata.annotations", a);
    }
}
