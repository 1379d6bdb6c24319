//! Two managers with leader election: only the leader reconciles, both answer probes, and when
//! the leader dies during an apply the other takes over, finds the running Job by its name,
//! starts no second one and records the result once.

use std::time::{Duration, Instant};

use captf_api::TerraformCluster;
use captf_e2e::fixture::{
    TIMEOUT, create_cluster, has, namespace_with_identity, sample, wait_until,
};
use captf_e2e::{Manager, manager_kubeconfig};
use captf_testenv::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};

/// The election's lease duration (the manager's default) and what a takeover may add to it:
/// the candidates' retry period and the time to start the controllers.
const LEASE: Duration = Duration::from_secs(15);
const TAKEOVER_MARGIN: Duration = Duration::from_secs(15);

async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

#[tokio::test]
async fn the_standby_takes_over_a_running_apply_without_starting_a_second_job() {
    let (env, client, ns) = namespace_with_identity("failover").await;
    let kubeconfig = manager_kubeconfig(&env, &client).await.expect("RBAC");
    let lease_name = format!("captf-e2e-{ns}");
    let flags = [
        format!("--namespace={ns}"),
        "--leader-elect".to_owned(),
        format!("--leader-elect-lease-name={lease_name}"),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let names = [format!("{ns}-a"), format!("{ns}-b")];
    let mut managers: Vec<Manager> = names
        .iter()
        .map(|n| Manager::start(&env, &kubeconfig, n, &flags).expect("manager"))
        .collect();

    // Both serve probes, leader or not.
    for manager in &managers {
        for probe in ["healthz", "readyz"] {
            let url = format!("{}/{probe}", manager.health);
            wait_for(&format!("{url} to answer ok"), TIMEOUT, || async {
                Ok(Manager::get(&url).ok().filter(|b| b.trim() == "ok"))
            })
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", manager.log()));
        }
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), "captf-system");
    let first = wait_for("a leader", TIMEOUT, || async {
        Ok(holder(&leases, &lease_name).await)
    })
    .await
    .expect("leader");
    let leader = names
        .iter()
        .position(|n| first == format!("manager-{n}"))
        .unwrap_or_else(|| panic!("holder {first} is none of {names:?}"));
    // From here on: the leader, and the standby that must take over.
    let follower = managers.remove(1 - leader);
    let leading = managers.remove(0);
    let standby_identity = format!("manager-{}", names[1 - leader]);

    let name = "failover";
    create_cluster(
        &client,
        &ns,
        name,
        "captf.local/modules/noop-cluster:e2e",
        "  variables: {sleep_seconds: 30}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let running = wait_until(&api, name, "the leader's apply Job", &leading, |t| {
        t.status
            .as_ref()
            .is_some_and(|s| s.workspace.active_job.is_some())
    })
    .await;
    let job = running
        .status
        .and_then(|s| s.workspace.active_job)
        .expect("active Job")
        .name;
    let metrics = Manager::get(&follower.metrics).expect("standby metrics");
    assert!(
        !metrics.contains("captf_reconcile_op_decisions_total{"),
        "the standby decided something:\n{metrics}"
    );

    // Kill the leader mid-apply (SIGKILL: no chance to hand over).
    drop(leading);
    let killed = Instant::now();
    wait_for(
        "the standby to take the lease",
        LEASE + TAKEOVER_MARGIN,
        || async {
            Ok(
                (holder(&leases, &lease_name).await.as_deref() == Some(standby_identity.as_str()))
                    .then_some(()),
            )
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nstandby log:\n{}", follower.log()));
    let took = killed.elapsed();

    let done = wait_until(&api, name, "Ready under the new leader", &follower, |t| {
        has(t, "Ready", "True", "Ready")
    })
    .await;
    assert_eq!(
        done.status
            .as_ref()
            .and_then(|s| s.workspace.last_run.as_ref())
            .map(|r| r.job.as_str()),
        Some(job.as_str()),
        "the new leader recorded the running Job's result"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let all: Vec<String> = jobs
        .list(&ListParams::default())
        .await
        .expect("Jobs")
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    assert_eq!(all, vec![job.clone()], "no second Job was started");
    let metrics = Manager::get(&follower.metrics).expect("metrics");
    assert_eq!(
        sample(
            &metrics,
            "captf_jobs_total{kind=\"TerraformCluster\",op=\"apply\",result=\"succeeded\"}"
        ),
        Some(1.0),
        "bookkept once:\n{metrics}"
    );
    assert!(took <= LEASE + TAKEOVER_MARGIN, "takeover took {took:?}");
}

/// SIGTERM, as in a rolling update: the leader lets its running passes end, releases the Lease
/// and exits 0, and the standby takes over at its next look at the Lease rather than when the
/// Lease would have run out (two minutes here), then finishes the running apply.
#[tokio::test]
async fn a_stopped_leader_hands_the_lease_over_at_once() {
    let (env, client, ns) = namespace_with_identity("handover").await;
    let kubeconfig = manager_kubeconfig(&env, &client).await.expect("RBAC");
    let lease_name = format!("captf-e2e-{ns}");
    let flags = [
        format!("--namespace={ns}"),
        "--leader-elect".to_owned(),
        format!("--leader-elect-lease-name={lease_name}"),
        "--leader-elect-lease-duration=120s".to_owned(),
        "--leader-elect-renew-deadline=100s".to_owned(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let names = [format!("{ns}-a"), format!("{ns}-b")];
    let mut managers: Vec<Manager> = names
        .iter()
        .map(|n| Manager::start(&env, &kubeconfig, n, &flags).expect("manager"))
        .collect();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "captf-system");
    let first = wait_for("a leader", TIMEOUT, || async {
        Ok(holder(&leases, &lease_name).await)
    })
    .await
    .expect("leader");
    let leader = names
        .iter()
        .position(|n| first == format!("manager-{n}"))
        .unwrap_or_else(|| panic!("holder {first} is none of {names:?}"));
    let follower = managers.remove(1 - leader);
    let mut leading = managers.remove(0);
    let standby_identity = format!("manager-{}", names[1 - leader]);

    let name = "handover";
    create_cluster(
        &client,
        &ns,
        name,
        "captf.local/modules/noop-cluster:e2e",
        "  variables: {sleep_seconds: 10}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let running = wait_until(&api, name, "the leader's apply Job", &leading, |t| {
        t.status
            .as_ref()
            .is_some_and(|s| s.workspace.active_job.is_some())
    })
    .await;
    let job = running
        .status
        .and_then(|s| s.workspace.active_job)
        .expect("active Job")
        .name;

    let stopped = Instant::now();
    let status = leading
        .terminate(Duration::from_secs(30))
        .await
        .expect("the leader exits");
    assert!(status.success(), "exit {status}:\n{}", leading.log());
    assert!(
        leading
            .whole_log()
            .contains("released the leader-election Lease"),
        "{}",
        leading.log()
    );
    // Without the release the standby would wait for the Lease to run out: 120 s after the
    // leader's last renewal, which was its acquisition a few seconds before the cluster.
    let handover = Duration::from_secs(30);
    wait_for(
        "the standby to take the released lease",
        handover,
        || async {
            Ok(
                (holder(&leases, &lease_name).await.as_deref() == Some(standby_identity.as_str()))
                    .then_some(()),
            )
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nstandby log:\n{}", follower.log()));
    let took = stopped.elapsed();
    assert!(took < handover, "handover took {took:?}");

    let done = wait_until(&api, name, "Ready under the new leader", &follower, |t| {
        has(t, "Ready", "True", "Ready")
    })
    .await;
    assert_eq!(
        done.status
            .as_ref()
            .and_then(|s| s.workspace.last_run.as_ref())
            .map(|r| r.job.as_str()),
        Some(job.as_str()),
        "the new leader recorded the running Job's result"
    );
}
