//! The restore projection, the state backend's labels and HCL, and the per-run Secret.

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

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
        lineage: "l-1".to_owned(),
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
    let object = OwnerReference {
        api_version: "infrastructure.cluster.x-k8s.io/v1alpha1".to_owned(),
        kind: "TerraformMachine".to_owned(),
        name: "m1".to_owned(),
        uid: "object-uid".to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let s = per_run_secret(
        "team-a",
        "captf-m-m1-apply-a1-abcdef",
        &object,
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
    // The object's until the Job exists, then the Job's.
    assert_eq!(s.metadata.owner_references, Some(vec![object]));
    let job = job_owner("captf-m-m1-apply-a1-abcdef", "job-uid");
    assert_eq!(
        (job.api_version.as_str(), job.kind.as_str()),
        ("batch/v1", "Job")
    );
    assert_eq!(job.name, "captf-m-m1-apply-a1-abcdef");
    assert_eq!(job.uid, "job-uid");
    assert_eq!(job.controller, Some(true));
    let data = s.data.expect("data");
    assert_eq!(
        data.keys().cloned().collect::<Vec<_>>(),
        ["main.tf.json", "terraform.tfvars.json"]
    );
    assert_eq!(data["terraform.tfvars.json"].0, b"{}");
    assert_eq!(s.string_data, None);
}
