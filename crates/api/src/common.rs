//! Types shared by the workload kinds (`common_types.go` and `workspace_types.go` in the
//! original): source, job policy, drift and remediation policies, references, variable sources
//! and the status records every workload kind carries.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EnvVar, LocalObjectReference, PodSecurityContext, ResourceRequirements, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::schema;

/// The largest `status.stateBackups` list; `--state-backups` picks how many are kept.
pub const MAX_STATE_BACKUPS: usize = 16;

/// The module image that holds the role module and the runtime (`/captf/module`,
/// `/captf/runtime`, optional `/captf/providers`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// OCI reference `registry/repo:tag` or `registry/repo@sha256:<digest>`; the tag or digest
    /// is the module version.
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// Pull policy of the Job's main container; `IfNotPresent` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
}

/// corev1.PullPolicy, restricted to its three values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum ImagePullPolicy {
    IfNotPresent,
    Always,
    Never,
}

/// Job tuning. Every field is optional; the manager fills built-in defaults when it builds a
/// Job and never writes them back.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobPolicy {
    /// Succeeded Jobs kept per object and operation (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub successful_jobs_history_limit: Option<i32>,
    /// Failed Jobs kept per object and operation (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub failed_jobs_history_limit: Option<i32>,
    /// Job run-time bound in seconds (default 3600); must exceed the lock timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub active_deadline_seconds: Option<i64>,
    /// Runner ServiceAccount override; it must carry the label `captf.io/runner=true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: Option<String>,
    /// State lock timeout passed to the engine (default 300); must be below the deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub lock_timeout_seconds: Option<i32>,
    /// Pull secrets for the module image and the runner init image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::atomic_list::<LocalObjectReference, 1, 10>")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
    /// Main container resources, replaced as a whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Extra environment of the main container, merged by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::map_list_by_name::<EnvVar, 1, 64>")]
    pub env: Option<Vec<EnvVar>>,
    /// Main container security context; may not weaken the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    /// Pod security context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security_context: Option<PodSecurityContext>,
}

/// What to do when a drift check finds changes.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum DriftAction {
    /// Record the finding in `DriftDetected` only.
    #[default]
    Report,
    /// Apply the current inputs to remove the drift.
    Remediate,
}

/// Drift checks of a TerraformCluster (and `spec.defaults.drift`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftPolicy {
    /// Seconds between drift checks; 0 disables them. Default: the manager's
    /// `--drift-default-interval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub interval_seconds: Option<i32>,
    /// `Report` (default) or `Remediate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<DriftAction>,
}

/// Drift checks of a TerraformMachine: report only.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDriftPolicy {
    /// Seconds between drift checks; 0 disables them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub interval_seconds: Option<i32>,
}

/// Drift checks of a TerraformMachinePool, which can never be disabled.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolDriftPolicy {
    /// Seconds between drift checks (at least 1; unset means the manager default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub interval_seconds: Option<i32>,
    /// `Report` (default) or `Remediate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<DriftAction>,
}

/// Health-driven remediation of a TerraformMachine through a MachineHealthCheck.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineRemediation {
    /// Annotate the owner Machine with `cluster.x-k8s.io/remediate-machine` after
    /// `unhealthyThreshold` consecutive unhealthy samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotate_machine: Option<bool>,
    /// Consecutive unhealthy samples before annotating (3 when 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub unhealthy_threshold: Option<i32>,
    /// Refresh cadence for health sampling while `annotateMachine` is true (300 when 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 86400))]
    pub health_check_interval_seconds: Option<i32>,
}

/// A cluster-scoped TerraformClusterIdentity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
pub struct IdentityReference {
    /// Name of the TerraformClusterIdentity.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// The credentials Secret of an identity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
pub struct SecretReference {
    /// Secret name (DNS subdomain).
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
    /// Secret namespace (DNS label).
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub namespace: String,
}

/// How `variablesFrom` values are passed to the module.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum VariablesFormat {
    /// Each value is a string; the module's declared type converts it.
    #[default]
    String,
    /// Each value is parsed as JSON.
    #[serde(rename = "JSON")]
    Json,
}

/// A ConfigMap or Secret in the object's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
pub struct VariablesSourceReference {
    /// Name of the ConfigMap or Secret (DNS subdomain).
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
}

/// One source of module variables: every data key becomes a variable. The source must carry
/// the label `captf.io/variables=true`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.configMapRef) != has(self.secretRef)").message("exactly one of configMapRef and secretRef must be set"))]
pub struct VariablesSource {
    /// A ConfigMap in the object's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<VariablesSourceReference>,
    /// A Secret in the object's namespace; its winning values are declared sensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<VariablesSourceReference>,
    /// A missing or unlabelled source contributes nothing instead of blocking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
    /// `String` (default) or `JSON`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<VariablesFormat>,
}

/// The CAPI v1beta2 `status.initialization` block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[schemars(extend("minProperties" = 1))]
pub struct Initialization {
    /// True once the infrastructure is provisioned; latched for the object's lifetime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

/// What a Job runs.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Create or update infrastructure.
    Apply,
    /// Destroy infrastructure.
    Destroy,
    /// Refresh state, then plan to detect drift.
    Drift,
    /// Refresh state and outputs only (`apply -refresh-only`).
    Refresh,
    /// Push a state backup into the backend.
    Restore,
    /// Plan a change for review; applies nothing.
    Plan,
}

impl Operation {
    /// Every operation, in declaration order.
    pub const ALL: [Operation; 6] = [
        Operation::Apply,
        Operation::Destroy,
        Operation::Drift,
        Operation::Refresh,
        Operation::Restore,
        Operation::Plan,
    ];

    /// The lowercase wire name (`apply`, `destroy`, ...), also used in Job names and labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "apply",
            Operation::Destroy => "destroy",
            Operation::Drift => "drift",
            Operation::Refresh => "refresh",
            Operation::Restore => "restore",
            Operation::Plan => "plan",
        }
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Operation {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Operation::ALL
            .into_iter()
            .find(|op| op.as_str() == s)
            .ok_or_else(|| crate::Error::UnknownOperation(s.to_owned()))
    }
}

/// One backup of the state, kept in `captf-state-backup-*` Secrets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct StateBackup {
    /// State serial held; write it into `captf.io/restore-state` to restore.
    #[schemars(range(min = 1))]
    pub serial: i64,
    /// When it was copied.
    pub taken_at: Time,
    /// Compressed size summed over the backup's Secrets.
    #[schemars(range(min = 1))]
    pub bytes: i64,
}

/// The Job currently running for the object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActiveJob {
    /// Job name.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// What it runs.
    pub operation: Operation,
    /// The `a<N>` number in the Job name.
    #[schemars(range(min = 1))]
    pub attempt: i32,
    /// When the Job started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
}

/// One runner step of a finished Job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunStep {
    /// Step name (`init`, `validate`, `plan`, `apply`, ...).
    #[schemars(length(min = 1, max = 64))]
    pub name: String,
    /// Exit code of the step.
    pub exit_code: i32,
    /// Wall time in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub duration_milliseconds: Option<i64>,
}

/// Class of a failed run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RunErrorKind {
    /// The image breaks the image contract.
    ImageLayout,
    /// A runtime step failed.
    Step,
    /// A step was stopped from outside (SIGTERM).
    Interrupted,
    /// A guarded apply stopped before a plan that deletes or replaces resources.
    Blocked,
    /// An apply approved for one plan produced a different plan.
    PlanChanged,
    /// The backend held another state than the one the Job was started for.
    StateMismatch,
}

/// Why a run failed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
pub struct RunError {
    /// Class.
    pub kind: RunErrorKind,
    /// Failing step for kind `step`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub step: Option<String>,
    /// Curated short description (never raw stderr).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub summary: Option<String>,
    /// `<address>: <summary>` of resources an apply or destroy failed on, redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::atomic_strings::<1, 10, 512>")]
    pub resources: Option<Vec<String>>,
}

/// Changes a drift check found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[schemars(extend("minProperties" = 1))]
pub struct DriftSummary {
    /// Resources to create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub create: Option<i32>,
    /// Resources to update in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub update: Option<i32>,
    /// Resources to replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replace: Option<i32>,
    /// Resources to delete, excluding replacements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub delete: Option<i32>,
    /// Addresses of drifted resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::atomic_strings::<1, 20, 512>")]
    pub resources: Option<Vec<String>>,
}

/// The most recent finished Job, copied from the runner's result document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
pub struct LastRun {
    /// Job name.
    #[schemars(length(min = 1, max = 63))]
    pub job: String,
    /// Operation.
    pub operation: Operation,
    /// Steps executed, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::atomic_list::<RunStep, 1, 16>")]
    pub steps: Option<Vec<RunStep>>,
    /// Set on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// Set when a drift run found changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftSummary>,
}

/// What the last Job ran.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct SourceStatus {
    /// The reference the last Job ran, as written in spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,
    /// The digest the container runtime resolved (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image_digest: Option<String>,
    /// Version of the engine, from `<runtime> version -json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub runtime_version: Option<String>,
}

/// Module input fields shared by TerraformCluster, TerraformMachine and TerraformMachinePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceSpec {
    /// The role image.
    pub source: Source,
    /// Identity whose credentials the Jobs use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_ref: Option<IdentityReference>,
    /// Job tuning.
    // Boxed: its security contexts make it over a kilobyte inline, room every object the
    // manager caches would carry whether it sets a policy or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<Box<JobPolicy>>,
    /// Module variables; inline values win over `variablesFrom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::variables")]
    pub variables: Option<serde_json::Map<String, serde_json::Value>>,
    /// Variable sources applied in list order; later wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::atomic_list::<VariablesSource, 1, 16>")]
    pub variables_from: Option<Vec<VariablesSource>>,
}

impl WorkspaceSpec {
    /// The names in `jobs.imagePullSecrets`: the credentials for reading the module image.
    pub fn image_pull_secret_names(&self) -> Vec<&str> {
        self.jobs
            .as_ref()
            .and_then(|j| j.image_pull_secrets.as_ref())
            .into_iter()
            .flatten()
            .map(|r| r.name.as_str())
            .collect()
    }
}

/// Status fields shared by the three workload kinds. Nothing here is load-bearing: every value
/// can be rebuilt from spec, state, durable inputs or the Job list.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceStatus {
    /// The `provisioned` latch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    /// Generation the status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub observed_generation: Option<i64>,
    /// The Job running now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_job: Option<ActiveJob>,
    /// The most recent finished Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<LastRun>,
    /// Completion time of the last drift check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drift_check: Option<Time>,
    /// Completion of the last refresh or drift check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_refresh: Option<Time>,
    /// Consecutive `pending` health samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub pending_refreshes: Option<i32>,
    /// State serial the outputs were read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub observed_state_serial: Option<i64>,
    /// Serial of the last consumed restore request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub last_restored_serial: Option<i64>,
    /// The lineage of the object's state (also recorded on the durable inputs and each backup):
    /// a readable state of another lineage reads `StateLineageMismatch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub state_lineage: Option<String>,
    /// The kubernetes backend `secret_suffix` (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub state_secret_suffix: Option<String>,
    /// What the last Job ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceStatus>,
    /// Backups kept, newest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::atomic_list::<StateBackup, 1, 16>")]
    pub state_backups: Option<Vec<StateBackup>>,
}

/// Labels and annotations copied to objects created from a template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
pub struct ObjectMeta {
    /// Labels to copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations to copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// clusterv1.APIEndpoint with CAPTF's bounds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[schemars(extend("minProperties" = 1))]
#[x_kube(validation = Rule::new("has(self.host) == has(self.port)").message("host and port must be set together"))]
pub struct ApiEndpoint {
    /// Hostname or IP of the control plane endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub host: Option<String>,
    /// Port of the control plane endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
}

impl ApiEndpoint {
    /// Both host and port are set: the endpoint is usable (and immutable from then on).
    pub fn is_complete(&self) -> bool {
        self.host.is_some() && self.port.is_some()
    }
}

/// clusterv1.MachineAddress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
pub struct MachineAddress {
    /// Address type.
    #[serde(rename = "type")]
    pub type_: MachineAddressType,
    /// The address.
    #[schemars(length(min = 1, max = 256))]
    pub address: String,
}

/// clusterv1.MachineAddressType.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum MachineAddressType {
    Hostname,
    #[serde(rename = "ExternalIP")]
    ExternalIp,
    #[serde(rename = "InternalIP")]
    InternalIp,
    #[serde(rename = "ExternalDNS")]
    ExternalDns,
    #[serde(rename = "InternalDNS")]
    InternalDns,
}

/// clusterv1.FailureDomain (v1beta2 list form).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    /// Name of the failure domain.
    #[schemars(length(min = 1, max = 256))]
    pub name: String,
    /// Whether control plane machines may be placed here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<bool>,
    /// Free-form attributes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<BTreeMap<String, String>>,
}

/// Health of an instance, mirroring the contract's `health.state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    Pending,
    Running,
    Degraded,
    Stopped,
    Terminated,
    Unknown,
}
