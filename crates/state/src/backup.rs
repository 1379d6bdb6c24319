//! State backup sets (concepts §16.7, annotations §6.3): one backup Secret per state chunk, data
//! copied verbatim, named `<set>` then `<set>-part-N`. These helpers compute what the manager
//! writes on each backup chunk and check that a set read back is complete; only complete sets
//! are listed and restorable.

use std::collections::{BTreeMap, BTreeSet};

use captf_api::annotations;
use captf_api::names::chunk_name;
use sha2::{Digest, Sha256};

use crate::chunks::{Chunk, chunk_index};
use crate::error::{Result, StateError};
use crate::{DEFAULT_MAX_CHUNKS, DecodedState};

/// The facts about a backup that are not in the state itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupInfo<'a> {
    /// Base name of the set (`captf-state-backup-<suffix>-<serial>`, possibly with `-<digest8>`).
    pub set: &'a str,
    /// When the backup was taken (RFC 3339), written as given.
    pub taken_at: &'a str,
    /// The Job that produced the state, when known.
    pub source_job: Option<&'a str>,
}

/// SHA-256 (lowercase hex) of the concatenated compressed payload, in chunk order: the
/// `captf.io/state-backup-digest` of a set, and the source of the `-<digest8>` name suffix.
pub fn set_digest<P: AsRef<[u8]>>(payloads: &[P]) -> String {
    let mut hasher = Sha256::new();
    for p in payloads {
        hasher.update(p.as_ref());
    }
    hex::encode(hasher.finalize())
}

/// The annotations of each backup chunk, index `i` for `payloads[i]` (the state's chunks in
/// order, copied verbatim). Chunk 0 also carries `captf.io/inputs-hash` when the state has one.
pub fn backup_annotations<P: AsRef<[u8]>>(
    state: &DecodedState,
    payloads: &[P],
    info: &BackupInfo<'_>,
) -> Vec<BTreeMap<String, String>> {
    let digest = set_digest(payloads);
    let count = payloads.len().to_string();
    (0..payloads.len())
        .map(|index| {
            let mut a = BTreeMap::new();
            let mut put = |k: &str, v: String| {
                a.insert(k.to_owned(), v);
            };
            put(annotations::STATE_BACKUP_SERIAL, state.serial.to_string());
            put(annotations::STATE_BACKUP_LINEAGE, state.lineage.clone());
            put(annotations::STATE_BACKUP_TAKEN_AT, info.taken_at.to_owned());
            if let Some(job) = info.source_job {
                put(annotations::STATE_BACKUP_SOURCE_JOB, job.to_owned());
            }
            put(annotations::STATE_BACKUP_DIGEST, digest.clone());
            put(
                annotations::STATE_BACKUP_RESOURCES,
                state.managed_resources.to_string(),
            );
            put(annotations::STATE_BACKUP_SET, info.set.to_owned());
            put(annotations::STATE_BACKUP_CHUNK, index.to_string());
            put(annotations::STATE_BACKUP_CHUNKS, count.clone());
            if index == 0
                && let Some(hash) = &state.inputs_hash
            {
                put(annotations::INPUTS_HASH, hash.clone());
            }
            a
        })
        .collect()
}

/// Checks that `chunks` form one complete backup set: [`backup_set_shape`], every chunk with
/// data, and the digest matching the data. Returns the serial.
pub fn verify_backup_set(chunks: &[Chunk]) -> Result<u64> {
    let shape = backup_set_shape(chunks)?;
    let mut ordered: Vec<&Chunk> = chunks.iter().collect();
    ordered.sort_by_key(|c| chunk_index(&shape.set, &c.name));
    let mut payloads = Vec::with_capacity(ordered.len());
    for c in ordered {
        let data = c
            .data
            .as_deref()
            .ok_or_else(|| incomplete(&shape.set, format!("{} has no `tfstate` data", c.name)))?;
        payloads.push(data);
    }
    if set_digest(&payloads) != shape.digest {
        return Err(incomplete(&shape.set, DIGEST_MISMATCH));
    }
    Ok(shape.serial)
}

/// What a backup set's annotations say, once [`backup_set_shape`] found them consistent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupShape {
    /// `captf.io/state-backup-set`: the chunk 0 name.
    pub set: String,
    /// `captf.io/state-backup-serial`, at least 1.
    pub serial: u64,
    /// `captf.io/state-backup-digest`, still to be compared with the data.
    pub digest: String,
}

/// Why a set whose data does not hash to its digest is not complete.
pub const DIGEST_MISMATCH: &str = "the data does not match the recorded digest";

/// Checks what the chunks' names and annotations alone can tell, so a set can be judged from
/// its Secrets' metadata before any of its data is read: 1..=32 chunks of the same set, serial,
/// lineage, count and digest; every index `0..count` present exactly once under its name
/// (`<set>`, `<set>-part-N`); serial >= 1.
pub fn backup_set_shape(chunks: &[Chunk]) -> Result<BackupShape> {
    let first = chunks
        .first()
        .ok_or_else(|| incomplete("(none)", "no chunk"))?;
    let set = first
        .annotations
        .get(annotations::STATE_BACKUP_SET)
        .ok_or_else(|| incomplete(&first.name, format!("{} has no set annotation", first.name)))?
        .as_str();

    let field = |c: &Chunk, key: &str| -> Result<String> {
        c.annotations
            .get(key)
            .cloned()
            .ok_or_else(|| incomplete(set, format!("{} lacks annotation {key}", c.name)))
    };
    let number = |c: &Chunk, key: &str| -> Result<u64> {
        field(c, key)?
            .parse()
            .map_err(|_| incomplete(set, format!("{} has a non-numeric {key}", c.name)))
    };

    let serial = number(first, annotations::STATE_BACKUP_SERIAL)?;
    let count = number(first, annotations::STATE_BACKUP_CHUNKS)?;
    let digest = field(first, annotations::STATE_BACKUP_DIGEST)?;
    let lineage = field(first, annotations::STATE_BACKUP_LINEAGE)?;
    if serial < 1 {
        return Err(incomplete(set, "serial is 0"));
    }
    if count < 1 || count > DEFAULT_MAX_CHUNKS as u64 {
        return Err(incomplete(
            set,
            format!("chunk count {count} is outside 1..={DEFAULT_MAX_CHUNKS}"),
        ));
    }

    let mut by_index: BTreeMap<u64, &Chunk> = BTreeMap::new();
    for c in chunks {
        for (key, want) in [
            (annotations::STATE_BACKUP_SET, set),
            (annotations::STATE_BACKUP_DIGEST, digest.as_str()),
            (annotations::STATE_BACKUP_LINEAGE, lineage.as_str()),
        ] {
            if field(c, key)? != want {
                return Err(incomplete(set, format!("{} has a different {key}", c.name)));
            }
        }
        for (key, want) in [
            (annotations::STATE_BACKUP_SERIAL, serial),
            (annotations::STATE_BACKUP_CHUNKS, count),
        ] {
            if number(c, key)? != want {
                return Err(incomplete(set, format!("{} has a different {key}", c.name)));
            }
        }
        let index = number(c, annotations::STATE_BACKUP_CHUNK)?;
        if index >= count {
            return Err(incomplete(
                set,
                format!(
                    "{} has chunk index {index} but the set has {count} chunk(s)",
                    c.name
                ),
            ));
        }
        let expected_name = chunk_name(set, index as usize);
        if c.name != expected_name {
            return Err(incomplete(
                set,
                format!(
                    "chunk {index} is named {} instead of {expected_name}",
                    c.name
                ),
            ));
        }
        if by_index.insert(index, c).is_some() {
            return Err(incomplete(set, format!("chunk {index} appears twice")));
        }
    }
    let present: BTreeSet<u64> = by_index.keys().copied().collect();
    let missing: Vec<String> = (0..count)
        .filter(|i| !present.contains(i))
        .map(|i| chunk_name(set, i as usize))
        .collect();
    if !missing.is_empty() {
        return Err(incomplete(
            set,
            format!("chunk Secret(s) missing: {}", missing.join(", ")),
        ));
    }
    Ok(BackupShape {
        set: set.to_owned(),
        serial,
        digest,
    })
}

fn incomplete(set: &str, problem: impl Into<String>) -> StateError {
    StateError::BackupIncomplete {
        set: set.to_owned(),
        problem: problem.into(),
    }
}
