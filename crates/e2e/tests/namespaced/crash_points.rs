//! A manager killed at a point of a Job's start or of its bookkeeping loses nothing, starts no
//! second Job and counts the Job once: the manager that takes over finds what the dead one
//! wrote, the Job runs to the end with the inputs it needs, and it is booked exactly once. A
//! Job never waits on an input that was never written: the per-run Secret is written before
//! the Job, and handed to it once the Job exists.

use captf_api::TerraformCluster;
use captf_e2e::Manager;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

/// What a manager killed at a point leaves behind.
struct Left {
    /// Apply Jobs.
    jobs: usize,
    /// Per-run Secrets: the fewest and the most (the inputs are written at once, so a crash
    /// while they are written may leave some of them).
    run_secrets: (usize, usize),
    /// The Job was booked (its status recorded and it was counted) before the crash.
    counted: bool,
}

/// Kills the manager at `point` of the first apply, then lets another finish it.
async fn killed_at(point: &str, left: Left) {
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

    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let applies = || async {
        jobs.list(&ListParams::default().labels(&format!("{}=apply", captf_api::labels::OP)))
            .await
            .expect("Jobs")
            .items
    };
    let found = applies().await;
    assert_eq!(found.len(), left.jobs, "{point}: {found:?}");
    let run_secrets: Vec<String> = secrets
        .list(&ListParams::default().labels(&format!("{}=true", captf_api::labels::MANAGED)))
        .await
        .expect("Secrets")
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .filter(|n| n.starts_with("captf-run-"))
        .collect();
    let (fewest, most) = left.run_secrets;
    assert!(
        (fewest..=most).contains(&run_secrets.len()),
        "{point}: {run_secrets:?}"
    );

    // Another manager takes over: one apply Job, run to the end, booked once, its per-run
    // Secret deleted.
    let manager = Manager::start(&env, &kubeconfig, &ns, &[&scope]).expect("manager");
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait_until(&api, name, "Ready", &manager, ready).await;
    let ran = applies().await;
    assert_eq!(ran.len(), 1, "{point}: one apply Job, not two: {ran:?}");
    if let Some(first) = found.first() {
        assert_eq!(
            ran[0].metadata.uid, first.metadata.uid,
            "{point}: the same Job"
        );
    }
    let job = ran[0].metadata.name.clone().expect("name");
    let run_secret = captf_api::names::per_run_secret(&job);
    wait_for(
        "the Job bookkept and its per-run Secret deleted",
        TIMEOUT,
        || async {
            let booked = jobs
                .get(&job)
                .await?
                .metadata
                .annotations
                .is_some_and(|a| a.contains_key("captf.io/bookkept"));
            let gone = secrets.get_opt(&run_secret).await?.is_none();
            Ok((booked && gone).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{point}: {e}\nmanager log:\n{}", manager.log()));
    // Counted by the dead manager, or by this one: never by both.
    let metrics = Manager::get(&manager.metrics).expect("metrics");
    let series = "captf_jobs_total{kind=\"TerraformCluster\",op=\"apply\",result=\"succeeded\"}";
    let here = sample(&metrics, series).unwrap_or(0.0);
    let want = if left.counted { 0.0 } else { 1.0 };
    assert_eq!(here, want, "{point}: {series}\n{metrics}");
    let tc = api.get(name).await.expect("the cluster");
    let last = tc
        .status
        .and_then(|s| s.workspace.last_run)
        .expect("lastRun");
    assert_eq!(last.job, job, "{point}: status.lastRun");
}

#[tokio::test]
async fn killed_after_the_run_lease() {
    let left = Left {
        jobs: 0,
        run_secrets: (0, 0),
        counted: false,
    };
    killed_at("after-run-lease", left).await;
}

#[tokio::test]
async fn killed_after_block_move() {
    let left = Left {
        jobs: 0,
        run_secrets: (0, 1),
        counted: false,
    };
    killed_at("after-block-move", left).await;
}

#[tokio::test]
async fn killed_after_the_job_inputs_and_before_the_job() {
    let left = Left {
        jobs: 0,
        run_secrets: (1, 1),
        counted: false,
    };
    killed_at("before-job", left).await;
}

#[tokio::test]
async fn killed_after_the_job_and_before_its_bookkeeping() {
    let left = Left {
        jobs: 1,
        run_secrets: (1, 1),
        counted: false,
    };
    killed_at("after-job", left).await;
}

#[tokio::test]
async fn killed_after_the_status_patch_and_before_the_bookkept_marker() {
    let left = Left {
        jobs: 1,
        run_secrets: (1, 1),
        counted: true,
    };
    killed_at("after-status-patch", left).await;
}

#[tokio::test]
async fn killed_after_the_bookkept_marker() {
    let left = Left {
        jobs: 1,
        run_secrets: (1, 1),
        counted: true,
    };
    killed_at("after-bookkept-marker", left).await;
}
