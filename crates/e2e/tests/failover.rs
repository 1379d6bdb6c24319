//! Faults of the manager and of the control plane under a running apply. Two managers with
//! leader election: only the leader reconciles, both answer probes, and when the leader dies
//! during an apply the other takes over, finds the running Job by its name, starts no second
//! one and records the result once. A leader stopped by SIGTERM instead hands the Lease over,
//! and the standby leads at once rather than when the Lease runs out; one stalled past its
//! Lease writes nothing once it wakes. kube-apiserver and etcd restarted while an apply runs.
//!
//! The tests take turns ([`one_at_a_time`]): a restart of the API server is felt by everything
//! that talks to it, leader elections included.

use std::time::{Duration, Instant};

use captf_api::TerraformCluster;
use captf_e2e::fixture::{
    TIMEOUT, active_job, create_cluster, has, job_names, namespace_with_identity, sample,
    wait_until,
};
use captf_e2e::{Manager, manager_kubeconfig};
use captf_testenv::wait_for;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

/// The election's lease duration (the manager's default) and what a takeover may add to it:
/// the candidates' retry period and the time to start the controllers.
const LEASE: Duration = Duration::from_secs(15);
const TAKEOVER_MARGIN: Duration = Duration::from_secs(15);

/// One test of this binary at a time: they share the control plane that two of them restart.
async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

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

/// Two managers electing a leader on one Lease (with `extra` flags), once one leads.
struct Election {
    client: kube::Client,
    ns: String,
    leases: Api<Lease>,
    lease_name: String,
    leading: Manager,
    standby: Manager,
    standby_identity: String,
}

async fn election(prefix: &str, extra: &[&str]) -> Election {
    let (env, client, ns) = namespace_with_identity(prefix).await;
    let kubeconfig = manager_kubeconfig(&env, &client).await.expect("RBAC");
    let lease_name = format!("captf-e2e-{ns}");
    let mut flags = vec![
        format!("--namespace={ns}"),
        "--leader-elect".to_owned(),
        format!("--leader-elect-lease-name={lease_name}"),
    ];
    flags.extend(extra.iter().map(|f| (*f).to_owned()));
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
    let standby = managers.remove(1 - leader);
    let leading = managers.remove(0);
    Election {
        client,
        ns,
        leases,
        lease_name,
        leading,
        standby,
        standby_identity: format!("manager-{}", names[1 - leader]),
    }
}

impl Election {
    /// Creates a cluster whose apply sleeps `seconds`; the name of the Job the leader started.
    async fn running_apply(&self, name: &str, seconds: u32) -> String {
        create_cluster(
            &self.client,
            &self.ns,
            name,
            "captf.local/modules/noop-cluster:e2e",
            &format!("  variables: {{sleep_seconds: {seconds}}}"),
        )
        .await;
        active_job(&self.clusters(), name, &self.leading).await.1
    }

    fn clusters(&self) -> Api<TerraformCluster> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Waits up to `within` for the standby to hold the Lease; how long that took from `since`.
    async fn standby_leads(&self, within: Duration, since: Instant) -> Duration {
        wait_for("the standby to take the lease", within, || async {
            Ok((holder(&self.leases, &self.lease_name).await.as_deref()
                == Some(self.standby_identity.as_str()))
            .then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\nstandby log:\n{}", self.standby.log()));
        since.elapsed()
    }

    /// Waits for the cluster to be Ready under the standby, with the result of `job`.
    async fn finished_by_the_standby(&self, name: &str, job: &str) {
        let done = wait_until(
            &self.clusters(),
            name,
            "Ready under the new leader",
            &self.standby,
            |t| has(t, "Ready", "True", "Ready"),
        )
        .await;
        assert_eq!(
            done.status
                .as_ref()
                .and_then(|s| s.workspace.last_run.as_ref())
                .map(|r| r.job.as_str()),
            Some(job),
            "the new leader recorded the running Job's result"
        );
    }
}

/// `job` is the only Job in `ns`, and the manager serving `metrics` counted one successful
/// apply.
async fn the_only_job_counted_once(client: &kube::Client, ns: &str, job: &str, metrics: &str) {
    assert_eq!(
        job_names(client, ns).await,
        vec![job.to_owned()],
        "no second Job was started"
    );
    let metrics = Manager::get(metrics).expect("metrics");
    assert_eq!(
        sample(
            &metrics,
            "captf_jobs_total{kind=\"TerraformCluster\",op=\"apply\",result=\"succeeded\"}"
        ),
        Some(1.0),
        "bookkept once:\n{metrics}"
    );
}

#[tokio::test]
async fn the_standby_takes_over_a_running_apply_without_starting_a_second_job() {
    let _turn = one_at_a_time().await;
    let mut election = election("failover", &[]).await;
    // Both serve probes, leader or not.
    for manager in [&election.leading, &election.standby] {
        for probe in ["healthz", "readyz"] {
            let url = format!("{}/{probe}", manager.health);
            wait_for(&format!("{url} to answer ok"), TIMEOUT, || async {
                Ok(Manager::get(&url).ok().filter(|b| b.trim() == "ok"))
            })
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", manager.log()));
        }
    }
    let name = "failover";
    let job = election.running_apply(name, 30).await;
    let metrics = Manager::get(&election.standby.metrics).expect("standby metrics");
    assert!(
        !metrics.contains("captf_reconcile_op_decisions_total{"),
        "the standby decided something:\n{metrics}"
    );

    // Kill the leader mid-apply (SIGKILL: no chance to hand over).
    election.leading.kill();
    let took = election
        .standby_leads(LEASE + TAKEOVER_MARGIN, Instant::now())
        .await;
    election.finished_by_the_standby(name, &job).await;
    the_only_job_counted_once(
        &election.client,
        &election.ns,
        &job,
        &election.standby.metrics,
    )
    .await;
    assert!(took <= LEASE + TAKEOVER_MARGIN, "takeover took {took:?}");
}

/// SIGSTOP past its Lease, as in a long pause: the standby takes over the running apply; the
/// stalled leader, resumed with passes half-way and a change queued, writes nothing (its
/// fence is closed: no read has confirmed its Lease since) and exits once it sees the Lease
/// lost. One Job, recorded once, by the new leader.
#[tokio::test]
async fn a_stalled_leader_writes_nothing_once_its_lease_is_gone() {
    let _turn = one_at_a_time().await;
    let mut election = election("stalled", &[]).await;
    let name = "stalled";
    let job = election.running_apply(name, 30).await;

    election.leading.stall(true).expect("SIGSTOP");
    let stopped = Instant::now();
    election
        .standby_leads(LEASE + TAKEOVER_MARGIN, stopped)
        .await;
    // A change for the stalled leader to find when it wakes up.
    let clusters = election.clusters();
    clusters
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                &serde_json::json!({"metadata": {"annotations": {"example.com/poke": "1"}}}),
            ),
        )
        .await
        .expect("poke");
    election.leading.stall(false).expect("SIGCONT");
    wait_for("the stale leader to exit", TIMEOUT, || {
        let running = election.leading.running();
        async move { Ok((!running).then_some(())) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", election.leading.whole_log()));
    let log = election.leading.whole_log();
    assert!(log.contains("lost leadership"), "{log}");

    election.finished_by_the_standby(name, &job).await;
    the_only_job_counted_once(
        &election.client,
        &election.ns,
        &job,
        &election.standby.metrics,
    )
    .await;
}

/// SIGTERM, as in a rolling update: the leader lets its running passes end, releases the Lease
/// and exits 0, and the standby takes over at its next look at the Lease rather than when the
/// Lease would have run out (two minutes here), then finishes the running apply.
#[tokio::test]
async fn a_stopped_leader_hands_the_lease_over_at_once() {
    let _turn = one_at_a_time().await;
    let mut election = election(
        "handover",
        &[
            "--leader-elect-lease-duration=120s",
            "--leader-elect-renew-deadline=100s",
        ],
    )
    .await;
    let name = "handover";
    let job = election.running_apply(name, 10).await;

    let stopped = Instant::now();
    let status = election
        .leading
        .terminate(Duration::from_secs(30))
        .await
        .expect("the leader exits");
    let log = election.leading.whole_log();
    assert!(status.success(), "exit {status}:\n{log}");
    assert!(log.contains("released the leader-election Lease"), "{log}");
    // Without the release the standby would wait for the Lease to run out: 120 s after the
    // leader's last renewal, which was its acquisition a few seconds before the cluster.
    let handover = Duration::from_secs(30);
    let took = election.standby_leads(handover, stopped).await;
    assert!(took < handover, "handover took {took:?}");
    election.finished_by_the_standby(name, &job).await;
}

/// Restarts `component` while an apply runs under one manager: the Job goes on, the manager
/// reconnects and books it once, nothing else starts.
async fn restarted_mid_apply(component: &str) {
    let _turn = one_at_a_time().await;
    let (env, client, ns) = namespace_with_identity(&format!("restart-{component}")).await;
    let kubeconfig = manager_kubeconfig(&env, &client).await.expect("RBAC");
    let scope = format!("--namespace={ns}");
    let manager = Manager::start(&env, &kubeconfig, &ns, &[&scope]).expect("manager");
    let name = "restarted";
    create_cluster(
        &client,
        &ns,
        name,
        "captf.local/modules/noop-cluster:e2e",
        "  variables: {sleep_seconds: 20}",
    )
    .await;
    let clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let (_, job) = active_job(&clusters, name, &manager).await;
    env.restart(component)
        .await
        .unwrap_or_else(|e| panic!("{component}: {e:#}"));
    let client = env.client().await.expect("client");
    let clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let done = wait_until(&clusters, name, "Ready after the restart", &manager, |t| {
        has(t, "Ready", "True", "Ready")
    })
    .await;
    assert!(has(&done, "StateReadable", "True", "StateRead"));
    assert_eq!(
        done.status
            .as_ref()
            .and_then(|s| s.workspace.last_run.as_ref())
            .map(|r| r.job.as_str()),
        Some(job.as_str()),
        "the running Job's result recorded"
    );
    the_only_job_counted_once(&client, &ns, &job, &manager.metrics).await;
}

#[tokio::test]
async fn the_api_server_restarted_mid_apply() {
    restarted_mid_apply("kube-apiserver").await;
}

#[tokio::test]
async fn etcd_restarted_mid_apply() {
    restarted_mid_apply("etcd").await;
}
