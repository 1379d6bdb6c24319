//! Which Secrets form the object's backup sets, and which of those count as its own: grouping
//! by `captf.io/state-backup-set`, the ownership of each chunk, the completeness judged from
//! metadata, then from the data's digest. All pure.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use captf_api::{annotations, finalizers};
use captf_state::{Chunk, DIGEST_MISMATCH, StateError, backup_set_shape, chunk_index, set_digest};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;

use crate::job::RestoreSource;
use crate::job::build::STATE_DATA_KEY;

/// The object a backup Secret may belong to: its UID, and the kind and name that an owner
/// reference left by an earlier object of the same name still carries.
#[derive(Clone, Copy, Debug)]
pub struct Object<'a> {
    pub uid: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
}

impl<'a> Object<'a> {
    /// The object `owner` references.
    pub fn of(owner: &'a OwnerReference) -> Self {
        Object {
            uid: &owner.uid,
            kind: &owner.kind,
            name: &owner.name,
        }
    }
}

/// Whose a set is, by its Secrets' owner references.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Every chunk names the object's UID: the manager wrote it for the object.
    Owned,
    /// Some chunks name no owner at all, or only an earlier object of the same kind and name
    /// (the rest the object): restored without owner references (`captf dr import`, a
    /// namespace backup), kept by the state protection after the earlier object went without
    /// its cleanup, or re-owned half-way. It counts when it holds the object's own lineage,
    /// and is then re-owned.
    Ownerless,
    /// A chunk names another owner: not the object's, whatever its labels say.
    Foreign,
}

/// One backup set as listed: the Secrets that share a `captf.io/state-backup-set`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupSet {
    /// Base name of the set (chunk 0's Secret name); a Secret without the set annotation forms a
    /// set of its own under its name.
    pub base: String,
    /// `captf.io/state-backup-serial`; 0 when absent or not a number.
    pub serial: u64,
    /// `captf.io/state-backup-lineage`; empty when absent.
    pub lineage: String,
    /// `captf.io/state-backup-digest`; empty when absent.
    pub digest: String,
    /// `captf.io/state-backup-taken-at`; `None` when absent or not RFC 3339.
    pub taken_at: Option<Timestamp>,
    /// `captf.io/state-backup-source-job`, when recorded.
    pub source_job: Option<String>,
    /// `captf.io/state-backup-resources`; 0 when absent or not a number.
    pub resources: u64,
    /// `captf.io/inputs-hash` of chunk 0, when recorded and not empty.
    pub inputs_hash: Option<String>,
    /// Size of the `tfstate` data summed over the listed Secrets.
    pub bytes: u64,
    /// `captf.io/state-backup-chunks`; 0 when absent or not a number.
    pub chunks: usize,
    /// The Secrets listed: in chunk order when complete, else by chunk index then name.
    pub secrets: Vec<String>,
    /// Why the set is incomplete; `None` when nothing wrong was found (yet: see `verified`).
    pub problem: Option<String>,
    /// The data was read and compared with the digest ([`settle`]).
    pub verified: bool,
    /// Whose the set is.
    pub ownership: Ownership,
}

impl BackupSet {
    /// Every chunk present and consistent, serial >= 1, the annotations readable, the data
    /// matching the digest: only such a set is listed in `status.stateBackups` and can be
    /// restored.
    pub fn complete(&self) -> bool {
        self.verified && self.problem.is_none()
    }

    /// What a restore Job needs, for a complete set.
    pub fn restore_source(&self) -> Option<RestoreSource> {
        if !self.complete() || self.lineage.is_empty() {
            return None;
        }
        Some(RestoreSource {
            serial: i64::try_from(self.serial).ok()?,
            chunk_secrets: self.secrets.clone(),
            managed_resources: self.resources,
            lineage: self.lineage.clone(),
        })
    }
}

/// Newest first: highest serial, then latest taken-at (unknown last), then base name (so the
/// order is total and stable).
pub fn newest_first(a: &BackupSet, b: &BackupSet) -> Ordering {
    b.serial
        .cmp(&a.serial)
        .then_with(|| b.taken_at.cmp(&a.taken_at))
        .then_with(|| b.base.cmp(&a.base))
}

/// Groups backup Secrets (their metadata) into sets by `captf.io/state-backup-set`, newest
/// first, and checks what the metadata can tell: a set's data is still to be compared with its
/// digest ([`settle`]). `object` is whose they may be, for [`Ownership`]. Secrets being deleted
/// are ignored, except those the state protection holds: someone else deleted them (the
/// garbage collector, a namespace deletion, a hand), and they stay readable until released.
pub fn sets(secrets: &[ObjectMeta], object: Object<'_>) -> Vec<BackupSet> {
    let mut groups: BTreeMap<String, Vec<(Chunk, Ownership)>> = BTreeMap::new();
    for meta in secrets {
        let held = meta
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == finalizers::STATE_PROTECTION);
        if meta.deletion_timestamp.is_some() && !held {
            continue;
        }
        let chunk = Chunk {
            name: meta.name.clone().unwrap_or_default(),
            data: None,
            annotations: meta.annotations.clone().unwrap_or_default(),
        };
        let set = chunk
            .annotations
            .get(annotations::STATE_BACKUP_SET)
            .cloned()
            .unwrap_or_else(|| chunk.name.clone());
        groups
            .entry(set)
            .or_default()
            .push((chunk, ownership(meta, object)));
    }
    let mut out: Vec<BackupSet> = groups
        .into_iter()
        .map(|(base, chunks)| {
            let owned = if chunks.iter().any(|(_, o)| *o == Ownership::Foreign) {
                Ownership::Foreign
            } else if chunks.iter().any(|(_, o)| *o == Ownership::Ownerless) {
                Ownership::Ownerless
            } else {
                Ownership::Owned
            };
            group(base, chunks.into_iter().map(|(c, _)| c).collect(), owned)
        })
        .collect();
    out.sort_by(newest_first);
    out
}

/// One chunk's [`Ownership`]. A reference to another UID under the object's own kind and name
/// is an earlier object's (two cannot share a name at once, so it is gone): as good as none.
pub(super) fn ownership(meta: &ObjectMeta, object: Object<'_>) -> Ownership {
    let refs = meta.owner_references.as_deref().unwrap_or_default();
    let own = |r: &OwnerReference| !object.uid.is_empty() && r.uid == object.uid;
    let earlier =
        |r: &OwnerReference| r.uid != object.uid && r.kind == object.kind && r.name == object.name;
    if refs.iter().any(|r| !own(r) && !earlier(r)) {
        Ownership::Foreign
    } else if !refs.is_empty() && refs.iter().all(own) {
        Ownership::Owned
    } else {
        Ownership::Ownerless
    }
}

/// The sets that count for the object, and the names of those that do not: an owned set
/// counts; an ownerless one only when it holds `lineage`, the object's own (unknown: none
/// does); a foreign one never.
pub fn trusted(sets: Vec<BackupSet>, lineage: Option<&str>) -> (Vec<BackupSet>, Vec<String>) {
    let (counted, ignored): (Vec<BackupSet>, Vec<BackupSet>) =
        sets.into_iter().partition(|s| match s.ownership {
            Ownership::Owned => true,
            Ownership::Ownerless => lineage.is_some_and(|l| s.lineage == l),
            Ownership::Foreign => false,
        });
    (counted, ignored.into_iter().map(|s| s.base).collect())
}

/// Records what reading the set's data found: `read` is the SHA-256 (lowercase hex) of its
/// chunks' payloads in chunk order and their size, or `None` when a chunk has no `tfstate`
/// data (`missing` names it). A set already found incomplete stays so.
pub fn settle(set: &mut BackupSet, read: std::result::Result<(String, u64), String>) {
    set.verified = true;
    if set.problem.is_some() {
        return;
    }
    match read {
        Ok((digest, bytes)) if digest == set.digest => set.bytes = bytes,
        Ok(_) => set.problem = Some(DIGEST_MISMATCH.to_owned()),
        Err(missing) => set.problem = Some(format!("{missing} has no `{STATE_DATA_KEY}` data")),
    }
}

/// [`sets`] and [`settle`] over Secrets with their data in hand (a set just written).
pub fn read_back(secrets: &[Secret], object: Object<'_>) -> Vec<BackupSet> {
    let metas: Vec<ObjectMeta> = secrets.iter().map(|s| s.metadata.clone()).collect();
    let data = |name: &str| {
        secrets
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .and_then(|s| s.data.as_ref()?.get(STATE_DATA_KEY))
            .map(|b| b.0.as_slice())
    };
    let mut out = sets(&metas, object);
    for set in &mut out {
        let payloads: std::result::Result<Vec<&[u8]>, String> = set
            .secrets
            .iter()
            .map(|name| data(name).ok_or_else(|| name.clone()))
            .collect();
        let read = payloads.map(|p| {
            let bytes = p.iter().map(|d| d.len() as u64).sum();
            (set_digest(&p), bytes)
        });
        settle(set, read);
    }
    out
}

fn group(base: String, mut chunks: Vec<Chunk>, ownership: Ownership) -> BackupSet {
    chunks.sort_by(|a, b| {
        let index = |c: &Chunk| chunk_index(&base, &c.name).unwrap_or(usize::MAX);
        index(a).cmp(&index(b)).then_with(|| a.name.cmp(&b.name))
    });
    // Chunk 0 (sorted first when present) speaks for the set.
    let get = |key: &str| chunks.iter().find_map(|c| c.annotations.get(key));
    let number = |key: &str| get(key).and_then(|v| v.parse::<u64>().ok());
    let serial = number(annotations::STATE_BACKUP_SERIAL);
    let taken_at =
        get(annotations::STATE_BACKUP_TAKEN_AT).and_then(|v| v.parse::<Timestamp>().ok());
    let resources = number(annotations::STATE_BACKUP_RESOURCES);
    let problem = match backup_set_shape(&chunks) {
        Err(StateError::BackupIncomplete { problem, .. }) => Some(problem),
        Err(other) => Some(other.to_string()),
        Ok(_) if taken_at.is_none() => Some(format!(
            "{} is missing or not an RFC 3339 time",
            annotations::STATE_BACKUP_TAKEN_AT
        )),
        Ok(_) if resources.is_none() => Some(format!(
            "{} is missing or not a number",
            annotations::STATE_BACKUP_RESOURCES
        )),
        Ok(_) => None,
    };
    BackupSet {
        serial: serial.unwrap_or(0),
        lineage: get(annotations::STATE_BACKUP_LINEAGE)
            .cloned()
            .unwrap_or_default(),
        digest: get(annotations::STATE_BACKUP_DIGEST)
            .cloned()
            .unwrap_or_default(),
        taken_at,
        source_job: get(annotations::STATE_BACKUP_SOURCE_JOB).cloned(),
        resources: resources.unwrap_or(0),
        inputs_hash: chunks
            .iter()
            .find(|c| c.name == base)
            .and_then(|c| c.annotations.get(annotations::INPUTS_HASH))
            .filter(|h| !h.is_empty())
            .cloned(),
        // Counted when the data is read (`settle`).
        bytes: 0,
        chunks: number(annotations::STATE_BACKUP_CHUNKS)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0),
        secrets: chunks.iter().map(|c| c.name.clone()).collect(),
        problem,
        verified: false,
        ownership,
        base,
    }
}
