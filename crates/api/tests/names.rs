//! Table tests for derived object names: every name valid, long names bounded, near names
//! never colliding, suffixes never ending in `-<digits>`.

use std::collections::BTreeSet;

use captf_api::Operation;
use captf_api::names::{
    self, MAX_JOB_NAME, MAX_LABEL, MAX_NAME, ObjectKey, WorkloadKind, is_dns_label,
    is_dns_subdomain, is_label_value,
};

fn key(ns: &str, kind: WorkloadKind, name: &str) -> ObjectKey {
    ObjectKey::new(ns, kind, name).expect("test key is valid")
}

/// Names of every length class and shape an object may have.
fn sample_names() -> Vec<String> {
    vec![
        "a".into(),
        "demo".into(),
        "prod-md-0-abcde".into(),
        "with.dots.in.it".into(),
        "x".repeat(40),
        "y".repeat(63),
        "z".repeat(64),
        format!("{}.{}", "a".repeat(63), "b".repeat(63)),
        "n".repeat(253),
        "9-starts-with-digit".into(),
        "ends-with-digit-1".into(),
    ]
}

#[test]
fn state_suffix_matches_the_spec_formula() {
    // sha256("team-a/TerraformCluster/prod")[..16] + "-c", computed independently with
    // `printf %s team-a/TerraformCluster/prod | sha256sum`.
    let k = key("team-a", WorkloadKind::Cluster, "prod");
    assert_eq!(k.state_suffix(), "f66792f9106e7299-c");
    assert_eq!(k.state_secret(), "tfstate-default-f66792f9106e7299-c");
    assert_eq!(k.lock_lease(), "lock-tfstate-default-f66792f9106e7299-c");
    assert_eq!(k.run_lease(), "captf-run-f66792f9106e7299-c");
}

#[test]
fn suffix_tail_names_the_kind_and_never_ends_in_digits() {
    for kind in WorkloadKind::ALL {
        for name in sample_names() {
            let suffix = key("ns", kind, &name).state_suffix();
            assert!(suffix.ends_with(&format!("-{}", kind.short())), "{suffix}");
            let tail = suffix.rsplit('-').next().expect("suffix has a dash");
            assert!(
                !tail.chars().all(|c| c.is_ascii_digit()),
                "suffix {suffix} ends in -<digits>: the backend would read it as a chunk index"
            );
            assert_eq!(suffix.len(), 16 + 1 + kind.short().len());
        }
    }
}

#[test]
fn every_derived_name_is_a_valid_kubernetes_name() {
    for kind in WorkloadKind::ALL {
        for name in sample_names() {
            let k = key("some-namespace", kind, &name);
            let subdomains = [
                k.state_secret(),
                names::chunk_name(&k.state_secret(), 31),
                k.lock_lease(),
                k.run_lease(),
                k.durable_inputs_secret(),
                k.plan_key_secret(),
                k.backup_secret(u64::MAX),
                names::chunk_name(&k.backup_secret(7), 3),
                k.backup_secret_with_digest(7, "0123456789abcdef"),
                names::credential_mirror(&name),
                names::cluster_lease("some-namespace", &name),
            ];
            for n in subdomains {
                assert!(
                    is_dns_subdomain(&n),
                    "{n:?} (from {name:?}) is not a valid name"
                );
                assert!(n.len() <= MAX_NAME);
            }
            assert!(is_label_value(&k.owner_name_label()), "{name}");
            assert!(is_label_value(&names::label_value(&name)));
            for op in Operation::ALL {
                for attempt in [1, 9, 10, 4_294_967_295] {
                    let job = k.job_name(op, attempt, "h2:abc", "");
                    assert!(job.len() <= MAX_JOB_NAME, "{job} is {} long", job.len());
                    assert!(is_dns_label(&job), "{job} is not a DNS label");
                    // The pod name (`<job>-<5 chars>`) must still be a valid hostname.
                    let pod = format!("{job}-x7k2p");
                    assert!(pod.len() <= MAX_LABEL && is_dns_label(&pod), "{pod}");
                    let per_run = names::per_run_secret(&job);
                    assert!(is_dns_subdomain(&per_run) && per_run.len() <= MAX_LABEL + 10);
                }
            }
        }
    }
}

#[test]
fn short_names_are_kept_verbatim() {
    let k = key("default", WorkloadKind::MachinePool, "demo-pool-0");
    assert_eq!(k.durable_inputs_secret(), "captf-inputs-mp-demo-pool-0");
    assert_eq!(k.plan_key_secret(), "captf-plankey-mp-demo-pool-0");
    assert_eq!(k.owner_name_label(), "demo-pool-0");
    assert_eq!(names::credential_mirror("noop"), "captf-creds-noop");
    let job = k.job_name(Operation::Apply, 1, "h2:abc", "");
    assert!(job.starts_with("captf-mp-demo-pool-0-apply-a1-"), "{job}");
    assert_eq!(job.len(), "captf-mp-demo-pool-0-apply-a1-".len() + 6);
}

#[test]
fn long_names_are_hash_shortened() {
    let long = "n".repeat(253);
    let k = key("default", WorkloadKind::Cluster, &long);
    assert_eq!(k.durable_inputs_secret().len(), MAX_NAME);
    assert_eq!(k.owner_name_label().len(), 16);
    let job = k.job_name(Operation::Destroy, 3, "h2:abc", "");
    assert!(!job.contains("nnnn"), "{job} keeps the long name");
    // A name with a dot is valid for the object but would cut the pod hostname: hashed too.
    let dotted = key("default", WorkloadKind::Cluster, "a.b");
    assert!(!dotted.job_name(Operation::Apply, 1, "h", "").contains('.'));
}

#[test]
fn near_names_never_collide() {
    // Pairs that a careless scheme would map to one name: a long common prefix, the kind
    // boundary, the namespace/name boundary.
    let mut names_seen = BTreeSet::new();
    let mut inputs = Vec::new();
    let base = "p".repeat(250);
    for tail in ["aaa", "aab", "aba", "baa"] {
        inputs.push((
            "ns".to_owned(),
            WorkloadKind::Cluster,
            format!("{base}{tail}"),
        ));
    }
    for kind in WorkloadKind::ALL {
        inputs.push(("ns".to_owned(), kind, "demo".to_owned()));
    }
    inputs.push(("a-b".to_owned(), WorkloadKind::Cluster, "c".to_owned()));
    inputs.push(("a".to_owned(), WorkloadKind::Cluster, "b-c".to_owned()));
    for (ns, kind, name) in &inputs {
        let k = key(ns, *kind, name);
        for derived in [
            k.state_suffix(),
            k.durable_inputs_secret(),
            k.plan_key_secret(),
            k.job_name(Operation::Apply, 1, "h", ""),
        ] {
            // Per-namespace names may repeat across namespaces; the suffix may not.
            let scoped = if derived.starts_with("captf-") {
                format!("{ns}/{derived}")
            } else {
                derived
            };
            assert!(names_seen.insert(scoped.clone()), "collision on {scoped}");
        }
    }
}

#[test]
fn job_name_hash_covers_inputs_op_attempt_and_tick() {
    let k = key("ns", WorkloadKind::Cluster, "demo");
    let base = k.job_name(Operation::Refresh, 1, "h2:a", "t1");
    assert_eq!(
        base,
        k.job_name(Operation::Refresh, 1, "h2:a", "t1"),
        "deterministic"
    );
    for other in [
        k.job_name(Operation::Refresh, 1, "h2:b", "t1"),
        k.job_name(Operation::Refresh, 1, "h2:a", "t2"),
        k.job_name(Operation::Refresh, 2, "h2:a", "t1"),
        k.job_name(Operation::Drift, 1, "h2:a", "t1"),
    ] {
        assert_ne!(base, other);
    }
}

#[test]
fn invalid_keys_name_the_field_and_the_rule() {
    let cases = [
        ("", "demo", "metadata.namespace"),
        ("Upper", "demo", "metadata.namespace"),
        ("ns", "", "metadata.name"),
        ("ns", "Demo", "metadata.name"),
        ("ns", "-demo", "metadata.name"),
        ("ns", "a..b", "metadata.name"),
    ];
    for (ns, name, field) in cases {
        let err = ObjectKey::new(ns, WorkloadKind::Cluster, name).expect_err("must be rejected");
        let msg = err.to_string();
        assert!(msg.starts_with(field), "{msg}");
        assert!(msg.contains("must be a DNS-1123"), "{msg}");
        assert_eq!(err.category(), "InvalidName");
    }
    let too_long = "n".repeat(254);
    assert!(ObjectKey::new("ns", WorkloadKind::Machine, &too_long).is_err());
}

#[test]
fn cluster_lease_and_mirror_shapes() {
    assert_eq!(
        names::cluster_lease("ns", "demo").len(),
        "captf-cluster-".len() + 16
    );
    assert_ne!(
        names::cluster_lease("ns", "demo"),
        names::cluster_lease("ns2", "demo")
    );
    let long_identity = "i".repeat(253);
    assert_eq!(
        names::credential_mirror(&long_identity).len(),
        "captf-creds-".len() + 16
    );
    assert_eq!(
        names::chunk_name("tfstate-default-x-c", 0),
        "tfstate-default-x-c"
    );
    assert_eq!(
        names::chunk_name("tfstate-default-x-c", 10),
        "tfstate-default-x-c-part-10"
    );
}

#[test]
fn pods_of_the_objects_own_jobs_are_recognised() {
    let key = ObjectKey::new("ns", WorkloadKind::Cluster, "demo").expect("key");
    let long = ObjectKey::new("ns", WorkloadKind::Cluster, "a".repeat(60)).expect("key");
    let job = key.job_name(Operation::Apply, 3, "h2:x", "");
    let long_job = long.job_name(Operation::Destroy, 1, "", "");
    let rows: Vec<(&ObjectKey, String, bool)> = vec![
        (&key, format!("{job}-6r66d"), true),
        (
            &key,
            format!("{}-abcde", key.job_name(Operation::Drift, 12, "", "t")),
            true,
        ),
        (&long, format!("{long_job}-x9z8q"), true),
        // Not a pod of a Job: no random suffix, or a wrong one.
        (&key, job.clone(), false),
        (&key, format!("{job}-abc"), false),
        // Another object's Job, another kind's, a workstation.
        (
            &key,
            format!(
                "{}-6r66d",
                ObjectKey::new("ns", WorkloadKind::Cluster, "other")
                    .expect("key")
                    .job_name(Operation::Apply, 1, "", "")
            ),
            false,
        ),
        (
            &key,
            format!(
                "{}-6r66d",
                ObjectKey::new("ns", WorkloadKind::Machine, "demo")
                    .expect("key")
                    .job_name(Operation::Apply, 1, "", "")
            ),
            false,
        ),
        (&key, "laptop".to_owned(), false),
        (
            &key,
            "captf-c-demo-frobnicate-a1-abcdef-6r66d".to_owned(),
            false,
        ),
        (&key, "captf-c-demo-apply-a-abcdef-6r66d".to_owned(), false),
    ];
    for (k, pod, want) in rows {
        assert_eq!(k.owns_pod_name(&pod), want, "{pod}");
    }
}
