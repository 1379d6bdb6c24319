//! Event reasons the manager (and the runner, with `--runner-events`) emits.

/// First reconcile with a deletionTimestamp.
pub const DELETION_STARTED: &str = "DeletionStarted";
/// The finalizer was removed.
pub const FINALIZER_REMOVED: &str = "FinalizerRemoved";
/// Destroy and cleanup succeeded.
pub const DESTROYED: &str = "Destroyed";
/// An externally managed object was deleted; its finalizer was dropped.
pub const EXTERNALLY_MANAGED_RELEASED: &str = "ExternallyManagedReleased";
/// Warning: a held deletion was released by `captf.io/abandon-infrastructure`.
pub const INFRASTRUCTURE_ABANDONED: &str = "InfrastructureAbandoned";
/// A credential mirror was deleted when its last user went away.
pub const MIRROR_REMOVED: &str = "MirrorRemoved";
/// Any other condition changed status (Warning when into a bad state): each change not
/// announced by a reason of its own.
pub const CONDITION_CHANGED: &str = "ConditionChanged";
/// A Job stuck without its per-run Secret was deleted.
pub const STUCK_JOB_DELETED: &str = "StuckJobDeleted";
/// Warning: a Job will force-unlock a stale state lock.
pub const FORCE_UNLOCKED: &str = "ForceUnlocked";
/// A foreign holder of the state lock was detected.
pub const STATE_LOCKED: &str = "StateLocked";
/// State chunks or backups were re-owned.
pub const OWNER_REFERENCES_REPAIRED: &str = "OwnerReferencesRepaired";
/// Warning: `exports` is over 65536 bytes and was not published.
pub const EXPORTS_NOT_PUBLISHED: &str = "ExportsNotPublished";
/// A successful apply pinned the digest later operations run.
pub const DIGEST_PINNED: &str = "DigestPinned";
/// Warning: no digest is known; an operation runs the spec image as written.
pub const DIGEST_UNKNOWN: &str = "DigestUnknown";
/// A (re)apply or plan starts for changed inputs.
pub const INPUTS_CHANGED: &str = "InputsChanged";
/// A Manual plan was recorded in `status.plan`.
pub const PLAN_READY: &str = "PlanReady";
/// An approved apply started.
pub const PLAN_APPROVED: &str = "PlanApproved";
/// An approved apply succeeded.
pub const PLAN_APPLIED: &str = "PlanApplied";
/// Warning: an approved apply re-planned to a different hash.
pub const PLAN_CHANGED: &str = "PlanChanged";
/// Warning: an apply stopped before a destructive plan.
pub const DESTRUCTIVE_PLAN_BLOCKED: &str = "DestructivePlanBlocked";
/// The destructive-plan approval annotation was consumed.
pub const DESTRUCTIVE_PLAN_APPROVAL_CONSUMED: &str = "DestructivePlanApprovalConsumed";
/// A Job failed.
pub const JOB_FAILED: &str = "JobFailed";
/// A Job was interrupted from outside.
pub const JOB_INTERRUPTED: &str = "JobInterrupted";
/// A Job hit its deadline.
pub const JOB_DEADLINE_EXCEEDED: &str = "JobDeadlineExceeded";
/// A Job succeeded.
pub const JOB_SUCCEEDED: &str = "JobSucceeded";
/// A Job was created: its operation, attempt, image and why (the related object is the Job).
pub const JOB_CREATED: &str = "JobCreated";
/// `status.initialization.provisioned` latched true.
pub const PROVISIONED: &str = "Provisioned";
/// `spec.controlPlaneEndpoint` was written from the module's output.
pub const CONTROL_PLANE_ENDPOINT_SET: &str = "ControlPlaneEndpointSet";
/// `status.failureDomains` changed.
pub const FAILURE_DOMAINS_CHANGED: &str = "FailureDomainsChanged";
/// `spec.providerID` (a pool's also `spec.providerIDList`) was written.
pub const PROVIDER_ID_SET: &str = "ProviderIDSet";
/// A state backup was taken (once per backup set).
pub const STATE_BACKED_UP: &str = "StateBackedUp";
/// An operation waits for a Job slot (once per wait).
pub const WAITING_FOR_JOB_SLOT: &str = "WaitingForJobSlot";
/// An operation waits for the run lease (once per wait).
pub const WAITING_FOR_RUN_LEASE: &str = "WaitingForRunLease";
/// Warning: a Job's runner has not started (a quota, no node, a container that cannot be
/// created).
pub const JOB_NOT_STARTED: &str = "JobNotStarted";
/// Warning: a Job carries an object's owner labels but is not owned by it (another UID, or
/// none): not part of its history, so it changes nothing.
pub const FOREIGN_JOB_IGNORED: &str = "ForeignJobIgnored";
/// Secrets under an object's backup label that are not its backups: ignored.
pub const FOREIGN_BACKUP_IGNORED: &str = "ForeignBackupIgnored";
/// A lease named a Job no `Terraform*` object controls: taken over.
pub const FOREIGN_LEASE_IGNORED: &str = "ForeignLeaseIgnored";
/// The Job `status.activeJob` names is gone, but its pod still runs.
pub const WAITING_FOR_JOB_POD: &str = "WaitingForJobPod";
/// A machine or pool operation waits for the cluster's (once per wait).
pub const WAITING_FOR_CLUSTER_OPERATION: &str = "WaitingForClusterOperation";
/// A cluster operation waits for its machines' and pools' (once per wait).
pub const WAITING_FOR_MACHINE_OPERATIONS: &str = "WaitingForMachineOperations";
/// A pool write-back changed `MachinePool.spec.replicas`.
pub const REPLICAS_WRITTEN_BACK: &str = "ReplicasWrittenBack";
/// A restore Job pushed a backup.
pub const STATE_RESTORED: &str = "StateRestored";
/// `captf.io/adopt-state` made a state the object's own.
pub const STATE_ADOPTED: &str = "StateAdopted";
/// Runner: a run started.
pub const RUN_STARTED: &str = "RunStarted";
/// Runner: a step started.
pub const STEP_STARTED: &str = "StepStarted";
/// Runner: a step finished.
pub const STEP_FINISHED: &str = "StepFinished";
/// Runner: the run finished.
pub const RUN_FINISHED: &str = "RunFinished";
/// Warning: CAPTF set `cluster.x-k8s.io/remediate-machine` on a Machine.
pub const REMEDIATION_REQUESTED: &str = "RemediationRequested";
/// CAPTF took back its remediation request from a Machine that is healthy again.
pub const REMEDIATION_WITHDRAWN: &str = "RemediationWithdrawn";
/// A machine template's capacity was resolved (or found undeclared) for its image.
pub const CAPACITY_RESOLVED: &str = "CapacityResolved";
/// Warning: a machine template's image labels could not be read or parsed.
pub const IMAGE_INSPECT_FAILED: &str = "ImageInspectFailed";
/// An identity's credentials Secret exists again (not on the first, healthy reading).
pub const IDENTITY_SECRET_FOUND: &str = "IdentitySecretFound";
/// Warning: an identity's credentials Secret does not exist.
pub const IDENTITY_SECRET_NOT_FOUND: &str = "IdentitySecretNotFound";

/// The object became paused (`Paused=True`).
pub const PAUSED: &str = "Paused";
/// It is no longer paused.
pub const RESUMED: &str = "Resumed";
/// The state Secret of an object that applied before is gone.
pub const STATE_LOST: &str = "StateLost";
/// The state could not be read (corrupt, inconsistent, encrypted).
pub const STATE_UNREADABLE: &str = "StateUnreadable";
/// The module's outputs broke the contract (`OutputsValid=False`).
pub const OUTPUTS_INVALID: &str = "OutputsInvalid";
/// A drift check found drift.
pub const DRIFT_DETECTED: &str = "DriftDetected";
/// A drift check found none after drift had been found.
pub const DRIFT_RESOLVED: &str = "DriftResolved";
/// An apply that remediates drift started.
pub const DRIFT_REMEDIATION_STARTED: &str = "DriftRemediationStarted";
/// The infrastructure is healthy again.
pub const INSTANCE_HEALTHY: &str = "InstanceHealthy";
/// The infrastructure became unhealthy, degraded, stopped or terminated.
pub const INSTANCE_UNHEALTHY: &str = "InstanceUnhealthy";
/// A restore Job failed; that serial is not retried while its request stands.
pub const STATE_RESTORE_FAILED: &str = "StateRestoreFailed";
/// The identity does not allow the object's namespace.
pub const IDENTITY_NOT_ALLOWED: &str = "IdentityNotAllowed";
/// A credential mirror was created in the object's namespace.
pub const MIRROR_CREATED: &str = "MirrorCreated";
/// A Manual plan waiting for approval was replaced by a newer one.
pub const PLAN_SUPERSEDED: &str = "PlanSuperseded";
