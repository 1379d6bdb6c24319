//! TerraformMachinePool: a scaling group behind a CAPI MachinePool; every field is mutable.

use crate::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{
    HealthState, MachineAddress, MachinePoolDriftPolicy, WorkspaceSpec, WorkspaceStatus,
};
use crate::schema;

/// The desired pool.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "TerraformMachinePool",
    plural = "terraformmachinepools",
    shortname = "tfmp",
    namespaced,
    status = "TerraformMachinePoolStatus",
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
        name = "MachinePool",
        type_ = "string",
        json_path = ".metadata.ownerReferences[?(@.kind==\"MachinePool\")].name"
    ),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(
        name = "Provisioned",
        type_ = "boolean",
        json_path = ".status.initialization.provisioned"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TerraformMachinePoolSpec {
    /// Scaling-group id from the module output `provider_id`.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: Option<String>,
    /// Provider IDs of every non-terminated member (sorted, de-duplicated).
    #[serde(
        default,
        rename = "providerIDList",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "schema::atomic_strings::<0, 10000, 512>")]
    pub provider_id_list: Option<Vec<String>>,
    /// Module source, identity, Job tuning and variables.
    #[serde(flatten)]
    pub workspace: WorkspaceSpec,
    /// Drift checks; may remediate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<MachinePoolDriftPolicy>,
    /// Cadence of `apply -refresh-only` to pick up membership changes (60 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 15, max = 86400))]
    pub membership_refresh_interval_seconds: Option<i32>,
}

/// One member of the pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct MachinePoolInstance {
    /// Instance provider ID.
    #[serde(rename = "providerID")]
    #[schemars(length(min = 1, max = 512))]
    pub provider_id: String,
    /// Provider-defined instance id.
    #[serde(
        default,
        rename = "instanceID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 256))]
    pub instance_id: Option<String>,
    /// Addresses of the instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::atomic_list::<MachineAddress, 1, 256>")]
    pub addresses: Option<Vec<MachineAddress>>,
    /// Placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub failure_domain: Option<String>,
    /// Per-instance state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<HealthState>,
}

/// Observed state of a TerraformMachinePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TerraformMachinePoolStatus {
    /// Conditions; `Ready` is mirrored to the MachinePool's `InfrastructureReady`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Option<Vec<Condition>>,
    /// Shared workload status.
    #[serde(flatten)]
    pub workspace: WorkspaceStatus,
    /// v1beta1-compatible provisioning flag, latched with `initialization.provisioned`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Desired capacity observed at the last refresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Members, from the module output `instances` (at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::atomic_list::<MachinePoolInstance, 1, 1000>")]
    pub instances: Option<Vec<MachinePoolInstance>>,
}
