//! The supervisor process: starts the control plane and the process node, records what it
//! started, and tears everything down on SIGTERM/SIGINT or when the process it watches (a test
//! binary) is gone, so no test run leaves processes behind.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::control_plane::{self, ControlPlane, Layout};
use crate::node::{self, NodeContext, image::Images};
use crate::process;
use crate::tools::{self, Tools};

/// What a running supervisor wrote to `state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    pub supervisor_pid: u32,
    pub server: String,
    pub apiserver_port: u16,
    pub kubeconfig: PathBuf,
    pub images: PathBuf,
    pub processes: Vec<(String, u32)>,
}

/// Options of `captf-testenv supervise`.
#[derive(Clone, Debug)]
pub struct Options {
    pub dir: PathBuf,
    pub watch_pid: Option<u32>,
    pub images: PathBuf,
    /// Remove `dir` on exit.
    pub cleanup: bool,
}

/// The default folder of module images: `$CAPTF_IMAGES`, else `<cache>/images`.
pub fn default_images_dir() -> PathBuf {
    std::env::var_os("CAPTF_IMAGES")
        .map(PathBuf::from)
        .unwrap_or_else(|| tools::cache_dir().join("images"))
}

/// Runs until told to stop; returns an error if a component crashed.
pub async fn run(options: Options) -> anyhow::Result<()> {
    let tools = Tools::locate()?;
    let layout = Layout {
        root: options.dir.clone(),
    };
    std::fs::create_dir_all(&layout.root)?;
    let _ = std::fs::remove_file(layout.state_file());
    let mut plane = ControlPlane::start(layout.clone(), &tools).await?;
    let client = crate::client_from_kubeconfig(&layout.kubeconfig()).await?;
    control_plane::install_crds(&client, &captf_api::crds::all_yaml()?)
        .await
        .context("installing CAPTF CRDs")?;
    install_capi_crds(&client, &tools).await?;

    let ctx = Arc::new(NodeContext {
        client: client.clone(),
        pods_dir: layout.pods(),
        images: Images::new(options.images.clone()),
        self_exe: std::env::current_exe()?,
        apiserver_port: plane.apiserver_port,
        running: Default::default(),
    });
    let mut node_task = tokio::spawn(node::run(ctx.clone()));

    let state = State {
        supervisor_pid: std::process::id(),
        server: plane.server.clone(),
        apiserver_port: plane.apiserver_port,
        kubeconfig: layout.kubeconfig(),
        images: options.images.clone(),
        processes: plane.pids(),
    };
    let tmp = layout.root.join("state.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&state)?)?;
    std::fs::rename(&tmp, layout.state_file())?;
    tracing::info!(server = %state.server, kubeconfig = %state.kubeconfig.display(), "control plane ready");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let outcome = loop {
        tokio::select! {
            _ = term.recv() => break Ok(()),
            _ = tokio::signal::ctrl_c() => break Ok(()),
            result = &mut node_task => break Err(anyhow::anyhow!("process node stopped: {result:?}")),
            _ = tick.tick() => {
                if let Some(pid) = options.watch_pid
                    && !process::alive(pid)
                {
                    break Ok(());
                }
                if let Some((name, status)) = plane.crashed() {
                    let log = layout.logs().join(format!("{name}.log"));
                    break Err(anyhow::anyhow!("{name} exited ({status}):\n{}", control_plane::tail(&log, 30)));
                }
            }
        }
    };
    node_task.abort();
    ctx.kill_all();
    plane.stop();
    let _ = std::fs::remove_file(layout.state_file());
    if options.cleanup {
        let _ = std::fs::remove_dir_all(&layout.root);
    }
    outcome
}

async fn install_capi_crds(client: &kube::Client, tools: &Tools) -> anyhow::Result<()> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(&tools.capi_crds)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    anyhow::ensure!(
        !files.is_empty(),
        "no Cluster API CRDs in {}; run hack/build-tools.sh",
        tools.capi_crds.display()
    );
    for file in files {
        let yaml = std::fs::read_to_string(&file)?;
        control_plane::install_crds(client, &yaml)
            .await
            .with_context(|| format!("installing {}", file.display()))?;
    }
    Ok(())
}
