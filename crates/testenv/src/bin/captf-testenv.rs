//! `captf-testenv`: start, stop and inspect the local control plane.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use captf_testenv::{TestEnv, process, supervisor, tools};
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "captf-testenv",
    about = "A real local Kubernetes control plane for CAPTF's tests and demo"
)]
struct Cli {
    /// Folder of the control plane (default `$CAPTF_TESTENV_DIR`, else `<cache>/testenv`).
    #[arg(long, global = true, env = "CAPTF_TESTENV_DIR")]
    dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a node
    /// (containerd, kubelet, kube-proxy, an image registry) in the background; print the
    /// kubeconfig path once the Node is Ready and the CRDs are installed.
    Up,
    /// Stop everything `up` started and leave no process, mount, network namespace,
    /// interface or cgroup behind.
    Down,
    /// Say whether the control plane runs, and where.
    Status,
    /// Print the admin kubeconfig path.
    Kubeconfig,
    /// (internal) Own the control plane until SIGTERM or until --watch-pid exits.
    #[command(hide = true)]
    Supervise {
        #[arg(long)]
        watch_pid: Option<u32>,
        #[arg(long)]
        cleanup: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let dir = cli
        .dir
        .clone()
        .unwrap_or_else(|| tools::cache_dir().join("testenv"));
    let result = match cli.command {
        Command::Supervise { watch_pid, cleanup } => supervise(dir, watch_pid, cleanup),
        Command::Up => up(&dir),
        Command::Down => down(&dir),
        Command::Status => status(&dir),
        Command::Kubeconfig => {
            TestEnv::attach(&dir).map(|env| println!("{}", env.kubeconfig().display()))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("captf-testenv: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn supervise(dir: PathBuf, watch_pid: Option<u32>, cleanup: bool) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(supervisor::run(supervisor::Options {
        dir,
        watch_pid,
        cleanup,
    }))
}

fn up(dir: &std::path::Path) -> anyhow::Result<()> {
    if let Ok(env) = TestEnv::attach(dir) {
        println!("already running: {}", env.state.server);
        println!("export KUBECONFIG={}", env.kubeconfig().display());
        return Ok(());
    }
    // A fresh control plane each time: the folder of a run before (its etcd data, node and
    // certificates) would bring back its objects, made for other addresses and versions.
    if dir.join("etcd").exists() || dir.join("state.json").exists() {
        std::fs::remove_dir_all(dir)
            .with_context(|| format!("removing the previous run's folder {}", dir.display()))?;
    }
    let env = TestEnv::start(dir, None, false)?;
    println!("control plane ready: {}", env.state.server);
    println!("export KUBECONFIG={}", env.kubeconfig().display());
    println!(
        "images: push to {}, reference as captf.local/<name>",
        env.state.registry
    );
    println!("stop it with: captf-testenv down");
    Ok(())
}

fn down(dir: &std::path::Path) -> anyhow::Result<()> {
    let state_file = dir.join("state.json");
    let Ok(bytes) = std::fs::read(&state_file) else {
        println!("not running");
        return Ok(());
    };
    let state: supervisor::State = serde_json::from_slice(&bytes).context("state.json")?;
    let pid = state.supervisor_pid;
    process::stop_group(pid, Duration::from_secs(30), || !process::alive(pid));
    // A supervisor killed hard cannot stop its children: do it here.
    for (name, child) in &state.processes {
        if process::alive(*child) {
            eprintln!("stopping leftover {name} ({child})");
            process::stop_group(*child, Duration::from_secs(10), || !process::alive(*child));
        }
    }
    // The same teardown as the supervisor's, for what a killed supervisor left.
    let node = captf_testenv::node::NodeLayout {
        root: state.node_dir.clone(),
    };
    captf_testenv::node::cleanup::all(&node, &state.network);
    state.network.delete();
    if state.network.lingers() {
        eprintln!(
            "interface {} is still there: a process is left in namespace {}",
            state.network.host_interface(),
            state.network.netns()
        );
    }
    let _ = std::fs::remove_file(&state_file);
    println!("stopped");
    Ok(())
}

fn status(dir: &std::path::Path) -> anyhow::Result<()> {
    let env = TestEnv::attach(dir)?;
    println!(
        "running: {} (supervisor pid {})",
        env.state.server, env.state.supervisor_pid
    );
    for (name, pid) in &env.state.processes {
        println!(
            "  {name}: pid {pid} {}",
            if process::alive(*pid) {
                "alive"
            } else {
                "GONE"
            }
        );
    }
    println!("kubeconfig: {}", env.kubeconfig().display());
    Ok(())
}
