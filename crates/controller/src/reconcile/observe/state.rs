//! Reading the state (live, only while no Job runs) and the durable inputs Secret.

use std::collections::BTreeMap;

use captf_api::names::ObjectKey;
use captf_api::{annotations, labels};
use captf_state::{Chunk, DecodedState, Limits, StateError};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

use crate::error::{KubeContext, Result};
use crate::reconcile::Context;
use crate::reconcile::pass::{Pass, Workload};
use kube::Resource;

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

/// How many state reads fetch and decode at once, manager-wide. A read holds up to 32 chunks
/// (32 MiB) and its decompressed JSON (up to 64 MiB) until it is decoded: this bounds what
/// all passes together spend on states, whatever the tenants put in them.
pub const CONCURRENT_READS: usize = 2;

/// Reads the object's state live, bounded before any data is fetched: one page of at most
/// 33 Secrets' metadata under the backend's own labels (more than the 32-chunk cap is corrupt,
/// a name that is no chunk's is inconsistent, as the engine would find them too), then each
/// chunk's data by name. What a tenant or a module plants under the state's labels costs one
/// page of metadata, never its data. Decoding runs off the async runtime, at most
/// [`CONCURRENT_READS`] at once.
pub async fn read(ctx: &Context, key: &ObjectKey) -> Result<StateRead> {
    read_gated(&ctx.client, &ctx.state_reads, key).await
}

/// [`read`] with the semaphore `gate` bounding how many reads run at once.
pub async fn read_gated(
    client: &kube::Client,
    gate: &tokio::sync::Semaphore,
    key: &ObjectKey,
) -> Result<StateRead> {
    let _permit = gate
        .acquire()
        .await
        .map_err(|_| crate::Error::Panicked("the state readers' semaphore was closed".into()))?;
    let api: Api<Secret> = Api::namespaced(client.clone(), key.namespace());
    let base = key.state_secret();
    let limits = Limits::default();
    let selector = format!(
        "{}=true,{}={},{}=default",
        labels::TFSTATE,
        labels::TFSTATE_SECRET_SUFFIX,
        key.state_suffix(),
        labels::TFSTATE_WORKSPACE
    );
    let during = || {
        format!(
            "listing the state Secrets of {}/{}",
            key.namespace(),
            key.name()
        )
    };
    let cap = u32::try_from(limits.max_chunks).unwrap_or(u32::MAX);
    let page = api
        .list_metadata(&ListParams::default().labels(&selector).limit(cap + 1))
        .await
        .during(during)?;
    let more = page
        .metadata
        .continue_
        .as_ref()
        .is_some_and(|c| !c.is_empty());
    if page.items.len() > limits.max_chunks || more {
        let why = format!(
            "more than {} Secrets carry the state's labels; a state has at most {} chunk Secrets. Delete the ones that are not this state's",
            limits.max_chunks, limits.max_chunks
        );
        return Ok(StateRead::Unreadable(StateError::corrupt(&base, why)));
    }
    if page.items.is_empty() {
        return Ok(StateRead::Missing);
    }
    let mut names: Vec<String> = Vec::with_capacity(page.items.len());
    for meta in page.items {
        let name = meta.metadata.name.unwrap_or_default();
        if captf_state::chunk_index(&base, &name).is_none() {
            let why = format!(
                "matches the state's labels but is neither {base} nor {base}-part-N (N >= 1 without leading zeros)"
            );
            return Ok(StateRead::Unreadable(StateError::inconsistent(name, why)));
        }
        names.push(name);
    }
    let mut chunks = Vec::with_capacity(names.len());
    for name in names {
        let Some(secret) = api
            .get_opt(&name)
            .await
            .during(|| format!("reading Secret {}/{name}", key.namespace()))?
        else {
            // Deleted since the list (a Job may have just shrunk it): read again next pass.
            let why = "was listed but is gone: the state changed while it was read";
            return Ok(StateRead::Unreadable(StateError::inconsistent(name, why)));
        };
        chunks.push(chunk(name, secret));
    }
    let decoded = tokio::task::spawn_blocking(move || {
        let decoded = captf_state::decode(&base, &chunks, limits);
        (decoded, chunks)
    })
    .await
    .map_err(|e| crate::Error::Panicked(format!("decoding the state: {e}")))?;
    Ok(match decoded {
        (Ok(state), chunks) => StateRead::Found(Box::new(state), chunks),
        (Err(e), _) => StateRead::Unreadable(e),
    })
}

/// Data key of the pool's durable inputs Secret holding the canonical JSON of the exports its
/// last successful apply rendered. Written only after a successful apply, by its own patch, so
/// the rewrite of `main.tf.json` and `terraform.tfvars.json` when an apply starts leaves it.
pub const APPLIED_EXPORTS_KEY: &str = "applied-cluster-outputs.json";

/// The durable inputs Secret's metadata and files, if it exists.
#[derive(Debug, Default)]
pub struct DurableInputs {
    pub exists: bool,
    pub annotations: BTreeMap<String, String>,
    pub tfvars: Option<serde_json::Value>,
    /// Bytes of `main.tf.json` and `terraform.tfvars.json` together.
    pub rendered_size: usize,
    /// Whether each of `main.tf.json` and `terraform.tfvars.json` is there.
    pub rendered: (bool, bool),
    /// Pools: the canonical JSON of the exports the last successful apply rendered (its own data
    /// key, see [`APPLIED_EXPORTS_KEY`]).
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

    /// A destroy can be rendered from them: the Secret holds both files of the last apply.
    pub fn renders_destroy(&self) -> bool {
        self.exists && self.rendered.0 && self.rendered.1
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
/// One state Secret as the state reader takes it: its `tfstate` data and annotations.
pub fn chunk(name: String, secret: k8s_openapi::api::core::v1::Secret) -> Chunk {
    Chunk {
        name,
        data: secret
            .data
            .and_then(|mut d| d.remove("tfstate"))
            .map(|b| b.0),
        annotations: secret.metadata.annotations.unwrap_or_default(),
    }
}

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
        rendered: (
            data.contains_key(captf_contract::render::MAIN_TF_FILE),
            data.contains_key(captf_contract::render::TFVARS_FILE),
        ),
        applied_exports: data.get(APPLIED_EXPORTS_KEY).map(|b| b.0.clone()),
    })
}

/// What [`Pass::observe`] read.
pub struct Observed {
    pub state: StateRead,
    pub lock: crate::reconcile::observe::locks::Lock,
}

impl<K> Pass<'_, K>
where
    K: Workload + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// What every pass of a live object reads once no Job runs: its state and the engine's
    /// lock, at once, since neither depends on the other.
    pub async fn observe(&self) -> Result<Observed> {
        let client = &self.ctx.client;
        let (state, lock) = futures::try_join!(
            crate::reconcile::observe::state::read(self.ctx, self.key),
            crate::reconcile::observe::locks::inspect(client, self.key),
        )?;
        Ok(Observed { state, lock })
    }
}

/// The serial of a state, 0 when there is none.
pub fn state_serial(state: &StateRead) -> u64 {
    match state {
        StateRead::Found(s, _) => s.serial,
        _ => 0,
    }
}
