//! A manager killed at a point of a Job's start loses nothing and starts no second Job: the
//! manager that takes over finds what the dead one wrote, and the Job runs to the end with the
//! inputs it needs. A Job never waits on an input that was never written: the per-run Secret
//! is written before the Job, and handed to it once the Job exists.

use captf_api::TerraformCluster;
use captf_e2e::Manager;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

/// Kills the manager at `point` of the first apply's start, then lets another finish it.
async fn killed_at(point: &str) {
    let (env, client, ns) = namespace_with_identity(&format!("crash-{point}")).await;
    let kubeconfig = captf_e2e::manager_kubeconfig(&env, &client)
        .await
        .expect("manager RBAC");
    let scope = format!("--namespace={ns}");
    let mut dying =
        Manager::start_crashing_at(&env, &kubeconfig, &format!("{ns}-dying"), &[&scope], point)
            .expect("the manager to kill");
    let name = "crash";
    create_cluster(&client, &ns, name, IMAGE, "").await;
    let ended = dying.ended(TIMEOUT).await.expect("the manager killed");
    assert!(!ended.success(), "{point}: {ended:?}\n{}", dying.log());
    assert!(
        dying.whole_log().contains("crash point reached"),
        "{point}:\n{}",
        dying.log()
    );

    // What the dead manager left: the per-run Secret in either case, the Job only after it.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let applies = || async {
        jobs.list(&ListParams::default().labels(&format!("{}=apply", captf_api::labels::OP)))
            .await
            .expect("Jobs")
            .items
    };
    let left = applies().await;
    let expected_jobs = usize::from(point == "after-job");
    assert_eq!(left.len(), expected_jobs, "{point}: {left:?}");
    let run_secrets: Vec<String> = secrets
        .list(&ListParams::default().labels(&format!("{}=true", captf_api::labels::MANAGED)))
        .await
        .expect("Secrets")
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .filter(|n| n.starts_with("captf-run-"))
        .collect();
    assert_eq!(run_secrets.len(), 1, "{point}: {run_secrets:?}");

    // Another manager takes over: one apply Job, run to the end, its Secret deleted once booked.
    let manager = Manager::start(&env, &kubeconfig, &ns, &[&scope]).expect("manager");
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait_until(&api, name, "Ready", &manager, ready).await;
    let ran = applies().await;
    assert_eq!(ran.len(), 1, "{point}: one apply Job, not two: {ran:?}");
    if let Some(first) = left.first() {
        assert_eq!(
            ran[0].metadata.uid, first.metadata.uid,
            "{point}: the same Job"
        );
    }
    let run_secret = run_secrets[0].clone();
    wait_for(
        "the per-run Secret deleted once booked",
        TIMEOUT,
        || async { Ok(secrets.get_opt(&run_secret).await?.is_none().then_some(())) },
    )
    .await
    .unwrap_or_else(|e| panic!("{point}: {e}\nmanager log:\n{}", manager.log()));
}

#[tokio::test]
async fn killed_after_the_job_inputs_and_before_the_job() {
    killed_at("before-job").await;
}

#[tokio::test]
async fn killed_after_the_job_and_before_its_bookkeeping() {
    killed_at("after-job").await;
}
