//! The pod the Job runs: env, image pull Secrets, resources and security contexts.

use super::*;

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
