//! The export document and everything done to objects on their way in and out of it. Pure:
//! the I/O lives in [`super::export`] and [`super::import`].

use std::collections::{BTreeMap, BTreeSet};

use captf_api::annotations;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::kinds::{self, Kind};

/// `apiVersion` of the document.
pub const API_VERSION: &str = "captf.io/v1alpha1";
/// `kind` of the document.
pub const KIND: &str = "DisasterRecoveryExport";

/// One namespace's disaster-recovery copy, its groups in the order they are restored
/// (the disaster-recovery runbook's order).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Export {
    pub api_version: String,
    pub kind: String,
    /// The namespace the copy was taken from; it is restored under the same name, because the
    /// state Secrets' names are derived from it.
    pub namespace: String,
    /// RFC 3339.
    pub exported_at: String,
    pub captf_version: String,
    /// Labels and annotations of the namespace (identities may select namespaces by label).
    #[serde(default)]
    pub namespace_metadata: Value,
    /// The cluster-scoped TerraformClusterIdentities the objects name.
    #[serde(default)]
    pub identities: Vec<Value>,
    /// The identities' source Secrets (usually in another namespace).
    #[serde(default)]
    pub identity_secrets: Vec<Value>,
    /// The ConfigMaps and Secrets named by `variablesFrom`.
    #[serde(default)]
    pub variable_sources: Vec<Value>,
    /// Cluster API objects (Clusters, machine owners), owners before the owned.
    #[serde(default)]
    pub cluster_api: Vec<Value>,
    /// State chunks, state backups and durable inputs, without owner references.
    #[serde(default)]
    pub secrets: Vec<Value>,
    /// The `Terraform*` objects.
    #[serde(default)]
    pub objects: Vec<Value>,
}

impl Export {
    pub fn from_json(bytes: &[u8]) -> serde_json::Result<Export> {
        serde_json::from_slice(bytes)
    }

    pub fn to_json(&self) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec_pretty(self)
    }
}

/// Metadata that belongs to the source cluster and must not travel.
const SERVER_FIELDS: [&str; 7] = [
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "managedFields",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Removes the server-set metadata (and, for Secrets, the owner references: an owner
/// reference names a UID that the restored owner will not have, and the garbage collector
/// deletes what it owns).
pub fn strip(object: &mut Value, owner_references: bool) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in SERVER_FIELDS {
            meta.remove(field);
        }
        meta.remove("selfLink");
        if !owner_references {
            meta.remove("ownerReferences");
        }
    }
}

/// The name of an object.
pub fn name_of(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `Kind/name`, as messages and `--object` name objects.
pub fn display(object: &Value) -> String {
    format!(
        "{}/{}",
        object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        name_of(object)
    )
}

/// Every `identityRef.name` anywhere in the objects' specs (workload kinds, templates and
/// cluster defaults name identities in different places).
pub fn referenced_identities(objects: &[Value]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for object in objects {
        if let Some(spec) = object.get("spec") {
            walk(spec, &mut |key, value| {
                if key == "identityRef"
                    && let Some(name) = value.get("name").and_then(Value::as_str)
                {
                    out.insert(name.to_owned());
                }
            });
        }
    }
    out
}

/// A ConfigMap or Secret named by `variablesFrom`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum VariableSource {
    ConfigMap(String),
    Secret(String),
}

/// Every `variablesFrom` source anywhere in the objects' specs.
pub fn referenced_variable_sources(objects: &[Value]) -> BTreeSet<VariableSource> {
    let mut out = BTreeSet::new();
    for object in objects {
        if let Some(spec) = object.get("spec") {
            walk(spec, &mut |key, value| {
                if key != "variablesFrom" {
                    return;
                }
                for source in value.as_array().into_iter().flatten() {
                    let name = |field: &str| {
                        source
                            .pointer(&format!("/{field}/name"))
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    };
                    if let Some(n) = name("configMapRef") {
                        out.insert(VariableSource::ConfigMap(n));
                    }
                    if let Some(n) = name("secretRef") {
                        out.insert(VariableSource::Secret(n));
                    }
                }
            });
        }
    }
    out
}

fn walk(value: &Value, visit: &mut impl FnMut(&str, &Value)) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                visit(key, child);
                walk(child, visit);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| walk(item, visit)),
        _ => {}
    }
}

/// Whether an object is paused: a Cluster by `spec.paused`, anything else by the
/// `cluster.x-k8s.io/paused` annotation.
pub fn paused(object: &Value) -> bool {
    if is_cluster(object) {
        object.pointer("/spec/paused").and_then(Value::as_bool) == Some(true)
    } else {
        object
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .is_some_and(|a| a.contains_key(annotations::PAUSED))
    }
}

fn is_cluster(object: &Value) -> bool {
    kinds::of(object).is_some_and(|k| k == Kind::CapiCluster)
}

/// Pauses an object on its way in.
pub fn pause(object: &mut Value) {
    // `validate` has checked the shape; a field of another shape is left alone, never a panic.
    let cluster = is_cluster(object);
    let Some(object) = object.as_object_mut() else {
        return;
    };
    if cluster {
        let spec = object.entry("spec").or_insert_with(|| json!({}));
        if spec.is_null() {
            *spec = json!({});
        }
        if let Some(spec) = spec.as_object_mut() {
            spec.insert("paused".into(), json!(true));
        }
        return;
    }
    let meta = object.entry("metadata").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    if !annotations.is_object() {
        *annotations = json!({});
    }
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(annotations::PAUSED.into(), json!(""));
    }
}

/// The merge patch that unpauses an object that the import paused.
pub fn unpause_patch(object: &Value) -> Value {
    if is_cluster(object) {
        json!({"spec": {"paused": false}})
    } else {
        json!({"metadata": {"annotations": {annotations::PAUSED: null}}})
    }
}

/// Identifies an owner among the restored objects: API group, kind, name.
pub type OwnerKey = (String, String, String);

fn group_of(api_version: &str) -> &str {
    api_version
        .rsplit_once('/')
        .map(|(group, _)| group)
        .unwrap_or_default()
}

/// The key under which a restored object is looked up as an owner.
pub fn owner_key(object: &Value) -> OwnerKey {
    let field = |f: &str| {
        object
            .get(f)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (
        group_of(&field("apiVersion")).to_owned(),
        field("kind"),
        name_of(object).to_owned(),
    )
}

/// Points each owner reference at the new UID of a restored owner. References to owners that
/// were not restored are dropped (the garbage collector would delete the object for them) and
/// returned, so the import can say so.
pub fn rewrite_owners(object: &mut Value, new_uids: &BTreeMap<OwnerKey, String>) -> Vec<String> {
    let mut dropped = Vec::new();
    let Some(refs) = object
        .pointer_mut("/metadata/ownerReferences")
        .and_then(Value::as_array_mut)
    else {
        return dropped;
    };
    refs.retain_mut(|reference| {
        let field = |f: &str| {
            reference
                .get(f)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let key = (
            group_of(&field("apiVersion")).to_owned(),
            field("kind"),
            field("name"),
        );
        match new_uids.get(&key) {
            Some(uid) => match reference.as_object_mut() {
                Some(reference) => {
                    reference.insert("uid".into(), json!(uid));
                    true
                }
                None => false,
            },
            None => {
                dropped.push(format!("{}/{}", key.1, key.2));
                false
            }
        }
    });
    if refs.is_empty()
        && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.remove("ownerReferences");
    }
    dropped
}

/// The shape every item must have before anything of the export is created: the import
/// writes into these fields, and a document that is not what `captf dr export` wrote must be
/// refused whole, not half-way.
fn shape(item: &Value) -> Result<(), String> {
    let Some(object) = item.as_object() else {
        return Err("not a JSON object".into());
    };
    let Some(meta) = object.get("metadata").and_then(Value::as_object) else {
        return Err("`metadata` is missing or not an object".into());
    };
    if meta
        .get("name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err("`metadata.name` is missing or not a string".into());
    }
    for field in ["labels", "annotations"] {
        if !matches!(meta.get(field), None | Some(Value::Null | Value::Object(_))) {
            return Err(format!("`metadata.{field}` is not an object"));
        }
    }
    match meta.get("ownerReferences") {
        None | Some(Value::Null) => {}
        Some(Value::Array(refs)) if refs.iter().all(Value::is_object) => {}
        Some(_) => return Err("`metadata.ownerReferences` is not a list of objects".into()),
    }
    if !matches!(
        object.get("spec"),
        None | Some(Value::Null | Value::Object(_))
    ) {
        return Err("`spec` is not an object".into());
    }
    Ok(())
}

/// Checks that a document is an export this version can restore; the message says what is
/// wrong and with which item.
pub fn validate(export: &Export) -> Result<(), String> {
    if export.api_version != API_VERSION || export.kind != KIND {
        return Err(format!(
            "not a CAPTF disaster-recovery export: apiVersion {:?} kind {:?} (expected {API_VERSION} {KIND}, as `captf dr export` writes)",
            export.api_version, export.kind
        ));
    }
    if export.namespace.is_empty() {
        return Err("the export names no namespace (field `namespace`)".into());
    }
    if !matches!(export.namespace_metadata, Value::Null | Value::Object(_)) {
        return Err("field `namespaceMetadata` is not an object".into());
    }
    let every = export
        .identities
        .iter()
        .chain(&export.identity_secrets)
        .chain(&export.variable_sources)
        .chain(&export.cluster_api)
        .chain(&export.secrets)
        .chain(&export.objects);
    for (index, item) in every.enumerate() {
        shape(item).map_err(|why| format!("item {index} ({}): {why}", display(item)))?;
    }
    let namespaced = export
        .variable_sources
        .iter()
        .chain(&export.cluster_api)
        .chain(&export.secrets)
        .chain(&export.objects);
    for item in namespaced {
        if kinds::of(item).is_none() {
            return Err(format!(
                "item {} ({}) is not a kind `captf dr import` restores",
                display(item),
                item.get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            ));
        }
        let ns = item
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if ns != export.namespace {
            return Err(format!(
                "item {} is in namespace {ns:?}, not the export's namespace {:?}",
                display(item),
                export.namespace
            ));
        }
    }
    for item in &export.secrets {
        if item.pointer("/metadata/ownerReferences").is_some() {
            return Err(format!(
                "Secret {} carries owner references: restored, it would be garbage-collected; remove metadata.ownerReferences from it",
                name_of(item)
            ));
        }
    }
    Ok(())
}

/// The objects `captf dr unpause` unpauses: those the import paused (paused now, not paused
/// in the export), restricted to `only` (`Kind/name`) when given. A `Terraform*` object named
/// in `only` brings its Cluster along, since a paused Cluster pauses it too.
pub fn to_unpause<'a>(export: &'a Export, only: &[String]) -> Result<Vec<&'a Value>, String> {
    let candidates: Vec<&Value> = export
        .cluster_api
        .iter()
        .filter(|o| is_cluster(o))
        .chain(&export.objects)
        .filter(|o| !paused(o))
        .collect();
    if only.is_empty() {
        return Ok(candidates);
    }
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    for name in only {
        let object = export
            .objects
            .iter()
            .chain(&export.cluster_api)
            .find(|o| display(o) == *name)
            .ok_or_else(|| {
                format!("--object {name}: no such object in the export (use Kind/name, e.g. TerraformCluster/prod)")
            })?;
        wanted.insert(name.clone());
        if let Some(cluster) = object
            .pointer(&format!(
                "/metadata/labels/{}",
                captf_api::labels::CLUSTER_NAME.replace('/', "~1")
            ))
            .and_then(Value::as_str)
        {
            wanted.insert(format!("Cluster/{cluster}"));
        }
    }
    Ok(candidates
        .into_iter()
        .filter(|o| wanted.contains(&display(o)))
        .collect())
}

#[cfg(test)]
mod tests;
