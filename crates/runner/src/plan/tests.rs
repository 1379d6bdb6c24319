//! Table tests of plan parsing on hand-written `show -json` shapes. The same functions run on
//! plans written by the real engines in `tests/engines.rs`.

use serde_json::{Value, json};

use super::*;

const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

fn parse(doc: Value) -> Plan {
    Plan::from_json(doc.to_string().as_bytes()).expect("plan parses")
}

fn rc(address: &str, change: Value) -> Value {
    json!({"address": address, "mode": "managed", "change": change})
}

fn update(before: Value, after: Value) -> Value {
    json!({"actions": ["update"], "before": before, "after": after,
           "after_unknown": {}, "before_sensitive": {}, "after_sensitive": {}})
}

fn hash_of(changes: Vec<Value>) -> String {
    parse(json!({"resource_changes": changes})).fingerprint(KEY)
}

#[test]
fn action_kinds() {
    let cases: &[(&[&str], ActionKind)] = &[
        (&[], ActionKind::NoOp),
        (&["no-op"], ActionKind::NoOp),
        (&["create"], ActionKind::Create),
        (&["read"], ActionKind::Read),
        (&["update"], ActionKind::Update),
        (&["delete"], ActionKind::Delete),
        (&["forget"], ActionKind::Forget),
        (&["delete", "create"], ActionKind::Replace),
        (&["create", "delete"], ActionKind::Replace),
        (&["update", "forget"], ActionKind::Update),
        (&["bogus"], ActionKind::Other),
    ];
    for (actions, want) in cases {
        let actions: Vec<String> = actions.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(ActionKind::of(&actions), *want, "{actions:?}");
        assert_eq!(
            want.is_destructive(),
            matches!(
                want,
                ActionKind::Delete | ActionKind::Replace | ActionKind::Other
            )
        );
    }
}

#[test]
fn empty_plans_hash_to_the_empty_hash() {
    let noop = rc(
        "a.x",
        json!({"actions": ["no-op"], "before": {"v": 1}, "after": {"v": 1}}),
    );
    for doc in [
        json!({}),
        json!({"resource_changes": []}),
        json!({"resource_changes": [noop], "output_changes": {"o": {"actions": ["no-op"]}}}),
    ] {
        let plan = parse(doc);
        assert_eq!(plan.fingerprint(KEY), EMPTY_PLAN_HASH);
        assert_eq!(plan.summary(KEY), PlanSummary::empty());
    }
    assert_eq!(
        EMPTY_PLAN_HASH,
        format!("p2:{}", hex::encode(Sha256::digest(b"")))
    );
}

#[test]
fn summary_counts_and_labels() {
    let plan = parse(json!({
        "resource_changes": [
            rc("b.create", json!({"actions": ["create"], "after": {"v": 1}})),
            rc("a.update", update(json!({"v": 1}), json!({"v": 2}))),
            rc("c.replace", json!({"actions": ["delete", "create"]})),
            rc("d.delete", json!({"actions": ["delete"]})),
            rc("e.forget", json!({"actions": ["forget"]})),
            {"address": "data.f.read", "mode": "data", "change": {"actions": ["read"]}},
            rc("g.import", json!({"actions": ["no-op"], "importing": {"id": "i-1"}})),
            {"address": "h.moved", "previous_address": "h.old", "change": {"actions": ["no-op"]}},
            rc("i.noop", json!({"actions": ["no-op"]})),
            {"address": "j.both", "previous_address": "j.old",
             "change": {"actions": ["update"], "importing": {"id": "x"}}},
        ],
        "output_changes": {
            "same": {"actions": ["no-op"]},
            "new": {"actions": ["create"], "after": "x"},
            "gone": {"actions": ["delete"], "before": "y"},
        },
    }));
    let s = plan.summary(KEY);
    assert_eq!(
        (s.create, s.update, s.replace, s.delete, s.forget),
        (1, 2, 1, 1, 1)
    );
    assert_eq!((s.outputs, s.import, s.moves), (2, 2, 2));
    assert_eq!(
        s.resources,
        [
            "a.update (update)",
            "b.create (create)",
            "c.replace (replace)",
            "d.delete (delete)",
            "data.f.read (read)",
            "e.forget (forget)",
            "g.import (import)",
            "h.moved (move)",
            "j.both (update, import, move)",
        ]
    );
    assert!(!s.truncated);
    assert!(
        s.hash.starts_with("p2:") && s.hash.len() == 67,
        "{}",
        s.hash
    );
    assert_eq!(plan.fingerprint_lines(KEY).len(), 9 + 2);
    assert_eq!(
        plan.destructive(),
        ["c.replace (replace)", "d.delete (delete)"]
    );
    // Any list with a delete is destructive, and so is one the runner does not know.
    let odd = parse(json!({"resource_changes": [
        rc("a.update_delete", json!({"actions": ["update", "delete"]})),
        rc("b.unknown", json!({"actions": ["create", "read"]})),
        rc("c.forget", json!({"actions": ["forget"]})),
        rc("d.update_forget", json!({"actions": ["update", "forget"]})),
    ]}));
    assert_eq!(
        odd.destructive(),
        ["a.update_delete (delete)", "b.unknown (create,read)"]
    );
    // Serialized keys: zero/empty optional members are left out.
    let v = serde_json::to_value(PlanSummary::empty()).expect("json");
    assert_eq!(
        v,
        json!({"hash": EMPTY_PLAN_HASH, "create": 0, "update": 0, "replace": 0, "delete": 0})
    );
    let v = serde_json::to_value(&s).expect("json");
    assert_eq!(v["move"], 2);
}

#[test]
fn summary_lists_at_most_fifty_sorted() {
    let changes: Vec<Value> = (0..60)
        .rev()
        .map(|i| rc(&format!("a.r{i:02}"), json!({"actions": ["create"]})))
        .collect();
    let s = parse(json!({ "resource_changes": changes })).summary(KEY);
    assert_eq!(s.create, 60);
    assert_eq!(s.resources.len(), MAX_PLAN_RESOURCES);
    assert_eq!(s.resources[0], "a.r00 (create)");
    assert!(s.truncated);
}

/// Each row: two plans, and whether their fingerprints must be equal.
#[test]
fn fingerprint_binds_effects_not_bystanders() {
    let upd = |b: Value, a: Value| vec![rc("a.x", update(b, a))];
    let rows: Vec<(&str, Vec<Value>, Vec<Value>, bool)> = vec![
        (
            "same plan",
            upd(json!({"v": 1, "w": "a"}), json!({"v": 2, "w": "a"})),
            upd(json!({"v": 1, "w": "a"}), json!({"v": 2, "w": "a"})),
            true,
        ),
        (
            "an untouched attribute moves",
            upd(json!({"v": 1, "w": "a"}), json!({"v": 2, "w": "a"})),
            upd(json!({"v": 1, "w": "b"}), json!({"v": 2, "w": "b"})),
            true,
        ),
        (
            "the new value differs",
            upd(json!({"v": 1}), json!({"v": 2})),
            upd(json!({"v": 1}), json!({"v": 3})),
            false,
        ),
        (
            "the old value differs",
            upd(json!({"v": 1}), json!({"v": 2})),
            upd(json!({"v": 0}), json!({"v": 2})),
            false,
        ),
        (
            "absent is not null",
            upd(json!({}), json!({"v": 2})),
            upd(json!({"v": null}), json!({"v": 2})),
            false,
        ),
        (
            "list index is not map key",
            upd(json!({"v": ["a"]}), json!({"v": ["b"]})),
            upd(json!({"v": {"0": "a"}}), json!({"v": {"0": "b"}})),
            false,
        ),
        (
            "nested untouched list element",
            upd(json!({"l": [1, 2, 3]}), json!({"l": [1, 9, 3]})),
            upd(json!({"l": [5, 2, 3]}), json!({"l": [5, 9, 3]})),
            true,
        ),
        (
            "delete,create is not create,delete",
            vec![rc("a.x", json!({"actions": ["delete", "create"]}))],
            vec![rc("a.x", json!({"actions": ["create", "delete"]}))],
            false,
        ),
        (
            "plan order does not matter",
            vec![
                rc("a.x", json!({"actions": ["delete"]})),
                rc("a.y", json!({"actions": ["create"], "after": {"v": 1}})),
            ],
            vec![
                rc("a.y", json!({"actions": ["create"], "after": {"v": 1}})),
                rc("a.x", json!({"actions": ["delete"]})),
            ],
            true,
        ),
        (
            "a delete binds only address and action",
            vec![rc(
                "a.x",
                json!({"actions": ["delete"], "before": {"v": 1}}),
            )],
            vec![rc(
                "a.x",
                json!({"actions": ["delete"], "before": {"v": 2}}),
            )],
            true,
        ),
        (
            "create binds the planned object",
            vec![rc("a.x", json!({"actions": ["create"], "after": {"v": 1}}))],
            vec![rc("a.x", json!({"actions": ["create"], "after": {"v": 2}}))],
            false,
        ),
        (
            "unknown is bound as unknown",
            vec![rc(
                "a.x",
                json!({"actions": ["update"], "before": {"v": 1}, "after": {"v": null}, "after_unknown": {"v": true}}),
            )],
            vec![rc(
                "a.x",
                json!({"actions": ["update"], "before": {"v": 1}, "after": {"v": null}, "after_unknown": {}}),
            )],
            false,
        ),
        (
            "sensitivity change",
            vec![rc(
                "a.x",
                json!({"actions": ["update"], "before": {"v": "s", "w": 1}, "after": {"v": "s", "w": 2}, "after_sensitive": {"v": true}}),
            )],
            vec![rc(
                "a.x",
                json!({"actions": ["update"], "before": {"v": "s", "w": 1}, "after": {"v": "s", "w": 2}}),
            )],
            false,
        ),
        (
            "sensitive values are bound inside the MAC",
            vec![rc(
                "a.x",
                json!({"actions": ["update"], "before": {"p": "old"}, "after": {"p": "new1"}, "before_sensitive": {"p": true}, "after_sensitive": {"p": true}}),
            )],
            vec![rc(
                "a.x",
                json!({"actions": ["update"], "before": {"p": "old"}, "after": {"p": "new2"}, "before_sensitive": {"p": true}, "after_sensitive": {"p": true}}),
            )],
            false,
        ),
        (
            "import ID",
            vec![rc(
                "a.x",
                json!({"actions": ["no-op"], "importing": {"id": "1"}}),
            )],
            vec![rc(
                "a.x",
                json!({"actions": ["no-op"], "importing": {"id": "2"}}),
            )],
            false,
        ),
        (
            "moved-from address",
            vec![
                json!({"address": "a.x", "previous_address": "a.old", "change": {"actions": ["no-op"]}}),
            ],
            vec![
                json!({"address": "a.x", "previous_address": "a.older", "change": {"actions": ["no-op"]}}),
            ],
            false,
        ),
    ];
    for (what, a, b, equal) in rows {
        let (ha, hb) = (hash_of(a), hash_of(b));
        assert_eq!(ha == hb, equal, "{what}: {ha} vs {hb}");
        assert_ne!(ha, EMPTY_PLAN_HASH, "{what}");
    }
}

#[test]
fn fingerprint_is_keyed_and_covers_outputs() {
    let doc = json!({"output_changes": {"endpoint": {"actions": ["update"], "before": "a", "after": "b"}}});
    let plan = parse(doc);
    let h1 = plan.fingerprint(KEY);
    let h2 = plan.fingerprint(b"another key, another key, 32 bytes!");
    assert_ne!(h1, EMPTY_PLAN_HASH, "an output-only change needs approval");
    assert_ne!(h1, h2);
    let lines = plan.fingerprint_lines(KEY);
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with("output.endpoint|update|"),
        "{}",
        lines[0]
    );
    assert_eq!(lines[0].len(), "output.endpoint|update|".len() + 64);
    // The MAC never contains the values.
    assert!(!lines[0].contains("|a") && !lines[0].contains("b|"));
}

#[test]
fn sensitive_values_from_every_source() {
    let plan = parse(json!({
        "variables": {"db_password": {"value": "var-secret"}, "size": {"value": 3}},
        "configuration": {"root_module": {"variables": {"db_password": {"sensitive": true}, "size": {}}}},
        "resource_changes": [rc("a.x", json!({
            "actions": ["update"],
            "before": {"pw": "old-secret", "name": "public", "list": ["l0", "l1-secret"]},
            "after": {"pw": "new-secret", "name": "public", "list": ["l0", "l1-secret"]},
            "before_sensitive": {"pw": true, "list": [false, true]},
            "after_sensitive": {"pw": true},
        }))],
        "output_changes": {"kubeconfig": {"actions": ["create"], "after": {"k": "out-secret"}, "after_sensitive": true}},
        "prior_state": {"values": {
            "outputs": {"o": {"sensitive": true, "value": "prior-out"}, "p": {"sensitive": false, "value": "public-out"}},
            "root_module": {
                "resources": [{"values": {"token": "data-secret", "id": "x"}, "sensitive_values": {"token": true}}],
                "child_modules": [{"resources": [{"values": {"k": "child-secret"}, "sensitive_values": {"k": true}}]}],
            },
        }},
    }));
    let got: Vec<Value> = plan.sensitive_values();
    for want in [
        json!("var-secret"),
        json!("old-secret"),
        json!("new-secret"),
        json!("l1-secret"),
        json!({"k": "out-secret"}),
        json!("prior-out"),
        json!("data-secret"),
        json!("child-secret"),
    ] {
        assert!(got.contains(&want), "missing {want} in {got:?}");
    }
    for public in [json!("public"), json!("public-out"), json!("l0"), json!(3)] {
        assert!(!got.contains(&public), "{public} is not sensitive");
    }
}

#[test]
fn parse_errors_never_quote_the_document() {
    for bad in [
        &b"{\"resource_changes\": [{\"address\": \"a\", \"change\": {\"actions\": \"secret-value\"}}]}"[..],
        b"not json secret-value",
        b"[\"secret-value\"]",
    ] {
        let err = Plan::from_json(bad).expect_err("rejected").to_string();
        assert!(!err.contains("secret-value"), "{err}");
        assert!(err.starts_with("show -json output is not a plan document"), "{err}");
    }
    let dbg = format!(
        "{:?}",
        parse(json!({"variables": {"x": {"value": "secret-value"}}}))
    );
    assert!(!dbg.contains("secret-value"), "{dbg}");
}

#[test]
fn blocked_summary_table() {
    let many: Vec<String> = (0..100)
        .map(|i| format!("module.role.aws_instance.node_{i:03} (delete)"))
        .collect();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["a.x (delete)".into()],
            "the plan deletes or replaces 1 resource(s): a.x (delete)",
        ),
        (
            vec!["a.x (delete)".into(), "b.y (replace)".into()],
            "the plan deletes or replaces 2 resource(s): a.x (delete), b.y (replace)",
        ),
    ];
    for (input, want) in cases {
        assert_eq!(blocked_summary(&input), want);
    }
    let s = blocked_summary(&many);
    assert!(s.len() <= MAX_SUMMARY_BYTES, "{}", s.len());
    assert!(s.starts_with("the plan deletes or replaces 100 resource(s): module.role"));
    let shown = s.matches("(delete)").count();
    assert!(s.ends_with(&format!(" and {} more", 100 - shown)), "{s}");
    let huge = vec!["x".repeat(600), "y.z (delete)".into()];
    let s = blocked_summary(&huge);
    assert!(
        s.len() <= MAX_SUMMARY_BYTES && s.ends_with(" and 2 more"),
        "{s}"
    );
    assert_eq!(truncate_str("päss", 2), "p");
}
