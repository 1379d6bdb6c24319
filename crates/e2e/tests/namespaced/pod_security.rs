//! Pod Security for real: the API server's Pod Security admission judges the Job pods the
//! manager creates, and what the runtime gives the containers is read back from containerd and
//! from the running process, not from the pod spec.
//!
//! - a namespace enforcing `restricted` runs a Job of a non-root module image with the
//!   documented `spec.jobs.podSecurityContext` (docs/reference/job.md#security);
//! - a namespace enforcing `baseline` runs a Job with the defaults alone;
//! - the running main container has no capabilities, no privilege escalation, a seccomp filter
//!   and a read-only root file system, as its runtime spec says.

use captf_api::TerraformCluster;
use captf_e2e::fixture::{TIMEOUT, condition, create_cluster, scene};
use captf_testenv::wait_for;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};

async fn enforce(client: &kube::Client, ns: &str, level: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": level,
                "pod-security.kubernetes.io/enforce-version": "latest",
            }}})),
        )
        .await
        .expect("label the namespace");
}

async fn wait_ready(api: &Api<TerraformCluster>, name: &str, manager: &captf_e2e::Manager) {
    wait_for("the TerraformCluster to be Ready", TIMEOUT, || async {
        let tc = api.get(name).await?;
        Ok(condition(&tc, "Ready")
            .filter(|c| c.0 == "True")
            .map(|_| ()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
}

/// The running main container of the apply Job's pod: (pod, containerd container id).
async fn running_main(client: &kube::Client, ns: &str) -> anyhow::Result<Option<(Pod, String)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels("captf.infrastructure.cluster.x-k8s.io/op=apply"))
        .await?;
    Ok(list.items.into_iter().find_map(|pod| {
        let status = pod
            .status
            .as_ref()?
            .container_statuses
            .as_ref()?
            .first()?
            .clone();
        status.state.as_ref()?.running.as_ref()?;
        let id = status
            .container_id?
            .strip_prefix("containerd://")?
            .to_owned();
        Some((pod, id))
    }))
}

/// A `/proc/<pid>/status` field.
fn proc_field(pid: u32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_restricted_namespace_runs_a_non_root_module_image_with_the_documented_context() {
    let scene = scene("psa-restricted", &[]).await;
    let (client, ns) = (&scene.client, scene.ns.as_str());
    enforce(client, ns, "restricted").await;
    // The time module sleeps inside its apply, so the container is caught running.
    create_cluster(
        client,
        ns,
        "locked-down",
        "captf.local/modules/time-cluster:e2e",
        "  variables: {sleep_seconds: 15}\n  jobs:\n    podSecurityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532}",
    )
    .await;
    let (pod, id) = wait_for("the apply's engine to run", TIMEOUT, || {
        running_main(client, ns)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", scene.manager.log()));

    // What containerd was told to create.
    let info: serde_json::Value = serde_json::from_str(
        &scene
            .env
            .ctr(&["containers", "info", &id])
            .expect("ctr info"),
    )
    .expect("container info JSON");
    let spec = &info["Spec"];
    assert_eq!(spec["root"]["readonly"], true, "{spec:#}");
    assert_eq!(spec["process"]["noNewPrivileges"], true, "{spec:#}");
    assert_eq!(spec["process"]["user"]["uid"], 65532, "{spec:#}");
    for set in ["bounding", "effective", "permitted"] {
        let caps = spec["process"]["capabilities"][set]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(caps.is_empty(), "{set} capabilities: {caps:?}");
    }
    assert_eq!(
        spec["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ERRNO",
        "{spec:#}"
    );

    // What the running process has.
    let tasks = scene.env.ctr(&["tasks", "ls"]).expect("ctr tasks ls");
    let pid: u32 = tasks
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some(id.as_str()))
                .then(|| f.next()?.parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no task {id} in:\n{tasks}"));
    assert_eq!(proc_field(pid, "CapEff"), "0000000000000000");
    assert_eq!(proc_field(pid, "CapBnd"), "0000000000000000");
    assert_eq!(proc_field(pid, "NoNewPrivs"), "1");
    assert_eq!(proc_field(pid, "Seccomp"), "2", "a seccomp filter");
    assert!(
        proc_field(pid, "Uid").starts_with("65532"),
        "{}",
        proc_field(pid, "Uid")
    );
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
    let root = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .expect("a root mount");
    assert!(
        root.split_whitespace()
            .nth(5)
            .is_some_and(|o| o.split(',').any(|o| o == "ro")),
        "root mount: {root}"
    );
    assert_eq!(pod.metadata.namespace.as_deref(), Some(ns));

    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    wait_ready(&api, "locked-down", &scene.manager).await;
}

#[tokio::test]
async fn the_defaults_pass_baseline() {
    let scene = scene("psa-baseline", &[]).await;
    enforce(&scene.client, &scene.ns, "baseline").await;
    create_cluster(
        &scene.client,
        &scene.ns,
        "defaults",
        "captf.local/modules/noop-cluster:e2e",
        "",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(scene.client.clone(), &scene.ns);
    wait_ready(&api, "defaults", &scene.manager).await;
}
