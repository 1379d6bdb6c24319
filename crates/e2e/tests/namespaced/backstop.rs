//! A Job that outlives its run lease's backstop (here: the lease's acquire time moved back two
//! days while the Job runs) still holds its object: the object's Job history, not the lease,
//! says a Job runs, so a change made meanwhile waits for it and no second Job runs beside it.

use captf_api::TerraformCluster;
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ListParams, Patch, PatchParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

fn running(job: &Job) -> bool {
    !job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

#[tokio::test]
async fn a_job_past_its_lease_backstop_still_holds_its_object() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("backstop", &[]).await;
    let name = "backstop";
    create_cluster(
        &client,
        &ns,
        name,
        IMAGE,
        "  variables: {sleep_seconds: 25, extra_exports: {token: one}}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let (_, first) = active_job(&api, name, &manager).await;

    // The run lease, as if its Job had run two days: past any backstop.
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let lease = ObjectKey::new(&ns, WorkloadKind::Cluster, name)
        .expect("key")
        .run_lease();
    let long_ago =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(48);
    leases
        .patch(
            &lease,
            &PatchParams::default(),
            // MicroTime: the API server takes exactly six fractional digits.
            &Patch::Merge(&serde_json::json!({"spec": {"acquireTime": MicroTime(long_ago)}})),
        )
        .await
        .expect("the lease moved back");
    merge_patch(
        &api,
        name,
        serde_json::json!({"spec": {"variables": {"extra_exports": {"token": "two"}}}}),
    )
    .await;

    // Until the first Job ends, it is the only one.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let applies = || async {
        jobs.list(&ListParams::default().labels(&format!("{}=apply", captf_api::labels::OP)))
            .await
            .map(|l| l.items)
    };
    wait_for("the first Job to end, alone", TIMEOUT, || async {
        let all = applies().await?;
        let others: Vec<_> = all
            .iter()
            .filter(|j| j.metadata.name.as_deref() != Some(first.as_str()))
            .filter_map(|j| j.metadata.name.clone())
            .collect();
        let first_runs = all
            .iter()
            .any(|j| j.metadata.name.as_deref() == Some(first.as_str()) && running(j));
        assert!(
            !first_runs || others.is_empty(),
            "{others:?} started while {first} ran\n{}",
            manager.log()
        );
        Ok((!first_runs).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    wait_until(&api, name, "the change applied after it", &manager, |t| {
        ready(t) && exports(t).contains("two")
    })
    .await;
}
