//! The plan that waits for approval, as `plan show` prints it, and `approve`.

use std::io::{BufRead, Write};

use captf_api::annotations::{APPROVE_DESTRUCTIVE_PLAN, APPROVE_PLAN};

use super::cluster::Ctx;
use super::workload::Workload;
use super::{Failure, Result, confirm, exit, status, write};

/// A pending plan as `plan show` and `approve` show it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShownPlan {
    pub object: String,
    pub annotation: &'static str,
    pub hash: String,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub add: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destroy: Option<i32>,
    pub resources: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

impl ShownPlan {
    pub fn render(&self) -> String {
        let mut text = format!(
            "{}: plan {} waits for approval ({})\n",
            self.object, self.hash, self.reason
        );
        if let (Some(a), Some(c), Some(d)) = (self.add, self.change, self.destroy) {
            text.push_str(&format!("  {a} to add, {c} to change, {d} to destroy (a replacement counts as one add and one destroy)\n"));
        }
        for r in &self.resources {
            text.push_str(&format!("  {r}\n"));
        }
        if !self.message.is_empty() {
            text.push_str(&format!("  {}\n", self.message));
        }
        if let Some(job) = &self.job {
            text.push_str(&format!(
                "  the plan Job: {job} (its log has the full plan)\n"
            ));
        }
        text
    }
}

/// The plan that waits: `status.plan` (Manual) or the one the destructive guard blocked.
pub fn shown_plan(w: &Workload) -> Result<ShownPlan> {
    let pending = status::pending_approvals(w);
    let Some(p) = pending.first() else {
        return Err(Failure::new(
            exit::NOT_FOUND,
            format!(
                "no plan of {} waits for approval; `kubectl captf status {}` says what it waits for",
                w.reference(),
                w.arg()
            ),
        ));
    };
    let apply = w.condition(captf_api::conditions::types::APPLY_JOB_SUCCEEDED);
    let mut shown = ShownPlan {
        object: w.reference(),
        annotation: p.annotation,
        hash: p.hash.clone(),
        reason: p.reason.clone(),
        add: None,
        change: None,
        destroy: None,
        resources: Vec::new(),
        message: String::new(),
        job: None,
    };
    match w.plan.as_ref().filter(|plan| plan.plan_hash == p.hash) {
        Some(plan) => {
            shown.add = Some(plan.add);
            shown.change = Some(plan.change);
            shown.destroy = Some(plan.destroy);
            shown.resources = plan.resources.clone().unwrap_or_default();
            shown.job = Some(plan.job.clone());
        }
        None => {
            shown.message = apply.map(|c| c.message.to_string()).unwrap_or_default();
            if let Some(run) = &w.workspace.last_run {
                shown.job = Some(run.job.clone());
                shown.resources = run
                    .error
                    .as_ref()
                    .and_then(|e| e.resources.clone())
                    .unwrap_or_default();
            }
        }
    }
    Ok(shown)
}

impl Ctx {
    pub async fn approve(
        &self,
        object: &str,
        destructive: bool,
        yes: bool,
        out: &mut dyn Write,
        input: &mut dyn BufRead,
    ) -> Result<()> {
        let w = self.get(object).await?;
        let shown = shown_plan(&w)?;
        let wanted = if destructive {
            APPROVE_DESTRUCTIVE_PLAN
        } else {
            APPROVE_PLAN
        };
        if shown.annotation != wanted {
            let flag = if shown.annotation == APPROVE_DESTRUCTIVE_PLAN {
                "with --destructive"
            } else {
                "without --destructive"
            };
            return Err(Failure::new(
                exit::REFUSED,
                format!(
                    "the plan of {} that waits is approved {flag} ({}); nothing was approved",
                    w.reference(),
                    shown.reason
                ),
            ));
        }
        write(out, &shown.render())?;
        confirm(
            &format!("Approve plan {} of {}?", shown.hash, w.reference()),
            yes,
            out,
            input,
        )?;
        // The plan must still be the one shown, on the object as it was read.
        let now = self.get(object).await?;
        let still = shown_plan(&now)
            .ok()
            .filter(|p| p.hash == shown.hash && p.annotation == shown.annotation);
        if still.is_none() {
            return Err(Failure::new(
                exit::REFUSED,
                format!(
                    "the plan of {} changed since it was shown: nothing was approved; look again with `kubectl captf plan show {object}`",
                    w.reference()
                ),
            ));
        }
        self.annotate(&now, wanted, Some(&shown.hash), Some(&now.resource_version))
            .await?;
        write(
            out,
            &format!(
                "approved plan {} of {} ({wanted}); follow it with `kubectl captf status {object}`\n",
                shown.hash,
                w.reference()
            ),
        )
    }
}
