//! `captf status`: what holds an object back and what to do, what it is running, its state,
//! backups, leases and pending approvals. Built from what was read, by pure functions.

use captf_api::annotations::{APPROVE_DESTRUCTIVE_PLAN, APPROVE_PLAN};
use captf_api::conditions::{NEGATIVE_POLARITY, READY_INPUTS_BEFORE_PROVISIONED, types};
use captf_api::{ActiveJob, LastRun, StateBackup};
use serde::Serialize;

use super::advice;
use super::workload::Workload;

/// Conditions that hold an object back when False only: Unknown is their resting state (no
/// drift check or restore ran yet).
const HOLD_WHEN_FALSE: &[&str] = &[types::DRIFT_JOB_SUCCEEDED, types::RESTORE_JOB_SUCCEEDED];

/// One condition that is not as it should be.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Holding {
    pub condition: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    /// From docs/reference/conditions.md; absent for a reason the table does not list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meaning: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_to_do: Option<String>,
}

/// A Lease that orders the object's work, and who holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseView {
    pub name: String,
    /// `run` (one Job of the object at a time), `cluster` (the cluster's write gate) or
    /// `state lock` (the engine's).
    pub purpose: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acquired_at: Option<String>,
}

/// A plan waiting for someone to approve it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingApproval {
    /// The annotation that approves it.
    pub annotation: &'static str,
    /// The value to write into it.
    pub hash: String,
    /// Why it waits, in the words of the condition.
    pub reason: String,
}

/// Everything `captf status KIND/NAME` shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub kind: &'static str,
    pub name: String,
    pub namespace: String,
    /// `True`, `False`, `Unknown`, or `-` before the first pass.
    pub ready: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub ready_message: String,
    pub holding: Vec<Holding>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_job: Option<ActiveJob>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<LastRun>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_serial: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_lineage: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_secret_suffix: Option<String>,
    pub backups: Vec<StateBackup>,
    pub leases: Vec<LeaseView>,
    pub pending_approvals: Vec<PendingApproval>,
    /// `captf.io/retry` / `captf.io/replan` requests not used up yet.
    pub requests: Vec<Request>,
}

/// An operator's request for the next attempt now, until the Job that answers it is booked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Request {
    pub annotation: &'static str,
    pub token: String,
}

/// Whether a condition holds the object back.
/// Those that must be True are the ones `Ready` summarises before the object is provisioned,
/// and the cluster's endpoint; those that must not be are the negative ones, and `Paused`.
pub fn holds(type_: &str, status: &str) -> bool {
    if NEGATIVE_POLARITY.contains(&type_) || type_ == types::PAUSED {
        status == "True"
    } else if READY_INPUTS_BEFORE_PROVISIONED.contains(&type_) || type_ == types::ENDPOINT_AVAILABLE
    {
        status != "True"
    } else {
        HOLD_WHEN_FALSE.contains(&type_) && status == "False"
    }
}

/// The conditions that hold `w` back, each with the table's advice.
pub fn holding(w: &Workload) -> Vec<Holding> {
    w.conditions
        .iter()
        .filter(|c| holds(&c.type_, &c.status))
        .map(|c| {
            let advice = advice::lookup(&c.type_, &c.reason);
            Holding {
                condition: c.type_.to_string(),
                status: c.status.to_string(),
                reason: c.reason.to_string(),
                message: c.message.to_string(),
                meaning: advice.map(|a| a.meaning.clone()),
                what_to_do: advice.map(|a| a.what_to_do.clone()),
            }
        })
        .collect()
}

/// The value after `annotation=` in a message, up to the first blank, quote or backtick.
fn value_after<'a>(message: &'a str, annotation: &str) -> Option<&'a str> {
    let start = message.find(&format!("{annotation}="))? + annotation.len() + 1;
    let value = message[start..]
        .split(|c: char| c.is_whitespace() || matches!(c, '`' | '\'' | '"' | ')' | ','))
        .next()?;
    (!value.is_empty()).then_some(value)
}

/// The plans waiting for approval: `status.plan` (Manual), and a blocked or changed plan named
/// by `ApplyJobSucceeded`'s message.
pub fn pending_approvals(w: &Workload) -> Vec<PendingApproval> {
    let mut pending = Vec::new();
    if let Some(plan) = &w.plan {
        pending.push(PendingApproval {
            annotation: APPROVE_PLAN,
            hash: plan.plan_hash.clone(),
            reason: "PlanAwaitingApproval".to_owned(),
        });
    }
    if let Some(c) = w.condition(types::APPLY_JOB_SUCCEEDED) {
        for annotation in [APPROVE_DESTRUCTIVE_PLAN, APPROVE_PLAN] {
            if let Some(hash) = value_after(&c.message, annotation)
                && !pending.iter().any(|p| p.hash == hash)
            {
                pending.push(PendingApproval {
                    annotation,
                    hash: hash.to_owned(),
                    reason: c.reason.to_string(),
                });
            }
        }
    }
    pending
}

/// The report of one object, with the leases read for it.
pub fn report(w: &Workload, leases: Vec<LeaseView>) -> Report {
    let ready = w.condition(types::READY);
    Report {
        kind: w.kind().kind(),
        name: w.name.clone(),
        namespace: w.namespace.clone(),
        ready: ready.map_or_else(|| "-".to_owned(), |c| c.status.to_string()),
        ready_message: ready.map(|c| c.message.to_string()).unwrap_or_default(),
        holding: holding(w),
        active_job: w.workspace.active_job.clone(),
        last_run: w.workspace.last_run.clone(),
        state_serial: w.workspace.observed_state_serial,
        state_lineage: w.workspace.state_lineage.clone(),
        state_secret_suffix: w.workspace.state_secret_suffix.clone(),
        backups: w.workspace.state_backups.clone().unwrap_or_default(),
        leases,
        pending_approvals: pending_approvals(w),
        requests: w
            .requests
            .iter()
            .map(|(annotation, token)| Request {
                annotation,
                token: token.clone(),
            })
            .collect(),
    }
}

/// The report as text, for a terminal.
pub fn render(r: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "{}/{} in {}", r.kind, r.name, r.namespace);
    let _ = writeln!(out, "Ready: {}", r.ready);
    if !r.ready_message.is_empty() && r.ready != "True" {
        let _ = writeln!(out, "  {}", r.ready_message);
    }
    if !r.holding.is_empty() {
        let _ = writeln!(out, "\nHeld back by:");
        for h in &r.holding {
            let _ = writeln!(
                out,
                "  {} {}/{}: {}",
                h.condition, h.status, h.reason, h.message
            );
            if let Some(todo) = h.what_to_do.as_deref().filter(|t| *t != "—") {
                let _ = writeln!(out, "    what to do: {todo}");
            }
        }
    }
    if !r.pending_approvals.is_empty() {
        let _ = writeln!(out, "\nWaiting for approval:");
        for p in &r.pending_approvals {
            let _ = writeln!(
                out,
                "  {} ({}): kubectl captf approve {}{} -n {}",
                p.hash,
                p.reason,
                short(r.kind),
                if p.annotation == APPROVE_DESTRUCTIVE_PLAN {
                    " --destructive"
                } else {
                    ""
                },
                r.namespace
            );
        }
    }
    if !r.requests.is_empty() {
        let _ = writeln!(out, "\nRequested:");
        for q in &r.requests {
            let _ = writeln!(
                out,
                "  {}={}: answered by the next Job, removed once that Job is booked",
                q.annotation, q.token
            );
        }
    }
    let _ = writeln!(out);
    match &r.active_job {
        Some(j) => {
            let _ = writeln!(
                out,
                "Running: {} ({:?}, attempt {})",
                j.name, j.operation, j.attempt
            );
        }
        None => {
            let _ = writeln!(out, "Running: nothing");
        }
    }
    if let Some(run) = &r.last_run {
        let _ = writeln!(out, "Last run: {} ({:?})", run.job, run.operation);
        for s in run.steps.iter().flatten() {
            let took = s
                .duration_milliseconds
                .map(|ms| format!(" in {:.1}s", ms as f64 / 1000.0))
                .unwrap_or_default();
            let _ = writeln!(out, "  {} exit {}{took}", s.name, s.exit_code);
        }
        if let Some(e) = &run.error {
            let _ = writeln!(
                out,
                "  error ({:?}{}): {}",
                e.kind,
                e.step
                    .as_deref()
                    .map(|s| format!(", step {s}"))
                    .unwrap_or_default(),
                e.summary.as_deref().unwrap_or("-")
            );
        }
    }
    let _ = writeln!(
        out,
        "State: serial {}, lineage {}, Secret suffix {}",
        r.state_serial
            .map_or_else(|| "-".to_owned(), |s| s.to_string()),
        r.state_lineage.as_deref().unwrap_or("-"),
        r.state_secret_suffix.as_deref().unwrap_or("-")
    );
    let serials: Vec<String> = r.backups.iter().map(|b| b.serial.to_string()).collect();
    let _ = writeln!(
        out,
        "Backups: {}",
        if serials.is_empty() {
            "none".to_owned()
        } else {
            format!("serials {}", serials.join(", "))
        }
    );
    for l in &r.leases {
        let _ = writeln!(
            out,
            "Lease {} ({}): {}{}",
            l.name,
            l.purpose,
            l.holder.as_deref().unwrap_or("free"),
            l.operation
                .as_deref()
                .map(|op| format!(", {op}"))
                .unwrap_or_default()
        );
    }
    out
}

/// `tfc/<name>` style: the short name of a kind.
fn short(kind: &str) -> String {
    match kind {
        "TerraformMachine" => "tfm/",
        "TerraformMachinePool" => "tfmp/",
        _ => "tfc/",
    }
    .to_owned()
}

/// One line of `captf status` without a name: an object that is not Ready or is held back, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotReady {
    pub kind: &'static str,
    pub name: String,
    pub ready: String,
    /// The first holding condition's `Type/Reason`, or `-`.
    pub reason: String,
    pub message: String,
}

/// The objects that are not Ready, or that something holds back although they are (a plan
/// waiting for approval, drift, a deletion), in the order given.
pub fn not_ready(objects: &[Workload]) -> Vec<NotReady> {
    objects
        .iter()
        .filter_map(|w| {
            let ready = w.condition(types::READY);
            let first = holding(w).into_iter().next();
            if ready.is_some_and(|c| c.status == "True") && first.is_none() {
                return None;
            }
            Some(NotReady {
                kind: w.kind().kind(),
                name: w.name.clone(),
                ready: ready.map_or_else(|| "-".to_owned(), |c| c.status.to_string()),
                reason: first.as_ref().map_or_else(
                    || "-".to_owned(),
                    |h| format!("{}/{}", h.condition, h.reason),
                ),
                message: first
                    .map(|h| h.message)
                    .or_else(|| ready.map(|c| c.message.to_string()))
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// The not-Ready objects as a table.
pub fn render_not_ready(rows: &[NotReady], namespace: &str) -> String {
    if rows.is_empty() {
        return format!(
            "Every TerraformCluster, TerraformMachine and TerraformMachinePool in {namespace} is Ready, and nothing holds one back.\n"
        );
    }
    let name_width = rows
        .iter()
        .map(|r| r.kind.len() + 1 + r.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let reason_width = rows
        .iter()
        .map(|r| r.reason.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let mut out = format!(
        "{:name_width$}  READY    {:reason_width$}  MESSAGE\n",
        "NAME", "REASON"
    );
    for r in rows {
        let name = format!("{}/{}", r.kind, r.name);
        let message = r.message.lines().next().unwrap_or_default();
        out.push_str(&format!(
            "{name:name_width$}  {:7}  {:reason_width$}  {message}\n",
            r.ready, r.reason
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use captf_api::{Condition, PlanStatus, Term};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            last_transition_time: Time(Default::default()),
            message: message.into(),
            observed_generation: None,
            reason: Term::new(reason),
            status: Term::new(status),
            type_: Term::new(type_),
        }
    }

    fn workload(conditions: Vec<Condition>) -> Workload {
        Workload {
            name: "a".into(),
            namespace: "ns".into(),
            conditions,
            ..Default::default()
        }
    }

    #[test]
    fn which_conditions_hold_an_object_back() {
        for (type_, status, held) in [
            ("Ready", "False", false),
            ("StateReadable", "False", true),
            ("StateReadable", "Unknown", true),
            ("StateReadable", "True", false),
            ("Deleting", "True", true),
            ("Deleting", "False", false),
            ("DriftDetected", "True", true),
            ("DriftDetected", "False", false),
            ("Paused", "True", true),
            ("DeletionBlocked", "True", true),
            ("DriftJobSucceeded", "Unknown", false),
            ("DriftJobSucceeded", "False", true),
            ("RestoreJobSucceeded", "Unknown", false),
            ("AutoscalingActive", "False", false),
        ] {
            assert_eq!(holds(type_, status), held, "{type_}={status}");
        }
    }

    #[test]
    fn held_conditions_carry_the_docs_advice() {
        let w = workload(vec![
            condition("Ready", "False", "NotReady", "StateReadable is False"),
            condition(
                "StateReadable",
                "False",
                "StateCorrupt",
                "state x is corrupt",
            ),
            condition("IdentityAllowed", "True", "IdentityAllowed", ""),
        ]);
        let held = holding(&w);
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].reason, "StateCorrupt");
        assert!(
            held[0]
                .what_to_do
                .as_deref()
                .is_some_and(|t| t.contains("runbook"))
        );
    }

    #[test]
    fn requests_not_used_up_are_shown() {
        let mut w = workload(vec![]);
        let report_of = |w: &Workload| report(w, Vec::new());
        assert!(report_of(&w).requests.is_empty());
        assert!(!render(&report_of(&w)).contains("Requested:"));
        w.requests = vec![(captf_api::annotations::RETRY, "t1".into())];
        let r = report_of(&w);
        assert_eq!(
            r.requests,
            [Request {
                annotation: captf_api::annotations::RETRY,
                token: "t1".into()
            }]
        );
        assert!(
            render(&r).contains("Requested:\n  captf.io/retry=t1: answered by the next Job"),
            "{}",
            render(&r)
        );
    }

    #[test]
    fn approvals_come_from_the_plan_and_the_apply_message() {
        let mut w = workload(vec![condition(
            "ApplyJobSucceeded",
            "False",
            "DestructivePlanBlocked",
            "would replace x; approve: `kubectl annotate terraformcluster a -n ns captf.io/approve-destructive-plan=p2:abc --overwrite`",
        )]);
        let pending = pending_approvals(&w);
        assert_eq!(pending.len(), 1);
        assert_eq!(
            (pending[0].annotation, pending[0].hash.as_str()),
            (APPROVE_DESTRUCTIVE_PLAN, "p2:abc")
        );
        w.conditions = vec![condition(
            "ApplyJobSucceeded",
            "Unknown",
            "PlanAwaitingApproval",
            "approve with kubectl annotate ... captf.io/approve-plan=p2:def --overwrite",
        )];
        w.plan = Some(PlanStatus {
            plan_hash: "p2:def".into(),
            ..Default::default()
        });
        let pending = pending_approvals(&w);
        assert_eq!(pending.len(), 1, "the same plan once: {pending:?}");
        assert_eq!(
            (pending[0].annotation, pending[0].hash.as_str()),
            (APPROVE_PLAN, "p2:def")
        );
        assert!(pending_approvals(&workload(vec![])).is_empty());
    }

    #[test]
    fn the_table_lists_objects_not_ready_or_held_back() {
        let mut ready = workload(vec![condition("Ready", "True", "Ready", "")]);
        ready.name = "fine".into();
        let mut waiting = workload(vec![
            condition("Ready", "True", "Ready", ""),
            condition(
                "ApplyJobSucceeded",
                "Unknown",
                "PlanAwaitingApproval",
                "approve it",
            ),
        ]);
        waiting.name = "waiting".into();
        let rows = not_ready(&[waiting]);
        assert_eq!(
            (rows[0].ready.as_str(), rows[0].reason.as_str()),
            ("True", "ApplyJobSucceeded/PlanAwaitingApproval")
        );
        let held = workload(vec![
            condition("Ready", "False", "NotReady", "x"),
            condition(
                "StateReadable",
                "False",
                "StateCorrupt",
                "state is corrupt\nmore",
            ),
        ]);
        let fresh = Workload {
            name: "new".into(),
            ..Default::default()
        };
        let rows = not_ready(&[ready, held, fresh]);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].reason.as_str(), rows[0].ready.as_str()),
            ("StateReadable/StateCorrupt", "False")
        );
        assert_eq!(
            (rows[1].reason.as_str(), rows[1].ready.as_str()),
            ("-", "-")
        );
        let text = render_not_ready(&rows, "ns");
        assert!(
            text.contains("TerraformCluster/a")
                && text.contains("state is corrupt")
                && !text.contains("more"),
            "{text}"
        );
        assert!(render_not_ready(&[], "ns").contains("is Ready"));
    }
}
