//! Identity resolution, the credential mirror `captf-creds-<identity>`, and the namespace's
//! runner ServiceAccount and RoleBinding.

use std::collections::BTreeMap;

use captf_api::conditions::{Status, reasons};
use captf_api::{TerraformClusterIdentity, annotations, labels, names};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams, PostParams};
use sha2::{Digest, Sha256};

use crate::error::{KubeContext, Result};

/// Name of the runner ServiceAccount, RoleBinding and ClusterRole.
pub const RUNNER: &str = "captf-runner";

/// How far credentials got, as condition values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub identity_allowed: (Status, &'static str, String),
    pub mirrored: (Status, &'static str, String),
    /// The identity name when everything is in place.
    pub ready: Option<String>,
}

impl Outcome {
    fn blocked(status: Status, reason: &'static str, message: String) -> Self {
        Outcome {
            identity_allowed: (status, reason, message),
            mirrored: (
                Status::Unknown,
                reasons::MIRROR_PENDING,
                "waiting for the identity check".into(),
            ),
            ready: None,
        }
    }
}

/// Resolves `identity` for an object in `namespace` and keeps its mirror current; `owner` is
/// added to the mirror's owner references so the mirror goes away with its last user.
pub async fn ensure(
    client: &kube::Client,
    namespace: &str,
    identity: Option<&str>,
    owner: &OwnerReference,
) -> Result<Outcome> {
    let Some(identity) = identity else {
        return Ok(Outcome::blocked(
            Status::False,
            reasons::IDENTITY_NOT_FOUND,
            "no identity: set spec.identityRef.name to a TerraformClusterIdentity".into(),
        ));
    };
    let identities: Api<TerraformClusterIdentity> = Api::all(client.clone());
    let Some(id) = identities
        .get_opt(identity)
        .await
        .during(|| format!("reading TerraformClusterIdentity {identity}"))?
    else {
        return Ok(Outcome::blocked(
            Status::False,
            reasons::IDENTITY_NOT_FOUND,
            format!(
                "TerraformClusterIdentity {identity} does not exist: create it or fix spec.identityRef.name"
            ),
        ));
    };
    let ns: Api<Namespace> = Api::all(client.clone());
    let ns_labels = ns
        .get_opt(namespace)
        .await
        .during(|| format!("reading Namespace {namespace}"))?
        .and_then(|n| n.metadata.labels)
        .unwrap_or_default();
    if !crate::identity::allows(&id, namespace, &ns_labels) {
        return Ok(Outcome::blocked(
            Status::False,
            reasons::NAMESPACE_NOT_ALLOWED,
            format!(
                "TerraformClusterIdentity {identity} does not allow namespace {namespace}: add it to spec.allowedNamespaces (list or selector)"
            ),
        ));
    }
    let source_ref = &id.spec.secret_ref;
    let sources: Api<Secret> = Api::namespaced(client.clone(), &source_ref.namespace);
    let Some(source) = sources.get_opt(&source_ref.name).await.during(|| {
        format!(
            "reading Secret {}/{}",
            source_ref.namespace, source_ref.name
        )
    })?
    else {
        return Ok(Outcome::blocked(
            Status::False,
            reasons::SECRET_NOT_FOUND,
            format!(
                "the credentials Secret {}/{} of TerraformClusterIdentity {identity} does not exist",
                source_ref.namespace, source_ref.name
            ),
        ));
    };
    let allowed = (Status::True, reasons::IDENTITY_ALLOWED, String::new());
    let data: BTreeMap<String, k8s_openapi::ByteString> = source.data.unwrap_or_default();
    let hash = source_hash(&data);
    let mirrors: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let name = names::credential_mirror(identity);
    let existing = mirrors
        .get_opt(&name)
        .await
        .during(|| format!("reading Secret {namespace}/{name}"))?;
    if let Some(existing) = &existing {
        let is_mirror = existing
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::MIRRORED))
            .is_some_and(|v| v == labels::TRUE);
        if !is_mirror {
            return Ok(Outcome {
                identity_allowed: allowed,
                mirrored: (
                    Status::False,
                    reasons::MIRROR_FAILED,
                    format!(
                        "Secret {namespace}/{name} exists and is not a CAPTF credential mirror: rename or delete it so CAPTF can mirror identity {identity}"
                    ),
                ),
                ready: None,
            });
        }
    }
    let owners = with_owner(
        existing
            .as_ref()
            .and_then(|e| e.metadata.owner_references.clone())
            .unwrap_or_default(),
        owner,
    );
    let current = existing
        .as_ref()
        .and_then(|e| e.metadata.annotations.as_ref())
        .and_then(|a| a.get(annotations::SOURCE_HASH));
    let owners_changed = existing
        .as_ref()
        .and_then(|e| e.metadata.owner_references.clone())
        .unwrap_or_default()
        != owners;
    if current != Some(&hash) || owners_changed {
        let mirror = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([
                    (labels::MIRRORED.to_owned(), labels::TRUE.to_owned()),
                    (labels::MANAGED.to_owned(), labels::TRUE.to_owned()),
                ])),
                annotations: Some(BTreeMap::from([
                    (annotations::SOURCE_HASH.to_owned(), hash),
                    (annotations::IDENTITY.to_owned(), identity.to_owned()),
                ])),
                owner_references: Some(owners),
                ..Default::default()
            },
            data: Some(data),
            type_: Some("Opaque".into()),
            ..Default::default()
        };
        mirrors
            .patch(
                &name,
                &PatchParams::apply(captf_api::FIELD_MANAGER).force(),
                &Patch::Apply(&mirror),
            )
            .await
            .during(|| format!("writing credential mirror {namespace}/{name}"))?;
    }
    Ok(Outcome {
        identity_allowed: allowed,
        mirrored: (Status::True, reasons::MIRRORED, String::new()),
        ready: Some(identity.to_owned()),
    })
}

/// The mirror's owner references once `owner` is among them (pure): one reference per user,
/// a plain (non-controller) one; a reference to an earlier UID of the same object is replaced
/// where it stands. Users sharing the mirror (a cluster and its machines) must not reorder
/// the list, or each would rewrite it after the other, forever.
pub fn with_owner(mut owners: Vec<OwnerReference>, owner: &OwnerReference) -> Vec<OwnerReference> {
    let reference = OwnerReference {
        controller: None,
        block_owner_deletion: None,
        ..owner.clone()
    };
    match owners
        .iter()
        .position(|o| o.kind == owner.kind && o.name == owner.name)
    {
        Some(i) => owners[i] = reference,
        None => owners.push(reference),
    }
    owners
}

/// SHA-256 over the source data, keys in order.
fn source_hash(data: &BTreeMap<String, k8s_openapi::ByteString>) -> String {
    let mut h = Sha256::new();
    for (k, v) in data {
        h.update(k.as_bytes());
        h.update([0]);
        h.update(&v.0);
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// Ensures the namespace's `captf-runner` ServiceAccount and its RoleBinding to the
/// `captf-runner` ClusterRole.
pub async fn ensure_runner_rbac(client: &kube::Client, namespace: &str) -> Result<()> {
    let managed = BTreeMap::from([(labels::MANAGED.to_owned(), labels::TRUE.to_owned())]);
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    if sas
        .get_opt(RUNNER)
        .await
        .during(|| format!("reading ServiceAccount {namespace}/{RUNNER}"))?
        .is_none()
    {
        let sa = ServiceAccount {
            metadata: kube::api::ObjectMeta {
                name: Some(RUNNER.into()),
                labels: Some(managed.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        match sas.create(&PostParams::default(), &sa).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                return Err(crate::Error::Kube {
                    action: format!("creating ServiceAccount {namespace}/{RUNNER}"),
                    source: e,
                });
            }
        }
    }
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": RUNNER, "namespace": namespace, "labels": managed},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": RUNNER},
        "subjects": [{"kind": "ServiceAccount", "name": RUNNER, "namespace": namespace}],
    }))?;
    // get/create/update rather than server-side apply: the manager's role has no patch on
    // RoleBindings.
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    match bindings
        .get_opt(RUNNER)
        .await
        .during(|| format!("reading RoleBinding {namespace}/{RUNNER}"))?
    {
        None => match bindings.create(&PostParams::default(), &binding).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                return Err(crate::Error::Kube {
                    action: format!("creating RoleBinding {namespace}/{RUNNER}"),
                    source: e,
                });
            }
        },
        Some(existing)
            if existing.subjects != binding.subjects || existing.role_ref != binding.role_ref =>
        {
            let mut updated = binding.clone();
            updated.metadata.resource_version = existing.metadata.resource_version.clone();
            bindings
                .replace(RUNNER, &PostParams::default(), &updated)
                .await
                .during(|| format!("updating RoleBinding {namespace}/{RUNNER}"))?;
        }
        Some(_) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(kind: &str, name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "infrastructure.cluster.x-k8s.io/v1alpha1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: None,
            block_owner_deletion: None,
        }
    }

    #[test]
    fn with_owner_keeps_the_order() {
        let cluster = reference("TerraformCluster", "c", "1");
        let machine = reference("TerraformMachine", "m", "2");
        let controlling = OwnerReference {
            controller: Some(true),
            block_owner_deletion: Some(true),
            ..machine.clone()
        };
        let both = vec![cluster.clone(), machine.clone()];
        let cases = [
            (
                "already there, first",
                both.clone(),
                cluster.clone(),
                both.clone(),
            ),
            (
                "already there, last",
                both.clone(),
                machine.clone(),
                both.clone(),
            ),
            (
                "added at the end",
                vec![machine.clone()],
                cluster.clone(),
                vec![machine.clone(), cluster.clone()],
            ),
            (
                "an earlier UID is replaced in place",
                both.clone(),
                reference("TerraformCluster", "c", "3"),
                vec![reference("TerraformCluster", "c", "3"), machine.clone()],
            ),
            (
                "never as controller",
                vec![],
                controlling,
                vec![machine.clone()],
            ),
        ];
        for (name, existing, owner, want) in cases {
            assert_eq!(with_owner(existing, &owner), want, "{name}");
        }
    }
}
