//! Golden files per role (api.md §2.3, §2.6). `UPDATE_GOLDEN=1` rewrites them.

mod common;

use std::path::{Path, PathBuf};

use captf_contract::{
    Role, RoleInputs, input_specs, render, render_restore_root, required_outputs,
};
use serde_json::{Value, json};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn check(path: &Path, actual: &[u8]) {
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("golden file has a parent"))
            .expect("create golden dir");
        std::fs::write(path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read(path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    if expected != actual {
        panic!(
            "{} differs from the rendered bytes (run with UPDATE_GOLDEN=1 to accept)\n--- expected\n{}\n--- actual\n{}",
            path.display(),
            String::from_utf8_lossy(&expected),
            String::from_utf8_lossy(actual)
        );
    }
}

#[test]
fn golden_files_match_byte_for_byte() {
    for (name, role, inputs, vars) in common::golden_cases() {
        let rendered = render(role, &common::image(role), &inputs, &vars).expect(name);
        let dir = golden_dir().join(name);
        check(&dir.join("main.tf.json"), &rendered.main_tf_json);
        check(&dir.join("terraform.tfvars.json"), &rendered.tfvars_json);
        check(
            &dir.join("inputs-hash.txt"),
            format!("{}\n", rendered.inputs_hash).as_bytes(),
        );
    }
    check(
        &golden_dir().join("restore/main.tf.json"),
        &render_restore_root(),
    );
}

fn tags(kind: &str) -> Value {
    json!({
        "captf.io/cluster": "prod",
        "captf.io/kind": kind,
        "captf.io/managed-by": "captf",
        "captf.io/name": "prod-md-0-abcde",
        "captf.io/namespace": "team-a",
        "captf.io/template": "prod-md-0"
    })
}

fn common_keys(kind: &str) -> Value {
    json!({
        "captf_contract": "v1alpha1",
        "captf_cluster": {"name": "prod", "namespace": "team-a"},
        "captf_object": {"kind": kind, "name": "prod-md-0-abcde", "namespace": "team-a"},
        "captf_tags": tags(kind),
    })
}

fn with_common(kind: &str, role_keys: Value) -> Value {
    let mut v = common_keys(kind);
    let (Value::Object(m), Value::Object(extra)) = (&mut v, role_keys) else {
        panic!("objects expected");
    };
    m.extend(extra);
    v
}

/// The tfvars shapes transcribed from api.md §2.6, independent of the golden files.
fn spec_tfvars(case: &str) -> Value {
    match case {
        "cluster-full" => with_common(
            "TerraformCluster",
            json!({
                "control_plane_endpoint": {"host": "api.prod.example.com", "port": 6443},
                "kubernetes_version": "v1.36.2",
                "control_plane_initialized": true,
                "cluster_network": {
                    "pods": ["192.168.0.0/16"], "services": ["10.96.0.0/12"],
                    "service_domain": "cluster.local", "api_server_port": 6443
                }
            }),
        ),
        "cluster-minimal" => with_common(
            "TerraformCluster",
            json!({
                "control_plane_endpoint": null,
                "kubernetes_version": null,
                "control_plane_initialized": false,
                "cluster_network": {"pods": [], "services": [], "service_domain": null, "api_server_port": null}
            }),
        ),
        "machine-full" => with_common(
            "TerraformMachine",
            json!({
                "captf_cluster_outputs": {"network_id": "net-1", "subnets": ["a", "b"]},
                "machine_name": "prod-md-0-abcde-xyz12",
                "bootstrap_data": "I2Nsb3VkLWNvbmZpZw==",
                "bootstrap_format": "cloud-config",
                "failure_domain": "zone-a",
                "kubernetes_version": "v1.36.2+rke2r1",
                "control_plane": true
            }),
        ),
        "machine-minimal" => with_common(
            "TerraformMachine",
            json!({
                "captf_cluster_outputs": {},
                "machine_name": "prod-md-0-abcde-xyz12",
                "bootstrap_data": "e30=",
                "bootstrap_format": "ignition",
                "failure_domain": null,
                "kubernetes_version": null,
                "control_plane": false
            }),
        ),
        "machine-variables" => {
            let mut v = spec_tfvars("machine-full");
            let Value::Object(m) = &mut v else {
                panic!("object")
            };
            m.extend([
                ("db_password".to_owned(), json!("s3cr3t-db-password")),
                ("disk_gib".to_owned(), json!(40)),
                ("instance_type".to_owned(), json!("t3.large")),
                ("ratio".to_owned(), json!(0.5)),
                ("subnet_ids".to_owned(), json!(["subnet-a", "subnet-b"])),
            ]);
            v
        }
        "machinepool-full" => with_common(
            "TerraformMachinePool",
            json!({
                "captf_cluster_outputs": {"network_id": "net-1", "subnets": ["a", "b"]},
                "machinepool_name": "prod-mp-0",
                "replicas": 3,
                "bootstrap_data": "I2Nsb3VkLWNvbmZpZw==",
                "bootstrap_format": "cloud-config",
                "failure_domains": ["zone-a"],
                "cluster_failure_domains": ["zone-a", "zone-b"],
                "kubernetes_version": "v1.36.2+rke2r1",
                "node_labels": {"pool": "prod-mp-0"},
                "autoscaling": {"enabled": true, "min": 1, "max": 5}
            }),
        ),
        "machinepool-minimal" => with_common(
            "TerraformMachinePool",
            json!({
                "captf_cluster_outputs": {},
                "machinepool_name": "prod-mp-0",
                "replicas": 0,
                "bootstrap_data": "e30=",
                "bootstrap_format": "ignition",
                "failure_domains": [],
                "cluster_failure_domains": [],
                "kubernetes_version": null,
                "node_labels": {},
                "autoscaling": {"enabled": false, "min": 0, "max": 0}
            }),
        ),
        other => panic!("no spec shape for {other}"),
    }
}

#[test]
fn tfvars_match_the_spec_examples() {
    for (name, role, inputs, vars) in common::golden_cases() {
        let rendered = render(role, &common::image(role), &inputs, &vars).expect(name);
        let tfvars: Value = serde_json::from_slice(&rendered.tfvars_json).expect("tfvars is JSON");
        assert_eq!(tfvars, spec_tfvars(name), "{name}");
    }
}

/// The root's shape, derived from the spec tables rather than from the renderer.
#[test]
fn main_tf_json_has_the_documented_shape() {
    for (name, role, inputs, vars) in common::golden_cases() {
        let rendered = render(role, &common::image(role), &inputs, &vars).expect(name);
        let root: Value = serde_json::from_slice(&rendered.main_tf_json).expect("root is JSON");
        assert_eq!(
            root["terraform"],
            json!({"backend": {"kubernetes": {}}}),
            "{name}"
        );

        let mut expected_vars = serde_json::Map::new();
        let mut expected_module = serde_json::Map::new();
        expected_module.insert("source".into(), json!("../../module"));
        for spec in input_specs(role) {
            let mut decl = json!({"type": spec.type_expr});
            if spec.nullable {
                decl["default"] = Value::Null;
            }
            if spec.sensitive {
                decl["sensitive"] = json!(true);
            }
            expected_vars.insert(spec.name.into(), decl);
            expected_module.insert(spec.name.into(), json!(format!("${{var.{}}}", spec.name)));
        }
        for (var, v) in &vars {
            let decl = if v.sensitive {
                json!({"sensitive": true})
            } else {
                json!({})
            };
            expected_vars.insert(var.clone(), decl);
            expected_module.insert(var.clone(), json!(format!("${{var.{var}}}")));
        }
        assert_eq!(root["variable"], Value::Object(expected_vars), "{name}");
        assert_eq!(root["module"], json!({"role": expected_module}), "{name}");

        let outputs: serde_json::Map<String, Value> = required_outputs(role)
            .iter()
            .map(|o| {
                (
                    (*o).to_owned(),
                    json!({"value": format!("${{module.role.{o}}}"), "sensitive": true}),
                )
            })
            .collect();
        assert_eq!(root["output"], Value::Object(outputs), "{name}");
        assert_eq!(
            root.as_object().map(|m| m.len()),
            Some(4),
            "{name}: only 4 blocks"
        );
    }
}

#[test]
fn documented_key_sets_per_role() {
    let names = |role: Role| -> Vec<&str> {
        let mut v: Vec<&str> = input_specs(role).iter().map(|s| s.name).collect();
        v.sort_unstable();
        v
    };
    assert_eq!(
        names(Role::Cluster),
        [
            "captf_cluster",
            "captf_contract",
            "captf_object",
            "captf_tags",
            "cluster_network",
            "control_plane_endpoint",
            "control_plane_initialized",
            "kubernetes_version"
        ]
    );
    assert_eq!(
        names(Role::Machine),
        [
            "bootstrap_data",
            "bootstrap_format",
            "captf_cluster",
            "captf_cluster_outputs",
            "captf_contract",
            "captf_object",
            "captf_tags",
            "control_plane",
            "failure_domain",
            "kubernetes_version",
            "machine_name"
        ]
    );
    assert_eq!(
        required_outputs(Role::Cluster),
        [
            "control_plane_endpoint",
            "failure_domains",
            "exports",
            "health"
        ]
    );
    assert_eq!(
        required_outputs(Role::Machine),
        [
            "provider_id",
            "addresses",
            "failure_domain",
            "interruptible",
            "health"
        ]
    );
    assert_eq!(
        required_outputs(Role::MachinePool),
        [
            "provider_id",
            "provider_id_list",
            "replicas",
            "instances",
            "health"
        ]
    );
}

#[test]
fn durable_tfvars_read_back_into_typed_inputs() {
    for (name, role, inputs, _) in common::golden_cases() {
        let rendered =
            render(role, &common::image(role), &inputs, &Default::default()).expect(name);
        let back: RoleInputs = match role {
            Role::Cluster => RoleInputs::Cluster(
                serde_json::from_slice(&rendered.tfvars_json).expect("cluster tfvars"),
            ),
            Role::Machine => RoleInputs::Machine(
                serde_json::from_slice(&rendered.tfvars_json).expect("machine tfvars"),
            ),
            Role::MachinePool => RoleInputs::MachinePool(
                serde_json::from_slice(&rendered.tfvars_json).expect("pool tfvars"),
            ),
        };
        assert_eq!(back, inputs, "{name}");
    }
}
