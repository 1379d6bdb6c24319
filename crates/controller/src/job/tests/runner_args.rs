//! The runner's arguments and the Job's annotations, per operation.

use super::*;

#[test]
fn runner_args_per_op() {
    let common = [
        "--op",
        "--bin",
        "--image",
        "--module",
        "--providers",
        "--workdir",
        "--config",
        "--lock-timeout",
        "--stop-timeout",
        "--backend-config",
        "--backend-config",
        "--backend-config",
        "--backend-config",
    ];
    let with = |extra: &[&str]| -> Vec<String> {
        common
            .iter()
            .chain(extra)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let events = ["--event-object", "--job-name"];

    let mut cases: Vec<(&str, JobSpec, Vec<String>)> = Vec::new();
    let mut machine = base(WorkloadKind::Machine, "m1", Operation::Apply, MACHINE_IMAGE);
    machine.runner_events = false;
    // A machine apply ignores guard inputs: machines are never guarded.
    machine.approval_hash = Some(POOL_APPROVAL.to_owned());
    machine.allow_deletes_hash = Some(H.to_owned());
    cases.push(("machine apply", machine, with(&[])));

    let cluster = base(WorkloadKind::Cluster, "c1", Operation::Apply, CLUSTER_IMAGE);
    cases.push((
        "cluster apply",
        cluster.clone(),
        with(&["--guard-deletes", "--inputs-hash", events[0], events[1]]),
    ));
    let mut approved = cluster.clone();
    approved.allow_deletes_plan = Some(P.to_owned());
    approved.force_unlock = Some("lock-id".to_owned());
    cases.push((
        "cluster apply approved, unlocking",
        approved,
        with(&[
            "--force-unlock",
            "--guard-deletes",
            "--inputs-hash",
            "--allow-deletes-plan",
            events[0],
            events[1],
        ]),
    ));
    let mut manual = cluster.clone();
    manual.expect_plan = Some(P.to_owned());
    cases.push((
        "cluster apply expect-plan",
        manual,
        with(&[
            "--guard-deletes",
            "--inputs-hash",
            "--expect-plan",
            "--plan-key-file",
            events[0],
            events[1],
        ]),
    ));
    let mut plan = base(WorkloadKind::Cluster, "c1", Operation::Plan, CLUSTER_IMAGE);
    plan.expect_plan = Some(P.to_owned()); // only an apply passes it
    plan.allow_deletes_hash = Some(H.to_owned()); // only a guarded apply passes it
    plan.allow_deletes_plan = Some(P.to_owned());
    cases.push((
        "plan",
        plan,
        with(&["--plan-key-file", events[0], events[1]]),
    ));
    let pool = base(
        WorkloadKind::MachinePool,
        "p1",
        Operation::Apply,
        CLUSTER_IMAGE,
    );
    cases.push(("pool apply", pool.clone(), with(&[events[0], events[1]])));
    let mut pool_guarded = pool;
    pool_guarded.approval_hash = Some(POOL_APPROVAL.to_owned());
    cases.push((
        "pool exports apply",
        pool_guarded,
        with(&["--guard-deletes", "--inputs-hash", events[0], events[1]]),
    ));
    for op in [Operation::Destroy, Operation::Refresh, Operation::Drift] {
        let mut s = base(WorkloadKind::Cluster, "c1", op, CLUSTER_PINNED);
        s.force_unlock = Some("lock-id".to_owned());
        cases.push((
            "background",
            s,
            with(&["--force-unlock", events[0], events[1]]),
        ));
    }
    let mut restore = base(
        WorkloadKind::Machine,
        "m1",
        Operation::Restore,
        MACHINE_PINNED,
    );
    restore.restore = Some(RestoreSource {
        serial: 4,
        chunk_secrets: vec!["b0".to_owned()],
        managed_resources: 0,
        lineage: "l-1".to_owned(),
    });
    cases.push((
        "restore",
        restore,
        with(&[
            "--expect-state",
            "--restore-chunks",
            "--restore-resources",
            events[0],
            events[1],
        ]),
    ));
    let mut expecting = base(
        WorkloadKind::Cluster,
        "c1",
        Operation::Drift,
        CLUSTER_PINNED,
    );
    expecting.expect_state = Some(captf_runner::expect::ExpectedState::Lineage {
        lineage: "l-1".to_owned(),
        serial: 3,
    });
    cases.push((
        "a Job expects the state its pass read",
        expecting,
        with(&["--expect-state", events[0], events[1]]),
    ));
    let mut no_uid = base(
        WorkloadKind::Machine,
        "m1",
        Operation::Destroy,
        MACHINE_PINNED,
    );
    no_uid.owner_uid = String::new();
    cases.push(("events need the owner UID", no_uid, with(&[])));

    for (name, spec, want) in cases {
        let job = build_job(&spec);
        assert_eq!(flags(&job), want, "{name}");
        let plan_key_mounted = main_container(&job)
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == "/captf/plan-key");
        assert_eq!(plan_key_mounted, spec.needs_plan_key(), "{name}");
        assert_eq!(
            pod(&job).volumes.as_ref().map(Vec::len),
            Some(if spec.needs_plan_key() { 6 } else { 5 }),
            "{name}"
        );
    }
}

#[test]
fn runner_arg_values() {
    let mut s = base(
        WorkloadKind::MachinePool,
        "p1",
        Operation::Apply,
        CLUSTER_IMAGE,
    );
    s.approval_hash = Some(POOL_APPROVAL.to_owned());
    s.allow_deletes_hash = Some(POOL_APPROVAL.to_owned());
    s.policy = policy(&JobPolicy {
        lock_timeout_seconds: Some(0),
        ..JobPolicy::default()
    });
    let job = build_job(&s);
    let a = args(&job);
    let name = s.job_name();
    let suffix = s.key.state_suffix();
    let want = vec![
        "--op=apply".to_owned(),
        "--bin=/captf/runtime".to_owned(),
        format!("--image={CLUSTER_IMAGE}"),
        "--module=/captf/module".to_owned(),
        "--providers=/captf/providers".to_owned(),
        "--workdir=/captf/work".to_owned(),
        "--config=/captf/config".to_owned(),
        "--lock-timeout=0s".to_owned(),
        "--stop-timeout=570s".to_owned(),
        format!("--backend-config=secret_suffix={suffix}"),
        "--backend-config=namespace=team-a".to_owned(),
        "--backend-config=in_cluster_config=true".to_owned(),
        "--backend-config=labels={\"captf.infrastructure.cluster.x-k8s.io/owner-kind\"=\"TerraformMachinePool\",\"captf.infrastructure.cluster.x-k8s.io/owner-name\"=\"p1\",\"captf.io/managed\"=\"true\",\"cluster.x-k8s.io/cluster-name\"=\"prod\",\"clusterctl.cluster.x-k8s.io/move\"=\"\"}".to_owned(),
        "--guard-deletes".to_owned(),
        format!("--inputs-hash={POOL_APPROVAL}"),
        format!("--allow-deletes-hash={POOL_APPROVAL}"),
        format!("--event-object=infrastructure.cluster.x-k8s.io/v1alpha1/TerraformMachinePool/team-a/p1/{UID}"),
        format!("--job-name={name}"),
    ];
    assert_eq!(a, want);
    // The name and the inputs-hash annotation still use the inputs hash.
    assert_eq!(name, s.key.job_name(Operation::Apply, 1, H, ""));
    let ann = job.metadata.annotations.clone().expect("annotations");
    assert_eq!(ann.get("captf.io/inputs-hash").map(String::as_str), Some(H));
    assert_eq!(
        ann.get("captf.io/approval-hash").map(String::as_str),
        Some(POOL_APPROVAL)
    );
}

#[test]
fn annotations_per_op() {
    for op in Operation::ALL {
        let mut s = base(WorkloadKind::Cluster, "c1", op, CLUSTER_IMAGE);
        s.drift_remediation = true;
        s.expect_plan = Some(P.to_owned());
        s.restore = Some(RestoreSource {
            serial: 9,
            chunk_secrets: vec!["b".to_owned()],
            managed_resources: 1,
            lineage: "l-1".to_owned(),
        });
        s.annotations = BTreeMap::from([
            ("captf.io/after-failed-apply".to_owned(), "true".to_owned()),
            ("captf.io/inputs-hash".to_owned(), "overridden".to_owned()),
        ]);
        let ann = build_job(&s).metadata.annotations.unwrap_or_default();
        let hashed = matches!(op, Operation::Apply | Operation::Plan | Operation::Restore);
        assert_eq!(
            ann.get("captf.io/inputs-hash").map(String::as_str),
            Some(if hashed { H } else { "overridden" }),
            "{op}"
        );
        assert!(ann.contains_key("captf.io/after-failed-apply"), "{op}");
        let apply = op == Operation::Apply;
        assert_eq!(
            ann.contains_key("captf.io/drift-remediation"),
            apply,
            "{op}"
        );
        assert_eq!(ann.contains_key("captf.io/approved-plan"), apply, "{op}");
        assert_eq!(
            ann.contains_key("captf.io/restore-serial"),
            op == Operation::Restore,
            "{op}"
        );
        assert!(!ann.contains_key("captf.io/approval-hash"), "{op}: cluster");
    }
}
