//! TerraformMachine through the real control plane, with a Machine made by hand as CAPI
//! would make it: the bootstrap data and the cluster's exports reach the module, the identity
//! is inherited from the cluster, `spec.providerID` is written once, and deleting the object
//! destroys what it created. Unhealthy machines ask CAPI for remediation.

use base64::Engine;
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_api::{TerraformCluster, TerraformMachine};
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams};

const MACHINE_IMAGE: &str = "captf.local/modules/noop-machine:e2e";

#[tokio::test]
async fn a_machine_applies_once_with_its_inputs_and_is_destroyed_on_delete() {
    let (scene, cluster) = ready_cluster("machine").await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    let name = "machine-0";
    write_bootstrap(client, ns, name).await;
    // No identityRef: the machine runs with its cluster's identity.
    create_machine(
        client,
        ns,
        &cluster,
        name,
        MACHINE_IMAGE,
        "  failureDomain: fd-a\n  version: v1.31.2",
        "",
    )
    .await;
    let api: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);
    let tm = wait_until(&api, name, "the machine Ready", manager, ready).await;

    assert_eq!(
        tm.spec.provider_id.as_deref(),
        Some(format!("noop:///{ns}/{name}").as_str()),
        "spec.providerID is written from the module's output"
    );
    let status = tm.status.clone().expect("status");
    assert_eq!(
        status.workspace.initialization.and_then(|i| i.provisioned),
        Some(true)
    );
    assert_eq!(status.failure_domain.as_deref(), Some("fd-a"));
    let addresses = serde_json::to_value(&status.addresses).expect("json");
    assert_eq!(
        addresses,
        serde_json::json!([{"type": "InternalIP", "address": "10.0.0.1"}])
    );
    assert!(has(&tm, "InfrastructureHealthy", "True", "Healthy"));
    assert!(has(&tm, "DependenciesReady", "True", "DependenciesReady"));

    // What the module got: the bootstrap data (base64 of the raw bytes), its format, the
    // Machine's facts and the cluster's exports read from the cluster's state.
    let (tfvars, _) = durable_inputs(client, ns, WorkloadKind::Machine, name).await;
    assert_eq!(
        tfvars["bootstrap_data"],
        base64::engine::general_purpose::STANDARD.encode(BOOTSTRAP_DATA)
    );
    assert_eq!(tfvars["bootstrap_format"], "cloud-config");
    assert_eq!(tfvars["machine_name"], name);
    assert_eq!(tfvars["failure_domain"], "fd-a");
    assert_eq!(tfvars["kubernetes_version"], "v1.31.2");
    assert_eq!(tfvars["control_plane"], false);
    let clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    let tc = clusters.get(&cluster).await.expect("cluster");
    let exports = tc.status.and_then(|s| s.exports).expect("cluster exports");
    assert_eq!(
        tfvars["captf_cluster_outputs"]["backend_id"],
        exports["backend_id"]
    );

    let prefix = format!("captf-m-{name}-");
    let applies: Vec<String> = job_names(client, ns)
        .await
        .into_iter()
        .filter(|j| j.starts_with(&format!("{prefix}apply-")))
        .collect();
    assert_eq!(applies.len(), 1, "a machine applies once: {applies:?}");

    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete the TerraformMachine");
    wait_for("the TerraformMachine gone", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    // The Jobs went with the object; the manager counted the destroy.
    let metrics = captf_e2e::Manager::get(&manager.metrics).expect("metrics");
    let destroyed =
        "captf_jobs_total{kind=\"TerraformMachine\",op=\"destroy\",result=\"succeeded\"}";
    assert_eq!(
        sample(&metrics, destroyed),
        Some(1.0),
        "the machine was destroyed:\n{metrics}"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let key = ObjectKey::new(ns, WorkloadKind::Machine, name).expect("key");
    for secret in [key.state_secret(), key.durable_inputs_secret()] {
        assert!(
            secrets.get_opt(&secret).await.expect("read").is_none(),
            "{secret} is cleaned up with the machine"
        );
    }
}

#[tokio::test]
async fn machines_wait_for_bootstrap_data_refresh_while_pending_and_ask_for_remediation() {
    let (scene, cluster) = ready_cluster("machinehealth").await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    let api: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);

    // Pending until a little after the apply: the apply reads pending, refreshes follow.
    let pending_until = k8s_openapi::jiff::Timestamp::now()
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(40))
        .expect("time");
    let pending = "pending";
    create_machine(
        client,
        ns,
        &cluster,
        pending,
        MACHINE_IMAGE,
        "",
        &format!("  variables: {{pending_until: \"{pending_until}\"}}"),
    )
    .await;
    // Degraded from the start, with remediation at the first unhealthy sample.
    let degraded = "degraded";
    write_bootstrap(client, ns, degraded).await;
    create_machine(
        client,
        ns,
        &cluster,
        degraded,
        MACHINE_IMAGE,
        "",
        "  variables: {health_state: degraded}\n  remediation: {annotateMachine: true, unhealthyThreshold: 1}",
    )
    .await;

    let waiting = wait_until(&api, pending, "WaitingForBootstrapData", manager, |m| {
        has(m, "DependenciesReady", "Unknown", "WaitingForBootstrapData")
    })
    .await;
    let (_, _, message) = condition(&waiting, "DependenciesReady").expect("condition");
    assert!(message.contains("pending-bootstrap"), "{message}");
    assert!(
        !job_names(client, ns)
            .await
            .iter()
            .any(|j| j.starts_with("captf-m-pending-")),
        "nothing runs without bootstrap data"
    );

    // The degraded machine is provisioned, not Ready, and its Machine is marked for CAPI's
    // remediation (an apply's definite reading is its first sample).
    let tm = wait_until(&api, degraded, "InstanceDegraded", manager, |m| {
        has(m, "InfrastructureHealthy", "False", "InstanceDegraded")
            && m.status.as_ref().and_then(|s| s.unhealthy_samples) == Some(1)
    })
    .await;
    assert!(
        condition(&tm, "Ready").is_some_and(|c| c.0 == "False"),
        "a degraded machine is not Ready"
    );
    assert_eq!(
        remediation_requested(client, ns, degraded, manager)
            .await
            .as_deref(),
        Some("InstanceDegraded")
    );
    event(client, ns, "RemediationRequested").await;

    // Bootstrap data arrives: the apply reads pending, refreshes follow until running.
    write_bootstrap(client, ns, pending).await;
    wait_until(&api, pending, "InstancePending", manager, |m| {
        has(m, "InfrastructureHealthy", "False", "InstancePending")
    })
    .await;
    let tm = wait_until(&api, pending, "Healthy after a refresh", manager, ready).await;
    assert_eq!(
        tm.status
            .as_ref()
            .and_then(|s| s.workspace.initialization.as_ref())
            .and_then(|i| i.provisioned),
        Some(true)
    );
    let names = job_names(client, ns).await;
    assert!(
        names
            .iter()
            .any(|j| j.starts_with("captf-m-pending-refresh-")),
        "a refresh read the running instance: {names:?}"
    );
}

/// When the newest Job whose name starts with `prefix` was created, and when it completed.
async fn job_times(
    client: &kube::Client,
    ns: &str,
    prefix: &str,
) -> Option<(
    k8s_openapi::jiff::Timestamp,
    Option<k8s_openapi::jiff::Timestamp>,
)> {
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), ns);
    let list = jobs.list(&Default::default()).await.ok()?.items;
    list.into_iter()
        .filter(|j| {
            j.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(prefix))
        })
        .filter_map(|j| {
            let created = j.metadata.creation_timestamp.as_ref()?.0;
            let finished = j
                .status
                .as_ref()
                .and_then(|s| s.completion_time.as_ref())
                .map(|t| t.0);
            Some((created, finished))
        })
        .max_by_key(|(created, _)| *created)
}

#[tokio::test]
async fn the_cluster_write_lease_orders_cluster_and_machine_writes() {
    let (scene, cluster) = ready_cluster("writelease").await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    let machines: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);
    let clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);

    // A slow machine apply runs when the cluster's inputs change: the cluster waits for it.
    write_bootstrap(client, ns, "slow").await;
    create_machine(
        client,
        ns,
        &cluster,
        "slow",
        MACHINE_IMAGE,
        "",
        "  variables: {sleep_seconds: 40}",
    )
    .await;
    wait_for("the slow machine's apply running", TIMEOUT, || async {
        Ok(job_times(client, ns, "captf-m-slow-apply-")
            .await
            .filter(|(_, done)| done.is_none()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    merge_patch(
        &clusters,
        &cluster,
        serde_json::json!({"spec": {"variables": {"sleep_seconds": 30}}}),
    )
    .await;
    let waiting = wait_until(
        &clusters,
        &cluster,
        "WaitingForMachineOperations",
        manager,
        |t| {
            has(
                t,
                "ApplyJobSucceeded",
                "Unknown",
                "WaitingForMachineOperations",
            )
        },
    )
    .await;
    let (_, _, message) = condition(&waiting, "ApplyJobSucceeded").expect("condition");
    assert!(message.contains("captf-m-slow-apply-"), "{message}");

    // The cluster applies only once the machine's apply finished.
    let cluster_apply = format!("captf-c-{cluster}-apply-");
    let (cluster_started, _) = wait_for("the cluster's second apply", TIMEOUT, || async {
        let jobs = job_names(client, ns).await;
        let applies = jobs
            .iter()
            .filter(|j| j.starts_with(&cluster_apply))
            .count();
        Ok(if applies >= 2 {
            job_times(client, ns, &cluster_apply).await
        } else {
            None
        })
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let (_, slow_done) = job_times(client, ns, "captf-m-slow-apply-")
        .await
        .expect("slow apply");
    assert!(
        slow_done.is_some_and(|d| d <= cluster_started),
        "the cluster applied while the machine wrote: machine done {slow_done:?}, cluster started {cluster_started}"
    );

    // A machine created while the cluster writes waits for it, and reads nothing of the
    // cluster's state meanwhile: its dependencies (the exports) are not known yet.
    write_bootstrap(client, ns, "late").await;
    create_machine(client, ns, &cluster, "late", MACHINE_IMAGE, "", "").await;
    let late = wait_until(
        &machines,
        "late",
        "WaitingForClusterOperation",
        manager,
        |m| {
            has(
                m,
                "ApplyJobSucceeded",
                "Unknown",
                "WaitingForClusterOperation",
            )
        },
    )
    .await;
    let (_, _, message) = condition(&late, "ApplyJobSucceeded").expect("condition");
    assert!(
        message.contains(&format!(
            "TerraformCluster {cluster}: its Job captf-c-{cluster}-apply-"
        )) && message.contains("may be writing its state"),
        "{message}"
    );
    assert!(
        condition(&late, "DependenciesReady").is_none_or(|c| c.0 != "True"),
        "the exports were read while the cluster's Job ran: {:?}",
        condition(&late, "DependenciesReady")
    );
    wait_until(&machines, "late", "the late machine Ready", manager, ready).await;
    let (_, cluster_done) = job_times(client, ns, &cluster_apply)
        .await
        .expect("cluster apply");
    let (late_started, _) = job_times(client, ns, "captf-m-late-apply-")
        .await
        .expect("late apply");
    assert!(
        cluster_done.is_some_and(|d| d <= late_started),
        "the machine applied while the cluster wrote: cluster done {cluster_done:?}, machine started {late_started}"
    );
    wait_until(
        &clusters,
        &cluster,
        "the cluster Ready again",
        manager,
        ready,
    )
    .await;
}

/// An instance that disappears out of band: the module's `provider_id` reads empty on a drift
/// check, which is first only suspicious (`ProviderIDMissing`); the refresh that follows reads
/// it empty again and the instance counts as terminated, which asks CAPI for remediation at
/// once. `spec.providerID` is kept.
#[tokio::test]
async fn an_instance_gone_out_of_band_is_terminated_after_two_empty_reads() {
    let (scene, cluster) = ready_cluster("machine-gone").await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    let name = "gone";
    write_bootstrap(client, ns, name).await;
    // Gone a little after the apply; the first drift check (60 s) finds it gone.
    let gone_after = k8s_openapi::jiff::Timestamp::now()
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(30))
        .expect("time");
    create_machine(
        client,
        ns,
        &cluster,
        name,
        MACHINE_IMAGE,
        "",
        &format!(
            "  variables: {{gone_after: \"{gone_after}\"}}\n  drift: {{intervalSeconds: 60}}\n  remediation: {{annotateMachine: true}}"
        ),
    )
    .await;
    let api: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);
    let provisioned = wait_until(&api, name, "the machine Ready", manager, ready).await;
    let provider_id = provisioned.spec.provider_id.clone();
    assert_eq!(
        provider_id.as_deref(),
        Some(format!("noop:///{ns}/{name}").as_str())
    );

    let missing = wait_until(&api, name, "ProviderIDMissing", manager, |m| {
        has(m, "InfrastructureHealthy", "Unknown", "ProviderIDMissing")
    })
    .await;
    let (_, _, message) = condition(&missing, "InfrastructureHealthy").expect("condition");
    assert!(message.contains("provider_id output is empty"), "{message}");
    let terminated = wait_until(&api, name, "InstanceTerminated", manager, |m| {
        has(m, "InfrastructureHealthy", "False", "InstanceTerminated")
    })
    .await;
    assert_eq!(
        terminated.spec.provider_id, provider_id,
        "spec.providerID is kept"
    );
    assert!(!ready(&terminated));

    assert_eq!(
        remediation_requested(client, ns, name, manager)
            .await
            .as_deref(),
        Some("InstanceTerminated")
    );
}

/// A machine's first apply deleted while it runs: as for clusters and pools, recorded and run
/// again under a new name (a machine still renders its inputs until it is provisioned).
#[tokio::test]
async fn a_machine_apply_deleted_mid_run_runs_again() {
    let (scene, cluster) = ready_cluster("machine-lost").await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    let name = "slow";
    write_bootstrap(client, ns, name).await;
    create_machine(
        client,
        ns,
        &cluster,
        name,
        MACHINE_IMAGE,
        "",
        "  variables: {sleep_seconds: 120}",
    )
    .await;
    let api: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);
    delete_apply_mid_run(&api, client, name, manager, |m| {
        m.status.as_ref().map(|s| &s.workspace)
    })
    .await;
}
