//! The state JSON (concepts §16.3.4-6): only the fields CAPTF needs.
//!
//! The document is parsed once, into a struct that names only the top-level fields read here;
//! serde skips everything else (`serde::de::IgnoredAny`) without building values, and each
//! resource keeps only its `mode`, so resource attributes are never materialised and a 64 MiB
//! state decodes in one pass.
//!
//! The encryption envelope and the version are checked before anything else is required: an
//! OpenTofu envelope has `serial`, `lineage`, `meta`, `encrypted_data` and `encryption_version`
//! but no `version`, and a wrong version says more than a missing field. When the one-pass parse
//! fails on a field's shape, a second pass reads only those two header fields so the answer is
//! still `Encrypted` or `UnsupportedVersion` where it applies (that pass runs on failures only).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use crate::error::{Result, StateError};

/// The only state format version this reader accepts.
pub const SUPPORTED_VERSION: u64 = 4;

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
struct Full {
    #[serde(default)]
    encryption_version: Option<IgnoredAny>,
    #[serde(default)]
    version: Option<Value>,
    #[serde(default)]
    serial: Option<u64>,
    #[serde(default)]
    lineage: Option<String>,
    #[serde(default)]
    terraform_version: Option<String>,
    #[serde(default)]
    outputs: Option<BTreeMap<String, OutputEntry>>,
    #[serde(default)]
    resources: Option<Vec<ResourceHead>>,
}

/// Only the fields that decide how to read the rest.
#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    encryption_version: Option<IgnoredAny>,
    #[serde(default)]
    version: Option<Value>,
}

/// A root module output. `type` is not needed: the value is the JSON the module produced.
#[derive(Deserialize)]
struct OutputEntry {
    value: Value,
    #[serde(default)]
    sensitive: bool,
}

/// One resource block (a resource with `count`/`for_each` is one block with several
/// `instances`); only `mode` is read, the attributes are skipped unparsed.
#[derive(Deserialize)]
struct ResourceHead {
    #[serde(default)]
    mode: Option<String>,
}

/// Parses the decompressed state of `base`.
pub(crate) fn parse(base: &str, json: &[u8]) -> Result<Document> {
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
    let mut outputs = BTreeMap::new();
    let mut sensitive_outputs = BTreeSet::new();
    for (name, entry) in full.outputs.unwrap_or_default() {
        if entry.sensitive {
            sensitive_outputs.insert(name.clone());
        }
        outputs.insert(name, entry.value);
    }
    let managed_resources = full
        .resources
        .unwrap_or_default()
        .iter()
        .filter(|r| r.mode.as_deref() == Some("managed"))
        .count() as u64;
    Ok(Document {
        serial,
        lineage,
        terraform_version,
        outputs,
        sensitive_outputs,
        managed_resources,
    })
}

/// Encrypted first (the envelope has no `version`), then the version.
fn check_header(base: &str, encrypted: bool, version: Option<Value>) -> Result<()> {
    if encrypted {
        return Err(StateError::Encrypted {
            base: base.to_owned(),
        });
    }
    match version {
        Some(v) if v.as_u64() == Some(SUPPORTED_VERSION) => Ok(()),
        other => Err(StateError::UnsupportedVersion {
            // A version is a number; anything long is not worth echoing into a condition.
            version: other.map(|v| truncate(&v.to_string(), 32)),
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
        assert!(matches!(parse("b", env), Err(StateError::Encrypted { .. })));
        // Even when another field has a shape the full parse rejects.
        let odd = br#"{"encryption_version":"v0","serial":"one","resources":7}"#;
        assert!(matches!(parse("b", odd), Err(StateError::Encrypted { .. })));
    }

    #[test]
    fn version_is_classified_even_when_the_rest_has_another_shape() {
        let v5 = br#"{"version":5,"serial":1,"resources":{"new":"shape"}}"#;
        assert_eq!(
            parse("b", v5).map(|_| ()),
            Err(StateError::UnsupportedVersion {
                version: Some("5".into()),
                base: "b".into()
            })
        );
        let quoted = br#"{"version":"4","serial":1,"lineage":"l","terraform_version":"1"}"#;
        assert!(matches!(
            parse("b", quoted),
            Err(StateError::UnsupportedVersion { version: Some(v), .. }) if v == "\"4\""
        ));
    }

    #[test]
    fn shape_errors_do_not_quote_content() {
        let doc = br#"{"version":4,"serial":1,"lineage":"l","terraform_version":"1.9.0","resources":["top-secret"]}"#;
        let err = parse("b", doc).expect_err("a resource must be an object");
        assert!(matches!(err, StateError::Corrupt { .. }));
        assert!(!err.to_string().contains("top-secret"), "{err}");
    }

    #[test]
    fn only_an_object_is_a_state() {
        for bad in [&b"[\"v0\", 4]"[..], b"  null", b"", b"4"] {
            let err = parse("b", bad).expect_err("not an object");
            assert!(err.to_string().contains("not a JSON object"), "{err}");
        }
    }

    #[test]
    fn missing_required_fields_are_named() {
        let doc = br#"{"version":4,"serial":1,"terraform_version":"1.9.0"}"#;
        let err = parse("b", doc).expect_err("lineage missing");
        assert!(
            err.to_string().contains("`lineage` field is missing"),
            "{err}"
        );
    }
}
