//! Label keys CAPTF reads or writes. Values that must stay stable for an object's life (the
//! backend `labels` map) are built in [`crate::names`].

/// On every Secret, Lease, Job, pod, ServiceAccount and RoleBinding the manager creates; the
/// manager's cache selector and the namespace sweep selector.
pub const MANAGED: &str = "captf.io/managed";
/// Kind of the Terraform* object that owns a state chunk, lease, Job or Secret.
pub const OWNER_KIND: &str = "captf.infrastructure.cluster.x-k8s.io/owner-kind";
/// Name (or 16-hex hash of a name over 63 characters) of the owning Terraform* object.
pub const OWNER_NAME: &str = "captf.infrastructure.cluster.x-k8s.io/owner-name";
/// Operation of a Job and its pod.
pub const OP: &str = "captf.infrastructure.cluster.x-k8s.io/op";
/// Attempt number of a Job and its pod.
pub const ATTEMPT: &str = "captf.infrastructure.cluster.x-k8s.io/attempt";
/// The owning CAPI Cluster (hashed when over 63 characters where CAPTF stamps it).
pub const CLUSTER_NAME: &str = "cluster.x-k8s.io/cluster-name";
/// clusterctl move discovery for state chunks and backups.
pub const CLUSTERCTL_MOVE: &str = "clusterctl.cluster.x-k8s.io/move";
/// On the identity CRD: move the identity with its owner-reference descendants.
pub const CLUSTERCTL_MOVE_HIERARCHY: &str = "clusterctl.cluster.x-k8s.io/move-hierarchy";
/// The kubernetes backend's own selector label on state chunks (`true`).
pub const TFSTATE: &str = "tfstate";
/// The kubernetes backend's suffix label on state chunks.
pub const TFSTATE_SECRET_SUFFIX: &str = "tfstateSecretSuffix";
/// The kubernetes backend's workspace label on state chunks (always `default` here).
pub const TFSTATE_WORKSPACE: &str = "tfstateWorkspace";
/// Set by the backend on state chunks (`terraform`, also under OpenTofu).
pub const APP_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// On backup chunks (`true`).
pub const STATE_BACKUP: &str = "captf.io/state-backup";
/// On backup chunks: the state suffix they belong to.
pub const STATE_BACKUP_SUFFIX: &str = "captf.io/state-backup-suffix";
/// On CAPTF's own Leases: `run` or `cluster`.
pub const LEASE: &str = "captf.io/lease";
/// On credential mirrors (`true`).
pub const MIRRORED: &str = "captf.io/mirrored";
/// Opt-in on a user ServiceAccount named by `spec.jobs.serviceAccountName` (`true`).
pub const RUNNER: &str = "captf.io/runner";
/// Opt-in on a ConfigMap or Secret named by `spec.variablesFrom` (`true`).
pub const VARIABLES: &str = "captf.io/variables";
/// On retained state, backups and durable inputs: the UID of the deleted object.
pub const RETAINED_FROM_UID: &str = "captf.io/retained-from-uid";
/// CAPI: marks a control-plane Machine.
pub const CONTROL_PLANE: &str = "cluster.x-k8s.io/control-plane";
/// CAPI: an object managed by a system other than CAPI (skipped).
pub const CAPI_MANAGED_BY: &str = "cluster.x-k8s.io/managed-by";
/// CAPI: the provider label every install component carries.
pub const CAPI_PROVIDER: &str = "cluster.x-k8s.io/provider";
/// CAPI contract label on each CRD (`cluster.x-k8s.io/v1beta2: v1alpha1`).
pub const CAPI_CONTRACT_V1BETA2: &str = "cluster.x-k8s.io/v1beta2";

/// The value of [`MANAGED`], [`STATE_BACKUP`], [`MIRRORED`], [`RUNNER`] and [`VARIABLES`].
pub const TRUE: &str = "true";
/// The value of [`CAPI_PROVIDER`] on CAPTF's components.
pub const PROVIDER_VALUE: &str = "infrastructure-terraform";
/// [`LEASE`] value of a per-object run lease.
pub const LEASE_RUN: &str = "run";
/// [`LEASE`] value of a per-Cluster write lease.
pub const LEASE_CLUSTER: &str = "cluster";
