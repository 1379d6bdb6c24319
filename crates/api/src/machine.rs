//! TerraformMachine: one machine of a CAPI Machine, immutable once created.

use crate::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{
    MachineAddress, MachineDriftPolicy, MachineRemediation, WorkspaceSpec, WorkspaceStatus,
};
use crate::schema;

/// The desired machine.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "TerraformMachine",
    plural = "terraformmachines",
    shortname = "tfm",
    namespaced,
    status = "TerraformMachineStatus",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
    ),
    printcolumn(
        name = "Machine",
        type_ = "string",
        json_path = ".metadata.ownerReferences[?(@.kind==\"Machine\")].name"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned"
    ),
    printcolumn(name = "ProviderID", type_ = "string", json_path = ".spec.providerID"),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.source.image",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TerraformMachineSpec {
    /// Set once by the manager from the module output `provider_id`.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: Option<String>,
    /// Module source, identity, Job tuning and variables (source, identity and variables are
    /// immutable).
    #[serde(flatten)]
    pub workspace: WorkspaceSpec,
    /// Drift checks (report only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<MachineDriftPolicy>,
    /// Health-driven remediation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<MachineRemediation>,
}

/// Observed state of a TerraformMachine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TerraformMachineStatus {
    /// Conditions; `Ready` is mirrored to the Machine's `InfrastructureReady`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Option<Vec<Condition>>,
    /// Shared workload status.
    #[serde(flatten)]
    pub workspace: WorkspaceStatus,
    /// From the module output `addresses`, in canonical order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::atomic_list::<MachineAddress, 1, 256>")]
    pub addresses: Option<Vec<MachineAddress>>,
    /// Actual placement, from the module output `failure_domain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,
    /// Spot or preemptible instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
    /// Consecutive unhealthy samples; unset when healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub unhealthy_samples: Option<i32>,
}
