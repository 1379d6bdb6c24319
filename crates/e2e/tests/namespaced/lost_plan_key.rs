//! A lost plan key voids the plan that waits for approval (seed 002, "Not worth backing up";
//! docs/approvals.md): the key is made again, the plan hash keyed with the old one no longer
//! applies anything, and a new plan is made to approve. With OpenTofu and with Terraform.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams};

fn plan_hash(t: &TerraformCluster) -> Option<String> {
    t.status
        .as_ref()?
        .plan
        .as_ref()
        .map(|p| p.plan_hash.clone())
}

fn waiting(t: &TerraformCluster) -> bool {
    has(t, "ApplyJobSucceeded", "Unknown", "PlanAwaitingApproval")
}

async fn key_lost(prefix: &str, engine: Engine) {
    let s = scene(prefix, &[]).await;
    let (client, ns, manager) = (&s.client, s.ns.as_str(), &s.manager);
    let name = "keyed";
    create_cluster(
        client,
        ns,
        name,
        &engine.image("cluster"),
        "  applyPolicy: Manual\n  variables: {extra_exports: {token: one}}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    wait_until(&api, name, "the first apply", manager, ready).await;
    let change = serde_json::json!({"spec": {"variables": {"extra_exports": {"token": "two"}}}});
    merge_patch(&api, name, change).await;
    let planned = wait_until(&api, name, "a plan awaiting approval", manager, waiting).await;
    let old = plan_hash(&planned).expect("status.plan");

    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let key = format!("captf-plankey-c-{name}");
    let old_key = secrets.get(&key).await.expect("plan key").metadata.uid;
    secrets
        .delete(&key, &DeleteParams::default())
        .await
        .expect("delete the plan key");
    annotate(&api, name, "example.com/poke", Some("key-lost")).await;

    // A new plan to approve, keyed with a new key.
    let replanned = wait_until(&api, name, "a new plan to approve", manager, |t| {
        waiting(t) && plan_hash(t).is_some_and(|h| h != old)
    })
    .await;
    let new = plan_hash(&replanned).expect("status.plan");
    let new_key = secrets
        .get(&key)
        .await
        .expect("a new plan key")
        .metadata
        .uid;
    assert_ne!(new_key, old_key, "the key was made again");
    let (_, _, message) = condition(&replanned, "ApplyJobSucceeded").expect("condition");
    assert!(message.contains(&new), "{message}");

    // The old approval applies nothing.
    annotate(&api, name, "captf.io/approve-plan", Some(&old)).await;
    let refused = wait_until(&api, name, "the old approval refused", manager, |t| {
        waiting(t)
            && condition(t, "ApplyJobSucceeded").is_some_and(|c| {
                c.2.contains(&format!("names {old}, which is not this plan"))
            })
    })
    .await;
    assert_eq!(plan_hash(&refused).as_deref(), Some(new.as_str()));
    assert!(!exports(&refused).contains("two"), "applied unapproved");

    // The new plan, approved, applies.
    annotate(&api, name, "captf.io/approve-plan", Some(&new)).await;
    wait_until(&api, name, "the approved apply", manager, |t| {
        ready(t) && exports(t).contains("two")
    })
    .await;
    wait_for("the approval used up", TIMEOUT, || async {
        let t = api.get(name).await?;
        let left = t.metadata.annotations.unwrap_or_default();
        Ok((!left.contains_key("captf.io/approve-plan")).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
}

#[tokio::test]
async fn a_lost_plan_key_voids_the_waiting_plan_and_a_new_one_is_made_with_opentofu() {
    key_lost("plankey-tofu", OPENTOFU).await;
}

#[tokio::test]
async fn a_lost_plan_key_voids_the_waiting_plan_and_a_new_one_is_made_with_terraform() {
    key_lost("plankey-tf", TERRAFORM).await;
}
