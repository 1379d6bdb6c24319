//! Which cause a Job that has not started is given, from its pods and the Job controller's
//! refusal.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateWaiting, ContainerStatus, PodCondition, PodStatus,
};
use kube::api::ObjectMeta;

use super::*;

const QUOTA: &str = "pods \"captf-c-demo-apply-a1-1a2b3c-x\" is forbidden: exceeded quota: tenant, requested: pods=1, used: pods=1, limited: pods=1";

fn pod(phase: &str, f: impl FnOnce(&mut PodStatus)) -> Pod {
    let mut status = PodStatus {
        phase: Some(phase.into()),
        ..Default::default()
    };
    f(&mut status);
    Pod {
        metadata: ObjectMeta {
            name: Some("job-x".into()),
            ..Default::default()
        },
        status: Some(status),
        ..Default::default()
    }
}

fn waiting(name: &str, reason: &str, message: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        image: "registry.example/m:1".into(),
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message: Some(message.into()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn stuck(cause: Cause, message: &str) -> Option<Unstarted> {
    Some(Unstarted::Stuck {
        cause,
        message: message.into(),
    })
}

/// A row: its name, the pods, the Job controller's refusal, the missing per-run Secret, and
/// what the Job is found held by.
type Row = (
    &'static str,
    Vec<Pod>,
    Option<&'static str>,
    Option<&'static str>,
    Option<Unstarted>,
);

#[test]
fn table() {
    let unschedulable = pod("Pending", |s| {
        s.conditions = Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some("0/1 nodes are available: 1 Insufficient cpu.".into()),
            ..Default::default()
        }])
    });
    let config = pod("Pending", |s| {
        s.container_statuses = Some(vec![waiting(
            "source",
            "CreateContainerConfigError",
            "secret \"x\" not found",
        )])
    });
    let creating = pod("Pending", |s| {
        s.container_statuses = Some(vec![waiting("source", "ContainerCreating", "")])
    });
    let pulling = pod("Pending", |s| {
        s.init_container_statuses = Some(vec![waiting(
            "runner",
            "ImagePullBackOff",
            "Back-off pulling image",
        )])
    });
    let rows: Vec<Row> = vec![
        (
            "a quota refused the pod",
            vec![],
            Some(QUOTA),
            None,
            stuck(
                Cause::Quota,
                &format!("the Job controller cannot create its pod: {QUOTA}"),
            ),
        ),
        (
            "another refusal",
            vec![],
            Some("pods is forbidden: violates PodSecurity"),
            None,
            stuck(
                Cause::Refused,
                "the Job controller cannot create its pod: pods is forbidden: violates PodSecurity",
            ),
        ),
        ("no pod, nothing said yet", vec![], None, None, None),
        (
            "no node takes the pod",
            vec![unschedulable],
            None,
            None,
            stuck(
                Cause::Unschedulable,
                "pod job-x is not scheduled: 0/1 nodes are available: 1 Insufficient cpu.",
            ),
        ),
        (
            "a container cannot be created",
            vec![config],
            None,
            None,
            stuck(
                Cause::Container,
                "container source of pod job-x: CreateContainerConfigError: secret \"x\" not found",
            ),
        ),
        (
            "its per-run Secret is missing",
            vec![creating.clone()],
            None,
            Some("captf-run-job"),
            stuck(
                Cause::Container,
                "pod job-x waits for its per-run Secret captf-run-job, which does not exist",
            ),
        ),
        ("a pod on its way", vec![creating], None, None, None),
        (
            "an image pull wins",
            vec![pulling],
            None,
            None,
            Some(Unstarted::Pull(
                "container runner cannot pull registry.example/m:1: ImagePullBackOff: Back-off pulling image".into(),
            )),
        ),
        ("a running pod", vec![pod("Running", |_| {})], None, None, None),
    ];
    for (name, pods, refusal, secret, want) in rows {
        assert_eq!(classify(&pods, refusal, secret), want, "{name}");
    }
}

#[test]
fn the_message_says_what_to_do() {
    let m = message("captf-c-demo-apply-a1-1a2b3c", Cause::Quota, QUOTA);
    assert!(
        m.starts_with("Job captf-c-demo-apply-a1-1a2b3c has not started: pods "),
        "{m}"
    );
    assert!(m.ends_with("raise or free the ResourceQuota it names, or run fewer Jobs at once (spec.maxActiveJobs, --max-active-jobs)"), "{m}");
}
