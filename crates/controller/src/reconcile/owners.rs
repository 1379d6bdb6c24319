//! Re-owning the object's Secrets (state, durable inputs, plan key, backups) after they were
//! restored without owner references (a namespace backup, `clusterctl move`): without them the
//! garbage collector would never remove them, and with an old object's UID it would remove them
//! at once.

use captf_api::names::ObjectKey;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;

use crate::cache::{Caches, SecretMeta};
use crate::error::{KubeContext, Result};

/// Whether `refs` lack a reference to `owner` (by UID) (pure).
pub fn needs_owner(refs: Option<&[OwnerReference]>, owner: &OwnerReference) -> bool {
    !refs.unwrap_or_default().iter().any(|r| r.uid == owner.uid)
}

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
        .filter(|name| {
            let reference = ObjectRef::<SecretMeta>::new(name).within(namespace);
            caches
                .secrets
                .get(&reference)
                .is_some_and(|s| needs_owner(s.metadata.owner_references.as_deref(), owner))
        })
        .cloned()
        .collect()
}

/// Sets `owner` as the only owner of each Secret (they are the object's own, so any other
/// reference is stale).
pub async fn repair(
    client: &kube::Client,
    key: &ObjectKey,
    names: &[String],
    owner: &OwnerReference,
) -> Result<()> {
    let ns = key.namespace();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({"metadata": {"ownerReferences": [owner]}});
    for name in names {
        secrets
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .during(|| format!("re-owning Secret {ns}/{name}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "infrastructure.cluster.x-k8s.io/v1alpha1".into(),
            kind: "TerraformCluster".into(),
            name: "demo".into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    #[test]
    fn needs_owner_table() {
        let owner = reference("new");
        let rows: Vec<(&str, Option<Vec<OwnerReference>>, bool)> = vec![
            ("no references", None, true),
            ("empty list", Some(vec![]), true),
            (
                "an earlier object's UID",
                Some(vec![reference("old")]),
                true,
            ),
            ("owned", Some(vec![reference("new")]), false),
            (
                "owned among others",
                Some(vec![reference("old"), reference("new")]),
                false,
            ),
        ];
        for (name, refs, want) in rows {
            assert_eq!(needs_owner(refs.as_deref(), &owner), want, "{name}");
        }
    }
}
