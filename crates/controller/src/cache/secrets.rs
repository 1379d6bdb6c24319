//! The manager's index of the Secrets it manages: the owners' UIDs of every one (to repair its
//! references), and the whole metadata of the credential mirrors only.
//!
//! A state chunk, backup or durable inputs Secret is only ever looked up for its owners' UIDs,
//! and a fleet has four or more of them per object. Kube's `Store` would keep, for each, an
//! `ObjectMeta` (360 bytes however little of it is set), an `ObjectRef` as its key and the
//! strings of both: about 0.9 KiB. This index keeps its name and its owners' UIDs, about 0.1
//! KiB (10,000 clusters' 40,000 Secrets took 36 MiB less).
//!
//! The changes still reach the controllers whole (their owner references are what wakes the
//! owner): each Secret written or deleted is handed to every subscription as it arrives, and
//! dropped once all have taken it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use captf_api::{finalizers, labels};
use futures::{Stream, StreamExt};
use kube::runtime::watcher;

use super::{SUBSCRIBE_BUFFER, SecretMeta, without_identity};

/// Reader of the Secrets index. Cheap to clone: every clone reads the same index.
#[derive(Clone)]
pub struct Secrets {
    index: Arc<RwLock<Index>>,
    ready: tokio::sync::watch::Receiver<bool>,
}

impl Secrets {
    /// Whether the Secret `namespace/name` is owned by the object of UID `uid`: `None` when
    /// the index does not hold the Secret.
    pub fn owned_by(&self, namespace: &str, name: &str, uid: &str) -> Option<bool> {
        self.read(|index| index.owned_by(namespace, name, uid))
    }

    /// Whether the Secret `namespace/name` holds the manager's state protection finalizer:
    /// `None` when the index does not hold the Secret.
    pub fn protected(&self, namespace: &str, name: &str) -> Option<bool> {
        self.read(|index| index.protected(namespace, name))
    }

    /// The Secrets of `namespace` named `prefix...` that name no owner at all, sorted.
    pub fn ownerless(&self, namespace: &str, prefix: &str) -> Vec<String> {
        self.read(|index| index.ownerless(namespace, prefix))
    }

    /// The Secrets of `namespace` named `prefix...` that the object of UID `uid` owns and
    /// that lack the state protection finalizer.
    pub fn unprotected_owned(&self, namespace: &str, uid: &str, prefix: &str) -> Vec<String> {
        self.read(|index| index.unprotected_owned(namespace, uid, prefix))
    }

    /// Whether the index holds the managed Secret `namespace/name`.
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        self.owned_by(namespace, name, "").is_some()
    }

    /// The credential mirror `namespace/name`, if the index holds one by that name.
    pub fn mirror(&self, namespace: &str, name: &str) -> Option<Arc<SecretMeta>> {
        self.read(|index| {
            index
                .mirrors
                .get(&(namespace.to_owned(), name.to_owned()))
                .cloned()
        })
    }

    /// Every credential mirror, by namespace and name.
    pub fn mirrors(&self) -> Vec<Arc<SecretMeta>> {
        self.read(|index| index.mirrors.values().cloned().collect())
    }

    /// How many Secrets the index holds.
    pub fn len(&self) -> usize {
        self.read(|index| index.owners.values().map(HashMap::len).sum())
    }

    /// Whether the index holds no Secret.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until the index holds its first full list; false when its watch ended before.
    pub async fn wait_until_ready(&self) -> bool {
        self.ready.clone().wait_for(|ready| *ready).await.is_ok()
    }

    fn read<T>(&self, f: impl FnOnce(&Index) -> T) -> T {
        // A writer that panicked left the index as it was before or after one event: still
        // a valid index.
        f(&self
            .index
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// What a controller subscribes to: every managed Secret written or deleted from now on, with
/// what `trimmed` keeps of it.
pub struct SecretChanges {
    /// Not read itself, so it holds nothing back: each subscription is an active copy.
    changes: async_broadcast::InactiveReceiver<Arc<SecretMeta>>,
}

impl SecretChanges {
    /// A new subscription. Every subscription must be read: the watch waits for the slowest
    /// one once `SUBSCRIBE_BUFFER` changes are untaken.
    pub fn subscribe(&self) -> impl Stream<Item = Arc<SecretMeta>> + Send + 'static {
        self.changes.activate_cloned()
    }

    /// The last subscription.
    pub fn into_subscription(self) -> impl Stream<Item = Arc<SecretMeta>> + Send + 'static {
        self.changes.activate()
    }
}

/// The index, its subscriptions, and the stream that fills it from `events` (poll it).
pub fn index<S>(
    events: S,
) -> (
    Secrets,
    SecretChanges,
    std::pin::Pin<Box<dyn Stream<Item = ()> + Send>>,
)
where
    S: Stream<Item = Result<watcher::Event<SecretMeta>, watcher::Error>> + Send + 'static,
{
    let index = Arc::new(RwLock::new(Index::default()));
    let (ready_tx, ready) = tokio::sync::watch::channel(false);
    let (mut sender, changes) = async_broadcast::broadcast(SUBSCRIBE_BUFFER);
    // Changes nobody has subscribed to yet are nobody's to wake.
    sender.set_await_active(false);
    let mut filler = Filler {
        index: index.clone(),
        relisting: None,
        ready: ready_tx,
    };
    let run = async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            // The watch retries on its own (with backoff); an error leaves the index as it is.
            let Ok(event) = event else { continue };
            if let Some(changed) = filler.apply(event) {
                // Closed only once every receiver is gone, and then nobody is to be woken.
                let _ = sender.broadcast_direct(changed).await;
            }
        }
    };
    (
        Secrets { index, ready },
        SecretChanges {
            changes: changes.deactivate(),
        },
        futures::stream::once(run).boxed(),
    )
}

/// What a subscriber reads of a managed Secret: the owner references of every one (to wake its
/// owner), and the whole metadata of the credential mirrors only (their identity annotation
/// wakes the identity). Nor is the `PartialObjectMetadata` type of each kept: all are Secrets.
fn trimmed(mut secret: SecretMeta) -> SecretMeta {
    secret.types = None;
    let meta = &mut secret.metadata;
    meta.managed_fields = None;
    if !is_mirror(&secret) {
        let meta = &mut secret.metadata;
        meta.labels = None;
        meta.annotations = None;
        without_identity(meta);
    }
    secret
}

fn is_mirror(secret: &SecretMeta) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::MIRRORED))
        .is_some_and(|v| v == labels::TRUE)
}

/// What the index keeps of each Secret of one namespace, by name.
type Namespace = HashMap<Box<str>, Entry>;

/// What the index keeps of one Secret.
struct Entry {
    /// Its owners' UIDs.
    owners: Box<[Uid]>,
    /// It holds [`finalizers::STATE_PROTECTION`].
    protected: bool,
}

#[derive(Default)]
struct Index {
    /// Every Secret's owners, by namespace, then name.
    owners: HashMap<Box<str>, Namespace>,
    /// The credential mirrors (a few per namespace), whole.
    mirrors: BTreeMap<(String, String), Arc<SecretMeta>>,
}

impl Index {
    fn owned_by(&self, namespace: &str, name: &str, uid: &str) -> Option<bool> {
        let uid = Uid::from(uid);
        let entry = self.owners.get(namespace)?.get(name)?;
        Some(entry.owners.contains(&uid))
    }

    fn protected(&self, namespace: &str, name: &str) -> Option<bool> {
        Some(self.owners.get(namespace)?.get(name)?.protected)
    }

    fn ownerless(&self, namespace: &str, prefix: &str) -> Vec<String> {
        let Some(names) = self.owners.get(namespace) else {
            return Vec::new();
        };
        let mut found: Vec<String> = names
            .iter()
            .filter(|(name, e)| e.owners.is_empty() && name.starts_with(prefix))
            .map(|(name, _)| name.to_string())
            .collect();
        found.sort();
        found
    }

    fn unprotected_owned(&self, namespace: &str, uid: &str, prefix: &str) -> Vec<String> {
        let uid = Uid::from(uid);
        let Some(names) = self.owners.get(namespace) else {
            return Vec::new();
        };
        let mut found: Vec<String> = names
            .iter()
            .filter(|(name, e)| !e.protected && name.starts_with(prefix) && e.owners.contains(&uid))
            .map(|(name, _)| name.to_string())
            .collect();
        found.sort();
        found
    }

    fn insert(&mut self, secret: &Arc<SecretMeta>) {
        let Some((namespace, name)) = key(secret) else {
            return;
        };
        let owners = secret
            .metadata
            .owner_references
            .iter()
            .flatten()
            .map(|r| Uid::from(r.uid.as_str()))
            .collect();
        let protected = secret
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == finalizers::STATE_PROTECTION);
        let entry = Entry { owners, protected };
        // A Secret that stopped being a mirror is no longer kept whole.
        let mirror_key = (namespace.to_owned(), name.to_owned());
        if is_mirror(secret) {
            self.mirrors.insert(mirror_key, secret.clone());
        } else {
            self.mirrors.remove(&mirror_key);
        }
        match self.owners.get_mut(namespace) {
            Some(names) => {
                names.insert(name.into(), entry);
            }
            None => {
                self.owners
                    .insert(namespace.into(), HashMap::from([(name.into(), entry)]));
            }
        }
    }

    fn remove(&mut self, secret: &SecretMeta) {
        let Some((namespace, name)) = key(secret) else {
            return;
        };
        self.mirrors
            .remove(&(namespace.to_owned(), name.to_owned()));
        if let Some(names) = self.owners.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                self.owners.remove(namespace);
            }
        }
    }
}

/// A Secret's namespace and name (every Secret the API server sends has both).
fn key(secret: &SecretMeta) -> Option<(&str, &str)> {
    let meta = &secret.metadata;
    Some((meta.namespace.as_deref()?, meta.name.as_deref()?))
}

/// Applies the watch's events to the index.
struct Filler {
    index: Arc<RwLock<Index>>,
    /// The index a list being received builds, swapped in whole once the list is done (as
    /// kube's stores do), so that a Secret deleted while the watch was away leaves it.
    relisting: Option<Index>,
    ready: tokio::sync::watch::Sender<bool>,
}

impl Filler {
    /// Applies `event`; returns the Secret to hand to the subscribers, if any.
    ///
    /// The first list wakes nobody: the controllers pass every object when they start. A later
    /// one (the watch fell too far behind and listed again) hands every Secret on, as a
    /// change missed meanwhile may be among them.
    fn apply(&mut self, event: watcher::Event<SecretMeta>) -> Option<Arc<SecretMeta>> {
        let listed_before = *self.ready.borrow();
        match event {
            watcher::Event::Init => {
                self.relisting = Some(Index::default());
                None
            }
            watcher::Event::InitApply(secret) => {
                let secret = Arc::new(trimmed(secret));
                self.relisting.get_or_insert_default().insert(&secret);
                listed_before.then_some(secret)
            }
            watcher::Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                *self.write() = listed;
                self.ready.send_replace(true);
                None
            }
            watcher::Event::Apply(secret) => {
                let secret = Arc::new(trimmed(secret));
                self.write().insert(&secret);
                Some(secret)
            }
            watcher::Event::Delete(secret) => {
                let secret = Arc::new(trimmed(secret));
                self.write().remove(&secret);
                Some(secret)
            }
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Index> {
        self.index
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// An owner's UID. The API server's are UUIDs in lower case, held in their 16 bytes; any other
/// string is held whole, so two UIDs are equal exactly when their strings are.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Uid {
    Uuid([u8; 16]),
    Other(Box<str>),
}

impl From<&str> for Uid {
    fn from(uid: &str) -> Self {
        uuid_bytes(uid).map_or_else(|| Uid::Other(uid.into()), Uid::Uuid)
    }
}

/// The 16 bytes of a UUID written `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` in lower-case hex.
fn uuid_bytes(uid: &str) -> Option<[u8; 16]> {
    let text = uid.as_bytes();
    if text.len() != 36 {
        return None;
    }
    let mut bytes = [0u8; 16];
    let mut digits = 0;
    for (i, &c) in text.iter().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            if c != b'-' {
                return None;
            }
            continue;
        }
        let value = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        bytes[digits / 2] |= if digits % 2 == 0 { value << 4 } else { value };
        digits += 1;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests;
