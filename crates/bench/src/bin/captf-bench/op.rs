//! One operation, three ways, on the same node and the same module image: `tofu init && tofu
//! apply` by hand on the host, the same two commands in a plain pod ([`crate::pod`]), and a spec
//! change applied by CAPTF until the object is Ready again. For the no-op cluster module and for
//! the time module (a real provider installed from the image's mirror). Each CAPTF run is taken
//! apart from watches of its Job and pod ([`crate::moments`]) and from the runner's result
//! document: where the time beyond the engine goes.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use captf_api::TerraformCluster;
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_contract::{Role, RoleInputs};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde::Serialize;
use serde_json::json;

use crate::moments::{Moments, PodMoments};
use crate::pod::BareRoot;
use crate::probe::{PeakSampler, Peaks};
use crate::{TEMPLATE_NS, median, mib};

/// The goal of issue #9 for CAPTF against the bare engine.
const OP_RATIO_GOAL: f64 = 1.3;
/// Most time one run of any of the three may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// A module measured, and the TerraformCluster of the template namespace that CAPTF applies it
/// through.
pub struct Module {
    /// `noop` or `time`.
    pub name: &'static str,
    /// Its folder under `modules/`.
    pub dir: &'static str,
    /// The image, as the TerraformCluster names it.
    pub image: String,
    pub cluster: String,
    /// The image ships `/captf/providers`.
    pub providers_mirror: bool,
}

/// The two modules: the no-op one (the template itself) and the time one.
pub fn modules(template: &str) -> [Module; 2] {
    [
        Module {
            name: "noop",
            dir: "noop/cluster",
            image: captf_e2e::fixture::CLUSTER_IMAGE.to_owned(),
            cluster: template.to_owned(),
            providers_mirror: false,
        },
        Module {
            name: "time",
            dir: "time/cluster",
            image: format!(
                "{}/modules/time-cluster:e2e",
                captf_testenv::node::IMAGE_REGISTRY
            ),
            cluster: format!("{template}-time"),
            providers_mirror: true,
        },
    ]
}

/// A run by hand on the host.
#[derive(Clone, Debug, Serialize)]
pub struct HostRun {
    pub wall_ms: f64,
    pub peak: Peaks,
}

/// A run in a plain pod, from just before its creation (milliseconds).
#[derive(Clone, Debug, Serialize)]
pub struct PodRun {
    pub total_ms: f64,
    /// Created and scheduled.
    pub scheduled_ms: f64,
    /// Scheduled to its first container running: the sandbox.
    pub start_ms: f64,
    /// The `init` container, and the `apply` container, to the pod's end.
    pub engine_ms: f64,
}

/// A run through CAPTF, from just before the spec change (milliseconds).
#[derive(Clone, Debug, Serialize)]
pub struct CaptfRun {
    pub total_ms: f64,
    pub peak: Peaks,
    /// The manager's pass that starts the apply: the change to its Job.
    pub to_job_ms: f64,
    /// The Job controller: the Job to its pod.
    pub to_pod_ms: f64,
    /// The scheduler.
    pub scheduled_ms: f64,
    /// Scheduled to the runner's container running: the sandbox and the init container that
    /// copies the runner.
    pub start_ms: f64,
    /// The runner's container, to the pod's end.
    pub runner_ms: f64,
    /// Of which the engine's steps, as the runner timed them (0.1 s each).
    pub engine_ms: f64,
    /// The Job controller: the pod's end to the Job's `Complete`.
    pub job_status_ms: f64,
    /// The manager's pass that reads the state back and writes Ready.
    pub to_ready_ms: f64,
    /// The runner's steps and their seconds.
    pub steps: Vec<(String, f64)>,
}

/// Every run of one module.
#[derive(Clone, Debug, Serialize)]
pub struct ModuleRuns {
    pub module: &'static str,
    pub image: String,
    pub host: Vec<HostRun>,
    pub pod: Vec<PodRun>,
    pub captf: Vec<CaptfRun>,
}

/// The whole measurement.
#[derive(Clone, Debug, Serialize)]
pub struct OpReport {
    pub modules: Vec<ModuleRuns>,
    /// The kubelet's `Pulled` events of the namespace: each image's first pull.
    pub pulls: Vec<String>,
}

/// The engine and the runner, as a shell and the node start them.
fn engine_or_runner(argv0: &str) -> bool {
    let base = argv0.rsplit('/').next().unwrap_or(argv0);
    matches!(base, "tofu" | "runner" | "runtime")
}

/// The root CAPTF renders for TerraformCluster `name` of the template namespace.
async fn rendered(client: &kube::Client, name: &str) -> anyhow::Result<captf_contract::Rendered> {
    let tcs: Api<TerraformCluster> = Api::namespaced(client.clone(), TEMPLATE_NS);
    let tc = tcs.get(name).await?;
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        TEMPLATE_NS,
        &captf_e2e::fixture::capi_cluster_resource(),
    );
    let cluster: captf_controller::capi::Cluster =
        serde_json::from_value(serde_json::to_value(clusters.get(name).await?)?)?;
    let variables =
        captf_controller::variables::merge(Role::Cluster, TEMPLATE_NS, &tc.spec.workspace, &[])
            .map_err(|gate| anyhow::anyhow!("variables: {gate:?}"))?
            .variables;
    Ok(captf_contract::render(
        Role::Cluster,
        &tc.spec.workspace.source.image,
        &RoleInputs::Cluster(captf_controller::inputs::cluster_inputs(
            &tc,
            &cluster,
            &captf_controller::inputs::ClusterHistory {
                control_plane_initialized: false,
                endpoint_from_module: true,
            },
        )),
        &variables,
    )?)
}

/// `--op-runs` rounds over both modules: by hand, in a plain pod, through CAPTF.
pub async fn measure(
    client: &kube::Client,
    work: &Path,
    template: &str,
    rounds: usize,
) -> anyhow::Result<OpReport> {
    let tools = captf_testenv::tools::Tools::locate()?;
    let moments = Moments::start(client, TEMPLATE_NS).await?;
    let mut out = Vec::new();
    for module in modules(template) {
        let rendered = rendered(client, &module.cluster).await?;
        let root = BareRoot::write(
            client,
            TEMPLATE_NS,
            module.name,
            &rendered,
            module.providers_mirror,
        )
        .await?;
        let module_dir = captf_e2e::workspace().join("modules").join(module.dir);
        let mut runs = ModuleRuns {
            module: module.name,
            image: module.image.clone(),
            host: Vec::new(),
            pod: Vec::new(),
            captf: Vec::new(),
        };
        for i in 0..rounds {
            let dir = work.join(format!("bare-{}-{i}", module.name));
            let host = tokio::task::block_in_place(|| {
                by_hand(
                    &tools,
                    &module_dir,
                    &rendered,
                    &dir,
                    module.providers_mirror,
                )
            })?;
            let pod_name = format!("bare-{}-{i}", module.name);
            let (at, seen) = root
                .run(
                    client,
                    TEMPLATE_NS,
                    &moments,
                    &pod_name,
                    &module.image,
                    RUN_TIMEOUT,
                )
                .await?;
            let pod = pod_run(at, &seen)?;
            let captf = through_captf(client, &moments, &module.cluster, &format!("op-{i}"))
                .await
                .with_context(|| format!("the CAPTF run {i} of {}", module.name))?;
            eprintln!(
                "one operation, {} module, run {i}: by hand {:.0} ms, plain pod {:.0} ms, CAPTF {:.0} ms",
                module.name, host.wall_ms, pod.total_ms, captf.total_ms
            );
            runs.host.push(host);
            runs.pod.push(pod);
            runs.captf.push(captf);
        }
        out.push(runs);
    }
    Ok(OpReport {
        modules: out,
        pulls: pulls(client).await?,
    })
}

/// `tofu init && tofu apply -auto-approve` in a fresh folder holding the module and the root
/// CAPTF renders for it (`main.tf.json` without its backend block, so the state stays local,
/// and `terraform.tfvars.json`), with the CLI configuration the runner writes for a provider
/// mirror (the host's build of it), else an empty one.
fn by_hand(
    tools: &captf_testenv::tools::Tools,
    module: &Path,
    rendered: &captf_contract::Rendered,
    work: &Path,
    providers_mirror: bool,
) -> anyhow::Result<HostRun> {
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
    // The rendered root calls the module at `../../module`.
    std::fs::write(
        root.join(captf_contract::render::MAIN_TF_FILE),
        serde_json::to_vec(&root_without_backend(rendered)?)?,
    )?;
    std::fs::write(
        root.join(captf_contract::render::TFVARS_FILE),
        &rendered.tfvars_json,
    )?;
    let cli_config = work.join("cli.tfrc");
    let cli = if providers_mirror {
        captf_runner::prepare::cli_config(&captf_testenv::images::provider_mirror())
    } else {
        String::new()
    };
    std::fs::write(&cli_config, cli)?;
    let tofu = tools.tofu.display();
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
        "the run by hand failed ({status}); see {}",
        root.display()
    );
    Ok(HostRun {
        wall_ms: wall.as_secs_f64() * 1e3,
        peak,
    })
}

/// The rendered `main.tf.json` without its backend block: the state stays where the engine
/// runs, as it would for anyone running the module by hand.
pub fn root_without_backend(
    rendered: &captf_contract::Rendered,
) -> anyhow::Result<serde_json::Value> {
    let mut main: serde_json::Value = serde_json::from_slice(&rendered.main_tf_json)?;
    if let Some(t) = main.get_mut("terraform").and_then(|t| t.as_object_mut()) {
        t.remove("backend");
    }
    Ok(main)
}

fn ms(from: Instant, to: Option<Instant>, what: &str) -> anyhow::Result<f64> {
    let to = to.with_context(|| format!("{what} was not seen"))?;
    Ok(to.saturating_duration_since(from).as_secs_f64() * 1e3)
}

fn pod_run(at: Instant, seen: &PodMoments) -> anyhow::Result<PodRun> {
    let created = seen.created.context("the pod's creation was not seen")?;
    let scheduled = seen.scheduled.context("the pod was not seen scheduled")?;
    let first = seen
        .first_container
        .context("the pod's first container was not seen")?;
    Ok(PodRun {
        total_ms: ms(at, seen.finished, "the pod's end")?,
        scheduled_ms: ms(at, Some(scheduled), "scheduling")?,
        start_ms: ms(scheduled.max(created), Some(first), "the first container")?,
        engine_ms: ms(first, seen.finished, "the pod's end")?,
    })
}

/// Sets `spec.variables.output_token` of TerraformCluster `name` and times the way to Ready:
/// the manager's pass that sees the new generation starts the apply (status names it in
/// `activeJob`), and the pass after the Job clears it with Ready. Then takes the run apart.
async fn through_captf(
    client: &kube::Client,
    moments: &Moments,
    name: &str,
    token: &str,
) -> anyhow::Result<CaptfRun> {
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), TEMPLATE_NS);
    let sampler = PeakSampler::start(engine_or_runner);
    let started = Instant::now();
    let patched = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"variables": {"output_token": token}}})),
        )
        .await?;
    let generation = patched.metadata.generation;
    crate::wait_until_async(
        &format!("{name} Ready at generation {generation:?}"),
        RUN_TIMEOUT,
        || async {
            let tc = api.get(name).await.ok()?;
            let done = tc.status.as_ref().is_some_and(|s| {
                s.workspace.observed_generation == generation && s.workspace.active_job.is_none()
            }) && captf_e2e::fixture::ready(&tc);
            done.then_some(())
        },
    )
    .await?;
    let ready = Instant::now();
    let peak = sampler.finish();

    // The watches may lag the read that saw Ready.
    let owner = ObjectKey::new(TEMPLATE_NS, WorkloadKind::Cluster, name)?.owner_name_label();
    let (job, pod) = crate::wait_until(
        &format!("the watches to see {name}'s Job and its pod finish"),
        Duration::from_secs(30),
        || {
            let (job_name, job) = moments.job_after(&owner, started)?;
            let pod = match moments.pods_of(&job_name).as_slice() {
                [pod] if pod.finished.is_some() => pod.clone(),
                _ => return None,
            };
            job.finished.map(|_| (job, pod))
        },
    )
    .await?;
    let job_created = job.created.context("the Job's creation")?;
    let pod_created = pod.created.context("the pod's creation")?;
    let scheduled = pod.scheduled.context("the pod's scheduling")?;
    let main = pod.main_container.context("the runner's container")?;
    let finished = pod.finished.context("the pod's end")?;
    let steps: Vec<(String, f64)> = pod
        .message
        .as_deref()
        .and_then(|m| serde_json::from_str::<captf_runner::result::ResultDocument>(m).ok())
        .map(|doc| doc.steps.into_iter().map(|s| (s.name, s.seconds)).collect())
        .unwrap_or_default();
    Ok(CaptfRun {
        total_ms: ms(started, Some(ready), "Ready")?,
        peak,
        to_job_ms: ms(started, Some(job_created), "the Job")?,
        to_pod_ms: ms(job_created, Some(pod_created), "the pod")?,
        scheduled_ms: ms(pod_created, Some(scheduled), "scheduling")?,
        start_ms: ms(scheduled, Some(main), "the runner's container")?,
        runner_ms: ms(main, Some(finished), "the pod's end")?,
        engine_ms: steps.iter().map(|(_, s)| s * 1e3).sum(),
        job_status_ms: ms(finished, job.finished, "the Job's end")?,
        to_ready_ms: ms(job.finished.unwrap_or(finished), Some(ready), "Ready")?,
        steps,
    })
}

/// The kubelet's `Pulled` events of the template namespace that pulled (not "already present").
async fn pulls(client: &kube::Client) -> anyhow::Result<Vec<String>> {
    let events: Api<Event> = Api::namespaced(client.clone(), TEMPLATE_NS);
    let mut out: Vec<String> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Pulled"))
        .filter_map(|e| e.message)
        .filter(|m| m.starts_with("Successfully pulled"))
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

fn med(v: impl Iterator<Item = f64>) -> f64 {
    median(&v.collect::<Vec<_>>())
}

impl OpReport {
    /// The JSON of every run, and the Markdown tables: the three ways side by side, then where
    /// the time of a CAPTF run goes, by module.
    pub fn render(&self) -> (serde_json::Value, String) {
        let mut md = String::from(
            "| Module | by hand on the host | plain pod | CAPTF: change → Ready | CAPTF / plain pod | CAPTF / by hand |\n| --- | --- | --- | --- | --- | --- |\n",
        );
        let mut summary = Vec::new();
        for m in &self.modules {
            let host = med(m.host.iter().map(|r| r.wall_ms));
            let pod = med(m.pod.iter().map(|r| r.total_ms));
            let captf = med(m.captf.iter().map(|r| r.total_ms));
            let to_pod = captf / pod.max(1e-3);
            let to_host = captf / host.max(1e-3);
            md.push_str(&format!(
                "| {} (median of {}) | {host:.0} ms | {pod:.0} ms | {captf:.0} ms | {to_pod:.2}x (goal ≤ {OP_RATIO_GOAL}x: {}) | {to_host:.2}x |\n",
                m.module,
                m.captf.len(),
                crate::report::goal(to_pod <= OP_RATIO_GOAL)
            ));
            summary.push(json!({
                "module": m.module, "image": m.image, "runs": m.captf.len(),
                "host_median_ms": host, "pod_median_ms": pod, "captf_median_ms": captf,
                "ratio_to_pod": to_pod, "ratio_to_host": to_host,
                "goal": {"what": format!("CAPTF <= {OP_RATIO_GOAL}x the engine in a plain pod"), "met": to_pod <= OP_RATIO_GOAL},
                "host": m.host, "pod": m.pod, "captf": m.captf,
            }));
        }
        for m in &self.modules {
            let p = |f: fn(&PodRun) -> f64| format!("{:.0}", med(m.pod.iter().map(f)));
            let c = |f: fn(&CaptfRun) -> f64| format!("{:.0}", med(m.captf.iter().map(f)));
            let peak = m.captf.iter().map(|r| r.peak.max_kib).max().unwrap_or(0);
            let host_peak = m.host.iter().map(|r| r.peak.max_kib).max().unwrap_or(0);
            md.push_str(&format!(
                "\nWhere the time goes, {} module (medians, ms; peak memory of one engine or runner process: {:.1} MiB through CAPTF, {:.1} MiB by hand):\n\n| Step | plain pod | CAPTF |\n| --- | --- | --- |\n",
                m.module,
                mib(peak),
                mib(host_peak)
            ));
            let rows = [
                (
                    "the manager's pass: change → Job",
                    "-".into(),
                    c(|r| r.to_job_ms),
                ),
                ("Job controller: Job → pod", "-".into(), c(|r| r.to_pod_ms)),
                (
                    "scheduler: pod → scheduled",
                    p(|r| r.scheduled_ms),
                    c(|r| r.scheduled_ms),
                ),
                (
                    "kubelet: scheduled → first container (sandbox; for CAPTF also the runner's copy)",
                    p(|r| r.start_ms),
                    c(|r| r.start_ms),
                ),
                (
                    "the containers: engine (pod) or runner, to the pod's end",
                    p(|r| r.engine_ms),
                    c(|r| r.runner_ms),
                ),
                (
                    "of which the engine's steps, as the runner timed them",
                    "-".into(),
                    c(|r| r.engine_ms),
                ),
                (
                    "Job controller: pod's end → Complete",
                    "-".into(),
                    c(|r| r.job_status_ms),
                ),
                (
                    "the manager's pass: Complete → Ready",
                    "-".into(),
                    c(|r| r.to_ready_ms),
                ),
                ("total", p(|r| r.total_ms), c(|r| r.total_ms)),
            ];
            for (step, pod, captf) in rows {
                md.push_str(&format!("| {step} | {pod} | {captf} |\n"));
            }
            if let Some(run) = m.captf.last() {
                let steps: Vec<String> = run
                    .steps
                    .iter()
                    .map(|(n, s)| format!("{n} {s:.1} s"))
                    .collect();
                md.push_str(&format!(
                    "\nThe runner's steps in the last run: {}.\n",
                    steps.join(", ")
                ));
            }
        }
        if !self.pulls.is_empty() {
            md.push_str("\nImage pulls (the kubelet's `Pulled` events, each image's first use on the node):\n\n");
            for p in &self.pulls {
                md.push_str(&format!("- {p}\n"));
            }
        }
        (json!({"modules": summary, "pulls": self.pulls}), md)
    }
}
