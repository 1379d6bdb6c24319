//! Variable name rules and parsing (api.md §2.2.7).

use captf_contract::{Error, Role, parse_variables, validate_variable_name};
use proptest::prelude::*;
use serde_json::json;

#[test]
fn name_rules_in_documented_order() {
    // (role, name, expected category or None for valid)
    let cases: &[(Role, &str, Option<&str>)] = &[
        (Role::Machine, "instance_type", None),
        (Role::Machine, "_private", None),
        (Role::Machine, "disk-gib", None),
        (Role::Machine, "A9", None),
        (Role::Machine, "", Some("VariableName")),
        (Role::Machine, "9lives", Some("VariableName")),
        (Role::Machine, "-x", Some("VariableName")),
        (Role::Machine, "with space", Some("VariableName")),
        (Role::Machine, "dot.ted", Some("VariableName")),
        (Role::Machine, "ünï", Some("VariableName")),
        (Role::Machine, "trailing\n", Some("VariableName")),
        // Rule 1 wins over rule 2: an invalid name with the prefix is a syntax error.
        (Role::Machine, "captf_x.y", Some("VariableName")),
        (Role::Machine, "captf_anything", Some("VariableReserved")),
        (
            Role::Cluster,
            "captf_cluster_outputs",
            Some("VariableReserved"),
        ),
        (Role::Machine, "CAPTF_upper", None),
        (Role::Machine, "source", Some("VariableReserved")),
        (Role::Machine, "version", Some("VariableReserved")),
        (Role::Machine, "providers", Some("VariableReserved")),
        (Role::Machine, "count", Some("VariableReserved")),
        (Role::Machine, "for_each", Some("VariableReserved")),
        (Role::Machine, "depends_on", Some("VariableReserved")),
        (Role::Machine, "lifecycle", Some("VariableReserved")),
        (Role::Machine, "locals", Some("VariableReserved")),
        (Role::Machine, "bootstrap_data", Some("VariableReserved")),
        (Role::Machine, "machine_name", Some("VariableReserved")),
        // Contract inputs are reserved per role only.
        (Role::Cluster, "machine_name", None),
        (
            Role::Cluster,
            "control_plane_initialized",
            Some("VariableReserved"),
        ),
        (Role::Machine, "control_plane_initialized", None),
        (Role::MachinePool, "replicas", Some("VariableReserved")),
        (Role::MachinePool, "node_labels", Some("VariableReserved")),
        (Role::Machine, "replicas", None),
        (
            Role::MachinePool,
            "kubernetes_version",
            Some("VariableReserved"),
        ),
    ];
    for (role, name, want) in cases {
        let got = validate_variable_name(*role, name);
        match (want, got) {
            (None, Ok(())) => {}
            (Some(cat), Err(e)) => {
                assert_eq!(e.category(), *cat, "{role} {name:?}: {e}");
                assert!(
                    e.to_string().contains(&format!("{name:?}")),
                    "error must name the variable: {e}"
                );
                assert!(e.to_string().starts_with("contract: "), "{e}");
            }
            (want, got) => panic!("{role} {name:?}: want {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn reserved_reasons_distinguish_the_rule() {
    let why = |role, name| match validate_variable_name(role, name) {
        Err(Error::VariableReserved { why, .. }) => why,
        other => panic!("{name}: {other:?}"),
    };
    assert!(why(Role::Machine, "captf_x").contains("prefix"));
    assert!(why(Role::Machine, "count").contains("meta-argument"));
    assert!(why(Role::Machine, "control_plane").contains("contract input"));
}

#[test]
fn parse_variables_requires_an_object_and_never_quotes_input() {
    let vars =
        parse_variables(br#"{"b": 1, "a": {"x": [true]}, "pw": "hunter2"}"#).expect("object");
    assert_eq!(vars.keys().collect::<Vec<_>>(), ["a", "b", "pw"]);
    assert_eq!(vars["a"].value, json!({"x": [true]}));
    assert!(vars.values().all(|v| !v.sensitive));
    assert!(parse_variables(b"{}").expect("empty object").is_empty());

    for raw in [
        &b"[\"hunter2\"]"[..],
        b"\"hunter2\"",
        b"42",
        b"null",
        b"true",
    ] {
        let err = parse_variables(raw).expect_err("not an object");
        assert_eq!(err.category(), "VariablesNotObject");
        assert_eq!(err.to_string(), "contract: variables must be a JSON object");
    }
    for raw in [
        &b"{\"pw\": hunter2}"[..],
        b"{\"pw\": \"hunter2\"",
        b"",
        b"{'hunter2': 1}",
    ] {
        let err = parse_variables(raw).expect_err("malformed");
        assert_eq!(err.category(), "VariablesMalformed");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}

#[test]
fn secret_values_never_appear_in_render_errors() {
    let mut vars = captf_contract::Variables::new();
    vars.insert(
        "count".into(),
        captf_contract::Variable {
            value: json!("hunter2"),
            sensitive: true,
        },
    );
    let inputs = captf_contract::RoleInputs::Machine(captf_contract::MachineInputs {
        common: captf_contract::CommonInputs::new("c", "ns", Role::Machine, "m", "ns", ""),
        captf_cluster_outputs: json!({}),
        machine_name: "m".into(),
        bootstrap_data: "e30=".into(),
        bootstrap_format: "cloud-config".into(),
        failure_domain: None,
        kubernetes_version: None,
        control_plane: false,
    });
    let err = captf_contract::render(Role::Machine, "img", &inputs, &vars).expect_err("reserved");
    assert_eq!(err.category(), "VariableReserved");
    assert!(err.to_string().contains("\"count\""));
    assert!(!format!("{err} {err:?}").contains("hunter2"));
}

proptest! {
    #[test]
    fn syntax_rule_matches_the_documented_regex(name in "[a-zA-Z0-9_\\-.é ]{0,6}") {
        let re = regex::Regex::new(r"^[a-zA-Z_][a-zA-Z0-9_-]*$").expect("regex compiles");
        let syntax_ok = !matches!(
            validate_variable_name(Role::Machine, &name),
            Err(Error::VariableName { .. })
        );
        prop_assert_eq!(syntax_ok, re.is_match(&name), "{:?}", name);
    }
}
