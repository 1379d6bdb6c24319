//! The CustomResourceDefinitions, generated from the Rust types. `captf crds` prints them and
//! `config/crd/bases/` holds a copy that a test keeps in step.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{
    TerraformCluster, TerraformClusterIdentity, TerraformClusterTemplate, TerraformMachine,
    TerraformMachinePool, TerraformMachinePoolTemplate, TerraformMachineTemplate,
};

/// Every CRD of the API group, in a stable order.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        TerraformCluster::crd(),
        TerraformClusterTemplate::crd(),
        TerraformMachine::crd(),
        TerraformMachineTemplate::crd(),
        TerraformMachinePool::crd(),
        TerraformMachinePoolTemplate::crd(),
        TerraformClusterIdentity::crd(),
    ]
}

/// The file name of a CRD under `config/crd/bases/` (`<group>_<plural>.yaml`, as kubebuilder
/// names them).
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// One CRD as YAML.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(crd)
}

/// Every CRD as one multi-document YAML stream.
pub fn all_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in all() {
        out.push_str("---\n");
        out.push_str(&to_yaml(&crd)?);
    }
    Ok(out)
}
