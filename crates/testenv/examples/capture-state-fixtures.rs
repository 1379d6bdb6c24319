//! Captures state fixtures for `crates/state/tests/fixtures/` from the REAL engines writing
//! through the REAL `kubernetes` backend, on the local control plane:
//!
//! - `opentofu-<v>-single.json`: one Secret;
//! - `terraform-<v>-chunked.json`: a state over 1 MiB compressed, split into `-part-N` Secrets;
//! - `opentofu-<v>-locked.json`: the Secrets while an apply holds the lock (with the lock Lease);
//! - `opentofu-<v>-encrypted.json`: OpenTofu client-side state encryption.
//!
//! The expectations are what the engine itself reports (`state pull`), not what our reader makes
//! of the Secrets, so the fixtures test the reader instead of echoing it.
//!
//! Run: `cargo run -p captf-testenv --example capture-state-fixtures -- crates/state/tests/fixtures`

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use base64::Engine as _;
use captf_testenv::fixtures::{grant_state_access, push_module_image, run_job, shell_job};
use captf_testenv::images::Engine;
use captf_testenv::tools::Tools;
use captf_testenv::{TestEnv, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, PostParams};

const SMALL: &str = r#"
terraform {
  backend "kubernetes" {}
}
variable "trigger" {
  type    = string
  default = "one"
}
resource "terraform_data" "a" {
  input = var.trigger
}
resource "terraform_data" "many" {
  count = 3
  input = count.index
}
data "terraform_remote_state" "none" {
  backend = "local"
  config  = { path = "${path.module}/empty.tfstate" }
}
output "a" {
  value = terraform_data.a.output
}
output "secret" {
  value     = "not-really-secret"
  sensitive = true
}
"#;

const SLOW: &str = r#"
terraform {
  backend "kubernetes" {}
}
variable "trigger" {
  type    = string
  default = "one"
}
resource "terraform_data" "slow" {
  triggers_replace = [var.trigger]
  provisioner "local-exec" {
    command = var.trigger == "one" ? "true" : "sleep 60"
  }
}
output "trigger" {
  value = var.trigger
}
"#;

const ENCRYPTED: &str = r#"
terraform {
  backend "kubernetes" {}
  encryption {
    key_provider "pbkdf2" "fixture" {
      passphrase = "a-fixture-passphrase-not-a-secret"
    }
    method "aes_gcm" "fixture" {
      keys = key_provider.pbkdf2.fixture
    }
    state {
      method = method.aes_gcm.fixture
    }
  }
}
variable "trigger" {
  type    = string
  default = "one"
}
resource "terraform_data" "a" {
  input = "encrypted-${var.trigger}"
}
output "a" {
  value = terraform_data.a.output
}
"#;

/// A local state the module's `terraform_remote_state` data source reads (a data source must
/// not count as a managed resource).
const EMPTY_STATE: &[u8] = br#"{"version": 4, "terraform_version": "1.6.0", "serial": 1, "lineage": "fixture", "outputs": {}, "resources": []}"#;

/// Prints the engine's own view of the state after a marker line; [`apply`] reads it from the
/// container's log and [`ok`] summarizes it.
const SUMMARY: &str = "echo '--- state pull'; /captf/runtime state pull";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .context("usage: capture-state-fixtures OUT_DIR")?,
    );
    std::fs::create_dir_all(&out)?;
    let tools = Tools::locate()?;
    let env = TestEnv::shared().clone();
    let client = env.client().await?;
    let ns = env.namespace(&client, "fixtures").await?;
    grant_state_access(&client, &ns).await?;
    let tofu_version = version(&tools.tofu)?;
    let terraform_version = version(&tools.terraform)?;

    // Single Secret, OpenTofu.
    let image = module_image(
        &env,
        "tofu-small",
        SMALL,
        Engine::Tofu,
        &[("empty.tfstate", EMPTY_STATE)],
    )?;
    let summary = apply(&client, &ns, &image, "single-c", "one", SUMMARY).await?;
    let secrets = capture(&client, &ns, "single-c").await?;
    write(
        &out,
        &format!("opentofu-{tofu_version}-single.json"),
        "OpenTofu apply of a module with a count resource, a data source and a sensitive output",
        &secrets,
        ok(&summary),
        None,
    )?;

    // Chunked, Terraform: incompressible input makes the gzip state larger than one 1 MiB chunk.
    let mut blob = vec![0u8; 560 * 1024];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut blob)?;
    let blob = base64::engine::general_purpose::STANDARD.encode(&blob);
    let big = SMALL.replace(
        "input = var.trigger",
        "input = file(\"${path.module}/blob.txt\")",
    );
    let image = module_image(
        &env,
        "terraform-big",
        &big,
        Engine::Terraform,
        &[
            ("blob.txt", blob.as_bytes()),
            ("empty.tfstate", EMPTY_STATE),
        ],
    )?;
    let summary = apply(&client, &ns, &image, "chunked-c", "one", SUMMARY).await?;
    let secrets = capture(&client, &ns, "chunked-c").await?;
    anyhow::ensure!(
        secrets.len() > 1,
        "Terraform wrote one Secret; the state did not chunk"
    );
    write(
        &out,
        &format!("terraform-{terraform_version}-chunked.json"),
        "Terraform apply whose state is over 1 MiB compressed, split into -part-N Secrets",
        &secrets,
        ok(&summary),
        None,
    )?;

    // Locked, OpenTofu: a second apply sleeps while it holds the lock.
    let image = module_image(&env, "tofu-slow", SLOW, Engine::Tofu, &[])?;
    let summary = apply(&client, &ns, &image, "locked-c", "one", SUMMARY).await?;
    let job = job(&image, "locked-c", "two", "true", &ns)?;
    Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &job)
        .await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let lease = wait_for("the lock to be held", Duration::from_secs(120), || async {
        let lease = leases.get_opt("lock-tfstate-default-locked-c").await?;
        Ok(lease.filter(|l| {
            l.spec
                .as_ref()
                .and_then(|s| s.holder_identity.clone())
                .is_some_and(|h| !h.is_empty())
        }))
    })
    .await?;
    let secrets = capture(&client, &ns, "locked-c").await?;
    let lease_json = serde_json::json!({
        "holderIdentity": lease.spec.and_then(|s| s.holder_identity),
        "annotations": lease.metadata.annotations,
    });
    write(
        &out,
        &format!("opentofu-{tofu_version}-locked.json"),
        "OpenTofu state while a second apply holds the lock Lease (recorded under \"lease\")",
        &secrets,
        ok(&summary),
        Some(lease_json),
    )?;

    // Encrypted, OpenTofu.
    let image = module_image(&env, "tofu-encrypted", ENCRYPTED, Engine::Tofu, &[])?;
    apply(&client, &ns, &image, "encrypted-c", "one", "true").await?;
    let secrets = capture(&client, &ns, "encrypted-c").await?;
    write(
        &out,
        &format!("opentofu-{tofu_version}-encrypted.json"),
        "OpenTofu with client-side state encryption (pbkdf2 + aes_gcm, a throwaway passphrase)",
        &secrets,
        serde_json::json!({"error": "StateEncrypted"}),
        None,
    )?;
    println!("wrote fixtures to {}", out.display());
    Ok(())
}

fn version(engine: &Path) -> anyhow::Result<String> {
    let out = std::process::Command::new(engine)
        .args(["version", "-json"])
        .env_remove("TF_CLI_CONFIG_FILE")
        .output()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("version -json")?;
    Ok(v["terraform_version"]
        .as_str()
        .context("terraform_version")?
        .to_owned())
}

/// A module image with `engine` and a shell (the Jobs below run scripts), the module being
/// `module` as main.tf plus `extra` files.
fn module_image(
    env: &TestEnv,
    name: &str,
    module: &str,
    engine: Engine,
    extra: &[(&str, &[u8])],
) -> anyhow::Result<String> {
    let dir = std::env::temp_dir().join(format!("captf-fixtures-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("main.tf"), module)?;
    for (file, content) in extra {
        std::fs::write(dir.join(file), content)?;
    }
    let image = push_module_image(
        env,
        &format!("fixtures/{name}:v1"),
        "cluster",
        &dir,
        engine,
        true,
    );
    let _ = std::fs::remove_dir_all(&dir);
    image
}

fn job(
    image: &str,
    suffix: &str,
    trigger: &str,
    after: &str,
    ns: &str,
) -> anyhow::Result<k8s_openapi::api::batch::v1::Job> {
    let name = format!("{suffix}-{trigger}");
    let script = format!(
        "set -e\nexport TF_DATA_DIR=/tmp/data\ncd /captf/module\n/captf/runtime init -input=false -no-color -backend-config=secret_suffix={suffix} -backend-config=namespace={ns} -backend-config=in_cluster_config=true\n/captf/runtime apply -input=false -no-color -auto-approve -var trigger={trigger}\n{after}"
    );
    let mut job = shell_job(
        &name,
        image,
        &script,
        &[("HOME", "/tmp"), ("TF_IN_AUTOMATION", "1")],
    )?;
    if let Some(c) = job
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
        .map(|p| &mut p.containers[0])
    {
        c.termination_message_policy = Some("FallbackToLogsOnError".into());
    }
    Ok(job)
}

async fn apply(
    client: &kube::Client,
    ns: &str,
    image: &str,
    suffix: &str,
    trigger: &str,
    after: &str,
) -> anyhow::Result<String> {
    let job = job(image, suffix, trigger, after, ns)?;
    let outcome = run_job(client, ns, &job, Duration::from_secs(300)).await?;
    let (code, message) = outcome.terminated().context("no terminated state")?;
    anyhow::ensure!(
        outcome.condition == "Complete",
        "apply {suffix} failed ({code}): {}",
        message.unwrap_or_default()
    );
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
    let pod = outcome.pod.metadata.name.clone().context("pod name")?;
    Ok(pods.logs(&pod, &Default::default()).await?)
}

async fn capture(
    client: &kube::Client,
    ns: &str,
    suffix: &str,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let list = secrets
        .list(&ListParams::default().labels(&format!("tfstate=true,tfstateSecretSuffix={suffix}")))
        .await?;
    let mut out = Vec::new();
    for s in list.items {
        let mut entry = serde_json::json!({
            "name": s.metadata.name,
            "annotations": s.metadata.annotations.unwrap_or_default(),
        });
        if let Some(data) = s.data.and_then(|d| d.get("tfstate").cloned()) {
            entry["data_b64"] = base64::engine::general_purpose::STANDARD
                .encode(&data.0)
                .into();
        }
        out.push(entry);
    }
    Ok(out)
}

fn ok(log: &str) -> serde_json::Value {
    let pulled = log
        .split_once("--- state pull\n")
        .map_or("", |(_, state)| state);
    let s: serde_json::Value =
        serde_json::from_str(pulled.trim()).unwrap_or(serde_json::Value::Null);
    let managed = s["resources"]
        .as_array()
        .map(|r| r.iter().filter(|r| r["mode"] == "managed").count());
    let mut outputs: Vec<&String> = s["outputs"]
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    outputs.sort();
    serde_json::json!({"ok": {
        "serial": s["serial"], "resources": managed, "outputs": outputs,
        "lineage": s["lineage"], "terraform_version": s["terraform_version"],
    }})
}

fn write(
    out: &Path,
    file: &str,
    description: &str,
    secrets: &[serde_json::Value],
    expect: serde_json::Value,
    lease: Option<serde_json::Value>,
) -> anyhow::Result<()> {
    let mut doc = serde_json::json!({"description": format!("Captured by crates/testenv/examples/capture-state-fixtures.rs: {description}"), "secrets": secrets, "expect": expect});
    if let Some(lease) = lease {
        doc["lease"] = lease;
    }
    std::fs::write(out.join(file), serde_json::to_vec_pretty(&doc)?)?;
    println!("{file}: {} Secret(s)", secrets.len());
    Ok(())
}
