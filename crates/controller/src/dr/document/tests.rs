use serde_json::json;

use super::*;

fn cluster(name: &str, paused: Option<bool>) -> Value {
    let mut o = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": name, "namespace": "team-a", "uid": "old-cluster"},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformCluster", "name": name}}
    });
    if let Some(p) = paused {
        o["spec"]["paused"] = json!(p);
    }
    o
}

fn terraform_cluster(name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformCluster",
        "metadata": {
            "name": name, "namespace": "team-a", "annotations": annotations,
            "labels": {"cluster.x-k8s.io/cluster-name": name},
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": name, "uid": "old-cluster"}]
        },
        "spec": {"source": {"image": "m:1"}, "identityRef": {"name": "aws"},
                 "defaults": {"identityRef": {"name": "aws-machines"}},
                 "variablesFrom": [{"configMapRef": {"name": "vars"}}, {"secretRef": {"name": "secret-vars"}}]}
    })
}

fn secret(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "team-a"}, "data": {}})
}

fn export() -> Export {
    Export {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        namespace: "team-a".into(),
        cluster_api: vec![cluster("a", None), cluster("b", Some(true))],
        secrets: vec![secret("tfstate-default-x")],
        objects: vec![
            terraform_cluster("a", json!({})),
            terraform_cluster("b", json!({})),
            terraform_cluster("c", json!({"cluster.x-k8s.io/paused": ""})),
        ],
        ..Default::default()
    }
}

#[test]
fn strip_removes_server_fields_and_optionally_owner_references() {
    let full = json!({"metadata": {
        "name": "n", "namespace": "ns", "labels": {"tfstate": "true"}, "annotations": {"a": "b"},
        "uid": "u", "resourceVersion": "1", "creationTimestamp": "t", "managedFields": [],
        "generation": 2, "selfLink": "/x", "deletionTimestamp": "t", "deletionGracePeriodSeconds": 0,
        "ownerReferences": [{"uid": "u"}], "finalizers": ["f"]
    }});
    let cases = [
        (
            true,
            vec![
                "annotations",
                "finalizers",
                "labels",
                "name",
                "namespace",
                "ownerReferences",
            ],
        ),
        (
            false,
            vec!["annotations", "finalizers", "labels", "name", "namespace"],
        ),
    ];
    for (keep, fields) in cases {
        let mut o = full.clone();
        strip(&mut o, keep);
        let got: Vec<&str> = o["metadata"]
            .as_object()
            .expect("metadata")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(got, fields, "owner references kept: {keep}");
    }
}

#[test]
fn references_are_found_wherever_the_spec_names_them() {
    let objects = vec![
        terraform_cluster("a", json!({})),
        json!({"kind": "TerraformMachineTemplate", "spec": {"template": {"spec": {"identityRef": {"name": "tmpl"}}}}}),
        json!({"kind": "TerraformMachine", "metadata": {"name": "no-spec"}}),
    ];
    assert_eq!(
        referenced_identities(&objects)
            .into_iter()
            .collect::<Vec<_>>(),
        ["aws", "aws-machines", "tmpl"]
    );
    assert_eq!(
        referenced_variable_sources(&objects)
            .into_iter()
            .collect::<Vec<_>>(),
        [
            VariableSource::ConfigMap("vars".into()),
            VariableSource::Secret("secret-vars".into())
        ]
    );
}

#[test]
fn pause_and_unpause_by_kind() {
    let cases = [
        (
            cluster("a", None),
            false,
            json!({"spec": {"paused": false}}),
        ),
        (
            cluster("a", Some(false)),
            false,
            json!({"spec": {"paused": false}}),
        ),
        (
            cluster("a", Some(true)),
            true,
            json!({"spec": {"paused": false}}),
        ),
        (
            terraform_cluster("a", json!({})),
            false,
            json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": null}}}),
        ),
        (
            terraform_cluster("a", json!({"cluster.x-k8s.io/paused": "true"})),
            true,
            json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": null}}}),
        ),
        (
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformMachine", "metadata": {"name": "m"}}),
            false,
            json!({"metadata": {"annotations": {"cluster.x-k8s.io/paused": null}}}),
        ),
    ];
    for (object, was_paused, patch) in cases {
        assert_eq!(paused(&object), was_paused, "{object}");
        let mut p = object.clone();
        pause(&mut p);
        assert!(paused(&p), "paused after pause(): {p}");
        assert_eq!(unpause_patch(&object), patch, "{object}");
    }
}

#[test]
fn owner_references_point_at_restored_owners_or_are_dropped() {
    let mut uids = BTreeMap::new();
    uids.insert(
        ("cluster.x-k8s.io".into(), "Cluster".into(), "a".into()),
        "new-a".to_owned(),
    );
    let mut owned = terraform_cluster("a", json!({}));
    assert!(rewrite_owners(&mut owned, &uids).is_empty());
    assert_eq!(
        owned.pointer("/metadata/ownerReferences/0/uid"),
        Some(&json!("new-a"))
    );

    let mut orphan = terraform_cluster("b", json!({}));
    assert_eq!(rewrite_owners(&mut orphan, &uids), ["Cluster/b"]);
    assert!(orphan.pointer("/metadata/ownerReferences").is_none());

    // The same name under another group is another owner.
    let mut other_group = terraform_cluster("a", json!({}));
    other_group["metadata"]["ownerReferences"][0]["apiVersion"] = json!("example.com/v1");
    assert_eq!(rewrite_owners(&mut other_group, &uids), ["Cluster/a"]);

    let mut none = secret("s");
    assert!(rewrite_owners(&mut none, &uids).is_empty());
}

#[test]
fn validation_names_the_problem() {
    assert_eq!(validate(&export()), Ok(()));
    type Break = fn(&mut Export);
    let cases: Vec<(Break, &str)> = vec![
        (
            |e| e.kind = "List".into(),
            "not a CAPTF disaster-recovery export",
        ),
        (|e| e.namespace.clear(), "names no namespace"),
        (
            |e| e.secrets[0]["metadata"]["namespace"] = json!("other"),
            "Secret/tfstate-default-x is in namespace \"other\"",
        ),
        (
            |e| e.secrets[0]["metadata"]["ownerReferences"] = json!([{"uid": "u"}]),
            "Secret tfstate-default-x carries owner references",
        ),
        (
            |e| {
                e.objects.push(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "team-a"}}))
            },
            "item Deployment/d (apps/v1) is not a kind",
        ),
        (
            |e| e.cluster_api[0]["spec"] = json!("paused"),
            "item 0 (Cluster/a): `spec` is not an object",
        ),
        (
            |e| e.objects[0]["metadata"]["annotations"] = json!(["x"]),
            "(TerraformCluster/a): `metadata.annotations` is not an object",
        ),
        (
            |e| e.objects[1]["metadata"]["ownerReferences"] = json!(["Cluster/b"]),
            "(TerraformCluster/b): `metadata.ownerReferences` is not a list of objects",
        ),
        (
            |e| e.secrets.push(json!("a Secret")),
            "): not a JSON object",
        ),
        (
            |e| {
                e.identities
                    .push(json!({"apiVersion": "v1", "kind": "X", "metadata": "m"}))
            },
            "`metadata` is missing or not an object",
        ),
        (
            |e| e.namespace_metadata = json!([1]),
            "`namespaceMetadata` is not an object",
        ),
    ];
    for (break_it, message) in cases {
        let mut e = export();
        break_it(&mut e);
        let error = validate(&e).expect_err(message);
        assert!(
            error.contains(message),
            "{error:?} should contain {message:?}"
        );
    }
}

#[test]
fn unpause_takes_back_only_what_the_import_paused() {
    let e = export();
    let names = |only: &[&str]| -> Result<Vec<String>, String> {
        let only: Vec<String> = only.iter().map(|s| (*s).to_owned()).collect();
        to_unpause(&e, &only).map(|v| v.into_iter().map(display).collect())
    };
    // Cluster b and TerraformCluster c were paused when exported: they stay paused.
    assert_eq!(
        names(&[]),
        Ok(vec![
            "Cluster/a".to_owned(),
            "TerraformCluster/a".into(),
            "TerraformCluster/b".into()
        ])
    );
    // One object brings its Cluster along.
    assert_eq!(
        names(&["TerraformCluster/a"]),
        Ok(vec!["Cluster/a".to_owned(), "TerraformCluster/a".into()])
    );
    assert_eq!(
        names(&["TerraformCluster/b"]),
        Ok(vec!["TerraformCluster/b".to_owned()])
    );
    let error = names(&["TerraformCluster/nope"]).expect_err("unknown object");
    assert!(error.contains("--object TerraformCluster/nope"), "{error}");
}
