//! No operator slip deletes the last record of what a module created (docs/backups.md, "State
//! protection"): the state's base chunk, the backups and the durable inputs hold
//! `captf.io/state-protection`, which only the manager removes.
//!
//! - A namespace deleted while its object's destroy runs kills the destroy and deletes
//!   everything else; the protected Secrets stay readable, the deletion is held and says why,
//!   and an abandon lets the namespace go.
//! - A finalizer removed by hand lets the object go; the state stays for the next object of
//!   the same name, which takes it up as its own, and a delete with `--force` of that one still
//!   destroys before anything is released.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

const PROTECTION: &str = "captf.io/state-protection";

/// The no-op cluster image of one engine.
fn image(tag: &str) -> String {
    format!("captf.local/modules/noop-cluster:{tag}")
}

fn protected(secret: &Secret) -> bool {
    secret
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == PROTECTION)
}

/// The Secrets of the object's state (`tfstate=true`), its backups and its durable inputs.
async fn kept(client: &kube::Client, ns: &str, suffix: &str, name: &str) -> Vec<Secret> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut all = Vec::new();
    for selector in [
        format!("tfstate=true,tfstateSecretSuffix={suffix}"),
        format!("captf.io/state-backup-suffix={suffix}"),
    ] {
        let listed = secrets
            .list(&ListParams::default().labels(&selector))
            .await
            .expect("list");
        all.extend(listed.items);
    }
    if let Some(inputs) = secrets
        .get_opt(&format!("captf-inputs-c-{name}"))
        .await
        .expect("durable inputs")
    {
        all.push(inputs);
    }
    all
}

/// Waits until the base chunk, at least one backup and the durable inputs hold the protection.
async fn wait_protected(scene: &Scene, suffix: &str, name: &str) -> Vec<Secret> {
    wait_for(
        "the state, backups and inputs protected",
        TIMEOUT,
        || async {
            let all = kept(&scene.client, &scene.ns, suffix, name).await;
            let base = format!("tfstate-default-{suffix}");
            let has = |pred: &dyn Fn(&Secret) -> bool| all.iter().any(|s| pred(s) && protected(s));
            let done = has(&|s| s.metadata.name.as_deref() == Some(&base))
                && has(&|s| {
                    s.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("captf-state-backup-"))
                })
                && has(&|s| {
                    s.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("captf-inputs-"))
                });
            Ok(done.then_some(all))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", scene.manager.log()))
}

/// `(lineage, serial, managed resources)` of the base chunk's state.
fn state_of(secret: &Secret) -> (String, i64, usize) {
    let doc = state_document(secret);
    let resources = doc["resources"]
        .as_array()
        .map_or(0, |r| r.iter().filter(|r| r["mode"] == "managed").count());
    (
        doc["lineage"].as_str().expect("lineage").to_owned(),
        doc["serial"].as_i64().expect("serial"),
        resources,
    )
}

fn workspace(tc: &TerraformCluster) -> &captf_api::WorkspaceStatus {
    &tc.status.as_ref().expect("status").workspace
}

/// A TerraformCluster `name` of image `tag` with `spec_extra`, Ready and its Secrets
/// protected: the object, its state suffix and its lineage.
async fn protected_cluster(
    scene: &Scene,
    name: &str,
    tag: &str,
    spec_extra: &str,
) -> (TerraformCluster, String, String) {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene;
    create_cluster(client, ns, name, &image(tag), spec_extra).await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    let ready = wait_until(&api, name, "Ready", manager, ready).await;
    let suffix = workspace(&ready)
        .state_secret_suffix
        .clone()
        .expect("suffix");
    let lineage = workspace(&ready).state_lineage.clone().expect("lineage");
    wait_protected(scene, &suffix, name).await;
    (ready, suffix, lineage)
}

async fn namespace_deleted_during_destroy(prefix: &str, tag: &str) {
    let scene = scene(prefix, &[]).await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    let name = prefix;
    let slow = "  variables: {destroy_sleep_seconds: 120}";
    let (_, suffix, lineage) = protected_cluster(&scene, name, tag, slow).await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);

    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_for_job(client, ns, "-destroy-", manager).await;
    // The engine holds the lock for its destroy (an apply of the destroy plan): the destroy is
    // under way when the namespace goes.
    wait_for_apply_lock(client, ns, &suffix, manager).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(ns, &DeleteParams::default())
        .await
        .expect("delete the namespace");

    // The Job and its pod go with the namespace; the deletion is held and says why.
    let held = wait_until(
        &api,
        name,
        "the deletion held on the namespace",
        manager,
        |t| condition(t, "Deleting").is_some_and(|c| c.2.contains("is being deleted")),
    )
    .await;
    let (_, _, message) = condition(&held, "Deleting").expect("Deleting");
    assert!(
        message.contains(PROTECTION) && message.contains("captf.io/abandon-infrastructure"),
        "{message}"
    );
    wait_for(
        "the destroy Job gone with the namespace",
        TIMEOUT,
        || async { Ok(job_names(client, ns).await.is_empty().then_some(())) },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));

    // Everything unprotected is gone; the state, a backup and the inputs are Terminating and
    // readable, and the state still describes what the module created.
    let all = wait_for("the unprotected Secrets gone", TIMEOUT, || async {
        let all = kept(client, ns, &suffix, name).await;
        let done = all
            .iter()
            .all(|s| protected(s) && s.metadata.deletion_timestamp.is_some());
        Ok(done.then_some(all))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let base = all
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(&format!("tfstate-default-{suffix}")))
        .expect("the base chunk is kept");
    let (kept_lineage, _, resources) = state_of(base);
    assert_eq!(kept_lineage, lineage);
    assert!(
        resources > 0,
        "the destroy was cut short: the state still holds resources"
    );
    assert!(
        all.iter().any(|s| s
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("captf-state-backup-"))),
        "a backup is kept"
    );
    assert!(
        all.iter().any(|s| s
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("captf-inputs-"))),
        "the durable inputs are kept"
    );

    // The runbook's way out once the infrastructure is handled: abandon, and the namespace goes.
    let uid = held.metadata.uid.clone().expect("uid");
    annotate(&api, name, "captf.io/abandon-infrastructure", Some(&uid)).await;
    wait_for("the namespace to be gone", TIMEOUT, || async {
        Ok(namespaces.get_opt(ns).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    // Nothing it tried failed meanwhile: nothing is written where nothing can be created.
    let log = manager.whole_log();
    assert!(!log.contains("reconcile failed"), "{log}");
}

#[tokio::test]
async fn a_namespace_deleted_while_a_destroy_runs_keeps_the_state_with_opentofu() {
    namespace_deleted_during_destroy("nsgone-tofu", "e2e").await;
}

#[tokio::test]
async fn a_namespace_deleted_while_a_destroy_runs_keeps_the_state_with_terraform() {
    namespace_deleted_during_destroy("nsgone-tf", "e2e-terraform").await;
}

async fn finalizer_removed_by_hand(prefix: &str, tag: &str) {
    let scene = scene(prefix, &[]).await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    let name = prefix;
    let (first, suffix, lineage) = protected_cluster(&scene, name, tag, "").await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    let serial = workspace(&first).observed_state_serial.expect("serial");

    // The slip: a deletion that waits (here: paused), and its finalizer removed by hand.
    annotate(&api, name, "cluster.x-k8s.io/paused", Some("")).await;
    wait_until(&api, name, "Paused", manager, |t| {
        has(t, "Paused", "True", "Paused")
    })
    .await;
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    let strip = serde_json::json!({"metadata": {"finalizers": null}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&strip))
        .await
        .expect("finalizer removed by hand");
    wait_for("the object gone", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .expect("gone");

    // The garbage collector deletes what the object owned; the protected Secrets stay,
    // Terminating and readable.
    let all = wait_for(
        "the garbage collector to reach the Secrets",
        TIMEOUT,
        || async {
            let all = kept(client, ns, &suffix, name).await;
            let reached =
                !all.is_empty() && all.iter().all(|s| s.metadata.deletion_timestamp.is_some());
            Ok(reached.then_some(all))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let base = all
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(&format!("tfstate-default-{suffix}")))
        .expect("the base chunk is kept");
    assert_eq!(state_of(base).0, lineage);
    assert_eq!(state_of(base).1, serial);
    assert!(state_of(base).2 > 0);

    // The next object of that name takes the state up as its own: the same lineage, the
    // backups counted, the Secrets owned by it; no second set of infrastructure.
    create_cluster(client, ns, name, &image(tag), "").await;
    let second = wait_until(&api, name, "Ready with the kept state", manager, |t| {
        ready(t)
            && t.status
                .as_ref()
                .and_then(|s| s.workspace.state_backups.as_ref())
                .is_some_and(|b| !b.is_empty())
    })
    .await;
    assert_eq!(
        workspace(&second).state_lineage.as_deref(),
        Some(lineage.as_str())
    );
    let uid = second.metadata.uid.clone().expect("uid");
    wait_for(
        "the kept Secrets owned by the new object",
        TIMEOUT,
        || async {
            let all = kept(client, ns, &suffix, name).await;
            let owned = all.iter().all(|s| {
                s.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .all(|r| r.uid == uid)
            });
            Ok(owned.then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));

    // A delete with --force (grace period 0) still waits for the destroy; then everything is
    // released, the kept Terminating Secrets included.
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    api.delete(name, &force).await.expect("delete --force");
    wait_for_job(client, ns, "-destroy-", manager).await;
    wait_for("the object destroyed and gone", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let destroyed = event(client, ns, "Destroyed").await;
    assert!(
        destroyed
            .note
            .unwrap_or_default()
            .contains("Infrastructure destroyed"),
    );
    wait_for("nothing of the state left", TIMEOUT, || async {
        Ok(kept(client, ns, &suffix, name)
            .await
            .is_empty()
            .then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
}

#[tokio::test]
async fn a_finalizer_removed_by_hand_keeps_the_state_for_the_next_object_with_opentofu() {
    finalizer_removed_by_hand("unfinal-tofu", "e2e").await;
}

#[tokio::test]
async fn a_finalizer_removed_by_hand_keeps_the_state_for_the_next_object_with_terraform() {
    finalizer_removed_by_hand("unfinal-tf", "e2e-terraform").await;
}
