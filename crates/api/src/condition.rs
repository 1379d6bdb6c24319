//! A condition as the manager holds it: `metav1.Condition` on the wire, but with its type,
//! status and reason kept as [`Term`]s.
//!
//! Every object carries about fifteen conditions and the manager caches every object, so the
//! three short strings of each condition were a large part of its memory at fleet scale. They
//! are almost always CAPTF's own words, which a [`Term`] points to instead of copying.

use std::borrow::Cow;
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
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub reason: Term,
    #[serde(default)]
    pub status: Term,
    #[serde(rename = "type", default)]
    pub type_: Term,
}

/// A condition's type, status or reason: one of CAPTF's own words, borrowed from the
/// program, or any other string (another writer's, or a newer version's) owned as read.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Term(Cow<'static, str>);

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
    /// `word`, borrowed from the vocabulary when it is one of CAPTF's own.
    pub fn new(word: &str) -> Self {
        match VOCABULARY.binary_search(&word) {
            Ok(at) => Term(Cow::Borrowed(VOCABULARY[at])),
            Err(_) => Term(Cow::Owned(word.to_owned())),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the word is held without a copy of its own.
    pub fn is_shared(&self) -> bool {
        matches!(self.0, Cow::Borrowed(_))
    }
}

impl std::ops::Deref for Term {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Term {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Term {
    fn from(word: &str) -> Self {
        Term::new(word)
    }
}

impl From<String> for Term {
    fn from(word: String) -> Self {
        match VOCABULARY.binary_search(&word.as_str()) {
            Ok(at) => Term(Cow::Borrowed(VOCABULARY[at])),
            Err(_) => Term(Cow::Owned(word)),
        }
    }
}

impl From<Status> for Term {
    fn from(status: Status) -> Self {
        Term(Cow::Borrowed(status.as_str()))
    }
}

impl PartialEq<str> for Term {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Term {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for Term {
    fn eq(&self, other: &String) -> bool {
        self.0 == other.as_str()
    }
}

impl PartialEq<Term> for &str {
    fn eq(&self, other: &Term) -> bool {
        *self == other.0
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl Serialize for Term {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
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
