//! Fixtures shared by the integration tests: the golden inputs of api.md §2.6.
#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;

use captf_contract::{
    Autoscaling, ClusterInputs, ClusterNetwork, CommonInputs, Endpoint, MachineInputs,
    MachinePoolInputs, Role, RoleInputs, Variable, Variables,
};
use serde_json::{Value, json};

pub fn common(role: Role) -> CommonInputs {
    CommonInputs::new(
        "prod",
        "team-a",
        role,
        "prod-md-0-abcde",
        "team-a",
        "prod-md-0",
    )
}

pub fn image(role: Role) -> String {
    format!("ghcr.io/captf-io/noop-{role}:v0.1.0")
}

pub fn exports() -> Value {
    json!({"network_id": "net-1", "subnets": ["a", "b"]})
}

pub fn cluster_full() -> ClusterInputs {
    ClusterInputs {
        common: common(Role::Cluster),
        control_plane_endpoint: Some(Endpoint {
            host: "api.prod.example.com".into(),
            port: 6443,
        }),
        kubernetes_version: Some("v1.36.2".into()),
        control_plane_initialized: true,
        cluster_network: ClusterNetwork::from_fields(
            Some(vec!["192.168.0.0/16".into()]),
            Some(vec!["10.96.0.0/12".into()]),
            Some("cluster.local".into()),
            Some(6443),
        ),
    }
}

pub fn cluster_minimal() -> ClusterInputs {
    ClusterInputs {
        common: common(Role::Cluster),
        control_plane_endpoint: None,
        kubernetes_version: None,
        control_plane_initialized: false,
        cluster_network: Some(ClusterNetwork {
            pods: vec![],
            services: vec![],
            service_domain: None,
            api_server_port: None,
        }),
    }
}

pub fn machine_full() -> MachineInputs {
    MachineInputs {
        common: CommonInputs::new(
            "prod",
            "team-a",
            Role::Machine,
            "prod-md-0-abcde",
            "team-a",
            "prod-md-0",
        ),
        captf_cluster_outputs: exports(),
        machine_name: "prod-md-0-abcde-xyz12".into(),
        bootstrap_data: "I2Nsb3VkLWNvbmZpZw==".into(),
        bootstrap_format: "cloud-config".into(),
        failure_domain: Some("zone-a".into()),
        kubernetes_version: Some("v1.36.2+rke2r1".into()),
        control_plane: true,
    }
}

pub fn machine_minimal() -> MachineInputs {
    MachineInputs {
        captf_cluster_outputs: json!({}),
        bootstrap_data: "e30=".into(),
        bootstrap_format: "ignition".into(),
        failure_domain: None,
        kubernetes_version: None,
        control_plane: false,
        ..machine_full()
    }
}

pub fn pool_full() -> MachinePoolInputs {
    MachinePoolInputs {
        common: common(Role::MachinePool),
        captf_cluster_outputs: exports(),
        machinepool_name: "prod-mp-0".into(),
        replicas: 3,
        bootstrap_data: "I2Nsb3VkLWNvbmZpZw==".into(),
        bootstrap_format: "cloud-config".into(),
        failure_domains: vec!["zone-a".into()],
        cluster_failure_domains: vec!["zone-a".into(), "zone-b".into()],
        kubernetes_version: Some("v1.36.2+rke2r1".into()),
        node_labels: BTreeMap::from([("pool".to_owned(), "prod-mp-0".to_owned())]),
        autoscaling: Autoscaling {
            enabled: true,
            min: 1,
            max: 5,
        },
    }
}

pub fn pool_minimal() -> MachinePoolInputs {
    MachinePoolInputs {
        captf_cluster_outputs: json!({}),
        replicas: 0,
        bootstrap_data: "e30=".into(),
        bootstrap_format: "ignition".into(),
        failure_domains: vec![],
        cluster_failure_domains: vec![],
        kubernetes_version: None,
        node_labels: BTreeMap::new(),
        autoscaling: Autoscaling::default(),
        ..pool_full()
    }
}

/// The user variables of the `machine-variables` golden (api.md §2.3).
pub fn machine_variables() -> Variables {
    let plain = |value: Value| Variable {
        value,
        sensitive: false,
    };
    Variables::from([
        (
            "db_password".to_owned(),
            Variable {
                value: json!("s3cr3t-db-password"),
                sensitive: true,
            },
        ),
        ("disk_gib".to_owned(), plain(json!(40))),
        ("instance_type".to_owned(), plain(json!("t3.large"))),
        ("ratio".to_owned(), plain(json!(0.5))),
        (
            "subnet_ids".to_owned(),
            plain(json!(["subnet-a", "subnet-b"])),
        ),
    ])
}

/// Every golden case: directory name, role, inputs, variables.
pub fn golden_cases() -> Vec<(&'static str, Role, RoleInputs, Variables)> {
    vec![
        (
            "cluster-minimal",
            Role::Cluster,
            cluster_minimal().into(),
            Variables::new(),
        ),
        (
            "cluster-full",
            Role::Cluster,
            cluster_full().into(),
            Variables::new(),
        ),
        (
            "machine-minimal",
            Role::Machine,
            machine_minimal().into(),
            Variables::new(),
        ),
        (
            "machine-full",
            Role::Machine,
            machine_full().into(),
            Variables::new(),
        ),
        (
            "machine-variables",
            Role::Machine,
            machine_full().into(),
            machine_variables(),
        ),
        (
            "machinepool-minimal",
            Role::MachinePool,
            pool_minimal().into(),
            Variables::new(),
        ),
        (
            "machinepool-full",
            Role::MachinePool,
            pool_full().into(),
            Variables::new(),
        ),
    ]
}
