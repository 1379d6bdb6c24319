//! Faults inside a running apply, on the real node: the runner's pod deleted (the kubelet sends
//! SIGTERM, the runner interrupts the engine), and the engine killed outright (SIGKILL: it
//! saves nothing and leaves its state lock). Each ends with the object Ready on the new
//! inputs, its state readable and newer than before, no two apply Jobs running at once, and
//! every apply Job counted once.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

/// Pids of the node's processes in pod `uid` whose program is `program`.
fn pod_processes(uid: &str, program: &str) -> Vec<i32> {
    let systemd_uid = uid.replace('-', "_");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let first = cmdline.split(|b| *b == 0).next().unwrap_or_default();
            (cgroup.contains(uid) || cgroup.contains(&systemd_uid)) && first == program.as_bytes()
        })
        .collect()
}

fn serial(tc: &TerraformCluster) -> i64 {
    tc.status
        .as_ref()
        .and_then(|s| s.workspace.observed_state_serial)
        .unwrap_or(0)
}

fn active(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.active)
        .is_some_and(|a| a > 0)
}

/// A Ready cluster whose next apply sleeps; returns it once that apply's engine runs the
/// sleep, with the Job's pod UID and the serial before it.
async fn mid_apply(scene: &Scene, name: &str) -> (String, i64) {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene;
    create_cluster(
        client,
        ns,
        name,
        IMAGE,
        "  variables: {extra_exports: {token: one}}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    let before = serial(&wait_until(&api, name, "Ready", manager, ready).await);
    merge_patch(
        &api,
        name,
        serde_json::json!({"spec": {"variables": {"sleep_seconds": 15, "extra_exports": {"token": "two"}}}}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let uid = wait_for("the apply's engine sleeping", TIMEOUT, || async {
        let listed = pods
            .list(&ListParams::default().labels(&format!("{}=apply", captf_api::labels::OP)))
            .await?;
        Ok(listed.items.into_iter().find_map(|p| {
            let uid = p.metadata.uid?;
            (!pod_processes(&uid, "sleep").is_empty()).then_some(uid)
        }))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    (uid, before)
}

/// Waits for the change to be applied after the fault, checking no two applies ran at once.
async fn recovered(scene: &Scene, name: &str, before: i64) {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    wait_for("Ready on the new inputs", TIMEOUT * 2, || async {
        let running = jobs
            .list(&ListParams::default().labels(&format!("{}=apply", captf_api::labels::OP)))
            .await?
            .items
            .iter()
            .filter(|j| active(j))
            .count();
        assert!(
            running <= 1,
            "{running} apply Jobs at once\n{}",
            manager.log()
        );
        let tc = api.get(name).await?;
        Ok((ready(&tc) && exports(&tc).contains("two")).then_some(tc))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let tc = api.get(name).await.expect("the cluster");
    assert!(
        has(&tc, "StateReadable", "True", "StateRead"),
        "{:?}",
        tc.status
    );
    assert!(
        serial(&tc) > before,
        "serial {} after {before}",
        serial(&tc)
    );
    // Every apply Job (at most three here: the history keeps three of each result) is counted
    // once, the interrupted one too.
    let applies = jobs
        .list(&ListParams::default().labels(&format!("{}=apply", captf_api::labels::OP)))
        .await
        .expect("Jobs")
        .items
        .len();
    let metrics = captf_e2e::Manager::get(&manager.metrics).expect("metrics");
    // Every result (succeeded, failed, deadline, interrupted) of the object's kind's applies.
    let series = "captf_jobs_total{kind=\"TerraformCluster\",op=\"apply\",";
    let counted: f64 = metrics
        .lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(
        counted, applies as f64,
        "{applies} apply Jobs, counted:\n{metrics}"
    );
}

#[tokio::test]
async fn a_runner_pod_deleted_mid_apply_loses_nothing() {
    let scene = scene("pod-killed", &[]).await;
    let name = "podkilled";
    let (uid, before) = mid_apply(&scene, name).await;
    let pods: Api<Pod> = Api::namespaced(scene.client.clone(), &scene.ns);
    let pod = pods
        .list(&ListParams::default().labels(&format!("{}=apply", captf_api::labels::OP)))
        .await
        .expect("pods")
        .items
        .into_iter()
        .find(|p| p.metadata.uid.as_deref() == Some(uid.as_str()))
        .and_then(|p| p.metadata.name)
        .expect("the apply's pod");
    pods.delete(&pod, &DeleteParams::default())
        .await
        .expect("the pod deleted");
    // No JobInterrupted event is awaited: the runner's result is in the pod's status only
    // until the deleted pod is gone, which can be before the manager reads it.
    recovered(&scene, name, before).await;
}

#[tokio::test]
async fn the_engine_killed_mid_apply_leaves_a_state_the_next_attempt_reads() {
    let scene = scene("engine-killed", &[]).await;
    let name = "enginekilled";
    let (uid, before) = mid_apply(&scene, name).await;
    let engines = pod_processes(&uid, "/captf/runtime");
    assert!(!engines.is_empty(), "no engine process in pod {uid}");
    for pid in engines {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    recovered(&scene, name, before).await;
}
