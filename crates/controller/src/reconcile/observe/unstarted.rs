//! Why an active Job's runner has not started. Such a Job fails only at its deadline, an hour
//! by default; meanwhile the object says which of these holds it: its image cannot be pulled
//! (`ImagePullFailed`), a ResourceQuota refused its pod, no node takes the pod, or a container
//! cannot be created, a missing per-run Secret among them (`JobNotStarted`).

use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};

use crate::error::{KubeContext, Result};
use crate::reconcile::observe::image_pull::{self, pull_failure};
use crate::reconcile::observe::jobs::ObservedJob;

/// The `cause` of `captf_jobs_not_started_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A ResourceQuota refused the Job or its pod.
    Quota,
    /// The Job controller could not create the pod for another reason.
    Refused,
    /// No node takes the pod.
    Unschedulable,
    /// A container cannot be created (a Secret or ConfigMap it needs is missing, ...).
    Container,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Quota => "quota",
            Cause::Refused => "refused",
            Cause::Unschedulable => "unschedulable",
            Cause::Container => "container",
        }
    }

    /// What the operator can do, after the cause.
    fn remedy(self) -> &'static str {
        match self {
            Cause::Quota => {
                "raise or free the ResourceQuota it names, or run fewer Jobs at once (spec.maxActiveJobs, --max-active-jobs)"
            }
            Cause::Refused => "fix what the message names",
            Cause::Unschedulable => {
                "make room on a node, or change what the pod asks for (spec.jobs: resources, nodeSelector, tolerations, affinity)"
            }
            Cause::Container => "fix what the message names (a Secret or ConfigMap the pod mounts)",
        }
    }

    /// The cause of an API refusal's message.
    pub fn of_refusal(message: &str) -> Cause {
        if message.contains("exceeded quota") {
            Cause::Quota
        } else {
            Cause::Refused
        }
    }
}

/// Why the runner has not started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unstarted {
    /// The pod cannot pull an image ([`image_pull::pull_failure`]).
    Pull(String),
    /// Anything else, in the words of whoever refused.
    Stuck { cause: Cause, message: String },
}

/// The condition message of a Job held by `cause`.
pub fn message(job: &str, cause: Cause, why: &str) -> String {
    format!(
        "Job {job} has not started: {why}. It fails at its deadline (spec.jobs.activeDeadlineSeconds) unless it starts: {}",
        cause.remedy()
    )
}

/// Longest quote of a message from Kubernetes.
const MAX_QUOTE: usize = 400;

fn quote(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or("");
    let mut q: String = line.chars().take(MAX_QUOTE).collect();
    if q.len() < line.len() {
        q.push('…');
    }
    q
}

/// Container waiting reasons that only say the container is on its way.
const ON_ITS_WAY: [&str; 2] = ["ContainerCreating", "PodInitializing"];

/// Why the Job with these pods has not started (pure). `refusal` is the Job controller's
/// newest `FailedCreate` message, `run_secret` the name of the Job's per-run Secret when it
/// is missing. `None`: nothing says it is held (yet).
pub fn classify(
    pods: &[Pod],
    refusal: Option<&str>,
    run_secret: Option<&str>,
) -> Option<Unstarted> {
    if let Some(why) = pods.iter().find_map(pull_failure) {
        return Some(Unstarted::Pull(why));
    }
    let stuck = |cause, message| Some(Unstarted::Stuck { cause, message });
    let Some(pod) = pods
        .iter()
        .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"))
    else {
        return match (pods.is_empty(), refusal) {
            (true, Some(r)) => stuck(
                Cause::of_refusal(r),
                format!("the Job controller cannot create its pod: {}", quote(r)),
            ),
            _ => None,
        };
    };
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let status = pod.status.as_ref();
    if let Some(c) = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    {
        let why = c.message.as_deref().or(c.reason.as_deref()).unwrap_or("");
        return stuck(
            Cause::Unschedulable,
            format!("pod {name} is not scheduled: {}", quote(why)),
        );
    }
    let waiting = status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        })
        .find_map(|c| {
            let w = c.state.as_ref()?.waiting.as_ref()?;
            let reason = w.reason.as_deref()?;
            (!ON_ITS_WAY.contains(&reason)).then(|| {
                let message = w.message.as_deref().unwrap_or("");
                format!(
                    "container {} of pod {name}: {reason}: {}",
                    c.name,
                    quote(message)
                )
            })
        });
    if let Some(why) = waiting {
        return stuck(Cause::Container, why);
    }
    run_secret.and_then(|secret| {
        stuck(
            Cause::Container,
            format!("pod {name} waits for its per-run Secret {secret}, which does not exist"),
        )
    })
}

/// Why an active Job's runner has not started, looked up only once the Job is older than
/// [`image_pull::GRACE`] and has no ready pod (a running runner is ready), so a pass that
/// starts a Job does not pay for the lists.
pub async fn of_active(
    client: &kube::Client,
    namespace: &str,
    job: &ObservedJob,
    now: Timestamp,
) -> Result<Option<Unstarted>> {
    if !image_pull::overdue(job, now) {
        return Ok(None);
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods
        .list(&ListParams::default().labels(&format!("job-name={}", job.name)))
        .await
        .during(|| format!("listing pods of Job {namespace}/{}", job.name))?;
    let refusal = if list.items.is_empty() {
        let events: Api<Event> = Api::namespaced(client.clone(), namespace);
        let selector = format!(
            "involvedObject.kind=Job,involvedObject.name={},reason=FailedCreate",
            job.name
        );
        events
            .list(&ListParams::default().fields(&selector))
            .await
            .during(|| format!("listing the events of Job {namespace}/{}", job.name))?
            .items
            .into_iter()
            .max_by_key(|e| e.last_timestamp.clone().map(|t| t.0))
            .and_then(|e| e.message)
    } else {
        None
    };
    let pending = list
        .items
        .iter()
        .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"));
    let run_secret = captf_api::names::per_run_secret(&job.name);
    let missing = if pending {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        secrets
            .get_metadata_opt(&run_secret)
            .await
            .during(|| format!("reading Secret {namespace}/{run_secret}"))?
            .is_none()
    } else {
        false
    };
    Ok(classify(
        &list.items,
        refusal.as_deref(),
        missing.then_some(run_secret.as_str()),
    ))
}

/// What [`crate::decide::stuck`] needs of an active Job with no ready pod, read only once
/// it is old enough to be stuck: its pods' phases, and whether its per-run Secret exists (read
/// live: a lagging cache must never make a Job look stuck).
pub async fn of_unready(
    client: &kube::Client,
    namespace: &str,
    job: &ObservedJob,
    now: Timestamp,
) -> Result<Option<crate::decide::UnstartedJob>> {
    let age = job
        .created_at
        .map(|t| now.duration_since(t))
        .and_then(|d| std::time::Duration::try_from(d).ok());
    if age.is_none_or(|a| a < crate::schedule::STUCK_JOB_AGE) {
        return Ok(None);
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let run_secret = captf_api::names::per_run_secret(&job.name);
    let (list, secret) = futures::try_join!(
        async {
            pods.list(&ListParams::default().labels(&format!("job-name={}", job.name)))
                .await
                .during(|| format!("listing pods of Job {namespace}/{}", job.name))
        },
        async {
            secrets
                .get_metadata_opt(&run_secret)
                .await
                .during(|| format!("reading Secret {namespace}/{run_secret}"))
        },
    )?;
    Ok(Some(crate::decide::UnstartedJob {
        age,
        run_secret: secret.is_some(),
        pod_phases: list
            .items
            .into_iter()
            .map(|p| p.status.and_then(|s| s.phase))
            .collect(),
    }))
}

#[cfg(test)]
mod tests;
