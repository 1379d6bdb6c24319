//! Reading the state (live, only while no Job runs) and the durable inputs Secret.

use std::collections::BTreeMap;

use captf_api::names::ObjectKey;
use captf_api::{annotations, labels};
use captf_state::{Chunk, DecodedState, Limits, StateError};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

use crate::error::{KubeContext, Result};

/// What the reader found.
#[derive(Debug)]
pub enum StateRead {
    /// No state Secret.
    Missing,
    /// State Secrets that cannot be read.
    Unreadable(StateError),
    /// Readable state, and the chunks it was decoded from (for backups).
    Found(Box<DecodedState>, Vec<Chunk>),
    /// A readable state of another lineage than the object's (see [`crate::reconcile::observe::lineage::classify`]): not its
    /// state, so nothing reads its outputs, backs it up or runs against it; only a restore
    /// replaces it.
    Foreign(Box<DecodedState>),
}

/// Lists the object's state Secrets live (the backend's own selector) and decodes them.
pub async fn read(client: &kube::Client, key: &ObjectKey) -> Result<StateRead> {
    let api: Api<Secret> = Api::namespaced(client.clone(), key.namespace());
    let selector = format!(
        "{}=true,{}={},{}=default",
        labels::TFSTATE,
        labels::TFSTATE_SECRET_SUFFIX,
        key.state_suffix(),
        labels::TFSTATE_WORKSPACE
    );
    let list = api
        .list(&ListParams::default().labels(&selector))
        .await
        .during(|| {
            format!(
                "listing state Secrets of {}/{}",
                key.namespace(),
                key.name()
            )
        })?;
    if list.items.is_empty() {
        return Ok(StateRead::Missing);
    }
    let chunks: Vec<Chunk> = list
        .items
        .into_iter()
        .map(|s| Chunk {
            name: s.metadata.name.unwrap_or_default(),
            data: s.data.and_then(|mut d| d.remove("tfstate")).map(|b| b.0),
            annotations: s.metadata.annotations.unwrap_or_default(),
        })
        .collect();
    Ok(
        match captf_state::decode(&key.state_secret(), &chunks, Limits::default()) {
            Ok(state) => StateRead::Found(Box::new(state), chunks),
            Err(e) => StateRead::Unreadable(e),
        },
    )
}

/// The durable inputs Secret's metadata and files, if it exists.
#[derive(Debug, Default)]
pub struct DurableInputs {
    pub exists: bool,
    pub annotations: BTreeMap<String, String>,
    pub tfvars: Option<serde_json::Value>,
    /// Bytes of `main.tf.json` and `terraform.tfvars.json` together.
    pub rendered_size: usize,
    /// Pools: the canonical JSON of the exports the last successful apply rendered (its own data
    /// key, see [`crate::reconcile::kinds::pool::exports::APPLIED_EXPORTS_KEY`]).
    pub applied_exports: Option<Vec<u8>>,
}

impl DurableInputs {
    /// The object applied at least once (survives a lost status and clusterctl move).
    pub fn applied(&self) -> bool {
        self.annotations
            .get(annotations::APPLIED)
            .is_some_and(|v| v == "true")
            || self.annotations.contains_key(annotations::IMAGE_DIGEST)
    }

    /// The digest the last successful apply ran, as a reference a pod can pull.
    pub fn pinned_image(&self) -> Option<String> {
        self.annotations
            .get(annotations::IMAGE_DIGEST)
            .and_then(|id| captf_api::image::pullable(id))
    }

    /// The apply Job recorded as lost while it ran (`captf.io/interrupted-apply`).
    pub fn interrupted_apply(&self) -> Option<&str> {
        self.annotations
            .get(annotations::INTERRUPTED_APPLY)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The last rendered value of a boolean tfvars key.
    pub fn rendered_bool(&self, key: &str) -> bool {
        self.tfvars
            .as_ref()
            .and_then(|v| v.get(key))
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    }
}

/// Reads the durable inputs Secret live.
pub async fn durable_inputs(client: &kube::Client, key: &ObjectKey) -> Result<DurableInputs> {
    let api: Api<Secret> = Api::namespaced(client.clone(), key.namespace());
    let name = key.durable_inputs_secret();
    let Some(secret) = api
        .get_opt(&name)
        .await
        .during(|| format!("reading Secret {}/{name}", key.namespace()))?
    else {
        return Ok(DurableInputs::default());
    };
    let tfvars = secret
        .data
        .as_ref()
        .and_then(|d| d.get(captf_contract::render::TFVARS_FILE))
        .and_then(|b| serde_json::from_slice(&b.0).ok());
    let data = secret.data.unwrap_or_default();
    let size = |k: &str| data.get(k).map_or(0, |b| b.0.len());
    Ok(DurableInputs {
        exists: true,
        annotations: secret.metadata.annotations.unwrap_or_default(),
        tfvars,
        rendered_size: size(captf_contract::render::MAIN_TF_FILE)
            + size(captf_contract::render::TFVARS_FILE),
        applied_exports: data
            .get(crate::reconcile::kinds::pool::exports::APPLIED_EXPORTS_KEY)
            .map(|b| b.0.clone()),
    })
}
