use super::*;

fn reference(kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "infrastructure.cluster.x-k8s.io/v1alpha1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: None,
        block_owner_deletion: None,
    }
}

#[test]
fn only_captfs_mirror_of_the_identity_is_revoked() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let secret = |mirrored: Option<&str>, identity: Option<&str>, uid: Option<&str>| ObjectMeta {
        labels: mirrored.map(|v| BTreeMap::from([(labels::MIRRORED.to_owned(), v.to_owned())])),
        annotations: identity
            .map(|i| BTreeMap::from([(annotations::IDENTITY.to_owned(), i.to_owned())])),
        uid: uid.map(str::to_owned),
        ..ObjectMeta::default()
    };
    let cases = [
        (
            "the identity's mirror",
            secret(Some("true"), Some("acme"), Some("u1")),
            Some("u1"),
        ),
        (
            "another identity's mirror",
            secret(Some("true"), Some("other"), Some("u1")),
            None,
        ),
        (
            "not labelled a mirror",
            secret(None, Some("acme"), Some("u1")),
            None,
        ),
        (
            "labelled otherwise",
            secret(Some("false"), Some("acme"), Some("u1")),
            None,
        ),
        (
            "no identity annotation",
            secret(Some("true"), None, Some("u1")),
            None,
        ),
        (
            "no UID to make sure of",
            secret(Some("true"), Some("acme"), None),
            None,
        ),
    ];
    for (name, mirror, want) in cases {
        assert_eq!(mirror_uid(&mirror, "acme").as_deref(), want, "{name}");
    }
}

#[test]
fn a_mirror_is_current_with_the_source_hash_and_the_owner() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let cluster = reference("TerraformCluster", "c", "1");
    let machine = reference("TerraformMachine", "m", "2");
    let mirror = |hash: Option<&str>, owners: Vec<OwnerReference>| ObjectMeta {
        annotations: hash
            .map(|h| BTreeMap::from([(annotations::SOURCE_HASH.to_owned(), h.to_owned())])),
        owner_references: Some(owners),
        ..ObjectMeta::default()
    };
    let cases = [
        (
            "hash and owner",
            mirror(Some("h"), vec![cluster.clone()]),
            true,
        ),
        (
            "the owner among others",
            mirror(Some("h"), vec![machine.clone(), cluster.clone()]),
            true,
        ),
        (
            "the source changed",
            mirror(Some("old"), vec![cluster.clone()]),
            false,
        ),
        ("never mirrored", mirror(None, vec![cluster.clone()]), false),
        (
            "another user only",
            mirror(Some("h"), vec![machine.clone()]),
            false,
        ),
        (
            "an earlier UID of the owner",
            mirror(Some("h"), vec![reference("TerraformCluster", "c", "0")]),
            false,
        ),
    ];
    for (case, meta, current) in cases {
        assert_eq!(mirror_current(&meta, "h", &cluster), current, "{case}");
    }
}

#[test]
fn with_owner_keeps_the_order() {
    let cluster = reference("TerraformCluster", "c", "1");
    let machine = reference("TerraformMachine", "m", "2");
    let controlling = OwnerReference {
        controller: Some(true),
        block_owner_deletion: Some(true),
        ..machine.clone()
    };
    let both = vec![cluster.clone(), machine.clone()];
    let cases = [
        (
            "already there, first",
            both.clone(),
            cluster.clone(),
            both.clone(),
        ),
        (
            "already there, last",
            both.clone(),
            machine.clone(),
            both.clone(),
        ),
        (
            "added at the end",
            vec![machine.clone()],
            cluster.clone(),
            vec![machine.clone(), cluster.clone()],
        ),
        (
            "an earlier UID is replaced in place",
            both.clone(),
            reference("TerraformCluster", "c", "3"),
            vec![reference("TerraformCluster", "c", "3"), machine.clone()],
        ),
        (
            "never as controller",
            vec![],
            controlling,
            vec![machine.clone()],
        ),
    ];
    for (name, existing, owner, want) in cases {
        assert_eq!(with_owner(existing, &owner), want, "{name}");
    }
}

fn account(name: &str, labels: &[(&str, &str)]) -> ServiceAccount {
    ServiceAccount {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn jobs_run_only_as_accounts_that_opted_in() {
    let opted = account("deployer", &[(labels::RUNNER, labels::TRUE)]);
    let plain = account("deployer", &[]);
    let other_value = account("deployer", &[(labels::RUNNER, "yes")]);
    let cases = [
        ("the default account", RUNNER, None, None),
        ("opted in", "deployer", Some(&opted), None),
        (
            "not labelled",
            "deployer",
            Some(&plain),
            Some(
                "has not opted in: kubectl label serviceaccount deployer -n ns captf.io/runner=true",
            ),
        ),
        (
            "labelled otherwise",
            "deployer",
            Some(&other_value),
            Some("has not opted in"),
        ),
        (
            "missing",
            "deployer",
            None,
            Some("does not exist: create it with the label captf.io/runner=true"),
        ),
    ];
    for (name, sa_name, sa, refused) in cases {
        match (may_run_as("ns", sa_name, sa), refused) {
            (Ok(()), None) => {}
            (Err(e), Some(says)) => assert!(e.contains(says), "{name}: {e}"),
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn the_runner_binding_lists_every_opted_in_account_and_never_takes_a_foreign_one() {
    let desired = runner_binding("ns", &["b".into(), "a".into(), RUNNER.into()]).expect("binding");
    let subjects: Vec<&str> = desired
        .subjects
        .iter()
        .flatten()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(subjects, ["a", "b", RUNNER]);
    assert!(
        desired
            .subjects
            .iter()
            .flatten()
            .all(|s| s.namespace.as_deref() == Some("ns"))
    );

    let only_runner = runner_binding("ns", &[]).expect("binding");
    let mut foreign = only_runner.clone();
    foreign.metadata.labels = None;
    let mut other_role = only_runner.clone();
    other_role.role_ref.name = "edit".into();
    let cases = [
        ("none", None, BindingAction::Create),
        ("same", Some(&only_runner), BindingAction::Keep),
        (
            "an account opted in",
            Some(&only_runner),
            BindingAction::Update,
        ),
        ("someone else's", Some(&foreign), BindingAction::Foreign),
        ("another role", Some(&other_role), BindingAction::Recreate),
    ];
    for (name, existing, want) in cases {
        let target = if name == "an account opted in" {
            &desired
        } else {
            &only_runner
        };
        assert_eq!(binding_action(existing, target), want, "{name}");
    }
}

#[test]
fn only_an_opted_in_account_some_object_runs_as_is_bound() {
    let binding = |names: &[&str]| {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        runner_binding("ns", &names).expect("binding")
    };
    let opted = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    /// What, the binding there, the accounts opted in, the object's account, what is bound.
    type Row<'a> = (
        &'a str,
        Option<RoleBinding>,
        Vec<String>,
        &'a str,
        Vec<&'a str>,
    );
    let rows: [Row; 6] = [
        (
            "labelled, but no object runs as it",
            Some(binding(&[])),
            opted(&["bystander"]),
            RUNNER,
            vec![],
        ),
        (
            "the object's account, opted in",
            Some(binding(&[])),
            opted(&["bystander", "deployer"]),
            "deployer",
            vec!["deployer"],
        ),
        (
            "the object's account without consent",
            None,
            opted(&["bystander"]),
            "deployer",
            vec![],
        ),
        (
            "another object's account stays while it consents",
            Some(binding(&["deployer"])),
            opted(&["deployer", "builder"]),
            "builder",
            vec!["builder", "deployer"],
        ),
        (
            "consent withdrawn",
            Some(binding(&["deployer"])),
            opted(&[]),
            "deployer",
            vec![],
        ),
        (
            "captf-runner is the binding's own, never an extra",
            Some(binding(&[])),
            opted(&[RUNNER]),
            RUNNER,
            vec![],
        ),
    ];
    for (what, existing, opted_in, account, want) in rows {
        assert_eq!(
            bound_accounts(existing.as_ref(), &opted_in, account),
            want,
            "{what}"
        );
    }
}
