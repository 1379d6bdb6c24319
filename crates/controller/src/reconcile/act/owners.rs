//! Re-owning the object's Secrets (state, durable inputs, plan key, backups) after they were
//! restored without owner references (a namespace backup, `clusterctl move`): without them the
//! garbage collector would never remove them, and with an old object's UID it would remove them
//! at once.

use captf_api::names::ObjectKey;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};

use crate::cache::Caches;
use crate::error::KubeContext;

/// The Secrets among `names` (in the cache; a missing one is not ours to create) that do not
/// reference `owner`: an API call only when something is to be repaired.
pub fn to_repair(
    caches: &Caches,
    namespace: &str,
    names: &[String],
    owner: &OwnerReference,
) -> Vec<String> {
    names
        .iter()
        .filter(|name| caches.secrets.owned_by(namespace, name, &owner.uid) == Some(false))
        .cloned()
        .collect()
}

/// Sets `owner` as the only owner of each Secret (they are the object's own, so any other
/// reference is stale). Returns those re-owned. A Secret that cannot be re-owned is logged and
/// left for the next pass, which finds it unowned again: a failed repair never fails the pass
/// (seed 002), since the object works without it.
pub async fn repair(
    client: &kube::Client,
    key: &ObjectKey,
    names: &[String],
    owner: &OwnerReference,
) -> Vec<String> {
    let ns = key.namespace();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({"metadata": {"ownerReferences": [owner]}});
    let mut repaired = Vec::new();
    for name in names {
        match secrets
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .during(|| format!("re-owning Secret {ns}/{name}"))
        {
            Ok(_) => repaired.push(name.clone()),
            Err(error) => tracing::warn!(
                namespace = ns,
                name = key.name(),
                kind = key.kind().kind(),
                secret = %name,
                %error,
                "owner reference not repaired; the next pass tries again"
            ),
        }
    }
    repaired
}
