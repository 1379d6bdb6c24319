//! Secrets that lost their owner references (restored from a namespace backup, say) are
//! re-owned by the next unpaused pass, so the garbage collector removes them with the object:
//! state, durable inputs and, as a plain (non-controller) owner, backups.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

#[tokio::test]
async fn secrets_without_owner_references_are_re_owned() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("owners", &[]).await;
    let name = "owners";
    create_cluster(&client, &ns, name, IMAGE, "").await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let tc = wait_until(&api, name, "Ready", &manager, ready).await;
    let uid = tc.metadata.uid.clone().expect("uid");
    let suffix = tc
        .status
        .as_ref()
        .and_then(|s| s.workspace.state_secret_suffix.clone())
        .expect("suffix");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let names = [
        format!("tfstate-default-{suffix}"),
        format!("captf-inputs-c-{name}"),
    ];
    for secret in &names {
        secrets
            .patch(
                secret,
                &PatchParams::default(),
                &Patch::Merge(&serde_json::json!({"metadata": {"ownerReferences": null}})),
            )
            .await
            .expect("strip the owner references");
    }
    // A backup restored the same way, with the status that listed it gone as after a
    // namespace restore.
    let backup = secrets
        .list(&ListParams::default().labels(&format!("captf.io/state-backup-suffix={suffix}")))
        .await
        .expect("backups")
        .items
        .into_iter()
        .next()
        .and_then(|b| b.metadata.name)
        .expect("a backup of the first apply");
    secrets
        .patch(
            &backup,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"metadata": {"ownerReferences": null}})),
        )
        .await
        .expect("strip the backup's owner references");
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"status": {"stateBackups": null}})),
    )
    .await
    .expect("forget status.stateBackups");
    // Nothing wakes the object for an ownerless Secret; anything that does will repair them.
    annotate(&api, name, "example.com/poke", Some("1")).await;
    wait_for("the Secrets re-owned", TIMEOUT, || async {
        let mut owned = true;
        for secret in &names {
            let refs = secrets.get(secret).await?.metadata.owner_references;
            owned &= refs.unwrap_or_default().iter().any(|r| r.uid == uid);
        }
        Ok(owned.then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let owner = wait_for("the backup re-owned", TIMEOUT, || async {
        let refs = secrets.get(&backup).await?.metadata.owner_references;
        Ok(refs.unwrap_or_default().into_iter().find(|r| r.uid == uid))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    assert_ne!(
        owner.controller,
        Some(true),
        "a backup is owned, not controlled"
    );
    // The repair may take more than one pass, and the event recorder folds a second event of
    // the same reason into the first one's series (keeping the first note), so only the first
    // repair is sure to be named; the owner references themselves are checked above.
    let repaired = event(&client, &ns, "OwnerReferencesRepaired").await;
    let note = repaired.note.unwrap_or_default();
    assert!(names.iter().any(|n| note.contains(n.as_str())), "{note}");
}
