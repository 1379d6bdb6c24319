//! The variables schemas module images publish (`io.captf.variables-schema`), read from their
//! registries by the admission webhooks (on a write) and by the passes (before a Job starts),
//! and kept so that a burst of writes or passes naming one image reads it once.
//!
//! A schema that cannot be had never refuses a write or holds an object: variables are then
//! checked by name only, as for an image without the label, and the module checks them at plan
//! time. A failed read is remembered briefly so that a registry that is down does not add its
//! timeout to every write and pass.
//!
//! Entries are kept per namespace and image: the read uses the namespace's pull Secrets, and
//! one tenant's messages must not describe an image only another tenant may pull. A failure
//! also names the pull Secrets it was read with: other credentials may well succeed, so they
//! are not turned away by it. Concurrent misses of one entry read the registry once: the later
//! ones wait for the first and take its answer.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use captf_contract::varschema::{self, Schema};

use crate::registry::{self, Registry};

/// How long a webhook waits for the registry (operations.md `SchemaFetchTimeout`), pull
/// Secrets included: the API server gives the whole review 10 s.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a failed read stands before the registry is asked again.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);
/// How long a tag's answer stands: a tag can be pushed again with other variables. A digest
/// names one image forever.
pub const TAG_KEPT_FOR: Duration = Duration::from_secs(300);
/// Entries kept at most; the oldest goes first.
const CAPACITY: usize = 1024;

/// What is known about one image's variables.
#[derive(Clone, Debug, PartialEq)]
pub enum Known {
    /// The image publishes this schema.
    Schema(Arc<Schema>),
    /// The image has no label: variables are checked by name only.
    NoLabel,
    /// The schema could not be had (why, for the log): nothing is checked against it.
    Unknown(String),
}

#[derive(Clone, Debug)]
struct Entry {
    known: Known,
    at: Instant,
    /// The pull Secret names the read used, sorted.
    with: Vec<String>,
}

impl Entry {
    /// Whether this entry answers a lookup of `image` with the pull Secrets `with` at `now`.
    fn answers(&self, image: &str, with: &[String], now: Instant) -> bool {
        fresh(&self.known, image, self.at, now)
            && (!matches!(self.known, Known::Unknown(_)) || self.with == with)
    }
}

/// The pull Secret names as an entry keeps them: sorted, without duplicates.
fn credentials(pull_secrets: &[&str]) -> Vec<String> {
    let mut with: Vec<String> = pull_secrets.iter().map(|s| (*s).to_owned()).collect();
    with.sort();
    with.dedup();
    with
}

type Key = (String, String);

/// Whether an entry read at `at` for `image` still answers at `now`.
fn fresh(known: &Known, image: &str, at: Instant, now: Instant) -> bool {
    let age = now.saturating_duration_since(at);
    match known {
        Known::Unknown(_) => age < RETRY_AFTER,
        _ if image.contains('@') => true,
        _ => age < TAG_KEPT_FOR,
    }
}

/// Classifies a read: the labels of the image, or why they could not be read.
fn classify(labels: Result<BTreeMap<String, String>, String>) -> Known {
    match labels {
        Err(why) => Known::Unknown(why),
        Ok(labels) => match labels.get(varschema::LABEL) {
            None => Known::NoLabel,
            Some(label) => match varschema::parse(label) {
                Ok(schema) => Known::Schema(Arc::new(schema)),
                Err(e) => Known::Unknown(format!(
                    "{e}; rebuild the image with the label `captf lint schema` prints"
                )),
            },
        },
    }
}

/// The shared cache; cheap to clone.
#[derive(Clone, Default)]
pub struct Schemas {
    entries: Arc<Mutex<HashMap<Key, Entry>>>,
    /// One turn per entry being read; a waiter holds the only strong reference besides the
    /// reader's, so a finished read leaves a dead `Weak` that the next miss replaces.
    reads: Arc<Mutex<HashMap<Key, Weak<tokio::sync::Mutex<()>>>>>,
}

impl Schemas {
    fn cached(&self, namespace: &str, image: &str, with: &[String], now: Instant) -> Option<Known> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(&(namespace.to_owned(), image.to_owned()))
            .filter(|e| e.answers(image, with, now))
            .map(|e| e.known.clone())
    }

    /// The turn to read `namespace`/`image`, shared by everyone who misses it meanwhile.
    fn turn(&self, namespace: &str, image: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut reads = self.reads.lock().unwrap_or_else(|e| e.into_inner());
        reads.retain(|_, turn| turn.strong_count() > 0);
        let key = (namespace.to_owned(), image.to_owned());
        if let Some(turn) = reads.get(&key).and_then(Weak::upgrade) {
            return turn;
        }
        let turn = Arc::new(tokio::sync::Mutex::new(()));
        reads.insert(key, Arc::downgrade(&turn));
        turn
    }

    fn store(&self, namespace: &str, image: &str, with: Vec<String>, known: Known, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CAPACITY {
            entries.retain(|(_, image), e| fresh(&e.known, image, e.at, now));
            if entries.len() >= CAPACITY
                && let Some(oldest) = entries
                    .iter()
                    .min_by_key(|(_, e)| e.at)
                    .map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
        }
        entries.insert(
            (namespace.to_owned(), image.to_owned()),
            Entry {
                known,
                at: now,
                with,
            },
        );
    }

    /// The schema of `image` for an object in `namespace` whose pull Secrets are
    /// `pull_secrets` (named at `field`): from the cache, else read within
    /// [`FETCH_TIMEOUT`].
    pub async fn lookup(
        &self,
        registry: Option<&Registry>,
        client: &kube::Client,
        namespace: &str,
        image: &str,
        pull_secrets: &[&str],
        field: &str,
    ) -> Known {
        let with = credentials(pull_secrets);
        if let Some(known) = self.cached(namespace, image, &with, Instant::now()) {
            return known;
        }
        let turn = self.turn(namespace, image);
        let _turn = turn.lock().await;
        // A read that finished while this one waited for its turn answers it too.
        if let Some(known) = self.cached(namespace, image, &with, Instant::now()) {
            return known;
        }
        let read = async {
            let reference = captf_api::image::parse(image)?;
            let registry = registry
                .ok_or("the manager has no trusted root certificates to reach registries with")?;
            let keyring = registry::keyring(client, namespace, pull_secrets, field)
                .await
                .map_err(|e| e.to_string())?;
            registry
                .labels_within(&reference, &keyring, FETCH_TIMEOUT)
                .await
                .map_err(|e| e.to_string())
        };
        let labels = tokio::time::timeout(FETCH_TIMEOUT, read)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "the image pull Secrets and the registry took longer than {}s",
                    FETCH_TIMEOUT.as_secs()
                ))
            });
        let known = classify(labels);
        if let Known::Unknown(why) = &known {
            tracing::info!(
                namespace,
                image,
                reason = %why,
                "variables schema not checkable; variables are checked by name only for {}s",
                RETRY_AFTER.as_secs()
            );
        }
        self.store(namespace, image, with, known.clone(), Instant::now());
        known
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_stand_as_long_as_the_image_can_not_have_changed() {
        let t0 = Instant::now();
        let schema = Known::Schema(Arc::new(Schema::default()));
        let failed = Known::Unknown("down".into());
        let tag = "r.example/m:v1";
        let digest =
            "r.example/m@sha256:0000000000000000000000000000000000000000000000000000000000000000";
        let cases = [
            (&failed, tag, Duration::ZERO, true),
            (&failed, tag, RETRY_AFTER, false),
            (&failed, digest, RETRY_AFTER, false),
            (&schema, tag, RETRY_AFTER, true),
            (&schema, tag, TAG_KEPT_FOR, false),
            (&Known::NoLabel, tag, TAG_KEPT_FOR, false),
            (&schema, digest, TAG_KEPT_FOR * 100, true),
            (&Known::NoLabel, digest, TAG_KEPT_FOR * 100, true),
        ];
        for (known, image, age, want) in cases {
            assert_eq!(
                fresh(known, image, t0, t0 + age),
                want,
                "{known:?} {image} {age:?}"
            );
        }
    }

    #[test]
    fn a_read_becomes_what_is_known() -> anyhow::Result<()> {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let with = labels(&[(varschema::LABEL, r#"{"type":"object"}"#)]);
        assert_eq!(
            classify(Ok(with)),
            Known::Schema(Arc::new(varschema::parse(r#"{"type":"object"}"#)?))
        );
        assert_eq!(classify(Ok(labels(&[("other", "x")]))), Known::NoLabel);
        let broken = labels(&[(varschema::LABEL, r#"{"type":"array"}"#)]);
        assert!(
            matches!(classify(Ok(broken)), Known::Unknown(why) if why.contains("captf lint schema"))
        );
        assert_eq!(
            classify(Err("unauthorized".into())),
            Known::Unknown("unauthorized".into())
        );
        Ok(())
    }

    #[test]
    fn the_cache_is_per_namespace_and_bounded() {
        let schemas = Schemas::default();
        let now = Instant::now();
        schemas.store("a", "r/m:v1", vec![], Known::NoLabel, now);
        assert_eq!(
            schemas.cached("a", "r/m:v1", &[], now),
            Some(Known::NoLabel)
        );
        assert_eq!(schemas.cached("b", "r/m:v1", &[], now), None);
        for i in 0..CAPACITY + 10 {
            schemas.store("a", &format!("r/m:{i}"), vec![], Known::NoLabel, now);
        }
        let kept = schemas.entries.lock().map(|e| e.len()).unwrap_or(0);
        assert_eq!(kept, CAPACITY);
    }

    #[test]
    fn a_failure_turns_away_only_the_same_pull_secrets() {
        let schemas = Schemas::default();
        let now = Instant::now();
        let image = "r/m:v1";
        schemas.store(
            "a",
            image,
            credentials(&["own"]),
            Known::Unknown("unauthorized".into()),
            now,
        );
        let cases: [(&[&str], bool); 4] = [
            (&["own"], true),
            (&["own", "own"], true),
            (&["own", "cluster-default"], false),
            (&[], false),
        ];
        for (with, answered) in cases {
            let got = schemas.cached("a", image, &credentials(with), now);
            assert_eq!(got.is_some(), answered, "{with:?}");
        }
        // An answer is the image's, whoever read it.
        schemas.store("a", image, credentials(&["own"]), Known::NoLabel, now);
        assert_eq!(
            schemas.cached("a", image, &credentials(&["other"]), now),
            Some(Known::NoLabel)
        );
    }

    #[test]
    fn concurrent_misses_of_one_entry_share_a_turn() {
        let schemas = Schemas::default();
        let first = schemas.turn("a", "r/m:v1");
        let second = schemas.turn("a", "r/m:v1");
        assert!(Arc::ptr_eq(&first, &second), "one read at a time per entry");
        assert!(!Arc::ptr_eq(&first, &schemas.turn("b", "r/m:v1")));
        assert!(!Arc::ptr_eq(&first, &schemas.turn("a", "r/m:v2")));
        drop((first, second));
        let _later = schemas.turn("a", "r/m:v1");
        let reads = schemas.reads.lock().map(|r| r.len()).unwrap_or(usize::MAX);
        assert_eq!(reads, 1, "finished turns are not kept");
    }
}
