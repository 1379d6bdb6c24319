//! State backups of one object (docs/backups.md): after a pass reads a state serial that has no
//! backup yet, its chunks are copied verbatim into `captf-state-backup-<suffix>-<serial>` (and
//! `-part-N`), then older sets are pruned down to `--state-backups`.
//!
//! The planning is pure ([`sets`], [`trusted`], [`settle`], [`plan`], [`prune`],
//! [`status_entries`], [`digest`], [`backup_secrets`]); [`list`] and [`take`] do the I/O. The
//! digest, the per-chunk annotations and the completeness check come from
//! [`captf_state::backup`].
//!
//! Anyone who can write Secrets in the namespace can make a look-alike: the labels and names are
//! public. So a set counts only when it is the object's ([`Ownership`]), sets are listed by
//! their metadata (one bounded page), and a set's data is read one chunk at a time, only to
//! check the digest of a set that counts.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use captf_api::names::{ObjectKey, chunk_name};
use captf_api::{MAX_STATE_BACKUPS, StateBackup, annotations, finalizers, labels};
use captf_state::{
    BackupInfo, Chunk, DEFAULT_MAX_CHUNKS, DIGEST_MISMATCH, DecodedState, StateError,
    backup_annotations, backup_set_shape, chunk_index, set_digest,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};

use crate::error::{Error, KubeContext, Result};
use crate::job::build::STATE_DATA_KEY;
use crate::job::{RestoreSource, backend_labels};

/// `captf_state_backups_total{result}`: a backup was written.
pub const RESULT_TAKEN: &str = "taken";
/// `captf_state_backups_total{result}`: a backup was due but not taken.
pub const RESULT_SKIPPED: &str = "skipped";
/// `captf_state_backups_total{result}`: [`take`] returned an error.
pub const RESULT_FAILED: &str = "failed";

/// The most Secrets one object's backup listing reads: its own sets are at most 16 kept plus
/// one being written, of at most 32 chunks each. More is a look-alike flood, refused before it
/// costs memory.
pub const MAX_LISTED: u32 = 17 * DEFAULT_MAX_CHUNKS as u32;

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
fn ownership(meta: &ObjectMeta, object: Object<'_>) -> Ownership {
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

/// The state's chunks (from a live list, any order) in chunk order: `base`, `<base>-part-1`, ...
/// Fails, naming the problem, on a foreign name, a duplicate index, a gap, a chunk without
/// `tfstate`, no chunk at all, or more than 32 chunks (a backup set holds at most 32).
pub fn ordered_chunks<'a>(
    base: &str,
    chunks: &'a [Chunk],
) -> std::result::Result<Vec<&'a Chunk>, String> {
    let mut by_index: BTreeMap<usize, &Chunk> = BTreeMap::new();
    for chunk in chunks {
        let index = chunk_index(base, &chunk.name)
            .ok_or_else(|| format!("{} is neither {base} nor {base}-part-N", chunk.name))?;
        if by_index.insert(index, chunk).is_some() {
            return Err(format!("chunk index {index} appears twice"));
        }
    }
    if by_index.is_empty() {
        return Err("no state chunk".to_owned());
    }
    if by_index.len() > DEFAULT_MAX_CHUNKS {
        return Err(format!(
            "{} chunks exceed the {DEFAULT_MAX_CHUNKS} a backup set may hold",
            by_index.len()
        ));
    }
    if let Some((gap, _)) = by_index.keys().enumerate().find(|(i, k)| i != *k) {
        return Err(format!("{} is missing", chunk_name(base, gap)));
    }
    let ordered: Vec<&Chunk> = by_index.into_values().collect();
    if let Some(c) = ordered.iter().find(|c| c.data.is_none()) {
        return Err(format!("{} has no `{STATE_DATA_KEY}` data", c.name));
    }
    Ok(ordered)
}

/// Lowercase hex SHA-256 of the chunks' payloads concatenated in the given (chunk) order: the
/// set's `captf.io/state-backup-digest`.
pub fn digest(ordered: &[&Chunk]) -> String {
    let payloads: Vec<&[u8]> = ordered
        .iter()
        .map(|c| c.data.as_deref().unwrap_or_default())
        .collect();
    set_digest(&payloads)
}

/// What to do with the state read now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// A complete set already holds this serial with this digest (e.g. the state a restore wrote
    /// back): nothing to copy.
    AlreadyBackedUp {
        /// Base name of that set.
        name: String,
    },
    /// Write a new set under `name`, after deleting `replace` (the Secrets of an incomplete set
    /// of that name, e.g. a copy interrupted half-way).
    Take { name: String, replace: Vec<String> },
    /// Both names the set could take are held by Secrets that are not the object's.
    Occupied { names: [String; 2] },
}

/// Names the set for `serial` with `digest`: `captf-state-backup-<suffix>-<serial>`, or with
/// `-<digest8>` when a set of that name exists with another digest or the name is `occupied`
/// (a Secret of a set that does not count, [`trusted`]).
pub fn plan(
    existing: &[BackupSet],
    occupied: &BTreeSet<String>,
    key: &ObjectKey,
    serial: u64,
    digest: &str,
) -> Plan {
    if let Some(set) = existing
        .iter()
        .filter(|s| s.complete() && s.serial == serial && s.digest == digest)
        .min_by(|a, b| newest_first(a, b))
    {
        return Plan::AlreadyBackedUp {
            name: set.base.clone(),
        };
    }
    let plain = key.backup_secret(serial);
    let with_digest = key.backup_secret_with_digest(serial, digest);
    let held =
        |base: &str| (0..DEFAULT_MAX_CHUNKS).any(|i| occupied.contains(&chunk_name(base, i)));
    let name = if existing
        .iter()
        .any(|s| s.base == plain && s.digest != digest)
        || held(&plain)
    {
        if held(&with_digest) {
            return Plan::Occupied {
                names: [plain, with_digest],
            };
        }
        with_digest
    } else {
        plain
    };
    let replace = existing
        .iter()
        .filter(|s| s.base == name)
        .flat_map(|s| s.secrets.iter().cloned())
        .collect();
    Plan::Take { name, replace }
}

/// The sets [`prune`] deletes.
fn doomed<'a>(
    sets: &'a [BackupSet],
    keep: usize,
    pending_restore: Option<u64>,
    current: Option<&str>,
) -> Vec<&'a BackupSet> {
    if keep == 0 {
        return Vec::new();
    }
    let mut sorted: Vec<&BackupSet> = sets.iter().collect();
    sorted.sort_by(|a, b| newest_first(a, b));
    let newest = sorted.first().map(|s| s.base.clone());
    let mut kept = 0;
    let mut out = Vec::new();
    for set in sorted {
        if pending_restore == Some(set.serial) {
            continue;
        }
        if !set.complete() {
            if newest.as_deref() != Some(set.base.as_str()) {
                out.push(set);
            }
        } else if kept < keep {
            kept += 1;
        } else if current != Some(set.base.as_str()) {
            out.push(set);
        }
    }
    out
}

/// The Secrets retention deletes, set by set, newest set first. Sets are ranked newest first
/// (highest serial, then latest taken-at) and:
///
/// - `keep == 0`: nothing is deleted (backups are off; existing ones stay);
/// - a set whose serial a pending restore names is never deleted and does not count;
/// - an incomplete set is deleted, unless it is the newest set of all (it may still be written);
/// - the newest `keep` complete sets stay, older complete sets are deleted, except `current`
///   (the set holding the state read now): it counts when among the newest `keep` and is never
///   deleted. It can rank below them after a restore wrote back an older serial; deleting it
///   would only copy it again on the next pass.
pub fn prune(
    sets: &[BackupSet],
    keep: usize,
    pending_restore: Option<u64>,
    current: Option<&str>,
) -> Vec<String> {
    doomed(sets, keep, pending_restore, current)
        .into_iter()
        .flat_map(|s| s.secrets.iter().cloned())
        .collect()
}

/// `status.stateBackups`: the complete sets, newest first, at most [`MAX_STATE_BACKUPS`].
pub fn status_entries(sets: &[BackupSet]) -> Vec<StateBackup> {
    let mut complete: Vec<&BackupSet> = sets.iter().filter(|s| s.complete()).collect();
    complete.sort_by(|a, b| newest_first(a, b));
    complete
        .into_iter()
        .filter_map(|s| {
            Some(StateBackup {
                serial: i64::try_from(s.serial).ok()?,
                taken_at: Time(s.taken_at?),
                bytes: i64::try_from(s.bytes).unwrap_or(i64::MAX),
            })
        })
        .take(MAX_STATE_BACKUPS)
        .collect()
}

/// The newest complete set holding `serial`: what `captf.io/restore-state: <serial>` restores.
pub fn restorable(sets: &[BackupSet], serial: u64) -> Option<&BackupSet> {
    sets.iter()
        .filter(|s| s.complete() && s.serial == serial)
        .min_by(|a, b| newest_first(a, b))
}

/// Why [`take`] copied nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// `--state-backups=0`.
    Disabled,
    /// The object is being deleted.
    Deleting,
    /// No readable state, or its chunks do not form a whole set.
    StateUnreadable,
    /// The state's serial is below 1.
    NoSerial,
}

impl SkipReason {
    /// A bounded label for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Disabled => "disabled",
            SkipReason::Deleting => "deleting",
            SkipReason::StateUnreadable => "state_unreadable",
            SkipReason::NoSerial => "no_serial",
        }
    }
}

/// Whether a backup is out of the question, in this order: backups off, object deleting, no
/// readable state, serial < 1.
pub fn skip_reason(
    keep: usize,
    deleting: bool,
    state: Option<&DecodedState>,
) -> Option<SkipReason> {
    match state {
        _ if keep == 0 => Some(SkipReason::Disabled),
        _ if deleting => Some(SkipReason::Deleting),
        None => Some(SkipReason::StateUnreadable),
        Some(s) if s.serial < 1 => Some(SkipReason::NoSerial),
        Some(_) => None,
    }
}

/// What [`take`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A new set was written; `pruned` are the Secrets retention deleted afterwards.
    Taken { name: String, pruned: Vec<String> },
    /// The serial (with this digest) is already backed up in set `name`; retention still ran.
    AlreadyBackedUp { name: String, pruned: Vec<String> },
    /// Nothing was copied and nothing pruned.
    Skipped(SkipReason),
}

impl Outcome {
    /// The `result` label of `captf_state_backups_total`, or `None` when there is nothing to
    /// count (already backed up). [`take`] returns `Skipped` on every pass the reason holds: a
    /// caller counting `skipped` should do so once per state serial, not once per pass. An error
    /// from [`take`] counts as [`RESULT_FAILED`].
    pub fn result(&self) -> Option<&'static str> {
        match self {
            Outcome::Taken { .. } => Some(RESULT_TAKEN),
            Outcome::AlreadyBackedUp { .. } => None,
            Outcome::Skipped(_) => Some(RESULT_SKIPPED),
        }
    }
}

/// Everything [`take`] needs from the pass.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The object.
    pub key: &'a ObjectKey,
    /// The object's owner reference; backups get it with `controller` and
    /// `blockOwnerDeletion` cleared.
    pub owner: &'a OwnerReference,
    /// The CAPI Cluster name (`cluster.x-k8s.io/cluster-name`).
    pub cluster_name: &'a str,
    /// The state Secrets as listed (any order), adapted like the state reader does.
    pub chunks: &'a [Chunk],
    /// The state decoded from `chunks`; `None` when unreadable.
    pub state: Option<&'a DecodedState>,
    /// The Job that wrote the state, when known.
    pub source_job: Option<&'a str>,
    /// `--state-backups` (0..=16).
    pub keep: usize,
    /// The serial a pending `captf.io/restore-state` names.
    pub pending_restore: Option<u64>,
    /// The object is being deleted.
    pub deleting: bool,
    /// The pass's time (`captf.io/state-backup-taken-at`).
    pub now: Timestamp,
}

/// The Secrets of a new set `base` holding `ordered` (the state's chunks in chunk order): data
/// key `tfstate` copied verbatim, the backend labels plus `captf.io/state-backup` and
/// `captf.io/state-backup-suffix`, the backup annotations, and the object as non-controller owner.
pub fn backup_secrets(
    req: &Request<'_>,
    state: &DecodedState,
    base: &str,
    ordered: &[&Chunk],
) -> Vec<Secret> {
    let payloads: Vec<&[u8]> = ordered
        .iter()
        .map(|c| c.data.as_deref().unwrap_or_default())
        .collect();
    let taken_at = req.now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let annotations = backup_annotations(
        state,
        &payloads,
        &BackupInfo {
            set: base,
            taken_at: &taken_at,
            source_job: req.source_job,
        },
    );
    let mut labels = backend_labels(req.key, req.cluster_name);
    labels.insert(labels::STATE_BACKUP.to_owned(), labels::TRUE.to_owned());
    labels.insert(
        labels::STATE_BACKUP_SUFFIX.to_owned(),
        req.key.state_suffix(),
    );
    let owner = OwnerReference {
        controller: None,
        block_owner_deletion: None,
        ..req.owner.clone()
    };
    payloads
        .iter()
        .zip(annotations)
        .enumerate()
        .map(|(index, (payload, annotations))| Secret {
            metadata: ObjectMeta {
                name: Some(chunk_name(base, index)),
                namespace: Some(req.key.namespace().to_owned()),
                labels: Some(labels.clone()),
                annotations: Some(annotations),
                owner_references: Some(vec![owner.clone()]),
                finalizers: Some(vec![finalizers::STATE_PROTECTION.to_owned()]),
                ..Default::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(BTreeMap::from([(
                STATE_DATA_KEY.to_owned(),
                k8s_openapi::ByteString(payload.to_vec()),
            )])),
            ..Default::default()
        })
        .collect()
}

/// Whose backups a listing looks for.
#[derive(Clone, Copy, Debug)]
pub struct Whose<'a> {
    pub key: &'a ObjectKey,
    /// The object's UID.
    pub uid: &'a str,
    /// The object's own lineage, when known: an ownerless set of it counts.
    pub lineage: Option<&'a str>,
}

/// The object's backups as listed: the sets that count, newest first, and the Secrets under
/// its backup label that do not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listed {
    pub sets: Vec<BackupSet>,
    /// Sets that do not count ([`trusted`]): named in a `ForeignBackupIgnored` event, never
    /// restored, pruned or counted.
    pub ignored: Vec<String>,
    /// The Secret names of `ignored`: a new set never takes one.
    pub occupied: BTreeSet<String>,
}

/// The object's backups, listed live by `captf.io/state-backup-suffix`: one page of at most
/// [`MAX_LISTED`] Secrets' metadata (more is an error naming the limit), the sets that count
/// ([`trusted`]), then each of their data read one chunk at a time (under `gate`, the state
/// readers' semaphore) to check it against the digest.
pub async fn list(
    client: &kube::Client,
    gate: &tokio::sync::Semaphore,
    whose: &Whose<'_>,
) -> Result<Listed> {
    let key = whose.key;
    let ns = key.namespace();
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let selector = format!("{}={}", labels::STATE_BACKUP_SUFFIX, key.state_suffix());
    let page = api
        .list_metadata(&ListParams::default().labels(&selector).limit(MAX_LISTED))
        .await
        .during(|| format!("listing state backups of {ns}/{}", key.name()))?;
    if page
        .metadata
        .continue_
        .as_ref()
        .is_some_and(|c| !c.is_empty())
    {
        return Err(Error::InvalidObject(format!(
            "more than {MAX_LISTED} Secrets in {ns} carry {}={}, the backup label of {} {}; its backups are at most 17 sets of 32 chunks. Delete the Secrets under that label that the object does not own",
            labels::STATE_BACKUP_SUFFIX,
            key.state_suffix(),
            key.kind().kind(),
            key.name()
        )));
    }
    let metas: Vec<ObjectMeta> = page.items.into_iter().map(|m| m.metadata).collect();
    let object = Object {
        uid: whose.uid,
        kind: key.kind().kind(),
        name: key.name(),
    };
    let (mut counted, ignored) = trusted(sets(&metas, object), whose.lineage);
    let occupied = metas
        .iter()
        .filter(|m| {
            let set = m
                .annotations
                .as_ref()
                .and_then(|a| a.get(annotations::STATE_BACKUP_SET));
            let name = m.name.as_ref();
            ignored.iter().any(|i| Some(i) == set.or(name))
        })
        .filter_map(|m| m.name.clone())
        .collect();
    let _permit = gate
        .acquire()
        .await
        .map_err(|_| Error::Panicked("the state readers' semaphore was closed".into()))?;
    for set in counted.iter_mut().filter(|s| s.problem.is_none()) {
        let read = read_data(&api, ns, &set.secrets).await?;
        settle(set, read);
    }
    Ok(Listed {
        sets: counted,
        ignored,
        occupied,
    })
}

/// The SHA-256 of `names`' `tfstate` data in order and its size, holding one Secret at a time;
/// `Err(name)` for a chunk without data (or gone since the list).
async fn read_data(
    api: &Api<Secret>,
    ns: &str,
    names: &[String],
) -> Result<std::result::Result<(String, u64), String>> {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    let mut bytes = 0u64;
    for name in names {
        let secret = api
            .get_opt(name)
            .await
            .during(|| format!("reading state backup {ns}/{name}"))?;
        let Some(data) = secret
            .and_then(|s| s.data)
            .and_then(|mut d| d.remove(STATE_DATA_KEY))
        else {
            return Ok(Err(name.clone()));
        };
        hasher.update(&data.0);
        bytes += data.0.len() as u64;
    }
    Ok(Ok((hex::encode(hasher.finalize()), bytes)))
}

/// Backs up the state read now when its serial (with its digest) has no set yet, then applies
/// retention. Returns what happened and the sets that remain (for [`status_entries`]).
///
/// Skipped (nothing copied, nothing pruned) when [`skip_reason`] says so or the chunks do not
/// form a whole set. Creating a Secret that already exists (409) counts as written; deleting
/// one that is gone (404) as deleted. Any other API error is returned: the caller retries on
/// the next pass. Retention ([`prune`]) runs after a backup and also when the serial was already
/// backed up, so a lowered `--state-backups` takes effect without waiting for a new serial.
pub async fn take(
    client: &kube::Client,
    gate: &tokio::sync::Semaphore,
    req: &Request<'_>,
) -> Result<(Outcome, Listed)> {
    let key = req.key;
    let ns = key.namespace();
    let whose = Whose {
        key,
        uid: &req.owner.uid,
        lineage: req.state.map(|s| s.lineage.as_str()),
    };
    let mut listed = list(client, gate, &whose).await?;
    let existing = &mut listed.sets;
    let state = match (skip_reason(req.keep, req.deleting, req.state), req.state) {
        (None, Some(state)) => state,
        (reason, _) => {
            let reason = reason.unwrap_or(SkipReason::StateUnreadable);
            return Ok((Outcome::Skipped(reason), listed));
        }
    };
    let ordered = match ordered_chunks(&key.state_secret(), req.chunks) {
        Ok(ordered) => ordered,
        Err(problem) => {
            tracing::warn!(object = %format!("{ns}/{}", key.name()), %problem, "state backup skipped");
            return Ok((Outcome::Skipped(SkipReason::StateUnreadable), listed));
        }
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let digest = digest(&ordered);
    let (name, taken) = match plan(existing, &listed.occupied, key, state.serial, &digest) {
        Plan::AlreadyBackedUp { name } => (name, false),
        Plan::Take { name, replace } => {
            delete_all(&api, ns, &replace).await?;
            let secrets = backup_secrets(req, state, &name, &ordered);
            for secret in &secrets {
                create(&api, ns, secret, Object::of(req.owner)).await?;
            }
            existing.retain(|s| s.base != name);
            existing.extend(read_back(&secrets, Object::of(req.owner)));
            existing.sort_by(newest_first);
            (name, true)
        }
        Plan::Occupied { names } => {
            return Err(Error::InvalidObject(format!(
                "the backup of serial {} of {} {ns}/{} cannot be written: Secrets named {} and {} exist and are not its backups. Delete them",
                state.serial,
                key.kind().kind(),
                key.name(),
                names[0],
                names[1]
            )));
        }
    };
    let doomed = doomed(existing, req.keep, req.pending_restore, Some(&name));
    let bases: BTreeSet<String> = doomed.iter().map(|s| s.base.clone()).collect();
    let pruned: Vec<String> = doomed
        .into_iter()
        .flat_map(|s| s.secrets.iter().cloned())
        .collect();
    delete_all(&api, ns, &pruned).await?;
    existing.retain(|s| !bases.contains(&s.base));
    let outcome = if taken {
        Outcome::Taken { name, pruned }
    } else {
        Outcome::AlreadyBackedUp { name, pruned }
    };
    Ok((outcome, listed))
}

/// Creates one backup Secret. One that exists already counts as written only when it is this
/// chunk of this set, owned by the object (an earlier attempt of the same copy); anything else
/// under its name is an error naming it, never a backup taken.
async fn create(api: &Api<Secret>, ns: &str, secret: &Secret, object: Object<'_>) -> Result<()> {
    let name = secret.metadata.name.as_deref().unwrap_or_default();
    match api.create(&PostParams::default(), secret).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = api
                .get_metadata_opt(name)
                .await
                .during(|| format!("reading state backup {ns}/{name}"))?;
            let same = |key: &str| {
                let get = |m: &ObjectMeta| m.annotations.as_ref()?.get(key).cloned();
                existing.as_ref().and_then(|e| get(&e.metadata)) == get(&secret.metadata)
            };
            let ours = existing
                .as_ref()
                .is_some_and(|e| ownership(&e.metadata, object) == Ownership::Owned);
            if ours
                && same(annotations::STATE_BACKUP_DIGEST)
                && same(annotations::STATE_BACKUP_CHUNK)
            {
                return Ok(());
            }
            Err(Error::InvalidObject(format!(
                "state backup {ns}/{name} cannot be written: a Secret of that name exists and is not this backup. Delete it"
            )))
        }
        Err(e) => Err(Error::Kube {
            action: format!(
                "creating state backup {ns}/{}",
                secret.metadata.name.as_deref().unwrap_or_default()
            ),
            source: e,
        }),
    }
}

/// Releases and deletes `names` one by one (the manager's role grants delete, not
/// deletecollection); one already gone is fine.
async fn delete_all(api: &Api<Secret>, ns: &str, names: &[String]) -> Result<()> {
    for name in names {
        crate::reconcile::act::protection::delete(api, ns, name).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
