//! Renderer edge cases, roles and constants (api.md §2.1–2.3).

mod common;

use captf_contract::{
    ClusterInputs, ClusterNetwork, CommonInputs, MAX_RENDERED_BYTES, Role, RoleInputs, Variable,
    Variables, input_names, render, tags, versions,
};
use serde_json::{Value, json};

fn tfvars(r: &captf_contract::Rendered) -> Value {
    serde_json::from_slice(&r.tfvars_json).expect("tfvars JSON")
}

#[test]
fn roles_and_constants() {
    for (s, role, kind, short) in [
        ("cluster", Role::Cluster, "TerraformCluster", "c"),
        ("machine", Role::Machine, "TerraformMachine", "m"),
        (
            "machinepool",
            Role::MachinePool,
            "TerraformMachinePool",
            "mp",
        ),
    ] {
        assert_eq!(s.parse::<Role>().expect("known role"), role);
        assert_eq!(
            (role.as_str(), role.kind(), role.kind_short()),
            (s, kind, short)
        );
        assert_eq!(Role::from_kind(kind), Some(role));
        assert_eq!(role.to_string(), s);
    }
    let err = "MachinePool".parse::<Role>().expect_err("case-sensitive");
    assert_eq!(err.to_string(), "contract: unknown role \"MachinePool\"");
    assert_eq!(err.category(), "UnknownRole");
    assert_eq!(Role::from_kind("Machine"), None);
    assert_eq!(versions(), ["v1alpha1"]);
    assert_eq!(captf_contract::VERSION, "v1alpha1");
    assert_eq!(captf_contract::RESERVED_PREFIX, "captf_");
    assert_eq!(captf_contract::MAX_VARIABLES, 256);
    assert_eq!(
        input_names(Role::MachinePool),
        [
            "captf_contract",
            "captf_cluster",
            "captf_object",
            "captf_tags",
            "captf_cluster_outputs",
            "machinepool_name",
            "replicas",
            "bootstrap_data",
            "bootstrap_format",
            "failure_domains",
            "cluster_failure_domains",
            "kubernetes_version",
            "node_labels",
            "autoscaling"
        ]
    );
    assert_eq!(
        input_names(Role::Cluster)[4..],
        [
            "control_plane_endpoint",
            "kubernetes_version",
            "control_plane_initialized",
            "cluster_network"
        ]
    );
}

#[test]
fn tags_use_the_object_namespace_and_always_carry_template() {
    let c = CommonInputs::new("prod", "cluster-ns", Role::Machine, "m-1", "object-ns", "");
    assert_eq!(c.cluster.namespace, "cluster-ns");
    assert_eq!(c.tags, tags("prod", "object-ns", Role::Machine, "m-1", ""));
    assert_eq!(
        serde_json::to_value(&c.tags).expect("tags"),
        json!({
            "captf.io/cluster": "prod", "captf.io/namespace": "object-ns",
            "captf.io/kind": "TerraformMachine", "captf.io/name": "m-1",
            "captf.io/managed-by": "captf", "captf.io/template": ""
        })
    );
}

#[test]
fn cluster_network_is_null_only_when_nothing_is_set() {
    assert_eq!(ClusterNetwork::from_fields(None, None, None, None), None);
    let net = ClusterNetwork::from_fields(None, None, Some("cluster.local".into()), None)
        .expect("one field set");
    let inputs = ClusterInputs {
        cluster_network: Some(net),
        ..common::cluster_minimal()
    };
    let r = render(
        Role::Cluster,
        "img",
        &inputs.clone().into(),
        &Variables::new(),
    )
    .expect("render");
    assert_eq!(
        tfvars(&r)["cluster_network"],
        json!({"pods": [], "services": [], "service_domain": "cluster.local", "api_server_port": null})
    );
    let none = ClusterInputs {
        cluster_network: None,
        ..inputs
    };
    let r = render(Role::Cluster, "img", &none.into(), &Variables::new()).expect("render");
    assert_eq!(tfvars(&r)["cluster_network"], Value::Null);
    assert!(
        tfvars(&r).get("captf_cluster_outputs").is_none(),
        "cluster has no such key"
    );
}

#[test]
fn role_mismatch_is_rejected() {
    let machine: RoleInputs = common::machine_full().into();
    let err = render(Role::Cluster, "img", &machine, &Variables::new()).expect_err("mismatch");
    assert_eq!(err.category(), "RoleMismatch");

    let mut wrong_kind = common::machine_full();
    wrong_kind.common.object.kind = "TerraformMachinePool".into();
    let err = render(Role::Machine, "img", &wrong_kind.into(), &Variables::new())
        .expect_err("kind mismatch");
    assert_eq!(err.category(), "RoleMismatch");
    assert_eq!(
        err.to_string(),
        "contract: inputs are for role machinepool, expected machine"
    );
}

#[test]
fn size_limit_is_inclusive_at_one_million_bytes() {
    let inputs: RoleInputs = common::machine_minimal().into();
    let with_pad = |n: usize| {
        let mut vars = Variables::new();
        vars.insert(
            "pad".into(),
            Variable {
                value: json!("a".repeat(n)),
                sensitive: false,
            },
        );
        render(Role::Machine, "img", &inputs, &vars)
    };
    let base = with_pad(0).expect("small").size();
    let exact = with_pad(MAX_RENDERED_BYTES - base).expect("exactly at the limit");
    assert_eq!(exact.size(), MAX_RENDERED_BYTES);
    let err = with_pad(MAX_RENDERED_BYTES - base + 1).expect_err("one byte over");
    assert_eq!(err.category(), "InputsTooLarge");
    assert_eq!(
        err.to_string(),
        "contract: rendered inputs are 1000001 bytes, over the 1000000 byte limit"
    );
}

#[test]
fn strings_are_written_verbatim_without_html_escaping() {
    let mut m = common::machine_full();
    m.captf_cluster_outputs = json!({"lb": "<a&b>", "nl": "x\ny", "uni": "é\u{2028}"});
    let r = render(Role::Machine, "img", &m.into(), &Variables::new()).expect("render");
    let text = String::from_utf8(r.tfvars_json).expect("utf8");
    assert!(text.contains(r#""lb": "<a&b>""#), "{text}");
    assert!(text.contains(r#""nl": "x\ny""#), "{text}");
    assert!(text.contains("\"uni\": \"é\u{2028}\""), "{text}");
    assert!(text.ends_with("}\n"));
}

#[test]
fn user_variables_cannot_shadow_contract_inputs() {
    let inputs: RoleInputs = common::pool_full().into();
    for name in ["replicas", "captf_extra", "for_each", "bad name"] {
        let vars = Variables::from([(
            name.to_owned(),
            Variable {
                value: json!(1),
                sensitive: false,
            },
        )]);
        let err = render(Role::MachinePool, "img", &inputs, &vars).expect_err(name);
        assert!(
            matches!(err.category(), "VariableReserved" | "VariableName"),
            "{name}: {err}"
        );
    }
    // A name reserved only for another role is fine here.
    let vars = Variables::from([(
        "machine_name".to_owned(),
        Variable {
            value: json!("x"),
            sensitive: false,
        },
    )]);
    let r = render(Role::MachinePool, "img", &inputs, &vars).expect("allowed");
    assert_eq!(tfvars(&r)["machine_name"], json!("x"));
}
