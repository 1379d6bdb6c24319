//! Conditions as the status patch writes them, and the `Ready` summary (pure).

use captf_api::conditions::{self, Status, reasons, types};
use captf_api::names::WorkloadKind;
use captf_api::{Condition, Term};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Longest condition message the apiserver accepts is 32768; keep ours readable.
const MAX_MESSAGE: usize = 1024;

/// The conditions of one object, edited during a pass and written once.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conditions {
    list: Vec<Condition>,
}

impl Conditions {
    /// Starts from the object's current conditions.
    pub fn from(existing: Option<&Vec<Condition>>) -> Self {
        Conditions {
            list: existing.cloned().unwrap_or_default(),
        }
    }

    /// The conditions to write.
    pub fn into_vec(self) -> Vec<Condition> {
        self.list
    }

    /// Every condition, in the order they are written.
    pub fn iter(&self) -> impl Iterator<Item = &Condition> {
        self.list.iter()
    }

    /// The condition of `type_`, if set.
    pub fn get(&self, type_: &str) -> Option<&Condition> {
        self.list.iter().find(|c| c.type_ == type_)
    }

    /// Applies what a pass said ([`crate::decide::status`]), in order.
    pub fn say(
        &mut self,
        said: impl IntoIterator<Item = crate::decide::status::Set>,
        generation: Option<i64>,
        now: Timestamp,
    ) {
        for s in said {
            self.set(s.type_, s.status, s.reason, &s.message, generation, now);
        }
    }

    /// Sets a condition; `lastTransitionTime` changes only when the status does.
    pub fn set(
        &mut self,
        type_: &str,
        status: Status,
        reason: &str,
        message: &str,
        generation: Option<i64>,
        now: Timestamp,
    ) {
        debug_assert!(
            conditions::allowed_reasons(type_).is_some_and(|a| a.allows(status, reason)),
            "{type_}={} with reason {reason} is not in the reason table",
            status.as_str()
        );
        let mut message = message.to_owned();
        if message.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        let transition = match self.get(type_) {
            Some(old) if old.status == status.as_str() => old.last_transition_time.clone(),
            _ => Time(now),
        };
        let condition = Condition {
            type_: Term::new(type_),
            status: Term::from(status),
            reason: Term::new(reason),
            message: message.into_boxed_str(),
            observed_generation: generation,
            last_transition_time: transition,
        };
        match self.list.iter_mut().find(|c| c.type_ == type_) {
            Some(slot) => *slot = condition,
            None => self.list.push(condition),
        }
    }

    /// Sets `Ready` from its inputs for this kind and phase: True when every input is healthy,
    /// False (`NotReady`) when any is False, else Unknown (`ReadyUnknown`). The message names the
    /// inputs that hold it back.
    pub fn summarize_ready(
        &mut self,
        kind: WorkloadKind,
        provisioned: bool,
        generation: Option<i64>,
        now: Timestamp,
    ) {
        let inputs: &[&str] = match (provisioned, kind) {
            (false, _) => conditions::READY_INPUTS_BEFORE_PROVISIONED,
            (true, WorkloadKind::Cluster) => conditions::READY_INPUTS_CLUSTER_AFTER_PROVISIONED,
            (true, WorkloadKind::Machine) => conditions::READY_INPUTS_MACHINE_AFTER_PROVISIONED,
            (true, WorkloadKind::MachinePool) => {
                conditions::READY_INPUTS_MACHINE_POOL_AFTER_PROVISIONED
            }
        };
        let mut bad = Vec::new();
        let mut unknown = Vec::new();
        for t in inputs {
            let negative = conditions::NEGATIVE_POLARITY.contains(t);
            match self.get(t).map(|c| c.status.as_str()) {
                Some("True") if !negative => {}
                Some("False") if negative => {}
                Some("True") | Some("False") => bad.push(describe(self.get(t))),
                _ => unknown
                    .push(describe(self.get(t)).unwrap_or_else(|| format!("{t} not reported yet"))),
            }
        }
        let bad: Vec<String> = bad.into_iter().flatten().collect();
        let (status, reason, message) = if !bad.is_empty() {
            (Status::False, reasons::NOT_READY, bad.join("; "))
        } else if !unknown.is_empty() {
            (Status::Unknown, reasons::READY_UNKNOWN, unknown.join("; "))
        } else {
            (Status::True, reasons::READY, String::new())
        };
        self.set(types::READY, status, reason, &message, generation, now);
    }
}

fn describe(c: Option<&Condition>) -> Option<String> {
    c.map(|c| {
        if c.message.is_empty() {
            format!("{}: {}", c.type_, c.reason)
        } else {
            format!("{}: {}: {}", c.type_, c.reason, c.message)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).expect("time")
    }

    fn all_good(c: &mut Conditions) {
        for t in conditions::READY_INPUTS_BEFORE_PROVISIONED {
            if *t == types::DELETING {
                c.set(t, Status::False, reasons::NOT_DELETING, "", None, now());
            } else {
                let reason = conditions::allowed_reasons(t).expect("table").when_true[0];
                c.set(t, Status::True, reason, "", None, now());
            }
        }
    }

    #[test]
    fn ready_summary() {
        let mut c = Conditions::default();
        all_good(&mut c);
        c.summarize_ready(WorkloadKind::Cluster, false, Some(1), now());
        assert_eq!(c.get(types::READY).expect("ready").status, "True");

        c.set(
            types::APPLY_JOB_SUCCEEDED,
            Status::False,
            reasons::APPLY_FAILED,
            "step apply failed",
            None,
            now(),
        );
        c.summarize_ready(WorkloadKind::Cluster, false, Some(1), now());
        let ready = c.get(types::READY).expect("ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "NotReady")
        );
        assert!(
            ready
                .message
                .contains("ApplyJobSucceeded: ApplyFailed: step apply failed"),
            "{}",
            ready.message
        );

        // Once provisioned, a failed re-apply does not flip a cluster's Ready.
        c.summarize_ready(WorkloadKind::Cluster, true, Some(1), now());
        assert_eq!(c.get(types::READY).expect("ready").status, "True");
        // It does for a pool.
        c.summarize_ready(WorkloadKind::MachinePool, true, Some(1), now());
        assert_eq!(c.get(types::READY).expect("ready").status, "False");

        c.set(
            types::APPLY_JOB_SUCCEEDED,
            Status::Unknown,
            reasons::WAITING_FOR_JOB_SLOT,
            "20 of 20 Jobs running",
            None,
            now(),
        );
        c.summarize_ready(WorkloadKind::Cluster, false, Some(1), now());
        let ready = c.get(types::READY).expect("ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("Unknown", "ReadyUnknown")
        );

        c.set(
            types::DELETING,
            Status::True,
            reasons::DELETING,
            "destroying",
            None,
            now(),
        );
        c.summarize_ready(WorkloadKind::Cluster, true, Some(1), now());
        assert_eq!(
            c.get(types::READY).expect("ready").status,
            "False",
            "a deleting object is never Ready"
        );
    }

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let mut c = Conditions::default();
        let t0 = now();
        let t1 = Timestamp::from_second(1_800_000_100).expect("time");
        c.set(
            types::STATE_READABLE,
            Status::Unknown,
            reasons::STATE_NOT_FOUND,
            "",
            None,
            t0,
        );
        c.set(
            types::STATE_READABLE,
            Status::Unknown,
            reasons::STATE_NOT_FOUND,
            "again",
            None,
            t1,
        );
        assert_eq!(
            c.get(types::STATE_READABLE)
                .expect("set")
                .last_transition_time,
            Time(t0)
        );
        c.set(
            types::STATE_READABLE,
            Status::True,
            reasons::STATE_READ,
            "",
            None,
            t1,
        );
        assert_eq!(
            c.get(types::STATE_READABLE)
                .expect("set")
                .last_transition_time,
            Time(t1)
        );
    }
}
