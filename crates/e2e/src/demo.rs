//! The demo's Cluster (`hack/demo/cluster.yaml`) in any namespace: the end-to-end tests move
//! and restore the objects a newcomer sees in the demo, not a variant of their own.

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

use crate::workspace;

/// The demo's objects: a Cluster with a MachineDeployment of two machines and a MachinePool.
pub const MANIFEST: &str = "hack/demo/cluster.yaml";
/// The Cluster's name, which its TerraformCluster and stand-in control plane share.
pub const CLUSTER: &str = "demo";
/// The MachinePool's name, which its TerraformMachinePool shares.
pub const POOL: &str = "demo-pool";
/// How many machines the MachineDeployment and the MachinePool each ask for.
pub const REPLICAS: usize = 2;

/// The demo's Cluster API and CAPTF objects in namespace `ns`, on the TerraformClusterIdentity
/// `identity` (allowed in `ns`); the demo's own identity and its credentials are left out.
pub fn cluster_in(ns: &str, identity: &str) -> anyhow::Result<Vec<Value>> {
    let path = workspace().join(MANIFEST);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let mut objects = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let mut object = Value::deserialize(doc)?;
        // The identity (cluster-wide) and its credentials (in captf-system) stay the demo's.
        if object["metadata"]["namespace"] != "default" {
            continue;
        }
        object["metadata"]["namespace"] = ns.into();
        if object["kind"] == "TerraformCluster" {
            object["spec"]["identityRef"]["name"] = identity.into();
        }
        objects.push(object);
    }
    Ok(objects)
}

/// Objects as one YAML stream (JSON documents are YAML), for `apply_yaml`.
pub fn yaml(objects: &[Value]) -> String {
    objects
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n---\n")
}
