//! Inputs hash: documented byte layout, determinism, sensitivity to every hashed input.

mod common;

use captf_contract::{
    ClusterInputs, MachineInputs, MachinePoolInputs, Role, RoleInputs, Variable, Variables,
    approval_hash, inputs_hash, render,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// Recomputes the hash from the layout documented in `captf_contract::hash`.
fn by_hand(role: &str, image: &str, inputs: &str, vars: Option<(&str, &str)>) -> String {
    let mut buf = Vec::new();
    let mut field = |label: &str, data: &str| {
        buf.extend_from_slice(format!("{label}:{}:{data}\n", data.len()).as_bytes());
    };
    field("scheme", "h2");
    field("contract", "v1alpha1");
    field("role", role);
    field("image", image);
    field("inputs", inputs);
    if let Some((values, sensitive)) = vars {
        field("variables", values);
        field("sensitive", sensitive);
    }
    format!("h2:{}", hex::encode(Sha256::digest(&buf)))
}

#[test]
fn hash_follows_the_documented_layout() {
    let inputs = RoleInputs::from(common::machine_full());
    let compact = String::from_utf8(captf_contract::canonical_json(
        &inputs.to_value().expect("encode"),
    ))
    .expect("utf8");
    assert!(compact.starts_with(r#"{"bootstrap_data":"I2Nsb3VkLWNvbmZpZw==","bootstrap_format""#));
    let image = common::image(Role::Machine);
    assert_eq!(
        inputs_hash(&inputs, &image, &Variables::new()).expect("hash"),
        by_hand("machine", &image, &compact, None)
    );
    assert_eq!(
        inputs_hash(&inputs, &image, &common::machine_variables()).expect("hash"),
        by_hand(
            "machine",
            &image,
            &compact,
            Some((
                r#"{"db_password":"s3cr3t-db-password","disk_gib":40,"instance_type":"t3.large","ratio":0.5,"subnet_ids":["subnet-a","subnet-b"]}"#,
                r#"["db_password"]"#
            ))
        )
    );
}

#[test]
fn pool_hash_view_zeroes_replicas_only_while_autoscaling() {
    let image = common::image(Role::MachinePool);
    let none = Variables::new();
    let hash = |p: MachinePoolInputs| inputs_hash(&p.into(), &image, &none).expect("hash");

    let on = common::pool_full();
    assert!(on.autoscaling.enabled);
    assert_eq!(
        hash(on.clone()),
        hash(MachinePoolInputs {
            replicas: 4,
            ..on.clone()
        })
    );

    let off = MachinePoolInputs {
        autoscaling: Default::default(),
        ..on
    };
    assert_ne!(
        hash(off.clone()),
        hash(MachinePoolInputs { replicas: 4, ..off })
    );
}

#[test]
fn approval_hash_ignores_bootstrap_data_for_pools_only() {
    let none = Variables::new();
    let pool = common::pool_full();
    let rotated = MachinePoolInputs {
        bootstrap_data: "cm90YXRlZA==".into(),
        ..pool.clone()
    };
    let image = common::image(Role::MachinePool);
    let a = |p: &MachinePoolInputs| approval_hash(&p.clone().into(), &image, &none).expect("hash");
    let h = |p: &MachinePoolInputs| inputs_hash(&p.clone().into(), &image, &none).expect("hash");
    assert_eq!(a(&pool), a(&rotated));
    assert_ne!(h(&pool), h(&rotated));
    assert_ne!(a(&pool), h(&pool));
    // Replicas while autoscaling are excluded from the approval hash too.
    assert_eq!(
        a(&pool),
        a(&MachinePoolInputs {
            replicas: 5,
            ..pool.clone()
        })
    );
    assert_ne!(
        a(&pool),
        a(&MachinePoolInputs {
            machinepool_name: "x".into(),
            ..pool.clone()
        })
    );

    let machine = RoleInputs::from(common::machine_full());
    let mi = common::image(Role::Machine);
    assert_eq!(
        approval_hash(&machine, &mi, &none).expect("hash"),
        inputs_hash(&machine, &mi, &none).expect("hash")
    );
}

#[test]
fn fractional_exports_cannot_be_hashed() {
    let mut m = common::machine_full();
    m.captf_cluster_outputs = json!({"lb": {"weight": 0.5}});
    let err = inputs_hash(&m.clone().into(), "img", &Variables::new()).expect_err("fractional");
    assert_eq!(err.category(), "ExportsNotCanonical");
    assert!(
        err.to_string().contains("/captf_cluster_outputs/lb/weight"),
        "{err}"
    );
    let err = render(Role::Machine, "img", &m.into(), &Variables::new()).expect_err("render too");
    assert_eq!(err.category(), "ExportsNotCanonical");
}

// ---- property tests --------------------------------------------------------

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[ -~é<>&\n]{0,8}".prop_map(Value::String),
    ]
}

/// JSON values whose objects are given as key/value lists so they can be built in any order.
#[derive(Debug, Clone)]
enum Tree {
    Leaf(Value),
    List(Vec<Tree>),
    Object(Vec<(String, Tree)>),
}

fn tree() -> impl Strategy<Value = Tree> {
    json_leaf()
        .prop_map(Tree::Leaf)
        .prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Tree::List),
                prop::collection::btree_map("[a-z_/~]{1,6}", inner, 0..4)
                    .prop_map(|m| Tree::Object(m.into_iter().collect())),
            ]
        })
}

fn build(t: &Tree, reversed: bool) -> Value {
    match t {
        Tree::Leaf(v) => v.clone(),
        Tree::List(items) => Value::Array(items.iter().map(|i| build(i, reversed)).collect()),
        Tree::Object(entries) => {
            let mut m = Map::new();
            let mut order: Vec<&(String, Tree)> = entries.iter().collect();
            if reversed {
                order.reverse();
            }
            for (k, v) in order {
                m.insert(k.clone(), build(v, reversed));
            }
            Value::Object(m)
        }
    }
}

fn variables() -> impl Strategy<Value = Vec<(String, Tree, bool)>> {
    prop::collection::btree_map("[a-z][a-z0-9_]{0,6}", (tree(), any::<bool>()), 0..5).prop_map(
        |m| {
            m.into_iter()
                .map(|(k, (t, s))| (format!("v_{k}"), t, s))
                .collect()
        },
    )
}

fn build_vars(vars: &[(String, Tree, bool)], reversed: bool) -> Variables {
    let mut out = Variables::new();
    let mut order: Vec<&(String, Tree, bool)> = vars.iter().collect();
    if reversed {
        order.reverse();
    }
    for (k, t, s) in order {
        out.insert(
            k.clone(),
            Variable {
                value: build(t, reversed),
                sensitive: *s,
            },
        );
    }
    out
}

fn mutate_common(c: &mut captf_contract::CommonInputs, which: usize, s: &str) -> &'static str {
    match which % 7 {
        0 => {
            c.contract.push_str(s);
            "captf_contract"
        }
        1 => {
            c.cluster.name.push_str(s);
            "captf_cluster.name"
        }
        2 => {
            c.cluster.namespace.push_str(s);
            "captf_cluster.namespace"
        }
        3 => {
            c.object.name.push_str(s);
            "captf_object.name"
        }
        4 => {
            c.object.namespace.push_str(s);
            "captf_object.namespace"
        }
        5 => {
            c.object.kind.push_str(s);
            "captf_object.kind"
        }
        _ => {
            let t = c.tags.entry("captf.io/template".into()).or_default();
            t.push_str(s);
            "captf_tags"
        }
    }
}

fn toggle(o: &mut Option<String>, s: &str) {
    match o {
        Some(v) => v.push_str(s),
        None => *o = Some(s.to_owned()),
    }
}

fn mutate_cluster(c: &mut ClusterInputs, which: usize, s: &str, n: i32) -> &'static str {
    match which % 11 {
        0..=6 => mutate_common(&mut c.common, which, s),
        7 => {
            c.control_plane_endpoint = match c.control_plane_endpoint.take() {
                Some(mut e) => {
                    e.port += n;
                    Some(e)
                }
                None => Some(captf_contract::Endpoint {
                    host: s.into(),
                    port: n,
                }),
            };
            "control_plane_endpoint"
        }
        8 => {
            toggle(&mut c.kubernetes_version, s);
            "kubernetes_version"
        }
        9 => {
            c.control_plane_initialized ^= true;
            "control_plane_initialized"
        }
        _ => {
            match c.cluster_network.as_mut() {
                Some(net) => net.services.push(s.into()),
                None => {
                    c.cluster_network =
                        captf_contract::ClusterNetwork::from_fields(None, None, None, Some(n))
                }
            }
            "cluster_network"
        }
    }
}

fn mutate_machine(m: &mut MachineInputs, which: usize, s: &str) -> &'static str {
    match which % 14 {
        0..=6 => mutate_common(&mut m.common, which, s),
        7 => {
            m.captf_cluster_outputs[format!("k{s}")] = json!(1);
            "captf_cluster_outputs"
        }
        8 => {
            m.machine_name.push_str(s);
            "machine_name"
        }
        9 => {
            m.bootstrap_data.push_str(s);
            "bootstrap_data"
        }
        10 => {
            m.bootstrap_format.push_str(s);
            "bootstrap_format"
        }
        11 => {
            toggle(&mut m.failure_domain, s);
            "failure_domain"
        }
        12 => {
            toggle(&mut m.kubernetes_version, s);
            "kubernetes_version"
        }
        _ => {
            m.control_plane ^= true;
            "control_plane"
        }
    }
}

fn mutate_pool(p: &mut MachinePoolInputs, which: usize, s: &str, n: i32) -> &'static str {
    match which % 18 {
        0..=6 => mutate_common(&mut p.common, which, s),
        7 => {
            p.captf_cluster_outputs[format!("k{s}")] = json!(1);
            "captf_cluster_outputs"
        }
        8 => {
            p.machinepool_name.push_str(s);
            "machinepool_name"
        }
        9 => {
            p.autoscaling.enabled = false;
            p.replicas += n;
            "replicas (autoscaling off)"
        }
        10 => {
            p.bootstrap_data.push_str(s);
            "bootstrap_data"
        }
        11 => {
            p.bootstrap_format.push_str(s);
            "bootstrap_format"
        }
        12 => {
            p.failure_domains.push(s.into());
            "failure_domains"
        }
        13 => {
            p.cluster_failure_domains.push(s.into());
            "cluster_failure_domains"
        }
        14 => {
            toggle(&mut p.kubernetes_version, s);
            "kubernetes_version"
        }
        15 => {
            p.node_labels.insert(format!("k-{s}"), s.into());
            "node_labels"
        }
        16 => {
            p.autoscaling.max += n;
            "autoscaling.max"
        }
        _ => {
            p.autoscaling.enabled ^= true;
            "autoscaling.enabled"
        }
    }
}

fn base_inputs(kind: usize) -> RoleInputs {
    match kind % 6 {
        0 => common::cluster_full().into(),
        1 => common::cluster_minimal().into(),
        2 => common::machine_full().into(),
        3 => common::machine_minimal().into(),
        4 => common::pool_full().into(),
        _ => common::pool_minimal().into(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn rendering_is_independent_of_insertion_order(
        base in 0usize..6,
        exports in prop::collection::btree_map("[a-z]{1,4}", tree(), 0..4),
        vars in variables(),
    ) {
        let exports: Vec<(String, Tree)> = exports.into_iter().collect();
        let make = |reversed: bool| {
            let mut inputs = base_inputs(base);
            let e = build(&Tree::Object(exports.clone()), reversed);
            match &mut inputs {
                RoleInputs::Machine(m) => m.captf_cluster_outputs = e,
                RoleInputs::MachinePool(p) => p.captf_cluster_outputs = e,
                RoleInputs::Cluster(_) => {}
            }
            let role = inputs.role();
            render(role, "img:1", &inputs, &build_vars(&vars, reversed)).expect("render")
        };
        let (a, b) = (make(false), make(true));
        prop_assert_eq!(&a.main_tf_json, &b.main_tf_json);
        prop_assert_eq!(&a.tfvars_json, &b.tfvars_json);
        prop_assert_eq!(&a.inputs_hash, &b.inputs_hash);
        // Rendering twice is stable too.
        prop_assert_eq!(&a, &make(false));
    }

    #[test]
    fn any_hashed_input_change_changes_the_hash(
        which in 0usize..18,
        s in "[a-z0-9]{1,6}",
        n in 1i32..100,
        role in 0usize..3,
        full in any::<bool>(),
    ) {
        let none = Variables::new();
        let image = "img:1";
        let (before, after, field) = match role {
            0 => {
                let c = if full { common::cluster_full() } else { common::cluster_minimal() };
                let mut m = c.clone();
                let f = mutate_cluster(&mut m, which, &s, n);
                (RoleInputs::from(c), RoleInputs::from(m), f)
            }
            1 => {
                let c = if full { common::machine_full() } else { common::machine_minimal() };
                let mut m = c.clone();
                let f = mutate_machine(&mut m, which, &s);
                (RoleInputs::from(c), RoleInputs::from(m), f)
            }
            _ => {
                let c = if full { common::pool_full() } else { common::pool_minimal() };
                let mut m = c.clone();
                let f = mutate_pool(&mut m, which, &s, n);
                (RoleInputs::from(c), RoleInputs::from(m), f)
            }
        };
        prop_assert_ne!(
            inputs_hash(&before, image, &none).expect("hash"),
            inputs_hash(&after, image, &none).expect("hash"),
            "changing {} did not change the hash", field
        );
    }

    #[test]
    fn image_and_variables_are_hashed(
        base in 0usize..6,
        vars in variables(),
        suffix in "[a-z0-9@:.]{1,6}",
        pick in any::<prop::sample::Index>(),
        leaf in json_leaf(),
    ) {
        let inputs = base_inputs(base);
        let vars = build_vars(&vars, false);
        let h = |img: &str, v: &Variables| inputs_hash(&inputs, img, v).expect("hash");
        let orig = h("img:1", &vars);
        prop_assert_ne!(&orig, &h(&format!("img:1{suffix}"), &vars), "image");

        let mut added = vars.clone();
        added.insert("zz_new".into(), Variable { value: leaf.clone(), sensitive: false });
        prop_assert_ne!(&orig, &h("img:1", &added), "added variable");

        if !vars.is_empty() {
            let name = vars.keys().nth(pick.index(vars.len())).expect("index in range").clone();

            let mut flipped = vars.clone();
            if let Some(v) = flipped.get_mut(&name) { v.sensitive ^= true; }
            prop_assert_ne!(&orig, &h("img:1", &flipped), "sensitivity of {}", name);

            let mut changed = vars.clone();
            if let Some(v) = changed.get_mut(&name) {
                v.value = json!({"wrapped": v.value.clone()});
            }
            prop_assert_ne!(&orig, &h("img:1", &changed), "value of {}", name);

            let mut removed = vars.clone();
            removed.remove(&name);
            prop_assert_ne!(&orig, &h("img:1", &removed), "removed {}", name);
        } else {
            // Objects without variables keep the hash they had before variables existed.
            let mut buf = Vec::new();
            for (label, data) in [
                ("scheme", b"h2".to_vec()),
                ("contract", b"v1alpha1".to_vec()),
                ("role", inputs.role().as_str().as_bytes().to_vec()),
                ("image", b"img:1".to_vec()),
                ("inputs", captf_contract::canonical_json(&inputs.hash_view().to_value().expect("encode"))),
            ] {
                buf.extend_from_slice(format!("{label}:{}:", data.len()).as_bytes());
                buf.extend_from_slice(&data);
                buf.push(b'\n');
            }
            prop_assert_eq!(orig, format!("h2:{}", hex::encode(Sha256::digest(&buf))));
        }
    }

    #[test]
    fn pool_replicas_are_not_hashed_while_autoscaling(
        replicas in 0i32..10_000,
        other in 0i32..10_000,
        full in any::<bool>(),
    ) {
        let mut p = if full { common::pool_full() } else { common::pool_minimal() };
        p.autoscaling = captf_contract::Autoscaling { enabled: true, min: 0, max: 10_000 };
        let a = MachinePoolInputs { replicas, ..p.clone() };
        let b = MachinePoolInputs { replicas: other, ..p };
        prop_assert_eq!(
            inputs_hash(&a.into(), "img", &Variables::new()).expect("hash"),
            inputs_hash(&b.into(), "img", &Variables::new()).expect("hash")
        );
    }
}
