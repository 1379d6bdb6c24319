//! The events a pass's conditions announce by changing: the original's lifecycle, state,
//! drift and health events, each once per transition and never for a condition that first
//! appears in a healthy state. Pure: the conditions before the pass and after it.

use captf_api::Condition;
use captf_api::conditions::{reasons, types};
use captf_api::events;

use crate::conditions::Conditions;

/// One event to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announced {
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

/// What changed between `before` (the status the pass started from) and `after`.
pub fn transitions(before: &[Condition], after: &Conditions) -> Vec<Announced> {
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
    let mut say = |warning: bool, reason: &'static str, note: String| {
        out.push(Announced {
            warning,
            reason,
            note,
        });
    };

    if became(types::PAUSED, "True") {
        say(false, events::PAUSED, message(types::PAUSED));
    } else if left(types::PAUSED, "True") {
        say(false, events::RESUMED, "no longer paused".into());
    }
    if became(types::DELETING, "True") {
        say(false, events::DELETION_STARTED, message(types::DELETING));
    }
    let state_reason = reason(is(types::STATE_READABLE));
    if state_reason != reason(was(types::STATE_READABLE)) {
        match state_reason.as_deref() {
            Some(reasons::STATE_LOST) => {
                say(true, events::STATE_LOST, message(types::STATE_READABLE));
            }
            Some(r) if UNREADABLE.contains(&r) => {
                say(
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
        say(true, events::OUTPUTS_INVALID, message(types::OUTPUTS_VALID));
    }
    if became(types::DRIFT_DETECTED, "True") {
        say(true, events::DRIFT_DETECTED, message(types::DRIFT_DETECTED));
    } else if left(types::DRIFT_DETECTED, "True")
        && reason(is(types::DRIFT_DETECTED)).as_deref() == Some(reasons::NO_DRIFT)
    {
        say(
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
            false,
            events::INSTANCE_HEALTHY,
            message(types::INFRASTRUCTURE_HEALTHY),
        );
    } else if became(types::INFRASTRUCTURE_HEALTHY, "False")
        && reason(is(types::INFRASTRUCTURE_HEALTHY))
            .is_some_and(|r| UNHEALTHY.contains(&r.as_str()))
    {
        say(
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
            true,
            events::STATE_RESTORE_FAILED,
            message(types::RESTORE_JOB_SUCCEEDED),
        );
    }
    let apply = reason(is(types::APPLY_JOB_SUCCEEDED));
    if became(types::IDENTITY_ALLOWED, "False") {
        say(
            true,
            events::IDENTITY_NOT_ALLOWED,
            message(types::IDENTITY_ALLOWED),
        );
    } else if apply.as_deref() == Some(reasons::IDENTITY_NOT_ALLOWED)
        && apply != reason(was(types::APPLY_JOB_SUCCEEDED))
    {
        say(
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
