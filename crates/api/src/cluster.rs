//! TerraformCluster: the infrastructure of one CAPI Cluster (network, load balancer, endpoint).

use crate::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::{
    ApiEndpoint, DriftPolicy, FailureDomain, IdentityReference, JobPolicy, MachineRemediation,
    WorkspaceSpec, WorkspaceStatus,
};
use crate::schema;

/// Cap, in bytes of compact JSON, of `status.exports`.
pub const MAX_PUBLISHED_EXPORTS_BYTES: usize = 64 << 10;

/// Whether an input change applies at once or waits for an approved plan.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum ApplyPolicy {
    /// Every input change applies at once; only a destructive plan waits.
    #[default]
    Automatic,
    /// Every change is planned first and applies only after `captf.io/approve-plan`.
    Manual,
}

/// The desired infrastructure of one CAPI Cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "TerraformCluster",
    plural = "terraformclusters",
    shortname = "tfc",
    namespaced,
    status = "TerraformClusterStatus",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    printcolumn(name = "Cluster", type_ = "string", json_path = ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Provisioned", type_ = "boolean", json_path = ".status.initialization.provisioned"),
    printcolumn(name = "Endpoint", type_ = "string", json_path = ".spec.controlPlaneEndpoint.host"),
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.source.image", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("has(self.spec.identityRef)").message("spec.identityRef is required: a TerraformCluster must name a TerraformClusterIdentity (spec.defaults.identityRef only applies to machines and pools)").field_path(".spec.identityRef"),
    validation = Rule::new("!has(oldSelf.spec.controlPlaneEndpoint) || !has(oldSelf.spec.controlPlaneEndpoint.host) || !has(oldSelf.spec.controlPlaneEndpoint.port) || (has(self.spec.controlPlaneEndpoint) && self.spec.controlPlaneEndpoint == oldSelf.spec.controlPlaneEndpoint)").message("spec.controlPlaneEndpoint is immutable once it has both host and port").field_path(".spec.controlPlaneEndpoint"),
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TerraformClusterSpec {
    /// Endpoint to use instead of creating one; otherwise the manager writes the module's
    /// output here once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// Module source, identity, Job tuning and variables.
    #[serde(flatten)]
    pub workspace: WorkspaceSpec,
    /// Drift checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftPolicy>,
    /// `Automatic` (default) or `Manual`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_policy: Option<ApplyPolicy>,
    /// Cap on running Jobs across the cluster and its machines and pools (default: the
    /// manager's `--cluster-max-active-jobs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_active_jobs: Option<i32>,
    /// Operational defaults inherited by the cluster's machines and pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<TerraformClusterDefaults>,
}

/// Defaults inherited by machines and pools, never applied to the cluster itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformClusterDefaults {
    /// Identity for machines and pools that name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_ref: Option<IdentityReference>,
    /// Job policy merged under each machine and pool policy.
    // Boxed, as `WorkspaceSpec::jobs` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<Box<JobPolicy>>,
    /// Drift policy merged under machine and pool drift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftPolicy>,
    /// Remediation merged under machine remediation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<MachineRemediation>,
    /// Membership refresh interval for pools that set none (60 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 15, max = 86400))]
    pub membership_refresh_interval_seconds: Option<i32>,
}

/// Observed state of a TerraformCluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TerraformClusterStatus {
    /// Conditions; `Ready` is mirrored by CAPI into the Cluster's `InfrastructureReady`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Option<Vec<Condition>>,
    /// Shared workload status.
    #[serde(flatten)]
    pub workspace: WorkspaceStatus,
    /// From the module output `failure_domains`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::map_list_by_name::<FailureDomain, 1, 100>")]
    pub failure_domains: Option<Vec<FailureDomain>>,
    /// Compact JSON copy of the module's `exports` output (never read back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::free_form")]
    pub exports: Option<serde_json::Value>,
    /// The plan waiting for approval under `applyPolicy: Manual`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanStatus>,
}

/// A plan made under `applyPolicy: Manual`, shown for review. Approve it by setting the
/// annotation `captf.io/approve-plan=<planHash>`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanStatus {
    /// Inputs hash the plan was made for.
    #[schemars(length(min = 1, max = 128))]
    pub inputs_hash: String,
    /// The plan Job.
    #[schemars(length(min = 1, max = 63))]
    pub job: String,
    /// Fingerprint of the plan (`p2:` prefix); the value to approve.
    #[schemars(length(min = 1, max = 128))]
    pub plan_hash: String,
    /// Resources to create.
    #[schemars(range(min = 0))]
    pub add: i32,
    /// Resources to change in place.
    #[schemars(range(min = 0))]
    pub change: i32,
    /// Resources to destroy (replacements included).
    #[schemars(range(min = 0))]
    pub destroy: i32,
    /// Root outputs that change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub output_changes: Option<i32>,
    /// `<address> (<actions>)` of the changed resources, sorted by address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::atomic_strings::<1, 50, 600>")]
    pub resources: Option<Vec<String>>,
    /// More changes than listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// When the plan was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Time>,
}
