//! The events a pass's conditions announce by changing: the original's lifecycle, state,
//! drift and health events, each once per transition and never for a condition that first
//! appears in a healthy state; and `ConditionChanged` for any other change of a condition's
//! status. Pure: the conditions before the pass and after it.

use captf_api::Condition;
use captf_api::conditions::{reasons, types};
use captf_api::events;

use crate::conditions::Conditions;

/// One event to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announced {
    /// The condition type whose change it announces.
    pub condition: &'static str,
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

/// The reasons of a state the reader could not read (`StateUnreadable`).
const UNREADABLE: [&str; 3] = [
    reasons::STATE_CORRUPT,
    reasons::STATE_INCONSISTENT,
    reasons::STATE_ENCRYPTED,
];

/// The reasons of infrastructure that is not healthy (`InstanceUnhealthy`); provisioning and
/// pending are not news.
const UNHEALTHY: [&str; 4] = [
    reasons::INSTANCE_UNHEALTHY,
    reasons::INSTANCE_DEGRADED,
    reasons::INSTANCE_STOPPED,
    reasons::INSTANCE_TERMINATED,
];

/// The conditions a Job's own events announce (`JobSucceeded`, `JobFailed`).
const JOB_RESULTS: [&str; 3] = [
    types::APPLY_JOB_SUCCEEDED,
    types::DRIFT_JOB_SUCCEEDED,
    types::RESTORE_JOB_SUCCEEDED,
];

/// Whether a condition of `type_` at `status` is in a state that needs attention: `False`,
/// or `True` for those of negative polarity (`DriftDetected`, `DeletionBlocked`, `Deleting`).
fn bad(type_: &str, status: &str) -> bool {
    if captf_api::conditions::NEGATIVE_POLARITY.contains(&type_) {
        status == "True"
    } else {
        status == "False"
    }
}

/// What changed between `before` (the status the pass started from) and `after`.
pub fn transitions(before: &[Condition], after: &Conditions) -> Vec<Announced> {
    let mut out = announced(before, after);
    // Any other change of status, once: a condition seen before whose status moved, and that
    // no reason of its own announced (a Job result is its Job's events'). A first definite
    // reading that is healthy (from Unknown) is not news, as a first appearance is not.
    let said: Vec<&str> = out.iter().map(|a| a.condition).collect();
    for now in after.iter() {
        let type_ = now.type_.as_str();
        let Some(was) = before.iter().find(|c| c.type_ == type_) else {
            continue;
        };
        if was.status == now.status || said.contains(&type_) || JOB_RESULTS.contains(&type_) {
            continue;
        }
        let (from, to) = (was.status.as_str(), now.status.as_str());
        if from == "Unknown" && !bad(type_, to) {
            continue;
        }
        out.push(Announced {
            condition: conditions_type(type_),
            warning: bad(type_, to),
            reason: events::CONDITION_CHANGED,
            note: format!("{type_} {from} -> {to} ({}): {}", now.reason, now.message),
        });
    }
    out
}

/// `type_` as one of the known condition types (a `'static` name for [`Announced`]).
fn conditions_type(type_: &str) -> &'static str {
    types::ALL
        .iter()
        .find(|t| **t == type_)
        .copied()
        .unwrap_or("Unknown")
}

/// The events of the transitions that have a reason of their own.
fn announced(before: &[Condition], after: &Conditions) -> Vec<Announced> {
    let was = |type_: &str| before.iter().find(|c| &*c.type_ == type_);
    let is = |type_: &str| after.get(type_);
    let status = |c: Option<&Condition>| c.map(|c| c.status.as_str().to_owned());
    let reason = |c: Option<&Condition>| c.map(|c| c.reason.as_str().to_owned());
    let became = |type_: &str, to: &str| {
        status(is(type_)).as_deref() == Some(to) && status(was(type_)).as_deref() != Some(to)
    };
    let left = |type_: &str, from: &str| {
        status(was(type_)).as_deref() == Some(from) && status(is(type_)).as_deref() != Some(from)
    };
    let message = |type_: &str| is(type_).map_or_else(String::new, |c| c.message.to_string());
    let mut out = Vec::new();
    let mut say = |condition: &'static str, warning: bool, reason: &'static str, note: String| {
        out.push(Announced {
            condition,
            warning,
            reason,
            note,
        });
    };

    if became(types::PAUSED, "True") {
        say(types::PAUSED, false, events::PAUSED, message(types::PAUSED));
    } else if left(types::PAUSED, "True") {
        say(
            types::PAUSED,
            false,
            events::RESUMED,
            "no longer paused".into(),
        );
    }
    if became(types::DELETING, "True") {
        say(
            types::DELETING,
            false,
            events::DELETION_STARTED,
            message(types::DELETING),
        );
    }
    let state_reason = reason(is(types::STATE_READABLE));
    if state_reason != reason(was(types::STATE_READABLE)) {
        match state_reason.as_deref() {
            Some(reasons::STATE_LOST) => {
                say(
                    types::STATE_READABLE,
                    true,
                    events::STATE_LOST,
                    message(types::STATE_READABLE),
                );
            }
            Some(r) if UNREADABLE.contains(&r) => {
                say(
                    types::STATE_READABLE,
                    true,
                    events::STATE_UNREADABLE,
                    message(types::STATE_READABLE),
                );
            }
            _ => {}
        }
    }
    if status(is(types::OUTPUTS_VALID)).as_deref() == Some("False")
        && (status(was(types::OUTPUTS_VALID)).as_deref() != Some("False")
            || reason(was(types::OUTPUTS_VALID)) != reason(is(types::OUTPUTS_VALID)))
    {
        say(
            types::OUTPUTS_VALID,
            true,
            events::OUTPUTS_INVALID,
            message(types::OUTPUTS_VALID),
        );
    }
    if became(types::DRIFT_DETECTED, "True") {
        say(
            types::DRIFT_DETECTED,
            true,
            events::DRIFT_DETECTED,
            message(types::DRIFT_DETECTED),
        );
    } else if left(types::DRIFT_DETECTED, "True")
        && reason(is(types::DRIFT_DETECTED)).as_deref() == Some(reasons::NO_DRIFT)
    {
        say(
            types::DRIFT_DETECTED,
            false,
            events::DRIFT_RESOLVED,
            "a drift check found no drift".into(),
        );
    }
    // Healthy is news only after being unhealthy; a first reading that is healthy is not.
    if became(types::INFRASTRUCTURE_HEALTHY, "True")
        && status(was(types::INFRASTRUCTURE_HEALTHY)).as_deref() == Some("False")
    {
        say(
            types::INFRASTRUCTURE_HEALTHY,
            false,
            events::INSTANCE_HEALTHY,
            message(types::INFRASTRUCTURE_HEALTHY),
        );
    } else if became(types::INFRASTRUCTURE_HEALTHY, "False")
        && reason(is(types::INFRASTRUCTURE_HEALTHY))
            .is_some_and(|r| UNHEALTHY.contains(&r.as_str()))
    {
        say(
            types::INFRASTRUCTURE_HEALTHY,
            true,
            events::INSTANCE_UNHEALTHY,
            message(types::INFRASTRUCTURE_HEALTHY),
        );
    }
    let restore = is(types::RESTORE_JOB_SUCCEEDED);
    if reason(restore).as_deref() == Some(reasons::RESTORE_FAILED)
        && restore.map(|c| &c.message) != was(types::RESTORE_JOB_SUCCEEDED).map(|c| &c.message)
    {
        say(
            types::RESTORE_JOB_SUCCEEDED,
            true,
            events::STATE_RESTORE_FAILED,
            message(types::RESTORE_JOB_SUCCEEDED),
        );
    }
    let apply = reason(is(types::APPLY_JOB_SUCCEEDED));
    if became(types::IDENTITY_ALLOWED, "False") {
        say(
            types::IDENTITY_ALLOWED,
            true,
            events::IDENTITY_NOT_ALLOWED,
            message(types::IDENTITY_ALLOWED),
        );
    } else if apply.as_deref() == Some(reasons::IDENTITY_NOT_ALLOWED)
        && apply != reason(was(types::APPLY_JOB_SUCCEEDED))
    {
        say(
            types::APPLY_JOB_SUCCEEDED,
            true,
            events::IDENTITY_NOT_ALLOWED,
            message(types::APPLY_JOB_SUCCEEDED),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use captf_api::conditions::Status;
    use k8s_openapi::jiff::Timestamp;

    fn conds(set: &[(&str, &str, &str)]) -> Conditions {
        let mut c = Conditions::from(None);
        for (type_, status, reason) in set {
            let status = match *status {
                "True" => Status::True,
                "False" => Status::False,
                _ => Status::Unknown,
            };
            c.set(type_, status, reason, "why", Some(1), Timestamp::UNIX_EPOCH);
        }
        c
    }

    #[test]
    fn a_change_into_a_bad_state_is_a_warning() {
        type End<'a> = (&'a str, &'a str);
        // (condition, from, to (status, reason), warning)
        let rows: [(&str, End, End, bool); 6] = [
            ("Ready", ("True", "Ready"), ("False", "NotReady"), true),
            ("Ready", ("False", "NotReady"), ("True", "Ready"), false),
            (
                "Ready",
                ("True", "Ready"),
                ("Unknown", "ReadyUnknown"),
                false,
            ),
            (
                "DeletionBlocked",
                ("False", "NotBlocked"),
                ("True", "DependentsExist"),
                true,
            ),
            (
                "DeletionBlocked",
                ("True", "DependentsExist"),
                ("False", "NotBlocked"),
                false,
            ),
            (
                "EndpointAvailable",
                ("True", "EndpointAvailable"),
                ("False", "WaitingForEndpoint"),
                true,
            ),
        ];
        for (type_, (from, was), (to, now), warning) in rows {
            let before = conds(&[(type_, from, was)]).into_vec();
            let got = transitions(&before, &conds(&[(type_, to, now)]));
            assert_eq!(got.len(), 1, "{type_} {from} -> {to}");
            assert_eq!(got[0].reason, "ConditionChanged");
            assert_eq!(got[0].condition, type_);
            assert_eq!(got[0].warning, warning, "{type_} {from} -> {to}");
            assert_eq!(
                got[0].note,
                format!("{type_} {from} -> {to} ({now}): why"),
                "the note says what changed"
            );
        }
    }

    #[test]
    fn each_transition_is_announced_once() {
        type Set<'a> = &'a [(&'a str, &'a str, &'a str)];
        let rows: Vec<(&str, Set, Set, Vec<&str>)> = vec![
            (
                "nothing changed",
                &[("Paused", "False", "NotPaused")],
                &[("Paused", "False", "NotPaused")],
                vec![],
            ),
            (
                "a first healthy reading says nothing",
                &[],
                &[
                    ("Paused", "False", "NotPaused"),
                    ("InfrastructureHealthy", "True", "Healthy"),
                ],
                vec![],
            ),
            (
                "paused",
                &[("Paused", "False", "NotPaused")],
                &[("Paused", "True", "Paused")],
                vec!["Paused"],
            ),
            (
                "resumed",
                &[("Paused", "True", "Paused")],
                &[("Paused", "False", "NotPaused")],
                vec!["Resumed"],
            ),
            (
                "still paused",
                &[("Paused", "True", "Paused")],
                &[("Paused", "True", "Paused")],
                vec![],
            ),
            (
                "deletion started",
                &[("Deleting", "False", "NotDeleting")],
                &[("Deleting", "True", "Deleting")],
                vec!["DeletionStarted"],
            ),
            (
                "state lost",
                &[("StateReadable", "True", "StateRead")],
                &[("StateReadable", "False", "StateLost")],
                vec!["StateLost"],
            ),
            (
                "still lost",
                &[("StateReadable", "False", "StateLost")],
                &[("StateReadable", "False", "StateLost")],
                vec![],
            ),
            (
                "corrupt",
                &[("StateReadable", "True", "StateRead")],
                &[("StateReadable", "False", "StateCorrupt")],
                vec!["StateUnreadable"],
            ),
            (
                "corrupt, then lost",
                &[("StateReadable", "False", "StateCorrupt")],
                &[("StateReadable", "False", "StateLost")],
                vec!["StateLost"],
            ),
            (
                "no state yet is no loss",
                &[],
                &[("StateReadable", "Unknown", "StateNotFound")],
                vec![],
            ),
            (
                "outputs invalid",
                &[("OutputsValid", "True", "OutputsValid")],
                &[("OutputsValid", "False", "OutputsMissing")],
                vec!["OutputsInvalid"],
            ),
            (
                "drift found",
                &[("DriftDetected", "False", "NoDrift")],
                &[("DriftDetected", "True", "DriftReported")],
                vec!["DriftDetected"],
            ),
            (
                "drift resolved",
                &[("DriftDetected", "True", "DriftReported")],
                &[("DriftDetected", "False", "NoDrift")],
                vec!["DriftResolved"],
            ),
            (
                "unhealthy",
                &[("InfrastructureHealthy", "True", "Healthy")],
                &[("InfrastructureHealthy", "False", "InstanceUnhealthy")],
                vec!["InstanceUnhealthy"],
            ),
            (
                "healthy again",
                &[("InfrastructureHealthy", "False", "InstanceUnhealthy")],
                &[("InfrastructureHealthy", "True", "Healthy")],
                vec!["InstanceHealthy"],
            ),
            (
                "a failed restore",
                &[],
                &[("RestoreJobSucceeded", "False", "RestoreFailed")],
                vec!["StateRestoreFailed"],
            ),
            (
                "identity not allowed",
                &[("ApplyJobSucceeded", "True", "ApplySucceeded")],
                &[("ApplyJobSucceeded", "False", "IdentityNotAllowed")],
                vec!["IdentityNotAllowed"],
            ),
            (
                "ready lost",
                &[("Ready", "True", "Ready")],
                &[("Ready", "False", "NotReady")],
                vec!["ConditionChanged"],
            ),
            (
                "ready again",
                &[("Ready", "False", "NotReady")],
                &[("Ready", "True", "Ready")],
                vec!["ConditionChanged"],
            ),
            (
                "a condition that first appears says nothing of its own",
                &[],
                &[("Ready", "False", "NotReady")],
                vec![],
            ),
            (
                "a reason that changes under the same status says nothing of its own",
                &[("Ready", "False", "NotReady")],
                &[("Ready", "False", "SecretNotFound")],
                vec![],
            ),
            (
                "a Job's result is its Job's events'",
                &[("ApplyJobSucceeded", "True", "ApplySucceeded")],
                &[("ApplyJobSucceeded", "False", "ApplyFailed")],
                vec![],
            ),
            (
                "a first definite reading that is healthy says nothing",
                &[("OutputsValid", "Unknown", "OutputsPending")],
                &[("OutputsValid", "True", "OutputsValid")],
                vec![],
            ),
            (
                "the state readable again",
                &[("StateReadable", "False", "StateLost")],
                &[("StateReadable", "True", "StateRead")],
                vec!["ConditionChanged"],
            ),
            (
                "announced by its own reason only",
                &[("Paused", "False", "NotPaused"), ("Ready", "True", "Ready")],
                &[("Paused", "True", "Paused"), ("Ready", "False", "NotReady")],
                vec!["Paused", "ConditionChanged"],
            ),
        ];
        for (row, before, after, want) in rows {
            let before = conds(before).into_vec();
            let got: Vec<&str> = transitions(&before, &conds(after))
                .iter()
                .map(|a| a.reason)
                .collect();
            assert_eq!(got, want, "{row}");
        }
    }
}
