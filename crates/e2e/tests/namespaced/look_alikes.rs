//! A tenant's look-alike Lease: the object's run lease naming a Job that no `Terraform*`
//! object controls holds nothing; the object's next operation takes the lease and says whose
//! it was. (Look-alike Jobs: `cluster_deletion`; look-alike backups: `restore`.)

use captf_api::TerraformCluster;
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_e2e::fixture::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

#[tokio::test]
async fn a_lookalike_run_lease_holds_nothing() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("lease-lookalike", &[]).await;
    let name = "leased";
    create_cluster(
        &client,
        &ns,
        name,
        IMAGE,
        "  variables: {extra_exports: {token: one}}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait_until(&api, name, "Ready", &manager, ready).await;

    // A Job that will never finish (suspended: no pod runs), and the object's run lease
    // naming it, fresh and for a day.
    let holder = "tenant-holder";
    let job: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": holder},
        "spec": {
            "suspend": true,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "idle", "image": IMAGE, "command": ["/captf/runtime", "version"]}],
            }},
        },
    }))
    .expect("Job");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("the tenant's Job");
    let lease_name = ObjectKey::new(&ns, WorkloadKind::Cluster, name)
        .expect("key")
        .run_lease();
    // The object's own run lease goes at the bookkeeping, just after the status that says
    // Ready: the look-alike takes its name once it is free.
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    captf_testenv::wait_for("the apply's run lease released", TIMEOUT, || async {
        Ok(leases.get_opt(&lease_name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let now = k8s_openapi::jiff::Timestamp::now();
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": lease_name},
        "spec": {
            "holderIdentity": holder,
            "acquireTime": now.to_string(),
            "leaseDurationSeconds": 86_400,
        },
    }))
    .expect("Lease");
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("the look-alike lease");

    merge_patch(
        &api,
        name,
        serde_json::json!({"spec": {"variables": {"extra_exports": {"token": "two"}}}}),
    )
    .await;
    wait_until(&api, name, "the change applied", &manager, |t| {
        ready(t) && exports(t).contains("two")
    })
    .await;
    let ignored = event(&client, &ns, "ForeignLeaseIgnored").await;
    let note = ignored.note.unwrap_or_default();
    assert!(
        note.contains(holder) && note.contains(&lease_name),
        "{note}"
    );
}
