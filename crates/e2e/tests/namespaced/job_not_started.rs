//! A Job that never starts says why, long before its deadline: a ResourceQuota that refuses
//! the Job, then one that refuses its pod, each named in `ApplyJobSucceeded=False/JobNotStarted`
//! with an event and `captf_jobs_not_started_total`, and the wait in
//! `captf_job_unstarted_seconds` (which `CAPTFJobQueueSlow` watches). Once the quota is lifted
//! the Job starts and the object settles. A Job that can never start (its per-run Secret
//! gone, its pod Pending) is deleted after a minute and its operation starts again.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::core::v1::{ResourceQuota, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};

/// Creates quota `name` with `hard` and waits until the quota controller has counted it (the
/// admission check refuses only against a counted quota).
async fn quota(client: &kube::Client, ns: &str, name: &str, hard: serde_json::Value) {
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), ns);
    let quota = serde_json::json!({"metadata": {"name": name}, "spec": {"hard": hard}});
    quotas
        .create(
            &PostParams::default(),
            &serde_json::from_value(quota).expect("quota"),
        )
        .await
        .expect("create the quota");
    captf_testenv::wait_for("the quota counted", TIMEOUT, || async {
        let q = quotas.get(name).await?;
        Ok(q.status
            .and_then(|s| s.hard)
            .is_some_and(|h| !h.is_empty())
            .then_some(()))
    })
    .await
    .expect("quota status");
}

fn metric(manager: &captf_e2e::Manager, series: &str) -> Option<f64> {
    let metrics = captf_e2e::Manager::get(&manager.metrics).expect("metrics");
    sample(&metrics, series)
}

#[tokio::test]
async fn a_quota_that_refuses_the_job_or_its_pod_is_named_until_it_is_lifted() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("quota", &[]).await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
    quota(
        &client,
        &ns,
        "no-jobs",
        serde_json::json!({"count/jobs.batch": "0"}),
    )
    .await;
    let name = "quota";
    create_cluster(&client, &ns, name, CLUSTER_IMAGE, "").await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let not_started = |part: &'static str| {
        move |t: &TerraformCluster| {
            condition(t, "ApplyJobSucceeded")
                .is_some_and(|c| c.0 == "False" && c.1 == "JobNotStarted" && c.2.contains(part))
        }
    };

    // The Job itself is refused: the pass does not fail, the object names the quota.
    let refused = wait_until(
        &api,
        name,
        "the Job refused",
        &manager,
        not_started("no-jobs"),
    )
    .await;
    let (_, _, message) = condition(&refused, "ApplyJobSucceeded").expect("condition");
    assert!(
        message.contains("has not started: creating it was refused")
            && message.contains("exceeded quota: no-jobs")
            && message.contains("raise or free the ResourceQuota it names"),
        "{message}"
    );
    let note = event(&client, &ns, "JobNotStarted")
        .await
        .note
        .unwrap_or_default();
    assert!(note.contains("exceeded quota: no-jobs"), "{note}");
    let refusals = "captf_jobs_not_started_total{kind=\"TerraformCluster\",reason=\"quota\"}";
    assert!(metric(&manager, refusals).is_some_and(|v| v >= 1.0));
    assert!(job_names(&client, &ns).await.is_empty());

    // The Job may be created, its pod not: the Job controller's refusal is named.
    quota(&client, &ns, "no-pods", serde_json::json!({"pods": "0"})).await;
    quotas
        .delete("no-jobs", &DeleteParams::default())
        .await
        .expect("lift the Job quota");
    let held = wait_until(
        &api,
        name,
        "the pod refused",
        &manager,
        not_started("no-pods"),
    )
    .await;
    let (_, _, message) = condition(&held, "ApplyJobSucceeded").expect("condition");
    assert!(
        message.contains("has not started: the Job controller cannot create its pod")
            && message.contains("exceeded quota: no-pods"),
        "{message}"
    );
    let waited = format!(
        "captf_job_unstarted_seconds{{kind=\"TerraformCluster\",namespace=\"{ns}\",name=\"{name}\",op=\"apply\"}}"
    );
    captf_testenv::wait_for("the wait measured", TIMEOUT, || async {
        Ok(metric(&manager, &waited).filter(|v| *v >= 20.0))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    assert!(metric(&manager, refusals).is_some_and(|v| v >= 2.0));

    // Lifted: the pod is created, the apply runs, and the wait is over.
    quotas
        .delete("no-pods", &DeleteParams::default())
        .await
        .expect("lift the pod quota");
    wait_until(&api, name, "Ready", &manager, ready).await;
    assert_eq!(metric(&manager, &waited), None, "no wait left");
}

/// The `StuckJobDeleted` events in `ns`.
async fn stuck_events(client: &kube::Client, ns: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("StuckJobDeleted"))
        .collect()
}

/// The apply Job of the TerraformCluster `name` (created now) with its per-run Secret deleted
/// before any pod could mount it: its pod, let in once the Secret is gone, waits for a volume
/// that never comes. Returns the Job's name, UID and creation time.
async fn stalled(
    client: &kube::Client,
    ns: &str,
    name: &str,
    manager: &captf_e2e::Manager,
) -> (String, String, k8s_openapi::jiff::Timestamp) {
    // No pod may start yet, so the per-run Secret can go before any pod mounts it.
    quota(client, ns, "no-pods", serde_json::json!({"pods": "0"})).await;
    create_cluster(client, ns, name, CLUSTER_IMAGE, "").await;
    let first = wait_for("the apply Job", TIMEOUT, || async {
        Ok(jobs_of(client, ns, name, "apply").await.into_iter().next())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let job = first.metadata.name.clone().expect("name");
    let uid = first.metadata.uid.clone().expect("uid");
    let created = first
        .metadata
        .creation_timestamp
        .clone()
        .expect("created")
        .0;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let run_secret = captf_api::names::per_run_secret(&job);
    wait_for("the per-run Secret", TIMEOUT, || async {
        Ok(secrets.get_opt(&run_secret).await?.map(|_| ()))
    })
    .await
    .expect("per-run Secret");
    secrets
        .delete(&run_secret, &DeleteParams::default())
        .await
        .expect("delete the per-run Secret");
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), ns);
    quotas
        .delete("no-pods", &DeleteParams::default())
        .await
        .expect("lift the pod quota");
    (job, uid, created)
}

/// Waits until the Job `uid` is gone with a `StuckJobDeleted` Warning naming `job`, no sooner
/// than a minute after its creation.
async fn deleted_as_stuck(
    client: &kube::Client,
    ns: &str,
    name: &str,
    manager: &captf_e2e::Manager,
    (job, uid, created): (&str, &str, k8s_openapi::jiff::Timestamp),
) {
    let run_secret = captf_api::names::per_run_secret(job);
    let deleted = wait_for("the stuck Job deleted", TIMEOUT, || async {
        let gone = !jobs_of(client, ns, name, "apply")
            .await
            .iter()
            .any(|j| j.metadata.uid.as_deref() == Some(uid));
        let events = stuck_events(client, ns).await;
        Ok((gone && !events.is_empty()).then_some(events))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let event = &deleted[0];
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let related = event
        .related
        .as_ref()
        .expect("the Job is the related object");
    assert_eq!(
        (related.kind.as_deref(), related.name.as_deref()),
        (Some("Job"), Some(job))
    );
    let note = event.note.clone().unwrap_or_default();
    assert!(
        note.contains(job) && note.contains(&run_secret) && note.contains("starts again"),
        "{note}"
    );
    let at = event
        .event_time
        .as_ref()
        .map(|t| t.0)
        .or(event.deprecated_last_timestamp.as_ref().map(|t| t.0))
        .expect("event time");
    assert!(
        at.duration_since(created).as_secs() >= 60,
        "deleted {:?} after its creation",
        at.duration_since(created)
    );
}

#[tokio::test]
async fn a_job_whose_per_run_secret_is_gone_is_deleted_and_its_apply_starts_again() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("stuck", &[]).await;
    let name = "stuck";
    let (job, uid, created) = stalled(&client, &ns, name, &manager).await;
    // After a minute the Job, whose pod waits for a volume that never comes, is deleted.
    deleted_as_stuck(&client, &ns, name, &manager, (&job, &uid, created)).await;
    // The apply starts again with a Secret of its own and succeeds; the manager's own
    // deletion is no interrupted apply.
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait_until(&api, name, "Ready", &manager, ready).await;
    let applies = jobs_of(&client, &ns, name, "apply").await;
    assert_eq!(
        applies.len(),
        1,
        "one apply Job, started again: {applies:?}"
    );
    let again = &applies[0];
    assert_ne!(again.metadata.uid.as_deref(), Some(uid.as_str()));
    let annotations = again.metadata.annotations.clone().unwrap_or_default();
    assert!(
        !annotations.contains_key("captf.io/after-interrupted-apply"),
        "{annotations:?}"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let durable = secrets
        .get(&format!("captf-inputs-c-{name}"))
        .await
        .expect("durable inputs");
    let recorded = durable.metadata.annotations.unwrap_or_default();
    assert!(
        !recorded.contains_key("captf.io/interrupted-apply"),
        "{recorded:?}"
    );
    let tc = api.get(name).await.expect("the cluster");
    let (_, reason, message) = condition(&tc, "ApplyJobSucceeded").expect("condition");
    assert!(!message.contains("disappeared"), "{reason}: {message}");
    assert_eq!(
        stuck_events(&client, &ns).await.len(),
        1,
        "one StuckJobDeleted"
    );
}

#[tokio::test]
async fn a_paused_objects_stuck_job_is_deleted_and_its_apply_waits_for_unpause() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("stuck-paused", &[]).await;
    let name = "stuck-paused";
    let (job, uid, created) = stalled(&client, &ns, name, &manager).await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    annotate(&api, name, "cluster.x-k8s.io/paused", Some("true")).await;
    deleted_as_stuck(&client, &ns, name, &manager, (&job, &uid, created)).await;

    // No Job runs, so clusterctl may move it; nothing starts while it is paused.
    let block_move = "clusterctl.cluster.x-k8s.io/block-move";
    wait_until(&api, name, "block-move cleared", &manager, |t| {
        !t.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(block_move))
    })
    .await;
    let applies = jobs_of(&client, &ns, name, "apply").await;
    assert!(
        applies.is_empty(),
        "nothing starts while paused: {applies:?}"
    );

    annotate(&api, name, "cluster.x-k8s.io/paused", None).await;
    wait_until(&api, name, "Ready", &manager, ready).await;
    let applies = jobs_of(&client, &ns, name, "apply").await;
    assert_eq!(applies.len(), 1, "{applies:?}");
    assert_ne!(applies[0].metadata.uid.as_deref(), Some(uid.as_str()));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let durable = secrets
        .get(&format!("captf-inputs-c-{name}"))
        .await
        .expect("durable inputs");
    let recorded = durable.metadata.annotations.unwrap_or_default();
    assert!(
        !recorded.contains_key("captf.io/interrupted-apply"),
        "{recorded:?}"
    );
    assert_eq!(
        stuck_events(&client, &ns).await.len(),
        1,
        "one StuckJobDeleted"
    );
}
