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

use std::collections::{BTreeMap, BTreeSet};

use captf_api::names::{ObjectKey, chunk_name};
use captf_api::{MAX_STATE_BACKUPS, StateBackup, annotations, finalizers, labels};
use captf_state::{
    BackupInfo, Chunk, DEFAULT_MAX_CHUNKS, DecodedState, backup_annotations, chunk_index,
    set_digest,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};

use crate::error::{Error, KubeContext, Result};
use crate::job::backend_labels;
use crate::job::build::STATE_DATA_KEY;

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

use sets::ownership;
pub use sets::{BackupSet, Object, Ownership, newest_first, read_back, sets, settle, trusted};

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
        crate::reconcile::protection::delete(api, ns, name).await?;
    }
    Ok(())
}

mod sets;

#[cfg(test)]
mod tests;
