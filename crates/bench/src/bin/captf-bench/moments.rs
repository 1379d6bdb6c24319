//! When each step of a pod's and a Job's life was seen, on watches of one namespace: where the
//! time of one operation goes.
//!
//! Moments are the arrival of a watch event (milliseconds), not the objects' own timestamps
//! (whole seconds). The kubelet reports a container's start or exit when it next relists its
//! containers, about once a second, so each container step carries up to a second of that wait:
//! a plain pod and a CAPTF Job pay it alike.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::Api;
use kube::runtime::watcher;
use tokio::task::JoinHandle;

/// What was seen of one pod.
#[derive(Clone, Debug, Default)]
pub struct PodMoments {
    /// Its `job-name` label.
    pub job: Option<String>,
    pub created: Option<Instant>,
    /// `PodScheduled` true.
    pub scheduled: Option<Instant>,
    /// The first container (the first init container, if any) running or done.
    pub first_container: Option<Instant>,
    /// The first regular container running or done.
    pub main_container: Option<Instant>,
    /// Phase `Succeeded` or `Failed`.
    pub finished: Option<Instant>,
    pub succeeded: bool,
    /// The first regular container's termination message (a runner's result document).
    pub message: Option<String>,
}

/// What was seen of one Job.
#[derive(Clone, Debug, Default)]
pub struct JobMoments {
    /// Its `owner-name` label (`captf_api::labels::OWNER_NAME`).
    pub owner: Option<String>,
    pub created: Option<Instant>,
    /// Condition `Complete` or `Failed` true.
    pub finished: Option<Instant>,
}

#[derive(Default)]
struct Seen {
    pods: HashMap<String, PodMoments>,
    jobs: HashMap<String, JobMoments>,
    listed: usize,
}

/// Watches of the pods and Jobs of a namespace, stamping each step on arrival.
pub struct Moments {
    seen: Arc<Mutex<Seen>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Moments {
    /// Starts both watches and returns once each has listed.
    pub async fn start(client: &kube::Client, ns: &str) -> anyhow::Result<Self> {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
        let tasks = vec![
            tokio::spawn(watch(pods, seen.clone(), on_pod)),
            tokio::spawn(watch(jobs, seen.clone(), on_job)),
        ];
        let moments = Moments { seen, tasks };
        crate::wait_until(
            "the pod and Job watches to list",
            std::time::Duration::from_secs(60),
            || (moments.seen.lock().ok()?.listed >= 2).then_some(()),
        )
        .await?;
        Ok(moments)
    }

    /// The pod `name`, as seen so far.
    pub fn pod(&self, name: &str) -> Option<PodMoments> {
        self.seen.lock().ok()?.pods.get(name).cloned()
    }

    /// The pods of Job `job`, as seen so far.
    pub fn pods_of(&self, job: &str) -> Vec<PodMoments> {
        self.seen
            .lock()
            .map(|s| {
                s.pods
                    .values()
                    .filter(|p| p.job.as_deref() == Some(job))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first Job of owner `owner` (its `owner-name` label) created after `after`.
    pub fn job_after(&self, owner: &str, after: Instant) -> Option<(String, JobMoments)> {
        let seen = self.seen.lock().ok()?;
        seen.jobs
            .iter()
            .filter(|(_, j)| j.owner.as_deref() == Some(owner) && j.created > Some(after))
            .min_by_key(|(_, j)| j.created)
            .map(|(name, j)| (name.clone(), j.clone()))
    }
}

impl Drop for Moments {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

async fn watch<K>(api: Api<K>, seen: Arc<Mutex<Seen>>, on: fn(&mut Seen, K, Instant))
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = stream.next().await {
        let now = Instant::now();
        let Ok(mut seen) = seen.lock() else { return };
        match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => on(&mut seen, o, now),
            Ok(watcher::Event::InitDone) => seen.listed += 1,
            _ => {}
        }
    }
}

/// Running, or already done.
fn started(status: Option<&ContainerStatus>) -> bool {
    status
        .and_then(|s| s.state.as_ref())
        .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
}

fn on_pod(seen: &mut Seen, pod: Pod, now: Instant) {
    let Some(name) = pod.metadata.name.clone() else {
        return;
    };
    let m = seen.pods.entry(name).or_default();
    m.created.get_or_insert(now);
    if m.job.is_none() {
        m.job = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("job-name"))
            .cloned();
    }
    let Some(status) = pod.status else { return };
    let scheduled = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "PodScheduled" && c.status == "True");
    if scheduled {
        m.scheduled.get_or_insert(now);
    }
    let init = status
        .init_container_statuses
        .as_ref()
        .and_then(|s| s.first());
    let main = status.container_statuses.as_ref().and_then(|s| s.first());
    if started(init) || started(main) {
        m.first_container.get_or_insert(now);
    }
    if started(main) {
        m.main_container.get_or_insert(now);
    }
    if let Some(terminated) = main.and_then(|s| s.state.as_ref()?.terminated.as_ref()) {
        m.message = terminated.message.clone();
    }
    if let Some(phase @ ("Succeeded" | "Failed")) = status.phase.as_deref() {
        m.finished.get_or_insert(now);
        m.succeeded = phase == "Succeeded";
    }
}

fn on_job(seen: &mut Seen, job: Job, now: Instant) {
    let Some(name) = job.metadata.name.clone() else {
        return;
    };
    let m = seen.jobs.entry(name).or_default();
    m.created.get_or_insert(now);
    if m.owner.is_none() {
        m.owner = job
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(captf_api::labels::OWNER_NAME))
            .cloned();
    }
    let finished = job
        .status
        .and_then(|s| s.conditions)
        .into_iter()
        .flatten()
        .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True");
    if finished {
        m.finished.get_or_insert(now);
    }
}
