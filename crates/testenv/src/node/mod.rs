//! A real node: containerd, the kubelet and kube-proxy, with a pod network and ClusterIP
//! Services, running in a network namespace of the environment's own ([`network`]).
//!
//! Images come from a registry the node serves on the host end of its veth pair; containerd
//! resolves `captf.local/...` to it ([`config::IMAGE_REGISTRY`]). The kubelet pulls them as it
//! would from any registry, and containers run with their real security context, resources,
//! volumes and service-account tokens. [`cleanup`] takes all of it down again.

pub mod cleanup;
pub mod config;
pub mod network;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::Node as NodeObject;
use kube::api::Api;

use crate::pki::{self, Pki};
use crate::process::{self, Group};
pub use config::{IMAGE_REGISTRY, NODE_NAME, NodeLayout, PAUSE_IMAGE};
pub use network::Network;

/// The node's binaries: kubelet and kube-proxy (and the pause program) from
/// `hack/build-tools.sh`, containerd and runc from Debian (`hack/node-packages.sh`).
#[derive(Clone, Debug)]
pub struct NodeTools {
    pub kubelet: PathBuf,
    pub kube_proxy: PathBuf,
    pub pause: PathBuf,
    pub registry: PathBuf,
    pub crane: PathBuf,
    pub containerd: PathBuf,
}

impl NodeTools {
    pub fn locate(bin: &Path) -> anyhow::Result<NodeTools> {
        let tools = NodeTools {
            kubelet: bin.join("kubelet"),
            kube_proxy: bin.join("kube-proxy"),
            pause: bin.join("pause"),
            registry: bin.join("registry"),
            crane: bin.join("crane"),
            containerd: PathBuf::from("/usr/bin/containerd"),
        };
        let built: Vec<String> = [
            &tools.kubelet,
            &tools.kube_proxy,
            &tools.pause,
            &tools.registry,
            &tools.crane,
        ]
        .into_iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
        anyhow::ensure!(
            built.is_empty(),
            "missing node tools: {}; build them with `hack/build-tools.sh`",
            built.join(", ")
        );
        for (program, package) in [
            ("/usr/bin/containerd", "containerd"),
            ("/usr/sbin/runc", "runc"),
            ("/usr/lib/cni/bridge", "containernetworking-plugins"),
            ("/usr/sbin/iptables", "iptables"),
            ("/usr/bin/nsenter", "util-linux"),
        ] {
            anyhow::ensure!(
                Path::new(program).exists(),
                "{program} is missing: install Debian's {package} (`hack/node-packages.sh` installs everything the node needs)"
            );
        }
        Ok(tools)
    }
}

/// What the node needs from the control plane.
pub struct ControlPlaneAccess<'a> {
    pub server: &'a str,
    pub pki: &'a Pki,
    pub client: &'a kube::Client,
}

/// A running node.
pub struct Node {
    pub layout: NodeLayout,
    pub network: Network,
    /// `host:port` of the image registry (on the host end of the veth pair).
    pub registry: String,
    processes: Group,
}

impl Node {
    /// Starts the registry, pushes the pause image, then containerd, the kubelet and
    /// kube-proxy, and waits until the Node is Ready.
    pub async fn start(
        layout: NodeLayout,
        network: Network,
        tools: &NodeTools,
        plane: ControlPlaneAccess<'_>,
        logs: &Path,
    ) -> anyhow::Result<Node> {
        for dir in [
            layout.root.clone(),
            layout.cni_conf_dir(),
            layout.cni_ipam_dir(),
            layout.kubelet_dir(),
            layout.pod_logs(),
            layout.registry_storage(),
        ] {
            std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
        }
        // A crashed environment of the same slot may have left its cgroups behind.
        cleanup::remove_cgroups(&network);
        cleanup::create_cgroups(&network)?;
        let mut node = Node {
            layout,
            network,
            registry: String::new(),
            processes: Group::new(logs),
        };

        let port = process::free_port_on(node.network.host_ip().into())?;
        node.registry = format!("{}:{port}", node.network.host_ip());
        std::fs::write(
            node.layout.registry_config(),
            config::registry(&node.layout, &node.registry),
        )?;
        let registry_config = node.layout.registry_config().display().to_string();
        node.spawn(
            "registry",
            &tools.registry,
            &["serve".to_owned(), registry_config],
            false,
        )?;
        let registry = node.registry.clone();
        node.processes
            .wait("registry", Duration::from_secs(30), || {
                registry_ready(&registry)
            })
            .await?;
        push_pause(tools, &node.registry)?;

        let hosts = node.layout.registry_hosts();
        for name in [IMAGE_REGISTRY, node.registry.as_str()] {
            std::fs::create_dir_all(hosts.join(name))?;
            std::fs::write(
                hosts.join(name).join("hosts.toml"),
                config::registry_host(&node.registry),
            )?;
        }
        std::fs::write(
            node.layout.containerd_config(),
            config::containerd(&node.layout),
        )?;
        std::fs::write(
            node.layout.cni_conf_dir().join("10-captf.conflist"),
            config::cni(&node.layout),
        )?;
        let containerd_config = node.layout.containerd_config().display().to_string();
        node.spawn(
            "containerd",
            &tools.containerd,
            &["--config".to_owned(), containerd_config],
            true,
        )?;
        let socket = node.layout.containerd_socket();
        node.processes
            .wait("containerd", Duration::from_secs(30), || {
                std::os::unix::net::UnixStream::connect(&socket).is_ok()
            })
            .await?;

        let p = plane.pki;
        std::fs::write(node.layout.resolv_conf(), config::RESOLV_CONF)?;
        std::fs::write(
            node.layout.kubelet_kubeconfig(),
            pki::kubeconfig(plane.server, &p.ca_cert, &p.node_cert, &p.node_key)?,
        )?;
        std::fs::write(
            node.layout.kubelet_config(),
            config::kubelet(
                &node.layout,
                &node.network,
                &p.ca_cert,
                &cleanup::cgroup_root(&node.network),
            ),
        )?;
        let kubelet_dir = node.layout.kubelet_dir();
        let kubelet_args = vec![
            format!("--config={}", node.layout.kubelet_config().display()),
            format!(
                "--kubeconfig={}",
                node.layout.kubelet_kubeconfig().display()
            ),
            format!("--root-dir={}", kubelet_dir.display()),
            format!("--cert-dir={}", kubelet_dir.join("pki").display()),
            format!("--hostname-override={NODE_NAME}"),
            format!("--node-ip={}", node.network.node_ip()),
            "--v=1".to_owned(),
        ];
        node.spawn("kubelet", &tools.kubelet, &kubelet_args, true)?;

        std::fs::write(
            node.layout.proxy_kubeconfig(),
            pki::kubeconfig(plane.server, &p.ca_cert, &p.proxy_cert, &p.proxy_key)?,
        )?;
        std::fs::write(node.layout.proxy_config(), config::kube_proxy(&node.layout))?;
        let proxy_args = vec![
            format!("--config={}", node.layout.proxy_config().display()),
            "--v=1".to_owned(),
        ];
        node.spawn("kube-proxy", &tools.kube_proxy, &proxy_args, true)?;

        let nodes: Api<NodeObject> = Api::all(plane.client.clone());
        node.processes
            .wait_async("kubelet", Duration::from_secs(120), || node_ready(&nodes))
            .await?;
        Ok(node)
    }

    /// Starts `program` (inside the node's network namespace when `inside`).
    fn spawn(
        &mut self,
        name: &str,
        program: &Path,
        args: &[String],
        inside: bool,
    ) -> anyhow::Result<()> {
        if inside {
            let mut all = self.network.enter();
            all.push(program.display().to_string());
            all.extend(args.iter().cloned());
            self.processes
                .spawn(name, Path::new("/usr/bin/nsenter"), &all)
        } else {
            self.processes.spawn(name, program, args)
        }
    }

    /// Pids of the node's processes (for `captf-testenv down` after a supervisor crash).
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.processes.pids()
    }

    /// The first process that exited unexpectedly, with its status.
    pub fn crashed(&mut self) -> Option<(String, String)> {
        self.processes.crashed()
    }

    /// Stops kube-proxy and the kubelet (so nothing restarts a container), kills the
    /// containers, stops containerd and the registry, and removes every mount and cgroup of
    /// the node. The network namespace stays until [`Network::delete`]: the API server listens
    /// on its veth pair.
    pub fn stop(&mut self) {
        while let Some(mut m) = self.processes.pop() {
            if m.name == "containerd" {
                cleanup::kill_containers(&self.network);
            }
            m.stop(Duration::from_secs(10));
        }
        cleanup::all(&self.layout, &self.network);
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if !self.processes.is_empty() {
            self.stop();
        }
    }
}

/// Ready, and schedulable: the node lifecycle controller has lifted the taints the kubelet
/// registers with.
async fn node_ready(nodes: &Api<NodeObject>) -> bool {
    let Ok(Some(node)) = nodes.get_opt(NODE_NAME).await else {
        return false;
    };
    let tainted = node.spec.and_then(|s| s.taints).is_some_and(|t| {
        t.iter()
            .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
    });
    let ready = node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    ready && !tainted
}

fn registry_ready(addr: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(format!("GET /v2/ HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.ends_with(b"200")
}

/// The sandbox image: the kubelet's pause program (built from the Kubernetes module's
/// build/pause, static), as the only file of a one-layer image, run as nobody.
fn push_pause(tools: &NodeTools, registry: &str) -> anyhow::Result<()> {
    use crate::oci::{Config, Entry, Image, Layer};
    let mut layer = Layer::new("pause");
    layer.push(Entry::host_file("/pause", &tools.pause).mode(0o755))?;
    let image = Image {
        layers: vec![layer],
        config: Config {
            user: Some("65535:65535".to_owned()),
            entrypoint: vec!["/pause".to_owned()],
            ..Config::default()
        },
    };
    let store = crate::images::store()?;
    let crane = crate::oci::Crane::new(&tools.crane);
    let reference = format!(
        "{registry}/{}",
        PAUSE_IMAGE.trim_start_matches("captf.local/")
    );
    crate::oci::push(&store, &crane, &image, &reference)?;
    Ok(())
}
