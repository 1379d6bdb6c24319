//! The life of one pod on the process node: volumes, image resolution, init containers in
//! order, then the containers, and the status a kubelet would report at each step. Deletion
//! sends SIGTERM, waits the grace period, then SIGKILL.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use tokio::sync::watch;

use super::NodeContext;
use super::env;
use super::image::Image;
use super::volumes;
use crate::exec::{ContainerSpec, DEFAULT_PATH, Mount};

/// Kubelet's cap on a termination message.
const MAX_TERMINATION_MESSAGE: usize = 4096;

/// A stop request: the grace period to give the containers.
pub type Stop = watch::Receiver<Option<Duration>>;

/// Runs the pod to completion or until stopped, reporting status throughout.
pub async fn run(ctx: Arc<NodeContext>, pod: Pod, mut stop: Stop) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let mut state = PodState::new(&pod);
    let result = lifecycle(&ctx, &pod, &mut state, &mut stop).await;
    if let Err(error) = &result {
        tracing::warn!(%namespace, %name, error = format!("{error:#}"), "pod failed on the process node");
        state.fail_unstarted(&format!("{error:#}"));
    }
    let deleted = stop.borrow().is_some();
    state.finish();
    if let Err(e) = state.report(&ctx.client, &pod).await {
        tracing::debug!(%namespace, %name, error = %e, "final pod status not written");
    }
    if deleted {
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
    if std::env::var_os("CAPTF_TESTENV_KEEP_PODS").is_none() {
        let _ = std::fs::remove_dir_all(ctx.pod_dir(&pod));
    }
}

async fn lifecycle(
    ctx: &Arc<NodeContext>,
    pod: &Pod,
    state: &mut PodState,
    stop: &mut Stop,
) -> anyhow::Result<()> {
    let spec = pod.spec.clone().context("pod without spec")?;
    let dir = ctx.pod_dir(pod);
    std::fs::create_dir_all(&dir)?;
    state.report(&ctx.client, pod).await?;

    let fs_group = spec.security_context.as_ref().and_then(|s| s.fs_group);
    // Like a kubelet, wait for missing Secrets and ConfigMaps (the per-run Secret is created
    // right after the Job).
    let volumes = loop {
        match volumes::materialize(&ctx.client, pod, &dir.join("volumes"), fs_group).await {
            Ok(v) => break v,
            Err(e) => {
                state.waiting_all("ContainerCreating", &format!("{e:#}"));
                state.report(&ctx.client, pod).await?;
                if wait_or_stop(stop, Duration::from_secs(1)).await {
                    return Ok(());
                }
            }
        }
    };

    let init = spec.init_containers.clone().unwrap_or_default();
    for (index, container) in init.iter().enumerate() {
        let code = run_container(
            ctx,
            pod,
            container,
            &volumes,
            state,
            Slot::Init(index),
            stop,
        )
        .await?;
        if code != Some(0) {
            return Ok(());
        }
    }
    state.initialized = true;
    let mut tasks = Vec::new();
    for (index, container) in spec.containers.iter().enumerate() {
        let ctx = ctx.clone();
        let pod = pod.clone();
        let container = container.clone();
        let volumes = volumes.clone();
        let mut stop = stop.clone();
        let mut own = state.clone();
        tasks.push(tokio::spawn(async move {
            let code = run_container(
                &ctx,
                &pod,
                &container,
                &volumes,
                &mut own,
                Slot::Main(index),
                &mut stop,
            )
            .await;
            (index, code, own.containers[index].clone())
        }));
    }
    for task in tasks {
        let (index, code, status) = task.await.context("container task")?;
        code?;
        state.containers[index] = status;
    }
    Ok(())
}

/// The kubelet's image pull backoff: the first retry after 10 s, each next one after twice as
/// long, at most five minutes apart.
const PULL_BACKOFF_FIRST: Duration = Duration::from_secs(10);
const PULL_BACKOFF_MAX: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug)]
enum Slot {
    Init(usize),
    Main(usize),
}

/// Runs one container; `None` when it never started (stopped while waiting for its image).
async fn run_container(
    ctx: &Arc<NodeContext>,
    pod: &Pod,
    container: &Container,
    volumes: &volumes::Materialized,
    state: &mut PodState,
    slot: Slot,
    stop: &mut Stop,
) -> anyhow::Result<Option<i32>> {
    let reference = container.image.clone().unwrap_or_default();
    let mut backoff = PULL_BACKOFF_FIRST;
    let image = loop {
        match ctx.images.resolve(&reference) {
            Ok(image) => break image,
            Err(e) => {
                let reason = if state
                    .status(slot)
                    .state
                    .as_ref()
                    .and_then(|s| s.waiting.as_ref())
                    .is_some_and(|w| w.reason.as_deref() == Some("ErrImagePull"))
                {
                    "ImagePullBackOff"
                } else {
                    "ErrImagePull"
                };
                let now_waiting = waiting(reason, &format!("{e:#}"));
                // Like the kubelet, write the status only when it changes: a hundred pods
                // waiting for an image must not keep the API server busy.
                if state.status(slot).state.as_ref() != Some(&now_waiting) {
                    state.set(slot, now_waiting);
                    state.report(&ctx.client, pod).await?;
                }
                if wait_or_stop(stop, backoff).await {
                    return Ok(None);
                }
                backoff = (backoff * 2).min(PULL_BACKOFF_MAX);
            }
        }
    };
    state.status_mut(slot).image_id = image.image_id.clone();

    let dir = ctx.pod_dir(pod).join("containers").join(&container.name);
    std::fs::create_dir_all(&dir)?;
    let termination_log = dir.join("termination-log");
    std::fs::write(&termination_log, b"")?;
    set_mode(&termination_log, 0o666)?;
    let log_path = dir.join("log");
    let spec = container_spec(ctx, pod, container, &image, volumes, &dir, &termination_log).await?;
    let spec_path = dir.join("spec.json");
    std::fs::write(&spec_path, serde_json::to_vec(&spec)?)?;

    let log = std::fs::File::create(&log_path)?;
    let mut child = tokio::process::Command::new(&ctx.self_exe)
        .arg("exec-container")
        .arg(&spec_path)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .context("starting the container launcher")?;
    let pid = child.id().unwrap_or_default();
    if let Ok(mut running) = ctx.running.lock() {
        running.insert(pid);
    }
    let started = now();
    state.set(
        slot,
        ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(started.clone()),
            }),
            ..Default::default()
        },
    );
    state.status_mut(slot).container_id = Some(format!("process://{pid}"));
    state.status_mut(slot).started = Some(true);
    state.status_mut(slot).ready = matches!(slot, Slot::Main(_));
    state.report(&ctx.client, pod).await?;

    let mut stopped = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status?,
            changed = stop.changed() => {
                let grace = if changed.is_ok() { *stop.borrow() } else { Some(Duration::ZERO) };
                if let Some(grace) = grace {
                    stopped = true;
                    let exited = crate::process::terminate_group(pid, grace, &mut child).await;
                    break exited?;
                }
            }
        }
    };
    if let Ok(mut running) = ctx.running.lock() {
        running.remove(&pid);
    }
    let code = exit_code(&status);
    let message = termination_message(container, &termination_log, &log_path, code);
    let reason = if stopped && code != 0 {
        "Error"
    } else if code == 0 {
        "Completed"
    } else {
        "Error"
    };
    state.set(
        slot,
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                reason: Some(reason.into()),
                message,
                started_at: Some(started),
                finished_at: Some(now()),
                container_id: Some(format!("process://{pid}")),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    state.status_mut(slot).ready = false;
    state.status_mut(slot).started = Some(false);
    if matches!(slot, Slot::Init(_)) {
        state.report(&ctx.client, pod).await?;
    }
    Ok(Some(code))
}

async fn container_spec(
    ctx: &NodeContext,
    pod: &Pod,
    container: &Container,
    image: &Image,
    volumes: &volumes::Materialized,
    dir: &Path,
    termination_log: &Path,
) -> anyhow::Result<ContainerSpec> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let pod_security = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.clone())
        .unwrap_or_default();
    let security = container.security_context.clone().unwrap_or_default();

    let mut mounts = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&image.rootfs)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let target = PathBuf::from("/").join(entry.file_name());
        if entry.file_type()?.is_dir() {
            let mut lower = vec![entry.path()];
            if target.is_dir() && !target.is_symlink() {
                lower.push(target.clone());
            }
            let upper = dir.join("upper").join(entry.file_name());
            let work = dir.join("work").join(entry.file_name());
            std::fs::create_dir_all(&upper)?;
            std::fs::create_dir_all(&work)?;
            mounts.push(Mount::Overlay {
                lower,
                upper,
                work,
                target,
            });
        } else {
            mounts.push(Mount::Bind {
                source: entry.path(),
                target,
                read_only: true,
            });
        }
    }
    let mut volume_mounts = container.volume_mounts.clone().unwrap_or_default();
    // Parents before children, so a nested mount is not hidden by its parent's.
    volume_mounts.sort_by_key(|m| m.mount_path.matches('/').count());
    for vm in volume_mounts {
        let mut source = volumes
            .get(&vm.name)
            .with_context(|| format!("volumeMount {:?}: no such volume", vm.name))?
            .clone();
        if let Some(sub) = vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
            source = source.join(sub);
            if !source.exists() {
                std::fs::create_dir_all(&source)?;
            }
        }
        mounts.push(Mount::Bind {
            source,
            target: PathBuf::from(&vm.mount_path),
            read_only: vm.read_only.unwrap_or(false),
        });
    }
    let termination_path = container
        .termination_message_path
        .clone()
        .unwrap_or_else(|| "/dev/termination-log".into());
    mounts.push(Mount::Bind {
        source: termination_log.to_owned(),
        target: PathBuf::from(termination_path),
        read_only: false,
    });

    let mut base = vec![
        ("PATH".to_owned(), DEFAULT_PATH.to_owned()),
        ("HOSTNAME".to_owned(), name.clone()),
        ("KUBERNETES_SERVICE_HOST".to_owned(), "127.0.0.1".to_owned()),
        (
            "KUBERNETES_SERVICE_PORT".to_owned(),
            ctx.apiserver_port.to_string(),
        ),
        (
            "KUBERNETES_SERVICE_PORT_HTTPS".to_owned(),
            ctx.apiserver_port.to_string(),
        ),
        (
            "KUBERNETES_PORT".to_owned(),
            format!("tcp://127.0.0.1:{}", ctx.apiserver_port),
        ),
    ];
    for entry in &image.config.env {
        if let Some((k, v)) = entry.split_once('=') {
            base.retain(|(name, _)| name != k);
            base.push((k.to_owned(), v.to_owned()));
        }
    }
    let env = env::resolve(&ctx.client, pod, container, &base).await?;
    let command = container
        .command
        .clone()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| image.config.entrypoint.clone());
    let args = match (&container.command, &container.args) {
        (_, Some(args)) if !args.is_empty() => args.clone(),
        (Some(cmd), _) if !cmd.is_empty() => Vec::new(),
        _ => image.config.cmd.clone(),
    };
    let argv: Vec<String> = command
        .iter()
        .chain(&args)
        .map(|a| env::expand(a, &env))
        .collect();
    anyhow::ensure!(
        !argv.is_empty(),
        "container {:?} has no command and its image no entrypoint",
        container.name
    );

    let to_u32 = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
    Ok(ContainerSpec {
        hostname: name,
        mounts,
        env,
        argv,
        working_dir: container
            .working_dir
            .clone()
            .or_else(|| image.config.working_dir.clone()),
        uid: to_u32(security.run_as_user.or(pod_security.run_as_user)),
        gid: to_u32(security.run_as_group.or(pod_security.run_as_group)),
        supplemental_groups: pod_security
            .fs_group
            .into_iter()
            .chain(pod_security.supplemental_groups.clone().unwrap_or_default())
            .filter_map(|g| u32::try_from(g).ok())
            .collect(),
    })
}

fn termination_message(
    container: &Container,
    file: &Path,
    log: &Path,
    code: i32,
) -> Option<String> {
    let mut bytes = std::fs::read(file).unwrap_or_default();
    let fallback = container.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
    if bytes.is_empty() && fallback && code != 0 {
        let logs = std::fs::read(log).unwrap_or_default();
        let lines: Vec<&[u8]> = logs.split(|b| *b == b'\n').collect();
        let tail = lines[lines.len().saturating_sub(80)..].join(&b'\n');
        bytes = tail[tail.len().saturating_sub(2048)..].to_vec();
    }
    bytes.truncate(MAX_TERMINATION_MESSAGE);
    (!bytes.is_empty()).then(|| String::from_utf8_lossy(&bytes).into_owned())
}

fn exit_code(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Sleeps `d` unless a stop arrives first; true when stopped.
async fn wait_or_stop(stop: &mut Stop, d: Duration) -> bool {
    if stop.borrow().is_some() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        changed = stop.changed() => changed.is_err() || stop.borrow().is_some(),
    }
}

fn waiting(reason: &str, message: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message: Some(message.into()),
        }),
        ..Default::default()
    }
}

fn now() -> Time {
    Time(Timestamp::now())
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// What the node reports for one pod.
#[derive(Clone, Debug)]
struct PodState {
    start: Time,
    initialized: bool,
    init: Vec<ContainerStatus>,
    containers: Vec<ContainerStatus>,
    failure: Option<String>,
    phase: &'static str,
}

impl PodState {
    fn new(pod: &Pod) -> Self {
        let spec = pod.spec.clone().unwrap_or_default();
        let fresh = |c: &Container| ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            image_id: String::new(),
            ready: false,
            restart_count: 0,
            started: Some(false),
            state: Some(waiting("PodInitializing", "")),
            ..Default::default()
        };
        let init: Vec<_> = spec
            .init_containers
            .unwrap_or_default()
            .iter()
            .map(fresh)
            .collect();
        PodState {
            start: now(),
            initialized: init.is_empty(),
            containers: spec.containers.iter().map(fresh).collect(),
            init,
            failure: None,
            phase: "Pending",
        }
    }

    fn status(&self, slot: Slot) -> &ContainerStatus {
        match slot {
            Slot::Init(i) => &self.init[i],
            Slot::Main(i) => &self.containers[i],
        }
    }

    fn status_mut(&mut self, slot: Slot) -> &mut ContainerStatus {
        match slot {
            Slot::Init(i) => &mut self.init[i],
            Slot::Main(i) => &mut self.containers[i],
        }
    }

    fn set(&mut self, slot: Slot, state: ContainerState) {
        self.status_mut(slot).state = Some(state);
    }

    fn waiting_all(&mut self, reason: &str, message: &str) {
        for c in self.init.iter_mut().chain(self.containers.iter_mut()) {
            c.state = Some(waiting(reason, message));
        }
    }

    /// Marks containers that never ran as failed to start (e.g. a command that cannot be built).
    fn fail_unstarted(&mut self, message: &str) {
        self.failure = Some(message.to_owned());
        for c in self.init.iter_mut().chain(self.containers.iter_mut()) {
            let terminated = c.state.as_ref().is_some_and(|s| s.terminated.is_some());
            if !terminated {
                c.state = Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 128,
                        reason: Some("StartError".into()),
                        message: Some(message.chars().take(MAX_TERMINATION_MESSAGE).collect()),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
        }
    }

    /// Settles the phase once nothing runs any more.
    fn finish(&mut self) {
        let code = |c: &ContainerStatus| {
            c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(|t| t.exit_code)
        };
        let all: Vec<Option<i32>> = self.init.iter().chain(&self.containers).map(code).collect();
        self.phase = if self.failure.is_none() && all.iter().all(|c| *c == Some(0)) {
            "Succeeded"
        } else {
            "Failed"
        };
        for c in self.init.iter_mut().chain(self.containers.iter_mut()) {
            if c.state.as_ref().is_some_and(|s| s.terminated.is_none()) {
                c.state = Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 137,
                        reason: Some("ContainerStatusUnknown".into()),
                        message: Some("the container never ran: the pod was stopped first".into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
            c.ready = false;
        }
    }

    fn running(&self) -> bool {
        self.containers
            .iter()
            .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
    }

    fn status_object(&self) -> PodStatus {
        let phase = if self.phase == "Pending" && self.running() {
            "Running"
        } else {
            self.phase
        };
        let ready = phase == "Running" && self.containers.iter().all(|c| c.ready);
        let condition = |type_: &str, ok: bool| PodCondition {
            type_: type_.into(),
            status: if ok { "True" } else { "False" }.into(),
            last_transition_time: Some(self.start.clone()),
            ..Default::default()
        };
        PodStatus {
            phase: Some(phase.into()),
            host_ip: Some("127.0.0.1".into()),
            pod_ip: Some("127.0.0.1".into()),
            pod_ips: Some(vec![PodIP {
                ip: "127.0.0.1".into(),
            }]),
            start_time: Some(self.start.clone()),
            conditions: Some(vec![
                condition("PodScheduled", true),
                condition("Initialized", self.initialized),
                condition("ContainersReady", ready),
                condition("Ready", ready),
            ]),
            init_container_statuses: (!self.init.is_empty()).then(|| self.init.clone()),
            container_statuses: Some(self.containers.clone()),
            message: self.failure.clone(),
            ..Default::default()
        }
    }

    async fn report(&self, client: &kube::Client, pod: &Pod) -> anyhow::Result<()> {
        let api: Api<Pod> = Api::namespaced(
            client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let patch = serde_json::json!({ "status": self.status_object() });
        api.patch_status(
            pod.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .context("patching pod status")?;
        Ok(())
    }
}
