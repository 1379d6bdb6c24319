//! The manager's Events as `kubectl events` and `kubectl describe` show them: each Job's
//! events name it as their related object, so a second apply or the destroy is never folded
//! into the series of the first Job's event (keeping that event's note); `JobCreated`,
//! `StateBackedUp`, `Provisioned`, `ControlPlaneEndpointSet` and `FailureDomainsChanged` as the
//! original emits them (seed 002's drill reads `JobCreated`).

use std::collections::BTreeSet;

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

/// The manager's events about the TerraformCluster `name` with `reason`: (related object's
/// name, note), and whether any of them is a series of more than one.
async fn manager_events(
    client: &kube::Client,
    ns: &str,
    name: &str,
    reason: &str,
) -> (Vec<(String, String)>, bool) {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let listed: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.reporting_controller.as_deref() == Some("captf-manager")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect();
    let repeated = listed
        .iter()
        .any(|e| e.series.as_ref().is_some_and(|s| s.count > 1));
    let named = listed
        .into_iter()
        .map(|e| {
            (
                e.related.and_then(|r| r.name).unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect();
    (named, repeated)
}

#[tokio::test]
async fn each_job_has_events_of_its_own_that_name_it() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("events", &[]).await;
    let name = "events";
    create_cluster(
        &client,
        &ns,
        name,
        IMAGE,
        "  variables: {extra_exports: {token: one}}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait_until(&api, name, "the first apply", &manager, ready).await;
    merge_patch(
        &api,
        name,
        serde_json::json!({"spec": {"variables": {"extra_exports": {"token": "two"}}}}),
    )
    .await;
    wait_until(&api, name, "the second apply", &manager, |t| {
        ready(t) && exports(t).contains("two")
    })
    .await;
    let applies: BTreeSet<String> = jobs_of(&client, &ns, name, "apply")
        .await
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    assert_eq!(applies.len(), 2, "{applies:?}");

    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_for("the TerraformCluster to go", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));

    // One JobSucceeded per Job, naming it, the destroy's too.
    let (succeeded, repeated) = manager_events(&client, &ns, name, "JobSucceeded").await;
    assert!(
        !repeated,
        "a JobSucceeded folded into a series: {succeeded:?}"
    );
    let related: BTreeSet<String> = succeeded.iter().map(|(r, _)| r.clone()).collect();
    assert_eq!(related.len(), succeeded.len(), "one per Job: {succeeded:?}");
    for (job, note) in &succeeded {
        assert!(
            note.contains(job.as_str()),
            "the note names its Job {job}: {note}"
        );
    }
    assert!(applies.is_subset(&related), "{applies:?} in {related:?}");
    let destroys: Vec<&String> = related
        .iter()
        .filter(|r| r.starts_with(&format!("captf-c-{name}-destroy-")))
        .collect();
    assert_eq!(destroys.len(), 1, "the destroy's own event: {related:?}");

    // JobCreated for each Job: operation, attempt, image and why.
    let (created, repeated) = manager_events(&client, &ns, name, "JobCreated").await;
    assert!(!repeated, "{created:?}");
    let created_jobs: BTreeSet<String> = created.iter().map(|(r, _)| r.clone()).collect();
    assert!(
        related.is_subset(&created_jobs),
        "every Job that ran was announced: {created:?}"
    );
    for (job, note) in &created {
        assert!(
            note.starts_with("Created ")
                && note.contains(job.as_str())
                && note.contains("image captf.local/modules/noop-cluster"),
            "{note}"
        );
    }
    assert!(
        created
            .iter()
            .any(|(_, n)| n.contains("Created apply Job") && n.contains("InputsChanged")),
        "{created:?}"
    );

    // The original's lifecycle events, once each.
    for (reason, says) in [
        ("Provisioned", "provisioned at state serial"),
        ("ControlPlaneEndpointSet", ".noop.invalid:"),
        ("FailureDomainsChanged", "[fd1]"),
    ] {
        let (seen, _) = manager_events(&client, &ns, name, reason).await;
        assert_eq!(seen.len(), 1, "{reason}: {seen:?}");
        assert!(seen[0].1.contains(says), "{reason}: {seen:?}");
    }

    // Each apply's InputsChanged names its Job; each backup its Secret.
    let (changed, repeated) = manager_events(&client, &ns, name, "InputsChanged").await;
    assert!(!repeated, "{changed:?}");
    let changed: BTreeSet<String> = changed.into_iter().map(|(r, _)| r).collect();
    assert_eq!(changed, applies);
    let (backed_up, repeated) = manager_events(&client, &ns, name, "StateBackedUp").await;
    assert!(!repeated, "{backed_up:?}");
    assert!(
        backed_up.len() >= 2,
        "a backup of each serial: {backed_up:?}"
    );
    for (secret, note) in &backed_up {
        assert!(
            secret.starts_with("captf-state-backup-") && note.contains(secret.as_str()),
            "{secret}: {note}"
        );
    }
}
