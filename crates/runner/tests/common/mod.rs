//! Shared fixtures of the runner's integration tests: a small `cluster`-role module made of
//! `terraform_data` resources, its rendered root (through `captf_contract::render`), and runs of
//! the runner against the real engines built by `hack/build-tools.sh`.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::time::Duration;

use captf_contract::render::{MAIN_TF_FILE, TFVARS_FILE};
use captf_contract::{ClusterInputs, CommonInputs, Role, Variable, Variables};
use captf_runner::{Outcome, RunArgs};
use serde_json::{Value, json};

/// The module: `node` updates with `size` and is replaced when `generation` changes; `note` only
/// reaches an output; `password` is a Secret-sourced (sensitive) variable; `sleep_seconds > 0`
/// adds a resource whose provisioner sleeps (for interruption tests); `fail` makes the apply fail
/// after echoing `$API_TOKEN`.
pub const MODULE: &str = r#"
variable "captf_contract" { type = string }
variable "captf_cluster" { type = any }
variable "captf_object" { type = any }
variable "captf_tags" { type = map(string) }
variable "control_plane_endpoint" {
  type    = object({ host = string, port = number })
  default = null
}
variable "kubernetes_version" {
  type    = string
  default = null
}
variable "control_plane_initialized" { type = bool }
variable "cluster_network" {
  type    = any
  default = null
}
variable "size" { type = number }
variable "generation" { type = string }
variable "note" { type = string }
variable "password" {
  type      = string
  sensitive = true
}
variable "sleep_seconds" {
  type    = number
  default = 0
}
variable "fail" {
  type    = bool
  default = false
}

resource "terraform_data" "node" {
  input            = var.size
  triggers_replace = var.generation
}

resource "terraform_data" "secret" {
  input = var.password
}

resource "terraform_data" "slow" {
  count = var.sleep_seconds > 0 ? 1 : 0
  provisioner "local-exec" {
    command = "touch slow-started; sleep ${var.sleep_seconds}"
  }
}

resource "terraform_data" "fails" {
  count = var.fail ? 1 : 0
  provisioner "local-exec" {
    command = "echo \"token is $API_TOKEN\"; echo \"token is $API_TOKEN\" >&2; exit 3"
  }
}

output "control_plane_endpoint" {
  value = { host = "api.example.com", port = 6443 }
}
output "failure_domains" {
  value = {}
}
output "exports" {
  value = { note = var.note, node = terraform_data.node.output }
}
output "health" {
  value = { state = "Healthy" }
}
"#;

/// The sensitive variable's value in every fixture.
pub const PASSWORD: &str = "hunter2-correct-horse";
/// A credential in the runner's environment.
pub const API_TOKEN: &str = "tok-9f8e7d6c5b4a";

/// An engine built by `hack/build-tools.sh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Tofu,
    Terraform,
}

impl Engine {
    pub const ALL: [Engine; 2] = [Engine::Tofu, Engine::Terraform];

    /// The binary; panics with the build hint when `hack/build-tools.sh` has not built it.
    pub fn binary(self) -> PathBuf {
        let bin = std::env::var_os("CAPTF_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| captf_testenv::tools::cache_dir().join("bin"));
        let path = bin.join(match self {
            Engine::Tofu => "tofu",
            Engine::Terraform => "terraform",
        });
        assert!(
            path.is_file(),
            "{} is missing: build the engines with `hack/build-tools.sh` (or set CAPTF_BIN)",
            path.display()
        );
        path
    }
}

/// The user variables of one run.
#[derive(Debug, Clone)]
pub struct Vars {
    pub size: i64,
    pub generation: &'static str,
    pub note: &'static str,
    pub sleep_seconds: i64,
    pub fail: bool,
}

impl Default for Vars {
    fn default() -> Self {
        Vars {
            size: 1,
            generation: "g1",
            note: "first",
            sleep_seconds: 0,
            fail: false,
        }
    }
}

fn variables(v: &Vars) -> Variables {
    let plain = |value: Value| Variable {
        value,
        sensitive: false,
    };
    Variables::from([
        ("size".to_owned(), plain(json!(v.size))),
        ("generation".to_owned(), plain(json!(v.generation))),
        ("note".to_owned(), plain(json!(v.note))),
        ("sleep_seconds".to_owned(), plain(json!(v.sleep_seconds))),
        ("fail".to_owned(), plain(json!(v.fail))),
        (
            "password".to_owned(),
            Variable {
                value: json!(PASSWORD),
                sensitive: true,
            },
        ),
    ])
}

/// The cluster inputs every fixture renders.
pub fn cluster_inputs(namespace: &str) -> ClusterInputs {
    ClusterInputs {
        common: CommonInputs::new("c1", namespace, Role::Cluster, "c1", namespace, ""),
        control_plane_endpoint: None,
        kubernetes_version: Some("v1.34.0".into()),
        control_plane_initialized: false,
        cluster_network: None,
    }
}

/// `main.tf.json` and `terraform.tfvars.json` for `vars`; `local_backend` removes the
/// kubernetes backend block so state stays in the root dir.
pub fn render(vars: &Vars, namespace: &str, local_backend: bool) -> (Vec<u8>, Vec<u8>, String) {
    let inputs = cluster_inputs(namespace).into();
    let rendered = captf_contract::render(
        Role::Cluster,
        "captf.local/test/module:v1",
        &inputs,
        &variables(vars),
    )
    .expect("render");
    let mut main: Value = serde_json::from_slice(&rendered.main_tf_json).expect("main.tf.json");
    if local_backend && let Some(root) = main.as_object_mut() {
        root.remove("terraform");
    }
    (
        serde_json::to_vec_pretty(&main).expect("json"),
        rendered.tfvars_json,
        rendered.inputs_hash,
    )
}

/// A Job-like layout in a temp dir: `module/`, `config/`, `work/` (kept across runs: with the
/// local backend the state lives in `work/root`), a plan key, and result files.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub engine: Engine,
    runs: std::sync::atomic::AtomicU32,
}

impl Fixture {
    pub fn new(engine: Engine) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("module")).expect("module dir");
        std::fs::write(dir.path().join("module/main.tf"), MODULE).expect("module");
        std::fs::create_dir_all(dir.path().join("config")).expect("config dir");
        std::fs::create_dir_all(dir.path().join("work")).expect("work dir");
        std::fs::write(dir.path().join("plan-key"), [42u8; 32]).expect("key");
        std::fs::write(dir.path().join("other-key"), [7u8; 32]).expect("key");
        Fixture {
            dir,
            engine,
            runs: Default::default(),
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn root(&self) -> PathBuf {
        self.path("work/root")
    }

    /// Writes the config for `vars` (local backend) and returns its inputs hash.
    pub fn configure(&self, vars: &Vars) -> String {
        let (main, tfvars, hash) = render(vars, "default", true);
        std::fs::write(self.path("config").join(MAIN_TF_FILE), main).expect("main");
        std::fs::write(self.path("config").join(TFVARS_FILE), tfvars).expect("tfvars");
        hash
    }

    /// `run` flags for `op` plus `extra`, pointing at this fixture's layout.
    pub fn args(&self, op: &str, extra: &[String]) -> RunArgs {
        let n = self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut argv: Vec<String> = vec![
            format!("--op={op}"),
            format!("--bin={}", self.engine.binary().display()),
            "--image=captf.local/test/module:v1".into(),
            format!("--module={}", self.path("module").display()),
            format!("--providers={}", self.path("no-providers").display()),
            format!("--workdir={}", self.path("work").display()),
            format!("--config={}", self.path("config").display()),
            format!("--plan-key-file={}", self.path("plan-key").display()),
            format!("--credentials={}", self.path("no-credentials").display()),
            format!(
                "--result={}",
                self.path(&format!("result-{n}.json")).display()
            ),
            "--lock-timeout=10s".into(),
            "--stop-timeout=60s".into(),
        ];
        argv.extend(extra.iter().cloned());
        RunArgs::try_parse_from(argv).expect("run flags")
    }

    /// Runs the runner in-process with a minimal environment (never interrupted).
    pub async fn run(&self, op: &str, extra: &[&str]) -> Outcome {
        let args = self.args(
            op,
            &extra.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
        );
        let (tx, rx) = tokio::sync::watch::channel(false);
        let outcome = captf_runner::run(&args, env(), rx).await;
        drop(tx);
        // The document on disk is the one returned.
        let written: captf_runner::ResultDocument =
            serde_json::from_slice(&std::fs::read(&args.result).expect("result written"))
                .expect("result parses");
        assert_eq!(written.error, outcome.result.error);
        outcome
    }

    /// `show -json` of a saved plan in the workdir, run the way the runner runs steps.
    pub fn show_json(&self, plan_file: &str) -> Vec<u8> {
        let out = std::process::Command::new(self.engine.binary())
            .args(["show", "-json", "-no-color"])
            .arg(self.path("work").join(plan_file))
            .current_dir(self.root())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("TF_DATA_DIR", self.path("work/.terraform"))
            .env("HOME", self.path("work"))
            .output()
            .expect("show -json");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    pub fn state(&self) -> Value {
        serde_json::from_slice(
            &std::fs::read(self.root().join("terraform.tfstate")).expect("state"),
        )
        .expect("state json")
    }
}

/// The environment runs get: PATH and a credential.
pub fn env() -> Vec<(String, String)> {
    vec![
        (
            "PATH".into(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        ),
        ("API_TOKEN".into(), API_TOKEN.into()),
        (
            "TF_CLI_CONFIG_FILE".into(),
            "/nonexistent/terraformrc".into(),
        ),
    ]
}

/// The `captf` binary (`$CAPTF_EXE`, else `target/<profile>/captf` next to the test binary).
/// Build it first with `cargo build -p captf` (a workspace `cargo test` builds it too).
pub fn captf_exe() -> PathBuf {
    if let Some(p) = std::env::var_os("CAPTF_EXE") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test exe");
    let candidates = [
        exe.with_file_name("captf"),
        exe.parent()
            .and_then(Path::parent)
            .map(|p| p.join("captf"))
            .unwrap_or_default(),
    ];
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("the captf binary is not built next to {}: run `cargo build -p captf` with the same target dir first (or set CAPTF_EXE)", exe.display()))
}

/// Polls `check` every 50 ms until it holds, failing after `timeout`.
pub async fn until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn step_names(outcome: &Outcome) -> Vec<&str> {
    outcome
        .result
        .steps
        .iter()
        .map(|s| s.name.as_str())
        .collect()
}
