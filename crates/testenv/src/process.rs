//! Child processes of the control plane: started in their own process group with output to a
//! log file, stopped with SIGTERM, a grace period, then SIGKILL.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// A started child and its log.
#[derive(Debug)]
pub struct Managed {
    pub name: String,
    pub child: Child,
    /// What started it, to start it again ([`Group::restart`]).
    program: std::path::PathBuf,
    args: Vec<String>,
}

/// Starts `program args` in a new process group, appending stdout and stderr to `log`.
pub fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> anyhow::Result<Managed> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let err = out.try_clone()?;
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {name} ({})", program.display()))?;
    Ok(Managed {
        name: name.to_owned(),
        child,
        program: program.to_owned(),
        args: args.to_vec(),
    })
}

impl Managed {
    /// The process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it already exited; returns its status text if so.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// SIGTERM to the group, up to `grace` to exit, then SIGKILL.
    pub fn stop(&mut self, grace: Duration) {
        stop_group(self.pid(), grace, || {
            matches!(self.child.try_wait(), Ok(Some(_)) | Err(_))
        });
        let _ = self.child.wait();
    }
}

/// Processes started together, each logging to `<logs>/<name>.log`: the control plane's, the
/// node's.
#[derive(Debug)]
pub struct Group {
    pub logs: std::path::PathBuf,
    processes: Vec<Managed>,
}

impl Group {
    pub fn new(logs: &Path) -> Group {
        Group {
            logs: logs.to_owned(),
            processes: Vec::new(),
        }
    }

    /// Starts `program args` as `name`.
    pub fn spawn(&mut self, name: &str, program: &Path, args: &[String]) -> anyhow::Result<()> {
        let mut managed = spawn(name, program, args, &self.logs.join(format!("{name}.log")))?;
        managed.name = name.to_owned();
        self.processes.push(managed);
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
    }

    /// Names and pids (for `captf-testenv down` after a supervisor crash).
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.processes
            .iter()
            .map(|m| (m.name.clone(), m.pid()))
            .collect()
    }

    /// The first process that exited unexpectedly, with its status.
    pub fn crashed(&mut self) -> Option<(String, String)> {
        self.processes
            .iter_mut()
            .find_map(|m| m.exited().map(|status| (m.name.clone(), status)))
    }

    /// Stops `name` (SIGTERM, then SIGKILL after 10 s) and starts it again as it was started,
    /// its output appended to the same log: a component's restart, for fault tests.
    pub fn restart(&mut self, name: &str) -> anyhow::Result<()> {
        let index = self
            .processes
            .iter()
            .position(|m| m.name == name)
            .with_context(|| format!("no process {name}"))?;
        let old = &mut self.processes[index];
        old.stop(Duration::from_secs(10));
        let (program, args) = (old.program.clone(), old.args.clone());
        let log = self.logs.join(format!("{name}.log"));
        self.processes[index] = spawn(name, &program, &args, &log)?;
        Ok(())
    }

    /// Takes the newest process off the group (to stop it).
    pub fn pop(&mut self) -> Option<Managed> {
        self.processes.pop()
    }

    /// Stops everything, newest first.
    pub fn stop(&mut self) {
        while let Some(mut m) = self.processes.pop() {
            m.stop(Duration::from_secs(10));
        }
    }

    /// Polls `check` until it holds; fails with the log of a process that exited meanwhile,
    /// or after `timeout` with the log of `what`.
    pub async fn wait(
        &mut self,
        what: &str,
        timeout: Duration,
        check: impl Fn() -> bool,
    ) -> anyhow::Result<()> {
        self.wait_async(what, timeout, || {
            let ok = check();
            async move { ok }
        })
        .await
    }

    /// [`Group::wait`] with an async check.
    pub async fn wait_async<F, Fut>(
        &mut self,
        what: &str,
        timeout: Duration,
        check: F,
    ) -> anyhow::Result<()>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            if check().await {
                return Ok(());
            }
            if let Some((name, status)) = self.crashed() {
                let log = self.logs.join(format!("{name}.log"));
                anyhow::bail!(
                    "{name} exited ({status}) while waiting for {what}:\n{}",
                    crate::control_plane::tail(&log, 30)
                );
            }
            if Instant::now() > deadline {
                let log = self.logs.join(format!("{what}.log"));
                anyhow::bail!(
                    "{what} not healthy after {timeout:?}:\n{}",
                    crate::control_plane::tail(&log, 30)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Stops a process group that is not our child (e.g. after a supervisor crash): SIGTERM,
/// `grace`, SIGKILL. `gone` says whether the leader is gone.
pub fn stop_group(pgid: u32, grace: Duration, mut gone: impl FnMut() -> bool) {
    let Ok(raw) = i32::try_from(pgid) else { return };
    let group = Pid::from_raw(raw);
    if killpg(group, Signal::SIGTERM).is_err() {
        return;
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if gone() {
            // The leader exited; make sure nothing else of the group lingers.
            let _ = killpg(group, Signal::SIGKILL);
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = killpg(group, Signal::SIGKILL);
}

/// Whether a process with this pid exists.
pub fn alive(pid: u32) -> bool {
    i32::try_from(pid)
        .ok()
        .is_some_and(|raw| nix::sys::signal::kill(Pid::from_raw(raw), None).is_ok())
}

/// The addresses a `captf manager` logging to `log` bound its `servers` to, in that order,
/// each from its `"<server> server listening"` line. Fails with the log when the manager exits
/// first or has not bound them all within a minute.
pub fn served<const N: usize>(
    child: &mut Child,
    log: &Path,
    servers: &[&str; N],
) -> anyhow::Result<[String; N]> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let found = servers.map(|server| bound_address(&text, server));
        if found.iter().all(Option::is_some) {
            return Ok(found.map(Option::unwrap_or_default));
        }
        let tail = || crate::control_plane::tail(log, 30);
        if let Some(status) = child.try_wait()? {
            anyhow::bail!(
                "captf manager exited ({status}) before serving:\n{}",
                tail()
            );
        }
        if Instant::now() > deadline {
            anyhow::bail!("captf manager did not serve within 60s:\n{}", tail());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `addr` of the first JSON log line whose message starts with `"<server> server listening"`.
fn bound_address(log: &str, server: &str) -> Option<String> {
    let message = format!("{server} server listening");
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| {
            line["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(&message))
        })
        .and_then(|line| line["fields"]["addr"].as_str().map(str::to_owned))
}

/// A free TCP port on 127.0.0.1, bound and released, for a server that cannot report the port
/// it bound (servers this project starts itself bind port 0 and report it: [`served`]).
///
/// It is picked below the kernel's ephemeral range (32768 and up by default): the outgoing
/// connections of a busy test take ports from that range, and one of them could take a port
/// picked there between its release and its use.
pub fn free_port() -> anyhow::Result<u16> {
    free_port_on(std::net::Ipv4Addr::LOCALHOST.into())
}

/// [`free_port`] on another local address.
pub fn free_port_on(address: std::net::IpAddr) -> anyhow::Result<u16> {
    use std::hash::{BuildHasher, RandomState};
    const PORTS: std::ops::Range<u16> = 20_000..32_768;
    let random = RandomState::new();
    let span = u64::from(PORTS.end - PORTS.start);
    for attempt in 0..200u64 {
        let offset = u16::try_from(random.hash_one(attempt) % span)?;
        if std::net::TcpListener::bind((address, PORTS.start + offset)).is_ok() {
            return Ok(PORTS.start + offset);
        }
    }
    let listener = std::net::TcpListener::bind((address, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Async variant of [`stop_group`] for a tokio child: SIGTERM to its group, `grace` to exit, then
/// SIGKILL; returns its exit status.
pub async fn terminate_group(
    pgid: u32,
    grace: Duration,
    child: &mut tokio::process::Child,
) -> std::io::Result<std::process::ExitStatus> {
    let group = i32::try_from(pgid).map(Pid::from_raw).ok();
    if let Some(group) = group {
        let _ = killpg(group, Signal::SIGTERM);
    }
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => {
            if let Some(group) = group {
                let _ = killpg(group, Signal::SIGKILL);
            }
            status
        }
        Err(_) => {
            if let Some(group) = group {
                let _ = killpg(group, Signal::SIGKILL);
            }
            child.wait().await
        }
    }
}
