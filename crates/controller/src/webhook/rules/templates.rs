//! The three template kinds (operations.md §6.3): the rules of the kind they stamp out, and
//! `spec.template.spec` frozen, because CAPI compares clones against it to decide rollouts.
//! ClusterClass topology dry-runs are exempt: the topology controller server-side-applies a
//! changed template with `dryRun` to compute what a rebase would do, and must not be refused.

use captf_api::cluster::TerraformClusterSpec;
use captf_api::common::ObjectMeta;
use captf_api::{
    TerraformClusterTemplate, TerraformMachinePoolSpec, TerraformMachinePoolTemplate,
    TerraformMachineSpec, TerraformMachineTemplate,
};
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

/// What the three template kinds share: metadata to copy, and the spec they stamp out.
trait Template: kube::Resource {
    type Spec: PartialEq;
    /// Who points at the template, for the message that says how to change it.
    const USERS: &'static str;
    fn template_metadata(&self) -> Option<&ObjectMeta>;
    fn template_spec(&self) -> &Self::Spec;
}

impl Template for TerraformClusterTemplate {
    type Spec = TerraformClusterSpec;
    const USERS: &'static str = "the ClusterClass";
    fn template_metadata(&self) -> Option<&ObjectMeta> {
        self.spec.template.metadata.as_ref()
    }
    fn template_spec(&self) -> &Self::Spec {
        &self.spec.template.spec
    }
}

impl Template for TerraformMachineTemplate {
    type Spec = TerraformMachineSpec;
    const USERS: &'static str = "the MachineDeployment (or ClusterClass)";
    fn template_metadata(&self) -> Option<&ObjectMeta> {
        self.spec.template.metadata.as_ref()
    }
    fn template_spec(&self) -> &Self::Spec {
        &self.spec.template.spec
    }
}

impl Template for TerraformMachinePoolTemplate {
    type Spec = TerraformMachinePoolSpec;
    const USERS: &'static str = "the ClusterClass";
    fn template_metadata(&self) -> Option<&ObjectMeta> {
        self.spec.template.metadata.as_ref()
    }
    fn template_spec(&self) -> &Self::Spec {
        &self.spec.template.spec
    }
}

/// The stamped-out kind's `rules` over the template spec (new, old), the metadata, and the
/// frozen spec.
fn template<K: Template<DynamicType = ()>>(
    c: &Change<'_, K>,
    rules: impl FnOnce(&mut Violations, &K::Spec, Option<&K::Spec>),
) -> Violations {
    let mut v = Violations::default();
    rules(
        &mut v,
        c.new.template_spec(),
        c.old.map(Template::template_spec),
    );
    if let Some(meta) = c.new.template_metadata() {
        metadata(&mut v, meta);
    }
    frozen(&mut v, c);
    v
}

pub fn cluster_template(c: &Change<'_, TerraformClusterTemplate>) -> Violations {
    template(c, |v, new, old| {
        cluster_spec(v, SPEC, new, old, IdentityRef::Optional)
    })
}

pub fn machine_template(c: &Change<'_, TerraformMachineTemplate>) -> Violations {
    template(c, |v, new, old| {
        let old = old.map(|o| &o.workspace);
        workspace(v, SPEC, Role::Machine, &new.workspace, old)
    })
}

pub fn machine_pool_template(c: &Change<'_, TerraformMachinePoolTemplate>) -> Violations {
    template(c, |v, new, old| {
        let old = old.map(|o| &o.workspace);
        workspace(v, SPEC, Role::MachinePool, &new.workspace, old)
    })
}

/// `spec.template.spec` may not change, except in a topology dry-run.
fn frozen<K: Template<DynamicType = ()>>(v: &mut Violations, c: &Change<'_, K>) {
    let Some(old) = c.old else { return };
    if old.template_spec() != c.new.template_spec() && !topology_dry_run(c) {
        v.immutable(
            SPEC,
            &format!(
                "create a new {} with the change and point {} at it; objects already stamped out keep the old template",
                K::kind(&()),
                K::USERS
            ),
        );
    }
}

/// CAPI's `topology.IsDryRunRequest`: a dry-run whose object carries the dry-run annotation.
fn topology_dry_run<K: kube::Resource>(c: &Change<'_, K>) -> bool {
    c.dry_run && c.new.annotations().contains_key(TOPOLOGY_DRY_RUN)
}

fn metadata(v: &mut Violations, meta: &ObjectMeta) {
    if let Some(l) = &meta.labels {
        labels(v, "spec.template.metadata.labels", l);
    }
    if let Some(a) = &meta.annotations {
        annotations(v, "spec.template.metadata.annotations", a);
    }
}
