//! Golden YAML per operation (regenerate with `UPDATE_GOLDEN=1`), and the runner parsing
//! every golden Job's arguments back into what the spec meant.

use super::*;

/// Every golden case: file name and spec.
fn golden_cases() -> Vec<(&'static str, JobSpec)> {
    let machine = "prod-md-0-abcde";
    let mut cases = Vec::new();

    // A machine apply: never guarded, no plan key.
    cases.push((
        "apply",
        base(
            WorkloadKind::Machine,
            machine,
            Operation::Apply,
            MACHINE_IMAGE,
        ),
    ));

    // A cluster apply under Automatic with an approved destructive plan.
    let mut s = base(
        WorkloadKind::Cluster,
        "prod",
        Operation::Apply,
        CLUSTER_IMAGE,
    );
    s.attempt = 2;
    s.allow_deletes_hash = Some(H.to_owned());
    s.annotations = BTreeMap::from([(
        captf_api::annotations::AFTER_FAILED_APPLY.to_owned(),
        "true".to_owned(),
    )]);
    cases.push(("apply-guarded", s));

    // A cluster apply under Manual of an approved plan.
    let mut s = base(
        WorkloadKind::Cluster,
        "prod",
        Operation::Apply,
        CLUSTER_IMAGE,
    );
    s.expect_plan = Some(P.to_owned());
    cases.push(("apply-expect-plan", s));

    // A pool apply that renders a change of the cluster's exports, approved.
    let mut s = base(
        WorkloadKind::MachinePool,
        "prod-pool-0",
        Operation::Apply,
        "ghcr.io/example/pool-module:v1.2.3",
    );
    s.approval_hash = Some(POOL_APPROVAL.to_owned());
    s.allow_deletes_hash = Some(POOL_APPROVAL.to_owned());
    s.annotations = BTreeMap::from([(
        captf_api::annotations::CLUSTER_OUTPUTS_HASH.to_owned(),
        "h2:4444".to_owned(),
    )]);
    cases.push(("apply-pool-exports", s));

    // A drift-remediation apply of a cluster with a custom Job policy.
    let mut s = base(
        WorkloadKind::Cluster,
        "prod",
        Operation::Apply,
        CLUSTER_IMAGE,
    );
    s.tick = "remediate/2026-01-02T03:04:05Z".to_owned();
    s.drift_remediation = true;
    s.pull_policy = ImagePullPolicy::Always;
    s.runner_events = false;
    s.policy = policy(&JobPolicy {
        active_deadline_seconds: Some(7200),
        lock_timeout_seconds: Some(120),
        service_account_name: Some("team-a-runner".to_owned()),
        image_pull_secrets: Some(vec![pull("a"), pull("b"), pull("a")]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([(
                "memory".to_owned(),
                Quantity("1Gi".to_owned()),
            )])),
            ..ResourceRequirements::default()
        }),
        env: Some(vec![
            env("HTTPS_PROXY", "http://proxy:3128"),
            env("TF_LOG", "TRACE"),
        ]),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(1000),
            ..SecurityContext::default()
        }),
        pod_security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            ..PodSecurityContext::default()
        }),
        ..JobPolicy::default()
    });
    cases.push(("apply-remediation", s));

    // A machine apply that force-unlocks a stale lock first.
    let mut s = base(
        WorkloadKind::Machine,
        machine,
        Operation::Apply,
        MACHINE_IMAGE,
    );
    s.attempt = 3;
    s.force_unlock = Some("2b6a6738-5dd5-aeae-1b44-dd2fdc0d5a1f".to_owned());
    cases.push(("apply-force-unlock", s));

    // A cluster plan under Manual.
    cases.push((
        "plan",
        base(
            WorkloadKind::Cluster,
            "prod",
            Operation::Plan,
            CLUSTER_IMAGE,
        ),
    ));

    // A machine destroy with the pinned digest.
    cases.push((
        "destroy",
        base(
            WorkloadKind::Machine,
            machine,
            Operation::Destroy,
            MACHINE_PINNED,
        ),
    ));

    // A pool refresh: hash from state, tick = last successful refresh.
    let mut s = base(
        WorkloadKind::MachinePool,
        "prod-pool-0",
        Operation::Refresh,
        POOL_PINNED,
    );
    s.tick = "2026-01-02T03:04:05Z".to_owned();
    cases.push(("refresh", s));

    // A cluster drift check.
    let mut s = base(
        WorkloadKind::Cluster,
        "prod",
        Operation::Drift,
        CLUSTER_PINNED,
    );
    s.tick = "2026-01-02T03:04:05Z".to_owned();
    cases.push(("drift", s));

    // A machine restore of a two-chunk backup.
    let mut s = base(
        WorkloadKind::Machine,
        machine,
        Operation::Restore,
        MACHINE_PINNED,
    );
    let backup = s.key.backup_secret(7);
    s.tick = format!("restore/{backup}");
    s.restore = Some(RestoreSource {
        serial: 7,
        chunk_secrets: vec![backup.clone(), names::chunk_name(&backup, 1)],
        managed_resources: 3,
        lineage: "l-1".to_owned(),
    });
    cases.push(("restore", s));

    cases
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/jobs")
}

#[test]
fn golden_jobs() {
    let update = std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1");
    let dir = golden_dir();
    let cases = golden_cases();
    let mut failures = Vec::new();
    for (name, spec) in &cases {
        let yaml = serde_yaml::to_string(&build_job(spec)).expect("serialize Job");
        let path = dir.join(format!("{name}.yaml"));
        if update {
            std::fs::create_dir_all(&dir).expect("create golden dir");
            std::fs::write(&path, &yaml).expect("write golden file");
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if want != yaml {
            let line = want
                .lines()
                .zip(yaml.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| want.lines().count().min(yaml.lines().count()));
            failures.push(format!(
                "{}: differs from line {} (got {:?}, want {:?})",
                path.display(),
                line + 1,
                yaml.lines().nth(line),
                want.lines().nth(line)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "golden Jobs differ; check the change and regenerate with UPDATE_GOLDEN=1:\n{}",
        failures.join("\n")
    );
    // No stale golden file without a case.
    let known: Vec<String> = cases.iter().map(|(n, _)| format!("{n}.yaml")).collect();
    for entry in std::fs::read_dir(&dir).expect("golden dir") {
        let file = entry.expect("dir entry").file_name();
        let file = file.to_string_lossy();
        assert!(known.iter().any(|k| *k == file), "stale golden file {file}");
    }
}

/// The runner parses every golden Job's arguments into what the spec meant.
#[test]
fn runner_accepts_the_builders_arguments() {
    for (name, spec) in golden_cases() {
        let a = args(&build_job(&spec));
        let parsed = captf_runner::RunArgs::try_parse_from(&a)
            .unwrap_or_else(|e| panic!("{name}: runner rejects {a:?}: {e}"));
        assert_eq!(parsed.op, spec.op, "{name}");
        assert_eq!(parsed.bin, ["/captf/runtime"], "{name}");
        assert_eq!(parsed.image, spec.image, "{name}");
        assert_eq!(
            parsed.lock_timeout.as_secs(),
            u64::from(spec.policy.lock_timeout_seconds),
            "{name}"
        );
        assert_eq!(parsed.stop_timeout.as_secs(), 570, "{name}");
        assert_eq!(parsed.backend_config.len(), 4, "{name}");
        assert_eq!(
            parsed.backend_config[3],
            format!("labels={}", hcl_map(&spec.backend_labels)),
            "{name}"
        );
        assert_eq!(parsed.guard_deletes, spec.guards_deletes(), "{name}");
        assert_eq!(
            parsed.force_unlock,
            spec.force_unlock.clone().unwrap_or_default(),
            "{name}"
        );
        assert_eq!(
            parsed.plan_key_file.to_string_lossy(),
            "/captf/plan-key/key",
            "{name}"
        );
        assert_eq!(
            parsed.restore_chunks,
            spec.restore.as_ref().map_or(0, |r| r.chunk_secrets.len()),
            "{name}"
        );
        assert_eq!(parsed.result.to_string_lossy(), "/dev/termination-log");
        assert_eq!(
            parsed.credentials.to_string_lossy(),
            build::CREDENTIALS_DIR,
            "{name}"
        );
    }
}
