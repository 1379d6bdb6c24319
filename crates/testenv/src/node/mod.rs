//! The process node: a Ready Node that binds every unscheduled pod to itself and runs each pod's
//! containers as local processes (see [`pod`]), reporting status as a kubelet would.

pub mod env;
pub mod image;
mod pod;
pub mod volumes;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;

use image::Images;

/// The Node's name.
pub const NODE_NAME: &str = "captf-process-node";

/// What every pod task shares.
pub struct NodeContext {
    pub client: kube::Client,
    pub pods_dir: PathBuf,
    pub images: Images,
    /// The `captf-testenv` binary, re-executed as the container launcher.
    pub self_exe: PathBuf,
    pub apiserver_port: u16,
    /// Process groups of running containers, killed when the node stops.
    pub running: Mutex<std::collections::BTreeSet<u32>>,
}

impl NodeContext {
    /// Kills every running container (SIGKILL to its process group).
    pub fn kill_all(&self) {
        let groups: Vec<u32> = self
            .running
            .lock()
            .map(|r| r.iter().copied().collect())
            .unwrap_or_default();
        for pgid in groups {
            crate::process::stop_group(pgid, Duration::ZERO, || true);
        }
    }

    fn pod_dir(&self, pod: &Pod) -> PathBuf {
        self.pods_dir
            .join(pod.metadata.uid.as_deref().unwrap_or("unknown"))
    }
}

type Tasks = Arc<Mutex<HashMap<String, tokio::sync::watch::Sender<Option<Duration>>>>>;

/// Registers the Node and runs until the watch ends (it does not, short of a panic).
pub async fn run(ctx: Arc<NodeContext>) -> anyhow::Result<()> {
    register(&ctx.client).await?;
    let tasks: Tasks = Arc::default();
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let mut stream = watcher(pods, watcher::Config::default()).boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                handle(&ctx, &tasks, pod).await
            }
            Ok(watcher::Event::Delete(pod)) => {
                if let Some(uid) = pod.metadata.uid.as_deref()
                    && let Some(stop) = tasks.lock().ok().and_then(|mut t| t.remove(uid))
                {
                    let _ = stop.send(Some(Duration::ZERO));
                }
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
            Err(e) => {
                tracing::warn!(error = %e, "pod watch error; the watcher retries");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    Ok(())
}

async fn handle(ctx: &Arc<NodeContext>, tasks: &Tasks, pod: Pod) {
    let Some(uid) = pod.metadata.uid.clone() else {
        return;
    };
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let deleting = pod.metadata.deletion_timestamp.is_some();
    let node = spec.node_name.clone().unwrap_or_default();
    if node.is_empty() {
        if !deleting && let Err(e) = bind(&ctx.client, &namespace, &name).await {
            tracing::debug!(%namespace, %name, error = %e, "binding failed (retried on the next event)");
        }
        return;
    }
    if node != NODE_NAME {
        return;
    }
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    let terminal = phase == "Succeeded" || phase == "Failed";
    let existing = tasks.lock().ok().and_then(|t| t.get(&uid).cloned());
    match (existing, deleting) {
        (Some(stop), true) => {
            let grace = pod
                .metadata
                .deletion_grace_period_seconds
                .unwrap_or(30)
                .max(0);
            let grace = Duration::from_secs(u64::try_from(grace).unwrap_or(0));
            if stop.borrow().is_none() {
                let _ = stop.send(Some(grace));
            }
        }
        (Some(_), false) => {}
        (None, true) => {
            // Nothing runs for it: finish the deletion a kubelet would.
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
            let _ = api
                .delete(
                    &name,
                    &DeleteParams {
                        grace_period_seconds: Some(0),
                        ..Default::default()
                    },
                )
                .await;
        }
        (None, false) if terminal => {}
        (None, false) => {
            let (tx, rx) = tokio::sync::watch::channel(None);
            if let Ok(mut t) = tasks.lock() {
                t.insert(uid, tx);
            }
            tracing::info!(%namespace, %name, "starting pod");
            tokio::spawn(pod::run(ctx.clone(), pod, rx));
        }
    }
}

async fn bind(client: &kube::Client, namespace: &str, name: &str) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let binding = Binding {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(NODE_NAME.into()),
            ..Default::default()
        },
    };
    let _: serde_json::Value = api
        .create_subresource("binding", name, &PostParams::default(), &binding)
        .await?;
    Ok(())
}

async fn register(client: &kube::Client) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let node = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "labels": {
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
            },
        },
    });
    let params = PatchParams::apply("captf-testenv").force();
    api.patch(NODE_NAME, &params, &Patch::Apply(&node)).await?;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": NODE_NAME },
        "status": {
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "ProcessNodeReady",
                "message": "captf-testenv runs pods as local processes",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }],
            "capacity": { "cpu": "2", "memory": "24Gi", "pods": "1000" },
            "allocatable": { "cpu": "2", "memory": "24Gi", "pods": "1000" },
            "addresses": [{ "type": "InternalIP", "address": "127.0.0.1" }, { "type": "Hostname", "address": NODE_NAME }],
            "nodeInfo": {
                "architecture": std::env::consts::ARCH, "operatingSystem": "linux",
                "kubeletVersion": "captf-testenv", "kubeProxyVersion": "", "containerRuntimeVersion": "process://",
                "bootID": "", "kernelVersion": "", "machineID": "", "osImage": "", "systemUUID": "",
            },
        },
    });
    api.patch_status(NODE_NAME, &params, &Patch::Apply(&status))
        .await?;
    Ok(())
}
