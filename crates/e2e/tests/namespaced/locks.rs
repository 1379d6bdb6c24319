//! State locks left behind: a lock whose holder is a gone runner pod of this object is
//! force-unlocked by the next Job; anyone else's lock is reported and never forced.

use captf_api::names::{ObjectKey, WorkloadKind};
use captf_api::{Operation, TerraformCluster};
use captf_e2e::fixture::*;
use captf_e2e::{Manager, apply_yaml};
use captf_testenv::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

/// Holds the object's state lock as the engine would, for `who` (`<user>@<host>`).
async fn hold_lock(client: &kube::Client, ns: &str, suffix: &str, id: &str, who: &str) {
    let info = serde_json::json!({
        "ID": id, "Operation": "OperationTypeApply", "Info": "", "Who": who,
        "Version": "1.12.6", "Created": "2026-11-29T08:38:12.373963166Z", "Path": "",
    })
    .to_string();
    apply_yaml(
        client,
        &serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": format!("lock-tfstate-default-{suffix}"),
                "namespace": ns,
                "annotations": {"app.terraform.io/lock-info": info},
            },
            "spec": {"holderIdentity": id},
        })
        .to_string(),
    )
    .await
    .expect("hold the lock");
}

async fn holder(client: &kube::Client, ns: &str, suffix: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    leases
        .get_opt(&format!("lock-tfstate-default-{suffix}"))
        .await
        .expect("lease")
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

fn suffix(tc: &TerraformCluster) -> String {
    tc.status
        .as_ref()
        .and_then(|s| s.workspace.state_secret_suffix.clone())
        .expect("suffix")
}

#[tokio::test]
async fn a_dead_runners_lock_is_released_by_the_next_job_and_a_foreign_one_never() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("locks", &[]).await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    for name in ["stale", "foreign"] {
        create_cluster(
            &client,
            &ns,
            name,
            IMAGE,
            "  variables: {extra_exports: {token: one}}",
        )
        .await;
    }
    let stale = wait_until(&api, "stale", "Ready", &manager, ready).await;
    let foreign = wait_until(&api, "foreign", "Ready", &manager, ready).await;

    // A runner of "stale" that was killed mid-apply: its pod is gone, its lock is not.
    let key = ObjectKey::new(&ns, WorkloadKind::Cluster, "stale").expect("key");
    let dead_pod = format!("{}-dead1", key.job_name(Operation::Apply, 7, "h2:gone", ""));
    hold_lock(
        &client,
        &ns,
        &suffix(&stale),
        "stale-lock",
        &format!("root@{dead_pod}"),
    )
    .await;
    merge_patch(
        &api,
        "stale",
        serde_json::json!({"spec": {"variables": {"extra_exports": {"token": "two"}}}}),
    )
    .await;
    let applied = wait_until(&api, "stale", "the apply after the unlock", &manager, |t| {
        ready(t) && exports(t).contains("two")
    })
    .await;
    assert_eq!(
        holder(&client, &ns, &suffix(&applied)).await,
        None,
        "the lock is gone"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let unlocking = jobs
        .list(&ListParams::default())
        .await
        .expect("Jobs")
        .items
        .into_iter()
        .find(|j| {
            serde_json::to_string(&j.spec)
                .expect("json")
                .contains("--force-unlock=stale-lock")
        })
        .expect("a Job was handed the stale lock ID");
    assert!(
        unlocking
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("captf-c-stale-apply-")),
        "{:?}",
        unlocking.metadata.name
    );
    let metrics = Manager::get(&manager.metrics).expect("metrics");
    assert_eq!(
        sample(
            &metrics,
            "captf_lock_force_unlocks_total{kind=\"TerraformCluster\"}"
        ),
        Some(1.0),
        "{metrics}"
    );

    // Someone's workstation holds "foreign": reported, never forced.
    hold_lock(
        &client,
        &ns,
        &suffix(&foreign),
        "alice-lock",
        "alice@laptop",
    )
    .await;
    annotate(&api, "foreign", "example.com/poke", Some("1")).await;
    let locked = wait_until(&api, "foreign", "StateLocked", &manager, |t| {
        has(t, "StateReadable", "False", "StateLocked")
    })
    .await;
    let (_, _, message) = condition(&locked, "StateReadable").expect("condition");
    assert!(
        message.contains("alice@laptop") && message.contains("alice-lock"),
        "{message}"
    );
    wait_for("the StateLocked event", TIMEOUT, || async {
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("StateLocked")))
    })
    .await
    .expect("event");
    assert_eq!(
        holder(&client, &ns, &suffix(&locked)).await.as_deref(),
        Some("alice-lock"),
        "a foreign lock is never forced"
    );
}
