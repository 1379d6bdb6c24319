//! The state Secrets of the engines' `kubernetes` backend, read and written by the runner itself
//! through the pod's in-cluster credentials (the ServiceAccount the backend uses):
//! - [`BackendSettings`]: where they are, from the `--backend-config` values the engine gets;
//! - [`read`]: what the backend holds now, decoded by CAPTF's own reader;
//! - [`replace`]: a restore's backup written back chunk for chunk, so the engine never has to
//!   load the damaged or foreign state it replaces.

use std::collections::BTreeMap;

use captf_api::{annotations, labels};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};

use crate::expect::FoundState;

/// The state data key of every chunk.
pub const STATE_DATA_KEY: &str = "tfstate";
/// The only workspace CAPTF uses.
pub const WORKSPACE: &str = "default";

/// Where the backend keeps the state: the values of `--backend-config=namespace=…`,
/// `secret_suffix=…` and `labels=…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendSettings {
    /// The namespace of the state Secrets.
    pub namespace: String,
    /// `secret_suffix`.
    pub suffix: String,
    /// The `labels` map the backend stamps on every chunk besides its own.
    pub labels: BTreeMap<String, String>,
}

impl BackendSettings {
    /// The settings in `backend_config` (`KEY=VALUE` entries). `namespace` falls back to
    /// `fallback_namespace` (the pod's own), as the backend's does.
    pub fn from_config(
        backend_config: &[String],
        fallback_namespace: Option<String>,
    ) -> Result<Self, String> {
        let value = |key: &str| {
            backend_config
                .iter()
                .rev()
                .find_map(|c| c.strip_prefix(key)?.strip_prefix('='))
        };
        let suffix = value("secret_suffix")
            .filter(|s| !s.is_empty())
            .ok_or("--expect-state needs --backend-config=secret_suffix=<suffix>")?
            .to_owned();
        let namespace = value("namespace")
            .map(str::to_owned)
            .or(fallback_namespace)
            .filter(|s| !s.is_empty())
            .ok_or("--expect-state needs --backend-config=namespace=<namespace>")?;
        let labels = match value("labels") {
            Some(map) => parse_label_map(map)?,
            None => BTreeMap::new(),
        };
        Ok(BackendSettings {
            namespace,
            suffix,
            labels,
        })
    }

    /// The base Secret's name, `tfstate-default-<suffix>`.
    pub fn base_secret(&self) -> String {
        format!("{STATE_DATA_KEY}-{WORKSPACE}-{}", self.suffix)
    }

    /// The name of chunk `i` (the base, then `-part-<i>`).
    pub fn chunk_secret(&self, i: usize) -> String {
        match i {
            0 => self.base_secret(),
            i => format!("{}-part-{i}", self.base_secret()),
        }
    }

    /// The backend's selector of the state chunks.
    pub fn selector(&self) -> String {
        format!(
            "{}=true,{}={},{}={WORKSPACE}",
            labels::TFSTATE,
            labels::TFSTATE_SECRET_SUFFIX,
            self.suffix,
            labels::TFSTATE_WORKSPACE
        )
    }

    /// Every label the backend puts on a chunk: its own four, then the configured ones.
    pub fn chunk_labels(&self) -> BTreeMap<String, String> {
        let mut l = BTreeMap::from([
            (labels::TFSTATE.to_owned(), labels::TRUE.to_owned()),
            (
                labels::TFSTATE_SECRET_SUFFIX.to_owned(),
                self.suffix.clone(),
            ),
            (labels::TFSTATE_WORKSPACE.to_owned(), WORKSPACE.to_owned()),
            (labels::APP_MANAGED_BY.to_owned(), "terraform".to_owned()),
        ]);
        l.extend(self.labels.clone());
        l
    }
}

/// Parses the HCL object constructor the manager writes for `labels` (`{"k"="v",…}`, keys and
/// values label-safe: no quotes, commas or escapes in them).
pub fn parse_label_map(text: &str) -> Result<BTreeMap<String, String>, String> {
    let bad = |why: &str| format!("--backend-config=labels={text}: {why}");
    let inner = text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or_else(|| bad("not an object {…}"))?;
    let quoted = |s: &str| -> Result<String, String> {
        let s = s.trim();
        let v = s
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .ok_or_else(|| bad("keys and values must be quoted"))?;
        if v.contains(['"', '\\', '$', '%']) {
            return Err(bad("a label with quotes, escapes or templates"));
        }
        Ok(v.to_owned())
    };
    let mut out = BTreeMap::new();
    for entry in inner.split(',').filter(|e| !e.trim().is_empty()) {
        let (k, v) = entry
            .split_once('=')
            .ok_or_else(|| bad("an entry without ="))?;
        out.insert(quoted(k)?, quoted(v)?);
    }
    Ok(out)
}

/// What the backend holds now, read live and decoded under the reader's caps.
pub async fn read(client: &kube::Client, b: &BackendSettings) -> Result<FoundState, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &b.namespace);
    let list = api
        .list(&ListParams::default().labels(&b.selector()))
        .await
        .map_err(|e| {
            format!(
                "listing the state Secrets in {} ({}): {e}",
                b.namespace,
                b.selector()
            )
        })?;
    if list.items.is_empty() {
        return Ok(FoundState::Missing);
    }
    let chunks: Vec<captf_state::Chunk> = list
        .items
        .into_iter()
        .map(|s| captf_state::Chunk {
            name: s.metadata.name.unwrap_or_default(),
            data: s
                .data
                .and_then(|mut d| d.remove(STATE_DATA_KEY))
                .map(|b| b.0),
            annotations: s.metadata.annotations.unwrap_or_default(),
        })
        .collect();
    Ok(
        match captf_state::decode(&b.base_secret(), &chunks, captf_state::Limits::default()) {
            Ok(s) => FoundState::Found {
                lineage: s.lineage,
                serial: s.serial,
                resources: s.managed_resources,
            },
            Err(e) => FoundState::Unreadable(e.reason().to_owned()),
        },
    )
}

/// Makes the backend's Secrets hold exactly `chunks` (a backup's, in order): each chunk is
/// written over its Secret (or created), with the backend's labels and encoding, and any other
/// chunk of the state is deleted. Nothing is decoded but the backup itself, so a corrupt, partial
/// or foreign state is replaced as it is. Owner references and finalizers of existing chunks are
/// kept; the manager adopts the restored state afterwards.
pub async fn replace(
    client: &kube::Client,
    b: &BackendSettings,
    chunks: &[Vec<u8>],
) -> Result<(), String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &b.namespace);
    let ns = &b.namespace;
    let wanted: Vec<String> = (0..chunks.len()).map(|i| b.chunk_secret(i)).collect();
    for (name, data) in wanted.iter().zip(chunks) {
        let existing = api
            .get_opt(name)
            .await
            .map_err(|e| format!("reading Secret {ns}/{name}: {e}"))?;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                labels: Some(b.chunk_labels()),
                // The backend's own; the manager adds captf.io/inputs-hash when it adopts it.
                annotations: Some(BTreeMap::from([(
                    annotations::ENCODING.to_owned(),
                    "gzip".to_owned(),
                )])),
                owner_references: existing
                    .as_ref()
                    .and_then(|s| s.metadata.owner_references.clone()),
                // A replace sets the whole metadata: the manager's state protection stays.
                finalizers: existing
                    .as_ref()
                    .and_then(|s| s.metadata.finalizers.clone()),
                resource_version: existing
                    .as_ref()
                    .and_then(|s| s.metadata.resource_version.clone()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(
                STATE_DATA_KEY.to_owned(),
                ByteString(data.clone()),
            )])),
            type_: Some("Opaque".to_owned()),
            ..Secret::default()
        };
        let written = match existing {
            Some(_) => api.replace(name, &PostParams::default(), &secret).await,
            None => api.create(&PostParams::default(), &secret).await,
        };
        written.map_err(|e| format!("writing state Secret {ns}/{name}: {e}"))?;
    }
    let surplus: Vec<String> = api
        .list(&ListParams::default().labels(&b.selector()))
        .await
        .map_err(|e| format!("listing the state Secrets in {ns}: {e}"))?
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .filter(|n| !wanted.contains(n))
        .collect();
    for name in surplus {
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(format!("deleting surplus state Secret {ns}/{name}: {e}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_from_the_backend_config_the_engine_gets() {
        let config = [
            "secret_suffix=0123456789abcdef-c".to_owned(),
            "namespace=team-a".to_owned(),
            "in_cluster_config=true".to_owned(),
            r#"labels={"captf.io/managed"="true","clusterctl.cluster.x-k8s.io/move"=""}"#
                .to_owned(),
        ];
        let b = BackendSettings::from_config(&config, None).expect("settings");
        assert_eq!(b.namespace, "team-a");
        assert_eq!(b.base_secret(), "tfstate-default-0123456789abcdef-c");
        assert_eq!(
            b.chunk_secret(2),
            "tfstate-default-0123456789abcdef-c-part-2"
        );
        assert_eq!(
            b.selector(),
            "tfstate=true,tfstateSecretSuffix=0123456789abcdef-c,tfstateWorkspace=default"
        );
        let labels = b.chunk_labels();
        assert_eq!(
            labels.get("captf.io/managed").map(String::as_str),
            Some("true")
        );
        assert_eq!(
            labels
                .get("clusterctl.cluster.x-k8s.io/move")
                .map(String::as_str),
            Some("")
        );
        assert_eq!(labels.get("tfstate").map(String::as_str), Some("true"));
        assert_eq!(labels.len(), 6);
    }

    #[test]
    fn the_pod_namespace_is_the_fallback_and_the_suffix_is_required() {
        let b = BackendSettings::from_config(&["secret_suffix=s".into()], Some("pod-ns".into()))
            .expect("settings");
        assert_eq!(b.namespace, "pod-ns");
        assert!(BackendSettings::from_config(&["namespace=n".into()], None).is_err());
        assert!(BackendSettings::from_config(&["secret_suffix=s".into()], None).is_err());
    }

    #[test]
    fn label_maps_other_than_the_managers_are_refused() {
        assert_eq!(parse_label_map("{}").expect("empty"), BTreeMap::new());
        for bad in [
            "[]",
            r#"{"a"}"#,
            r#"{a="b"}"#,
            r#"{"a"="b\"c"}"#,
            r#"{"a"="${x}"}"#,
        ] {
            assert!(parse_label_map(bad).is_err(), "{bad}");
        }
    }
}
