//! What may change after creation: endpoints, machines, provider IDs, pools, templates and
//! identities; and the names and tokens every kind bounds.

use super::*;

#[test]
fn a_complete_endpoint_is_immutable() {
    let endpoint = |host: Option<&str>, port: Option<i32>| {
        let mut c = a_cluster();
        c.spec.control_plane_endpoint = Some(ApiEndpoint {
            host: host.map(Into::into),
            port,
        });
        c
    };
    let mut none = a_cluster();
    none.spec.control_plane_endpoint = None;
    let complete = endpoint(Some("10.0.0.1"), Some(6443));
    let cases = [
        ("set once", &none, &complete, false),
        ("unchanged", &complete, &complete, false),
        (
            "moved",
            &complete,
            &endpoint(Some("10.0.0.2"), Some(6443)),
            true,
        ),
        (
            "port changed",
            &complete,
            &endpoint(Some("10.0.0.1"), Some(443)),
            true,
        ),
        ("removed", &complete, &none, true),
    ];
    for (name, old, new, refused) in cases {
        let v = cluster(&update(old, new));
        assert_eq!(
            fields(&v) == ["spec.controlPlaneEndpoint"],
            refused,
            "{name}: {v:?}"
        );
    }
    // A half-set endpoint stored before may still be completed.
    let mut half = a_cluster();
    half.spec.control_plane_endpoint = Some(ApiEndpoint {
        host: Some("10.0.0.1".into()),
        port: None,
    });
    assert!(cluster(&update(&half, &complete)).is_empty());
}

#[test]
fn machines_are_immutable_but_for_jobs_drift_and_remediation() {
    let base = a_machine();
    let changed = |f: &dyn Fn(&mut TerraformMachine)| {
        let mut m = base.clone();
        f(&mut m);
        m
    };
    let none = ManagerUser::default();
    let cases: Vec<(&str, TerraformMachine, Vec<&str>)> = vec![
        (
            "source",
            changed(&|m| m.spec.workspace.source.image = "ghcr.io/example/module:v2".into()),
            vec!["spec.source"],
        ),
        (
            "identity",
            changed(&|m| {
                m.spec.workspace.identity_ref = Some(IdentityReference { name: "x".into() })
            }),
            vec!["spec.identityRef"],
        ),
        (
            "variables",
            changed(&|m| {
                m.spec.workspace.variables = json!({"size": "large"}).as_object().cloned()
            }),
            vec!["spec.variables"],
        ),
        (
            "variablesFrom",
            changed(&|m| {
                m.spec.workspace.variables_from = Some(vec![VariablesSource {
                    config_map_ref: Some(VariablesSourceReference { name: "v".into() }),
                    ..Default::default()
                }])
            }),
            vec!["spec.variablesFrom"],
        ),
        (
            "jobs",
            changed(&|m| m.spec.workspace.jobs = Some(Box::new(timing(Some(60), Some(900))))),
            vec![],
        ),
        (
            "drift and remediation",
            changed(&|m| {
                m.spec.drift = Some(Default::default());
                m.spec.remediation = Some(Default::default());
            }),
            vec![],
        ),
        (
            "labels",
            changed(&|m| m.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into())),
            vec![],
        ),
    ];
    for (name, new, expected) in cases {
        let v = machine(&update(&base, &new), &none);
        assert_eq!(fields(&v), expected, "{name}: {v:?}");
    }
    // The same variables re-serialised in another key order are no change.
    let a = changed(&|m| {
        m.spec.workspace.variables = json!({"a": 1, "b": [1, 2]}).as_object().cloned()
    });
    let b: TerraformMachine = serde_json::from_value(
        serde_json::to_value(&a)
            .map(|mut v| {
                v["spec"]["variables"] = json!({"b": [1, 2], "a": 1});
                v
            })
            .expect("json"),
    )
    .expect("machine");
    assert!(machine(&update(&a, &b), &none).is_empty());
}

#[test]
fn provider_id_is_set_once_by_the_manager() {
    let with = |id: Option<&str>| {
        let mut m = a_machine();
        m.spec.provider_id = id.map(Into::into);
        m
    };
    let known = ManagerUser::new(Some("captf-system"), Some("captf-controller-manager"));
    let unknown = ManagerUser::new(Some("captf-system"), None);
    assert_eq!(known.name(), Some(MANAGER));
    assert_eq!(unknown.name(), None);
    let cases = [
        (
            "manager sets it",
            None,
            Some("noop://a"),
            MANAGER,
            &known,
            false,
        ),
        (
            "someone else sets it",
            None,
            Some("noop://a"),
            "alice",
            &known,
            true,
        ),
        (
            "manager unknown",
            None,
            Some("noop://a"),
            MANAGER,
            &unknown,
            true,
        ),
        ("empty to empty", Some(""), Some(""), "alice", &known, false),
        (
            "unchanged",
            Some("noop://a"),
            Some("noop://a"),
            "alice",
            &known,
            false,
        ),
        (
            "changed by the manager",
            Some("noop://a"),
            Some("noop://b"),
            MANAGER,
            &known,
            true,
        ),
        ("cleared", Some("noop://a"), None, MANAGER, &known, true),
    ];
    for (name, old, new, user, manager, refused) in cases {
        let (old, new) = (with(old), with(new));
        let change = Change {
            user,
            ..update(&old, &new)
        };
        let v = machine(&change, manager);
        assert_eq!(fields(&v) == ["spec.providerID"], refused, "{name}: {v:?}");
        assert!(refused || v.is_empty(), "{name}: {v:?}");
    }
    // clusterctl move recreates a machine with its providerID: a create, allowed from anyone.
    assert!(machine(&create(&with(Some("noop://a"))), &known).is_empty());
}

#[test]
fn pools_have_no_immutable_fields() {
    let mut old = TerraformMachinePool::new("p", Default::default());
    old.spec.workspace.source.image = IMAGE.into();
    let mut new = old.clone();
    new.spec.workspace.source.image = "ghcr.io/example/pool:v2".into();
    new.spec.provider_id_list = Some(vec!["noop://1".into()]);
    new.spec.workspace.variables = json!({"replicas_hint": 3}).as_object().cloned();
    assert!(machine_pool(&update(&old, &new)).is_empty());
    new.spec.workspace.variables = json!({"captf_x": 3}).as_object().cloned();
    assert_eq!(
        fields(&machine_pool(&update(&old, &new))),
        ["spec.variables[\"captf_x\"]"]
    );
}

#[test]
fn templates_are_frozen_except_for_topology_dry_runs() {
    let mut old = TerraformMachineTemplate::new("t", Default::default());
    old.spec.template.spec.workspace.source.image = IMAGE.into();
    let mut new = old.clone();
    new.spec.template.spec.workspace.source.image = "ghcr.io/example/module:v2".into();
    let annotated = {
        let mut a = new.clone();
        a.metadata.annotations = Some([(TOPOLOGY_DRY_RUN.to_owned(), String::new())].into());
        a
    };
    let cases = [
        ("a change", &new, false, true),
        ("a plain dry run", &new, true, true),
        ("annotated but not a dry run", &annotated, false, true),
        ("a topology dry run", &annotated, true, false),
    ];
    for (name, object, dry_run, refused) in cases {
        let change = Change {
            dry_run,
            ..update(&old, object)
        };
        let v = machine_template(&change);
        assert_eq!(
            fields(&v) == ["spec.template.spec"],
            refused,
            "{name}: {v:?}"
        );
        assert!(refused || v.is_empty(), "{name}: {v:?}");
    }
    // Outside the template spec: metadata and spec.capacity may change.
    let mut relabelled = old.clone();
    relabelled.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
    relabelled.spec.capacity = Some(
        [(
            "cpu".to_owned(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()),
        )]
        .into(),
    );
    assert!(machine_template(&update(&old, &relabelled)).is_empty());
    // The stamped-out machines' rules apply to the template's spec.
    let mut reserved = old.clone();
    reserved.spec.template.spec.workspace.variables =
        json!({"bootstrap_data": 1}).as_object().cloned();
    reserved.spec.template.metadata = Some(captf_api::common::ObjectMeta {
        labels: Some([("bad key!".to_owned(), "v".to_owned())].into()),
        annotations: Some([("example.com/ok".to_owned(), "anything at all".to_owned())].into()),
    });
    assert_eq!(
        fields(&machine_template(&create(&reserved))),
        [
            "spec.template.spec.variables[\"bootstrap_data\"]",
            "spec.template.metadata.labels[\"bad key!\"]"
        ]
    );
    // A cluster template may leave the identity to a ClusterClass patch.
    let mut ct = TerraformClusterTemplate::new("ct", Default::default());
    ct.spec.template.spec.workspace.source.image = IMAGE.into();
    assert!(cluster_template(&create(&ct)).is_empty());
    let mut changed = ct.clone();
    changed.spec.template.spec.workspace.identity_ref =
        Some(IdentityReference { name: "aws".into() });
    assert_eq!(
        fields(&cluster_template(&update(&ct, &changed))),
        ["spec.template.spec"]
    );
}

#[test]
fn identities() {
    let an_identity = |allowed: Option<AllowedNamespaces>| {
        let mut i = TerraformClusterIdentity::new("aws", Default::default());
        i.spec.secret_ref.name = "creds".into();
        i.spec.secret_ref.namespace = "captf-system".into();
        i.spec.allowed_namespaces = allowed;
        i
    };
    let list = |names: &[&str]| AllowedNamespaces {
        list: Some(names.iter().map(|n| (*n).to_owned()).collect()),
        selector: None,
    };
    let selector = |key: &str, operator: &str, values: Option<Vec<&str>>| AllowedNamespaces {
        list: None,
        selector: Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: operator.into(),
                values: values.map(|v| v.into_iter().map(Into::into).collect()),
            }]),
            match_labels: None,
        }),
    };
    let mut no_secret = an_identity(None);
    no_secret.spec.secret_ref = Default::default();
    let cases: Vec<(&str, TerraformClusterIdentity, Vec<&str>)> = vec![
        ("no namespaces", an_identity(None), vec![]),
        (
            "a list",
            an_identity(Some(list(&["team-a", "team-b"]))),
            vec![],
        ),
        (
            "every namespace",
            an_identity(Some(AllowedNamespaces {
                list: None,
                selector: Some(LabelSelector::default()),
            })),
            vec![],
        ),
        (
            "ambiguous",
            an_identity(Some(AllowedNamespaces::default())),
            vec!["spec.allowedNamespaces"],
        ),
        (
            "bad list entry",
            an_identity(Some(list(&["ok", "Not_OK"]))),
            vec!["spec.allowedNamespaces.list[1]"],
        ),
        (
            "selector",
            an_identity(Some(selector("team", "In", Some(vec!["a"])))),
            vec![],
        ),
        (
            "In without values",
            an_identity(Some(selector("team", "In", None))),
            vec!["spec.allowedNamespaces.selector.matchExpressions[0].values"],
        ),
        (
            "Exists with values",
            an_identity(Some(selector("team", "Exists", Some(vec!["a"])))),
            vec!["spec.allowedNamespaces.selector.matchExpressions[0].values"],
        ),
        (
            "bad operator and key",
            an_identity(Some(selector("bad key", "Equals", Some(vec!["a"])))),
            vec![
                "spec.allowedNamespaces.selector.matchExpressions[0].key",
                "spec.allowedNamespaces.selector.matchExpressions[0].operator",
            ],
        ),
        (
            "no secret",
            no_secret,
            vec!["spec.secretRef.name", "spec.secretRef.namespace"],
        ),
    ];
    for (name, object, expected) in cases {
        let verdict = identity(&create(&object));
        assert_eq!(fields(&verdict.violations), expected, "{name}");
        // The author's read access is checked only for an identity that is otherwise valid.
        assert_eq!(verdict.check_read.is_some(), expected.is_empty(), "{name}");
    }
    // Updates: only a change of the Secret or of the namespaces asks again.
    let stored = an_identity(Some(list(&["team-a"])));
    let mut relabelled = stored.clone();
    relabelled.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into());
    assert_eq!(identity(&update(&stored, &relabelled)).check_read, None);
    let widened = an_identity(Some(list(&["team-a", "team-b"])));
    assert_eq!(
        identity(&update(&stored, &widened))
            .check_read
            .map(|s| s.name),
        Some("creds".to_owned())
    );
    let mut moved = stored.clone();
    moved.spec.secret_ref.name = "other".into();
    assert_eq!(
        identity(&update(&stored, &moved))
            .check_read
            .map(|s| s.name),
        Some("other".to_owned())
    );
}

#[test]
fn qualified_names() {
    for (key, ok) in [
        ("app", true),
        ("example.com/app", true),
        ("a.b-c_d", true),
        ("", false),
        ("/app", false),
        ("Example.com/app", false),
        ("example.com/", false),
        ("-app", false),
        ("a/b/c", false),
        (&"x".repeat(64), false),
    ] {
        assert_eq!(is_qualified_name(key), ok, "{key:?}");
    }
}

#[test]
fn retry_and_replan_tokens_are_bounded() {
    let annotated = |key: &str, value: String| {
        let mut c = a_cluster();
        c.metadata.annotations = Some([(key.to_owned(), value)].into());
        c
    };
    let cases = [
        (
            captf_api::annotations::RETRY,
            "2026-12-07T06:00:00.123456789Z".to_owned(),
            false,
        ),
        (captf_api::annotations::REPLAN, "x".repeat(63), false),
        (captf_api::annotations::RETRY, "x".repeat(64), true),
        (captf_api::annotations::REPLAN, "x".repeat(4096), true),
    ];
    for (key, value, refused) in cases {
        let len = value.len();
        let c = annotated(key, value);
        let v = cluster(&create(&c));
        assert_eq!(!v.is_empty(), refused, "{key} of {len} bytes: {v:?}");
        if refused {
            assert_eq!(fields(&v), [format!("metadata.annotations[{key:?}]")]);
            let message = v.message("TerraformCluster", "c");
            assert!(message.contains("at most 63"), "{message}");
        }
        let mut m = a_machine();
        m.metadata.annotations = c.metadata.annotations.clone();
        let manager = ManagerUser::new(None, None);
        assert_eq!(
            !machine(&create(&m), &manager).is_empty(),
            refused,
            "machine"
        );
        let mut p = TerraformMachinePool::new("p", Default::default());
        p.spec.workspace.source.image = IMAGE.into();
        p.metadata.annotations = c.metadata.annotations.clone();
        assert_eq!(!machine_pool(&create(&p)).is_empty(), refused, "pool");
    }
}
