//! One operation against the bare engine: `tofu init && tofu apply -auto-approve` of the no-op
//! cluster module run by hand, against the same apply through CAPTF (a spec change to Ready).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use captf_api::TerraformCluster;
use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;

use crate::probe::{PeakSampler, Peaks};

/// One timed run.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub wall_ms: f64,
    pub peak: Peaks,
}

/// The engine and the runner, as the process node and a shell start them.
fn engine_or_runner(argv0: &str) -> bool {
    let base = argv0.rsplit('/').next().unwrap_or(argv0);
    matches!(base, "tofu" | "runner" | "runtime")
}

/// `tofu init && tofu apply -auto-approve` in a fresh folder holding the module and the root
/// CAPTF renders for it (`main.tf.json` without its backend block, so the state stays local,
/// and `terraform.tfvars.json`), with an empty CLI configuration.
pub fn bare(
    tofu: &Path,
    module: &Path,
    rendered: &captf_contract::Rendered,
    work: &Path,
) -> anyhow::Result<Run> {
    let root = work.join("root/work");
    std::fs::create_dir_all(&root)?;
    let module_dir = work.join("module");
    std::fs::create_dir_all(&module_dir)?;
    for entry in std::fs::read_dir(module)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "tf") {
            std::fs::copy(
                &path,
                module_dir.join(path.file_name().context("file name")?),
            )?;
        }
    }
    let mut main: serde_json::Value = serde_json::from_slice(&rendered.main_tf_json)?;
    if let Some(t) = main.get_mut("terraform").and_then(|t| t.as_object_mut()) {
        t.remove("backend");
    }
    // The rendered root calls the module at `../../module`.
    std::fs::write(
        root.join(captf_contract::render::MAIN_TF_FILE),
        serde_json::to_vec(&main)?,
    )?;
    std::fs::write(
        root.join(captf_contract::render::TFVARS_FILE),
        &rendered.tfvars_json,
    )?;
    let cli_config = work.join("empty.tfrc");
    std::fs::write(&cli_config, "")?;
    let tofu = tofu.display();
    let sampler = PeakSampler::start(engine_or_runner);
    let started = Instant::now();
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{tofu} init -input=false -no-color >init.log 2>&1 && {tofu} apply -auto-approve -input=false -no-color >apply.log 2>&1"
        ))
        .current_dir(&root)
        .env("TF_CLI_CONFIG_FILE", &cli_config)
        .env("TF_IN_AUTOMATION", "1")
        .status()?;
    let wall = started.elapsed();
    let peak = sampler.finish();
    anyhow::ensure!(
        status.success(),
        "the bare run failed ({status}); see {}",
        root.display()
    );
    Ok(Run {
        wall_ms: wall.as_secs_f64() * 1e3,
        peak,
    })
}

/// Sets `spec.variables.output_token` of the TerraformCluster and times the way to Ready: the
/// manager's pass that sees the new generation starts the apply (status names it in
/// `activeJob`), and the pass after the Job clears it with Ready.
pub async fn through_captf(
    api: &Api<TerraformCluster>,
    name: &str,
    token: &str,
    timeout: Duration,
) -> anyhow::Result<Run> {
    let sampler = PeakSampler::start(engine_or_runner);
    let started = Instant::now();
    let patched = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"variables": {"output_token": token}}})),
        )
        .await?;
    let generation = patched.metadata.generation;
    let deadline = started + timeout;
    loop {
        let tc = api.get(name).await?;
        let status = tc.status.as_ref();
        let done = status.is_some_and(|s| {
            s.workspace.observed_generation == generation && s.workspace.active_job.is_none()
        }) && captf_e2e::fixture::ready(&tc);
        if done {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{name} not Ready at generation {generation:?} after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let wall = started.elapsed();
    Ok(Run {
        wall_ms: wall.as_secs_f64() * 1e3,
        peak: sampler.finish(),
    })
}
