//! The node's network: a network namespace of its own, joined to the host by one veth pair.
//!
//! containerd, the kubelet and kube-proxy run inside the namespace (`nsenter --net`, which keeps
//! the host's mounts and cgroups in view; `ip netns exec` would remount /sys). The CNI bridge,
//! the pods' veths, kube-proxy's and the bridge plugin's iptables rules all live there and go
//! with it. The namespace has no default route: a pod reaches the pod network, the service
//! network, and the host ends of the veth pairs (its own and every other environment's,
//! 10.250.0.0/16), where the API servers and the image registries listen, and nothing else. A
//! controller on one environment's node so reaches another environment's API server, as
//! Cluster API on a management cluster reaches a workload cluster (`clusterctl move`). The host never sees a pod address (the bridge plugin masquerades traffic
//! that leaves the pod network), so every environment uses the same pod range.
//!
//! The service range is the slot's own, routed from the host into the namespace, because the
//! API server (a host process) calls webhooks through their Services as it does on a cluster:
//! it dials the ClusterIP, and kube-proxy's rules in the namespace forward the connection to a
//! pod. The route goes with the host end of the veth pair.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;

/// Pods' addresses, inside the node's namespace.
pub const POD_CIDR: &str = "10.244.0.0/24";
/// Environments on one machine: one /24 of 10.250.0.0/16 each for their veth pair, and one of
/// 10.251.0.0/16 for their ClusterIPs.
const SLOTS: u8 = 250;
/// The host ends of every environment's veth pair, routed from each node to the host.
const HOST_ENDS: &str = "10.250.0.0/16";

/// One environment's network: slot `n` owns namespace `captf-<n>`, host interface `captf<n>`
/// (10.250.n.1), inside it `eth0` (10.250.n.2), and the ClusterIPs 10.251.n.0/24.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Network {
    pub slot: u8,
}

impl Network {
    /// Takes the first free slot: `ip netns add` fails when the name exists, so two
    /// environments starting at once cannot take the same one. A slot whose host interface
    /// still exists (a namespace deleted while a process of it lived on) is skipped too.
    pub fn create() -> anyhow::Result<Network> {
        let mut last_error = None;
        for slot in 0..SLOTS {
            let network = Network { slot };
            if network.netns_path().exists() {
                continue;
            }
            let added = Command::new("ip")
                .args(["netns", "add", &network.netns()])
                .stderr(std::process::Stdio::null())
                .status()
                .context("running `ip netns add` (iproute2; hack/node-packages.sh installs it)")?;
            if !added.success() {
                continue;
            }
            match network.configure() {
                Ok(()) => return Ok(network),
                Err(e) => {
                    network.delete();
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| {
            anyhow::anyhow!(
                "no free network slot: {SLOTS} namespaces captf-<n> exist (`ip netns list`); stop old environments with `captf-testenv down`"
            )
        }))
    }

    pub fn netns(&self) -> String {
        format!("captf-{}", self.slot)
    }

    pub fn netns_path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(self.netns())
    }

    /// The host end of the veth pair.
    pub fn host_interface(&self) -> String {
        format!("captf{}", self.slot)
    }

    /// Where the API server and the registry listen: the host end of the veth pair.
    pub fn host_ip(&self) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::new(10, 250, self.slot, 1)
    }

    /// The node's InternalIP: the namespace's end of the veth pair.
    pub fn node_ip(&self) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::new(10, 250, self.slot, 2)
    }

    /// ClusterIPs (`--service-cluster-ip-range`): kube-proxy's rules in the node's namespace
    /// give them meaning, and the host routes them there.
    pub fn service_cidr(&self) -> String {
        format!("10.251.{}.0/24", self.slot)
    }

    /// The `kubernetes` Service's ClusterIP: the first of [`Network::service_cidr`].
    pub fn kubernetes_service_ip(&self) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::new(10, 251, self.slot, 1)
    }

    /// `nsenter --net=<namespace> --`: the prefix of a command run inside the node's network.
    pub fn enter(&self) -> Vec<String> {
        vec![
            format!("--net={}", self.netns_path().display()),
            "--".to_owned(),
        ]
    }

    fn configure(&self) -> anyhow::Result<()> {
        let host = self.host_interface();
        let ns = self.netns();
        ip(&[
            "link", "add", &host, "type", "veth", "peer", "name", "eth0", "netns", &ns,
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", self.host_ip()),
            "dev",
            &host,
        ])?;
        ip(&["link", "set", &host, "up"])?;
        ip(&[
            "route",
            "add",
            &self.service_cidr(),
            "via",
            &self.node_ip().to_string(),
            "dev",
            &host,
        ])?;
        for args in [
            vec!["link", "set", "lo", "up"],
            vec!["link", "set", "eth0", "up"],
        ] {
            ip_in(&ns, &args)?;
        }
        ip_in(
            &ns,
            &[
                "addr",
                "add",
                &format!("{}/24", self.node_ip()),
                "dev",
                "eth0",
            ],
        )?;
        ip_in(
            &ns,
            &[
                "route",
                "add",
                HOST_ENDS,
                "via",
                &self.host_ip().to_string(),
                "dev",
                "eth0",
            ],
        )?;
        // Pods are routed through the namespace; service traffic between pods on the bridge
        // must pass kube-proxy's iptables rules (br_netfilter, a per-namespace switch).
        let _ = Command::new("modprobe").arg("br_netfilter").status();
        for setting in [
            "net.ipv4.ip_forward=1",
            "net.bridge.bridge-nf-call-iptables=1",
        ] {
            self.run_inside("sysctl", &["-q", "-w", setting])?;
        }
        Ok(())
    }

    /// Runs a command inside the node's network namespace and fails with its output.
    pub fn run_inside(&self, program: &str, args: &[&str]) -> anyhow::Result<String> {
        let mut command = Command::new("nsenter");
        command.args(self.enter()).arg(program).args(args);
        output(command)
    }

    /// Deletes the namespace. Its interfaces (the bridge, the pods' veths, its end of the veth
    /// pair and with it the host end) and iptables rules go with it once no process is left in
    /// it. Only the namespace is deleted by name: the host interface of the slot may already
    /// belong to the next environment that took the slot.
    pub fn delete(&self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.netns()])
            .stderr(std::process::Stdio::null())
            .status();
    }

    /// Whether the host end of the veth pair exists (after [`Network::delete`]: whether a
    /// process kept the namespace alive).
    pub fn lingers(&self) -> bool {
        std::path::Path::new("/sys/class/net")
            .join(self.host_interface())
            .exists()
    }
}

fn ip(args: &[&str]) -> anyhow::Result<String> {
    let mut command = Command::new("ip");
    command.args(args);
    output(command)
}

fn ip_in(ns: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut command = Command::new("ip");
    command.args(["-n", ns]).args(args);
    output(command)
}

fn output(mut command: Command) -> anyhow::Result<String> {
    let shown = format!("{command:?}");
    let out = command
        .output()
        .with_context(|| format!("running {shown}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{shown} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
