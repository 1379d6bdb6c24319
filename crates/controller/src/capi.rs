//! The few Cluster API (v1beta2) fields CAPTF reads, typed. CAPI objects are fetched as
//! untyped objects and decoded into these views, so CAPTF depends on no CAPI Rust bindings.

use serde::Deserialize;

/// `cluster.x-k8s.io`.
pub const GROUP: &str = "cluster.x-k8s.io";
/// The CAPI contract version CAPTF implements.
pub const VERSION: &str = "v1beta2";

/// A reference in CAPI v1beta2 form (`apiGroup`, `kind`, `name`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ContractReference {
    #[serde(default)]
    pub api_group: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

/// `Cluster`, as far as CAPTF reads it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Cluster {
    pub metadata: kube::api::ObjectMeta,
    #[serde(default)]
    pub spec: ClusterSpec,
    #[serde(default)]
    pub status: ClusterStatus,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    #[serde(default)]
    pub paused: Option<bool>,
    #[serde(default)]
    pub infrastructure_ref: Option<ContractReference>,
    #[serde(default)]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    #[serde(default)]
    pub topology: Option<Topology>,
    #[serde(default)]
    pub cluster_network: Option<ClusterNetwork>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct ApiEndpoint {
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub port: i32,
}

impl ApiEndpoint {
    /// CAPI treats an endpoint as set once host and port are both non-zero.
    pub fn is_valid(&self) -> bool {
        !self.host.is_empty() && self.port > 0
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct Topology {
    #[serde(default)]
    pub version: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetwork {
    #[serde(default)]
    pub pods: Option<NetworkRanges>,
    #[serde(default)]
    pub services: Option<NetworkRanges>,
    #[serde(default)]
    pub service_domain: Option<String>,
    #[serde(default)]
    pub api_server_port: Option<i32>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRanges {
    #[serde(default)]
    pub cidr_blocks: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ClusterStatus {
    #[serde(default)]
    pub initialization: Option<ClusterInitialization>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInitialization {
    #[serde(default)]
    pub control_plane_initialized: Option<bool>,
    #[serde(default)]
    pub infrastructure_provisioned: Option<bool>,
}

impl Cluster {
    /// Paused through `spec.paused`.
    pub fn paused(&self) -> bool {
        self.spec.paused.unwrap_or(false)
    }

    /// `status.initialization.controlPlaneInitialized`, false when unset.
    pub fn control_plane_initialized(&self) -> bool {
        self.status
            .initialization
            .as_ref()
            .and_then(|i| i.control_plane_initialized)
            .unwrap_or(false)
    }
}

/// The `ApiResource` of CAPI `Cluster`, for untyped access.
pub fn cluster_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(GROUP, VERSION, "Cluster"),
        "clusters",
    )
}

/// The CAPTF object of kind `K` a CAPI object points at through `spec.infrastructureRef`
/// (a Cluster's TerraformCluster, a Machine's TerraformMachine) or
/// `spec.template.spec.infrastructureRef` (a MachinePool's TerraformMachinePool), for mapping the CAPI object's
/// events (pause, endpoint, bootstrap data) to the object to reconcile.
pub fn infrastructure_ref_of<K: kube::Resource<DynamicType = ()>>(
    object: &kube::api::DynamicObject,
) -> Option<kube::runtime::reflector::ObjectRef<K>> {
    // A MachinePool names its infrastructure in its template.
    let spec = object.data.get("spec")?;
    let reference = spec
        .get("infrastructureRef")
        .or_else(|| spec.get("template")?.get("spec")?.get("infrastructureRef"))?;
    let kind = reference.get("kind")?.as_str()?;
    let group = reference
        .get("apiGroup")
        .and_then(|g| g.as_str())
        .unwrap_or(captf_api::GROUP);
    if kind != K::kind(&()) || group != captf_api::GROUP {
        return None;
    }
    let name = reference.get("name")?.as_str()?;
    let namespace = object.metadata.namespace.as_deref()?;
    Some(kube::runtime::reflector::ObjectRef::new(name).within(namespace))
}

/// `Machine`, as far as CAPTF reads it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Machine {
    pub metadata: kube::api::ObjectMeta,
    #[serde(default)]
    pub spec: MachineSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    #[serde(default)]
    pub cluster_name: String,
    #[serde(default)]
    pub bootstrap: MachineBootstrap,
    #[serde(default)]
    pub infrastructure_ref: Option<ContractReference>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub failure_domain: Option<String>,
    #[serde(default, rename = "providerID")]
    pub provider_id: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineBootstrap {
    /// The Secret holding the bootstrap data, once the bootstrap provider wrote it.
    #[serde(default)]
    pub data_secret_name: Option<String>,
}

impl Machine {
    /// A control-plane Machine carries `cluster.x-k8s.io/control-plane`.
    pub fn control_plane(&self) -> bool {
        self.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(captf_api::labels::CONTROL_PLANE))
    }
}

/// The `ApiResource` of CAPI `Machine`, for untyped access.
pub fn machine_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(GROUP, VERSION, "Machine"),
        "machines",
    )
}

/// A CAPI object that owns an infrastructure object and names it back (§3.3).
pub trait Owner: serde::de::DeserializeOwned {
    const KIND: &'static str;
    fn resource() -> kube::core::ApiResource;
    fn meta(&self) -> &kube::api::ObjectMeta;
    /// The reference that must name the infrastructure object.
    fn infrastructure_ref(&self) -> Option<&ContractReference>;
    /// What the infrastructure object's `cluster.x-k8s.io/cluster-name` label must say.
    fn cluster_name(&self) -> Option<&str>;
}

impl Owner for Cluster {
    const KIND: &'static str = "Cluster";
    fn resource() -> kube::core::ApiResource {
        cluster_resource()
    }
    fn meta(&self) -> &kube::api::ObjectMeta {
        &self.metadata
    }
    fn infrastructure_ref(&self) -> Option<&ContractReference> {
        self.spec.infrastructure_ref.as_ref()
    }
    fn cluster_name(&self) -> Option<&str> {
        self.metadata.name.as_deref()
    }
}

impl Owner for Machine {
    const KIND: &'static str = "Machine";
    fn resource() -> kube::core::ApiResource {
        machine_resource()
    }
    fn meta(&self) -> &kube::api::ObjectMeta {
        &self.metadata
    }
    fn infrastructure_ref(&self) -> Option<&ContractReference> {
        self.spec.infrastructure_ref.as_ref()
    }
    fn cluster_name(&self) -> Option<&str> {
        Some(self.spec.cluster_name.as_str()).filter(|n| !n.is_empty())
    }
}

/// `MachinePool`, as far as CAPTF reads it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct MachinePool {
    pub metadata: kube::api::ObjectMeta,
    #[serde(default)]
    pub spec: MachinePoolSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolSpec {
    #[serde(default)]
    pub cluster_name: String,
    #[serde(default)]
    pub replicas: Option<i32>,
    #[serde(default)]
    pub failure_domains: Vec<String>,
    #[serde(default)]
    pub template: MachinePoolTemplate,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct MachinePoolTemplate {
    #[serde(default)]
    pub metadata: MachinePoolTemplateMeta,
    #[serde(default)]
    pub spec: MachineSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct MachinePoolTemplateMeta {
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
}

/// The `ApiResource` of CAPI `MachinePool`, for untyped access.
pub fn machine_pool_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(GROUP, VERSION, "MachinePool"),
        "machinepools",
    )
}

impl Owner for MachinePool {
    const KIND: &'static str = "MachinePool";
    fn resource() -> kube::core::ApiResource {
        machine_pool_resource()
    }
    fn meta(&self) -> &kube::api::ObjectMeta {
        &self.metadata
    }
    fn infrastructure_ref(&self) -> Option<&ContractReference> {
        self.spec.template.spec.infrastructure_ref.as_ref()
    }
    fn cluster_name(&self) -> Option<&str> {
        Some(self.spec.cluster_name.as_str()).filter(|n| !n.is_empty())
    }
}
