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

mod changes;
