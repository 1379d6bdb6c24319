//! The runner through the real `captf` binary (`captf runner …`): a real SIGTERM during a slow
//! apply, what reaches the log, exit codes and `copy`.
//!
//! Needs `target/<profile>/captf`: run `cargo build -p captf` (same target dir) first; a
//! workspace-wide `cargo test` builds it as well.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use captf_runner::ResultDocument;
use captf_runner::result::ErrorKind;
use common::{API_TOKEN, Engine, Fixture, Vars, captf_exe, until};

fn spawn_run(f: &Fixture, op: &str, result: &Path, log: &Path) -> Child {
    let argv = [
        format!("--op={op}"),
        format!("--bin={}", f.engine.binary().display()),
        format!("--module={}", f.path("module").display()),
        format!("--providers={}", f.path("no-providers").display()),
        format!("--workdir={}", f.path("work").display()),
        format!("--config={}", f.path("config").display()),
        format!("--credentials={}", f.path("no-credentials").display()),
        format!("--result={}", result.display()),
        "--lock-timeout=10s".into(),
        "--stop-timeout=60s".into(),
    ];
    let log = std::fs::File::create(log).expect("log file");
    Command::new(captf_exe())
        .args(["runner", "run"])
        .args(argv)
        .env_clear()
        .envs(common::env())
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("captf runner run")
}

fn read_result(path: &Path) -> ResultDocument {
    let bytes = std::fs::read(path).expect("result written");
    assert!(bytes.len() <= 4096);
    serde_json::from_slice(&bytes).expect("result parses")
}

async fn wait_exit(child: &mut Child, timeout: Duration) -> i32 {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code().unwrap_or(-1);
        }
        assert!(
            Instant::now() < deadline,
            "the runner did not exit in {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn sigterm_saves_state(engine: Engine) {
    let f = Fixture::new(engine);
    f.configure(&Vars {
        sleep_seconds: 30,
        ..Vars::default()
    });
    let (result, log) = (f.path("result.json"), f.path("run.log"));
    let started = Instant::now();
    let mut child = spawn_run(&f, "apply", &result, &log);
    let marker = f.root().join("slow-started");
    until(
        "the slow provisioner to start",
        Duration::from_secs(120),
        || marker.exists(),
    )
    .await;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let code = wait_exit(&mut child, Duration::from_secs(90)).await;
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(code, 1, "{engine:?}: {log_text}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{engine:?}: waited for the sleep"
    );

    let doc = read_result(&result);
    let e = doc.error.expect("error");
    assert_eq!(e.kind, ErrorKind::Interrupted, "{engine:?}: {}", e.tail);
    assert_eq!(e.step.as_deref(), Some("apply"));
    assert!(e.tail.starts_with("interrupted (SIGTERM)"), "{}", e.tail);
    // The engine saved what it created and released the lock.
    let state: serde_json::Value = serde_json::from_slice(
        &std::fs::read(f.root().join("terraform.tfstate")).expect("state saved"),
    )
    .expect("state json");
    let names: Vec<&str> = state["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(
        names.contains(&"node") && names.contains(&"secret"),
        "{engine:?}: {names:?}"
    );
    assert!(
        !f.root().join(".terraform.tfstate.lock.info").exists(),
        "{engine:?}: lock left behind"
    );
    assert!(
        log_text.contains("forwarding SIGTERM to the engine"),
        "{log_text}"
    );
}

#[tokio::test]
async fn tofu_sigterm_during_a_slow_apply_saves_state_and_releases_the_lock() {
    sigterm_saves_state(Engine::Tofu).await;
}

#[tokio::test]
async fn terraform_sigterm_during_a_slow_apply_saves_state_and_releases_the_lock() {
    sigterm_saves_state(Engine::Terraform).await;
}

#[tokio::test]
async fn secrets_never_reach_the_log() {
    for engine in Engine::ALL {
        let f = Fixture::new(engine);
        f.configure(&Vars {
            fail: true,
            ..Vars::default()
        });
        let (result, log) = (f.path("result.json"), f.path("run.log"));
        let mut child = spawn_run(&f, "apply", &result, &log);
        assert_eq!(wait_exit(&mut child, Duration::from_secs(120)).await, 1);
        let text = std::fs::read_to_string(&log).expect("log");
        assert!(text.contains("token is (redacted)"), "{engine:?}: {text}");
        assert!(!text.contains(API_TOKEN), "{engine:?}: {text}");
        assert!(!text.contains(common::PASSWORD), "{engine:?}: {text}");
        // The dropped variable is named, not its value.
        assert!(text.contains("TF_CLI_CONFIG_FILE"), "{text}");
        assert!(!text.contains("/nonexistent/terraformrc"), "{text}");
        let doc = read_result(&result);
        assert_eq!(doc.error.map(|e| e.kind), Some(ErrorKind::Step));
    }
}

#[tokio::test]
async fn a_plan_json_never_reaches_the_log() {
    let f = Fixture::new(Engine::Tofu);
    f.configure(&Vars::default());
    std::fs::write(f.path("plan-key"), [42u8; 32]).expect("key");
    let (result, log) = (f.path("result.json"), f.path("run.log"));
    let mut child = Command::new(captf_exe())
        .args(["runner", "--logging-format=json", "run", "--op=plan"])
        .arg(format!("--bin={}", f.engine.binary().display()))
        .arg(format!("--module={}", f.path("module").display()))
        .arg(format!("--workdir={}", f.path("work").display()))
        .arg(format!("--config={}", f.path("config").display()))
        .arg(format!("--plan-key-file={}", f.path("plan-key").display()))
        .arg(format!("--result={}", result.display()))
        .env_clear()
        .envs(common::env())
        .stdout(std::fs::File::create(&log).expect("log"))
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    assert_eq!(wait_exit(&mut child, Duration::from_secs(120)).await, 0);
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        !text.contains("resource_changes") && !text.contains("planned_values"),
        "{text}"
    );
    let doc = read_result(&result);
    assert_eq!(doc.plan.map(|p| p.create), Some(2));
}

#[test]
fn exit_codes_and_copy() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = |args: &[&str]| {
        Command::new(captf_exe())
            .args(args)
            .current_dir(tmp.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("captf")
            .code()
    };
    assert_eq!(run(&["runner", "version"]), Some(0));
    assert_eq!(run(&["runner"]), Some(2));
    assert_eq!(run(&["runner", "nope"]), Some(2));
    assert_eq!(run(&["runner", "copy"]), Some(2));
    assert_eq!(
        run(&["runner", "run", "--op=apply", "extra", "--result=r.json"]),
        Some(2)
    );
    let doc = read_result(&tmp.path().join("r.json"));
    assert_eq!(doc.error.and_then(|e| e.step).as_deref(), Some("flags"));
    assert_eq!(run(&["runner", "copy", "/nonexistent/dir/runner"]), Some(1));
    let dst = tmp.path().join("bin/runner");
    std::fs::create_dir_all(dst.parent().expect("parent")).expect("mkdir");
    assert_eq!(
        run(&["runner", "copy", dst.to_str().expect("utf-8")]),
        Some(0)
    );
    // The Job calls the copy as `/captf/bin/runner run …`: under the name `runner` the binary
    // is the runner.
    let out = Command::new(&dst)
        .arg("version")
        .output()
        .expect("copied binary runs");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("captf runner "),
        "{out:?}"
    );
    // A module-less run writes an image-layout result and exits 1.
    assert_eq!(
        run(&[
            "runner",
            "run",
            "--op=destroy",
            "--module=/nonexistent",
            "--result=r2.json"
        ]),
        Some(1)
    );
    let doc = read_result(&tmp.path().join("r2.json"));
    assert_eq!(doc.error.map(|e| e.kind), Some(ErrorKind::ImageLayout));
}
