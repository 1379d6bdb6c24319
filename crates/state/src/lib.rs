//! CAPTF's own reader of the Terraform/OpenTofu state that the engines' `kubernetes` backend keeps
//! in Secrets (concepts §16), and helpers for state backup sets (§16.7). Pure: no client, no I/O;
//! the manager lists the Secrets and adapts them into [`Chunk`]s.
//!
//! - [`decode`]: order and check the chunks ([`chunks`]), decompress under a hard cap, only the
//!   first gzip member (module `gzip`), read the few fields CAPTF needs ([`document`]);
//! - [`StateError`]: each failure and its `StateReadable` reason; [`classify_missing`] for the
//!   case with no Secret at all;
//! - [`backup`]: the digest and annotations of a backup set, and the completeness check.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backup;
pub mod chunks;
pub mod document;
pub mod error;
mod gzip;

use std::collections::{BTreeMap, BTreeSet};

use captf_api::annotations;

pub use backup::{
    BackupInfo, BackupShape, DIGEST_MISMATCH, backup_annotations, backup_set_shape, set_digest,
    verify_backup_set,
};
pub use chunks::{Chunk, chunk_index};
pub use document::OutputLimits;
pub use error::{Result, StateError, StateReadableReason, classify_missing};

/// Default cap on the number of chunk Secrets (spec README rule 4).
pub const DEFAULT_MAX_CHUNKS: usize = 32;
/// Default cap on the decompressed state size: 64 MiB (spec README rule 4).
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 64 * 1024 * 1024;

/// The reader's caps; exceeding any reads as `StateCorrupt`, naming the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most chunk Secrets accepted.
    pub max_chunks: usize,
    /// Most bytes the state may decompress to; decompression stops there.
    pub max_decompressed_bytes: usize,
    /// The caps on the root outputs.
    pub outputs: OutputLimits,
}

impl Limits {
    /// 32 chunks, 64 MiB, and [`OutputLimits::DEFAULT`].
    pub const DEFAULT: Limits = Limits {
        max_chunks: DEFAULT_MAX_CHUNKS,
        max_decompressed_bytes: DEFAULT_MAX_DECOMPRESSED_BYTES,
        outputs: OutputLimits::DEFAULT,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// What CAPTF reads from a state (concepts §16.3.6).
///
/// `Debug` prints output names but never their values: outputs may be sensitive and must not
/// reach logs.
#[derive(Clone, PartialEq)]
pub struct DecodedState {
    /// The state serial.
    pub serial: u64,
    /// The state lineage.
    pub lineage: String,
    /// The engine version that wrote the state (Terraform or OpenTofu).
    pub terraform_version: String,
    /// Root module outputs: name to `value`.
    pub outputs: BTreeMap<String, serde_json::Value>,
    /// Names of the outputs marked `sensitive`.
    pub sensitive_outputs: BTreeSet<String>,
    /// Managed resource blocks, all modules; a resource with `count`/`for_each` counts once, data
    /// sources do not count.
    pub managed_resources: u64,
    /// Size of the concatenated `tfstate` data of all chunks (what the Secrets hold).
    pub compressed_bytes: u64,
    /// Size of the decompressed state JSON.
    pub decompressed_bytes: u64,
    /// Number of chunk Secrets read (base included).
    pub chunks: usize,
    /// `captf.io/inputs-hash` from the base Secret; `None` when absent or empty (the state was
    /// not adopted yet: `StateWithoutInputsHash`).
    pub inputs_hash: Option<String>,
}

impl std::fmt::Debug for DecodedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodedState")
            .field("serial", &self.serial)
            .field("lineage", &self.lineage)
            .field("terraform_version", &self.terraform_version)
            .field("outputs", &self.outputs.keys().collect::<Vec<_>>())
            .field("sensitive_outputs", &self.sensitive_outputs)
            .field("managed_resources", &self.managed_resources)
            .field("compressed_bytes", &self.compressed_bytes)
            .field("decompressed_bytes", &self.decompressed_bytes)
            .field("chunks", &self.chunks)
            .field("inputs_hash", &self.inputs_hash)
            .finish()
    }
}

/// Reads the state whose base Secret is `base_name` from its chunk Secrets (any order).
///
/// Checks, in this order (concepts §16.3): the number of chunks (`Corrupt`); names, duplicates,
/// gaps, the base and the `tfstate` key (`Inconsistent`); gzip, truncation and the decompressed
/// cap (`Corrupt`); the encryption envelope (`Encrypted`); the version (`UnsupportedVersion`);
/// the required fields (`Corrupt`). Decompression stops at the end of the first gzip member, so
/// one stale surplus chunk left by a shrink is tolerated (see the `gzip` module docs).
///
/// An empty `chunks` reads as `Inconsistent` (base missing); a caller that found no Secret at all
/// should use [`classify_missing`] instead.
pub fn decode(base_name: &str, chunks: &[Chunk], limits: Limits) -> Result<DecodedState> {
    if chunks.len() > limits.max_chunks {
        return Err(StateError::corrupt(
            base_name,
            format!(
                "{} chunk Secrets exceed the cap of {}",
                chunks.len(),
                limits.max_chunks
            ),
        ));
    }
    let ordered = chunks::order(base_name, chunks)?;
    let base = ordered[0];
    if let Some(enc) = base.annotations.get(annotations::ENCODING)
        && enc != "gzip"
    {
        return Err(StateError::corrupt(
            base_name,
            format!("the base Secret's `encoding` annotation is {enc:?}; only gzip is supported"),
        ));
    }
    let parts: Vec<&[u8]> = ordered
        .iter()
        .map(|c| c.data.as_deref().unwrap_or_default())
        .collect();
    let compressed_bytes = parts.iter().map(|p| p.len() as u64).sum();
    let json = gzip::gunzip_first_member(&parts, limits.max_decompressed_bytes)
        .map_err(|e| StateError::corrupt(base_name, e.to_string()))?;
    let doc = document::parse(base_name, &json, &limits.outputs)?;
    Ok(DecodedState {
        serial: doc.serial,
        lineage: doc.lineage,
        terraform_version: doc.terraform_version,
        outputs: doc.outputs,
        sensitive_outputs: doc.sensitive_outputs,
        managed_resources: doc.managed_resources,
        compressed_bytes,
        decompressed_bytes: json.len() as u64,
        chunks: ordered.len(),
        inputs_hash: base
            .annotations
            .get(annotations::INPUTS_HASH)
            .filter(|h| !h.is_empty())
            .cloned(),
    })
}
