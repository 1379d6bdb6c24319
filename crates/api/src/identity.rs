//! TerraformClusterIdentity: cluster-scoped credentials and who may use them.

use crate::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::common::SecretReference;
use crate::schema;

/// A credentials Secret and the namespaces allowed to use it.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "TerraformClusterIdentity",
    plural = "terraformclusteridentities",
    shortname = "tfci",
    status = "TerraformClusterIdentityStatus",
    category = "cluster-api",
    derive = "PartialEq",
    derive = "Default",
    label("cluster.x-k8s.io/v1beta2", "v1alpha1"),
    label("clusterctl.cluster.x-k8s.io/move-hierarchy", "true"),
    printcolumn(name = "Secret", type_ = "string", json_path = ".spec.secretRef.name"),
    printcolumn(
        name = "Namespace",
        type_ = "string",
        json_path = ".spec.secretRef.namespace"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TerraformClusterIdentitySpec {
    /// The credentials Secret, mirrored as `captf-creds-<identity>` into each namespace that
    /// uses it.
    pub secret_ref: SecretReference,
    /// Who may reference the identity; unset allows no namespace, `selector: {}` allows all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_namespaces: Option<AllowedNamespaces>,
}

/// Namespaces allowed to use an identity: the list and the selector are ORed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("has(self.list) || has(self.selector)").message("allowedNamespaces needs a list or a selector; use selector: {} to allow every namespace"))]
pub struct AllowedNamespaces {
    /// Namespace names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::string_set::<1, 100, 63>")]
    pub list: Option<Vec<String>>,
    /// Namespace label selector; `{}` matches every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// Observed state of an identity.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[schemars(extend("minProperties" = 1))]
pub struct TerraformClusterIdentityStatus {
    /// `Ready`: the Secret exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Option<Vec<Condition>>,
    /// Namespaces where a mirror exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::string_set::<0, 1000, 63>")]
    pub namespaces: Option<Vec<String>>,
}
