//! Secrets that lost their owner references (restored from a namespace backup, say) are
//! re-owned by the next unpaused pass, so the garbage collector removes them with the object:
//! state, durable inputs, plan key, the credential mirror's entry and, as a plain
//! (non-controller) owner, backups. A repair the API server refuses is logged and tried again,
//! and never fails the pass (seed 002).

use captf_api::TerraformCluster;
use captf_e2e::apply_yaml;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

/// A ValidatingAdmissionPolicy (the API server's own admission, no webhook) that refuses every
/// update of Secret `secret` in `ns` that leaves it with an owner reference: its references can
/// be taken away, never given back.
fn refuse_updates(ns: &str, secret: &str) -> String {
    format!(
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: e2e-frozen-{ns}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: [v1], operations: [UPDATE], resources: [secrets]}}
  validations:
  - expression: "object.metadata.name != '{secret}' || !has(object.metadata.ownerReferences) || size(object.metadata.ownerReferences) == 0"
    message: "e2e: {secret} may not be owned"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: e2e-frozen-{ns}}}
spec:
  policyName: e2e-frozen-{ns}
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {{kubernetes.io/metadata.name: {ns}}}
"#
    )
}

/// Waits until the API server refuses (`true`) or accepts giving Secret `name` the owner
/// `owner`, tried as a dry run: an admission policy takes a moment to be in force, or lifted.
async fn frozen(secrets: &Api<Secret>, name: &str, owner: &OwnerReference, refused: bool) {
    let probe = serde_json::json!({"metadata": {"ownerReferences": [owner]}});
    wait_for(&format!("{name} frozen: {refused}"), TIMEOUT, || async {
        let params = PatchParams::default().dry_run();
        let tried = secrets.patch(name, &params, &Patch::Merge(&probe)).await;
        Ok((tried.is_err() == refused).then_some(()))
    })
    .await
    .expect("the admission policy in force, or lifted");
}

/// The references to `uid`, and whether they are the only ones.
fn only(refs: Option<Vec<OwnerReference>>, uid: &str) -> bool {
    refs.is_some_and(|r| r.len() == 1 && r[0].uid == uid)
}

/// Passes of the TerraformCluster controller that ended in an error, so far.
fn failed_passes(manager: &captf_e2e::Manager) -> f64 {
    let metrics = captf_e2e::Manager::get(&manager.metrics).expect("metrics");
    sample(
        &metrics,
        "controller_runtime_reconcile_errors_total{controller=\"terraformcluster\"}",
    )
    .unwrap_or(0.0)
}

#[tokio::test]
async fn secrets_without_owner_references_are_re_owned() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("owners", &[]).await;
    let name = "owners";
    create_cluster(&client, &ns, name, IMAGE, "  applyPolicy: Manual").await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait_until(&api, name, "Ready", &manager, ready).await;
    // A change is planned and the plan approved: those Jobs make and use the plan key.
    let change = serde_json::json!({"spec": {"variables": {"extra_exports": {"token": "two"}}}});
    merge_patch(&api, name, change).await;
    let planned = wait_until(&api, name, "a plan", &manager, |t| {
        has(t, "ApplyJobSucceeded", "Unknown", "PlanAwaitingApproval")
    })
    .await;
    let plan = planned
        .status
        .and_then(|s| s.plan)
        .expect("status.plan")
        .plan_hash;
    annotate(&api, name, "captf.io/approve-plan", Some(&plan)).await;
    let tc = wait_until(&api, name, "the approved apply", &manager, |t| {
        ready(t) && exports(t).contains("two")
    })
    .await;
    let uid = tc.metadata.uid.clone().expect("uid");
    let suffix = tc
        .status
        .as_ref()
        .and_then(|s| s.workspace.state_secret_suffix.clone())
        .expect("suffix");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let plan_key = format!("captf-plankey-c-{name}");
    let mirror = captf_api::names::credential_mirror(&format!("noop-{ns}"));
    let names = [
        format!("tfstate-default-{suffix}"),
        format!("captf-inputs-c-{name}"),
    ];
    // From now on the API server refuses to give the plan key an owner back.
    let owner = tc.controller_owner_ref(&()).expect("owner reference");
    apply_yaml(&client, &refuse_updates(&ns, &plan_key))
        .await
        .expect("the policy");
    frozen(&secrets, &plan_key, &owner, true).await;
    let errors_before = failed_passes(&manager);
    for secret in names.iter().chain([&plan_key, &mirror]) {
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
    wait_for("the other Secrets re-owned", TIMEOUT, || async {
        let mut owned = true;
        for secret in &names {
            owned &= only(secrets.get(secret).await?.metadata.owner_references, &uid);
        }
        Ok(owned.then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    // The refused repair is logged, the pass goes on and ends well.
    manager
        .logged("the refused repair", TIMEOUT, |l| {
            l.contains("owner reference not repaired") && l.contains(&plan_key)
        })
        .await
        .expect("the refused repair logged");
    assert_eq!(
        failed_passes(&manager),
        errors_before,
        "a refused repair failed the pass:\n{}",
        manager.log()
    );
    assert!(
        ready(&api.get(name).await.expect("the cluster")),
        "Ready through a refused repair"
    );
    let refs = secrets
        .get(&plan_key)
        .await
        .expect("plan key")
        .metadata
        .owner_references;
    assert!(
        refs.unwrap_or_default().is_empty(),
        "the plan key was frozen"
    );

    // The API server lets it change again: the next pass repairs it.
    let frozen_by = format!("e2e-frozen-{ns}");
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    bindings
        .delete(&frozen_by, &DeleteParams::default())
        .await
        .expect("the binding deleted");
    policies
        .delete(&frozen_by, &DeleteParams::default())
        .await
        .expect("the policy deleted");
    frozen(&secrets, &plan_key, &owner, false).await;
    annotate(&api, name, "example.com/poke", Some("2")).await;
    wait_for("the plan key re-owned", TIMEOUT, || async {
        let refs = secrets.get(&plan_key).await?.metadata.owner_references;
        Ok(only(refs, &uid).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    // The mirror is shared by the namespace's users: one entry for this object, its UID.
    let refs = secrets
        .get(&mirror)
        .await
        .expect("mirror")
        .metadata
        .owner_references;
    let entries: Vec<_> = refs
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.kind == "TerraformCluster" && r.name == name)
        .collect();
    assert!(
        entries.len() == 1 && entries[0].uid == uid,
        "the mirror's entries for {name}: {entries:?}"
    );
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
