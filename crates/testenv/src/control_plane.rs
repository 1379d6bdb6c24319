//! etcd, kube-apiserver and kube-controller-manager as local processes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::node::Network;
use crate::pki::{self, Pki};
use crate::process::{self, Group};
use crate::tools::Tools;

/// Controllers the tests need: Jobs and their pods, Deployments and their ReplicaSets (the
/// installed providers), Services' endpoints (kube-proxy routes by EndpointSlices), disruption
/// budgets, aggregated ClusterRoles (Cluster API's manager role is one), garbage collection,
/// namespace deletion, ServiceAccounts and their tokens, the root CA ConfigMap,
/// TTL-after-finished, the node's lifecycle (it lifts the `not-ready` taint the kubelet
/// registers with), and ResourceQuotas (the admission check refuses only against a quota this
/// controller has counted).
pub const CONTROLLERS: &str = "resourcequota-controller,job-controller,deployment-controller,clusterrole-aggregation-controller,replicaset-controller,endpoints-controller,endpointslice-controller,disruption-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,ttl-after-finished-controller,node-lifecycle-controller";

/// The files of one control plane under its directory.
#[derive(Clone, Debug)]
pub struct Layout {
    pub root: PathBuf,
}

impl Layout {
    pub fn pki(&self) -> PathBuf {
        self.root.join("pki")
    }
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }
    pub fn etcd_data(&self) -> PathBuf {
        self.root.join("etcd")
    }
    pub fn pods(&self) -> PathBuf {
        self.root.join("pods")
    }
    /// The admin kubeconfig (client certificate in group `system:masters`).
    pub fn kubeconfig(&self) -> PathBuf {
        self.root.join("kubeconfig")
    }
    /// Written by the supervisor once everything is healthy.
    pub fn state_file(&self) -> PathBuf {
        self.root.join("state.json")
    }
}

/// A running control plane.
pub struct ControlPlane {
    pub layout: Layout,
    pub pki: Pki,
    pub server: String,
    pub apiserver_port: u16,
    etcd_port: u16,
    processes: Group,
}

impl ControlPlane {
    /// Starts etcd, then kube-apiserver, then kube-controller-manager and kube-scheduler,
    /// waiting for each to be healthy, and writes the admin kubeconfig. The API server listens
    /// on the host end of the node's veth pair (reachable from the host and, through the
    /// `kubernetes` Service, from pods), etcd on loopback.
    pub async fn start(layout: Layout, tools: &Tools, network: &Network) -> anyhow::Result<Self> {
        std::fs::create_dir_all(layout.logs())?;
        let address = network.host_ip();
        let pki = pki::write(
            &layout.pki(),
            address,
            network.kubernetes_service_ip(),
            crate::node::NODE_NAME,
        )?;
        let mut plane = ControlPlane {
            layout: layout.clone(),
            pki,
            server: String::new(),
            apiserver_port: 0,
            etcd_port: 0,
            processes: Group::new(&layout.logs()),
        };
        let etcd_port = process::free_port()?;
        plane.etcd_port = etcd_port;
        let peer_port = process::free_port()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        plane.spawn(
            "etcd",
            &tools.etcd,
            vec![
                format!("--data-dir={}", layout.etcd_data().display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
                "--unsafe-no-fsync=true".into(),
                "--quota-backend-bytes=8589934592".into(),
                "--auto-compaction-retention=1".into(),
                "--log-level=warn".into(),
            ],
        )?;
        plane
            .processes
            .wait("etcd", Duration::from_secs(60), || etcd_healthy(etcd_port))
            .await?;

        let port = process::free_port_on(address.into())?;
        plane.apiserver_port = port;
        plane.server = format!("https://{address}:{port}");
        let p = plane.pki.clone();
        plane.spawn(
            "kube-apiserver",
            &tools.kube_apiserver,
            vec![
                format!("--etcd-servers={etcd_url}"),
                format!("--bind-address={address}"),
                format!("--advertise-address={address}"),
                format!("--secure-port={port}"),
                format!("--cert-dir={}", layout.pki().display()),
                format!("--tls-cert-file={}", p.serving_cert.display()),
                format!("--tls-private-key-file={}", p.serving_key.display()),
                format!("--client-ca-file={}", p.ca_cert.display()),
                format!("--service-cluster-ip-range={}", network.service_cidr()),
                // Node: the kubelet gets exactly its pods' Secrets and tokens, as on a cluster.
                "--authorization-mode=Node,RBAC".into(),
                format!("--kubelet-client-certificate={}", p.admin_cert.display()),
                format!("--kubelet-client-key={}", p.admin_key.display()),
                "--kubelet-preferred-address-types=InternalIP".into(),
                "--allow-privileged=true".into(),
                format!("--service-account-issuer=https://127.0.0.1:{port}"),
                format!(
                    "--service-account-key-file={}",
                    p.service_account_public_key.display()
                ),
                format!(
                    "--service-account-signing-key-file={}",
                    p.service_account_key.display()
                ),
                // The `kubernetes` Service's endpoint is this server: pods reach it there.
                "--endpoint-reconciler-type=lease".into(),
                "--v=1".into(),
            ],
        )?;
        std::fs::write(
            layout.kubeconfig(),
            pki::kubeconfig(&plane.server, &p.ca_cert, &p.admin_cert, &p.admin_key)?,
        )?;
        let client = crate::client_from_kubeconfig(&layout.kubeconfig()).await?;
        plane
            .processes
            .wait_async("kube-apiserver", Duration::from_secs(120), || {
                readyz(&client)
            })
            .await?;

        plane.spawn(
            "kube-controller-manager",
            &tools.kube_controller_manager,
            vec![
                format!("--kubeconfig={}", layout.kubeconfig().display()),
                "--leader-elect=false".into(),
                format!("--controllers={CONTROLLERS}"),
                "--use-service-account-credentials=false".into(),
                format!("--root-ca-file={}", p.ca_cert.display()),
                format!(
                    "--service-account-private-key-file={}",
                    p.service_account_key.display()
                ),
                "--secure-port=0".into(),
                // Pods of finished Jobs must not pile up in tests that run hundreds of Jobs.
                "--terminated-pod-gc-threshold=1000".into(),
                "--v=1".into(),
            ],
        )?;

        let scheduler_kubeconfig = layout.root.join("scheduler.kubeconfig");
        std::fs::write(
            &scheduler_kubeconfig,
            pki::kubeconfig(
                &plane.server,
                &p.ca_cert,
                &p.scheduler_cert,
                &p.scheduler_key,
            )?,
        )?;
        plane.spawn(
            "kube-scheduler",
            &tools.kube_scheduler,
            vec![
                format!("--kubeconfig={}", scheduler_kubeconfig.display()),
                format!(
                    "--authentication-kubeconfig={}",
                    scheduler_kubeconfig.display()
                ),
                format!(
                    "--authorization-kubeconfig={}",
                    scheduler_kubeconfig.display()
                ),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                "--v=1".into(),
            ],
        )?;
        Ok(plane)
    }

    fn spawn(&mut self, name: &str, program: &Path, args: Vec<String>) -> anyhow::Result<()> {
        self.processes.spawn(name, program, &args)
    }

    /// Restarts `etcd` or `kube-apiserver` and waits until it is healthy again.
    pub async fn restart(&mut self, name: &str) -> anyhow::Result<()> {
        let client = crate::client_from_kubeconfig(&self.layout.kubeconfig()).await?;
        self.processes.restart(name)?;
        let port = self.etcd_port;
        self.processes
            .wait("etcd", Duration::from_secs(60), || etcd_healthy(port))
            .await?;
        self.processes
            .wait_async("kube-apiserver", Duration::from_secs(120), || {
                readyz(&client)
            })
            .await
    }

    /// Pids of every process (for `captf-testenv down` after a supervisor crash).
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.processes.pids()
    }

    /// The first process that exited unexpectedly, with its status.
    pub fn crashed(&mut self) -> Option<(String, String)> {
        self.processes.crashed()
    }

    /// Stops everything, newest first.
    pub fn stop(&mut self) {
        self.processes.stop();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

fn etcd_healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    body.contains("\"health\":\"true\"")
}

async fn readyz(client: &kube::Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(client.request_text(request).await, Ok(body) if body.trim() == "ok")
}

/// The last `lines` lines of a log file, for error messages.
pub fn tail(path: &Path, lines: usize) -> String {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| format!("({}: {e})", path.display()));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Installs CRDs from YAML files (multi-document allowed) with server-side apply and waits until
/// each is Established.
pub async fn install_crds(client: &kube::Client, yaml: &str) -> anyhow::Result<Vec<String>> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value = serde_yaml::Value::deserialize(doc)?;
        if value.is_null() {
            continue;
        }
        let crd: CustomResourceDefinition = serde_yaml::from_value(value).context("CRD YAML")?;
        let name = crd.metadata.name.clone().context("CRD without a name")?;
        api.patch(
            &name,
            &PatchParams::apply("captf-testenv").force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("installing CRD {name}"))?;
        names.push(name);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for name in &names {
        loop {
            let crd = api.get(name).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "CRD {name} not Established after 60s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(names)
}

use serde::Deserialize as _;
