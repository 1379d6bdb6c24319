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

/// The main container's context when the policy says nothing.
fn default_container() -> SecurityContext {
    security::main_security_context(None)
}

/// The pod's context when the policy says nothing.
fn default_pod() -> PodSecurityContext {
    security::pod_security_context(None)
}

/// Each weakening a stored spec can hold (an object admitted before a rule existed, or one
/// whose policy was changed while it was being deleted) comes out of the builder as the
/// hardened value, for every operation: a destroy Job skips the `JobPolicyInvalid` check, so
/// the builder is the only guard there. Removed rather than replaced where the field has no
/// default (`runAsUser`, `runAsNonRoot`, SELinux user, role and type): the pod's value or the
/// image's then applies, as for a policy that never set it.
#[test]
fn each_weakening_comes_out_hardened() {
    use k8s_openapi::api::core::v1::{
        AppArmorProfile, SELinuxOptions, Sysctl, WindowsSecurityContextOptions,
    };
    let profile = |t: &str| SeccompProfile {
        type_: t.to_owned(),
        localhost_profile: None,
    };
    let selinux =
        |user: Option<&str>, role: Option<&str>, type_: Option<&str>, level: Option<&str>| {
            Some(SELinuxOptions {
                user: user.map(str::to_owned),
                role: role.map(str::to_owned),
                type_: type_.map(str::to_owned),
                level: level.map(str::to_owned),
            })
        };
    let host_process = |on: bool| {
        Some(WindowsSecurityContextOptions {
            host_process: Some(on),
            ..WindowsSecurityContextOptions::default()
        })
    };
    let sysctl = |name: &str| Sysctl {
        name: name.to_owned(),
        value: "1".to_owned(),
    };
    let c = |f: &dyn Fn(&mut SecurityContext)| {
        let mut sc = SecurityContext::default();
        f(&mut sc);
        sc
    };
    let want_c = |f: &dyn Fn(&mut SecurityContext)| {
        let mut sc = default_container();
        f(&mut sc);
        sc
    };
    let p = |f: &dyn Fn(&mut PodSecurityContext)| {
        let mut sc = PodSecurityContext::default();
        f(&mut sc);
        sc
    };
    let want_p = |f: &dyn Fn(&mut PodSecurityContext)| {
        let mut sc = default_pod();
        f(&mut sc);
        sc
    };
    // (case, spec.jobs.securityContext, what the container gets)
    let containers: Vec<(&str, SecurityContext, SecurityContext)> = vec![
        (
            "privileged",
            c(&|s| s.privileged = Some(true)),
            want_c(&|s| s.privileged = Some(false)),
        ),
        (
            "privilege escalation",
            c(&|s| s.allow_privilege_escalation = Some(true)),
            default_container(),
        ),
        (
            "added capabilities",
            c(&|s| {
                s.capabilities = Some(Capabilities {
                    add: Some(vec!["NET_ADMIN".to_owned()]),
                    drop: Some(vec!["NET_RAW".to_owned()]),
                })
            }),
            want_c(&|s| {
                s.capabilities = Some(Capabilities {
                    add: None,
                    drop: Some(vec!["ALL".to_owned(), "NET_RAW".to_owned()]),
                })
            }),
        ),
        (
            "writable root filesystem",
            c(&|s| s.read_only_root_filesystem = Some(false)),
            default_container(),
        ),
        (
            "unmasked /proc",
            c(&|s| s.proc_mount = Some("Unmasked".to_owned())),
            want_c(&|s| s.proc_mount = Some("Default".to_owned())),
        ),
        (
            "runAsNonRoot false",
            c(&|s| s.run_as_non_root = Some(false)),
            default_container(),
        ),
        (
            "runAsUser 0",
            c(&|s| s.run_as_user = Some(0)),
            default_container(),
        ),
        (
            "runAsUser 1000 is no weakening",
            c(&|s| s.run_as_user = Some(1000)),
            want_c(&|s| s.run_as_user = Some(1000)),
        ),
        (
            "seccomp Unconfined",
            c(&|s| s.seccomp_profile = Some(profile("Unconfined"))),
            want_c(&|s| s.seccomp_profile = Some(profile("RuntimeDefault"))),
        ),
        (
            "AppArmor Unconfined",
            c(&|s| {
                s.app_armor_profile = Some(AppArmorProfile {
                    type_: "Unconfined".to_owned(),
                    localhost_profile: None,
                })
            }),
            want_c(&|s| {
                s.app_armor_profile = Some(AppArmorProfile {
                    type_: "RuntimeDefault".to_owned(),
                    localhost_profile: None,
                })
            }),
        ),
        (
            "SELinux user, role and type (the level stays)",
            c(&|s| {
                s.se_linux_options = selinux(
                    Some("system_u"),
                    Some("system_r"),
                    Some("spc_t"),
                    Some("s0:c1,c2"),
                )
            }),
            want_c(&|s| s.se_linux_options = selinux(None, None, None, Some("s0:c1,c2"))),
        ),
        (
            "SELinux type alone",
            c(&|s| s.se_linux_options = selinux(None, None, Some("spc_t"), None)),
            default_container(),
        ),
        (
            "SELinux container_t is no weakening",
            c(&|s| s.se_linux_options = selinux(None, None, Some("container_t"), None)),
            want_c(&|s| s.se_linux_options = selinux(None, None, Some("container_t"), None)),
        ),
        (
            "hostProcess",
            c(&|s| s.windows_options = host_process(true)),
            want_c(&|s| s.windows_options = host_process(false)),
        ),
    ];
    // (case, spec.jobs.podSecurityContext, what the pod gets)
    let pods: Vec<(&str, PodSecurityContext, PodSecurityContext)> = vec![
        (
            "runAsUser 0",
            p(&|s| s.run_as_user = Some(0)),
            default_pod(),
        ),
        (
            "runAsNonRoot false",
            p(&|s| s.run_as_non_root = Some(false)),
            default_pod(),
        ),
        (
            "runAsNonRoot true is no weakening",
            p(&|s| s.run_as_non_root = Some(true)),
            want_p(&|s| s.run_as_non_root = Some(true)),
        ),
        (
            "an unsafe sysctl among safe ones",
            p(&|s| {
                s.sysctls = Some(vec![
                    sysctl("net.ipv4.tcp_syncookies"),
                    sysctl("kernel.msgmax"),
                    sysctl("net.core.somaxconn"),
                ])
            }),
            want_p(&|s| s.sysctls = Some(vec![sysctl("net.ipv4.tcp_syncookies")])),
        ),
        (
            "unsafe sysctls only",
            p(&|s| s.sysctls = Some(vec![sysctl("kernel.msgmax")])),
            default_pod(),
        ),
        (
            "SELinux user and role",
            p(&|s| s.se_linux_options = selinux(Some("system_u"), Some("system_r"), None, None)),
            default_pod(),
        ),
        (
            "seccomp Unconfined",
            p(&|s| s.seccomp_profile = Some(profile("Unconfined"))),
            default_pod(),
        ),
        (
            "hostProcess",
            p(&|s| s.windows_options = host_process(true)),
            want_p(&|s| s.windows_options = host_process(false)),
        ),
    ];
    let ops = [
        (WorkloadKind::Cluster, Operation::Apply, CLUSTER_IMAGE),
        (WorkloadKind::Cluster, Operation::Destroy, CLUSTER_IMAGE),
        (WorkloadKind::Machine, Operation::Destroy, MACHINE_IMAGE),
        (WorkloadKind::MachinePool, Operation::Destroy, POOL_PINNED),
    ];
    let rows = containers
        .into_iter()
        .map(|(name, user, want)| {
            let policy = JobPolicy {
                security_context: Some(user),
                ..JobPolicy::default()
            };
            (name, policy, want, default_pod())
        })
        .chain(pods.into_iter().map(|(name, user, want)| {
            let policy = JobPolicy {
                pod_security_context: Some(user),
                ..JobPolicy::default()
            };
            (name, policy, default_container(), want)
        }));
    for (name, user, want_container, want_pod) in rows {
        for (kind, op, image) in ops {
            let case = format!("{name} ({kind:?} {op:?})");
            // Through the policy merge, and handed to the builder as stored (a policy built by
            // hand skips the merge's hardening; the builder hardens it again).
            let mut raw = base(kind, "prod", op, image);
            raw.policy = policy(&user);
            if let Some(sc) = &user.security_context {
                raw.policy.security_context = sc.clone();
            }
            if let Some(psc) = &user.pod_security_context {
                raw.policy.pod_security_context = psc.clone();
            }
            let mut merged = base(kind, "prod", op, image);
            merged.policy = policy(&user);
            for s in [merged, raw] {
                let job = build_job(&s);
                assert_eq!(
                    main_container(&job).security_context.as_ref(),
                    Some(&want_container),
                    "{case}: container"
                );
                assert_eq!(
                    pod(&job).security_context.as_ref(),
                    Some(&want_pod),
                    "{case}: pod"
                );
            }
        }
    }
}

/// `kubectl delete` on a cluster, then its `spec.defaults.jobs` weakened: the destroy Jobs of
/// its machines, whose policy merges those defaults, come out hardened.
#[test]
fn a_machines_destroy_job_is_hardened_whatever_its_clusters_defaults_say() {
    let mut cluster = captf_api::TerraformCluster::default();
    cluster.spec.defaults = Some(captf_api::cluster::TerraformClusterDefaults {
        jobs: Some(Box::new(JobPolicy {
            security_context: Some(SecurityContext {
                run_as_user: Some(0),
                privileged: Some(true),
                ..SecurityContext::default()
            }),
            pod_security_context: Some(PodSecurityContext {
                run_as_user: Some(0),
                sysctls: Some(vec![k8s_openapi::api::core::v1::Sysctl {
                    name: "kernel.msgmax".to_owned(),
                    value: "1".to_owned(),
                }]),
                ..PodSecurityContext::default()
            }),
            ..JobPolicy::default()
        })),
        ..Default::default()
    });
    let mut s = base(
        WorkloadKind::Machine,
        "m-0",
        Operation::Destroy,
        MACHINE_IMAGE,
    );
    s.policy = EffectivePolicy::resolve(&PolicyLayers::for_member(None, Some(&cluster)));
    let job = build_job(&s);
    let sc = main_container(&job).security_context.clone().expect("sc");
    assert_eq!(sc.run_as_user, None);
    assert_eq!(sc.privileged, Some(false));
    let psc = pod(&job).security_context.clone().expect("psc");
    assert_eq!(psc, default_pod());
}
