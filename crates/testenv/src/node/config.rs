//! The node's configuration files: containerd's, the registry's, the CNI network's, the
//! kubelet's and kube-proxy's. Each is a pure function of the paths and addresses, so what
//! the node runs with can be read in one place.
//!
//! The settings that are not upstream defaults are there for this kind of machine (a VM with
//! cgroup v1, no systemd as PID 1, no way to lower `oom_score_adj`): see docs/development.md.

use std::path::{Path, PathBuf};

use super::network::{Network, POD_CIDR};

/// Where one node keeps its files, under the environment's folder.
#[derive(Clone, Debug)]
pub struct NodeLayout {
    pub root: PathBuf,
}

impl NodeLayout {
    pub fn containerd_config(&self) -> PathBuf {
        self.root.join("containerd/config.toml")
    }
    pub fn containerd_root(&self) -> PathBuf {
        self.root.join("containerd/root")
    }
    pub fn containerd_state(&self) -> PathBuf {
        self.root.join("containerd/state")
    }
    pub fn containerd_socket(&self) -> PathBuf {
        self.root.join("containerd.sock")
    }
    /// containerd's per-registry host configuration (`hosts.toml` per registry name).
    pub fn registry_hosts(&self) -> PathBuf {
        self.root.join("containerd/certs.d")
    }
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.root.join("cni/net.d")
    }
    pub fn cni_ipam_dir(&self) -> PathBuf {
        self.root.join("cni/ipam")
    }
    pub fn kubelet_dir(&self) -> PathBuf {
        self.root.join("kubelet")
    }
    pub fn kubelet_config(&self) -> PathBuf {
        self.root.join("kubelet.yaml")
    }
    pub fn kubelet_kubeconfig(&self) -> PathBuf {
        self.root.join("kubelet.kubeconfig")
    }
    pub fn pod_logs(&self) -> PathBuf {
        self.root.join("pod-logs")
    }
    pub fn resolv_conf(&self) -> PathBuf {
        self.root.join("resolv.conf")
    }
    pub fn proxy_config(&self) -> PathBuf {
        self.root.join("kube-proxy.yaml")
    }
    pub fn proxy_kubeconfig(&self) -> PathBuf {
        self.root.join("kube-proxy.kubeconfig")
    }
    pub fn registry_config(&self) -> PathBuf {
        self.root.join("registry.yaml")
    }
    pub fn registry_storage(&self) -> PathBuf {
        self.root.join("registry")
    }
}

/// The registry name images are referenced by in tests and the demo (`captf.local/...`);
/// containerd resolves it to the environment's registry.
pub const IMAGE_REGISTRY: &str = "captf.local";

/// The sandbox ("pause") image, pushed by the node before the kubelet starts.
pub const PAUSE_IMAGE: &str = "captf.local/pause:3.10";

/// The Node's name.
pub const NODE_NAME: &str = "captf-node";

pub fn containerd(layout: &NodeLayout) -> String {
    let p = |path: PathBuf| toml_string(&path);
    format!(
        r#"version = 2
root = {root}
state = {state}
# The VM cannot lower oom_score_adj (no CAP_SYS_RESOURCE in the bounding set).
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = {socket}

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = {opt}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  # Pod network namespaces under the state folder, not /run/netns: the node's cleanup finds
  # them there.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # runc, not crun: crun refuses hybrid cgroups. cgroupfs: no systemd here.
        SystemdCgroup = false
        # runc's state under the node's folder, not /run/containerd/runc.
        Root = {runc}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = {cni}
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = {hosts}
"#,
        root = p(layout.containerd_root()),
        state = p(layout.containerd_state()),
        socket = p(layout.containerd_socket()),
        opt = p(layout.root.join("containerd/opt")),
        runc = p(layout.containerd_state().join("runc")),
        cni = p(layout.cni_conf_dir()),
        hosts = p(layout.registry_hosts()),
    )
}

/// containerd's `hosts.toml` for a registry name served over plain HTTP at `endpoint`.
pub fn registry_host(endpoint: &str) -> String {
    format!(
        "server = \"http://{endpoint}\"\n\n[host.\"http://{endpoint}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
    )
}

/// The distribution registry: filesystem storage, plain HTTP on the host end of the veth.
pub fn registry(layout: &NodeLayout, addr: &str) -> String {
    format!(
        "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
        json_string(&layout.registry_storage())
    )
}

/// One bridge for every pod, masquerading what leaves the pod network (so the host sees the
/// node's address, never a pod's), hairpin so a pod reaches itself through a Service.
pub fn cni(layout: &NodeLayout) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "captf",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": true,
                "ipMasq": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": POD_CIDR }]],
                    "routes": [{ "dst": "0.0.0.0/0" }],
                    "dataDir": layout.cni_ipam_dir(),
                },
            },
            { "type": "portmap", "capabilities": { "portMappings": true } },
        ],
    }))
    .unwrap_or_default()
}

/// The kubelet's configuration. `cgroup_root` is this node's own cgroup (one per environment,
/// removed with it).
pub fn kubelet(layout: &NodeLayout, network: &Network, ca: &Path, cgroup_root: &str) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": network.node_ip().to_string(),
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        // Only the API server (a client certificate of the environment's CA) talks to it.
        "authentication": {
            "anonymous": { "enabled": false },
            "webhook": { "enabled": false },
            "x509": { "clientCAFile": ca },
        },
        "authorization": { "mode": "AlwaysAllow" },
        "containerRuntimeEndpoint": format!("unix://{}", layout.containerd_socket().display()),
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        // This VM: cgroup v1 (allowed up to 1.34), swap on, no negative oom_score_adj.
        "failCgroupV1": false,
        "failSwapOn": false,
        "oomScoreAdj": 0,
        "resolvConf": layout.resolv_conf(),
        "podLogsDir": layout.pod_logs(),
        "maxPods": 250,
        "serializeImagePulls": false,
        // Images are the tests' own; never collect them mid-run, never evict for a disk that
        // other work on the machine fills.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "nodeStatusReportFrequency": "1m",
        "shutdownGracePeriod": "0s",
        "registerNode": true,
    }))
    .unwrap_or_default()
}

/// kube-proxy in iptables mode, inside the node's network namespace.
pub fn kube_proxy(layout: &NodeLayout) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": { "kubeconfig": layout.proxy_kubeconfig() },
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": POD_CIDR,
        "bindAddress": "0.0.0.0",
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "oomScoreAdj": 0,
        // conntrack sysctls are global, not the namespace's: leave them as they are.
        "conntrack": { "maxPerCore": 0 },
        "iptables": { "minSyncPeriod": "0s", "syncPeriod": "30s" },
    }))
    .unwrap_or_default()
}

/// Pods get no cluster DNS (none runs here); their resolv.conf points nowhere outside.
pub const RESOLV_CONF: &str = "options ndots:1\n";

fn toml_string(path: &Path) -> String {
    json_string(path)
}

fn json_string(path: &Path) -> String {
    serde_json::to_string(&path.display().to_string()).unwrap_or_default()
}
