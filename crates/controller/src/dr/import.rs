//! `captf dr import` and `captf dr unpause`: restore a copy in the runbook's order, paused,
//! and unpause what the import paused.

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::document::{self, Export, OwnerKey};
use super::kinds::{self, Kind};
use crate::error::KubeContext;
use crate::{Error, Result};

/// Restores `export`: namespace, identities and their Secrets, `variablesFrom` sources (each
/// kept when it already exists), then the Cluster API objects with their Clusters paused, the
/// Secrets without owner references, and the `Terraform*` objects paused, owner references
/// pointed at the new UIDs and statuses restored. Adds one line to `report` per thing done, so
/// a failure midway still says what was created.
///
/// Refuses before writing anything when any Cluster API object, state Secret, backup, durable
/// inputs Secret or `Terraform*` object already exists: an import never writes over live state.
pub async fn import(
    client: &kube::Client,
    export: &Export,
    report: &mut Vec<String>,
) -> Result<()> {
    document::validate(export).map_err(Error::InvalidObject)?;
    let ns = export.namespace.as_str();

    let mut existing = Vec::new();
    for item in export
        .cluster_api
        .iter()
        .chain(&export.secrets)
        .chain(&export.objects)
    {
        if api_for(client, item)?
            .get_metadata_opt(document::name_of(item))
            .await
            .during(|| format!("checking {} in {ns}", document::display(item)))?
            .is_some()
        {
            existing.push(document::display(item));
        }
    }
    if !existing.is_empty() {
        return Err(Error::InvalidObject(format!(
            "namespace {ns} already holds {}; `captf dr import` restores only into a namespace without them and never writes over live objects or state. Delete them first (after checking they are not newer than the export) or import into a fresh cluster",
            existing.join(", ")
        )));
    }

    ensure_namespace(client, ns, &export.namespace_metadata, report).await?;
    for identity in &export.identities {
        create_if_absent(client, identity, report).await?;
    }
    for secret in &export.identity_secrets {
        if let Some(secret_ns) = secret
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
        {
            ensure_namespace(client, secret_ns, &Value::Null, report).await?;
        }
        create_if_absent(client, secret, report).await?;
    }
    for source in &export.variable_sources {
        create_if_absent(client, source, report).await?;
    }

    let mut new_uids: BTreeMap<OwnerKey, String> = BTreeMap::new();
    let mut cluster_api = export.cluster_api.clone();
    cluster_api.sort_by_key(kinds::of);
    for mut object in cluster_api {
        if kinds::of(&object) == Some(Kind::CapiCluster) && !document::paused(&object) {
            document::pause(&mut object);
            report.push(format!(
                "paused {} (spec.paused)",
                document::display(&object)
            ));
        }
        restore(client, object, &mut new_uids, report).await?;
    }
    for secret in &export.secrets {
        let mut secret = secret.clone();
        document::strip(&mut secret, false);
        restore(client, secret, &mut new_uids, report).await?;
    }
    let mut objects = export.objects.clone();
    objects.sort_by_key(kinds::of);
    for mut object in objects {
        if !document::paused(&object) {
            document::pause(&mut object);
            report.push(format!(
                "paused {} (cluster.x-k8s.io/paused)",
                document::display(&object)
            ));
        }
        restore(client, object, &mut new_uids, report).await?;
    }
    Ok(())
}

/// Unpauses the objects the import paused (see [`document::to_unpause`]), Clusters first, one
/// line in `report` each.
pub async fn unpause(
    client: &kube::Client,
    export: &Export,
    only: &[String],
    report: &mut Vec<String>,
) -> Result<()> {
    document::validate(export).map_err(Error::InvalidObject)?;
    for object in document::to_unpause(export, only).map_err(Error::InvalidObject)? {
        let name = document::name_of(object);
        api_for(client, object)?
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(document::unpause_patch(object)),
            )
            .await
            .during(|| format!("unpausing {}", document::display(object)))?;
        report.push(format!("unpaused {}", document::display(object)));
    }
    Ok(())
}

/// Creates one object with its owner references pointed at the restored owners, then
/// writes its status, and records its new UID for what it owns.
async fn restore(
    client: &kube::Client,
    mut object: Value,
    new_uids: &mut BTreeMap<OwnerKey, String>,
    report: &mut Vec<String>,
) -> Result<()> {
    let shown = document::display(&object);
    for dropped in document::rewrite_owners(&mut object, new_uids) {
        report.push(format!(
            "{shown}: dropped the owner reference to {dropped}, which the export does not hold"
        ));
    }
    let status = object.as_object_mut().and_then(|o| o.remove("status"));
    let api = api_for(client, &object)?;
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(object.clone())?,
        )
        .await
        .during(|| format!("creating {shown}"))?;
    new_uids.insert(
        document::owner_key(&object),
        created.metadata.uid.clone().unwrap_or_default(),
    );
    let with_status = kinds::of(&object).is_some_and(Kind::has_status_subresource);
    if let (true, Some(status)) = (with_status, status) {
        match api
            .patch_status(
                document::name_of(&object),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
        {
            Ok(_) => {}
            // A kind without a status subresource kept its status in the create.
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e).during(|| format!("restoring the status of {shown}")),
        }
    }
    report.push(format!("created {shown}"));
    Ok(())
}

async fn create_if_absent(
    client: &kube::Client,
    object: &Value,
    report: &mut Vec<String>,
) -> Result<()> {
    let api = api_for(client, object)?;
    let shown = document::display(object);
    if api
        .get_metadata_opt(document::name_of(object))
        .await
        .during(|| format!("checking {shown}"))?
        .is_some()
    {
        report.push(format!("kept the existing {shown}"));
        return Ok(());
    }
    match api
        .create(
            &PostParams::default(),
            &serde_json::from_value(object.clone())?,
        )
        .await
    {
        Ok(_) => report.push(format!("created {shown}")),
        // Created meanwhile (by another import sharing the identity, say): kept as found.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            report.push(format!("kept the existing {shown}"))
        }
        Err(e) => return Err(e).during(|| format!("creating {shown}")),
    }
    Ok(())
}

async fn ensure_namespace(
    client: &kube::Client,
    name: &str,
    metadata: &Value,
    report: &mut Vec<String>,
) -> Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    if api
        .get_metadata_opt(name)
        .await
        .during(|| format!("checking namespace {name}"))?
        .is_some()
    {
        return Ok(());
    }
    let mut namespace =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    for field in ["labels", "annotations"] {
        if let Some(v) = metadata.get(field).filter(|v| !v.is_null()) {
            namespace["metadata"][field] = v.clone();
        }
    }
    match api
        .create(&PostParams::default(), &serde_json::from_value(namespace)?)
        .await
    {
        Ok(_) => report.push(format!("created namespace {name}")),
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e).during(|| format!("creating namespace {name}")),
    }
    Ok(())
}

fn api_for(client: &kube::Client, object: &Value) -> Result<Api<DynamicObject>> {
    let kind = kinds::of(object).ok_or_else(|| {
        Error::InvalidObject(format!(
            "{} is not a kind `captf dr` handles",
            document::display(object)
        ))
    })?;
    let resource = kind.resource();
    Ok(
        match object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
        {
            Some(ns) if kind != Kind::Identity => {
                Api::namespaced_with(client.clone(), ns, &resource)
            }
            _ => Api::all_with(client.clone(), &resource),
        },
    )
}
