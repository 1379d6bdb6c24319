use std::collections::BTreeMap;

use captf_api::{JobPolicy, TerraformCluster, TerraformClusterDefaults};
use k8s_openapi::api::core::v1::{
    EnvVar, LocalObjectReference, PodSecurityContext, ResourceRequirements, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;

fn sc(uid: i64) -> SecurityContext {
    SecurityContext {
        run_as_user: Some(uid),
        ..SecurityContext::default()
    }
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

fn pull(name: &str) -> LocalObjectReference {
    LocalObjectReference {
        name: name.to_owned(),
    }
}

fn resources(key: &str, value: &str, limits: bool) -> ResourceRequirements {
    let list = Some(BTreeMap::from([(
        key.to_owned(),
        Quantity(value.to_owned()),
    )]));
    if limits {
        ResourceRequirements {
            limits: list,
            ..ResourceRequirements::default()
        }
    } else {
        ResourceRequirements {
            requests: list,
            ..ResourceRequirements::default()
        }
    }
}

fn full() -> JobPolicy {
    JobPolicy {
        successful_jobs_history_limit: Some(1),
        failed_jobs_history_limit: Some(2),
        active_deadline_seconds: Some(600),
        service_account_name: Some("defaults-sa".to_owned()),
        lock_timeout_seconds: Some(60),
        image_pull_secrets: Some(vec![pull("shared"), pull("d-only")]),
        resources: Some(resources("cpu", "1", false)),
        env: Some(vec![env("A", "defaults"), env("B", "defaults")]),
        security_context: Some(sc(1)),
        pod_security_context: Some(PodSecurityContext {
            fs_group: Some(1),
            ..PodSecurityContext::default()
        }),
    }
}

/// The original's TestMergeJobPolicy table: own scalars and structs win (even an explicit
/// zero), env and pull secrets merge, resources and security contexts are replaced whole.
#[test]
fn merge_job_policy_table() {
    let full = full();
    let zero_own = JobPolicy {
        successful_jobs_history_limit: Some(0),
        lock_timeout_seconds: Some(0),
        ..JobPolicy::default()
    };
    let mut zero_want = full.clone();
    zero_want.successful_jobs_history_limit = Some(0);
    zero_want.lock_timeout_seconds = Some(0);

    let every_own = JobPolicy {
        successful_jobs_history_limit: Some(9),
        failed_jobs_history_limit: Some(8),
        active_deadline_seconds: Some(7),
        service_account_name: Some("own-sa".to_owned()),
        lock_timeout_seconds: Some(6),
        image_pull_secrets: Some(vec![pull("own-only"), pull("shared")]),
        resources: Some(resources("memory", "1Gi", true)),
        env: Some(vec![env("B", "own"), env("C", "own")]),
        security_context: Some(sc(2)),
        pod_security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            ..PodSecurityContext::default()
        }),
    };
    let every_want = JobPolicy {
        successful_jobs_history_limit: Some(9),
        failed_jobs_history_limit: Some(8),
        active_deadline_seconds: Some(7),
        service_account_name: Some("own-sa".to_owned()),
        lock_timeout_seconds: Some(6),
        // Union, own first, de-duplicated by name.
        image_pull_secrets: Some(vec![pull("own-only"), pull("shared"), pull("d-only")]),
        // Replaced as a whole: no requests from the defaults.
        resources: Some(resources("memory", "1Gi", true)),
        // By name: own wins on B, the defaults add A.
        env: Some(vec![env("B", "own"), env("C", "own"), env("A", "defaults")]),
        security_context: Some(sc(2)),
        pod_security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            ..PodSecurityContext::default()
        }),
    };
    let unset_like = JobPolicy {
        active_deadline_seconds: Some(0),
        service_account_name: Some(String::new()),
        ..JobPolicy::default()
    };

    let empty = JobPolicy::default();
    let cases: Vec<(&str, Option<&JobPolicy>, Option<&JobPolicy>, JobPolicy)> = vec![
        ("both none", None, None, JobPolicy::default()),
        ("only defaults", None, Some(&full), full.clone()),
        ("only own", Some(&full), None, full.clone()),
        ("empty own", Some(&empty), Some(&full), full.clone()),
        (
            "zero values set by the object win",
            Some(&zero_own),
            Some(&full),
            zero_want,
        ),
        (
            "every field on both",
            Some(&every_own),
            Some(&full),
            every_want,
        ),
        (
            "deadline 0 and empty SA are unset",
            Some(&unset_like),
            Some(&full),
            full.clone(),
        ),
    ];
    for (name, own, defaults, want) in cases {
        assert_eq!(merge_job_policy(own, defaults), want, "{name}");
    }
}

#[test]
fn merge_drops_empty_and_duplicate_pull_secrets() {
    let own = JobPolicy {
        image_pull_secrets: Some(vec![pull("a"), pull(""), pull("a"), pull("b")]),
        ..JobPolicy::default()
    };
    let defaults = JobPolicy {
        image_pull_secrets: Some(vec![pull("b"), pull("c"), pull("c")]),
        ..JobPolicy::default()
    };
    let got = merge_job_policy(Some(&own), Some(&defaults));
    assert_eq!(
        got.image_pull_secrets,
        Some(vec![pull("a"), pull("b"), pull("c")])
    );
}

fn cluster(own: Option<JobPolicy>, defaults: Option<JobPolicy>) -> TerraformCluster {
    let mut c = TerraformCluster::default();
    c.spec.workspace.jobs = own.map(Box::new);
    c.spec.defaults = defaults.map(|jobs| TerraformClusterDefaults {
        jobs: Some(Box::new(jobs)),
        ..TerraformClusterDefaults::default()
    });
    c
}

#[test]
fn three_layers_nearest_wins() {
    let c = cluster(
        Some(JobPolicy {
            lock_timeout_seconds: Some(30),
            active_deadline_seconds: Some(900),
            failed_jobs_history_limit: Some(7),
            env: Some(vec![env("X", "cluster"), env("Z", "cluster")]),
            image_pull_secrets: Some(vec![pull("cluster")]),
            ..JobPolicy::default()
        }),
        Some(JobPolicy {
            lock_timeout_seconds: Some(60),
            env: Some(vec![env("X", "defaults"), env("Y", "defaults")]),
            image_pull_secrets: Some(vec![pull("defaults"), pull("cluster")]),
            ..JobPolicy::default()
        }),
    );
    let own = JobPolicy {
        env: Some(vec![env("Y", "own")]),
        image_pull_secrets: Some(vec![pull("own")]),
        ..JobPolicy::default()
    };
    let p = EffectivePolicy::resolve(&PolicyLayers::for_member(Some(&own), Some(&c)));
    assert_eq!(p.lock_timeout_seconds, 60);
    assert_eq!(p.lock_timeout_from, PolicySource::ClusterDefaults);
    assert_eq!(p.active_deadline_seconds, 900);
    assert_eq!(p.active_deadline_from, PolicySource::Cluster);
    assert_eq!(p.failed_jobs_history_limit, 7);
    assert_eq!(p.successful_jobs_history_limit, 3);
    assert_eq!(
        p.env,
        vec![env("Y", "own"), env("X", "defaults"), env("Z", "cluster")]
    );
    assert_eq!(
        p.image_pull_secrets,
        vec![pull("own"), pull("defaults"), pull("cluster")]
    );

    // A member of no known cluster, and the cluster itself, which ignores spec.defaults.jobs.
    let alone = EffectivePolicy::resolve(&PolicyLayers::for_member(Some(&own), None));
    assert_eq!(alone.lock_timeout_seconds, 300);
    let itself = EffectivePolicy::resolve(&PolicyLayers::for_cluster(&c));
    assert_eq!(itself.lock_timeout_seconds, 30);
    assert_eq!(itself.lock_timeout_from, PolicySource::Own);
}

#[test]
fn built_in_defaults() {
    let p = EffectivePolicy::default();
    assert_eq!(p.successful_jobs_history_limit, 3);
    assert_eq!(p.failed_jobs_history_limit, 3);
    assert_eq!(p.active_deadline_seconds, 3600);
    assert_eq!(p.active_deadline_from, PolicySource::BuiltIn);
    assert_eq!(p.lock_timeout_seconds, 300);
    assert_eq!(p.lock_timeout_from, PolicySource::BuiltIn);
    assert_eq!(p.service_account_name, "captf-runner");
    assert!(p.uses_default_service_account());
    assert!(p.image_pull_secrets.is_empty() && p.env.is_empty() && p.dropped_env.is_empty());
    assert_eq!(p.resources, security::default_resources());
    assert_eq!(p, EffectivePolicy::resolve(&PolicyLayers::default()));
    assert_eq!(p.validate(), Ok(()));

    let custom = JobPolicy {
        service_account_name: Some("mine".to_owned()),
        active_deadline_seconds: Some(0),
        successful_jobs_history_limit: Some(-1),
        ..JobPolicy::default()
    };
    let p = EffectivePolicy::resolve(&PolicyLayers {
        own: Some(&custom),
        ..PolicyLayers::default()
    });
    assert_eq!(p.service_account_name, "mine");
    assert!(!p.uses_default_service_account());
    assert_eq!(p.active_deadline_seconds, 3600, "0 means unset");
    assert_eq!(p.successful_jobs_history_limit, 0);
}

#[test]
fn reserved_env_dropped_and_reported() {
    let own = JobPolicy {
        env: Some(vec![
            env("TF_LOG", "TRACE"),
            env("AWS_REGION", "eu-west-1"),
            env("KUBE_CONFIG_PATH", "/x"),
            env("KUBERNETES_SERVICE_HOST", "evil"),
            env("HOME", "/root"),
            env("TMPDIR", "/var/tmp"),
            env("CHECKPOINT_DISABLE", "0"),
            env("HTTPS_PROXY", "http://proxy:3128"),
        ]),
        ..JobPolicy::default()
    };
    let p = EffectivePolicy::resolve(&PolicyLayers {
        own: Some(&own),
        ..PolicyLayers::default()
    });
    assert_eq!(
        p.env,
        vec![
            env("AWS_REGION", "eu-west-1"),
            env("HTTPS_PROXY", "http://proxy:3128")
        ]
    );
    assert_eq!(
        p.dropped_env,
        [
            "TF_LOG",
            "KUBE_CONFIG_PATH",
            "KUBERNETES_SERVICE_HOST",
            "HOME",
            "TMPDIR",
            "CHECKPOINT_DISABLE"
        ]
    );
    for name in ["TF_", "KUBE_X", "KUBERNETES_PORT", "HOME", "TMPDIR"] {
        assert!(is_reserved_env(name), "{name}");
    }
    for name in ["TFX", "KUBECONFIG", "HOMEDIR", "PATH", "tf_log"] {
        assert!(!is_reserved_env(name), "{name}");
    }
}

#[test]
fn validate_lock_below_deadline() {
    let cases: Vec<(Option<i32>, Option<i64>, bool)> = vec![
        (None, None, true),
        (Some(0), Some(1), true),
        (Some(299), None, true),
        (Some(3599), None, true),
        (Some(3600), None, false),
        (None, Some(300), false),
        (None, Some(301), true),
        (Some(600), Some(600), false),
        (Some(601), Some(600), false),
    ];
    for (lock, deadline, ok) in cases {
        let own = JobPolicy {
            lock_timeout_seconds: lock,
            active_deadline_seconds: deadline,
            ..JobPolicy::default()
        };
        let p = EffectivePolicy::resolve(&PolicyLayers {
            own: Some(&own),
            ..PolicyLayers::default()
        });
        assert_eq!(
            p.validate().is_ok(),
            ok,
            "lock {lock:?} deadline {deadline:?}"
        );
    }
}

#[test]
fn policy_error_names_both_values_their_sources_and_the_fix() {
    let c = cluster(
        None,
        Some(JobPolicy {
            lock_timeout_seconds: Some(900),
            ..JobPolicy::default()
        }),
    );
    let own = JobPolicy {
        active_deadline_seconds: Some(600),
        ..JobPolicy::default()
    };
    let p = EffectivePolicy::resolve(&PolicyLayers::for_member(Some(&own), Some(&c)));
    let err = p.validate().expect_err("lock 900 >= deadline 600");
    assert_eq!(err.reason(), "JobPolicyInvalid");
    assert_eq!(
        err.to_string(),
        "the merged Job policy is invalid: lockTimeoutSeconds 900 (from the TerraformCluster's \
         spec.defaults.jobs) must be below activeDeadlineSeconds 600 (from the object's \
         spec.jobs); raise activeDeadlineSeconds above 900 or lower lockTimeoutSeconds below 600"
    );
}
