//! `retry` and `replan`: the next attempt now. Each sets its annotation to a new token; the
//! manager answers it with the next Job it starts and removes it once that Job is booked
//! (docs/configuration.md, "Retry and replan"). What runs stays the manager's decision.
//! `restore` sets `captf.io/restore-state`, withdrawing a failed request of the same serial
//! first (docs/backups.md).

use std::io::Write;
use std::time::{Duration, Instant};

use captf_api::annotations::{REPLAN, RESTORE_STATE, RETRY};
use captf_api::conditions::{reasons, types};

use super::cluster::Ctx;
use super::workload::Workload;
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
        self.annotate(&w, RETRY, Some(&token()), None).await?;
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
        self.annotate(&w, REPLAN, Some(&token()), None).await?;
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

    /// `captf.io/restore-state=<serial>`. The manager never runs a failed serial again while
    /// its request stands: it runs it again once the request was removed and it cleared
    /// `status.lastRestoredSerial`, so the plugin does that first.
    pub async fn restore(&self, w: &Workload, serial: i64, out: &mut dyn Write) -> Result<()> {
        let failed_before = w.workspace.last_restored_serial == Some(serial)
            && w.condition(types::RESTORE_JOB_SUCCEEDED)
                .is_some_and(|c| c.reason == reasons::RESTORE_FAILED);
        if failed_before {
            write(
                out,
                &format!(
                    "The last restore of serial {serial} failed; withdrawing that request until the manager clears status.lastRestoredSerial...\n"
                ),
            )?;
            if w.restore_request.is_some() {
                self.annotate(w, RESTORE_STATE, None, None).await?;
            }
            self.await_released(w, serial).await?;
        }
        self.annotate(w, RESTORE_STATE, Some(&serial.to_string()), None)
            .await?;
        write(
            out,
            &format!(
                "Restore of serial {serial} requested; follow it with `kubectl captf status {}`.\n",
                w.arg()
            ),
        )
    }

    /// Polls until the manager released the failed `serial` (its next pass after the request
    /// went), for at most two minutes.
    async fn await_released(&self, w: &Workload, serial: i64) -> Result<()> {
        const DEADLINE: Duration = Duration::from_secs(120);
        let start = Instant::now();
        loop {
            let now = self.get(&w.arg()).await?;
            if now.workspace.last_restored_serial != Some(serial) {
                return Ok(());
            }
            if start.elapsed() > DEADLINE {
                return Err(Failure::new(
                    exit::REFUSED,
                    format!(
                        "the manager did not clear status.lastRestoredSerial of {} within {}s, so serial {serial} cannot be requested again yet: is the manager running? (`kubectl captf status {}`); captf.io/restore-state stays removed",
                        w.reference(),
                        DEADLINE.as_secs(),
                        w.arg()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
