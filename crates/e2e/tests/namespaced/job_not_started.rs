//! A Job that never starts says why, long before its deadline: a ResourceQuota that refuses
//! the Job, then one that refuses its pod, each named in `ApplyJobSucceeded=False/JobNotStarted`
//! with an event and `captf_jobs_not_started_total`, and the wait in
//! `captf_job_unstarted_seconds` (which `CAPTFJobQueueSlow` watches). Once the quota is lifted
//! the Job starts and the object settles.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Api, DeleteParams, PostParams};

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
