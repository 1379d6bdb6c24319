//! A Job whose pod cannot pull an image fails only at its deadline, an hour by default.
//! Meanwhile the object says so (`ApplyJobSucceeded=False/ImagePullFailed`), and the failure
//! at the deadline keeps that reason rather than `JobDeadlineExceeded`, which would send the
//! operator looking for a hung engine.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;

use crate::reconcile::observe::jobs::ObservedJob;

/// The kubelet's waiting reasons for an image it cannot get.
const PULL_REASONS: [&str; 3] = ["ErrImagePull", "ImagePullBackOff", "InvalidImageName"];

/// A Job younger than this is not looked into: most pods pull within it, and a pass that
/// starts a Job must not pay for a pod list.
pub const GRACE: Duration = Duration::from_secs(20);

/// Longest quote of the kubelet's message.
const MAX_QUOTE: usize = 300;

/// `<container> cannot pull <image>: <reason>: <message>` for the first container (init
/// containers first) that waits for its image; `None` when none does.
pub fn pull_failure(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let containers = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    containers.filter_map(waiting_for_image).next()
}

fn waiting_for_image(c: &ContainerStatus) -> Option<String> {
    let waiting = c.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref()?;
    if !PULL_REASONS.contains(&reason) {
        return None;
    }
    let message = waiting.message.as_deref().unwrap_or("").trim();
    let first_line = message.lines().next().unwrap_or("");
    let mut quote: String = first_line.chars().take(MAX_QUOTE).collect();
    if quote.len() < first_line.len() {
        quote.push('…');
    }
    let mut text = format!("container {} cannot pull {}: {reason}", c.name, c.image);
    if !quote.is_empty() {
        text.push_str(": ");
        text.push_str(&quote);
    }
    Some(text)
}

/// What follows the failure in the condition while the Job still runs.
const WHILE_RUNNING: &str = ". It fails at its deadline (spec.jobs.activeDeadlineSeconds) unless the image can be pulled: check the reference, the registry and spec.jobs.imagePullSecrets";

/// The `ImagePullFailed` message of a running Job whose pod waits for an image (`why` from
/// [`pull_failure`]).
pub fn while_running(job: &str, why: &str) -> String {
    format!("Job {job}: {why}{WHILE_RUNNING}")
}

/// What [`while_running`] said of `job`, if `message` is that.
pub fn said_while_running<'m>(message: &'m str, job: &str) -> Option<&'m str> {
    message
        .strip_prefix("Job ")?
        .strip_prefix(job)?
        .strip_prefix(": ")?
        .strip_suffix(WHILE_RUNNING)
}

/// How soon to look again at an active Job with no ready pod.
pub const RECHECK: Duration = crate::schedule::UNREADY_JOB_REQUEUE;

/// The Job has no ready pod yet (a running runner is ready).
pub fn no_ready_pod(job: &ObservedJob) -> bool {
    job.job.status.as_ref().and_then(|s| s.ready).unwrap_or(0) == 0
}

/// Whether an active Job is worth looking into: older than [`GRACE`] with no ready pod (a
/// running runner is ready). A pass that starts a Job does not pay for a pod list.
pub fn overdue(job: &ObservedJob, now: Timestamp) -> bool {
    let young = job
        .created_at
        .is_none_or(|t| now.duration_since(t).as_secs_f64() < GRACE.as_secs_f64());
    !young && no_ready_pod(job)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateWaiting, PodStatus,
    };

    use super::*;

    fn container(name: &str, waiting: Option<(&str, &str)>) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            image: format!("registry.example/{name}:1"),
            state: Some(match waiting {
                Some((reason, message)) => ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(reason.into()),
                        message: Some(message.into()),
                    }),
                    ..Default::default()
                },
                None => ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                },
            }),
            ..Default::default()
        }
    }

    fn pod(init: Vec<ContainerStatus>, main: Vec<ContainerStatus>) -> Pod {
        Pod {
            status: Some(PodStatus {
                init_container_statuses: Some(init),
                container_statuses: Some(main),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_running_message_reads_back_for_its_own_job_only() {
        let said = while_running(
            "captf-c-a-apply-a1-abcdef",
            "container source cannot pull x",
        );
        assert_eq!(
            said_while_running(&said, "captf-c-a-apply-a1-abcdef"),
            Some("container source cannot pull x")
        );
        assert_eq!(said_while_running(&said, "captf-c-a-apply-a2-000000"), None);
        assert_eq!(
            said_while_running(
                "Job captf-c-a-apply-a1-abcdef: failed",
                "captf-c-a-apply-a1-abcdef"
            ),
            None
        );
    }

    #[test]
    fn only_a_container_waiting_for_its_image_is_a_pull_failure() {
        let long = "x".repeat(400);
        let rows = [
            ("nothing reported", pod(vec![], vec![]), None),
            (
                "running",
                pod(vec![], vec![container("runner", None)]),
                None,
            ),
            (
                "waiting for another reason",
                pod(
                    vec![],
                    vec![container(
                        "runner",
                        Some(("ContainerCreating", "mounting volumes")),
                    )],
                ),
                None,
            ),
            (
                "the module image, in an init container",
                pod(
                    vec![container(
                        "source",
                        Some(("ErrImagePull", "manifest unknown\nmore detail")),
                    )],
                    vec![container("runner", Some(("PodInitializing", "")))],
                ),
                Some(
                    "container source cannot pull registry.example/source:1: ErrImagePull: manifest unknown"
                        .to_owned(),
                ),
            ),
            (
                "backing off, no message",
                pod(
                    vec![],
                    vec![container("runner", Some(("ImagePullBackOff", "")))],
                ),
                Some(
                    "container runner cannot pull registry.example/runner:1: ImagePullBackOff"
                        .to_owned(),
                ),
            ),
            (
                "a long message is cut",
                pod(vec![], vec![container("runner", Some(("InvalidImageName", &long)))]),
                Some(format!(
                    "container runner cannot pull registry.example/runner:1: InvalidImageName: {}…",
                    "x".repeat(300)
                )),
            ),
        ];
        for (what, pod, want) in rows {
            assert_eq!(pull_failure(&pod), want, "{what}");
        }
    }
}
