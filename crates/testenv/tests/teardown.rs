//! `captf-testenv down` leaves nothing behind: no process, mount, network namespace, interface,
//! cgroup, host iptables rule or kubelet log link of the environment, after it ran a pod (so
//! there were volumes, a sandbox, a pod network namespace and a veth to clean up).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use captf_testenv::TestEnv;
use captf_testenv::fixtures::{run_job, shell_image, shell_job};

fn output(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().expect(program);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What an environment in `dir` on network slot `slot` could leave behind.
fn traces(dir: &Path, slot: u8) -> Vec<String> {
    let dir = dir.display().to_string();
    let mut found = Vec::new();
    for line in std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
    {
        if line.contains(&dir) || line.contains(&format!("/run/netns/captf-{slot} ")) {
            found.push(format!("mount: {line}"));
        }
    }
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&dir) {
            found.push(format!(
                "process {}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    if output("ip", &["netns", "list"])
        .lines()
        .any(|l| l.starts_with(&format!("captf-{slot} ")))
    {
        found.push(format!("network namespace captf-{slot}"));
    }
    if Path::new(&format!("/sys/class/net/captf{slot}")).exists() {
        found.push(format!("interface captf{slot}"));
    }
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
        .expect("cgroups")
        .flatten()
    {
        let cgroup = hierarchy.path().join(format!("captf-{slot}"));
        if cgroup.exists() {
            found.push(format!("cgroup {}", cgroup.display()));
        }
    }
    for link in std::fs::read_dir("/var/log/containers")
        .into_iter()
        .flatten()
        .flatten()
    {
        if std::fs::read_link(link.path()).is_ok_and(|t| t.starts_with(&dir)) {
            found.push(format!("log link {}", link.path().display()));
        }
    }
    found
}

#[tokio::test]
async fn down_leaves_no_process_mount_namespace_interface_cgroup_or_rule() {
    let iptables_before = output("iptables-save", &[]);
    let dir = std::env::temp_dir().join(format!("captf-teardown-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let env = TestEnv::start(&dir, Some(std::process::id()), false).expect("environment");
    let slot = env.state.network.slot;
    let client = env.client().await.expect("client");
    let ns = env.namespace(&client, "teardown").await.expect("namespace");
    let shell = shell_image(&env).expect("shell image");
    let job = shell_job("probe", shell, "echo up > /dev/termination-log", &[]).expect("job");
    let outcome = run_job(&client, &ns, &job, Duration::from_secs(120))
        .await
        .expect("job");
    assert_eq!(outcome.condition, "Complete", "{}", outcome.describe());
    assert!(
        !traces(&env.dir, slot).is_empty(),
        "a running environment has traces to find"
    );

    let testenv = std::env::var_os("CAPTF_TESTENV_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let exe = std::env::current_exe().expect("exe");
            exe.parent()
                .and_then(Path::parent)
                .expect("target dir")
                .join("captf-testenv")
        });
    let down = Command::new(testenv)
        .arg("--dir")
        .arg(&env.dir)
        .arg("down")
        .output()
        .expect("down");
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    let left = traces(&env.dir, slot);
    assert!(left.is_empty(), "left behind:\n{}", left.join("\n"));
    // The node never touches the host's iptables (its rules live in its namespace).
    assert_eq!(
        output("iptables-save", &[])
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>(),
        iptables_before
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
