//! Job builder tests: golden YAML per operation (regenerate with `UPDATE_GOLDEN=1`) and table
//! tests of the env, pull secrets, resources, security contexts, names and labels.

use std::collections::BTreeMap;
use std::path::PathBuf;

use captf_api::names::{self, ObjectKey, WorkloadKind};
use captf_api::{ImagePullPolicy, JobPolicy, Operation};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, LocalObjectReference, PodSecurityContext, PodSpec,
    ResourceRequirements, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;

const UID: &str = "5f1d3c2a-0000-4000-8000-00000000000a";
const RUNNER_IMAGE: &str = "ghcr.io/captf-io/captf:v0.1.0";
const H: &str = "h2:1111111111111111111111111111111111111111111111111111111111111111";
const P: &str = "p2:2222222222222222222222222222222222222222222222222222222222222222";
const POOL_APPROVAL: &str = "h2:3333333333333333333333333333333333333333333333333333333333333333";

fn key(kind: WorkloadKind, name: &str) -> ObjectKey {
    ObjectKey::new("team-a", kind, name).expect("valid key")
}

fn policy(own: &JobPolicy) -> EffectivePolicy {
    EffectivePolicy::resolve(&PolicyLayers {
        own: Some(own),
        ..PolicyLayers::default()
    })
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

fn pull(name: &str) -> LocalObjectReference {
    LocalObjectReference {
        name: name.to_owned(),
    }
}

fn base(kind: WorkloadKind, name: &str, op: Operation, image: &str) -> JobSpec {
    let mut s = JobSpec::new(key(kind, name), UID, "prod", op, image, RUNNER_IMAGE, "aws");
    s.inputs_hash = H.to_owned();
    s.policy = policy(&JobPolicy {
        image_pull_secrets: Some(vec![pull("registry")]),
        ..JobPolicy::default()
    });
    s
}

const CLUSTER_IMAGE: &str = "ghcr.io/example/cluster-module:v1.2.3";
const MACHINE_IMAGE: &str = "ghcr.io/example/machine-module:v1.2.3";
const MACHINE_PINNED: &str = "ghcr.io/example/machine-module@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const POOL_PINNED: &str = "ghcr.io/example/pool-module@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const CLUSTER_PINNED: &str = "ghcr.io/example/cluster-module@sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

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

fn pod(job: &Job) -> &PodSpec {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec")
}

fn main_container(job: &Job) -> &Container {
    &pod(job).containers[0]
}

fn args(job: &Job) -> Vec<String> {
    main_container(job).args.clone().unwrap_or_default()
}

fn flags(job: &Job) -> Vec<String> {
    args(job)
        .into_iter()
        .map(|a| a.split('=').next().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn env_reserved_names_dropped_and_user_env_after_captf_env() {
    let mut s = base(WorkloadKind::Machine, "m1", Operation::Apply, MACHINE_IMAGE);
    s.policy = policy(&JobPolicy {
        env: Some(vec![
            env("B_FIRST", "1"),
            env("TF_VAR_x", "override"),
            env("TF_DATA_DIR", "/elsewhere"),
            env("KUBE_NAMESPACE", "other"),
            env("KUBERNETES_SERVICE_HOST", "evil"),
            env("HOME", "/root"),
            env("TMPDIR", "/var/tmp"),
            env("CHECKPOINT_DISABLE", "0"),
            env("A_SECOND", "2"),
        ]),
        ..JobPolicy::default()
    });
    // A hand-built policy with reserved names is filtered by the builder too.
    s.policy.env.push(env("TF_LOG", "TRACE"));
    let job = build_job(&s);
    let got: Vec<(String, String)> = main_container(&job)
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    let want: Vec<(String, String)> = [
        ("TF_IN_AUTOMATION", "1"),
        ("TF_INPUT", "0"),
        ("HOME", "/captf/work"),
        ("TMPDIR", "/tmp"),
        ("KUBE_NAMESPACE", "team-a"),
        ("CHECKPOINT_DISABLE", "1"),
        ("B_FIRST", "1"),
        ("A_SECOND", "2"),
    ]
    .iter()
    .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
    .collect();
    assert_eq!(got, want);
    let env_from = main_container(&job).env_from.clone().unwrap_or_default();
    assert_eq!(env_from.len(), 1);
    assert_eq!(
        env_from[0].secret_ref.as_ref().map(|r| r.name.as_str()),
        Some("captf-creds-aws")
    );
}

#[test]
fn pull_secrets_deduplicated() {
    let mut s = base(WorkloadKind::Machine, "m1", Operation::Apply, MACHINE_IMAGE);
    s.policy = policy(&JobPolicy {
        image_pull_secrets: Some(vec![pull("a"), pull("b"), pull("a"), pull(""), pull("c")]),
        ..JobPolicy::default()
    });
    // Duplicates in a hand-built policy are removed as well.
    s.policy.image_pull_secrets.push(pull("b"));
    let job = build_job(&s);
    assert_eq!(
        pod(&job).image_pull_secrets,
        Some(vec![pull("a"), pull("b"), pull("c")])
    );
    s.policy.image_pull_secrets.clear();
    assert_eq!(pod(&build_job(&s)).image_pull_secrets, None);
}

fn q(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect(),
    )
}

#[test]
fn default_and_overridden_resources() {
    let s = base(WorkloadKind::Machine, "m1", Operation::Apply, MACHINE_IMAGE);
    let job = build_job(&s);
    let r = main_container(&job).resources.clone().expect("resources");
    assert_eq!(r.requests, q(&[("cpu", "250m"), ("memory", "512Mi")]));
    assert_eq!(r.limits, q(&[("memory", "2Gi")]), "no CPU limit");
    let init = pod(&job).init_containers.clone().unwrap_or_default();
    let ir = init[0].resources.clone().expect("init resources");
    assert_eq!(ir.requests, q(&[("cpu", "10m"), ("memory", "32Mi")]));
    assert_eq!(ir.limits, q(&[("cpu", "100m"), ("memory", "64Mi")]));

    let mut s = s;
    let own = ResourceRequirements {
        limits: q(&[("cpu", "2"), ("memory", "4Gi")]),
        ..ResourceRequirements::default()
    };
    s.policy = policy(&JobPolicy {
        resources: Some(own.clone()),
        ..JobPolicy::default()
    });
    let job = build_job(&s);
    assert_eq!(
        main_container(&job).resources,
        Some(own),
        "replaced as a whole"
    );
    // The init container's resources are fixed.
    let init = pod(&job).init_containers.clone().unwrap_or_default();
    assert_eq!(init[0].resources, Some(security::init_resources()));
}

fn has_drop_all(sc: &SecurityContext) -> bool {
    sc.capabilities
        .as_ref()
        .and_then(|c| c.drop.as_ref())
        .is_some_and(|d| d.iter().any(|c| c == "ALL"))
}

#[test]
fn security_context_never_weakened() {
    let weak = SecurityContext {
        privileged: Some(true),
        allow_privilege_escalation: Some(true),
        capabilities: Some(Capabilities {
            add: Some(vec!["NET_ADMIN".to_owned()]),
            drop: Some(vec!["NET_RAW".to_owned()]),
        }),
        read_only_root_filesystem: Some(false),
        proc_mount: Some("Unmasked".to_owned()),
        seccomp_profile: Some(SeccompProfile {
            type_: "Unconfined".to_owned(),
            localhost_profile: None,
        }),
        run_as_non_root: Some(true),
        run_as_user: Some(1000),
        ..SecurityContext::default()
    };
    let weak_pod = PodSecurityContext {
        seccomp_profile: Some(SeccompProfile {
            type_: "Unconfined".to_owned(),
            localhost_profile: None,
        }),
        fs_group: Some(2000),
        run_as_non_root: Some(true),
        ..PodSecurityContext::default()
    };
    let cases: Vec<(&str, Option<SecurityContext>)> = vec![
        ("unset", None),
        ("empty", Some(SecurityContext::default())),
        (
            "empty capabilities",
            Some(SecurityContext {
                capabilities: Some(Capabilities::default()),
                ..SecurityContext::default()
            }),
        ),
        ("weakening", Some(weak)),
    ];
    for (name, user) in cases {
        let mut s = base(
            WorkloadKind::Cluster,
            "prod",
            Operation::Apply,
            CLUSTER_IMAGE,
        );
        s.policy = policy(&JobPolicy {
            security_context: user.clone(),
            pod_security_context: Some(weak_pod.clone()),
            ..JobPolicy::default()
        });
        // The builder hardens a hand-built policy as well.
        if let Some(u) = user {
            s.policy.security_context = u;
        }
        let job = build_job(&s);
        let sc = main_container(&job)
            .security_context
            .clone()
            .expect("main security context");
        assert!(has_drop_all(&sc), "{name}: drop ALL");
        assert_eq!(
            sc.capabilities.as_ref().and_then(|c| c.add.clone()),
            None,
            "{name}"
        );
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{name}");
        assert_eq!(sc.read_only_root_filesystem, Some(true), "{name}");
        assert_ne!(sc.privileged, Some(true), "{name}");
        assert_ne!(sc.proc_mount.as_deref(), Some("Unmasked"), "{name}");
        assert_ne!(
            sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
            Some("Unconfined"),
            "{name}"
        );
        let init = pod(&job).init_containers.clone().unwrap_or_default();
        assert_eq!(
            init[0].security_context,
            Some(security::init_security_context()),
            "{name}: init fixed"
        );
        let psc = pod(&job)
            .security_context
            .clone()
            .expect("pod security context");
        assert_eq!(
            psc.seccomp_profile.map(|p| p.type_),
            Some("RuntimeDefault".to_owned()),
            "{name}"
        );
        assert_eq!(psc.fs_group, Some(2000), "{name}: user fsGroup kept");
        assert_eq!(psc.run_as_non_root, Some(true), "{name}");
    }

    // Defaults: runAsNonRoot/runAsUser unset; user non-weakening fields kept; drop order.
    let s = base(
        WorkloadKind::Cluster,
        "prod",
        Operation::Apply,
        CLUSTER_IMAGE,
    );
    let job = build_job(&s);
    let sc = main_container(&job).security_context.clone().expect("sc");
    assert_eq!(sc.run_as_non_root, None);
    assert_eq!(sc.run_as_user, None);
    assert_eq!(
        sc.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_owned()])
    );
    let psc = pod(&job).security_context.clone().expect("psc");
    assert_eq!(psc.fs_group, Some(65532));
    assert_eq!(psc.run_as_non_root, None);

    let hardened = security::main_security_context(Some(&SecurityContext {
        capabilities: Some(Capabilities {
            add: None,
            drop: Some(vec!["NET_RAW".to_owned()]),
        }),
        run_as_user: Some(1000),
        ..SecurityContext::default()
    }));
    assert_eq!(
        hardened.capabilities.and_then(|c| c.drop),
        Some(vec!["ALL".to_owned(), "NET_RAW".to_owned()])
    );
    assert_eq!(hardened.run_as_user, Some(1000));
}

fn is_label_key(k: &str) -> bool {
    let (prefix, name) = k.rsplit_once('/').unwrap_or(("", k));
    (prefix.is_empty() || names::is_dns_subdomain(prefix))
        && !name.is_empty()
        && names::is_label_value(name)
}

#[test]
fn job_names_and_labels_valid() {
    let long = "a".repeat(200);
    let long_cluster = "c".repeat(80);
    for kind in WorkloadKind::ALL {
        for name in ["prod", "prod-md-0-abcde", "x.y", long.as_str()] {
            for op in Operation::ALL {
                let mut s = JobSpec::new(
                    key(kind, name),
                    UID,
                    long_cluster.as_str(),
                    op,
                    MACHINE_IMAGE,
                    RUNNER_IMAGE,
                    "aws",
                );
                s.attempt = 123;
                s.inputs_hash = H.to_owned();
                let job = build_job(&s);
                let job_name = job.metadata.name.clone().expect("name");
                assert!(names::is_dns_label(&job_name), "{job_name}");
                assert!(job_name.len() <= names::MAX_JOB_NAME, "{job_name}");
                assert!(
                    job_name.len() + 6 <= names::MAX_LABEL,
                    "pod name fits a hostname"
                );
                assert!(
                    names::is_dns_subdomain(&names::per_run_secret(&job_name)),
                    "{job_name}"
                );
                let labels = job.metadata.labels.clone().expect("labels");
                for (k, v) in &labels {
                    assert!(is_label_key(k), "label key {k}");
                    assert!(names::is_label_value(v), "label {k}={v}");
                }
                assert_eq!(
                    labels.get("captf.io/managed").map(String::as_str),
                    Some("true")
                );
                assert_eq!(
                    labels
                        .get("captf.infrastructure.cluster.x-k8s.io/op")
                        .map(String::as_str),
                    Some(op.as_str())
                );
                assert_eq!(
                    labels
                        .get("captf.infrastructure.cluster.x-k8s.io/attempt")
                        .map(String::as_str),
                    Some("123")
                );
                assert_eq!(
                    labels.get("cluster.x-k8s.io/cluster-name").map(String::len),
                    Some(16),
                    "long cluster name hashed"
                );
                let pod_labels = job
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.metadata.as_ref())
                    .and_then(|m| m.labels.clone());
                assert_eq!(pod_labels, Some(labels), "pod carries the Job's labels");
                for (k, v) in &s.backend_labels {
                    assert!(is_label_key(k), "backend label key {k}");
                    assert!(names::is_label_value(v), "backend label {k}={v}");
                }
            }
        }
    }
}

#[test]
fn fixed_job_fields_and_owner() {
    let s = base(
        WorkloadKind::Machine,
        "m1",
        Operation::Refresh,
        MACHINE_PINNED,
    );
    let job = build_job(&s);
    let spec = job.spec.as_ref().expect("spec");
    assert_eq!(spec.backoff_limit, Some(0));
    assert_eq!(spec.active_deadline_seconds, Some(3600));
    assert_eq!(spec.ttl_seconds_after_finished, None);
    let p = pod(&job);
    assert_eq!(p.restart_policy.as_deref(), Some("Never"));
    assert_eq!(p.termination_grace_period_seconds, Some(600));
    assert_eq!(p.service_account_name.as_deref(), Some("captf-runner"));
    assert_eq!(
        main_container(&job).termination_message_policy.as_deref(),
        Some("File")
    );
    assert_eq!(
        main_container(&job).command,
        Some(vec!["/captf/bin/runner".to_owned(), "run".to_owned()])
    );
    let owner = job.metadata.owner_references.clone().expect("owner refs");
    assert_eq!(owner.len(), 1);
    assert_eq!(
        owner[0].api_version,
        "infrastructure.cluster.x-k8s.io/v1alpha1"
    );
    assert_eq!(owner[0].kind, "TerraformMachine");
    assert_eq!(owner[0].name, "m1");
    assert_eq!(owner[0].uid, UID);
    assert_eq!(owner[0].controller, Some(true));
    // Refresh: no inputs-hash annotation, no plan key.
    assert_eq!(job.metadata.annotations, None);
    assert!(!flags(&job).contains(&"--plan-key-file".to_owned()));
    assert_eq!(p.volumes.as_ref().map(Vec::len), Some(5));
    // Never set by the Job: the runner sets them.
    for e in main_container(&job).env.iter().flatten() {
        assert!(e.name != "TF_DATA_DIR" && e.name != "TF_CLI_CONFIG_FILE");
    }
}

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
        with(&[
            "--guard-deletes",
            "--inputs-hash",
            "--plan-key-file",
            events[0],
            events[1],
        ]),
    ));
    let mut approved = cluster.clone();
    approved.allow_deletes_hash = Some(H.to_owned());
    approved.force_unlock = Some("lock-id".to_owned());
    cases.push((
        "cluster apply approved, unlocking",
        approved,
        with(&[
            "--force-unlock",
            "--guard-deletes",
            "--inputs-hash",
            "--allow-deletes-hash",
            "--plan-key-file",
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
        with(&[
            "--guard-deletes",
            "--inputs-hash",
            "--plan-key-file",
            events[0],
            events[1],
        ]),
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
    });
    cases.push((
        "restore",
        restore,
        with(&[
            "--restore-chunks",
            "--restore-resources",
            events[0],
            events[1],
        ]),
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
        "--plan-key-file=/captf/plan-key/key".to_owned(),
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

#[test]
fn restore_projection() {
    let mut s = base(
        WorkloadKind::Machine,
        "m1",
        Operation::Restore,
        MACHINE_PINNED,
    );
    s.restore = Some(RestoreSource {
        serial: 7,
        chunk_secrets: vec!["b0".to_owned(), "b1".to_owned(), "b2".to_owned()],
        managed_resources: 5,
    });
    let job = build_job(&s);
    let config = pod(&job)
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "config")
        .cloned()
        .expect("config volume");
    assert!(config.secret.is_none());
    let projected = config.projected.expect("projected");
    assert_eq!(projected.default_mode, Some(0o440));
    let sources = projected.sources.unwrap_or_default();
    assert_eq!(sources.len(), 4);
    let run = sources[0].secret.clone().expect("run secret");
    assert_eq!(run.name, names::per_run_secret(&s.job_name()));
    assert_eq!(run.items, None);
    for (i, chunk) in ["b0", "b1", "b2"].iter().enumerate() {
        let p = sources[i + 1].secret.clone().expect("chunk");
        assert_eq!(p.name, *chunk);
        let items = p.items.unwrap_or_default();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].key, "tfstate");
        assert_eq!(items[0].path, format!("restore/{i}"));
    }
    let a = args(&job);
    assert!(a.contains(&"--restore-chunks=3".to_owned()));
    assert!(a.contains(&"--restore-resources=5".to_owned()));
    let ann = job.metadata.annotations.unwrap_or_default();
    assert_eq!(
        ann.get("captf.io/restore-serial").map(String::as_str),
        Some("7")
    );

    // Restore data on another op is ignored.
    s.op = Operation::Refresh;
    let job = build_job(&s);
    assert!(!flags(&job).contains(&"--restore-chunks".to_owned()));
    let config = pod(&job)
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "config")
        .cloned()
        .expect("config volume");
    assert!(config.projected.is_none() && config.secret.is_some());
}

#[test]
fn backend_labels_and_hcl() {
    let k = key(WorkloadKind::Machine, &"m".repeat(70));
    let labels = backend_labels(&k, "prod");
    assert_eq!(labels.len(), 5);
    assert_eq!(
        labels.get("captf.infrastructure.cluster.x-k8s.io/owner-name"),
        Some(&k.owner_name_label())
    );
    assert_eq!(
        labels["captf.infrastructure.cluster.x-k8s.io/owner-name"].len(),
        16
    );
    assert_eq!(labels["clusterctl.cluster.x-k8s.io/move"], "");
    assert_eq!(labels["captf.io/managed"], "true");
    // Stable: the same inputs give the same map.
    assert_eq!(labels, backend_labels(&k, "prod"));

    let m = BTreeMap::from([
        ("b".to_owned(), String::new()),
        ("a".to_owned(), "x\"y\\z".to_owned()),
        ("t".to_owned(), "${x} %{y} $ %".to_owned()),
        ("n".to_owned(), "l1\nl2".to_owned()),
    ]);
    assert_eq!(
        hcl_map(&m),
        r#"{"a"="x\"y\\z","b"="","n"="l1\nl2","t"="$${x} %%{y} $ %"}"#
    );
    assert_eq!(hcl_map(&BTreeMap::new()), "{}");
}

#[test]
fn per_run_secret_shape() {
    let s = per_run_secret(
        "team-a",
        "captf-m-m1-apply-a1-abcdef",
        "job-uid",
        b"{\"terraform\":{}}",
        b"{}",
    );
    assert_eq!(
        s.metadata.name.as_deref(),
        Some("captf-run-captf-m-m1-apply-a1-abcdef")
    );
    assert_eq!(s.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(
        s.metadata.labels,
        Some(BTreeMap::from([(
            "captf.io/managed".to_owned(),
            "true".to_owned()
        )]))
    );
    let owner = s.metadata.owner_references.clone().expect("owner");
    assert_eq!(owner.len(), 1);
    assert_eq!(
        (owner[0].api_version.as_str(), owner[0].kind.as_str()),
        ("batch/v1", "Job")
    );
    assert_eq!(owner[0].name, "captf-m-m1-apply-a1-abcdef");
    assert_eq!(owner[0].uid, "job-uid");
    assert_eq!(owner[0].controller, Some(true));
    let data = s.data.expect("data");
    assert_eq!(
        data.keys().cloned().collect::<Vec<_>>(),
        ["main.tf.json", "terraform.tfvars.json"]
    );
    assert_eq!(data["terraform.tfvars.json"].0, b"{}");
    assert_eq!(s.string_data, None);
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
