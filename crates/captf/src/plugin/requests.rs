//! `retry` and `replan`: the next attempt now. Each sets its annotation to a new token; the
//! manager answers it with the next Job it starts and removes it once that Job is booked
//! (docs/configuration.md, "Retry and replan"). What runs stays the manager's decision.

use std::io::Write;

use captf_api::annotations::{REPLAN, RETRY};

use super::cluster::Ctx;
use super::{Failure, Result, exit, status, write};

/// A token no earlier request used: the time, to the nanosecond.
fn token() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

impl Ctx {
    /// `captf.io/retry`: the Job that failed runs again without waiting out its backoff (a
    /// failing destroy of a deletion too).
    pub async fn retry(&self, object: &str, out: &mut dyn Write) -> Result<()> {
        let w = self.get(object).await?;
        let Some(run) = w.workspace.last_run.as_ref().filter(|r| r.error.is_some()) else {
            return Err(Failure::new(
                exit::REFUSED,
                format!(
                    "the last Job of {} did not fail: no retry waits (`kubectl captf replan {}` plans again now)",
                    w.reference(),
                    w.arg()
                ),
            ));
        };
        self.annotate(&w, RETRY, &token(), None).await?;
        let after = match &w.workspace.active_job {
            Some(active) => format!(" once Job {} ends", active.name),
            None => String::new(),
        };
        write(
            out,
            &format!(
                "retry requested: the next Job of {} starts{after} without waiting out the backoff of the failed {} Job {}; follow it with `kubectl captf status {}`\n",
                w.reference(),
                run.operation,
                run.job,
                w.arg()
            ),
        )
    }

    /// `captf.io/replan`: a waiting plan is made again, or drift is checked now.
    pub async fn replan(&self, object: &str, out: &mut dyn Write) -> Result<()> {
        let w = self.get(object).await?;
        // A deletion destroys what the state holds; there is no plan to make again (a failing
        // destroy is retried, not replanned).
        if w.deleting {
            return Err(Failure::new(
                exit::REFUSED,
                format!(
                    "{} is being deleted: nothing is planned for a deletion (a failing destroy takes `kubectl captf retry {}`)",
                    w.reference(),
                    w.arg()
                ),
            ));
        }
        self.annotate(&w, REPLAN, &token(), None).await?;
        let what = match status::pending_approvals(&w).first() {
            Some(p) => format!(
                "plan {} ({}) is made again; approve the new one",
                p.hash, p.reason
            ),
            None => {
                "a drift check runs now, unless an apply is due first (then that apply is the plan)"
                    .to_owned()
            }
        };
        write(
            out,
            &format!(
                "replan requested for {}: {what}; follow it with `kubectl captf status {}`\n",
                w.reference(),
                w.arg()
            ),
        )
    }
}
