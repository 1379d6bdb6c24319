//! The Secrets CAPTF keeps for an object besides the engine's state: durable inputs, plan key,
//! state adoption after an apply, and cleanup after a destroy.

use std::collections::BTreeMap;

use captf_api::names::ObjectKey;
use captf_api::{annotations, labels};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

use crate::decide::book::{Adoption, Digest};
use crate::error::{Error, KubeContext, Result};

/// Writes the durable inputs (`captf-inputs-<c|m|mp>-<name>`) when an apply starts: a destroy,
/// refresh or drift later renders from them.
pub async fn write_durable_inputs(
    client: &kube::Client,
    key: &ObjectKey,
    owner: &OwnerReference,
    image: &str,
    main_tf: &[u8],
    tfvars: &[u8],
    identity: &str,
) -> Result<()> {
    let ns = key.namespace();
    let name = key.durable_inputs_secret();
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {
                labels::MANAGED: labels::TRUE,
                labels::OWNER_KIND: key.kind().kind(),
                labels::OWNER_NAME: key.owner_name_label(),
                labels::CLUSTERCTL_MOVE: "",
            },
            "annotations": {annotations::IMAGE: image, annotations::IDENTITY: identity},
            "ownerReferences": [owner],
            // A destroy renders from them: kept with the state (act::protection).
            "finalizers": [captf_api::finalizers::STATE_PROTECTION],
        },
        "type": "Opaque",
        "data": {
            captf_contract::render::MAIN_TF_FILE: k8s_openapi::ByteString(main_tf.to_vec()),
            captf_contract::render::TFVARS_FILE: k8s_openapi::ByteString(tfvars.to_vec()),
        },
    });
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .patch(
            &name,
            &PatchParams::apply(captf_api::FIELD_MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .during(|| format!("writing the durable inputs {ns}/{name}"))?;
    Ok(())
}

/// Creates the object's plan key (`captf-plankey-<c|m|mp>-<name>`, 32 random bytes under `key`)
/// once; the runner keys plan fingerprints with it, so a plan hash cannot be forged without it.
pub async fn ensure_plan_key(
    client: &kube::Client,
    key: &ObjectKey,
    owner: &OwnerReference,
) -> Result<()> {
    use std::io::Read;
    let ns = key.namespace();
    let name = key.plan_key_secret();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    if secrets
        .get_opt(&name)
        .await
        .during(|| format!("reading Secret {ns}/{name}"))?
        .is_some()
    {
        return Ok(());
    }
    let mut bytes = vec![0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| Error::Startup(format!("reading /dev/urandom for a plan key: {e}")))?;
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.to_owned()),
            labels: Some(BTreeMap::from([
                (labels::MANAGED.to_owned(), labels::TRUE.to_owned()),
                (labels::OWNER_KIND.to_owned(), key.kind().kind().to_owned()),
                (labels::OWNER_NAME.to_owned(), key.owner_name_label()),
            ])),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            "key".to_owned(),
            k8s_openapi::ByteString(bytes),
        )])),
        ..Default::default()
    };
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(Error::Kube {
            action: format!("creating the plan key {ns}/{name}"),
            source: e,
        }),
    }
}

/// After a successful apply: the state's base Secret records the inputs hash and is owned by
/// the object; the durable inputs record that the object applied and, for an apply, which
/// digest ran (removed when the runtime reported none).
pub async fn adopt_state(
    client: &kube::Client,
    key: &ObjectKey,
    owner: &OwnerReference,
    adoption: &Adoption,
) -> Result<()> {
    let ns = key.namespace();
    let hash = adoption.inputs_hash.as_ref();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    // By name, chunk after chunk until one is missing: nothing planted under the state's labels
    // is fetched or owned, and no more than the chunk cap is patched.
    let base = key.state_secret();
    for index in 0..=captf_state::DEFAULT_MAX_CHUNKS {
        let name = match index {
            0 => base.clone(),
            n => format!("{base}-part-{n}"),
        };
        let mut patch = serde_json::json!({"metadata": {"ownerReferences": [owner]}});
        if index == 0
            && let Some(hash) = &hash
        {
            patch["metadata"]["annotations"] = serde_json::json!({annotations::INPUTS_HASH: hash});
        }
        match secrets
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => break,
            Err(source) => {
                return Err(Error::Kube {
                    action: format!("adopting state Secret {ns}/{name}"),
                    source,
                });
            }
        }
    }
    let mut marks = serde_json::json!({annotations::APPLIED: "true"});
    if let Some(lineage) = &adoption.lineage {
        marks[annotations::STATE_LINEAGE] = lineage.clone().into();
    }
    match &adoption.digest {
        Digest::Keep => {}
        Digest::Pin(pin) => marks[annotations::IMAGE_DIGEST] = pin.clone().into(),
        // JSON null removes the annotation.
        Digest::Unpin => marks[annotations::IMAGE_DIGEST] = serde_json::Value::Null,
    }
    annotate_durable_inputs(client, key, marks, "marking it applied").await
}

/// Records `lineage` as the object's state lineage on its durable inputs
/// (`captf.io/state-lineage`), where it outlives a lost state and a lost status.
pub async fn record_lineage(client: &kube::Client, key: &ObjectKey, lineage: &str) -> Result<()> {
    let marks = serde_json::json!({annotations::STATE_LINEAGE: lineage});
    annotate_durable_inputs(client, key, marks, "recording the state lineage").await
}

/// Merges `annotations` into the durable inputs Secret; one that does not exist (nothing was
/// applied yet) is left alone.
async fn annotate_durable_inputs(
    client: &kube::Client,
    key: &ObjectKey,
    annotations: serde_json::Value,
    what: &str,
) -> Result<()> {
    let ns = key.namespace();
    let name = key.durable_inputs_secret();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({"metadata": {"annotations": annotations}});
    match secrets
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::Kube {
            action: format!("{what} on {ns}/{name}"),
            source: e,
        }),
    }
}

/// Deletes what CAPTF kept for the object: state, lock, durable inputs, plan key, leases, each
/// released from the state protection first. Backups are released last and left to the
/// garbage collector, which removes them with the object: until the finalizer is gone they are
/// the last copy should anything below fail half-way. A backup that names another owner (a
/// look-alike's) keeps its finalizer.
pub async fn cleanup(client: &kube::Client, key: &ObjectKey, uid: &str) -> Result<()> {
    let ns = key.namespace();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let state_selector = format!(
        "{}=true,{}={}",
        labels::TFSTATE,
        labels::TFSTATE_SECRET_SUFFIX,
        key.state_suffix()
    );
    // One delete per Secret: the manager's role grants delete, not deletecollection.
    let mut names = vec![key.durable_inputs_secret(), key.plan_key_secret()];
    let list = secrets
        .list_metadata(&ListParams::default().labels(&state_selector))
        .await
        .during(|| format!("listing Secrets {state_selector} in {ns}"))?;
    names.extend(list.items.into_iter().map(|s| s.name_any()));
    for name in names {
        crate::reconcile::protection::delete(&secrets, ns, &name).await?;
    }
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), ns);
    for name in [key.lock_lease(), key.run_lease()] {
        match leases.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(Error::Kube {
                    action: format!("deleting Lease {ns}/{name}"),
                    source: e,
                });
            }
        }
    }
    let backup_selector = format!("{}={}", labels::STATE_BACKUP_SUFFIX, key.state_suffix());
    let backups = secrets
        .list_metadata(&ListParams::default().labels(&backup_selector))
        .await
        .during(|| format!("listing Secrets {backup_selector} in {ns}"))?;
    let theirs = |meta: &kube::api::ObjectMeta| {
        let refs = meta.owner_references.as_deref().unwrap_or_default();
        refs.is_empty()
            || refs
                .iter()
                .any(|r| r.uid == uid || (r.kind == key.kind().kind() && r.name == key.name()))
    };
    for meta in backups.items.into_iter().map(|s| s.metadata) {
        let held = meta
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == captf_api::finalizers::STATE_PROTECTION);
        if held && theirs(&meta) {
            let name = meta.name.unwrap_or_default();
            crate::reconcile::protection::release(&secrets, ns, &name).await?;
        }
    }
    Ok(())
}

/// Writes (or with `None` removes) the record of the exports values a pool's last successful
/// apply rendered, as its own data key of the durable inputs: a merge patch by another field
/// manager than the server-side apply that rewrites the inputs when an apply starts, so that
/// rewrite leaves it alone.
pub async fn write_applied_exports(
    client: &kube::Client,
    key: &ObjectKey,
    record: Option<&[u8]>,
) -> Result<()> {
    let value = record.map(|r| k8s_openapi::ByteString(r.to_vec()));
    let patch = serde_json::json!({"data": {
        crate::reconcile::observe::state::APPLIED_EXPORTS_KEY: value,
    }});
    patch_durable(client, key, &patch, "recording the applied exports on").await
}

/// Sets an annotation of the durable inputs (`None`: removes it): an interrupted apply, a
/// pool's exports marks.
pub async fn mark_durable(
    client: &kube::Client,
    key: &ObjectKey,
    annotation: &str,
    value: Option<&str>,
) -> Result<()> {
    let patch = serde_json::json!({"metadata": {"annotations": {annotation: value}}});
    patch_durable(
        client,
        key,
        &patch,
        &format!("writing {annotation} on the durable inputs"),
    )
    .await
}

/// A merge patch of the object's durable inputs; `doing` says what for, in an error (the
/// Secret's name follows it).
async fn patch_durable(
    client: &kube::Client,
    key: &ObjectKey,
    patch: &serde_json::Value,
    doing: &str,
) -> Result<()> {
    let ns = key.namespace();
    let name = key.durable_inputs_secret();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    match secrets
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        // No durable inputs: nothing applied that could be half done.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::Kube {
            action: format!("{doing} {ns}/{name}"),
            source: e,
        }),
    }
}
