//! The admission rules by table: each row an object (and its stored version), and the fields
//! the denial must name.

use captf_api::common::{
    ApiEndpoint, IdentityReference, JobPolicy, Source, VariablesSource, VariablesSourceReference,
};
use captf_api::identity::AllowedNamespaces;
use captf_api::{
    TerraformCluster, TerraformClusterIdentity, TerraformClusterTemplate, TerraformMachine,
    TerraformMachinePool, TerraformMachineTemplate,
};
use k8s_openapi::api::core::v1::{
    Capabilities, EnvVar, PodSecurityContext, SELinuxOptions, SeccompProfile, SecurityContext,
    Sysctl, WindowsSecurityContextOptions,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, Time,
};
use serde_json::json;

use super::*;
use crate::webhook::violations::{Problem, Violations};

const IMAGE: &str = "ghcr.io/example/module:v1.0.0";
const MANAGER: &str = "system:serviceaccount:captf-system:captf-controller-manager";

fn fields(v: &Violations) -> Vec<String> {
    v.iter().map(|v| v.field.clone()).collect()
}

fn create<K>(new: &K) -> Change<'_, K> {
    Change {
        new,
        old: None,
        user: "alice",
        dry_run: false,
    }
}

fn update<'a, K>(old: &'a K, new: &'a K) -> Change<'a, K> {
    Change {
        new,
        old: Some(old),
        user: "alice",
        dry_run: false,
    }
}

fn a_cluster() -> TerraformCluster {
    let mut c = TerraformCluster::new("c", Default::default());
    c.spec.workspace.source = Source {
        image: IMAGE.into(),
        ..Default::default()
    };
    c.spec.workspace.identity_ref = Some(IdentityReference { name: "aws".into() });
    c
}

fn a_machine() -> TerraformMachine {
    let mut m = TerraformMachine::new("m", Default::default());
    m.spec.workspace.source.image = IMAGE.into();
    m
}

fn with_jobs(policy: JobPolicy) -> TerraformCluster {
    let mut c = a_cluster();
    c.spec.workspace.jobs = Some(Box::new(policy));
    c
}

fn context(sc: SecurityContext) -> JobPolicy {
    JobPolicy {
        security_context: Some(sc),
        ..Default::default()
    }
}

fn pod_context(psc: PodSecurityContext) -> JobPolicy {
    JobPolicy {
        pod_security_context: Some(psc),
        ..Default::default()
    }
}

fn env(names: &[&str]) -> JobPolicy {
    JobPolicy {
        env: Some(
            names
                .iter()
                .map(|n| EnvVar {
                    name: (*n).into(),
                    value: Some("v".into()),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }
}

fn timing(lock: Option<i32>, deadline: Option<i64>) -> JobPolicy {
    JobPolicy {
        lock_timeout_seconds: lock,
        active_deadline_seconds: deadline,
        ..Default::default()
    }
}

#[test]
fn job_policies() {
    let seccomp = |t: &str| SeccompProfile {
        type_: t.into(),
        ..Default::default()
    };
    let cases: Vec<(&str, JobPolicy, Vec<&str>)> = vec![
        ("empty", JobPolicy::default(), vec![]),
        (
            "hardened",
            context(SecurityContext {
                privileged: Some(false),
                allow_privilege_escalation: Some(false),
                read_only_root_filesystem: Some(true),
                run_as_non_root: Some(true),
                run_as_user: Some(1000),
                seccomp_profile: Some(seccomp("RuntimeDefault")),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    add: Some(vec![]),
                }),
                se_linux_options: Some(SELinuxOptions {
                    type_: Some("container_t".into()),
                    level: Some("s0:c1".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            vec![],
        ),
        (
            "weakened container",
            context(SecurityContext {
                privileged: Some(true),
                allow_privilege_escalation: Some(true),
                capabilities: Some(Capabilities {
                    add: Some(vec!["NET_ADMIN".into()]),
                    drop: None,
                }),
                read_only_root_filesystem: Some(false),
                proc_mount: Some("Unmasked".into()),
                run_as_non_root: Some(false),
                run_as_user: Some(0),
                seccomp_profile: Some(seccomp("Unconfined")),
                se_linux_options: Some(SELinuxOptions {
                    type_: Some("spc_t".into()),
                    user: Some("system_u".into()),
                    role: Some("system_r".into()),
                    ..Default::default()
                }),
                windows_options: Some(WindowsSecurityContextOptions {
                    host_process: Some(true),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            vec![
                "spec.jobs.securityContext.privileged",
                "spec.jobs.securityContext.allowPrivilegeEscalation",
                "spec.jobs.securityContext.capabilities.add",
                "spec.jobs.securityContext.readOnlyRootFilesystem",
                "spec.jobs.securityContext.procMount",
                "spec.jobs.securityContext.runAsNonRoot",
                "spec.jobs.securityContext.runAsUser",
                "spec.jobs.securityContext.seccompProfile.type",
                "spec.jobs.securityContext.seLinuxOptions.type",
                "spec.jobs.securityContext.seLinuxOptions.user",
                "spec.jobs.securityContext.seLinuxOptions.role",
                "spec.jobs.securityContext.windowsOptions.hostProcess",
            ],
        ),
        (
            "weakened pod",
            pod_context(PodSecurityContext {
                run_as_user: Some(0),
                sysctls: Some(vec![
                    Sysctl {
                        name: "net.ipv4.tcp_syncookies".into(),
                        value: "1".into(),
                    },
                    Sysctl {
                        name: "kernel.msgmax".into(),
                        value: "1".into(),
                    },
                ]),
                ..Default::default()
            }),
            vec![
                "spec.jobs.podSecurityContext.runAsUser",
                "spec.jobs.podSecurityContext.sysctls[1].name",
            ],
        ),
        (
            "reserved env",
            env(&[
                "AWS_REGION",
                "TF_LOG",
                "KUBE_CONFIG_PATH",
                "KUBERNETES_SERVICE_HOST",
                "HOME",
                "TMPDIR",
                "CHECKPOINT_DISABLE",
            ]),
            vec![
                "spec.jobs.env[1].name",
                "spec.jobs.env[2].name",
                "spec.jobs.env[3].name",
                "spec.jobs.env[4].name",
                "spec.jobs.env[5].name",
                "spec.jobs.env[6].name",
            ],
        ),
        ("lock below deadline", timing(Some(600), Some(900)), vec![]),
        (
            "lock not below deadline",
            timing(Some(900), Some(900)),
            vec!["spec.jobs.lockTimeoutSeconds"],
        ),
        ("deadline alone above 300", timing(None, Some(301)), vec![]),
        (
            "deadline alone at 300",
            timing(None, Some(300)),
            vec!["spec.jobs.activeDeadlineSeconds"],
        ),
        ("lock alone below 3600", timing(Some(3599), None), vec![]),
        (
            "lock alone at 3600",
            timing(Some(3600), None),
            vec!["spec.jobs.lockTimeoutSeconds"],
        ),
    ];
    for (name, policy, expected) in cases {
        let v = cluster(&create(&with_jobs(policy)));
        assert_eq!(fields(&v), expected, "{name}: {v:?}");
    }
    let many: Vec<String> = (0..65).map(|i| format!("V{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let v = cluster(&create(&with_jobs(env(&many))));
    assert_eq!(v.iter().next().map(|v| v.problem), Some(Problem::TooMany));
}

#[test]
fn messages_say_why_and_what_to_do() {
    let v = cluster(&create(&with_jobs(env(&["TF_LOG"]))));
    let message = v.message("TerraformCluster", "c");
    assert!(
        message.contains("spec.jobs.env[0].name")
            && message.contains("\"TF_LOG\": the name is reserved: the runner owns"),
        "{message}"
    );
    let v = cluster(&create(&with_jobs(context(SecurityContext {
        privileged: Some(true),
        ..Default::default()
    }))));
    let message = v.message("TerraformCluster", "c");
    assert!(
        message.contains("the Job container holds cloud credentials and may not run privileged"),
        "{message}"
    );
}

#[test]
fn workspaces() {
    let mut bad_image = a_cluster();
    bad_image.spec.workspace.source.image = "Not An Image".into();
    let mut no_image = a_cluster();
    no_image.spec.workspace.source.image = String::new();
    let mut no_identity = a_cluster();
    no_identity.spec.workspace.identity_ref = None;
    let mut empty_identity = a_cluster();
    empty_identity.spec.workspace.identity_ref = Some(IdentityReference::default());
    let mut variables = a_cluster();
    variables.spec.workspace.variables = json!({
        "region": "eu-west-1",
        "captf_cluster": 1,
        "count": 2,
        "not valid": 3,
    })
    .as_object()
    .cloned();
    let mut sources = a_cluster();
    sources.spec.workspace.variables_from = Some(vec![
        VariablesSource {
            config_map_ref: Some(VariablesSourceReference { name: "a".into() }),
            ..Default::default()
        },
        VariablesSource::default(),
        VariablesSource {
            config_map_ref: Some(VariablesSourceReference { name: "a".into() }),
            secret_ref: Some(VariablesSourceReference { name: "b".into() }),
            ..Default::default()
        },
    ]);
    let mut half_endpoint = a_cluster();
    half_endpoint.spec.control_plane_endpoint = Some(ApiEndpoint {
        host: Some("10.0.0.1".into()),
        port: None,
    });
    let cases: Vec<(&str, TerraformCluster, Vec<&str>)> = vec![
        ("valid", a_cluster(), vec![]),
        ("bad image", bad_image, vec!["spec.source.image"]),
        ("no image", no_image, vec!["spec.source.image"]),
        ("no identity", no_identity, vec!["spec.identityRef"]),
        (
            "empty identity name",
            empty_identity,
            vec!["spec.identityRef.name"],
        ),
        (
            "reserved and malformed variable names",
            variables,
            vec![
                "spec.variables[\"captf_cluster\"]",
                "spec.variables[\"count\"]",
                "spec.variables[\"not valid\"]",
            ],
        ),
        (
            "variablesFrom needs exactly one reference",
            sources,
            vec!["spec.variablesFrom[1]", "spec.variablesFrom[2]"],
        ),
        (
            "half an endpoint",
            half_endpoint,
            vec!["spec.controlPlaneEndpoint"],
        ),
    ];
    for (name, object, expected) in cases {
        let v = cluster(&create(&object));
        assert_eq!(fields(&v), expected, "{name}: {v:?}");
    }
    // Values are never echoed: they may be secrets.
    let mut secret = a_cluster();
    secret.spec.workspace.variables = json!({"captf_x": "hunter2"}).as_object().cloned();
    let message = cluster(&create(&secret)).message("TerraformCluster", "c");
    assert!(
        !message.contains("hunter2") && message.contains("(value omitted)"),
        "{message}"
    );
    // A contract input of the machine role is reserved for machines only.
    let mut m = a_machine();
    m.spec.workspace.variables = json!({"bootstrap_data": "x"}).as_object().cloned();
    assert_eq!(
        fields(&machine(&create(&m), &ManagerUser::default())),
        ["spec.variables[\"bootstrap_data\"]"]
    );
    let mut c = a_cluster();
    c.spec.workspace.variables = json!({"bootstrap_data": "x"}).as_object().cloned();
    assert!(cluster(&create(&c)).is_empty());
}

#[test]
fn updates_check_only_what_changed() {
    // Stored before the rules existed: a reserved env name and an invalid variable name.
    let mut stored = with_jobs(env(&["TF_LOG"]));
    stored.spec.workspace.variables = json!({"count": 1}).as_object().cloned();
    let mut relabelled = stored.clone();
    relabelled.metadata.labels = Some([("team".to_owned(), "a".to_owned())].into());
    assert!(cluster(&update(&stored, &relabelled)).is_empty());
    // Changing the policy checks it again.
    let mut changed = stored.clone();
    changed.spec.workspace.jobs = Some(Box::new(env(&["TF_LOG", "X"])));
    assert_eq!(
        fields(&cluster(&update(&stored, &changed))),
        ["spec.jobs.env[0].name"]
    );
    // A deleting object's policy is checked alike when it changes (its destroy Jobs run with
    // it), and still not when it does not (removing the finalizer must work).
    changed.metadata.deletion_timestamp = Some(Time(Default::default()));
    assert_eq!(
        fields(&cluster(&update(&stored, &changed))),
        ["spec.jobs.env[0].name"]
    );
    let mut finalizer_removed = stored.clone();
    finalizer_removed.metadata.deletion_timestamp = Some(Time(Default::default()));
    assert!(cluster(&update(&stored, &finalizer_removed)).is_empty());
    // Cluster defaults for machines are checked the same way.
    let mut defaults = a_cluster();
    defaults.spec.defaults = Some(captf_api::cluster::TerraformClusterDefaults {
        jobs: Some(Box::new(env(&["HOME"]))),
        ..Default::default()
    });
    assert_eq!(
        fields(&cluster(&create(&defaults))),
        ["spec.defaults.jobs.env[0].name"]
    );
    assert!(cluster(&update(&defaults, &defaults)).is_empty());
}

/// `kubectl delete` and then a weakened Job policy: the destroy Jobs of the object (and, for a
/// cluster's defaults, of its machines and pools) would run with it, so an update of a
/// deleting object is checked exactly like one of a live object.
#[test]
fn a_deleting_objects_job_policy_is_checked_like_a_live_ones() {
    let weakenings: Vec<(&str, JobPolicy, &str)> = vec![
        (
            "SELinux type",
            context(SecurityContext {
                se_linux_options: Some(SELinuxOptions {
                    type_: Some("spc_t".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            "securityContext.seLinuxOptions.type",
        ),
        (
            "runAsUser 0",
            context(SecurityContext {
                run_as_user: Some(0),
                ..Default::default()
            }),
            "securityContext.runAsUser",
        ),
        (
            "privileged",
            context(SecurityContext {
                privileged: Some(true),
                ..Default::default()
            }),
            "securityContext.privileged",
        ),
        (
            "sysctl",
            pod_context(PodSecurityContext {
                sysctls: Some(vec![Sysctl {
                    name: "kernel.msgmax".into(),
                    value: "1".into(),
                }]),
                ..Default::default()
            }),
            "podSecurityContext.sysctls[0].name",
        ),
        (
            "pod runAsNonRoot false",
            pod_context(PodSecurityContext {
                run_as_non_root: Some(false),
                ..Default::default()
            }),
            "podSecurityContext.runAsNonRoot",
        ),
    ];
    let deleted = |meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        meta.deletion_timestamp = Some(Time(Default::default()));
        meta.finalizers = Some(vec![
            "terraformcluster.infrastructure.cluster.x-k8s.io".into(),
        ]);
    };
    let none = ManagerUser::default();
    for deleting in [false, true] {
        for (name, policy, field) in &weakenings {
            let case = format!("{name}, deleting: {deleting}");
            let mark = |meta: &mut _| {
                if deleting {
                    deleted(meta);
                }
            };
            // (kind and field, the stored object's violations, the weakened one's)
            let mut got: Vec<(String, Vec<String>)> = Vec::new();

            let mut old = a_cluster();
            mark(&mut old.metadata);
            let mut new = old.clone();
            new.spec.workspace.jobs = Some(Box::new(policy.clone()));
            got.push((
                format!("TerraformCluster spec.jobs.{field}"),
                fields(&cluster(&update(&old, &new))),
            ));
            let mut new = old.clone();
            new.spec.defaults = Some(captf_api::cluster::TerraformClusterDefaults {
                jobs: Some(Box::new(policy.clone())),
                ..Default::default()
            });
            got.push((
                format!("TerraformCluster spec.defaults.jobs.{field}"),
                fields(&cluster(&update(&old, &new))),
            ));

            let mut old = a_machine();
            mark(&mut old.metadata);
            let mut new = old.clone();
            new.spec.workspace.jobs = Some(Box::new(policy.clone()));
            got.push((
                format!("TerraformMachine spec.jobs.{field}"),
                fields(&machine(&update(&old, &new), &none)),
            ));

            let mut old = TerraformMachinePool::new("p", Default::default());
            old.spec.workspace.source.image = IMAGE.into();
            mark(&mut old.metadata);
            let mut new = old.clone();
            new.spec.workspace.jobs = Some(Box::new(policy.clone()));
            got.push((
                format!("TerraformMachinePool spec.jobs.{field}"),
                fields(&machine_pool(&update(&old, &new))),
            ));

            for (want, fields) in got {
                let (kind, want) = want.split_once(' ').unwrap_or_default();
                assert_eq!(fields, [want], "{case}: {kind}");
            }
        }
    }
    // The message of a refused update of a deleting object names the field and the fix.
    let mut old = a_cluster();
    deleted(&mut old.metadata);
    let mut new = old.clone();
    new.spec.workspace.jobs = Some(Box::new(context(SecurityContext {
        run_as_user: Some(0),
        ..Default::default()
    })));
    let message = cluster(&update(&old, &new)).message("TerraformCluster", "c");
    assert!(
        message.contains("spec.jobs.securityContext.runAsUser")
            && message.contains("use a non-zero uid such as 65532"),
        "{message}"
    );
}

/// What the Job builder makes of any policy passes these rules: every weakening they refuse,
/// it removes (for the objects stored before a rule, and the destroy Jobs that skip the
/// `JobPolicyInvalid` check).
#[test]
fn the_builders_hardened_contexts_pass_the_rules() {
    let weak_container = SecurityContext {
        privileged: Some(true),
        allow_privilege_escalation: Some(true),
        capabilities: Some(Capabilities {
            add: Some(vec!["SYS_ADMIN".into()]),
            drop: None,
        }),
        read_only_root_filesystem: Some(false),
        proc_mount: Some("Unmasked".into()),
        run_as_non_root: Some(false),
        run_as_user: Some(0),
        seccomp_profile: Some(SeccompProfile {
            type_: "Unconfined".into(),
            ..Default::default()
        }),
        se_linux_options: Some(SELinuxOptions {
            type_: Some("spc_t".into()),
            user: Some("system_u".into()),
            role: Some("system_r".into()),
            level: Some("s0".into()),
        }),
        windows_options: Some(WindowsSecurityContextOptions {
            host_process: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    };
    let weak_pod = PodSecurityContext {
        run_as_non_root: Some(false),
        run_as_user: Some(0),
        seccomp_profile: Some(SeccompProfile {
            type_: "Unconfined".into(),
            ..Default::default()
        }),
        se_linux_options: weak_container.se_linux_options.clone(),
        sysctls: Some(vec![Sysctl {
            name: "kernel.msgmax".into(),
            value: "1".into(),
        }]),
        windows_options: weak_container.windows_options.clone(),
        ..Default::default()
    };
    let weak = JobPolicy {
        security_context: Some(weak_container.clone()),
        pod_security_context: Some(weak_pod.clone()),
        ..Default::default()
    };
    assert!(
        !cluster(&create(&with_jobs(weak))).is_empty(),
        "the input is refused"
    );
    let hardened = JobPolicy {
        security_context: Some(crate::job::security::harden_container(weak_container)),
        pod_security_context: Some(crate::job::security::harden_pod(weak_pod)),
        ..Default::default()
    };
    let v = cluster(&create(&with_jobs(hardened)));
    assert!(v.is_empty(), "{v:?}");
}

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
