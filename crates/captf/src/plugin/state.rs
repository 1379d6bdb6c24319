//! The object's state as the manager's reader decodes it: `state show` and `state pull`.

use std::collections::BTreeMap;
use std::io::Write;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::cluster::Ctx;
use super::workload::Workload;
use super::{Failure, Result, exit};

/// Writes `bytes` to a file only the user can read: a file that was there is made so before
/// anything is written into it.
pub fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)
}

/// What `state show` prints: never an output's value when the state marks it sensitive.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StateShown {
    pub serial: u64,
    pub lineage: String,
    pub engine_version: String,
    pub managed_resources: u64,
    pub chunks: usize,
    pub compressed_bytes: u64,
    pub outputs: BTreeMap<String, serde_json::Value>,
}

impl StateShown {
    pub fn new(s: &captf_state::DecodedState, show_sensitive: bool) -> Self {
        StateShown {
            serial: s.serial,
            lineage: s.lineage.clone(),
            engine_version: s.terraform_version.clone(),
            managed_resources: s.managed_resources,
            chunks: s.chunks,
            compressed_bytes: s.compressed_bytes,
            outputs: s
                .outputs
                .iter()
                .map(|(k, v)| {
                    let shown = if s.sensitive_outputs.contains(k) && !show_sensitive {
                        serde_json::Value::String(masked(v))
                    } else {
                        v.clone()
                    };
                    (k.clone(), shown)
                })
                .collect(),
        }
    }
}

/// What a sensitive value shows instead of itself: its JSON type and size.
fn masked(value: &serde_json::Value) -> String {
    let kind = match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "list",
        serde_json::Value::Object(_) => "object",
    };
    format!(
        "(sensitive {kind}, {} bytes of JSON)",
        value.to_string().len()
    )
}

impl StateShown {
    pub fn render(&self) -> String {
        let mut text = format!(
            "serial {}, lineage {}, written by {} ({} managed resource block(s); {} chunk(s), {} bytes compressed)\noutputs:\n",
            self.serial,
            self.lineage,
            self.engine_version,
            self.managed_resources,
            self.chunks,
            self.compressed_bytes
        );
        for (k, v) in &self.outputs {
            text.push_str(&format!("  {k} = {v}\n"));
        }
        text
    }
}

impl Ctx {
    /// The state's chunk Secrets, as the manager reads them (by name, chunk after chunk).
    pub async fn chunks(&self, w: &Workload) -> Result<(String, Vec<captf_state::Chunk>)> {
        let key = self.key(w)?;
        let base = key.state_secret();
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut chunks = Vec::new();
        for index in 0..captf_state::Limits::DEFAULT.max_chunks {
            let name = captf_api::names::chunk_name(&base, index);
            let Some(secret) = api.get_opt(&name).await? else {
                break;
            };
            chunks.push(captf_controller::reconcile::observe::state::chunk(
                name, secret,
            ));
        }
        if chunks.is_empty() {
            return Err(Failure::new(
                exit::NOT_FOUND,
                format!(
                    "{} has no state Secret {base}; see docs/runbooks/total-state-loss.md",
                    w.reference()
                ),
            ));
        }
        Ok((base, chunks))
    }

    pub async fn state(&self, w: &Workload) -> Result<captf_state::DecodedState> {
        let (base, chunks) = self.chunks(w).await?;
        captf_state::decode(&base, &chunks, captf_state::Limits::DEFAULT)
            .map_err(|e| Failure::new(exit::ERROR, format!("{}: {e}", w.reference())))
    }

    /// The decompressed state document, checked by the reader first.
    pub async fn state_document(
        &self,
        w: &Workload,
    ) -> Result<(captf_state::DecodedState, Vec<u8>)> {
        let (base, chunks) = self.chunks(w).await?;
        let decoded = captf_state::decode(&base, &chunks, captf_state::Limits::DEFAULT)
            .map_err(|e| Failure::new(exit::ERROR, format!("{}: {e}", w.reference())))?;
        let mut compressed = Vec::new();
        for c in &chunks {
            compressed.extend_from_slice(c.data.as_deref().unwrap_or_default());
        }
        let mut document = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(
                flate2::read::GzDecoder::new(compressed.as_slice()),
                captf_state::Limits::DEFAULT.max_decompressed_bytes as u64,
            ),
            &mut document,
        )
        .map_err(|e| Failure::new(exit::ERROR, format!("{}: {e}", w.reference())))?;
        Ok((decoded, document))
    }
}
