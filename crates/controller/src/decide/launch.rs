//! Whether a Job [`decide`](super::decide) chose may start now, and the steps that start it,
//! in order. Pure: the act step observes the [`Gates`] only once a Job is due (a
//! ServiceAccount read, the Job cache's counts), then carries the steps out and stops at the
//! first that must wait.

use std::time::Duration;

use captf_api::Operation;
use captf_api::conditions::{Status, reasons, types};

use super::Start;
use crate::schedule::jitter;
use crate::slots::Full;

/// How often a Job waiting for its credentials, its policy or its run lease looks again: a
/// condition says what it waits for.
pub const GATE_REQUEUE: Duration = Duration::from_secs(30);
/// How often a Job waiting for its ServiceAccount's opt-in looks again (the label is not
/// watched).
pub const OPT_IN_REQUEUE: Duration = Duration::from_secs(30);
/// How often a Job waiting for a slot under the caps looks again (plus jitter, so the
/// objects a cap holds back do not all come back at once).
pub const JOB_SLOT_REQUEUE: Duration = Duration::from_secs(15);

/// What stands between a decided Job and its start, observed when a Job is due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gates {
    /// The identity is allowed and its credentials mirrored.
    pub credentials: bool,
    /// The Job's ServiceAccount consented to run CAPTF Jobs; the refusal otherwise.
    pub service_account: Result<(), String>,
    /// The Job caps leave room for it; which cap is full otherwise.
    pub slot: Result<(), Full>,
    /// The merged Job policy is valid; what is wrong with it otherwise.
    pub policy: Result<(), String>,
    /// `--cluster-operation-gate` is on and the object belongs to a named Cluster.
    pub cluster_gate: bool,
}

/// Why the Job does not start now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Held {
    /// IdentityAllowed or CredentialsMirrored says what is missing.
    Credentials,
    /// The ServiceAccount has not opted in (the refusal says how to).
    ServiceAccount(String),
    /// A Job cap is full.
    Slot(Full),
    /// The merged Job policy is invalid.
    Policy(String),
}

/// The status a held Job writes: `status`/`reason`/`message` on each condition of
/// `conditions`. A wait (`wait_metric`) is announced once by an event of its reason and
/// counted in `captf_lease_waits_total{reason=wait_metric}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Said {
    pub conditions: Vec<&'static str>,
    pub status: Status,
    pub reason: &'static str,
    pub message: String,
    pub wait_metric: Option<&'static str>,
}

impl Held {
    /// What the object says while `op`'s Job is held.
    pub fn said(&self, op: Operation) -> Said {
        let refused = |conditions, reason, message| Said {
            conditions,
            status: Status::False,
            reason,
            message,
            wait_metric: None,
        };
        match self {
            Held::Credentials => refused(
                vec![types::APPLY_JOB_SUCCEEDED],
                reasons::IDENTITY_NOT_ALLOWED,
                "credentials are not ready (see IdentityAllowed and CredentialsMirrored)".into(),
            ),
            // Consent is the runner RBAC's as much as the Job's.
            Held::ServiceAccount(refusal) => refused(
                vec![types::RUNNER_RBAC_READY, types::APPLY_JOB_SUCCEEDED],
                reasons::SERVICE_ACCOUNT_NOT_OPTED_IN,
                refusal.clone(),
            ),
            Held::Slot(full) => Said {
                conditions: vec![condition_of(op)],
                status: Status::Unknown,
                reason: reasons::WAITING_FOR_JOB_SLOT,
                message: format!("{} waits for a Job slot: {full}", op.as_str()),
                wait_metric: Some("job_slot"),
            },
            Held::Policy(invalid) => refused(
                vec![types::APPLY_JOB_SUCCEEDED],
                reasons::JOB_POLICY_INVALID,
                invalid.clone(),
            ),
        }
    }

    /// When to look again; `uid` seeds the jitter.
    pub fn requeue(&self, uid: &str) -> Duration {
        match self {
            Held::Credentials | Held::Policy(_) => GATE_REQUEUE,
            Held::ServiceAccount(_) => OPT_IN_REQUEUE,
            Held::Slot(_) => JOB_SLOT_REQUEUE + jitter(uid, JOB_SLOT_REQUEUE),
        }
    }
}

/// One step of a Job's start, carried out in the order [`launch`] gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Take the object's run lease for the Job's name (another Job holding it: wait).
    RunLease,
    /// Pass the cluster operation gate: a cluster's writing Job waits for its members'
    /// writing Jobs, a member's for the cluster's (its run lease given back).
    ClusterGate,
    /// Persist block-move and write what the Job reads (the durable inputs of an apply, the
    /// plan key, the per-run Secret), all before the Job exists.
    Inputs,
    /// Create the Job.
    Job,
    /// Hand the per-run Secret to the Job, so it goes with it.
    HandOver,
}

/// Whether `start` may start under `gates`, and its steps. Consent is asked of every Job,
/// destroys included (a Job runs with its account's permissions); the policy is not checked
/// for a destroy or a restore, which must run whatever the policy became since.
pub fn launch(start: &Start, gates: &Gates) -> Result<Vec<Step>, Held> {
    if !gates.credentials {
        return Err(Held::Credentials);
    }
    if let Err(refusal) = &gates.service_account {
        return Err(Held::ServiceAccount(refusal.clone()));
    }
    if let Err(full) = &gates.slot {
        return Err(Held::Slot(full.clone()));
    }
    let exempt = matches!(start.op, Operation::Destroy | Operation::Restore);
    if let (false, Err(invalid)) = (exempt, &gates.policy) {
        return Err(Held::Policy(invalid.clone()));
    }
    let mut steps = vec![Step::RunLease];
    if gates.cluster_gate && writes(start.op) {
        steps.push(Step::ClusterGate);
    }
    steps.extend([Step::Inputs, Step::Job, Step::HandOver]);
    Ok(steps)
}

/// Whether `op` changes infrastructure, so it takes part in the cluster operation gate.
pub fn writes(op: Operation) -> bool {
    matches!(
        op,
        Operation::Apply | Operation::Destroy | Operation::Restore
    )
}

/// The condition that reports on `op`.
pub fn condition_of(op: Operation) -> &'static str {
    match op {
        Operation::Drift | Operation::Refresh => types::DRIFT_JOB_SUCCEEDED,
        Operation::Restore => types::RESTORE_JOB_SUCCEEDED,
        Operation::Apply | Operation::Plan | Operation::Destroy => types::APPLY_JOB_SUCCEEDED,
    }
}
