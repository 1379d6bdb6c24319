//! Annotation keys CAPTF reads or writes.

// Keys users set.

/// Approve exactly the plan whose `status.plan.planHash` is the value (`applyPolicy: Manual`).
pub const APPROVE_PLAN: &str = "captf.io/approve-plan";
/// Let one blocked apply delete or replace: the value is the hash named by
/// `DestructivePlanBlocked` (the inputs hash, or a pool's approval hash).
pub const APPROVE_DESTRUCTIVE_PLAN: &str = "captf.io/approve-destructive-plan";
/// Restore the backup with this serial.
pub const RESTORE_STATE: &str = "captf.io/restore-state";
/// Accept the state of this lineage, now in the object's state Secrets, as the object's own:
/// after a `StateLineageMismatch` or `StateWithoutInputsHash` hold (docs/backups.md).
pub const ADOPT_STATE: &str = "captf.io/adopt-state";
/// Release a held deletion without a destroy; the value must be the object's `metadata.uid`.
pub const ABANDON_INFRASTRUCTURE: &str = "captf.io/abandon-infrastructure";
/// Start the next attempt of a failed Job now, skipping the rest of its backoff once; any
/// value (a token: setting a new one asks again). Used up by the next Job that starts.
pub const RETRY: &str = "captf.io/retry";
/// Plan again now: a new plan under `applyPolicy: Manual`, the blocked apply run again (its
/// guard plans afresh), else a drift check; any value, used up like [`RETRY`].
pub const REPLAN: &str = "captf.io/replan";
/// The longest `captf.io/retry` or `captf.io/replan` token honoured (a label value's limit):
/// the token is copied onto the Job that answers it.
pub const MAX_REQUEST_TOKEN: usize = 63;
/// CAPI pause annotation.
pub const PAUSED: &str = "cluster.x-k8s.io/paused";
/// CAPI: the cluster is managed by another system; CAPTF leaves it alone.
pub const MANAGED_BY: &str = "cluster.x-k8s.io/managed-by";
/// MachinePool autoscaler minimum size.
pub const AUTOSCALER_MIN_SIZE: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";
/// MachinePool autoscaler maximum size.
pub const AUTOSCALER_MAX_SIZE: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";

// Keys CAPTF writes on user-visible objects.

/// Set before a Job is created and cleared once none is active.
pub const BLOCK_MOVE: &str = "clusterctl.cluster.x-k8s.io/block-move";
/// `user` or `module`: where the TerraformCluster's endpoint came from; written once.
pub const ENDPOINT_SOURCE: &str = "captf.io/endpoint-source";
/// On a Machine: CAPTF asked for remediation; the value is the reason.
pub const REMEDIATION_REQUESTED: &str = "captf.io/remediation-requested";
/// CAPI: ask the MachineHealthCheck to remediate this Machine.
pub const REMEDIATE_MACHINE: &str = "cluster.x-k8s.io/remediate-machine";
/// On a MachinePool: who writes `spec.replicas` (`captf` when CAPTF does).
pub const REPLICAS_MANAGED_BY: &str = "cluster.x-k8s.io/replicas-managed-by";
/// CAPI: the template an object was cloned from; becomes the `captf.io/template` tag.
pub const CLONED_FROM_NAME: &str = "cluster.x-k8s.io/cloned-from-name";
/// clusterctl: a delete issued by `clusterctl move`.
pub const DELETE_FOR_MOVE: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";

// State and backup Secrets.

/// `h2:<sha256>` of the inputs of the apply that wrote the state (base state Secret, chunk 0 of
/// a backup, and apply/plan/restore Jobs).
pub const INPUTS_HASH: &str = "captf.io/inputs-hash";
/// Set by the backend on state chunks (`gzip`).
pub const ENCODING: &str = "encoding";
/// Backup chunk: the state serial.
pub const STATE_BACKUP_SERIAL: &str = "captf.io/state-backup-serial";
/// Backup chunk: the state lineage.
pub const STATE_BACKUP_LINEAGE: &str = "captf.io/state-backup-lineage";
/// Backup chunk: when it was taken.
pub const STATE_BACKUP_TAKEN_AT: &str = "captf.io/state-backup-taken-at";
/// Backup chunk: the Job that produced the state, when known.
pub const STATE_BACKUP_SOURCE_JOB: &str = "captf.io/state-backup-source-job";
/// Backup chunk: SHA-256 of the concatenated compressed payload.
pub const STATE_BACKUP_DIGEST: &str = "captf.io/state-backup-digest";
/// Backup chunk: managed resource count.
pub const STATE_BACKUP_RESOURCES: &str = "captf.io/state-backup-resources";
/// Backup chunk: base name of the set.
pub const STATE_BACKUP_SET: &str = "captf.io/state-backup-set";
/// Backup chunk: this chunk's index.
pub const STATE_BACKUP_CHUNK: &str = "captf.io/state-backup-chunk";
/// Backup chunk: number of chunks in the set.
pub const STATE_BACKUP_CHUNKS: &str = "captf.io/state-backup-chunks";

// Leases.

/// The backend's lock Lease: JSON lock info (`ID`, `Operation`, `Who`, `Version`, `Created`).
pub const LOCK_INFO: &str = "app.terraform.io/lock-info";
/// CAPTF lease: operation of the holder.
pub const LEASE_OP: &str = "captf.io/lease-op";
/// CAPTF lease: when it was acquired.
pub const LEASE_ACQUIRED_AT: &str = "captf.io/lease-acquired-at";

// Credential mirror.

/// SHA-256 over the source Secret's data.
pub const SOURCE_HASH: &str = "captf.io/source-hash";
/// Identity name (also on the durable inputs Secret: the pinned identity).
pub const IDENTITY: &str = "captf.io/identity";

// Durable inputs Secret.

/// `spec.source.image` as last written.
pub const IMAGE: &str = "captf.io/image";
/// The digest the last successful apply ran (pinned).
pub const IMAGE_DIGEST: &str = "captf.io/image-digest";
/// `true` once the object ever applied (never cleared).
pub const APPLIED: &str = "captf.io/applied";
/// The lineage of the object's state (also on restore Jobs: the backup's). A readable state of
/// another lineage is not the object's.
pub const STATE_LINEAGE: &str = "captf.io/state-lineage";
/// A cluster or pool apply Job deleted while running.
pub const INTERRUPTED_APPLY: &str = "captf.io/interrupted-apply";
/// Pool: JSON of a held exports change.
pub const PENDING_CLUSTER_OUTPUTS: &str = "captf.io/pending-cluster-outputs";
/// Pool: JSON of an exports change whose apply failed part-way.
pub const PARTIAL_CLUSTER_OUTPUTS: &str = "captf.io/partial-cluster-outputs";
/// Pool: hash of the exports the last successful apply rendered.
pub const APPLIED_CLUSTER_OUTPUTS_HASH: &str = "captf.io/applied-cluster-outputs-hash";

// Jobs.

/// The Job's result was read and counted; written only after the status patch succeeded.
pub const BOOKKEPT: &str = "captf.io/bookkept";
/// The runner was stopped from outside (not by the deadline).
pub const INTERRUPTED: &str = "captf.io/interrupted";
/// The runner stopped before a destructive plan.
pub const DESTRUCTIVE_PLAN_BLOCKED: &str = "captf.io/destructive-plan-blocked";
/// Hash of the plan a blocked apply made.
pub const PLAN_HASH: &str = "captf.io/plan-hash";
/// The approved plan no longer matched.
pub const PLAN_CHANGED: &str = "captf.io/plan-changed";
/// The runner found another state than the one the Job was started for and stopped.
pub const STATE_MISMATCH: &str = "captf.io/state-mismatch";
/// A plan Job succeeded without a readable plan.
pub const PLAN_UNREADABLE: &str = "captf.io/plan-unreadable";
/// The apply remediates drift.
pub const DRIFT_REMEDIATION: &str = "captf.io/drift-remediation";
/// Under Manual: the plan hash the apply must reproduce.
pub const APPROVED_PLAN: &str = "captf.io/approved-plan";
/// A cluster apply a `captf.io/approve-destructive-plan` approval let start: the hash of the
/// destructive plan the guard lets through.
pub const APPROVED_DESTRUCTIVE_PLAN: &str = "captf.io/approved-destructive-plan";
/// The apply started while the newest apply had failed.
pub const AFTER_FAILED_APPLY: &str = "captf.io/after-failed-apply";
/// The vanished apply Job this apply follows.
pub const AFTER_INTERRUPTED_APPLY: &str = "captf.io/after-interrupted-apply";
/// The `captf.io/retry` token the Job answered (it is used up when the Job is booked).
pub const RETRY_TOKEN: &str = "captf.io/retry-token";
/// The `captf.io/replan` token the Job answered.
pub const REPLAN_TOKEN: &str = "captf.io/replan-token";
/// Restore Job: the serial pushed.
pub const RESTORE_SERIAL: &str = "captf.io/restore-serial";
/// Pool apply: the approval hash of an exports-change guarded apply.
pub const APPROVAL_HASH: &str = "captf.io/approval-hash";
/// Pool apply: hash of the exports rendered.
pub const CLUSTER_OUTPUTS_HASH: &str = "captf.io/cluster-outputs-hash";
/// Pool apply: it rendered the last-applied exports while a change was held.
pub const HELD_CLUSTER_OUTPUTS: &str = "captf.io/held-cluster-outputs";

/// [`ENDPOINT_SOURCE`] value: the endpoint existed before the first apply.
pub const ENDPOINT_SOURCE_USER: &str = "user";
/// [`ENDPOINT_SOURCE`] value: the manager copied the module's output.
pub const ENDPOINT_SOURCE_MODULE: &str = "module";
/// [`REPLICAS_MANAGED_BY`] value when CAPTF writes replicas back.
pub const REPLICAS_MANAGED_BY_CAPTF: &str = "captf";
