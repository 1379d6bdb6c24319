//! Condition types and reasons (CAPI v1beta2 style: every status has a PascalCase reason).
//!
//! [`allowed_reasons`] is the table of which reason may go with which type and status; the
//! manager and the webhooks never write a pair outside it.

/// Condition types.
pub mod types {
    /// Summary; mirrored by CAPI into `InfrastructureReady`.
    pub const READY: &str = "Ready";
    /// CAPI: the object or its Cluster is paused.
    pub const PAUSED: &str = "Paused";
    /// Owner, cluster infrastructure, exports, bootstrap data and variable sources.
    pub const DEPENDENCIES_READY: &str = "DependenciesReady";
    /// The identity exists and allows the namespace.
    pub const IDENTITY_ALLOWED: &str = "IdentityAllowed";
    /// The credential mirror is current.
    pub const CREDENTIALS_MIRRORED: &str = "CredentialsMirrored";
    /// The runner ServiceAccount and RoleBinding exist.
    pub const RUNNER_RBAC_READY: &str = "RunnerRBACReady";
    /// The last apply, plan or destroy Job, or why none runs.
    pub const APPLY_JOB_SUCCEEDED: &str = "ApplyJobSucceeded";
    /// The state could be read.
    pub const STATE_READABLE: &str = "StateReadable";
    /// The last restore Job (only after a restore request).
    pub const RESTORE_JOB_SUCCEEDED: &str = "RestoreJobSucceeded";
    /// The module's outputs satisfy the contract.
    pub const OUTPUTS_VALID: &str = "OutputsValid";
    /// The module's `health` output.
    pub const INFRASTRUCTURE_HEALTHY: &str = "InfrastructureHealthy";
    /// The last refresh or drift Job.
    pub const DRIFT_JOB_SUCCEEDED: &str = "DriftJobSucceeded";
    /// Negative polarity: True means drift was found.
    pub const DRIFT_DETECTED: &str = "DriftDetected";
    /// Negative polarity, clusters only: deletion waits for machines and pools.
    pub const DELETION_BLOCKED: &str = "DeletionBlocked";
    /// Clusters only, once provisioned: a valid endpoint exists.
    pub const ENDPOINT_AVAILABLE: &str = "EndpointAvailable";
    /// Pools only: autoscaler annotations and replica write-back.
    pub const AUTOSCALING_ACTIVE: &str = "AutoscalingActive";
    /// CAPI, negative polarity: the object is being deleted.
    pub const DELETING: &str = "Deleting";
    /// Machine templates only: capacity for scale-from-zero.
    pub const CAPACITY_RESOLVED: &str = "CapacityResolved";

    /// Every condition type.
    pub const ALL: &[&str] = &[
        READY,
        PAUSED,
        DEPENDENCIES_READY,
        IDENTITY_ALLOWED,
        CREDENTIALS_MIRRORED,
        RUNNER_RBAC_READY,
        APPLY_JOB_SUCCEEDED,
        STATE_READABLE,
        RESTORE_JOB_SUCCEEDED,
        OUTPUTS_VALID,
        INFRASTRUCTURE_HEALTHY,
        DRIFT_JOB_SUCCEEDED,
        DRIFT_DETECTED,
        DELETION_BLOCKED,
        ENDPOINT_AVAILABLE,
        AUTOSCALING_ACTIVE,
        DELETING,
        CAPACITY_RESOLVED,
    ];
}

/// Condition reasons. A reason used by several types is declared once.
pub mod reasons {
    // Ready.
    /// Every Ready input is healthy.
    pub const READY: &str = "Ready";
    /// A Ready input is False.
    pub const NOT_READY: &str = "NotReady";
    /// A Ready input is Unknown and none is False.
    pub const READY_UNKNOWN: &str = "ReadyUnknown";
    /// Identity Ready: the credentials Secret exists.
    pub const SECRET_FOUND: &str = "SecretFound";
    /// Identity Ready / IdentityAllowed: the credentials Secret is missing.
    pub const SECRET_NOT_FOUND: &str = "SecretNotFound";

    // Paused (CAPI).
    /// The object or its Cluster is paused.
    pub const PAUSED: &str = "Paused";
    /// Neither is paused.
    pub const NOT_PAUSED: &str = "NotPaused";

    // DependenciesReady.
    /// Every dependency is ready.
    pub const DEPENDENCIES_READY: &str = "DependenciesReady";
    /// The owner object is gone.
    pub const OWNER_NOT_FOUND: &str = "OwnerNotFound";
    /// A fresh TerraformMachine has no Machine owner reference yet.
    pub const WAITING_FOR_OWNER_MACHINE: &str = "WaitingForOwnerMachine";
    /// A pool has owner references but none to a MachinePool.
    pub const WAITING_FOR_OWNER_MACHINE_POOL: &str = "WaitingForOwnerMachinePool";
    /// The owning Cluster's infrastructureRef is not a TerraformCluster.
    pub const CLUSTER_NOT_TERRAFORM: &str = "ClusterNotTerraform";
    /// An owner does not point back at this object.
    pub const OWNER_MISMATCH: &str = "OwnerMismatch";
    /// A non-optional `variablesFrom` source is missing or unlabelled.
    pub const VARIABLES_SOURCE_NOT_FOUND: &str = "VariablesSourceNotFound";
    /// A variable key or value is invalid.
    pub const VARIABLES_INVALID: &str = "VariablesInvalid";
    /// No owner reference yet.
    pub const WAITING_FOR_OWNER: &str = "WaitingForOwner";
    /// The TerraformCluster is not provisioned yet.
    pub const WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructure";
    /// The cluster module's `exports` cannot be read or canonicalized.
    pub const WAITING_FOR_CLUSTER_EXPORTS: &str = "WaitingForClusterExports";
    /// The bootstrap data Secret is not set or missing.
    pub const WAITING_FOR_BOOTSTRAP_DATA: &str = "WaitingForBootstrapData";

    // IdentityAllowed.
    /// The identity allows the namespace.
    pub const IDENTITY_ALLOWED: &str = "IdentityAllowed";
    /// The identity is missing, or none resolved.
    pub const IDENTITY_NOT_FOUND: &str = "IdentityNotFound";
    /// The identity does not allow the namespace.
    pub const NAMESPACE_NOT_ALLOWED: &str = "NamespaceNotAllowed";
    /// The check could not complete.
    pub const IDENTITY_CHECK_FAILED: &str = "IdentityCheckFailed";
    /// The credentials Secret lacks data the identity needs.
    pub const CREDENTIALS_INCOMPLETE: &str = "CredentialsIncomplete";

    // CredentialsMirrored.
    /// The mirror is current.
    pub const MIRRORED: &str = "Mirrored";
    /// The mirror could not be written.
    pub const MIRROR_FAILED: &str = "MirrorFailed";
    /// Before the first mirror, or no identity resolved.
    pub const MIRROR_PENDING: &str = "MirrorPending";

    // RunnerRBACReady.
    /// ServiceAccount and RoleBinding exist.
    pub const RBAC_READY: &str = "RBACReady";
    /// They could not be written.
    pub const RBAC_FAILED: &str = "RBACFailed";
    /// The override ServiceAccount lacks `captf.io/runner=true`.
    pub const SERVICE_ACCOUNT_NOT_OPTED_IN: &str = "ServiceAccountNotOptedIn";

    // ApplyJobSucceeded.
    /// The last apply succeeded.
    pub const APPLY_SUCCEEDED: &str = "ApplySucceeded";
    /// The destroy succeeded.
    pub const DESTROY_SUCCEEDED: &str = "DestroySucceeded";
    /// The apply failed or its Job vanished mid-run.
    pub const APPLY_FAILED: &str = "ApplyFailed";
    /// The destroy failed.
    pub const DESTROY_FAILED: &str = "DestroyFailed";
    /// The Job hit `activeDeadlineSeconds`.
    pub const JOB_DEADLINE_EXCEEDED: &str = "JobDeadlineExceeded";
    /// No Job: the identity does not allow the namespace.
    pub const IDENTITY_NOT_ALLOWED: &str = "IdentityNotAllowed";
    /// The runner reported an image-layout error.
    pub const IMAGE_INVALID: &str = "ImageInvalid";
    /// The image could not be pulled.
    pub const IMAGE_PULL_FAILED: &str = "ImagePullFailed";
    /// The Job's runner has not started: a ResourceQuota refused the Job or its pod, no node
    /// takes the pod, or a container cannot be created.
    pub const JOB_NOT_STARTED: &str = "JobNotStarted";
    /// The rendered inputs exceed what a Secret can carry.
    pub const INPUTS_TOO_LARGE: &str = "InputsTooLarge";
    /// The merged lock timeout is not below the deadline.
    pub const JOB_POLICY_INVALID: &str = "JobPolicyInvalid";
    /// The guard stopped an apply before a deleting or replacing plan.
    pub const DESTRUCTIVE_PLAN_BLOCKED: &str = "DestructivePlanBlocked";
    /// Before the first apply completes.
    pub const NO_APPLY_YET: &str = "NoApplyYet";
    /// Another live Job holds the run lease.
    pub const WAITING_FOR_RUN_LEASE: &str = "WaitingForRunLease";
    /// A machine or pool operation waits for the cluster's.
    pub const WAITING_FOR_CLUSTER_OPERATION: &str = "WaitingForClusterOperation";
    /// A cluster operation waits for its machines' and pools'.
    pub const WAITING_FOR_MACHINE_OPERATIONS: &str = "WaitingForMachineOperations";
    /// Manual policy: a plan waits for `captf.io/approve-plan`.
    pub const PLAN_AWAITING_APPROVAL: &str = "PlanAwaitingApproval";
    /// The approved apply planned something else.
    pub const PLAN_CHANGED: &str = "PlanChanged";
    /// The active-Job cap is reached.
    pub const WAITING_FOR_JOB_SLOT: &str = "WaitingForJobSlot";

    // StateReadable.
    /// The state was read.
    pub const STATE_READ: &str = "StateRead";
    /// OpenTofu client-side encryption (unsupported).
    pub const STATE_ENCRYPTED: &str = "StateEncrypted";
    /// Undecodable, over the caps, or an unsupported version.
    pub const STATE_CORRUPT: &str = "StateCorrupt";
    /// The chunks disagree.
    pub const STATE_INCONSISTENT: &str = "StateInconsistent";
    /// The object applied before and its state is gone.
    pub const STATE_LOST: &str = "StateLost";
    /// Someone other than this object's runner holds the state lock.
    pub const STATE_LOCKED: &str = "StateLocked";
    /// No state yet.
    pub const STATE_NOT_FOUND: &str = "StateNotFound";
    /// A readable state of another lineage than the object's: nothing runs until a restore or
    /// `captf.io/adopt-state`.
    pub const STATE_LINEAGE_MISMATCH: &str = "StateLineageMismatch";
    /// The object applied before and its state has no inputs hash: CAPTF cannot tell what
    /// produced it, so nothing runs until `captf.io/adopt-state` or a restore.
    pub const STATE_WITHOUT_INPUTS_HASH: &str = "StateWithoutInputsHash";

    // ApplyJobSucceeded, DriftJobSucceeded.
    /// The runner found another state than the one the Job was started for; the engine did not
    /// run against it (StateReadable says what the state is now).
    pub const STATE_MISMATCH: &str = "StateMismatch";

    // RestoreJobSucceeded.
    /// The restore succeeded.
    pub const STATE_RESTORED: &str = "StateRestored";
    /// The restore failed (not retried for the same serial).
    pub const RESTORE_FAILED: &str = "RestoreFailed";
    /// No complete backup with that serial.
    pub const RESTORE_BACKUP_NOT_FOUND: &str = "RestoreBackupNotFound";

    // OutputsValid.
    /// The outputs satisfy the contract.
    pub const OUTPUTS_VALID: &str = "OutputsValid";
    /// The pool's instances list was cut to 1000.
    pub const INSTANCES_TRUNCATED: &str = "InstancesTruncated";
    /// A required output is not declared.
    pub const OUTPUTS_MISSING: &str = "OutputsMissing";
    /// An output violates the contract.
    pub const OUTPUTS_INVALID: &str = "OutputsInvalid";
    /// The machine landed in another failure domain than requested.
    pub const FAILURE_DOMAIN_MISMATCH: &str = "FailureDomainMismatch";
    /// `provider_id` changed after it was first written.
    pub const PROVIDER_ID_CHANGED: &str = "ProviderIDChanged";
    /// Required outputs are still null.
    pub const OUTPUTS_PENDING: &str = "OutputsPending";

    // InfrastructureHealthy.
    /// `running` and healthy.
    pub const HEALTHY: &str = "Healthy";
    /// From the first apply until provisioned.
    pub const PROVISIONING: &str = "Provisioning";
    /// `pending`.
    pub const INSTANCE_PENDING: &str = "InstancePending";
    /// `running` but not healthy.
    pub const INSTANCE_UNHEALTHY: &str = "InstanceUnhealthy";
    /// `degraded`.
    pub const INSTANCE_DEGRADED: &str = "InstanceDegraded";
    /// `stopped`.
    pub const INSTANCE_STOPPED: &str = "InstanceStopped";
    /// `terminated`, or `provider_id` missing twice after provisioning.
    pub const INSTANCE_TERMINATED: &str = "InstanceTerminated";
    /// Before the first apply.
    pub const WAITING_FOR_PROVISIONING: &str = "WaitingForProvisioning";
    /// `unknown`, null or unrecognised health.
    pub const HEALTH_UNKNOWN: &str = "HealthUnknown";
    /// `provider_id` missing once after provisioning.
    pub const PROVIDER_ID_MISSING: &str = "ProviderIDMissing";

    // DriftJobSucceeded.
    /// The last refresh or drift Job succeeded.
    pub const DRIFT_CHECKED: &str = "DriftChecked";
    /// It failed.
    pub const DRIFT_JOB_FAILED: &str = "DriftJobFailed";
    /// It hit its deadline.
    pub const DRIFT_JOB_DEADLINE_EXCEEDED: &str = "DriftJobDeadlineExceeded";
    /// No check yet (also DriftDetected).
    pub const DRIFT_NOT_CHECKED: &str = "DriftNotChecked";
    /// A check is running.
    pub const DRIFT_JOB_RUNNING: &str = "DriftJobRunning";
    /// A check is due but the durable inputs Secret is gone.
    pub const DURABLE_INPUTS_MISSING: &str = "DurableInputsMissing";

    // DriftDetected.
    /// Drift found, action Report.
    pub const DRIFT_REPORTED: &str = "DriftReported";
    /// Drift found, remediation pending or failed.
    pub const DRIFT_PENDING: &str = "DriftPending";
    /// A remediation apply is running.
    pub const DRIFT_REMEDIATING: &str = "DriftRemediating";
    /// No drift.
    pub const NO_DRIFT: &str = "NoDrift";

    // DeletionBlocked.
    /// The cluster waits for its machines and pools.
    pub const DEPENDENTS_EXIST: &str = "DependentsExist";
    /// Nothing blocks deletion.
    pub const NOT_BLOCKED: &str = "NotBlocked";

    // EndpointAvailable.
    /// A valid endpoint exists.
    pub const ENDPOINT_AVAILABLE: &str = "EndpointAvailable";
    /// Provisioned, but no valid endpoint anywhere.
    pub const WAITING_FOR_ENDPOINT: &str = "WaitingForEndpoint";

    // AutoscalingActive.
    /// Both annotations valid; replicas written back.
    pub const REPLICAS_MANAGED_BY_MODULE: &str = "ReplicasManagedByModule";
    /// Neither annotation.
    pub const AUTOSCALING_DISABLED: &str = "AutoscalingDisabled";
    /// Incomplete, unparsable, or min > max.
    pub const AUTOSCALING_ANNOTATIONS_INVALID: &str = "AutoscalingAnnotationsInvalid";
    /// Another controller writes replicas.
    pub const REPLICAS_MANAGED_EXTERNALLY: &str = "ReplicasManagedExternally";

    // Deleting (CAPI).
    /// A deletionTimestamp is set.
    pub const DELETING: &str = "Deleting";
    /// Not being deleted.
    pub const NOT_DELETING: &str = "NotDeleting";

    // CapacityResolved.
    /// Both image labels parsed.
    pub const CAPACITY_RESOLVED: &str = "CapacityResolved";
    /// The image declares neither label.
    pub const CAPACITY_NOT_DECLARED: &str = "CapacityNotDeclared";
    /// The registry could not be read.
    pub const IMAGE_INSPECT_FAILED: &str = "ImageInspectFailed";
    /// A capacity label is malformed.
    pub const CAPACITY_LABEL_INVALID: &str = "CapacityLabelInvalid";
}

/// A condition status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    /// The wire value (`True`, `False`, `Unknown`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// Reasons allowed for one condition type, by status.
#[derive(Clone, Copy, Debug)]
pub struct AllowedReasons {
    pub when_true: &'static [&'static str],
    pub when_false: &'static [&'static str],
    pub when_unknown: &'static [&'static str],
}

impl AllowedReasons {
    /// Whether `reason` may accompany `status`.
    pub fn allows(&self, status: Status, reason: &str) -> bool {
        let list = match status {
            Status::True => self.when_true,
            Status::False => self.when_false,
            Status::Unknown => self.when_unknown,
        };
        list.contains(&reason)
    }
}

/// The reasons each condition type may carry, per status (`ConditionReasons()` upstream).
/// `None` for an unknown type.
pub fn allowed_reasons(condition_type: &str) -> Option<AllowedReasons> {
    use reasons::*;
    const WAITS: &[&str] = &[
        WAITING_FOR_RUN_LEASE,
        WAITING_FOR_CLUSTER_OPERATION,
        WAITING_FOR_MACHINE_OPERATIONS,
        WAITING_FOR_JOB_SLOT,
    ];
    let allowed = |when_true, when_false, when_unknown| AllowedReasons {
        when_true,
        when_false,
        when_unknown,
    };
    Some(match condition_type {
        types::READY => allowed(
            &[READY, SECRET_FOUND],
            &[NOT_READY, SECRET_NOT_FOUND],
            &[READY_UNKNOWN],
        ),
        types::PAUSED => allowed(&[PAUSED], &[NOT_PAUSED], &[]),
        types::DEPENDENCIES_READY => allowed(
            &[DEPENDENCIES_READY],
            &[
                OWNER_NOT_FOUND,
                WAITING_FOR_OWNER_MACHINE,
                WAITING_FOR_OWNER_MACHINE_POOL,
                CLUSTER_NOT_TERRAFORM,
                OWNER_MISMATCH,
                VARIABLES_SOURCE_NOT_FOUND,
                VARIABLES_INVALID,
            ],
            &[
                WAITING_FOR_OWNER,
                WAITING_FOR_CLUSTER_INFRASTRUCTURE,
                WAITING_FOR_CLUSTER_EXPORTS,
                WAITING_FOR_BOOTSTRAP_DATA,
            ],
        ),
        types::IDENTITY_ALLOWED => allowed(
            &[IDENTITY_ALLOWED],
            &[
                IDENTITY_NOT_FOUND,
                NAMESPACE_NOT_ALLOWED,
                SECRET_NOT_FOUND,
                CREDENTIALS_INCOMPLETE,
            ],
            &[IDENTITY_CHECK_FAILED],
        ),
        types::CREDENTIALS_MIRRORED => allowed(
            &[MIRRORED],
            &[MIRROR_FAILED, CREDENTIALS_INCOMPLETE],
            &[MIRROR_PENDING],
        ),
        types::RUNNER_RBAC_READY => allowed(
            &[RBAC_READY],
            &[RBAC_FAILED, SERVICE_ACCOUNT_NOT_OPTED_IN],
            &[],
        ),
        types::APPLY_JOB_SUCCEEDED => allowed(
            &[APPLY_SUCCEEDED, DESTROY_SUCCEEDED],
            &[
                APPLY_FAILED,
                DESTROY_FAILED,
                JOB_DEADLINE_EXCEEDED,
                IDENTITY_NOT_ALLOWED,
                IMAGE_INVALID,
                IMAGE_PULL_FAILED,
                JOB_NOT_STARTED,
                INPUTS_TOO_LARGE,
                JOB_POLICY_INVALID,
                DESTRUCTIVE_PLAN_BLOCKED,
                SERVICE_ACCOUNT_NOT_OPTED_IN,
                STATE_MISMATCH,
            ],
            &[
                NO_APPLY_YET,
                WAITING_FOR_RUN_LEASE,
                WAITING_FOR_CLUSTER_OPERATION,
                WAITING_FOR_MACHINE_OPERATIONS,
                WAITING_FOR_JOB_SLOT,
                PLAN_AWAITING_APPROVAL,
                PLAN_CHANGED,
            ],
        ),
        types::STATE_READABLE => allowed(
            &[STATE_READ],
            &[
                STATE_ENCRYPTED,
                STATE_CORRUPT,
                STATE_INCONSISTENT,
                STATE_LOST,
                STATE_LOCKED,
                STATE_LINEAGE_MISMATCH,
                STATE_WITHOUT_INPUTS_HASH,
            ],
            &[STATE_NOT_FOUND],
        ),
        types::RESTORE_JOB_SUCCEEDED => allowed(
            &[STATE_RESTORED],
            &[RESTORE_FAILED, RESTORE_BACKUP_NOT_FOUND, JOB_NOT_STARTED],
            WAITS,
        ),
        types::OUTPUTS_VALID => allowed(
            &[OUTPUTS_VALID, INSTANCES_TRUNCATED],
            &[
                OUTPUTS_MISSING,
                OUTPUTS_INVALID,
                FAILURE_DOMAIN_MISMATCH,
                PROVIDER_ID_CHANGED,
            ],
            &[OUTPUTS_PENDING],
        ),
        types::INFRASTRUCTURE_HEALTHY => allowed(
            &[HEALTHY],
            &[
                PROVISIONING,
                INSTANCE_PENDING,
                INSTANCE_UNHEALTHY,
                INSTANCE_DEGRADED,
                INSTANCE_STOPPED,
                INSTANCE_TERMINATED,
            ],
            &[
                WAITING_FOR_PROVISIONING,
                HEALTH_UNKNOWN,
                PROVIDER_ID_MISSING,
            ],
        ),
        types::DRIFT_JOB_SUCCEEDED => allowed(
            &[DRIFT_CHECKED],
            &[
                DRIFT_JOB_FAILED,
                DRIFT_JOB_DEADLINE_EXCEEDED,
                STATE_MISMATCH,
                JOB_NOT_STARTED,
            ],
            &[
                DRIFT_NOT_CHECKED,
                DRIFT_JOB_RUNNING,
                WAITING_FOR_RUN_LEASE,
                WAITING_FOR_JOB_SLOT,
                DURABLE_INPUTS_MISSING,
            ],
        ),
        types::DRIFT_DETECTED => allowed(
            &[DRIFT_REPORTED, DRIFT_PENDING, DRIFT_REMEDIATING],
            &[NO_DRIFT],
            &[DRIFT_NOT_CHECKED],
        ),
        types::DELETION_BLOCKED => allowed(&[DEPENDENTS_EXIST], &[NOT_BLOCKED], &[]),
        types::ENDPOINT_AVAILABLE => allowed(&[ENDPOINT_AVAILABLE], &[WAITING_FOR_ENDPOINT], &[]),
        types::AUTOSCALING_ACTIVE => allowed(
            &[REPLICAS_MANAGED_BY_MODULE],
            &[
                AUTOSCALING_DISABLED,
                AUTOSCALING_ANNOTATIONS_INVALID,
                REPLICAS_MANAGED_EXTERNALLY,
            ],
            &[],
        ),
        types::DELETING => allowed(&[DELETING], &[NOT_DELETING], &[]),
        types::CAPACITY_RESOLVED => allowed(
            &[CAPACITY_RESOLVED, CAPACITY_NOT_DECLARED],
            &[IMAGE_INSPECT_FAILED, CAPACITY_LABEL_INVALID],
            &[],
        ),
        _ => return None,
    })
}

/// Conditions whose True status is bad (they never feed Ready as positive inputs).
pub const NEGATIVE_POLARITY: &[&str] = &[
    types::DRIFT_DETECTED,
    types::DELETION_BLOCKED,
    types::DELETING,
];

/// Ready inputs of every kind until `provisioned` first latches.
pub const READY_INPUTS_BEFORE_PROVISIONED: &[&str] = &[
    types::DEPENDENCIES_READY,
    types::IDENTITY_ALLOWED,
    types::CREDENTIALS_MIRRORED,
    types::RUNNER_RBAC_READY,
    types::APPLY_JOB_SUCCEEDED,
    types::STATE_READABLE,
    types::OUTPUTS_VALID,
    types::INFRASTRUCTURE_HEALTHY,
    types::DELETING,
];
/// Ready inputs of a provisioned TerraformCluster (a failed re-apply must not flip the
/// Cluster's InfrastructureReady and suspend MachineHealthChecks).
pub const READY_INPUTS_CLUSTER_AFTER_PROVISIONED: &[&str] =
    &[types::INFRASTRUCTURE_HEALTHY, types::DELETING];
/// Ready inputs of a provisioned TerraformMachine.
pub const READY_INPUTS_MACHINE_AFTER_PROVISIONED: &[&str] =
    &[types::INFRASTRUCTURE_HEALTHY, types::DELETING];
/// Ready inputs of a provisioned TerraformMachinePool (its frequent re-applies must show).
pub const READY_INPUTS_MACHINE_POOL_AFTER_PROVISIONED: &[&str] = &[
    types::INFRASTRUCTURE_HEALTHY,
    types::APPLY_JOB_SUCCEEDED,
    types::DELETING,
];
/// Conditions that never feed Ready.
pub const NEVER_IN_READY: &[&str] = &[
    types::PAUSED,
    types::DRIFT_DETECTED,
    types::DRIFT_JOB_SUCCEEDED,
    types::DELETION_BLOCKED,
    types::ENDPOINT_AVAILABLE,
    types::RESTORE_JOB_SUCCEEDED,
    types::AUTOSCALING_ACTIVE,
];
/// Conditions written on the first visit even when nothing happened yet.
pub const SET_ON_FIRST_VISIT: &[&str] = &[
    types::PAUSED,
    types::DELETING,
    types::DRIFT_DETECTED,
    types::DELETION_BLOCKED,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_has_a_reason_table_and_no_reason_serves_two_statuses() {
        for t in types::ALL {
            let allowed = allowed_reasons(t).unwrap_or_else(|| panic!("{t} has no reason table"));
            for r in allowed.when_true {
                assert!(
                    !allowed.when_false.contains(r),
                    "{t}: {r} is both True and False"
                );
            }
            assert!(
                !allowed.when_true.is_empty() && !allowed.when_false.is_empty(),
                "{t}"
            );
        }
        assert!(allowed_reasons("NoSuchCondition").is_none());
    }

    #[test]
    fn ready_inputs_and_never_in_ready_do_not_overlap() {
        for list in [
            READY_INPUTS_BEFORE_PROVISIONED,
            READY_INPUTS_CLUSTER_AFTER_PROVISIONED,
            READY_INPUTS_MACHINE_AFTER_PROVISIONED,
            READY_INPUTS_MACHINE_POOL_AFTER_PROVISIONED,
        ] {
            for t in list {
                assert!(
                    !NEVER_IN_READY.contains(t),
                    "{t} is both a Ready input and never in Ready"
                );
                assert!(types::ALL.contains(t));
            }
        }
    }

    #[test]
    fn allowed_pairs() {
        let apply = allowed_reasons(types::APPLY_JOB_SUCCEEDED).expect("table");
        assert!(apply.allows(Status::Unknown, reasons::WAITING_FOR_JOB_SLOT));
        assert!(apply.allows(Status::False, reasons::DESTRUCTIVE_PLAN_BLOCKED));
        assert!(!apply.allows(Status::True, reasons::APPLY_FAILED));
        let drift = allowed_reasons(types::DRIFT_DETECTED).expect("table");
        assert!(drift.allows(Status::True, reasons::DRIFT_REPORTED));
        assert!(drift.allows(Status::False, reasons::NO_DRIFT));
    }
}
