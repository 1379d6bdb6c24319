//! An object whose state Secret is missing applies again only if it never applied: a pinned
//! digest on its durable inputs, or any state backup, counts as an earlier apply when
//! everything else that would say so is gone (the `captf.io/applied` marker, a status that
//! marks it provisioned), so the missing state reads as lost and no second set of resources
//! is created (seed 002, "A new object with no visible state creates a second set of
//! resources"; docs/runbooks/total-state-loss.md). Each with OpenTofu and with Terraform.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams};

/// What each case leaves of the earlier apply.
#[derive(Clone, Copy, Debug)]
enum Sign {
    /// The durable inputs with the pinned digest, without the `captf.io/applied` marker; no
    /// backup.
    PinnedDigest,
    /// A backup; no durable inputs at all.
    Backup,
    /// Nothing: the object reads as never applied and applies again, the danger the others
    /// guard against (and the proof that this test would see it).
    Nothing,
}

async fn secrets_by(client: &kube::Client, ns: &str, selector: &str) -> Vec<Secret> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .list(&ListParams::default().labels(selector))
        .await
        .expect("list Secrets")
        .items
}

/// Deletes the Secrets `selector` selects for good (their `captf.io/state-protection`
/// finalizer removed too, as the state-loss runbook says a lost state means).
async fn delete_all(client: &kube::Client, ns: &str, selector: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    for s in secrets_by(client, ns, selector).await {
        delete_for_good(&secrets, &s.metadata.name.expect("name")).await;
    }
}

fn provisioned(tc: &TerraformCluster) -> bool {
    tc.status
        .as_ref()
        .and_then(|s| s.workspace.initialization.as_ref())
        .and_then(|i| i.provisioned)
        .unwrap_or(false)
}

/// A Ready cluster loses its state and every other sign of its apply but `sign`, as a restore
/// in the wrong order or a hand "clean-up" leaves it; it is then woken with new inputs (an
/// apply would be due) and must read `StateLost` and start nothing, pass after pass.
async fn only_one_sign_left(prefix: &str, engine: Engine, sign: Sign) {
    let s = scene(prefix, &[]).await;
    let (client, ns, manager) = (&s.client, s.ns.as_str(), &s.manager);
    let name = "earlier";
    create_cluster(client, ns, name, &engine.image("cluster"), "").await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    let first = wait_until(&api, name, "Ready", manager, ready).await;
    let suffix = first
        .status
        .as_ref()
        .and_then(|s| s.workspace.state_secret_suffix.clone())
        .expect("suffix");
    let state = format!("tfstate=true,tfstateSecretSuffix={suffix}");
    let backups = format!("captf.io/state-backup-suffix={suffix}");
    let durable_name = format!("captf-inputs-c-{name}");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let durable = secrets.get(&durable_name).await.expect("durable inputs");
    let marks = durable.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        marks.get("captf.io/applied").map(String::as_str),
        Some("true")
    );
    assert!(marks.contains_key("captf.io/image-digest"), "{marks:?}");
    assert!(
        !secrets_by(client, ns, &backups).await.is_empty(),
        "a backup"
    );

    // Paused while the signs go, so no pass sees half of it.
    annotate(&api, name, "cluster.x-k8s.io/paused", Some("")).await;
    wait_until(&api, name, "Paused", manager, |t| {
        has(t, "Paused", "True", "Paused")
    })
    .await;
    let jobs_before = job_names(client, ns).await;
    delete_all(client, ns, &state).await;
    match sign {
        Sign::PinnedDigest => {
            delete_all(client, ns, &backups).await;
            let unmark =
                serde_json::json!({"metadata": {"annotations": {"captf.io/applied": null}}});
            secrets
                .patch(
                    &durable_name,
                    &PatchParams::default(),
                    &Patch::Merge(&unmark),
                )
                .await
                .expect("remove the applied marker");
        }
        Sign::Backup => {
            delete_for_good(&secrets, &durable_name).await;
        }
        Sign::Nothing => {
            delete_all(client, ns, &backups).await;
            delete_for_good(&secrets, &durable_name).await;
        }
    }
    // No status: not provisioned, no lineage, no backups listed, as a restored object's.
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"status": null})),
    )
    .await
    .expect("clear the status");
    // Unpaused as it was: a never-applied object's first apply is due now.
    annotate(&api, name, "cluster.x-k8s.io/paused", None).await;

    if let Sign::Nothing = sign {
        wait_for("a second first apply", TIMEOUT, || async {
            let jobs = job_names(client, ns).await;
            Ok((jobs.iter().filter(|j| j.contains("-apply-")).count() == 2).then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
        return;
    }
    let lost = wait_until(&api, name, "StateLost", manager, |t| {
        has(t, "StateReadable", "False", "StateLost")
    })
    .await;
    // The runbook's first line, and the condition's own words.
    let (_, _, message) = condition(&lost, "StateReadable").expect("StateReadable");
    assert!(
        message.contains("applied before")
            && message.contains("captf.io/restore-state")
            && message.contains("captf.io/state-backup-serial"),
        "{message}"
    );
    assert!(
        !provisioned(&lost),
        "{sign:?}: the status still marks it provisioned"
    );
    idle_passes_of(&api, name, manager, "StateLost", 3).await;

    let jobs = job_names(client, ns).await;
    let applies = jobs.iter().filter(|j| j.contains("-apply-")).count();
    assert_eq!(applies, 1, "{sign:?}: a second first apply: {jobs:?}");
    assert_eq!(jobs, jobs_before, "{sign:?}: a Job ran");
    assert!(
        secrets_by(client, ns, &state).await.is_empty(),
        "{sign:?}: a new state was written"
    );
    let after = secrets.get_opt(&durable_name).await.expect("read");
    match sign {
        Sign::PinnedDigest => {
            let marks = after
                .expect("durable inputs")
                .metadata
                .annotations
                .unwrap_or_default();
            assert!(!marks.contains_key("captf.io/applied"), "{marks:?}");
            assert!(marks.contains_key("captf.io/image-digest"), "{marks:?}");
            assert!(
                secrets_by(client, ns, &backups).await.is_empty(),
                "no backup"
            );
        }
        Sign::Backup => {
            assert!(after.is_none(), "durable inputs written again");
            let kept = secrets_by(client, ns, &backups).await;
            assert!(!kept.is_empty(), "the backup is kept");
            // The status went with the state, so status.stateBackups lists nothing (and the
            // plugin's `backups list` and `restore` with it); the runbook finds the backup by
            // its label and restores its serial by annotation: the state is back, and since
            // it records the current inputs, nothing applies.
            let serial = kept[0]
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("captf.io/state-backup-serial").cloned())
                .expect("the backup's serial");
            annotate(&api, name, "captf.io/restore-state", Some(&serial)).await;
            wait_until(&api, name, "restored and Ready", manager, |t| {
                ready(t) && has(t, "StateReadable", "True", "StateRead")
            })
            .await;
            let jobs = job_names(client, ns).await;
            let applies = jobs.iter().filter(|j| j.contains("-apply-")).count();
            assert_eq!(applies, 1, "an apply after the restore: {jobs:?}");
            assert!(jobs.iter().any(|j| j.contains("-restore-")), "{jobs:?}");
        }
        Sign::Nothing => unreachable!("returned above"),
    }
}

#[tokio::test]
async fn a_pinned_digest_or_a_backup_counts_as_an_earlier_apply_with_opentofu() {
    tokio::join!(
        only_one_sign_left("pinned-tofu", OPENTOFU, Sign::PinnedDigest),
        only_one_sign_left("backup-tofu", OPENTOFU, Sign::Backup),
        only_one_sign_left("nothing-tofu", OPENTOFU, Sign::Nothing),
    );
}

#[tokio::test]
async fn a_pinned_digest_or_a_backup_counts_as_an_earlier_apply_with_terraform() {
    tokio::join!(
        only_one_sign_left("pinned-tf", TERRAFORM, Sign::PinnedDigest),
        only_one_sign_left("backup-tf", TERRAFORM, Sign::Backup),
    );
}
