//! Faults inside a running apply, on the real node: the runner's pod deleted (the kubelet sends
//! SIGTERM, the runner interrupts the engine), the engine killed outright (SIGKILL: it saves
//! nothing and leaves its state lock), and the engine killed between two chunks of a state it
//! is writing (Terraform splits states over 1 MiB). Each ends with the object Ready on the new
//! inputs, its state readable and newer than before, no two apply Jobs running at once, and
//! every apply Job counted once.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";
/// Terraform's backend splits a state over 1 MiB into chunks; OpenTofu's never does.
const TERRAFORM_IMAGE: &str = "captf.local/modules/noop-cluster:e2e-terraform";

/// Pids of the node's processes in pod `uid` with `program` as a word of their command line
/// (the program itself, or the script an interpreter runs: Terraform's `/captf/runtime` is a
/// Python script).
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
            (cgroup.contains(uid) || cgroup.contains(&systemd_uid))
                && cmdline.split(|b| *b == 0).any(|w| w == program.as_bytes())
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
    // once, the interrupted one too, once each has been booked (a Job still running, or just
    // finished, is counted at its bookkeeping).
    let series = "captf_jobs_total{kind=\"TerraformCluster\",op=\"apply\",";
    let counted_all = || async {
        let applies = jobs
            .list(&ListParams::default().labels(&format!("{}=apply", captf_api::labels::OP)))
            .await?
            .items
            .len();
        let metrics = captf_e2e::Manager::get(&manager.metrics)?;
        // Every result (succeeded, failed, deadline, interrupted) of the object's kind's applies.
        let counted: f64 = metrics
            .lines()
            .filter(|l| l.starts_with(series))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        anyhow::Ok((applies, counted, metrics))
    };
    let settled = captf_testenv::wait_for("every apply Job counted", TIMEOUT, || async {
        let (applies, counted, _) = counted_all().await?;
        Ok((counted == applies as f64).then_some(()))
    })
    .await;
    if let Err(e) = settled {
        let (applies, _, metrics) = counted_all().await.expect("metrics");
        panic!("{e}: {applies} apply Jobs, counted:\n{metrics}");
    }
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

/// An admission webhook that never answers, for the Secrets one state's chunks are created as:
/// the apiserver holds each such create (up to the webhook's 30 s timeout) on a connection the
/// test can see arrive, so the engine is caught between two chunk writes, every time.
struct HeldCreates {
    name: String,
    listener: std::net::TcpListener,
    held: Vec<std::net::TcpStream>,
}

impl HeldCreates {
    async fn start(client: &kube::Client, ns: &str, suffix: &str) -> HeldCreates {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("address").port();
        // Never used: the TLS handshake never gets an answer. The apiserver only parses it.
        let ca = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()])
            .expect("certificate")
            .cert
            .pem();
        let name = format!("captf-e2e-held-{ns}");
        let config: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "webhooks": [{
                "name": "held.e2e.captf.io",
                "clientConfig": {
                    "url": format!("https://127.0.0.1:{port}/held"),
                    "caBundle": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca),
                },
                "rules": [{
                    "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                    "resources": ["secrets"], "scope": "Namespaced",
                }],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                "objectSelector": {"matchLabels": {"tfstate": "true", "tfstateSecretSuffix": suffix}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 30,
            }],
        }))
        .expect("webhook configuration");
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &config)
            .await
            .expect("webhook configuration created");
        HeldCreates {
            name,
            listener,
            held: Vec::new(),
        }
    }

    /// Whether the apiserver has called the webhook: a create is being held.
    fn holding(&mut self) -> bool {
        while let Ok((stream, _)) = self.listener.accept() {
            self.held.push(stream);
        }
        !self.held.is_empty()
    }

    async fn stop(self, client: &kube::Client) {
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await
            .expect("webhook configuration deleted");
    }
}

/// The compressed size of every chunk of a state, in chunk order, and whether the set reads
/// as whole gzip.
async fn state_chunks(client: &kube::Client, ns: &str, suffix: &str) -> Vec<(String, usize)> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut chunks: Vec<(String, usize)> = secrets
        .list(&ListParams::default().labels(&format!("tfstate=true,tfstateSecretSuffix={suffix}")))
        .await
        .expect("state Secrets")
        .items
        .into_iter()
        .map(|s| {
            let size = s
                .data
                .as_ref()
                .and_then(|d| d.get("tfstate"))
                .map_or(0, |b| b.0.len());
            (s.metadata.name.unwrap_or_default(), size)
        })
        .collect();
    chunks.sort_by_key(|(n, _)| (n.len(), n.clone()));
    chunks
}

#[tokio::test]
async fn the_engine_killed_between_two_chunks_leaves_a_corrupt_state_a_restore_mends() {
    let scene = scene("torn-state", &[]).await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    let name = "torn";
    create_cluster(
        client,
        ns,
        name,
        TERRAFORM_IMAGE,
        "  variables: {extra_exports: {token: one}}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    let first = wait_until(&api, name, "Ready, its state backed up", manager, |t| {
        ready(t)
            && t.status.as_ref().is_some_and(|s| {
                s.workspace.observed_state_serial.is_some_and(|serial| {
                    s.workspace
                        .state_backups
                        .iter()
                        .flatten()
                        .any(|b| b.serial == serial)
                })
            })
    })
    .await;
    let before = serial(&first);
    let suffix = first
        .status
        .as_ref()
        .and_then(|s| s.workspace.state_secret_suffix.clone())
        .expect("state suffix");
    assert_eq!(
        state_chunks(client, ns, &suffix).await.len(),
        1,
        "one chunk"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let apply_jobs = || async {
        jobs.list(&ListParams::default().labels(&format!("{}=apply", captf_api::labels::OP)))
            .await
            .expect("Jobs")
            .items
            .len()
    };
    let applies = apply_jobs().await;

    // The next state needs two chunks: Terraform rewrites the base Secret with the first
    // 1 MiB of the new gzip stream, then creates `-part-1`, which is held until the engine
    // is dead.
    let mut held = HeldCreates::start(client, ns, &suffix).await;
    merge_patch(
        &api,
        name,
        serde_json::json!({"spec": {"variables": {"state_padding": 12, "extra_exports": {"token": "two"}}}}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_for("the engine writing its second chunk", TIMEOUT, || {
        let ready = held.holding();
        async move { Ok(ready.then_some(())) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let mut killed = 0;
    for pod in pods
        .list(&ListParams::default().labels(&format!("{}=apply", captf_api::labels::OP)))
        .await
        .expect("pods")
        .items
    {
        let uid = pod.metadata.uid.expect("uid");
        for pid in pod_processes(&uid, "/captf/runtime") {
            killed += 1;
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    assert!(killed > 0, "no engine process in the apply's pod");
    held.stop(client).await;

    // Torn: the base holds the head of a stream whose tail was never written. The held create
    // is refused once its webhook is gone; should the apiserver have let it through, the
    // chunk exists without data (Terraform writes data in an update after the create).
    let torn = state_chunks(client, ns, &suffix).await;
    let unwritten = match torn.as_slice() {
        [_] => "truncated",
        [_, (_, 0)] => "`tfstate`",
        _ => panic!("the second chunk was never written: {torn:?}"),
    };
    let held_object = wait_until(&api, name, "held on a torn state", manager, |t| {
        has(t, "StateReadable", "False", "StateCorrupt")
            || has(t, "StateReadable", "False", "StateInconsistent")
    })
    .await;
    let message = condition(&held_object, "StateReadable")
        .expect("condition")
        .2;
    assert!(
        message.contains(unwritten),
        "the message says why ({unwritten}): {message}"
    );
    assert_eq!(
        apply_jobs().await,
        applies + 1,
        "no Job runs on a torn state"
    );
    let backups = held_object
        .status
        .as_ref()
        .and_then(|s| s.workspace.state_backups.clone())
        .unwrap_or_default();
    assert!(
        backups.iter().any(|b| b.serial == before),
        "the last good serial's backup is kept: {backups:?}"
    );
    assert!(
        backups.iter().all(|b| b.serial <= before),
        "no backup of the torn state: {backups:?}"
    );

    // The documented way out: restore the last good serial; the change then applies again,
    // now whole, in two chunks.
    annotate(
        &api,
        name,
        "captf.io/restore-state",
        Some(&before.to_string()),
    )
    .await;
    recovered(&scene, name, before).await;
    let chunks = state_chunks(client, ns, &suffix).await;
    assert_eq!(chunks.len(), 2, "a state in two chunks: {chunks:?}");
}
