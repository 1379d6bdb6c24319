//! State is read only while nothing can write it: a Job deleted while it runs may leave its
//! pod running on (until its grace period ends, or for good when orphaned), and that pod may
//! still write the state. The object holds, with `status.activeJob` naming the lost Job and a
//! `WaitingForJobPod` event, and nothing is read or started until the pod ends.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PropagationPolicy};

#[tokio::test]
async fn a_deleted_jobs_running_pod_holds_the_object_until_it_ends() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("orphan", &[]).await;
    let name = "orphan";
    create_cluster(
        &client,
        &ns,
        name,
        CLUSTER_IMAGE,
        "  variables: {sleep_seconds: 45}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let running = wait_until(&api, name, "the first apply running", &manager, |t| {
        t.status
            .as_ref()
            .and_then(|s| s.workspace.active_job.as_ref())
            .is_some_and(|a| a.operation == captf_api::Operation::Apply)
    })
    .await;
    let workspace = &running.status.as_ref().expect("status").workspace;
    let lost = workspace.active_job.as_ref().expect("active").name.clone();
    let suffix = workspace.state_secret_suffix.clone().expect("suffix");
    wait_for_apply_lock(&client, &ns, &suffix, &manager).await;

    // The Job goes, its pod runs on (orphaned), still applying.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let orphan = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    jobs.delete(&lost, &orphan).await.expect("delete the Job");
    let waiting = event(&client, &ns, "WaitingForJobPod").await;
    let note = waiting.note.unwrap_or_default();
    assert!(
        note.contains(&format!("Job {lost} is gone, but its pod {lost}-")),
        "{note}"
    );

    // Until the pod ends: no other Job, and status.activeJob still names the lost one.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let of_lost = ListParams::default().labels(&format!("job-name={lost}"));
    captf_testenv::wait_for("the orphaned pod to end", TIMEOUT, || async {
        // Jobs first: a Job listed while the pod, listed after, still runs was started while
        // it ran.
        let started: Vec<String> = jobs
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|j| j.metadata.name)
            .collect();
        let object = api.get(name).await?;
        let pod = pods.list(&of_lost).await?.items.into_iter().next();
        let phase = pod
            .as_ref()
            .and_then(|p| p.status.as_ref())
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" || pod.is_none() {
            return Ok(Some(()));
        }
        assert!(
            started.is_empty(),
            "{started:?} started while pod of {lost} ran\nmanager log:\n{}",
            manager.log()
        );
        let named = object
            .status
            .as_ref()
            .and_then(|s| s.workspace.active_job.as_ref())
            .map(|a| a.name.clone());
        assert_eq!(named.as_deref(), Some(lost.as_str()));
        Ok(None)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));

    // Then the lost apply is recorded and applied again, and the object settles.
    wait_until(&api, name, "Ready", &manager, ready).await;
    let retried = jobs
        .list(&ListParams::default())
        .await
        .expect("Jobs")
        .items
        .into_iter()
        .filter_map(|j| j.metadata.annotations)
        .filter_map(|a| a.get("captf.io/after-interrupted-apply").cloned())
        .collect::<Vec<_>>();
    assert_eq!(retried, [lost], "one apply followed the lost one");
}
