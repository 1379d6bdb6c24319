//! The Manual plan side of a finished Job (clusters only): a plan to approve, an approved plan
//! applied, superseded or failed.

use captf_api::conditions::{Status, reasons, types};
use captf_api::names::ObjectKey;
use captf_api::{Operation, PlanStatus, annotations, events};
use k8s_openapi::jiff::Timestamp;

use super::{Booked, Finished, Note};
use crate::decide::approvals;
use crate::decide::{Counter, Effect};

/// What the cluster says as the finished Job is recorded.
#[derive(Clone, Copy, Debug)]
pub struct PlanBefore<'a> {
    pub key: &'a ObjectKey,
    /// The hash of the plan `status.plan` shows.
    pub shown: Option<&'a str>,
    /// `captf.io/approve-plan` on the object.
    pub approve_plan: Option<&'a str>,
}

/// What `status.plan` shows after the Job.
#[derive(Clone, Debug, PartialEq)]
pub enum Shown {
    Keep,
    Clear,
    Plan(PlanStatus),
}

/// The cluster's side of a finished Job under `applyPolicy: Manual`.
pub fn plan(f: &Finished, before: &PlanBefore, now: Timestamp) -> (Shown, Booked) {
    let mut booked = Booked::default();
    let plan = f.result.as_ref().and_then(|r| r.plan.as_ref());
    let approved = f.annotations.get(annotations::APPROVED_PLAN);
    let shown = match (f.op, f.succeeded) {
        (Operation::Apply, true) => {
            let Some(approved) = approved else {
                return (Shown::Keep, booked.about(&f.name));
            };
            booked
                .effects
                .push(Effect::Count(Counter::Approval("applied")));
            if before.approve_plan == Some(approved.as_str()) {
                booked.effects.push(Effect::Consume {
                    annotation: annotations::APPROVE_PLAN,
                    value: approved.clone(),
                    announce: Some(Note::normal(
                        events::PLAN_APPLIED,
                        format!("Job {} applied the approved plan {approved}", f.name),
                    )),
                });
            }
            Shown::Clear
        }
        (Operation::Plan, true) => {
            let Some((plan, inputs)) = plan.zip(f.inputs_hash()) else {
                booked.set(
                    types::APPLY_JOB_SUCCEEDED,
                    Status::False,
                    reasons::APPLY_FAILED,
                    format!("plan Job {} succeeded but left no readable plan; it is planned again after the retry delay", f.name),
                );
                return (Shown::Keep, booked.about(&f.name));
            };
            let shown = approvals::plan_status(&f.name, inputs, plan, now);
            // An empty plan applies without approval.
            if !approvals::is_empty(&shown.plan_hash) {
                let superseded = before
                    .shown
                    .is_some_and(|p| !approvals::is_empty(p) && p != shown.plan_hash);
                if superseded {
                    booked
                        .effects
                        .push(Effect::Count(Counter::Approval("superseded")));
                    let old = before.shown.unwrap_or_default();
                    let note = format!(
                        "plan {old} is superseded by plan {} of Job {}",
                        shown.plan_hash, f.name
                    );
                    // An approval of the old plan is void now: that is worth a warning.
                    booked
                        .effects
                        .push(Effect::Event(if before.approve_plan == Some(old) {
                            Note::warning(events::PLAN_SUPERSEDED, note)
                        } else {
                            Note::normal(events::PLAN_SUPERSEDED, note)
                        }));
                }
                booked
                    .effects
                    .push(Effect::Count(Counter::Approval("created")));
                let (ns, name) = (before.key.namespace(), before.key.name());
                let message = approvals::awaiting_message(ns, name, &shown, before.approve_plan);
                booked.set(
                    types::APPLY_JOB_SUCCEEDED,
                    Status::Unknown,
                    reasons::PLAN_AWAITING_APPROVAL,
                    message.clone(),
                );
                let note = Note::normal(events::PLAN_READY, message);
                booked.effects.push(Effect::Event(note));
            }
            Shown::Plan(shown)
        }
        (Operation::Apply, false) if f.markers.contains_key(annotations::PLAN_CHANGED) => {
            booked
                .effects
                .push(Effect::Count(Counter::Approval("superseded")));
            let mut message = format!(
                "Job {}: the approved plan no longer matches what would be applied; nothing was applied",
                f.name
            );
            let shown = match plan.zip(f.inputs_hash()) {
                Some((plan, inputs)) => {
                    let shown = approvals::plan_status(&f.name, inputs, plan, now);
                    let (ns, name) = (before.key.namespace(), before.key.name());
                    let awaiting = approvals::awaiting_message(ns, name, &shown, None);
                    message.push_str(&format!(". The new plan: {awaiting}"));
                    Shown::Plan(shown)
                }
                None => Shown::Clear,
            };
            booked.set(
                types::APPLY_JOB_SUCCEEDED,
                Status::Unknown,
                reasons::PLAN_CHANGED,
                message.clone(),
            );
            let note = Note::warning(events::PLAN_CHANGED, message);
            booked.effects.push(Effect::Event(note));
            shown
        }
        (Operation::Apply, false) if approved.is_some() => {
            booked
                .effects
                .push(Effect::Count(Counter::Approval("failed")));
            Shown::Keep
        }
        _ => Shown::Keep,
    };
    (shown, booked.about(&f.name))
}
