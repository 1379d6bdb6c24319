//! What the generated root declares per contract input (api.md §2.2.6).

use crate::role::Role;

/// One contract input as declared by the generated root module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputSpec {
    /// tfvars key and variable name.
    pub name: &'static str,
    /// Terraform type expression declared in the root.
    pub type_expr: &'static str,
    /// The root declares `"default": null`.
    pub nullable: bool,
    /// The root declares `"sensitive": true`.
    pub sensitive: bool,
}

const fn spec(name: &'static str, type_expr: &'static str) -> InputSpec {
    InputSpec {
        name,
        type_expr,
        nullable: false,
        sensitive: false,
    }
}

const fn nullable(name: &'static str, type_expr: &'static str) -> InputSpec {
    InputSpec {
        nullable: true,
        ..spec(name, type_expr)
    }
}

const fn sensitive(name: &'static str, type_expr: &'static str) -> InputSpec {
    InputSpec {
        sensitive: true,
        ..spec(name, type_expr)
    }
}

const CONTRACT: InputSpec = spec("captf_contract", "string");
const CLUSTER: InputSpec = spec("captf_cluster", "any");
const OBJECT: InputSpec = spec("captf_object", "any");
const TAGS: InputSpec = spec("captf_tags", "map(string)");
const CLUSTER_OUTPUTS: InputSpec = spec("captf_cluster_outputs", "any");
const BOOTSTRAP_DATA: InputSpec = sensitive("bootstrap_data", "string");
const BOOTSTRAP_FORMAT: InputSpec = spec("bootstrap_format", "string");
const KUBERNETES_VERSION: InputSpec = nullable("kubernetes_version", "string");

static CLUSTER_SPECS: [InputSpec; 8] = [
    CONTRACT,
    CLUSTER,
    OBJECT,
    TAGS,
    nullable(
        "control_plane_endpoint",
        "object({host=string, port=number})",
    ),
    KUBERNETES_VERSION,
    spec("control_plane_initialized", "bool"),
    nullable(
        "cluster_network",
        "object({pods=list(string), services=list(string), service_domain=string, api_server_port=number})",
    ),
];

static MACHINE_SPECS: [InputSpec; 11] = [
    CONTRACT,
    CLUSTER,
    OBJECT,
    TAGS,
    CLUSTER_OUTPUTS,
    spec("machine_name", "string"),
    BOOTSTRAP_DATA,
    BOOTSTRAP_FORMAT,
    nullable("failure_domain", "string"),
    KUBERNETES_VERSION,
    spec("control_plane", "bool"),
];

static MACHINE_POOL_SPECS: [InputSpec; 14] = [
    CONTRACT,
    CLUSTER,
    OBJECT,
    TAGS,
    CLUSTER_OUTPUTS,
    spec("machinepool_name", "string"),
    spec("replicas", "number"),
    BOOTSTRAP_DATA,
    BOOTSTRAP_FORMAT,
    spec("failure_domains", "list(string)"),
    spec("cluster_failure_domains", "list(string)"),
    KUBERNETES_VERSION,
    spec("node_labels", "map(string)"),
    spec(
        "autoscaling",
        "object({enabled=bool, min=number, max=number})",
    ),
];

/// The contract inputs of `role`, common ones first, in documented order.
pub fn input_specs(role: Role) -> &'static [InputSpec] {
    match role {
        Role::Cluster => &CLUSTER_SPECS,
        Role::Machine => &MACHINE_SPECS,
        Role::MachinePool => &MACHINE_POOL_SPECS,
    }
}

/// The contract input names of `role`, in documented order.
pub fn input_names(role: Role) -> Vec<&'static str> {
    input_specs(role).iter().map(|s| s.name).collect()
}
