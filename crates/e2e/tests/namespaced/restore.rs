//! Restoring a state backup: `captf.io/restore-state=<serial>` runs a restore Job only from a
//! complete backup, records `status.lastRestoredSerial` and consumes the annotation; a serial
//! without a backup starts nothing and says so.

use captf_api::TerraformCluster;
use captf_e2e::Manager;
use captf_e2e::fixture::*;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams, Patch, PatchParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

async fn restore_jobs(client: &kube::Client, ns: &str) -> Vec<Job> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    jobs.list(&ListParams::default())
        .await
        .expect("Jobs")
        .items
        .into_iter()
        .filter(|j| {
            j.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("captf-c-restore-restore-"))
        })
        .collect()
}

fn serial(tc: &TerraformCluster) -> Option<i64> {
    tc.status.as_ref()?.workspace.observed_state_serial
}

#[tokio::test]
async fn a_backup_is_restored_on_request_and_the_request_is_consumed() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("restore", &[]).await;
    let name = "restore";
    create_cluster(
        &client,
        &ns,
        name,
        IMAGE,
        "  variables: {extra_exports: {token: one}}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let first = wait_until(&api, name, "the first apply", &manager, |t| {
        has(t, "Ready", "True", "Ready")
    })
    .await;
    let first_serial = serial(&first).expect("serial");
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(
            &serde_json::json!({"spec": {"variables": {"extra_exports": {"token": "two"}}}}),
        ),
    )
    .await
    .expect("change");
    wait_until(&api, name, "the second apply", &manager, |t| {
        has(t, "Ready", "True", "Ready")
            && serial(t).is_some_and(|s| s > first_serial)
            && exports(t).contains("two")
    })
    .await;

    // A serial without a backup: nothing starts, the condition says which serials exist.
    annotate(&api, name, "captf.io/restore-state", Some("999")).await;
    let refused = wait_until(&api, name, "the refusal", &manager, |t| {
        has(t, "RestoreJobSucceeded", "False", "RestoreBackupNotFound")
    })
    .await;
    let (_, _, message) = condition(&refused, "RestoreJobSucceeded").expect("condition");
    assert!(
        message.contains("999") && message.contains(&first_serial.to_string()),
        "{message}"
    );
    assert!(restore_jobs(&client, &ns).await.is_empty());

    // The first serial's backup: a restore Job pushes it, the request is consumed.
    annotate(
        &api,
        name,
        "captf.io/restore-state",
        Some(&first_serial.to_string()),
    )
    .await;
    let restored = wait_until(&api, name, "the restore", &manager, |t| {
        has(t, "RestoreJobSucceeded", "True", "StateRestored")
            && t.status
                .as_ref()
                .and_then(|s| s.workspace.last_restored_serial)
                == Some(first_serial)
    })
    .await;
    assert!(restored.status.is_some());
    let jobs = restore_jobs(&client, &ns).await;
    assert_eq!(jobs.len(), 1, "one restore Job");
    let annotations = jobs[0].metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("captf.io/restore-serial"),
        Some(&first_serial.to_string())
    );
    wait_until(&api, name, "the request consumed", &manager, |t| {
        t.metadata
            .annotations
            .as_ref()
            .is_none_or(|a| !a.contains_key("captf.io/restore-state"))
    })
    .await;
    // The restored state carries the first inputs hash; the spec says "two", so the current
    // inputs apply again on top of it.
    wait_until(
        &api,
        name,
        "the current inputs applied again",
        &manager,
        |t| has(t, "Ready", "True", "Ready") && exports(t).contains("two"),
    )
    .await;
    let metrics = Manager::get(&manager.metrics).expect("metrics");
    for (result, want) in [("succeeded", 1.0), ("not_found", 1.0)] {
        assert_eq!(
            sample(
                &metrics,
                &format!(
                    "captf_state_restores_total{{kind=\"TerraformCluster\",result=\"{result}\"}}"
                )
            ),
            Some(want),
            "{metrics}"
        );
    }
}
