//! Why a decision was made: logged, counted in metrics, and turned into condition messages.

/// The reason of a [`super::Decision`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    Paused,
    JobActive,
    DependentsExist,
    RestoreRequested,
    DeletionHeld,
    Abandoned,
    DeletingWithoutState,
    Destroyed,
    Deleting,
    DeletingBackoff,
    StateLost,
    StateUnreadable,
    StateLineageMismatch,
    StateNotAdopted,
    NoState,
    NoStateBackoff,
    StateWithoutInputsHash,
    StateWithoutInputsHashBackoff,
    InputsChanged,
    InputsChangedBackoff,
    ApplyInterrupted,
    ApplyInterruptedBackoff,
    LastApplyFailed,
    LastApplyFailedBackoff,
    DriftRemediation,
    DriftRemediationBackoff,
    PlanNeeded,
    PlanNeededBackoff,
    PlanEmpty,
    PlanEmptyBackoff,
    PlanApproved,
    PlanApprovedBackoff,
    PlanAwaitingApproval,
    DestructivePlanBlocked,
    DestructiveApproved,
    ReplanRequested,
    RefreshAfterApply,
    MembershipConverging,
    HealthPending,
    MembershipRefreshDue,
    HealthCheckDue,
    DriftDue,
    UpToDate,
}

impl Reason {
    /// The backoff variant of a reason that starts a Job.
    pub fn backoff(self) -> Reason {
        use Reason::*;
        match self {
            Deleting => DeletingBackoff,
            NoState => NoStateBackoff,
            StateWithoutInputsHash => StateWithoutInputsHashBackoff,
            InputsChanged => InputsChangedBackoff,
            ApplyInterrupted => ApplyInterruptedBackoff,
            LastApplyFailed => LastApplyFailedBackoff,
            DriftRemediation => DriftRemediationBackoff,
            PlanNeeded => PlanNeededBackoff,
            PlanEmpty => PlanEmptyBackoff,
            PlanApproved => PlanApprovedBackoff,
            other => other,
        }
    }

    /// The name used in logs and as a metric label.
    pub fn as_str(self) -> &'static str {
        use Reason::*;
        match self {
            Paused => "Paused",
            JobActive => "JobActive",
            DependentsExist => "DependentsExist",
            RestoreRequested => "RestoreRequested",
            DeletionHeld => "DeletionHeld",
            Abandoned => "Abandoned",
            DeletingWithoutState => "DeletingWithoutState",
            Destroyed => "Destroyed",
            Deleting => "Deleting",
            DeletingBackoff => "DeletingBackoff",
            StateLost => "StateLost",
            StateUnreadable => "StateUnreadable",
            StateLineageMismatch => "StateLineageMismatch",
            StateNotAdopted => "StateNotAdopted",
            NoState => "NoState",
            NoStateBackoff => "NoStateBackoff",
            StateWithoutInputsHash => "StateWithoutInputsHash",
            StateWithoutInputsHashBackoff => "StateWithoutInputsHashBackoff",
            InputsChanged => "InputsChanged",
            InputsChangedBackoff => "InputsChangedBackoff",
            ApplyInterrupted => "ApplyInterrupted",
            ApplyInterruptedBackoff => "ApplyInterruptedBackoff",
            LastApplyFailed => "LastApplyFailed",
            LastApplyFailedBackoff => "LastApplyFailedBackoff",
            DriftRemediation => "DriftRemediation",
            DriftRemediationBackoff => "DriftRemediationBackoff",
            PlanNeeded => "PlanNeeded",
            PlanNeededBackoff => "PlanNeededBackoff",
            PlanEmpty => "PlanEmpty",
            PlanEmptyBackoff => "PlanEmptyBackoff",
            PlanApproved => "PlanApproved",
            PlanApprovedBackoff => "PlanApprovedBackoff",
            PlanAwaitingApproval => "PlanAwaitingApproval",
            DestructivePlanBlocked => "DestructivePlanBlocked",
            DestructiveApproved => "DestructiveApproved",
            ReplanRequested => "ReplanRequested",
            RefreshAfterApply => "RefreshAfterApply",
            MembershipConverging => "MembershipConverging",
            HealthPending => "HealthPending",
            MembershipRefreshDue => "MembershipRefreshDue",
            HealthCheckDue => "HealthCheckDue",
            DriftDue => "DriftDue",
            UpToDate => "UpToDate",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
