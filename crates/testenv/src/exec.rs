//! `captf-testenv exec-container SPEC`: becomes one container process. It enters new mount and
//! UTS namespaces, sets the hostname to the pod name, lays out the image and the volumes at their
//! paths (only this process sees them), switches user and group, and execs the command. The node
//! starts it as the leader of a new process group, so signals reach the container and its
//! children.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use serde::{Deserialize, Serialize};

/// Everything the launcher needs, written by the node as JSON.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ContainerSpec {
    pub hostname: String,
    pub mounts: Vec<Mount>,
    pub env: Vec<(String, String)>,
    pub argv: Vec<String>,
    pub working_dir: Option<String>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub supplemental_groups: Vec<u32>,
}

/// One mount, applied in order.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Mount {
    /// Bind `source` at `target` (a file or a folder), optionally read-only.
    Bind {
        source: PathBuf,
        target: PathBuf,
        read_only: bool,
    },
    /// An overlay at `target`: `lower` folders (first wins) under a private writable layer.
    Overlay {
        lower: Vec<PathBuf>,
        upper: PathBuf,
        work: PathBuf,
        target: PathBuf,
    },
}

/// Runs the launcher; only returns on error (success replaces the process).
pub fn run(spec_path: &Path) -> anyhow::Result<std::convert::Infallible> {
    let spec: ContainerSpec =
        serde_json::from_slice(&std::fs::read(spec_path)?).context("container spec")?;
    unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS)
        .context("unshare mount and UTS namespaces (needs root)")?;
    // Keep our mounts from propagating back to the host.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .context("make / private")?;
    nix::unistd::sethostname(&spec.hostname).context("sethostname")?;
    // A volume mounted at /tmp would hide the sources of later binds that live under the host's
    // /tmp: hold every bind source open first and mount it through /proc/self/fd.
    let mut held = Vec::new();
    let mut mounts = spec.mounts.clone();
    for m in &mut mounts {
        if let Mount::Bind { source, .. } = m {
            let fd = nix::fcntl::open(
                source.as_path(),
                nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .with_context(|| format!("opening mount source {}", source.display()))?;
            *source = PathBuf::from(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&fd)
            ));
            held.push(fd);
        }
    }
    for m in &mounts {
        apply(m).with_context(|| format!("mount {m:?}"))?;
    }
    drop(held);
    if !spec.supplemental_groups.is_empty() || spec.gid.is_some() {
        let groups: Vec<nix::unistd::Gid> = spec
            .gid
            .iter()
            .chain(&spec.supplemental_groups)
            .map(|g| nix::unistd::Gid::from_raw(*g))
            .collect();
        nix::unistd::setgroups(&groups).context("setgroups")?;
    }
    if let Some(gid) = spec.gid {
        nix::unistd::setgid(nix::unistd::Gid::from_raw(gid)).context("setgid")?;
    }
    if let Some(uid) = spec.uid {
        nix::unistd::setuid(nix::unistd::Uid::from_raw(uid)).context("setuid")?;
    }
    let cwd = spec
        .working_dir
        .clone()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "/".into());
    std::env::set_current_dir(&cwd).with_context(|| format!("workingDir {cwd}"))?;
    let argv: Vec<CString> = spec
        .argv
        .iter()
        .map(|a| CString::new(a.as_str()))
        .collect::<Result<_, _>>()?;
    let env: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| CString::new(format!("{k}={v}")))
        .collect::<Result<_, _>>()?;
    let Some(program) = argv.first() else {
        bail!("container has no command")
    };
    let program = resolve_program(program, &spec.env)?;
    nix::unistd::execve(&program, &argv, &env).with_context(|| format!("exec {:?}", spec.argv))?;
    bail!("execve returned")
}

/// Finds the program on the container's PATH, as the runtime does when the command has no slash.
fn resolve_program(program: &CString, env: &[(String, String)]) -> anyhow::Result<CString> {
    let name = program.to_str()?;
    if name.contains('/') {
        return Ok(program.clone());
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or(DEFAULT_PATH);
    for dir in path.split(':') {
        let candidate = Path::new(dir).join(name);
        if candidate.is_file() {
            return Ok(CString::new(candidate.to_string_lossy().as_bytes())?);
        }
    }
    bail!("executable {name:?} not found in PATH {path}")
}

/// PATH when neither the image nor the pod sets one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn apply(m: &Mount) -> anyhow::Result<()> {
    match m {
        Mount::Bind {
            source,
            target,
            read_only,
        } => {
            ensure_mountpoint(target, source.is_dir())?;
            mount(
                Some(source),
                target,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )?;
            if *read_only {
                mount(
                    None::<&str>,
                    target,
                    None::<&str>,
                    MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                    None::<&str>,
                )?;
            }
        }
        Mount::Overlay {
            lower,
            upper,
            work,
            target,
        } => {
            ensure_mountpoint(target, true)?;
            let lower = lower
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(":");
            let options = format!(
                "lowerdir={lower},upperdir={},workdir={}",
                upper.display(),
                work.display()
            );
            mount(
                Some("overlay"),
                target,
                Some("overlay"),
                MsFlags::empty(),
                Some(options.as_str()),
            )?;
        }
    }
    Ok(())
}

/// Creates the mount point if it is missing. In a folder that is itself a private mount this
/// touches nothing outside the container; at the host's top level it leaves an empty file or
/// folder behind, which is harmless.
fn ensure_mountpoint(target: &Path, dir: bool) -> anyhow::Result<()> {
    if target.exists() {
        return Ok(());
    }
    if dir {
        std::fs::create_dir_all(target)?;
    } else {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::File::create(target)?;
    }
    Ok(())
}
