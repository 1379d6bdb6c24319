use std::time::Duration;

use captf_api::conditions::reasons;
use captf_api::{
    IdentityReference, MachineDriftPolicy, MachineRemediation, TerraformCluster,
    TerraformClusterDefaults, TerraformMachine,
};

use super::*;

const DRIFT_DEFAULT: Duration = Duration::from_secs(1800);

/// name, own interval, cluster, expected interval
type DriftCase = (
    &'static str,
    Option<i32>,
    Option<TerraformCluster>,
    Option<Duration>,
);
/// name, annotate, samples, reading, requested before, expected change
type RemediationCase = (
    &'static str,
    bool,
    Option<i32>,
    &'static str,
    Option<&'static str>,
    RemediationChange,
);

fn machine(
    identity: Option<&str>,
    drift: Option<i32>,
    remediation: Option<MachineRemediation>,
) -> TerraformMachine {
    let mut tm = TerraformMachine::new("m", Default::default());
    tm.spec.workspace.identity_ref = identity.map(|n| IdentityReference { name: n.into() });
    tm.spec.drift = drift.map(|s| MachineDriftPolicy {
        interval_seconds: Some(s),
    });
    tm.spec.remediation = remediation;
    tm
}

fn cluster(own: Option<&str>, defaults: Option<TerraformClusterDefaults>) -> TerraformCluster {
    let mut tc = TerraformCluster::new("c", Default::default());
    tc.spec.workspace.identity_ref = own.map(|n| IdentityReference { name: n.into() });
    tc.spec.defaults = defaults;
    tc
}

fn remediation(
    annotate: Option<bool>,
    threshold: Option<i32>,
    interval: Option<i32>,
) -> MachineRemediation {
    MachineRemediation {
        annotate_machine: annotate,
        unhealthy_threshold: threshold,
        health_check_interval_seconds: interval,
    }
}

#[test]
fn identity_own_then_defaults_then_cluster() {
    let defaults = |name: &str| TerraformClusterDefaults {
        identity_ref: Some(IdentityReference { name: name.into() }),
        ..Default::default()
    };
    let cases: [(
        &str,
        TerraformMachine,
        Option<TerraformCluster>,
        Option<&str>,
    ); 5] = [
        (
            "own wins",
            machine(Some("own"), None, None),
            Some(cluster(Some("c"), Some(defaults("d")))),
            Some("own"),
        ),
        (
            "defaults before the cluster's own",
            machine(None, None, None),
            Some(cluster(Some("c"), Some(defaults("d")))),
            Some("d"),
        ),
        (
            "the cluster's own last",
            machine(None, None, None),
            Some(cluster(Some("c"), None)),
            Some("c"),
        ),
        ("no cluster known", machine(None, None, None), None, None),
        (
            "own without a cluster",
            machine(Some("own"), None, None),
            None,
            Some("own"),
        ),
    ];
    for (name, tm, tc, want) in cases {
        let got = machine_policy(&tm, tc.as_ref(), DRIFT_DEFAULT);
        assert_eq!(got.identity.as_deref(), want, "{name}");
    }
}

#[test]
fn drift_interval_own_then_defaults_then_flag() {
    let with_default = |s: i32| {
        cluster(
            None,
            Some(TerraformClusterDefaults {
                drift: Some(captf_api::DriftPolicy {
                    interval_seconds: Some(s),
                    action: None,
                }),
                ..Default::default()
            }),
        )
    };
    let cases: [DriftCase; 5] = [
        ("manager default", None, None, Some(DRIFT_DEFAULT)),
        (
            "own",
            Some(60),
            Some(with_default(120)),
            Some(Duration::from_secs(60)),
        ),
        (
            "inherited",
            None,
            Some(with_default(120)),
            Some(Duration::from_secs(120)),
        ),
        ("own 0 disables", Some(0), Some(with_default(120)), None),
        ("inherited 0 disables", None, Some(with_default(0)), None),
    ];
    for (name, own, tc, want) in cases {
        let got = machine_policy(&machine(None, own, None), tc.as_ref(), DRIFT_DEFAULT);
        assert_eq!(got.drift_interval, want, "{name}");
    }
    // A pool inherits the same way, but 0 never turns its checks off.
    let pool_cases: [DriftCase; 4] = [
        ("manager default", None, None, Some(DRIFT_DEFAULT)),
        (
            "inherited",
            None,
            Some(with_default(120)),
            Some(Duration::from_secs(120)),
        ),
        (
            "own 0",
            Some(0),
            Some(with_default(120)),
            Some(DRIFT_DEFAULT),
        ),
        (
            "inherited 0",
            None,
            Some(with_default(0)),
            Some(DRIFT_DEFAULT),
        ),
    ];
    for (name, own, tc, want) in pool_cases {
        let got = inherited_drift_interval(own, tc.as_ref(), DRIFT_DEFAULT, ZeroInterval::Ignored);
        assert_eq!(got, want, "pool: {name}");
    }
}

#[test]
fn remediation_merges_field_by_field() {
    let inherited = cluster(
        None,
        Some(TerraformClusterDefaults {
            remediation: Some(remediation(Some(true), Some(5), None)),
            ..Default::default()
        }),
    );
    let cases: [(
        &str,
        Option<MachineRemediation>,
        Option<&TerraformCluster>,
        Remediation,
    ); 4] = [
        (
            "built-in",
            None,
            None,
            Remediation {
                annotate_machine: false,
                unhealthy_threshold: 3,
                health_check_interval: Duration::from_secs(300),
            },
        ),
        (
            "inherited",
            None,
            Some(&inherited),
            Remediation {
                annotate_machine: true,
                unhealthy_threshold: 5,
                health_check_interval: Duration::from_secs(300),
            },
        ),
        (
            "own fields over inherited ones, the rest inherited",
            Some(remediation(None, Some(2), Some(60))),
            Some(&inherited),
            Remediation {
                annotate_machine: true,
                unhealthy_threshold: 2,
                health_check_interval: Duration::from_secs(60),
            },
        ),
        (
            "own false beats inherited true",
            Some(remediation(Some(false), None, None)),
            Some(&inherited),
            Remediation {
                annotate_machine: false,
                unhealthy_threshold: 5,
                health_check_interval: Duration::from_secs(300),
            },
        ),
    ];
    for (name, own, tc, want) in cases {
        let got = machine_policy(&machine(None, None, own), tc, DRIFT_DEFAULT);
        assert_eq!(got.remediation, want, "{name}");
    }
}

#[test]
fn unhealthy_samples_count_by_reading() {
    let cases: [(&str, Option<i32>, &str, Option<i32>); 8] = [
        ("healthy resets", Some(2), reasons::HEALTHY, None),
        (
            "unhealthy counts from none",
            None,
            reasons::INSTANCE_UNHEALTHY,
            Some(1),
        ),
        (
            "degraded counts",
            Some(1),
            reasons::INSTANCE_DEGRADED,
            Some(2),
        ),
        (
            "stopped counts",
            Some(2),
            reasons::INSTANCE_STOPPED,
            Some(3),
        ),
        ("pending keeps", Some(2), reasons::INSTANCE_PENDING, Some(2)),
        ("unknown keeps", Some(1), reasons::HEALTH_UNKNOWN, Some(1)),
        (
            "terminated keeps",
            Some(1),
            reasons::INSTANCE_TERMINATED,
            Some(1),
        ),
        (
            "provider ID missing keeps",
            None,
            reasons::PROVIDER_ID_MISSING,
            None,
        ),
    ];
    for (name, previous, reason, want) in cases {
        assert_eq!(next_unhealthy_samples(previous, reason), want, "{name}");
    }
}

#[test]
fn remediation_requests_and_withdrawals() {
    use RemediationChange::{Keep, Request, Withdraw};
    let unhealthy = reasons::INSTANCE_UNHEALTHY;
    let cases: [RemediationCase; 8] = [
        ("below the threshold", true, Some(2), unhealthy, None, Keep),
        (
            "at the threshold",
            true,
            Some(3),
            unhealthy,
            None,
            Request(unhealthy.into()),
        ),
        (
            "not asked to annotate",
            false,
            Some(9),
            unhealthy,
            None,
            Keep,
        ),
        (
            "already requested",
            true,
            Some(4),
            unhealthy,
            Some(unhealthy),
            Keep,
        ),
        (
            "terminated at once",
            true,
            None,
            reasons::INSTANCE_TERMINATED,
            None,
            Request(reasons::INSTANCE_TERMINATED.into()),
        ),
        (
            "healthy withdraws ours",
            true,
            None,
            reasons::HEALTHY,
            Some(unhealthy),
            Withdraw,
        ),
        (
            "healthy withdraws ours even when annotating was turned off",
            false,
            None,
            reasons::HEALTHY,
            Some(unhealthy),
            Withdraw,
        ),
        (
            "a pending reading past the threshold asks nothing",
            true,
            Some(3),
            reasons::INSTANCE_PENDING,
            None,
            Keep,
        ),
    ];
    for (name, annotate, samples, reason, requested, want) in cases {
        assert_eq!(
            remediation_change(annotate, 3, samples, reason, requested),
            want,
            "{name}"
        );
    }
}

#[test]
fn an_empty_provider_id_twice_in_a_row_is_a_terminated_instance() {
    use captf_api::conditions::Status;
    let missing = (Status::Unknown, reasons::PROVIDER_ID_MISSING);
    let terminated = (Status::False, reasons::INSTANCE_TERMINATED);
    let cases = [
        ("first empty sample", Some(reasons::HEALTHY), true, missing),
        ("no state read yet", None, false, missing),
        (
            "still the first: no new sample this pass",
            Some(reasons::PROVIDER_ID_MISSING),
            false,
            missing,
        ),
        (
            "the second consecutive sample",
            Some(reasons::PROVIDER_ID_MISSING),
            true,
            terminated,
        ),
        (
            "terminated stays",
            Some(reasons::INSTANCE_TERMINATED),
            false,
            terminated,
        ),
        (
            "pending health is no empty sample",
            Some(reasons::INSTANCE_PENDING),
            true,
            missing,
        ),
    ];
    for (name, previous, sampled, want) in cases {
        assert_eq!(missing_provider_id(previous, sampled), want, "{name}");
    }
}
