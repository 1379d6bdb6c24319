//! The kinds a disaster-recovery export carries, and how to reach each through the API.

use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

/// Every kind in an export. The order of the variants is the order of creation within a
/// group: owners before what they own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Identity,
    Secret,
    ConfigMap,
    CapiCluster,
    ClusterClass,
    MachineDeployment,
    MachineSet,
    MachinePool,
    Machine,
    TerraformCluster,
    TerraformClusterTemplate,
    TerraformMachineTemplate,
    TerraformMachinePoolTemplate,
    TerraformMachinePool,
    TerraformMachine,
}

/// The Cluster API kinds exported, owners first.
pub const CLUSTER_API: [Kind; 6] = [
    Kind::CapiCluster,
    Kind::ClusterClass,
    Kind::MachineDeployment,
    Kind::MachineSet,
    Kind::MachinePool,
    Kind::Machine,
];

/// The CAPTF workload and template kinds exported.
pub const TERRAFORM: [Kind; 6] = [
    Kind::TerraformCluster,
    Kind::TerraformClusterTemplate,
    Kind::TerraformMachineTemplate,
    Kind::TerraformMachinePoolTemplate,
    Kind::TerraformMachinePool,
    Kind::TerraformMachine,
];

/// The kinds outside both lists: identities and the Secrets and ConfigMaps they carry.
const OTHERS: [Kind; 3] = [Kind::Identity, Kind::Secret, Kind::ConfigMap];

impl Kind {
    /// `(group, version, kind, plural)`.
    const fn parts(self) -> (&'static str, &'static str, &'static str, &'static str) {
        const INFRA: &str = captf_api::GROUP;
        const CAPI: &str = crate::capi::GROUP;
        const CAPI_V: &str = crate::capi::VERSION;
        match self {
            Kind::Identity => (
                INFRA,
                "v1alpha1",
                "TerraformClusterIdentity",
                "terraformclusteridentities",
            ),
            Kind::Secret => ("", "v1", "Secret", "secrets"),
            Kind::ConfigMap => ("", "v1", "ConfigMap", "configmaps"),
            Kind::CapiCluster => (CAPI, CAPI_V, "Cluster", "clusters"),
            Kind::ClusterClass => (CAPI, CAPI_V, "ClusterClass", "clusterclasses"),
            Kind::MachineDeployment => (CAPI, CAPI_V, "MachineDeployment", "machinedeployments"),
            Kind::MachineSet => (CAPI, CAPI_V, "MachineSet", "machinesets"),
            Kind::MachinePool => (CAPI, CAPI_V, "MachinePool", "machinepools"),
            Kind::Machine => (CAPI, CAPI_V, "Machine", "machines"),
            Kind::TerraformCluster => (INFRA, "v1alpha1", "TerraformCluster", "terraformclusters"),
            Kind::TerraformClusterTemplate => (
                INFRA,
                "v1alpha1",
                "TerraformClusterTemplate",
                "terraformclustertemplates",
            ),
            Kind::TerraformMachineTemplate => (
                INFRA,
                "v1alpha1",
                "TerraformMachineTemplate",
                "terraformmachinetemplates",
            ),
            Kind::TerraformMachinePoolTemplate => (
                INFRA,
                "v1alpha1",
                "TerraformMachinePoolTemplate",
                "terraformmachinepooltemplates",
            ),
            Kind::TerraformMachinePool => (
                INFRA,
                "v1alpha1",
                "TerraformMachinePool",
                "terraformmachinepools",
            ),
            Kind::TerraformMachine => (INFRA, "v1alpha1", "TerraformMachine", "terraformmachines"),
        }
    }

    pub fn name(self) -> &'static str {
        self.parts().2
    }

    /// The API resource, for untyped access.
    pub fn resource(self) -> ApiResource {
        let (group, version, kind, plural) = self.parts();
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
    }

    /// Whether the kind has a status subresource (its status is written separately).
    pub fn has_status_subresource(self) -> bool {
        !matches!(self, Kind::Secret | Kind::ConfigMap)
    }
}

/// The kind of an exported object, from its `apiVersion` group and `kind`.
pub fn of(object: &Value) -> Option<Kind> {
    let api_version = object.get("apiVersion")?.as_str()?;
    let kind = object.get("kind")?.as_str()?;
    let group = api_version
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or_default();
    OTHERS
        .into_iter()
        .chain(CLUSTER_API)
        .chain(TERRAFORM)
        .find(|k| {
            let (g, _, name, _) = k.parts();
            g == group && name == kind
        })
}
