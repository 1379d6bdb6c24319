//! Tearing a node down to nothing, from its folder and network slot alone, so `captf-testenv
//! down` after a crashed supervisor does the same as a clean stop: no container process, shim,
//! mount, cgroup, network namespace, interface, iptables rule or log link of it is left.
//!
//! Order matters: the containers first (their cgroups, so nothing restarts or holds a mount),
//! then the shims that watched them, then every mount under the folder (volumes, root file
//! systems, pod network namespaces), then the node's network namespace, then the cgroups.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::config::NodeLayout;
use super::network::Network;

/// The cgroup the kubelet puts every pod under (`cgroupRoot`), one per environment.
pub fn cgroup_root(network: &Network) -> String {
    format!("/captf-{}", network.slot)
}

/// The cgroup v1 hierarchies mounted under /sys/fs/cgroup (the v2 `unified` mount included:
/// the kubelet creates its cgroups there too).
fn hierarchies() -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fstype = right.split_whitespace().next()?;
            let point = left.split_whitespace().nth(4)?;
            (fstype == "cgroup" || fstype == "cgroup2").then(|| PathBuf::from(unescape(point)))
        })
        .collect()
}

/// Creates the node's cgroup in every hierarchy; cpuset needs its CPUs and memory nodes
/// copied from the parent before any task can join a child.
pub fn create_cgroups(network: &Network) -> anyhow::Result<()> {
    let root = cgroup_root(network);
    for hierarchy in hierarchies() {
        let dir = hierarchy.join(root.trim_start_matches('/'));
        std::fs::create_dir_all(&dir)
            .map_err(|e| anyhow::anyhow!("creating cgroup {}: {e}", dir.display()))?;
        for file in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(value) = std::fs::read_to_string(hierarchy.join(file)) {
                std::fs::write(dir.join(file), value.trim())
                    .map_err(|e| anyhow::anyhow!("writing {}: {e}", dir.join(file).display()))?;
            }
        }
    }
    Ok(())
}

/// Kills every process in the node's cgroups (the containers, sandboxes included) and waits
/// until they are gone.
pub fn kill_containers(network: &Network) {
    let root = cgroup_root(network);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let pids: Vec<i32> = hierarchies()
            .iter()
            .flat_map(|h| cgroup_dirs(&h.join(root.trim_start_matches('/'))))
            .flat_map(|dir| read_pids(&dir.join("cgroup.procs")))
            .collect();
        if pids.is_empty() || Instant::now() > deadline {
            return;
        }
        for pid in pids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills the containerd shims serving this node's containerd (found by the socket they name).
pub fn kill_shims(layout: &NodeLayout) {
    let socket = layout.containerd_socket().display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_shim = args
            .first()
            .is_some_and(|a| a.ends_with(b"containerd-shim-runc-v2"));
        if is_shim
            && args
                .windows(2)
                .any(|w| w[0] == b"-address" && w[1] == socket.as_bytes())
        {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Unmounts everything mounted under `dir`, deepest first (lazily: a mount still busy goes as
/// soon as its last user does).
pub fn unmount_under(dir: &Path) {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let prefix = format!("{}/", dir.display());
    let mut points: Vec<String> = text
        .lines()
        .filter_map(|line| line.split_whitespace().nth(4).map(unescape))
        .filter(|point| point.starts_with(&prefix) || point == &dir.display().to_string())
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    points.dedup();
    for point in points {
        let _ = nix::mount::umount2(point.as_str(), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Removes the node's cgroups, children first.
pub fn remove_cgroups(network: &Network) {
    let root = cgroup_root(network);
    for hierarchy in hierarchies() {
        let mut dirs = cgroup_dirs(&hierarchy.join(root.trim_start_matches('/')));
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in dirs {
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

/// The kubelet links every container log into /var/log/containers (a fixed path); remove the
/// links that point into this node's pod logs.
pub fn remove_log_links(layout: &NodeLayout) {
    let Ok(entries) = std::fs::read_dir("/var/log/containers") else {
        return;
    };
    for entry in entries.flatten() {
        if std::fs::read_link(entry.path()).is_ok_and(|t| t.starts_with(layout.pod_logs())) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Removes shim sockets in /run/containerd/s that nobody listens on any more (a killed shim
/// leaves its socket; the live shims of other environments answer).
pub fn remove_stale_shim_sockets() {
    let Ok(entries) = std::fs::read_dir("/run/containerd/s") else {
        return;
    };
    for entry in entries.flatten() {
        if std::os::unix::net::UnixStream::connect(entry.path()).is_err() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Everything but the network namespace (the API server listens on its veth pair: it goes
/// last, [`Network::delete`]), in order, for a node whose processes (containerd, kubelet,
/// kube-proxy) are already stopped or gone.
pub fn all(layout: &NodeLayout, network: &Network) {
    kill_containers(network);
    kill_shims(layout);
    unmount_under(&layout.root);
    remove_cgroups(network);
    remove_log_links(layout);
    remove_stale_shim_sockets();
    // The kubelet's and the shims' fixed folders, when nothing else uses them.
    for dir in [
        "/var/log/containers",
        "/run/containerd/s",
        "/run/containerd",
    ] {
        let _ = std::fs::remove_dir(dir);
    }
}

fn cgroup_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if !dir.is_dir() {
        return out;
    }
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        if let Ok(entries) = std::fs::read_dir(&d) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(entry.path());
                }
            }
        }
        out.push(d);
    }
    out
}

fn read_pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let bytes = field.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(code) = u8::from_str_radix(&field[i + 1..i + 4], 8)
        {
            out.push(char::from(code));
            i += 4;
        } else {
            out.push(char::from(bytes[i]));
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(super::unescape(r"/tmp/a\040b"), "/tmp/a b");
        assert_eq!(super::unescape("/plain"), "/plain");
    }
}
