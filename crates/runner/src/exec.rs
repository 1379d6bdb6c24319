//! One engine process: arguments, working directory and environment; stdout and stderr read
//! line by line, redacted, and streamed to the container log (or kept in memory); SIGTERM
//! forwarded with a stop timeout, then SIGKILL.
//!
//! The engine runs in its own process group: a signal sent to the runner's group (as a node
//! stopping a container may do) does not reach it or its provider plugins twice; only the
//! runner forwards SIGTERM, to the engine process alone, which then stops its plugins itself.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::watch;

use crate::diagnostics::complete_counts;
use crate::error::{Error, Result};
use crate::redact::Redactor;
use crate::result::Changes;
use crate::steps::{Output, Step, StepName};

/// Bytes of stderr (and of streamed stdout) kept per step for summaries.
pub const TAIL_BYTES: usize = 64 * 1024;
/// How long the output readers may lag behind the engine's exit (a plugin that kept a pipe
/// open must not hang the run).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How to run the engine.
#[derive(Debug, Clone)]
pub struct Engine {
    /// `--bin`: the runtime command.
    pub command: Vec<String>,
    /// Working directory (`<workdir>/root`).
    pub cwd: PathBuf,
    /// The whole environment of the process.
    pub env: Vec<(String, String)>,
    /// Grace after SIGTERM before SIGKILL.
    pub stop_timeout: Duration,
}

/// When a step must stop.
#[derive(Debug)]
pub enum Stop<'a> {
    /// On shutdown (SIGTERM to the runner): forward SIGTERM, wait the stop timeout, SIGKILL.
    OnShutdown(&'a mut watch::Receiver<bool>),
    /// After this long regardless of shutdown (the errored-state push of an interrupted run).
    After(Duration),
}

/// What one engine process did.
#[derive(Debug, Clone, Default)]
pub struct StepRun {
    /// Exit code; 128 + signal number when killed by a signal.
    pub exit: i32,
    /// Wall time.
    pub elapsed: Duration,
    /// Captured stdout (steps with [`Output::Capture`] / [`Output::CaptureAndLog`]).
    pub stdout: Vec<u8>,
    /// The last [`TAIL_BYTES`] of stdout, unredacted (in memory only).
    pub stdout_tail: String,
    /// The last [`TAIL_BYTES`] of stderr, unredacted (in memory only).
    pub stderr_tail: String,
    /// Counts of the last `Apply complete!` / `Destroy complete!` line.
    pub complete: Option<Changes>,
    /// The step was stopped by a shutdown or its deadline.
    pub interrupted: bool,
}

/// Where a stream goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sink {
    Stdout,
    Stderr,
}

#[derive(Debug, Default)]
struct Pumped {
    captured: Vec<u8>,
    tail: String,
    complete: Option<Changes>,
}

/// Runs `step` and waits for it, honouring `stop`.
pub async fn run_step(
    engine: &Engine,
    step: &Step,
    redactor: &Redactor,
    stop: Stop<'_>,
) -> Result<StepRun> {
    let program = engine.command.first().cloned().unwrap_or_default();
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(engine.command.iter().skip(1))
        .args(&step.args)
        .current_dir(&engine.cwd)
        .env_clear()
        .envs(engine.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(|source| Error::Spawn {
        program: program.clone(),
        source,
    })?;
    let pid = child.id();
    let redactor = Arc::new(redactor.clone());
    let capture = step.output != Output::Stream;
    let log_stdout = step.output != Output::Capture;
    let scan = matches!(step.name, StepName::Apply | StepName::Destroy);
    let out = child.stdout.take().map(|r| {
        let red = redactor.clone();
        tokio::spawn(pump(r, Sink::Stdout, red, capture, log_stdout, scan))
    });
    let err = child.stderr.take().map(|r| {
        let red = redactor.clone();
        tokio::spawn(pump(r, Sink::Stderr, red, false, true, false))
    });

    let mut interrupted = false;
    let status: std::io::Result<ExitStatus> = match stop {
        Stop::OnShutdown(shutdown) => {
            tokio::select! {
                status = child.wait() => status,
                () = shutdown_requested(shutdown) => {
                    interrupted = true;
                    terminate(&mut child, pid, engine.stop_timeout).await
                }
            }
        }
        Stop::After(limit) => match tokio::time::timeout(limit, child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                interrupted = true;
                terminate(&mut child, pid, Duration::ZERO).await
            }
        },
    };
    let status = status.map_err(|source| Error::Spawn {
        program: program.clone(),
        source,
    })?;
    let exit = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    let elapsed = started.elapsed();
    let out = drain(out).await;
    let err = drain(err).await;
    Ok(StepRun {
        exit,
        elapsed,
        stdout: out.captured,
        stdout_tail: out.tail,
        stderr_tail: err.tail,
        complete: out.complete,
        interrupted,
    })
}

/// Resolves once `shutdown` turns true; never when its sender is gone.
pub async fn shutdown_requested(shutdown: &mut watch::Receiver<bool>) {
    if shutdown.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// SIGTERM to the engine process, up to `grace` for it to exit, then SIGKILL to its group.
async fn terminate(
    child: &mut tokio::process::Child,
    pid: Option<u32>,
    grace: Duration,
) -> std::io::Result<ExitStatus> {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        tracing::warn!(
            pid,
            grace_seconds = grace.as_secs(),
            "forwarding SIGTERM to the engine"
        );
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    if !grace.is_zero()
        && let Ok(status) = tokio::time::timeout(grace, child.wait()).await
    {
        return status;
    }
    tracing::warn!("the engine did not stop in time; sending SIGKILL to its process group");
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // The whole group: plugins that outlive the engine would keep its output pipes open.
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
    let _ = child.start_kill();
    child.wait().await
}

async fn drain(task: Option<tokio::task::JoinHandle<Pumped>>) -> Pumped {
    let Some(task) = task else {
        return Pumped::default();
    };
    let abort = task.abort_handle();
    match tokio::time::timeout(DRAIN_TIMEOUT, task).await {
        Ok(Ok(p)) => p,
        Ok(Err(_)) => Pumped::default(),
        Err(_) => {
            abort.abort();
            Pumped::default()
        }
    }
}

async fn pump(
    reader: impl AsyncRead + Unpin,
    sink: Sink,
    redactor: Arc<Redactor>,
    capture: bool,
    log: bool,
    scan: bool,
) -> Pumped {
    let mut reader = BufReader::new(reader);
    let mut p = Pumped::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if capture {
            p.captured.extend_from_slice(&line);
        }
        if !log {
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        push_tail(&mut p.tail, &text);
        if scan && let Some(c) = complete_counts(&text) {
            p.complete = Some(c);
        }
        let mut redacted = redactor.redact(text.trim_end_matches(['\n', '\r']));
        redacted.push('\n');
        let _ = match sink {
            Sink::Stdout => std::io::stdout().lock().write_all(redacted.as_bytes()),
            Sink::Stderr => std::io::stderr().lock().write_all(redacted.as_bytes()),
        };
    }
    p
}

fn push_tail(tail: &mut String, text: &str) {
    tail.push_str(text);
    if tail.len() > TAIL_BYTES {
        let mut cut = tail.len() - TAIL_BYTES;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail.drain(..cut);
    }
}

/// `terraform_version` of `<bin> version -json` run in the root dir; `None` on any failure.
pub async fn runtime_version(engine: &Engine) -> Option<String> {
    let program = engine.command.first()?;
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(program)
            .args(engine.command.iter().skip(1))
            .args(["version", "-json"])
            .current_dir(&engine.cwd)
            .env_clear()
            .envs(engine.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .ok()?
    .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    v.get("terraform_version")?
        .as_str()
        .map(str::to_owned)
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_end_on_char_boundaries() {
        let mut t = String::new();
        push_tail(&mut t, &"ä".repeat(TAIL_BYTES));
        push_tail(&mut t, "END");
        assert!(t.len() <= TAIL_BYTES && t.ends_with("END"));
    }

    fn engine(script: &str) -> (tempfile::TempDir, Engine) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let engine = Engine {
            command: vec!["/bin/sh".into(), "-c".into(), script.into(), "sh".into()],
            cwd: tmp.path().to_owned(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            stop_timeout: Duration::from_secs(5),
        };
        (tmp, engine)
    }

    fn step(name: StepName, output: Output) -> Step {
        Step {
            name,
            args: vec![],
            ok_exits: &[0],
            ok_if_stderr: &[],
            output,
        }
    }

    #[tokio::test]
    async fn captures_scans_and_reports_exit() {
        let (_tmp, e) = engine(
            "echo 'Apply complete! Resources: 2 added, 0 changed, 1 destroyed.'; echo 'Error: boom' >&2; exit 3",
        );
        let (_tx, mut rx) = watch::channel(false);
        let r = run_step(
            &e,
            &step(StepName::Apply, Output::CaptureAndLog),
            &Redactor::new(),
            Stop::OnShutdown(&mut rx),
        )
        .await
        .expect("ran");
        assert_eq!(r.exit, 3);
        assert!(!r.interrupted);
        assert_eq!(r.complete.map(|c| (c.add, c.destroy)), Some((2, 1)));
        assert!(String::from_utf8_lossy(&r.stdout).contains("Apply complete!"));
        assert_eq!(r.stderr_tail, "Error: boom\n");
    }

    #[tokio::test]
    async fn shutdown_forwards_sigterm_and_waits() {
        // The engine traps SIGTERM, writes a marker and exits 7: the runner waits for that.
        let (tmp, e) = engine(
            "trap 'echo stopping; touch term; exit 7' TERM; touch started; while true; do sleep 0.1; done",
        );
        let (tx, mut rx) = watch::channel(false);
        let started = tmp.path().join("started");
        let trigger = tokio::spawn(async move {
            while !started.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = tx.send(true);
            tx
        });
        let r = run_step(
            &e,
            &step(StepName::Apply, Output::Stream),
            &Redactor::new(),
            Stop::OnShutdown(&mut rx),
        )
        .await
        .expect("ran");
        let _tx = trigger.await.expect("trigger");
        assert!(r.interrupted);
        assert_eq!(r.exit, 7);
        assert!(tmp.path().join("term").exists());
    }

    #[tokio::test]
    async fn sigkill_after_the_stop_timeout() {
        let (tmp, mut e) = engine("trap '' TERM; touch started; while true; do sleep 0.1; done");
        e.stop_timeout = Duration::from_millis(300);
        let (tx, mut rx) = watch::channel(false);
        let started = tmp.path().join("started");
        let trigger = tokio::spawn(async move {
            while !started.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = tx.send(true);
            tx
        });
        let r = run_step(
            &e,
            &step(StepName::Init, Output::Stream),
            &Redactor::new(),
            Stop::OnShutdown(&mut rx),
        )
        .await
        .expect("ran");
        let _tx = trigger.await.expect("trigger");
        assert!(r.interrupted);
        assert_eq!(r.exit, 128 + 9);
    }

    #[tokio::test]
    async fn bounded_steps_stop_at_their_deadline() {
        let (_tmp, e) = engine("sleep 30");
        let r = run_step(
            &e,
            &step(StepName::StatePush, Output::Stream),
            &Redactor::new(),
            Stop::After(Duration::from_millis(200)),
        )
        .await
        .expect("ran");
        assert!(r.interrupted);
        assert!(r.elapsed < Duration::from_secs(10));
    }

    #[tokio::test]
    async fn spawn_failure_is_an_error_not_a_panic() {
        let (_tmp, mut e) = engine("");
        e.command = vec!["/nonexistent/runtime".into()];
        let (_tx, mut rx) = watch::channel(false);
        let err = run_step(
            &e,
            &step(StepName::Init, Output::Stream),
            &Redactor::new(),
            Stop::OnShutdown(&mut rx),
        )
        .await
        .expect_err("spawn fails");
        assert_eq!(err.category(), "Spawn");
        assert!(runtime_version(&e).await.is_none());
    }
}
