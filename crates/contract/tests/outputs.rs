//! Output decoding: Missing / Invalid / Pending / Valid and normalizations (api.md §2.4).

use std::collections::BTreeMap;

use captf_contract::{
    Address, AddressType, Decoded, FailureDomain, HealthState, Role, RoleOutputs, decode_outputs,
    required_outputs,
};
use serde_json::{Value, json};

fn outputs(v: Value) -> BTreeMap<String, Value> {
    match v {
        Value::Object(m) => m.into_iter().collect(),
        _ => panic!("fixture must be an object"),
    }
}

fn healthy() -> Value {
    json!({"state": "running", "healthy": true, "message": null, "reasons": []})
}

/// The §2.6.4 examples.
fn valid(role: Role) -> Value {
    match role {
        Role::Cluster => json!({
            "control_plane_endpoint": {"host": "noop-demo.invalid", "port": 6443},
            "failure_domains": [{"name": "fd1", "control_plane": true}],
            "exports": {"backend_id": "noop-backend-1"},
            "health": healthy(),
        }),
        Role::Machine => json!({
            "provider_id": "noop:///team-a/prod-md-0-abcde-xyz12",
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "failure_domain": "zone-a", "interruptible": false,
            "health": healthy(),
        }),
        Role::MachinePool => json!({
            "provider_id": "noop-group:///team-a/pool",
            "provider_id_list": ["noop:///team-a/pool/0", "noop:///team-a/pool/1"],
            "replicas": 2,
            "instances": [{"provider_id": "noop:///team-a/pool/0", "state": "running"},
                          {"provider_id": "noop:///team-a/pool/1", "state": "running"}],
            "health": healthy(),
        }),
    }
}

fn with(role: Role, key: &str, value: Value) -> BTreeMap<String, Value> {
    let mut m = outputs(valid(role));
    m.insert(key.to_owned(), value);
    m
}

fn decode_valid(role: Role, m: &BTreeMap<String, Value>) -> RoleOutputs {
    match decode_outputs(role, m) {
        Decoded::Valid(v) => v,
        other => panic!("{role}: expected Valid, got {other:?}"),
    }
}

#[test]
fn spec_examples_are_valid() {
    for role in Role::ALL {
        let v = decode_valid(role, &outputs(valid(role)));
        assert_eq!(v.health().state, HealthState::Running);
    }
}

#[test]
fn missing_outputs_are_named_and_win() {
    // `replicas` may be absent (pool_replicas_are_optional).
    let mandatory = |role| {
        required_outputs(role)
            .iter()
            .copied()
            .filter(|n| *n != "replicas")
            .collect::<Vec<_>>()
    };
    for role in Role::ALL {
        for name in mandatory(role) {
            let mut m = outputs(valid(role));
            m.remove(name);
            // Another output is invalid at the same time: Missing still wins.
            m.insert("health".into(), json!({"state": "bogus", "healthy": true}));
            m.remove(name);
            assert_eq!(
                decode_outputs(role, &m),
                Decoded::Missing(vec![name]),
                "{role}"
            );
        }
        assert_eq!(
            decode_outputs(role, &BTreeMap::new()),
            Decoded::Missing(mandatory(role))
        );
    }
}

#[test]
fn extra_outputs_and_attributes_are_ignored() {
    let mut m = with(Role::Machine, "unrelated", json!({"anything": 1.5}));
    m.insert(
        "health".into(),
        json!({"state": "running", "healthy": true, "extra": [1]}),
    );
    decode_valid(Role::Machine, &m);
}

#[test]
fn pending_per_role() {
    let cases: &[(Role, &str, Value)] = &[
        (Role::Cluster, "health", Value::Null),
        (Role::Machine, "provider_id", Value::Null),
        (Role::Machine, "provider_id", json!("")),
        (Role::Machine, "addresses", Value::Null),
        (Role::Machine, "health", Value::Null),
        (Role::MachinePool, "provider_id_list", Value::Null),
        (Role::MachinePool, "instances", Value::Null),
        (Role::MachinePool, "health", Value::Null),
    ];
    for (role, key, value) in cases {
        assert_eq!(
            decode_outputs(*role, &with(*role, key, value.clone())),
            Decoded::Pending(vec![*key]),
            "{role} {key}"
        );
    }
    // Several pending outputs are all named.
    let mut m = with(Role::Machine, "provider_id", Value::Null);
    m.insert("health".into(), Value::Null);
    assert_eq!(
        decode_outputs(Role::Machine, &m),
        Decoded::Pending(vec!["provider_id", "health"])
    );
    // Invalid wins over pending.
    m.insert("interruptible".into(), json!("yes"));
    assert!(matches!(
        decode_outputs(Role::Machine, &m),
        Decoded::Invalid(_)
    ));
}

#[test]
fn permanent_nulls_and_defaults() {
    let RoleOutputs::Cluster(c) = decode_valid(
        Role::Cluster,
        &outputs(json!({
            "control_plane_endpoint": null, "failure_domains": null, "exports": null, "health": healthy()
        })),
    ) else {
        panic!("cluster")
    };
    assert_eq!(c.control_plane_endpoint, None);
    assert!(c.failure_domains.is_empty());
    assert_eq!(c.exports, json!({}));

    let RoleOutputs::Cluster(c) = decode_valid(
        Role::Cluster,
        &with(
            Role::Cluster,
            "failure_domains",
            json!([{"name": "a"}, {"name": "b", "control_plane": false, "attributes": {"k": "v"}},
                   {"name": "c", "control_plane": null, "attributes": null}]),
        ),
    ) else {
        panic!("cluster")
    };
    assert_eq!(
        c.failure_domains,
        vec![
            FailureDomain {
                name: "a".into(),
                control_plane: true,
                attributes: BTreeMap::new()
            },
            FailureDomain {
                name: "b".into(),
                control_plane: false,
                attributes: BTreeMap::from([("k".into(), "v".into())]),
            },
            FailureDomain {
                name: "c".into(),
                control_plane: true,
                attributes: BTreeMap::new()
            },
        ]
    );

    let mut m = with(Role::Machine, "interruptible", Value::Null);
    m.insert("failure_domain".into(), Value::Null);
    m.insert("addresses".into(), json!([]));
    m.insert(
        "health".into(),
        json!({"state": "pending", "healthy": false}),
    );
    let RoleOutputs::Machine(o) = decode_valid(Role::Machine, &m) else {
        panic!("machine")
    };
    assert!(!o.interruptible);
    assert_eq!(o.failure_domain, None);
    assert!(o.addresses.is_empty(), "[] is meaningful, not pending");
    assert_eq!(o.health.message, None);
    assert!(o.health.reasons.is_empty());

    for pid in [Value::Null, json!("")] {
        let RoleOutputs::MachinePool(p) = decode_valid(
            Role::MachinePool,
            &with(Role::MachinePool, "provider_id", pid),
        ) else {
            panic!("pool")
        };
        assert_eq!(p.provider_id, None);
    }
}

#[test]
fn normalizations() {
    let RoleOutputs::Machine(o) = decode_valid(
        Role::Machine,
        &with(
            Role::Machine,
            "addresses",
            json!([
                {"type": "Hostname", "address": "node-1"},
                {"type": "ExternalIP", "address": "203.0.113.9"},
                {"type": "InternalIP", "address": "10.0.0.2"},
                {"type": "ExternalDNS", "address": "node.example.com"},
                {"type": "InternalIP", "address": "10.0.0.10"},
                {"type": "InternalDNS", "address": "node.internal"}
            ]),
        ),
    ) else {
        panic!("machine")
    };
    let got: Vec<(AddressType, &str)> = o
        .addresses
        .iter()
        .map(|a: &Address| (a.address_type, a.address.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (AddressType::InternalIp, "10.0.0.10"),
            (AddressType::InternalIp, "10.0.0.2"),
            (AddressType::InternalDns, "node.internal"),
            (AddressType::ExternalIp, "203.0.113.9"),
            (AddressType::ExternalDns, "node.example.com"),
            (AddressType::Hostname, "node-1"),
        ]
    );

    let mut m = with(
        Role::MachinePool,
        "provider_id_list",
        json!(["c", "a", "b", "a", "c"]),
    );
    let many: Vec<Value> = (0..1001)
        .map(|i| json!({"provider_id": format!("p{i}")}))
        .collect();
    m.insert("instances".into(), Value::Array(many));
    let RoleOutputs::MachinePool(p) = decode_valid(Role::MachinePool, &m) else {
        panic!("pool")
    };
    assert_eq!(p.provider_id_list, ["a", "b", "c"]);
    assert_eq!(p.instances.len(), 1000);
    assert!(p.instances_truncated);
    assert_eq!(p.instances[999].provider_id, "p999");

    let RoleOutputs::MachinePool(p) =
        decode_valid(Role::MachinePool, &outputs(valid(Role::MachinePool)))
    else {
        panic!("pool")
    };
    assert!(!p.instances_truncated);
    assert_eq!(p.replicas, Some(2));
    assert_eq!(p.instances[0].state, Some(HealthState::Running));

    let RoleOutputs::MachinePool(p) = decode_valid(
        Role::MachinePool,
        &with(Role::MachinePool, "replicas", json!(0)),
    ) else {
        panic!("pool")
    };
    assert_eq!(p.replicas, Some(0));
}

/// A pool whose scaling group is gone reports no `replicas`; its other outputs still decode,
/// so its health reaches the conditions.
#[test]
fn pool_replicas_are_optional() {
    let pool = |m: &BTreeMap<String, Value>| match decode_outputs(Role::MachinePool, m) {
        Decoded::Valid(RoleOutputs::MachinePool(p)) => p,
        other => panic!("expected a valid pool, got {other:?}"),
    };
    let terminated = json!({"state": "terminated", "healthy": false, "message": "group deleted"});
    let mut absent = outputs(valid(Role::MachinePool));
    absent.remove("replicas");
    let replicas = |v| with(Role::MachinePool, "replicas", v);
    let cases = [
        ("present", replicas(json!(3)), Some(3)),
        ("zero", replicas(json!(0)), Some(0)),
        ("null", replicas(Value::Null), None),
        ("absent", absent, None),
    ];
    for (name, mut m, want) in cases {
        let p = pool(&m);
        assert_eq!(p.replicas, want, "{name}");
        assert_eq!(p.provider_id_list.len(), 2, "{name}");
        assert_eq!(p.health.state, HealthState::Running, "{name}");
        m.insert("health".into(), terminated.clone());
        assert_eq!(pool(&m).health.state, HealthState::Terminated, "{name}");
    }
    // Not reported does not hide what else is pending or invalid.
    let mut m = with(Role::MachinePool, "replicas", Value::Null);
    m.insert("health".into(), Value::Null);
    assert_eq!(
        decode_outputs(Role::MachinePool, &m),
        Decoded::Pending(vec!["health"])
    );
    m.insert("replicas".into(), json!("3"));
    assert!(matches!(
        decode_outputs(Role::MachinePool, &m),
        Decoded::Invalid(v) if v.len() == 1 && v[0].output == "replicas"
    ));
}

#[test]
fn invalid_outputs_name_output_field_and_problem() {
    let long = |n: usize| Value::String("x".repeat(n));
    let fds = |n: usize| Value::Array((0..n).map(|i| json!({"name": format!("fd{i}")})).collect());
    let cases: Vec<(Role, &str, Value, &str, &str)> = vec![
        (
            Role::Machine,
            "addresses",
            json!([{"type": "PublicIP", "address": "1.2.3.4"}]),
            "[0].type",
            "must be one of",
        ),
        (
            Role::Machine,
            "addresses",
            json!([{"address": "1.2.3.4"}]),
            "[0].type",
            "is required",
        ),
        (
            Role::Machine,
            "addresses",
            json!([{"type": "InternalIP"}]),
            "[0].address",
            "is required",
        ),
        (
            Role::Machine,
            "addresses",
            json!([{"type": "InternalIP", "address": ""}]),
            "[0].address",
            "outside 1..=256",
        ),
        (
            Role::Machine,
            "addresses",
            json!({"type": "InternalIP"}),
            "",
            "must be a list",
        ),
        (
            Role::Machine,
            "addresses",
            Value::Array(vec![json!({"type": "Hostname", "address": "h"}); 257]),
            "",
            "at most 256",
        ),
        (
            Role::Machine,
            "provider_id",
            long(513),
            "",
            "length 513 is outside 1..=512",
        ),
        (
            Role::Machine,
            "provider_id",
            json!(7),
            "",
            "must be a string",
        ),
        (
            Role::Machine,
            "failure_domain",
            json!(""),
            "",
            "outside 1..=256",
        ),
        (
            Role::Machine,
            "interruptible",
            json!("false"),
            "",
            "must be a bool",
        ),
        (
            Role::Machine,
            "health",
            json!({"state": "exploded", "healthy": true}),
            "state",
            "must be one of",
        ),
        (
            Role::Machine,
            "health",
            json!({"state": "provider_id_missing", "healthy": true}),
            "state",
            "must be one of",
        ),
        (
            Role::Machine,
            "health",
            json!({"healthy": true}),
            "state",
            "is required",
        ),
        (
            Role::Machine,
            "health",
            json!({"state": "running"}),
            "healthy",
            "is required",
        ),
        (
            Role::Machine,
            "health",
            json!({"state": "running", "healthy": "yes"}),
            "healthy",
            "must be a bool",
        ),
        (
            Role::Machine,
            "health",
            json!({"state": "running", "healthy": true, "reasons": ["a", 1]}),
            "reasons[1]",
            "must be a string",
        ),
        (
            Role::Machine,
            "health",
            json!({"state": "running", "healthy": true, "message": 3}),
            "message",
            "string or null",
        ),
        (
            Role::Machine,
            "health",
            json!("running"),
            "",
            "must be an object",
        ),
        (
            Role::Cluster,
            "control_plane_endpoint",
            json!({"host": "h"}),
            "port",
            "is required",
        ),
        (
            Role::Cluster,
            "control_plane_endpoint",
            json!({"port": 6443}),
            "host",
            "is required",
        ),
        (
            Role::Cluster,
            "control_plane_endpoint",
            json!({"host": "h", "port": 0}),
            "port",
            "between 1 and 65535",
        ),
        (
            Role::Cluster,
            "control_plane_endpoint",
            json!({"host": "h", "port": 70000}),
            "port",
            "between 1 and 65535",
        ),
        (
            Role::Cluster,
            "control_plane_endpoint",
            json!({"host": "h", "port": 6443.5}),
            "port",
            "between 1 and 65535",
        ),
        (
            Role::Cluster,
            "control_plane_endpoint",
            json!({"host": long(513), "port": 1}),
            "host",
            "outside 1..=512",
        ),
        (
            Role::Cluster,
            "failure_domains",
            json!([{"name": "a"}, {"name": "a"}]),
            "[1].name",
            "duplicates",
        ),
        (
            Role::Cluster,
            "failure_domains",
            fds(101),
            "",
            "has 101 items, at most 100",
        ),
        (
            Role::Cluster,
            "failure_domains",
            json!([{"name": long(257)}]),
            "[0].name",
            "outside 1..=256",
        ),
        (
            Role::Cluster,
            "failure_domains",
            json!([{}]),
            "[0].name",
            "is required",
        ),
        (
            Role::Cluster,
            "failure_domains",
            json!([{"name": "a", "control_plane": "yes"}]),
            "[0].control_plane",
            "must be a bool",
        ),
        (
            Role::Cluster,
            "failure_domains",
            json!([{"name": "a", "attributes": {"k": 1}}]),
            "[0].attributes.k",
            "must be a string",
        ),
        (
            Role::Cluster,
            "exports",
            json!({"weights": [1, 0.25]}),
            "",
            "\"/weights/1\"",
        ),
        (
            Role::Cluster,
            "exports",
            json!({"big": 1e20}),
            "",
            "\"/big\"",
        ),
        (
            Role::MachinePool,
            "replicas",
            json!(-1),
            "",
            "between 0 and 2147483647",
        ),
        (
            Role::MachinePool,
            "replicas",
            json!(2.0),
            "",
            "between 0 and 2147483647",
        ),
        (
            Role::MachinePool,
            "replicas",
            json!(4294967296u64),
            "",
            "between 0 and 2147483647",
        ),
        (
            Role::MachinePool,
            "provider_id",
            long(513),
            "",
            "outside 1..=512",
        ),
        (
            Role::MachinePool,
            "provider_id_list",
            json!(["a", ""]),
            "[1]",
            "outside 1..=512",
        ),
        (
            Role::MachinePool,
            "provider_id_list",
            json!("a"),
            "",
            "must be a list",
        ),
        (
            Role::MachinePool,
            "instances",
            json!([{"state": "running"}]),
            "[0].provider_id",
            "is required",
        ),
        (
            Role::MachinePool,
            "instances",
            json!([{"provider_id": "p", "state": "on"}]),
            "[0].state",
            "must be one of",
        ),
        (
            Role::MachinePool,
            "instances",
            json!([{"provider_id": "p", "instance_id": ""}]),
            "[0].instance_id",
            "outside 1..=256",
        ),
        (
            Role::MachinePool,
            "instances",
            json!([{"provider_id": "p", "addresses": [{"type": "X", "address": "a"}]}]),
            "[0].addresses[0].type",
            "must be one of",
        ),
        (
            Role::MachinePool,
            "instances",
            json!([{"provider_id": "p", "failure_domain": 3}]),
            "[0].failure_domain",
            "must be a string",
        ),
    ];
    for (role, output, value, field, problem) in cases {
        let m = with(role, output, value.clone());
        let Decoded::Invalid(violations) = decode_outputs(role, &m) else {
            panic!(
                "{role} {output}={value}: expected Invalid, got {:?}",
                decode_outputs(role, &m)
            );
        };
        assert_eq!(violations.len(), 1, "{role} {output}: {violations:?}");
        let v = &violations[0];
        assert_eq!((v.output, v.field.as_str()), (output, field), "{v}");
        assert!(
            v.problem.contains(problem),
            "{role} {output}: {v} (want {problem:?})"
        );
        let shown = v.to_string();
        assert!(shown.starts_with(&format!("output {output}")), "{shown}");
    }
}

#[test]
fn violations_never_quote_values_and_are_all_collected() {
    let m = outputs(json!({
        "provider_id": "p",
        "addresses": [{"type": "SecretType-hunter2", "address": "a"}],
        "failure_domain": null,
        "interruptible": "hunter2",
        "health": {"state": "hunter2", "healthy": true},
    }));
    let Decoded::Invalid(v) = decode_outputs(Role::Machine, &m) else {
        panic!("invalid")
    };
    assert_eq!(v.len(), 3, "{v:?}");
    for violation in &v {
        assert!(!violation.to_string().contains("hunter2"), "{violation}");
    }
}
