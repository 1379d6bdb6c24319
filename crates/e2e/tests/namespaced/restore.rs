//! Restoring a state backup: `captf.io/restore-state=<serial>` runs a restore Job only from a
//! complete backup, records `status.lastRestoredSerial` and consumes the annotation; a serial
//! without a backup starts nothing and says so, and look-alike backups (another owner, or no
//! owner and another lineage) are no backups.

use captf_api::TerraformCluster;
use captf_e2e::Manager;
use captf_e2e::fixture::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

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

/// Copies `real` (a one-chunk backup) as the set `name` of `serial`, owned by `owner`, with
/// `lineage`: a look-alike whose data still matches its digest.
async fn look_alike(
    secrets: &Api<Secret>,
    real: &Secret,
    name: &str,
    serial: i64,
    lineage: Option<&str>,
    owner: Option<OwnerReference>,
) {
    let mut copy = real.clone();
    copy.metadata = kube::api::ObjectMeta {
        name: Some(name.to_owned()),
        labels: real.metadata.labels.clone(),
        annotations: real.metadata.annotations.clone(),
        owner_references: owner.map(|o| vec![o]),
        ..Default::default()
    };
    let annotations = copy
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert("captf.io/state-backup-set".into(), name.to_owned());
    annotations.insert("captf.io/state-backup-serial".into(), serial.to_string());
    annotations.insert(
        "captf.io/state-backup-taken-at".into(),
        "2099-01-01T00:00:00Z".into(),
    );
    if let Some(lineage) = lineage {
        annotations.insert("captf.io/state-backup-lineage".into(), lineage.to_owned());
    }
    secrets
        .create(&PostParams::default(), &copy)
        .await
        .expect("a look-alike backup");
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

    // Look-alikes of the first backup, data and digest intact: one owned by a ConfigMap, one
    // without owner and of another lineage. Neither is a backup of the object.
    let suffix = first
        .status
        .as_ref()
        .and_then(|s| s.workspace.state_secret_suffix.clone())
        .expect("suffix");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let real = secrets
        .get(&format!("captf-state-backup-{suffix}-{first_serial}"))
        .await
        .expect("the first serial's backup");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let decoy = maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "decoy"}}))
                .expect("a ConfigMap"),
        )
        .await
        .expect("the decoy owner");
    let decoy_owner = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "decoy".into(),
        uid: decoy.metadata.uid.clone().expect("uid"),
        ..Default::default()
    };
    let owned_elsewhere = format!("captf-state-backup-{suffix}-999");
    let ownerless = format!("captf-state-backup-{suffix}-998");
    look_alike(
        &secrets,
        &real,
        &owned_elsewhere,
        999,
        None,
        Some(decoy_owner),
    )
    .await;
    look_alike(&secrets, &real, &ownerless, 998, Some("forged"), None).await;

    // A serial without a backup, and the look-alikes' serials: nothing starts, the condition
    // says which serials exist, an event names the look-alikes.
    for serial in ["998", "999"] {
        annotate(&api, name, "captf.io/restore-state", Some(serial)).await;
        let refused = wait_until(&api, name, "the look-alike refused", &manager, |t| {
            has(t, "RestoreJobSucceeded", "False", "RestoreBackupNotFound")
                && condition(t, "RestoreJobSucceeded")
                    .is_some_and(|(_, _, m)| m.contains(&format!("serial {serial}")))
        })
        .await;
        let (_, _, message) = condition(&refused, "RestoreJobSucceeded").expect("condition");
        let kept = message.split("hold serials [").nth(1).unwrap_or_default();
        assert!(
            kept.contains(&first_serial.to_string()) && !kept.contains("99"),
            "{message}"
        );
    }
    let ignored = event(&client, &ns, "ForeignBackupIgnored").await;
    let note = ignored.note.unwrap_or_default();
    assert!(
        note.contains(&owned_elsewhere) || note.contains(&ownerless),
        "{note}"
    );
    assert!(restore_jobs(&client, &ns).await.is_empty());
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
    // The look-alikes are still there: never pruned, never re-owned.
    for look_alike in [&owned_elsewhere, &ownerless] {
        let left = secrets
            .get(look_alike)
            .await
            .expect("the look-alike is left alone");
        let owners = left.metadata.owner_references.unwrap_or_default();
        assert!(owners.iter().all(|o| o.kind == "ConfigMap"), "{owners:?}");
    }
    let listed = restored
        .status
        .as_ref()
        .and_then(|s| s.workspace.state_backups.clone())
        .unwrap_or_default();
    assert!(
        listed.iter().all(|b| b.serial < 998),
        "status.stateBackups lists a look-alike: {listed:?}"
    );
    let metrics = Manager::get(&manager.metrics).expect("metrics");
    for (result, want) in [("succeeded", 1.0), ("not_found", 2.0)] {
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
