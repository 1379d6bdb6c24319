//! The supervisor process: starts the node's network, the control plane and the node, records
//! what it started, and tears everything down on SIGTERM/SIGINT or when the process it watches
//! (a test binary) is gone, so no test run leaves processes, mounts or interfaces behind.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::control_plane::{self, ControlPlane, Layout};
use crate::node::{ControlPlaneAccess, Network, Node, NodeLayout, NodeTools};
use crate::process;
use crate::tools::{self, Tools};

/// The file naming the component a fault test wants restarted (then SIGUSR1).
pub const RESTART_REQUEST: &str = "restart";
/// The file the supervisor writes once it restarted it: `restarted <name>` or `failed ...`.
pub const RESTART_DONE: &str = "restarted";

/// What a running supervisor wrote to `state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    pub supervisor_pid: u32,
    pub server: String,
    pub apiserver_port: u16,
    pub kubeconfig: PathBuf,
    /// `host:port` of the node's image registry; `captf.local/<name>` resolves to it.
    pub registry: String,
    /// The node's network slot and folder, for `captf-testenv down` after a crash.
    pub network: Network,
    pub node_dir: PathBuf,
    pub processes: Vec<(String, u32)>,
}

/// Options of `captf-testenv supervise`.
#[derive(Clone, Debug)]
pub struct Options {
    pub dir: PathBuf,
    pub watch_pid: Option<u32>,
    /// Remove `dir` on exit.
    pub cleanup: bool,
}

/// Runs until told to stop; returns an error if a component crashed.
pub async fn run(options: Options) -> anyhow::Result<()> {
    let tools = Tools::locate()?;
    let node_tools = NodeTools::locate(&tools::bin_dir())?;
    let layout = Layout {
        root: options.dir.clone(),
    };
    std::fs::create_dir_all(&layout.root)?;
    let _ = std::fs::remove_file(layout.state_file());
    let network = Network::create()?;
    // Whatever fails from here on, the network goes with the supervisor.
    let _network = NetworkGuard(network.clone());
    let mut plane = ControlPlane::start(layout.clone(), &tools, &network).await?;
    let client = crate::client_from_kubeconfig(&layout.kubeconfig()).await?;
    control_plane::install_crds(&client, &captf_api::crds::all_yaml()?)
        .await
        .context("installing CAPTF CRDs")?;
    install_capi_crds(&client, &tools).await?;

    let node_layout = NodeLayout {
        root: layout.root.join("node"),
    };
    let mut node = Node::start(
        node_layout.clone(),
        network.clone(),
        &node_tools,
        ControlPlaneAccess {
            server: &plane.server,
            pki: &plane.pki,
            client: &client,
        },
        &layout.logs(),
    )
    .await?;

    let state = State {
        supervisor_pid: std::process::id(),
        server: plane.server.clone(),
        apiserver_port: plane.apiserver_port,
        kubeconfig: layout.kubeconfig(),
        registry: node.registry.clone(),
        network: network.clone(),
        node_dir: node_layout.root.clone(),
        processes: plane.pids().into_iter().chain(node.pids()).collect(),
    };
    let tmp = layout.root.join("state.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&state)?)?;
    std::fs::rename(&tmp, layout.state_file())?;
    tracing::info!(server = %state.server, kubeconfig = %state.kubeconfig.display(), "control plane ready");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    // A fault test asks for a component's restart: the name in `restart`, then SIGUSR1.
    let mut restart =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())?;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let outcome = loop {
        tokio::select! {
            _ = term.recv() => break Ok(()),
            _ = tokio::signal::ctrl_c() => break Ok(()),
            _ = restart.recv() => {
                let name = std::fs::read_to_string(layout.root.join(RESTART_REQUEST)).unwrap_or_default();
                let name = name.trim();
                tracing::info!(component = name, "restarting on request");
                let outcome = match plane.restart(name).await {
                    Ok(()) => format!("restarted {name}"),
                    Err(e) => format!("failed {name}: {e:#}"),
                };
                let mut state = state.clone();
                state.processes = plane.pids().into_iter().chain(node.pids()).collect();
                let tmp = layout.root.join("state.json.tmp");
                std::fs::write(&tmp, serde_json::to_vec_pretty(&state)?)?;
                std::fs::rename(&tmp, layout.state_file())?;
                std::fs::write(layout.root.join(RESTART_DONE), outcome)?;
            }
            _ = tick.tick() => {
                if let Some(pid) = options.watch_pid
                    && !process::alive(pid)
                {
                    break Ok(());
                }
                // Without its host interface the node's address routes out of the machine:
                // stop at once and say so rather than let traffic leave.
                if !network.lingers() {
                    break Err(anyhow::anyhow!(
                        "interface {} of the node's network is gone (was namespace {} deleted?)",
                        network.host_interface(),
                        network.netns()
                    ));
                }
                if let Some((name, status)) = plane.crashed().or_else(|| node.crashed()) {
                    let log = layout.logs().join(format!("{name}.log"));
                    break Err(anyhow::anyhow!("{name} exited ({status}):\n{}", control_plane::tail(&log, 30)));
                }
            }
        }
    };
    node.stop();
    plane.stop();
    let _ = std::fs::remove_file(layout.state_file());
    if options.cleanup {
        let _ = std::fs::remove_dir_all(&layout.root);
    }
    outcome
}

/// Deletes the node's network when the supervisor leaves [`run`], whichever way: the API
/// server listens on it, so it goes last.
struct NetworkGuard(Network);

impl Drop for NetworkGuard {
    fn drop(&mut self) {
        self.0.delete();
    }
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
