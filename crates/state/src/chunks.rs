//! The input type (one state Secret) and the ordering of a chunk set (concepts §16.2, §16.3.2).
//!
//! Terraform >= 1.6 splits the compressed state into 1 MiB pieces: the first in the base Secret
//! `<base>`, the rest in `<base>-part-1`, `<base>-part-2`, ... The backend itself orders by the
//! number after the last hyphen; this reader is stricter and accepts only exactly those names,
//! because anything else matching the backend's labels means someone else wrote there.

use std::collections::BTreeMap;

use crate::error::{Result, StateError};

/// One state Secret as the caller read it: the manager adapts a Kubernetes Secret into this so the
/// crate stays free of the client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunk {
    /// `metadata.name`.
    pub name: String,
    /// The decoded bytes of data key `tfstate` (a piece of a gzip stream), `None` when the key
    /// is absent.
    pub data: Option<Vec<u8>>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
}

impl Chunk {
    /// A chunk with data and no annotations.
    pub fn new(name: impl Into<String>, data: impl Into<Vec<u8>>) -> Self {
        Chunk {
            name: name.into(),
            data: Some(data.into()),
            annotations: BTreeMap::new(),
        }
    }

    /// Adds one annotation.
    pub fn with_annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }
}

/// The chunk index a name stands for: 0 for `base`, N for `<base>-part-N` (N >= 1, decimal,
/// no leading zero, so each index has exactly one name), `None` for anything else.
pub fn chunk_index(base: &str, name: &str) -> Option<usize> {
    if name == base {
        return Some(0);
    }
    let digits = name.strip_prefix(base)?.strip_prefix("-part-")?;
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Orders `chunks` by index and checks the set is whole: every name expected, no index twice,
/// the base present, no gap, and every chunk carrying `tfstate`. Returns the chunks in order.
pub(crate) fn order<'a>(base: &str, chunks: &'a [Chunk]) -> Result<Vec<&'a Chunk>> {
    let mut by_index: BTreeMap<usize, &Chunk> = BTreeMap::new();
    for chunk in chunks {
        let index = chunk_index(base, &chunk.name).ok_or_else(|| {
            StateError::inconsistent(
                &chunk.name,
                format!(
                    "matches the state's labels but is neither {base} nor {base}-part-N \
                     (N >= 1 without leading zeros)"
                ),
            )
        })?;
        if by_index.insert(index, chunk).is_some() {
            return Err(StateError::inconsistent(
                &chunk.name,
                format!("appears twice (chunk index {index})"),
            ));
        }
    }
    if !by_index.contains_key(&0) {
        return Err(StateError::inconsistent(
            base,
            format!(
                "is missing although {} -part-N Secret(s) exist",
                by_index.len()
            ),
        ));
    }
    // Indexes are distinct and sorted, so the set is gap-free iff the i-th index is i; the
    // first index that is not names the missing Secret.
    let last = by_index.keys().next_back().copied().unwrap_or(0);
    if let Some(gap) = by_index
        .keys()
        .enumerate()
        .find(|(i, k)| i != *k)
        .map(|(i, _)| i)
    {
        return Err(StateError::inconsistent(
            format!("{base}-part-{gap}"),
            format!("is missing: the chunks have a gap (the highest present is part {last})"),
        ));
    }
    let ordered: Vec<&Chunk> = by_index.into_values().collect();
    if let Some(c) = ordered.iter().find(|c| c.data.is_none()) {
        return Err(StateError::inconsistent(
            &c.name,
            "has no `tfstate` data key",
        ));
    }
    Ok(ordered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_indexes() {
        let b = "tfstate-default-abc-c";
        assert_eq!(chunk_index(b, b), Some(0));
        assert_eq!(chunk_index(b, &format!("{b}-part-1")), Some(1));
        assert_eq!(chunk_index(b, &format!("{b}-part-10")), Some(10));
        for bad in [
            "-part-0", "-part-01", "-part-", "-part-x", "-part-1a", "-part--1", "-x",
        ] {
            assert_eq!(chunk_index(b, &format!("{b}{bad}")), None, "{bad}");
        }
        assert_eq!(chunk_index(b, "tfstate-default-other-c"), None);
        assert_eq!(
            chunk_index(b, &format!("{b}-part-99999999999999999999999")),
            None
        );
    }
}
