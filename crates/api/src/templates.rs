//! The template kinds CAPI clones workload objects from (MachineDeployments, ClusterClass).

use std::collections::BTreeMap;

use crate::Condition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::cluster::TerraformClusterSpec;
use crate::common::ObjectMeta;
use crate::machine::TerraformMachineSpec;
use crate::machinepool::TerraformMachinePoolSpec;
use crate::schema;

/// Template for TerraformClusters created through a ClusterClass.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "TerraformClusterTemplate",
    plural = "terraformclustertemplates",
    shortname = "tfct",
    namespaced,
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.template.spec.source.image"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct TerraformClusterTemplateSpec {
    /// What each created TerraformCluster looks like.
    pub template: TerraformClusterTemplateResource,
}

/// Metadata and spec of a TerraformCluster created from a template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[schemars(extend("minProperties" = 1))]
pub struct TerraformClusterTemplateResource {
    /// Labels and annotations copied to the created object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// The TerraformCluster spec.
    pub spec: TerraformClusterSpec,
}

/// Template for TerraformMachines created by MachineDeployments, MachineSets and control planes.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "TerraformMachineTemplate",
    plural = "terraformmachinetemplates",
    shortname = "tfmt",
    namespaced,
    status = "TerraformMachineTemplateStatus",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.template.spec.source.image"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct TerraformMachineTemplateSpec {
    /// What each created TerraformMachine looks like (immutable).
    pub template: TerraformMachineTemplateResource,
    /// Node capacity for autoscaler scale-from-zero; overrides the image label
    /// `io.captf.capacity` as a whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<BTreeMap<String, Quantity>>,
}

/// Metadata and spec of a TerraformMachine created from a template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
pub struct TerraformMachineTemplateResource {
    /// Labels and annotations copied to the created object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// The TerraformMachine spec.
    pub spec: TerraformMachineSpec,
}

/// CPU architecture of the nodes a template makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    Amd64,
    Arm64,
    S390x,
    Ppc64le,
}

/// Node facts for scale-from-zero, from the image label `io.captf.node-info`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct NodeInfo {
    /// CPU architecture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<Architecture>,
    /// Operating system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub operating_system: Option<String>,
}

/// Where `status.capacity` came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum CapacitySourceKind {
    Spec,
    Image,
}

/// Provenance of `status.capacity`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[schemars(extend("minProperties" = 1))]
#[x_kube(validation = Rule::new("!has(self.source) || self.source != 'Image' || has(self.image)").message("image is required when source is Image"))]
pub struct CapacitySource {
    /// `Spec` or `Image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<CapacitySourceKind>,
    /// The spec image reference last resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
}

/// Observed capacity of a machine template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TerraformMachineTemplateStatus {
    /// `CapacityResolved`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Option<Vec<Condition>>,
    /// `spec.capacity` if set, else the image label; unset if neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<BTreeMap<String, Quantity>>,
    /// From the image label `io.captf.node-info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<NodeInfo>,
    /// Where the capacity came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_source: Option<CapacitySource>,
}

/// Template for TerraformMachinePools (no status: pools have no scale-from-zero).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "TerraformMachinePoolTemplate",
    plural = "terraformmachinepooltemplates",
    shortname = "tfmpt",
    namespaced,
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.template.spec.source.image"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct TerraformMachinePoolTemplateSpec {
    /// What each created TerraformMachinePool looks like.
    pub template: TerraformMachinePoolTemplateResource,
}

/// Metadata and spec of a TerraformMachinePool created from a template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
pub struct TerraformMachinePoolTemplateResource {
    /// Labels and annotations copied to the created object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// The TerraformMachinePool spec.
    pub spec: TerraformMachinePoolSpec,
}
