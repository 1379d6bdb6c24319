//! Health → InfrastructureHealthy mapping (api.md §2.4.5).

use captf_contract::{Health, HealthState, health_condition};

fn h(state: HealthState, healthy: bool, message: Option<&str>, reasons: &[&str]) -> Option<Health> {
    Some(Health {
        state,
        healthy,
        message: message.map(str::to_owned),
        reasons: reasons.iter().map(|s| (*s).to_owned()).collect(),
    })
}

#[test]
fn mapping_table() {
    use HealthState::*;
    let cases = [
        (h(Pending, true, None, &[]), "False", "InstancePending"),
        (h(Pending, false, None, &[]), "False", "InstancePending"),
        (h(Running, true, None, &[]), "True", "Healthy"),
        (h(Running, false, None, &[]), "False", "InstanceUnhealthy"),
        (h(Degraded, true, None, &[]), "False", "InstanceDegraded"),
        (h(Degraded, false, None, &[]), "False", "InstanceDegraded"),
        (h(Stopped, true, None, &[]), "False", "InstanceStopped"),
        (
            h(Terminated, true, None, &[]),
            "False",
            "InstanceTerminated",
        ),
        (h(Unknown, true, None, &[]), "Unknown", "HealthUnknown"),
        (h(Unknown, false, None, &[]), "Unknown", "HealthUnknown"),
        (None, "Unknown", "HealthUnknown"),
    ];
    for (health, status, reason) in cases {
        let c = health_condition(&health);
        assert_eq!((c.status, c.reason), (status, reason), "{health:?}");
        // Both parts empty: the reason doubles as the message.
        assert_eq!(c.message, reason, "{health:?}");
    }
}

#[test]
fn message_combines_text_and_reasons() {
    use HealthState::*;
    let cases = [
        (
            h(
                Degraded,
                false,
                Some("disk full"),
                &["DiskPressure", "Slow"],
            ),
            "disk full; reasons: DiskPressure, Slow",
        ),
        (h(Degraded, false, Some("disk full"), &[]), "disk full"),
        (
            h(Degraded, false, None, &["DiskPressure"]),
            "reasons: DiskPressure",
        ),
        (h(Degraded, false, Some(""), &["A", "B"]), "reasons: A, B"),
        (h(Degraded, false, Some(""), &[]), "InstanceDegraded"),
        (h(Running, true, Some("all good"), &[]), "all good"),
    ];
    for (health, want) in cases {
        assert_eq!(health_condition(&health).message, want, "{health:?}");
    }
}

#[test]
fn states_in_documented_order() {
    let names: Vec<&str> = HealthState::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(
        names,
        [
            "pending",
            "running",
            "degraded",
            "stopped",
            "terminated",
            "unknown"
        ]
    );
    for s in HealthState::ALL {
        assert_eq!(s.as_str().parse::<HealthState>(), Ok(s));
    }
    assert!("provider_id_missing".parse::<HealthState>().is_err());
    assert!("Running".parse::<HealthState>().is_err());
}
