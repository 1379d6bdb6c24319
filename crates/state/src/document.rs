//! The state JSON (concepts §16.3.4-6): only the fields CAPTF needs.
//!
//! The document is parsed once, into a struct that names only the top-level fields read here;
//! serde skips everything else (`serde::de::IgnoredAny`) without building values. Resources are
//! counted as they stream past (only each one's `mode` is read), and outputs are kept as raw
//! JSON until their number, size and depth are known to be within [`OutputLimits`], so what a
//! state holds in memory is bounded by those limits, not by the state: a 64 MiB state of
//! millions of tiny resources or outputs costs no more than a small one.
//!
//! The encryption envelope and the version are checked before anything else is required: an
//! OpenTofu envelope has `serial`, `lineage`, `meta`, `encrypted_data` and `encryption_version`
//! but no `version`, and a wrong version says more than a missing field. When the one-pass parse
//! fails on a field's shape, a second pass reads only those two header fields so the answer is
//! still `Encrypted` or `UnsupportedVersion` where it applies (that pass runs on failures only).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::error::{Result, StateError};

/// The only state format version this reader accepts.
pub const SUPPORTED_VERSION: u64 = 4;

/// The caps on a state's root outputs: the state is a module's, hostile until bounded. Outputs
/// the contract reads are small (an endpoint, a list of provider IDs); these leave room for a
/// large pool and none for a state that would make the manager spend its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// Most root outputs.
    pub max_outputs: usize,
    /// Most bytes of JSON one output's value may take.
    pub max_value_bytes: usize,
    /// Most bytes of JSON all output values together may take.
    pub max_total_bytes: usize,
    /// Deepest nesting of arrays and objects in one value.
    pub max_depth: usize,
}

impl OutputLimits {
    /// 256 outputs, 1 MiB each, 4 MiB together, nested 32 deep.
    pub const DEFAULT: OutputLimits = OutputLimits {
        max_outputs: 256,
        max_value_bytes: 1024 * 1024,
        max_total_bytes: 4 * 1024 * 1024,
        max_depth: 32,
    };
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits::DEFAULT
    }
}

/// What the state document says, before the chunk-level facts are added.
#[derive(Debug)]
pub(crate) struct Document {
    pub serial: u64,
    pub lineage: String,
    pub terraform_version: String,
    pub outputs: BTreeMap<String, Value>,
    pub sensitive_outputs: BTreeSet<String>,
    pub managed_resources: u64,
}

/// Everything needed, in one pass.
#[derive(Deserialize)]
struct Full<'a> {
    #[serde(default)]
    encryption_version: Option<IgnoredAny>,
    #[serde(default, borrow)]
    version: Option<&'a RawValue>,
    #[serde(default)]
    serial: Option<u64>,
    #[serde(default)]
    lineage: Option<String>,
    #[serde(default)]
    terraform_version: Option<String>,
    #[serde(default, borrow)]
    outputs: Option<Outputs<'a>>,
    #[serde(default)]
    resources: Option<ManagedCount>,
}

/// Only the fields that decide how to read the rest.
#[derive(Deserialize)]
struct Header<'a> {
    #[serde(default)]
    encryption_version: Option<IgnoredAny>,
    #[serde(default, borrow)]
    version: Option<&'a RawValue>,
}

/// A root module output. `type` is not needed: the value is the JSON the module produced,
/// kept raw until it is known to be within the limits.
#[derive(Deserialize)]
struct OutputEntry<'a> {
    #[serde(borrow)]
    value: &'a RawValue,
    #[serde(default)]
    sensitive: bool,
}

/// The first [`MAX_KEPT_OUTPUTS`] outputs and how many there are: the rest stream past
/// unparsed, so their number costs nothing before it is refused.
struct Outputs<'a> {
    kept: Vec<(String, OutputEntry<'a>)>,
    count: usize,
}

/// Outputs past this many are counted, not kept (a limit above it reads as this).
const MAX_KEPT_OUTPUTS: usize = 4096;

impl<'de: 'a, 'a> Deserialize<'de> for Outputs<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct Counting<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Counting<'a> {
            type Value = Outputs<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of outputs")
            }
            fn visit_map<M: MapAccess<'de>>(
                self,
                mut map: M,
            ) -> std::result::Result<Self::Value, M::Error> {
                let mut outputs = Outputs {
                    kept: Vec::new(),
                    count: 0,
                };
                while let Some(name) = map.next_key::<String>()? {
                    outputs.count += 1;
                    if outputs.kept.len() < MAX_KEPT_OUTPUTS {
                        let entry: OutputEntry<'a> = map.next_value()?;
                        outputs.kept.push((name, entry));
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(outputs)
            }
        }
        deserializer.deserialize_map(Counting(std::marker::PhantomData))
    }
}

/// The number of managed resource blocks, counted as they stream past.
struct ManagedCount(u64);

impl<'de> Deserialize<'de> for ManagedCount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct Counting;
        impl<'de> Visitor<'de> for Counting {
            type Value = ManagedCount;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of resources")
            }
            fn visit_seq<S: SeqAccess<'de>>(
                self,
                mut seq: S,
            ) -> std::result::Result<Self::Value, S::Error> {
                let mut managed = 0;
                while let Some(head) = seq.next_element::<ResourceHead>()? {
                    if head.mode.as_deref() == Some("managed") {
                        managed += 1;
                    }
                }
                Ok(ManagedCount(managed))
            }
        }
        deserializer.deserialize_seq(Counting)
    }
}

/// One resource block (a resource with `count`/`for_each` is one block with several
/// `instances`); only `mode` is read, the attributes are skipped unparsed.
#[derive(Deserialize)]
struct ResourceHead {
    #[serde(default)]
    mode: Option<String>,
}

/// Parses the decompressed state of `base`.
pub(crate) fn parse(base: &str, json: &[u8], limits: &OutputLimits) -> Result<Document> {
    // serde also fills a struct from a JSON array, by position; a state is always an object.
    if json.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(StateError::corrupt(base, "the state is not a JSON object"));
    }
    let full: Full = match serde_json::from_slice(json) {
        Ok(full) => full,
        Err(e) => {
            // A shape error may hide an envelope or another version: classify by the header.
            if e.is_data()
                && let Ok(header) = serde_json::from_slice::<Header>(json)
            {
                check_header(base, header.encryption_version.is_some(), header.version)?;
            }
            return Err(StateError::corrupt(base, describe_json_error(&e)));
        }
    };
    check_header(base, full.encryption_version.is_some(), full.version)?;
    let missing =
        |field: &str| StateError::corrupt(base, format!("the `{field}` field is missing"));
    let serial = full.serial.ok_or_else(|| missing("serial"))?;
    let lineage = full.lineage.ok_or_else(|| missing("lineage"))?;
    let terraform_version = full
        .terraform_version
        .ok_or_else(|| missing("terraform_version"))?;
    let (outputs, sensitive_outputs) = bounded_outputs(base, full.outputs, limits)?;
    let managed_resources = full.resources.map_or(0, |r| r.0);
    Ok(Document {
        serial,
        lineage,
        terraform_version,
        outputs,
        sensitive_outputs,
        managed_resources,
    })
}

/// The outputs within `limits`, values parsed, and the names of the sensitive ones; a state
/// past a limit is corrupt, and the message names the limit (never a value).
fn bounded_outputs(
    base: &str,
    outputs: Option<Outputs<'_>>,
    limits: &OutputLimits,
) -> Result<(BTreeMap<String, Value>, BTreeSet<String>)> {
    let Some(outputs) = outputs else {
        return Ok(Default::default());
    };
    let over = |what: String| StateError::corrupt(base, what);
    if outputs.count > limits.max_outputs {
        return Err(over(format!(
            "the state has {} root outputs; the limit is {}",
            outputs.count, limits.max_outputs
        )));
    }
    let mut total = 0;
    let mut values = BTreeMap::new();
    let mut sensitive = BTreeSet::new();
    for (name, entry) in outputs.kept {
        let raw = entry.value.get();
        let shown = truncate(&name, 64);
        if raw.len() > limits.max_value_bytes {
            return Err(over(format!(
                "output {shown:?} is {} bytes of JSON; the limit is {} bytes per output",
                raw.len(),
                limits.max_value_bytes
            )));
        }
        total += raw.len();
        if total > limits.max_total_bytes {
            return Err(over(format!(
                "the root outputs take more than {} bytes of JSON together (the limit)",
                limits.max_total_bytes
            )));
        }
        if depth(raw.as_bytes()) > limits.max_depth {
            return Err(over(format!(
                "output {shown:?} nests arrays and objects more than {} deep (the limit)",
                limits.max_depth
            )));
        }
        let value = serde_json::from_str(raw).map_err(|e| over(describe_json_error(&e)))?;
        if entry.sensitive {
            sensitive.insert(name.clone());
        }
        values.insert(name, value);
    }
    Ok((values, sensitive))
}

/// The deepest nesting of arrays and objects in valid JSON text.
fn depth(json: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in json {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Encrypted first (the envelope has no `version`), then the version.
fn check_header(base: &str, encrypted: bool, version: Option<&RawValue>) -> Result<()> {
    if encrypted {
        return Err(StateError::Encrypted {
            base: base.to_owned(),
        });
    }
    let version = version.map(RawValue::get);
    match version {
        Some(v) if v.parse::<u64>().ok() == Some(SUPPORTED_VERSION) => Ok(()),
        other => Err(StateError::UnsupportedVersion {
            // A version is a number; anything long is not worth echoing into a condition.
            version: other.map(|v| truncate(v, 32)),
            base: base.to_owned(),
        }),
    }
}

/// serde_json's message can quote input (a resource or output value) on a shape error; keep only
/// the kind of error and its position.
fn describe_json_error(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Syntax => "the state is not valid JSON",
        Category::Eof => "the state JSON ends early",
        Category::Data => "a state field has an unexpected type or appears twice",
        Category::Io => "the state could not be read",
    };
    format!("{what} (line {}, column {})", e.line(), e.column())
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encrypted_is_checked_before_the_version() {
        let env = br#"{"serial":1,"lineage":"x","meta":{"key_provider.pbkdf2.k":"eyJ9"},"encrypted_data":"AAAA","encryption_version":"v0"}"#;
        assert!(matches!(
            parse("b", env, &OutputLimits::DEFAULT),
            Err(StateError::Encrypted { .. })
        ));
        // Even when another field has a shape the full parse rejects.
        let odd = br#"{"encryption_version":"v0","serial":"one","resources":7}"#;
        assert!(matches!(
            parse("b", odd, &OutputLimits::DEFAULT),
            Err(StateError::Encrypted { .. })
        ));
    }

    #[test]
    fn version_is_classified_even_when_the_rest_has_another_shape() {
        let v5 = br#"{"version":5,"serial":1,"resources":{"new":"shape"}}"#;
        assert_eq!(
            parse("b", v5, &OutputLimits::DEFAULT).map(|_| ()),
            Err(StateError::UnsupportedVersion {
                version: Some("5".into()),
                base: "b".into()
            })
        );
        let quoted = br#"{"version":"4","serial":1,"lineage":"l","terraform_version":"1"}"#;
        assert!(matches!(
            parse("b", quoted, &OutputLimits::DEFAULT),
            Err(StateError::UnsupportedVersion { version: Some(v), .. }) if v == "\"4\""
        ));
    }

    #[test]
    fn shape_errors_do_not_quote_content() {
        let doc = br#"{"version":4,"serial":1,"lineage":"l","terraform_version":"1.9.0","resources":["top-secret"]}"#;
        let err =
            parse("b", doc, &OutputLimits::DEFAULT).expect_err("a resource must be an object");
        assert!(matches!(err, StateError::Corrupt { .. }));
        assert!(!err.to_string().contains("top-secret"), "{err}");
    }

    #[test]
    fn only_an_object_is_a_state() {
        for bad in [&b"[\"v0\", 4]"[..], b"  null", b"", b"4"] {
            let err = parse("b", bad, &OutputLimits::DEFAULT).expect_err("not an object");
            assert!(err.to_string().contains("not a JSON object"), "{err}");
        }
    }

    #[test]
    fn missing_required_fields_are_named() {
        let doc = br#"{"version":4,"serial":1,"terraform_version":"1.9.0"}"#;
        let err = parse("b", doc, &OutputLimits::DEFAULT).expect_err("lineage missing");
        assert!(
            err.to_string().contains("`lineage` field is missing"),
            "{err}"
        );
    }
}
