//! Job names, labels and the fixed fields, owner included.

use super::*;

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
