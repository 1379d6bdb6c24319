//! A condition as the manager holds it: `metav1.Condition` on the wire, but with its type,
//! status and reason kept as [`Term`]s.
//!
//! Every object carries about fifteen conditions and the manager caches every object, so the
//! three short strings of each condition were a large part of its memory at fleet scale. They
//! are almost always CAPTF's own words, which a [`Term`] names by their place in the
//! vocabulary instead of copying. A condition is 96 bytes, against `metav1.Condition`'s 128
//! and the three strings it allocates.

use std::fmt;
use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use crate::conditions::{Status, allowed_reasons, types};

/// One condition of an object's status. Reads and writes the JSON of `metav1.Condition`
/// (its schema is that type's, see `schema::conditions`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    pub last_transition_time: Time,
    /// Boxed: a message is read and replaced whole, never grown.
    #[serde(default)]
    pub message: Box<str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub reason: Term,
    #[serde(default)]
    pub status: Term,
    #[serde(rename = "type", default)]
    pub type_: Term,
}

/// A condition's type, status or reason: one of CAPTF's own words, held as its place in the
/// vocabulary, or any other string (another writer's, or a newer version's) owned as read.
/// Sixteen bytes either way.
#[derive(Clone)]
pub struct Term(Word);

#[derive(Clone)]
enum Word {
    /// `VOCABULARY[i]`.
    Known(u16),
    /// Boxed twice so that the enum stays two words (a `Box<str>` is two on its own). The
    /// second allocation is paid only for words that are not CAPTF's, which are rare.
    #[expect(
        clippy::box_collection,
        reason = "a thin pointer keeps a Term at 16 bytes"
    )]
    Other(Box<String>),
}

/// Every condition type, status and reason CAPTF writes, sorted for a binary search.
static VOCABULARY: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut words: Vec<&'static str> = types::ALL.to_vec();
    words.extend([Status::True, Status::False, Status::Unknown].map(Status::as_str));
    for allowed in types::ALL.iter().filter_map(|t| allowed_reasons(t)) {
        words.extend(allowed.when_true);
        words.extend(allowed.when_false);
        words.extend(allowed.when_unknown);
    }
    words.sort_unstable();
    words.dedup();
    words
});

impl Term {
    /// `word`, by its place in the vocabulary when it is one of CAPTF's own.
    pub fn new(word: &str) -> Self {
        Term::known(word).unwrap_or_else(|| Term(Word::Other(Box::new(word.to_owned()))))
    }

    fn known(word: &str) -> Option<Self> {
        let at = VOCABULARY.binary_search(&word).ok()?;
        Some(Term(Word::Known(u16::try_from(at).ok()?)))
    }

    pub fn as_str(&self) -> &str {
        match &self.0 {
            Word::Known(at) => VOCABULARY[usize::from(*at)],
            Word::Other(word) => word,
        }
    }

    /// Whether the word is held without a copy of its own.
    pub fn is_shared(&self) -> bool {
        matches!(self.0, Word::Known(_))
    }
}

impl Default for Term {
    fn default() -> Self {
        Term::new("")
    }
}

impl std::ops::Deref for Term {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Term {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for Term {
    fn eq(&self, other: &Term) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Term {}

impl std::hash::Hash for Term {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl From<&str> for Term {
    fn from(word: &str) -> Self {
        Term::new(word)
    }
}

impl From<String> for Term {
    fn from(word: String) -> Self {
        Term::known(&word).unwrap_or_else(|| Term(Word::Other(Box::new(word))))
    }
}

impl From<Status> for Term {
    fn from(status: Status) -> Self {
        Term::new(status.as_str())
    }
}

impl PartialEq<str> for Term {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Term {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Term {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<Term> for &str {
    fn eq(&self, other: &Term) -> bool {
        *self == other.as_str()
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Serialize for Term {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Term {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Term;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, word: &str) -> Result<Term, E> {
                Ok(Term::new(word))
            }
            fn visit_string<E: serde::de::Error>(self, word: String) -> Result<Term, E> {
                Ok(Term::from(word))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::reasons;

    type Upstream = k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    #[test]
    fn own_words_are_shared_and_others_owned() {
        for (word, shared) in [
            (types::READY, true),
            (types::DRIFT_JOB_SUCCEEDED, true),
            ("True", true),
            ("Unknown", true),
            (reasons::NO_APPLY_YET, true),
            (reasons::WAITING_FOR_JOB_SLOT, true),
            ("", false),
            ("SomeoneElsesReason", false),
            ("ready", false),
        ] {
            let term = Term::new(word);
            assert_eq!(term.is_shared(), shared, "{word:?}");
            assert_eq!(term.as_str(), word);
            assert_eq!(Term::from(word.to_owned()).is_shared(), shared, "{word:?}");
        }
    }

    /// What the type is for: a condition smaller than upstream's, and every word of the
    /// vocabulary reachable by its 16-bit place.
    #[test]
    fn a_condition_is_smaller_than_upstreams() {
        assert_eq!(std::mem::size_of::<Term>(), 16);
        assert_eq!(std::mem::size_of::<Condition>(), 96);
        assert_eq!(std::mem::size_of::<Upstream>(), 128);
        assert!(u16::try_from(VOCABULARY.len()).is_ok());
        for word in VOCABULARY.iter() {
            assert!(Term::new(word).is_shared(), "{word}");
        }
    }

    /// The wire form is exactly `metav1.Condition`'s, both ways, whatever the words.
    #[test]
    fn reads_and_writes_the_upstream_json() -> anyhow::Result<()> {
        for json in [
            r#"{"lastTransitionTime":"2026-11-30T15:34:01Z","message":"no drift check yet","observedGeneration":3,"reason":"DriftNotChecked","status":"Unknown","type":"DriftDetected"}"#,
            r#"{"lastTransitionTime":"2026-11-30T15:34:01Z","message":"","reason":"Custom","status":"True","type":"example.com/Other"}"#,
        ] {
            let ours: Condition = serde_json::from_str(json)?;
            let upstream: Upstream = serde_json::from_str(json)?;
            assert_eq!(serde_json::to_string(&ours)?, json);
            assert_eq!(
                serde_json::to_string(&ours)?,
                serde_json::to_string(&upstream)?
            );
        }
        Ok(())
    }

    /// As upstream, only `lastTransitionTime` is required; the strings default to empty.
    #[test]
    fn missing_words_read_as_empty() -> anyhow::Result<()> {
        let c: Condition =
            serde_json::from_str(r#"{"lastTransitionTime":"2026-11-30T15:34:01Z"}"#)?;
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("", "", "")
        );
        assert!(serde_json::from_str::<Condition>(r#"{"type":"Ready"}"#).is_err());
        Ok(())
    }
}
