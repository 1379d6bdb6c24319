//! `captf dr export`: reads one namespace's recovery copy from the API.

use std::collections::BTreeSet;

use captf_api::labels;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::{Value, json};

use super::document::{self, Export, VariableSource};
use super::kinds::{self, Kind};
use crate::error::KubeContext;
use crate::{Error, Result};

/// What the export found worth telling the operator (not errors: the copy was still taken).
#[derive(Debug, Default)]
pub struct Notes(pub Vec<String>);

/// Takes the copy of `namespace`.
pub async fn export(client: &kube::Client, namespace: &str, now: &str) -> Result<(Export, Notes)> {
    let mut notes = Notes::default();
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = ns_api
        .get_opt(namespace)
        .await
        .during(|| format!("reading namespace {namespace}"))?
        .ok_or_else(|| Error::InvalidObject(format!("namespace {namespace} does not exist")))?;

    let mut objects = list_kinds(client, namespace, &kinds::TERRAFORM, &mut notes).await?;
    let mut cluster_api = list_kinds(client, namespace, &kinds::CLUSTER_API, &mut notes).await?;
    for object in objects.iter().chain(&cluster_api) {
        if object.pointer("/metadata/deletionTimestamp").is_some() {
            notes.0.push(format!(
                "{} was being deleted; it is exported and would be restored as not deleting",
                document::display(object)
            ));
        }
    }

    let mut identities = Vec::new();
    let mut identity_secrets = Vec::new();
    let identity_api: Api<DynamicObject> =
        Api::all_with(client.clone(), &Kind::Identity.resource());
    for name in document::referenced_identities(&objects) {
        let Some(identity) = identity_api
            .get_opt(&name)
            .await
            .during(|| format!("reading TerraformClusterIdentity {name}"))?
        else {
            notes.0.push(format!(
                "TerraformClusterIdentity {name} is named but does not exist; not exported"
            ));
            continue;
        };
        let mut identity = serde_json::to_value(identity)?;
        if let (Some(secret_ns), Some(secret)) = (
            identity
                .pointer("/spec/secretRef/namespace")
                .and_then(Value::as_str),
            identity
                .pointer("/spec/secretRef/name")
                .and_then(Value::as_str),
        ) {
            let secrets: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), secret_ns, &Kind::Secret.resource());
            match secrets
                .get_opt(secret)
                .await
                .during(|| format!("reading Secret {secret_ns}/{secret} of identity {name}"))?
            {
                Some(s) => {
                    let mut s = with_kind(serde_json::to_value(s)?, Kind::Secret);
                    document::strip(&mut s, false);
                    identity_secrets.push(s);
                }
                None => notes.0.push(format!(
                    "Secret {secret_ns}/{secret} of TerraformClusterIdentity {name} does not exist; not exported"
                )),
            }
        }
        identity = with_kind(identity, Kind::Identity);
        document::strip(&mut identity, false);
        if let Some(map) = identity.as_object_mut() {
            map.remove("status");
        }
        identities.push(identity);
    }

    let mut variable_sources = Vec::new();
    for source in document::referenced_variable_sources(&objects) {
        let (kind, name) = match &source {
            VariableSource::ConfigMap(n) => (Kind::ConfigMap, n),
            VariableSource::Secret(n) => (Kind::Secret, n),
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &kind.resource());
        match api
            .get_opt(name)
            .await
            .during(|| format!("reading {} {namespace}/{name}", kind.name()))?
        {
            Some(o) => {
                let mut o = with_kind(serde_json::to_value(o)?, kind);
                document::strip(&mut o, false);
                variable_sources.push(o);
            }
            None => notes.0.push(format!(
                "{} {name} is named in variablesFrom but does not exist; not exported",
                kind.name()
            )),
        }
    }

    let secrets = secrets(client, namespace, &mut notes).await?;
    warn_running_jobs(client, namespace, &mut notes).await?;

    for object in objects.iter_mut().chain(cluster_api.iter_mut()) {
        document::strip(object, true);
    }
    let meta = &ns.metadata;
    Ok((
        Export {
            api_version: document::API_VERSION.into(),
            kind: document::KIND.into(),
            namespace: namespace.into(),
            exported_at: now.into(),
            captf_version: env!("CARGO_PKG_VERSION").into(),
            namespace_metadata: json!({"labels": meta.labels, "annotations": meta.annotations}),
            identities,
            identity_secrets,
            variable_sources,
            cluster_api,
            secrets,
            objects,
        },
        notes,
    ))
}

/// The state chunks (`tfstate=true`), the state backups (`captf.io/state-backup=true`) and
/// the durable inputs (`captf-inputs-*` among the managed Secrets), without owner references.
async fn secrets(client: &kube::Client, namespace: &str, notes: &mut Notes) -> Result<Vec<Value>> {
    type Wanted = fn(&str) -> bool;
    let passes: [(String, Wanted); 3] = [
        (format!("{}=true", labels::TFSTATE), |_| true),
        (format!("{}=true", labels::STATE_BACKUP), |_| true),
        (format!("{}=true", labels::MANAGED), |name| {
            name.starts_with(DURABLE_INPUTS_PREFIX)
        }),
    ];
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (selector, wanted) in passes {
        let params = ListParams::default().labels(&selector);
        for mut secret in list(client, Some(namespace), Kind::Secret, &params, notes).await? {
            let name = document::name_of(&secret).to_owned();
            if wanted(&name) && seen.insert(name) {
                document::strip(&mut secret, false);
                out.push(secret);
            }
        }
    }
    Ok(out)
}

/// The durable inputs Secrets' common prefix (`captf-inputs-<c|m|mp>-<name>`).
const DURABLE_INPUTS_PREFIX: &str = "captf-inputs-";

/// A Job that runs while the copy is taken may write a newer state right after it.
async fn warn_running_jobs(
    client: &kube::Client,
    namespace: &str,
    notes: &mut Notes,
) -> Result<()> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().labels(&format!("{}=true", labels::MANAGED));
    let running = jobs
        .list(&params)
        .await
        .during(|| format!("listing Jobs in {namespace}"))?
        .into_iter()
        .filter(|j| {
            j.status
                .as_ref()
                .is_some_and(|s| s.completion_time.is_none() && s.active.unwrap_or(0) > 0)
        })
        .filter_map(|j| j.metadata.name);
    for job in running {
        notes.0.push(format!(
            "Job {job} is running: the state it writes after this copy is not in it; export again once it has finished"
        ));
    }
    Ok(())
}

/// Every object of `kinds` in `namespace`, kind by kind.
async fn list_kinds(
    client: &kube::Client,
    namespace: &str,
    kinds: &[Kind],
    notes: &mut Notes,
) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for kind in kinds {
        out.extend(
            list(
                client,
                Some(namespace),
                *kind,
                &ListParams::default(),
                notes,
            )
            .await?,
        );
    }
    Ok(out)
}

/// Lists one kind; a kind the API does not serve (Cluster API not installed, another
/// version) is an empty list and a note.
async fn list(
    client: &kube::Client,
    namespace: Option<&str>,
    kind: Kind,
    params: &ListParams,
    notes: &mut Notes,
) -> Result<Vec<Value>> {
    let resource = kind.resource();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    match api.list(params).await {
        Ok(list) => list
            .items
            .into_iter()
            .map(|o| Ok(with_kind(serde_json::to_value(o)?, kind)))
            .collect(),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            if kinds::CLUSTER_API.contains(&kind) {
                notes.0.push(format!(
                    "{} ({}) is not served here; none exported",
                    kind.name(),
                    resource.api_version
                ));
            }
            Ok(Vec::new())
        }
        Err(e) => Err(e).during(|| {
            format!(
                "listing {} in {}",
                kind.name(),
                namespace.unwrap_or("the cluster")
            )
        }),
    }
}

/// List items come without `apiVersion` and `kind`; the document needs both.
fn with_kind(mut object: Value, kind: Kind) -> Value {
    let resource = kind.resource();
    object["apiVersion"] = json!(resource.api_version);
    object["kind"] = json!(resource.kind);
    object
}
