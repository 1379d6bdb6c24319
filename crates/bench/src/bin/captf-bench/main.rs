//! `captf-bench`: the manager at fleet scale and the cost of one operation (issue #9), on the
//! local control plane (`captf_testenv`), with a JSON report and a Markdown table.
//!
//! 1. One operation against the bare engine: a TerraformCluster on the no-op cluster module
//!    (the template, with a TerraformMachine on the no-op machine module, see `template`) and
//!    one on the time module (a real provider) are applied by a manager, then each one's spec
//!    changes `--op-runs` times, each timed to Ready and taken apart, side by side with `tofu
//!    init && tofu apply` of the same root by hand and in a plain pod of the same image (`op`).
//!    `--objects 0` stops there.
//! 2. The fleet at rest: `--objects` clones of the template, each with
//!    `--machines-per-cluster` clones of a TerraformMachine of the template, seeded up to date
//!    (see `seed` and `seed_machines`), then a fresh manager over all namespaces: time until
//!    every object is Ready, its RSS and CPU, and the API server's requests and writes per
//!    minute at rest.
//! 3. Reaction time: `--reaction` objects get a spec change, each timed from the write to
//!    the arrival of its Job on a watch.
//!
//! Build the three binaries in one profile, then run it:
//! `cargo build --release -p captf -p captf-testenv -p captf-bench --bins &&
//!  target/release/captf-bench --objects 1000`.

mod moments;
mod op;
mod pod;
mod probe;
mod report;
mod seed;
mod seed_jobs;
mod seed_machines;
mod template;
mod track;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_api::{TerraformCluster, TerraformMachine, labels};
use captf_testenv::TestEnv;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;

use crate::probe::TICKS_PER_SECOND;

/// How long the reaction's request count runs on after the last Job appeared.
const REACTION_TAIL: Duration = Duration::from_secs(10);

/// The image the reaction's spec changes set: new inputs, so an apply is due, and an image the
/// node's registry does not have, so the Jobs wait in `ErrImagePull` instead of running a
/// hundred engines on the machine while the later changes are timed.
const REACTION_IMAGE: &str = "captf.local/modules/noop-cluster:bench-reaction-not-pulled";

const TEMPLATE_NS: &str = "bench-tpl";
const TEMPLATE: &str = "tpl";
const IDENTITY: &str = "bench";

#[derive(Parser, Debug, Clone)]
#[command(
    name = "captf-bench",
    about = "The manager at fleet scale and one operation against the bare engine, on the local control plane"
)]
struct Args {
    /// TerraformClusters seeded up to date (1000 and 10000 are the sizes issue #9 asks for;
    /// 0: only the one operation, `--op-runs`).
    #[arg(long, default_value_t = 1000)]
    objects: usize,
    /// TerraformMachines seeded up to date for each of those clusters (0: clusters only).
    #[arg(long, default_value_t = 1)]
    machines_per_cluster: usize,
    /// Clusters per namespace, with their machines (each namespace has its credential mirror
    /// and runner RBAC).
    #[arg(long, default_value_t = 100)]
    per_namespace: usize,
    /// Seeding requests in flight.
    #[arg(long, default_value_t = 16)]
    seed_parallel: usize,
    /// How long the control plane is watched without the manager (the other clients' rate).
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    baseline: Duration,
    /// The wait between "every object Ready" and the rest window.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    settle: Duration,
    /// The rest window (RSS, CPU, requests and writes at rest).
    #[arg(long, default_value = "3m", value_parser = humantime::parse_duration)]
    rest: Duration,
    /// Most time the fleet may take to become Ready.
    #[arg(long, default_value = "20m", value_parser = humantime::parse_duration)]
    ready_timeout: Duration,
    /// Objects whose spec changes for the reaction time (0: skip).
    #[arg(long, default_value_t = 100)]
    reaction: usize,
    /// The pause between two of those spec changes (0s: all at once).
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    reaction_interval: Duration,
    /// Spec changes of the template timed through CAPTF, each next to one bare engine run
    /// (0: skip).
    #[arg(long, default_value_t = 3)]
    op_runs: usize,
    /// An extra flag for the manager of the fleet (repeatable), e.g. `--manager-arg=--sync-period=1m`.
    #[arg(long = "manager-arg")]
    manager_args: Vec<String>,
    /// An environment variable `NAME=VALUE` for the manager of the fleet (repeatable), e.g.
    /// `--manager-env=MALLOC_ARENA_MAX=1`.
    #[arg(long = "manager-env")]
    manager_env: Vec<String>,
    /// Keep the control plane's folder (logs) after the run.
    #[arg(long)]
    keep: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.objects >= 1 || args.op_runs >= 1,
        "--objects 0 measures only the one operation: give --op-runs 1 or more"
    );
    let dir = std::env::temp_dir().join(format!("captf-bench-{}", std::process::id()));
    let started = Instant::now();
    let env = TestEnv::start(&dir, Some(std::process::id()), !args.keep)?;
    eprintln!(
        "control plane up in {:.1}s ({})",
        started.elapsed().as_secs_f64(),
        env.dir.display()
    );
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(run(args, env))
}

/// `captf manager` over the fleet, with the RBAC an install grants.
struct ManagerProcess {
    child: Child,
    log: PathBuf,
}

impl ManagerProcess {
    fn start(
        env: &TestEnv,
        kubeconfig: &Path,
        name: &str,
        extra: &[String],
        vars: &[String],
    ) -> anyhow::Result<Self> {
        let log = env.dir.join(format!("manager-{name}.log"));
        let out = std::fs::File::create(&log)?;
        let child = Command::new(captf_e2e::captf_binary()?)
            .arg("manager")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!(
                "--runner-image={}",
                captf_e2e::write_images(env)?.runner
            ))
            .arg("--diagnostics-address=127.0.0.1:0")
            .arg("--health-addr=127.0.0.1:0")
            .arg("--insecure-diagnostics")
            .arg("--webhook-port=0")
            .args(extra)
            .env("POD_NAMESPACE", "captf-system")
            .env("SERVICE_ACCOUNT_NAME", "captf-controller-manager")
            .env("POD_NAME", format!("manager-{name}"))
            .envs(vars.iter().filter_map(|v| v.split_once('=')))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting captf manager")?;
        Ok(ManagerProcess { child, log })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn tail(&self) -> String {
        captf_testenv::control_plane::tail(&self.log, 40)
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ManagerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn run(args: Args, env: TestEnv) -> anyhow::Result<()> {
    let run_started = Instant::now();
    let client = env.client().await?;
    captf_e2e::write_images(&env)?;
    let kubeconfig = captf_e2e::manager_kubeconfig(&env, &client).await?;
    captf_e2e::apply_yaml(&client, &flow_schemas()).await?;
    captf_e2e::apply_yaml(
        &client,
        &serde_json::to_string(&json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": TEMPLATE_NS, "labels": {seed::FLEET_LABEL: "true"}}
        }))?,
    )
    .await?;
    captf_e2e::apply_yaml(
        &client,
        &format!(
            r#"
apiVersion: v1
kind: Secret
metadata: {{name: bench-credentials, namespace: captf-system}}
stringData: {{NOOP_TOKEN: not-a-real-credential}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformClusterIdentity
metadata: {{name: {IDENTITY}}}
spec:
  secretRef: {{name: bench-credentials, namespace: captf-system}}
  allowedNamespaces: {{selector: {{matchLabels: {{{label}: "true"}}}}}}
"#,
            label = seed::FLEET_LABEL
        ),
    )
    .await?;

    // The template, applied for real by a manager of its namespace.
    let manager = ManagerProcess::start(
        &env,
        &kubeconfig,
        "template",
        &[
            format!("--namespace={TEMPLATE_NS}"),
            "--log-level=info".into(),
        ],
        &[],
    )?;
    let tcs: Api<TerraformCluster> = Api::namespaced(client.clone(), TEMPLATE_NS);
    template::create_cluster(&client, TEMPLATE, captf_e2e::fixture::CLUSTER_IMAGE).await?;
    let template_started = Instant::now();
    template::wait_applied(&tcs, TEMPLATE, Duration::from_secs(300))
        .await
        .with_context(|| manager.tail())?;
    let first_apply = template_started.elapsed();
    eprintln!(
        "template Ready in {:.1}s (first apply)",
        first_apply.as_secs_f64()
    );
    if args.op_runs > 0 {
        let [_, time] = op::modules(TEMPLATE);
        template::create_cluster(&client, &time.cluster, &time.image).await?;
        template::wait_applied(&tcs, &time.cluster, Duration::from_secs(300))
            .await
            .with_context(|| manager.tail())?;
    }
    if args.objects > 0 && args.machines_per_cluster > 0 {
        let tms: Api<TerraformMachine> = Api::namespaced(client.clone(), TEMPLATE_NS);
        template::create_machine(&client).await?;
        template::wait_applied(&tms, &template::machine(), Duration::from_secs(300))
            .await
            .with_context(|| manager.tail())?;
    }
    // The manager records each finished Job after the status that shows it Ready; the clones
    // get the template's Jobs as recorded.
    template::jobs_bookkept(&client)
        .await
        .with_context(|| manager.tail())?;
    let template = seed::Template::read(&client, TEMPLATE_NS, TEMPLATE).await?;
    eprintln!(
        "template: {} Secret(s) of its own: {}",
        template.own.secrets.len(),
        template.own.names()
    );
    let machine_template = if args.objects > 0 && args.machines_per_cluster > 0 {
        let m = seed_machines::MachineTemplate::read(&client, TEMPLATE_NS, &template::machine())
            .await?;
        eprintln!(
            "template machine: {} Secret(s) of its own: {}",
            m.own.secrets.len(),
            m.own.names()
        );
        Some(m)
    } else {
        None
    };

    // One operation against the bare engine, alternating.
    let op = if args.op_runs > 0 {
        Some(op::measure(&client, &env.dir, TEMPLATE, args.op_runs).await?)
    } else {
        None
    };
    // Again after the operations: the fleet's manager finds nothing left to do in the
    // template's namespace either.
    template::jobs_bookkept(&client)
        .await
        .with_context(|| manager.tail())?;
    manager.stop();
    if let (0, Some(op)) = (args.objects, &op) {
        let (json, table) = op.render();
        let json = json!({"benchmark": "one-operation", "machine": captf_bench::machine(),
            "template_first_apply_ms": first_apply.as_secs_f64() * 1e3, "one_operation": json});
        let table = format!(
            "### One operation\n\nOn {}; {} runs of each.\n\n{table}",
            captf_bench::machine(),
            args.op_runs
        );
        return write_report("one-operation", &json, &table);
    }

    // The fleet, seeded up to date.
    let seeding = Instant::now();
    seed::seed_fleet(
        &client,
        &template,
        machine_template
            .as_ref()
            .map(|m| (m, args.machines_per_cluster)),
        args.objects,
        args.per_namespace,
        args.seed_parallel,
    )
    .await?;
    let seed_secs = seeding.elapsed().as_secs_f64();
    let machines = args.objects * args.machines_per_cluster;
    eprintln!(
        "seeded {} clusters and {machines} machines in {seed_secs:.0}s ({:.0} objects/s)",
        args.objects,
        (args.objects + machines) as f64 / seed_secs
    );

    // Watch the fleet (before the baseline, so the watch is part of it).
    let tracker = Arc::new(Mutex::new(track::Tracker::default()));
    let watch_tasks = [
        tokio::spawn(track::track(
            Api::<TerraformCluster>::all(client.clone()),
            tracker.clone(),
        )),
        tokio::spawn(track::track(
            Api::<TerraformMachine>::all(client.clone()),
            tracker.clone(),
        )),
    ];
    let expected = [args.objects, machines];
    wait_until("the fleet watch to list", Duration::from_secs(600), || {
        let t = tracker.lock().ok()?;
        track::KINDS
            .iter()
            .zip(expected)
            .all(|(kind, n)| t.listed(kind) && t.seen(kind) >= n)
            .then_some(())
    })
    .await?;

    // The other clients' rate, without the manager.
    let b0 = probe::apiserver(&client).await?;
    let baseline_started = Instant::now();
    tokio::time::sleep(args.baseline).await;
    let b1 = probe::apiserver(&client).await?;
    let baseline_minutes = baseline_started.elapsed().as_secs_f64() / 60.0;
    let baseline = b1.since(&b0);

    // The fleet's manager: start-up until every object is Ready.
    let r0 = probe::apiserver(&client).await?;
    // Info is what the reaction needs (its `decided` lines); `--manager-arg=--log-level=...` may
    // ask for more.
    let mut flags = args.manager_args.clone();
    if !flags.iter().any(|f| f.starts_with("--log-level")) {
        flags.push("--log-level=info".to_owned());
    }
    let manager = ManagerProcess::start(&env, &kubeconfig, "fleet", &flags, &args.manager_env)?;
    let pid = manager.pid();
    let started = Instant::now();
    let mut rss_samples: Vec<(f64, u64)> = Vec::new();
    let (ready_after, startup_sample) = loop {
        let Some(sample) = probe::sample(pid) else {
            anyhow::bail!("the manager exited:\n{}", manager.tail());
        };
        rss_samples.push((started.elapsed().as_secs_f64(), sample.rss_kib));
        let ready = tracker
            .lock()
            .map(|t| track::KINDS.map(|kind| t.ready(kind)))
            .unwrap_or_default();
        if ready.iter().zip(expected).all(|(r, n)| *r >= n) {
            break (started.elapsed(), sample);
        }
        anyhow::ensure!(
            started.elapsed() < args.ready_timeout,
            "{} of {} clusters and {} of {machines} machines Ready after {:?}:\n{}",
            ready[0],
            args.objects,
            ready[1],
            args.ready_timeout,
            manager.tail()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let r1 = probe::apiserver(&client).await?;
    let startup_requests = r1.since(&r0);
    eprintln!(
        "every object Ready {:.1}s after the manager started (RSS {:.1} MiB, peak {:.1} MiB)",
        ready_after.as_secs_f64(),
        mib(startup_sample.rss_kib),
        mib(startup_sample.hwm_kib)
    );
    let jobs_at_start = track::fleet_jobs(&client).await?;

    // At rest.
    let settle_until = Instant::now() + args.settle;
    sample_until(pid, settle_until, &mut rss_samples, started).await;
    let m0 = probe::apiserver(&client).await?;
    let c0 = probe::sample(pid).context("the manager exited")?;
    let events_before = tracker.lock().map(|t| t.changes).unwrap_or(0);
    let rest_started = Instant::now();
    let rest_first = rss_samples.len();
    sample_until(pid, rest_started + args.rest, &mut rss_samples, started).await;
    let rest_minutes = rest_started.elapsed().as_secs_f64() / 60.0;
    let c1 = probe::sample(pid).context("the manager exited")?;
    let m1 = probe::apiserver(&client).await?;
    let events_at_rest = tracker.lock().map(|t| t.changes).unwrap_or(0) - events_before;
    let at_rest = m1.since(&m0);
    let rest_rss: Vec<u64> = rss_samples[rest_first..].iter().map(|s| s.1).collect();
    let steady_rss_kib = median_u64(&rest_rss);
    let cpu_secs = (c1.cpu_ticks - c0.cpu_ticks) as f64 / TICKS_PER_SECOND;
    let cpu_core_percent = cpu_secs / (rest_minutes * 60.0) * 100.0;
    let jobs_at_rest = track::fleet_jobs(&client).await?;
    eprintln!(
        "at rest: RSS {:.1} MiB, CPU {:.2}% of a core, {} object change(s) seen",
        mib(steady_rss_kib),
        cpu_core_percent,
        events_at_rest
    );

    // Reaction time.
    let reaction = if args.reaction > 0 {
        Some(reaction(&args, &client, &manager).await?)
    } else {
        None
    };
    let final_sample = probe::sample(pid);
    manager.stop();
    watch_tasks.iter().for_each(|t| t.abort());

    let report = report::Report {
        args: &args,
        first_apply,
        op,
        machines,
        seed_secs,
        ready_after,
        startup_sample,
        startup_requests,
        jobs_at_start,
        baseline,
        baseline_minutes,
        at_rest,
        rest_minutes,
        steady_rss_kib,
        peak_rss_kib: final_sample.map_or(c1.hwm_kib, |s| s.hwm_kib),
        rest_hwm_kib: c1.hwm_kib,
        rest_file_kib: c1.file_kib,
        cpu_secs,
        cpu_core_percent,
        events_at_rest,
        jobs_at_rest,
        reaction,
        rss_samples,
        total_secs: run_started.elapsed().as_secs_f64(),
    };
    let (json, table) = report.render();
    write_report(&format!("fleet-{}", args.objects), &json, &table)
}

/// Writes `<name>.json` and `<name>.md` to the report folder and prints the table.
fn write_report(name: &str, json: &serde_json::Value, table: &str) -> anyhow::Result<()> {
    let dir = captf_bench::report_dir();
    std::fs::create_dir_all(&dir)?;
    let json_path = dir.join(format!("{name}.json"));
    std::fs::write(&json_path, serde_json::to_vec_pretty(json)?)?;
    let md_path = dir.join(format!("{name}.md"));
    std::fs::write(&md_path, table)?;
    println!("{table}");
    println!(
        "report: {}\ntable: {}",
        json_path.canonicalize().unwrap_or(json_path).display(),
        md_path.canonicalize().unwrap_or(md_path).display()
    );
    Ok(())
}

/// The manager's own flow schemas, so the API server counts its reads and writes apart from
/// every other client's (`apiserver_flowcontrol_dispatched_requests_total{flow_schema}`).
const MANAGER_WRITES: &str = "captf-bench-manager-writes";
const MANAGER_READS: &str = "captf-bench-manager-reads";

fn flow_schemas() -> String {
    let subject = "subjects: [{kind: ServiceAccount, serviceAccount: {name: captf-controller-manager, namespace: captf-system}}]";
    format!(
        r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: {MANAGER_WRITES}}}
spec:
  matchingPrecedence: 1000
  priorityLevelConfiguration: {{name: workload-low}}
  distinguisherMethod: {{type: ByUser}}
  rules:
  - {subject}
    resourceRules: [{{verbs: [create, update, patch, delete, deletecollection], apiGroups: ["*"], resources: ["*"], clusterScope: true, namespaces: ["*"]}}]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: {MANAGER_READS}}}
spec:
  matchingPrecedence: 1001
  priorityLevelConfiguration: {{name: workload-low}}
  distinguisherMethod: {{type: ByUser}}
  rules:
  - {subject}
    resourceRules: [{{verbs: ["*"], apiGroups: ["*"], resources: ["*"], clusterScope: true, namespaces: ["*"]}}]
    nonResourceRules: [{{verbs: ["*"], nonResourceURLs: ["*"]}}]
"#
    )
}

/// Samples the manager's RSS every 5 s until `until`.
async fn sample_until(pid: u32, until: Instant, out: &mut Vec<(f64, u64)>, started: Instant) {
    loop {
        if let Some(s) = probe::sample(pid) {
            out.push((started.elapsed().as_secs_f64(), s.rss_kib));
        }
        let now = Instant::now();
        if now >= until {
            return;
        }
        tokio::time::sleep((until - now).min(Duration::from_secs(5))).await;
    }
}

/// `--reaction` spec changes spread over the fleet; the time from each write to its Job on a
/// watch.
async fn reaction(
    args: &Args,
    client: &kube::Client,
    manager: &ManagerProcess,
) -> anyhow::Result<ReactionReport> {
    let count = args.reaction.min(args.objects);
    let step = (args.objects / count).max(1);
    let targets: Vec<(String, String)> = (0..count)
        .map(|k| seed::object(k * step, args.per_namespace))
        .collect();
    let arrivals: Arc<Mutex<HashMap<(String, String), Instant>>> = Arc::default();
    let listed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let jobs: Api<Job> = Api::all(client.clone());
    let config =
        watcher::Config::default().labels(&format!("{}=TerraformCluster", labels::OWNER_KIND));
    let task = {
        let arrivals = arrivals.clone();
        let listed = listed.clone();
        tokio::spawn(async move {
            // The Jobs there before any change (the seeded history): a later event of one of
            // them (its owner's pass annotating it) is no reaction.
            let mut before = std::collections::HashSet::new();
            let mut stream = watcher::watcher(jobs, config).boxed();
            while let Some(event) = stream.next().await {
                let now = Instant::now();
                match event {
                    Ok(watcher::Event::InitDone) => {
                        listed.store(true, std::sync::atomic::Ordering::SeqCst)
                    }
                    Ok(watcher::Event::InitApply(job)) => {
                        before.insert((job.metadata.namespace, job.metadata.name));
                    }
                    Ok(watcher::Event::Apply(job))
                        if !before.contains(&(
                            job.metadata.namespace.clone(),
                            job.metadata.name.clone(),
                        )) =>
                    {
                        let ns = job.metadata.namespace.clone().unwrap_or_default();
                        let owner = job
                            .metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(labels::OWNER_NAME))
                            .cloned()
                            .unwrap_or_default();
                        if let Ok(mut a) = arrivals.lock() {
                            a.entry((ns, owner)).or_insert(now);
                        }
                    }
                    _ => {}
                }
            }
        })
    };
    wait_until("the Job watch to list", Duration::from_secs(60), || {
        listed
            .load(std::sync::atomic::Ordering::SeqCst)
            .then_some(())
    })
    .await?;
    let before = probe::apiserver(client).await?;
    let mut writes: Vec<((String, String), Instant)> = Vec::new();
    let mut written_at: Vec<(String, String, std::time::SystemTime)> = Vec::new();
    let mut next = Instant::now();
    for (ns, name) in &targets {
        let api: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
        let owner = ObjectKey::new(ns, WorkloadKind::Cluster, name)?.owner_name_label();
        let at = Instant::now();
        written_at.push((ns.clone(), name.clone(), std::time::SystemTime::now()));
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"source": {"image": REACTION_IMAGE}}})),
        )
        .await?;
        writes.push(((ns.clone(), owner), at));
        next += args.reaction_interval;
        tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
    }
    let all = wait_until("a Job for every change", Duration::from_secs(300), || {
        let a = arrivals.lock().ok()?;
        writes.iter().all(|(k, _)| a.contains_key(k)).then_some(())
    })
    .await;
    task.abort();
    // The passes that follow each Job's creation (its first status, the pod's failed pull)
    // belong to the change too.
    tokio::time::sleep(REACTION_TAIL).await;
    let requests = probe::apiserver(client).await?.since(&before);
    let a = arrivals.lock().map(|a| a.clone()).unwrap_or_default();
    let mut latencies: Vec<f64> = writes
        .iter()
        .filter_map(|(k, at)| {
            a.get(k)
                .map(|seen| seen.saturating_duration_since(*at).as_secs_f64() * 1e3)
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    if let Err(e) = all {
        eprintln!(
            "{e}: {} of {} Jobs seen\n{}",
            latencies.len(),
            writes.len(),
            manager.tail()
        );
    }
    let mut decided = decisions(&manager.log, &written_at);
    decided.sort_by(f64::total_cmp);
    Ok(ReactionReport {
        changes: writes.len(),
        latencies_ms: latencies,
        decided_ms: decided,
        interval: args.reaction_interval,
        requests,
    })
}

struct ReactionReport {
    changes: usize,
    latencies_ms: Vec<f64>,
    /// From the write to the manager's `decided` log line (its pass, before the Job is made).
    decided_ms: Vec<f64>,
    interval: Duration,
    /// From just before the first write to [`REACTION_TAIL`] after the last Job.
    requests: probe::Counters,
}

/// From each write to the first `decided ... op=apply` line the manager logged for its object
/// after it (JSON logs, wall-clock timestamps).
fn decisions(log: &Path, written: &[(String, String, std::time::SystemTime)]) -> Vec<f64> {
    use k8s_openapi::jiff::Timestamp;
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut first: HashMap<(String, String), Vec<Timestamp>> = HashMap::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let f = &v["fields"];
        if f["message"] != "decided" || f["op"] != "apply" {
            continue;
        }
        let (Some(ns), Some(name), Some(at)) = (
            f["namespace"].as_str(),
            f["name"].as_str(),
            v["timestamp"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok()),
        ) else {
            continue;
        };
        first
            .entry((ns.to_owned(), name.to_owned()))
            .or_default()
            .push(at);
    }
    written
        .iter()
        .filter_map(|(ns, name, at)| {
            let at = Timestamp::try_from(*at).ok()?;
            let seen = first
                .get(&(ns.clone(), name.clone()))?
                .iter()
                .filter(|t| **t >= at)
                .min()?;
            Some(seen.duration_since(at).as_secs_f64() * 1e3)
        })
        .collect()
}

/// Polls `check` every 100 ms until it returns `Some`, failing after `timeout`.
async fn wait_until<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return Ok(v);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_until_async<T, F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn median_u64(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}
