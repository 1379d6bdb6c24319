//! Canonical JSON: the only JSON writer used for rendered files and hashes.
//!
//! Object keys are sorted by their UTF-8 bytes at every level, whatever the
//! iteration order of `serde_json::Map` (another workspace crate may enable
//! serde_json's `preserve_order`). Strings escape only `"`, `\` and control
//! characters (`\b \f \n \r \t`, others `\u00xx`); `<`, `>`, `&` and all
//! non-ASCII characters are written as raw UTF-8. Numbers use serde_json's
//! `Display`. Two layouts exist: compact (no whitespace; used for hashing)
//! and pretty (two-space indent, `": "`, empty containers as `{}`/`[]`,
//! trailing newline; used for the rendered files).

use serde_json::{Number, Value};

use crate::error::{Error, Result};

/// Layout of the written JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    Compact,
    Pretty,
}

/// Which numbers are accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Numbers {
    /// Any JSON number (user variables may be fractional, e.g. `0.5`).
    Any,
    /// Only integers that fit i64/u64: a fractional or exponent-form number has
    /// no single canonical spelling across JSON implementations.
    IntegersOnly,
}

/// Compact canonical bytes of any JSON value.
pub fn canonical_json(value: &Value) -> Vec<u8> {
    let mut w = Writer::new(Style::Compact, Numbers::Any);
    w.value(value);
    w.out
}

/// Pretty canonical bytes of any JSON value, with a trailing newline.
pub fn canonical_json_pretty(value: &Value) -> Vec<u8> {
    let mut w = Writer::new(Style::Pretty, Numbers::Any);
    w.value(value);
    w.out.push(b'\n');
    w.out
}

/// Compact canonical bytes of a cluster `exports` value.
///
/// Fails with [`Error::ExportsNotCanonical`] (naming the JSON pointer) when a
/// number is fractional, exponent-form or outside i64/u64: such exports keep
/// machines and pools at `WaitingForClusterExports`.
pub fn canonicalize_exports(value: &Value) -> Result<Vec<u8>> {
    write(value, Style::Compact, Numbers::IntegersOnly)
}

pub(crate) fn write(value: &Value, style: Style, numbers: Numbers) -> Result<Vec<u8>> {
    let mut w = Writer::new(style, numbers);
    w.value(value);
    if let Some(path) = w.bad_number {
        return Err(Error::ExportsNotCanonical { path });
    }
    if style == Style::Pretty {
        w.out.push(b'\n');
    }
    Ok(w.out)
}

struct Writer {
    style: Style,
    numbers: Numbers,
    out: Vec<u8>,
    depth: usize,
    /// JSON pointer segments of the value being written, for error paths.
    path: Vec<String>,
    bad_number: Option<String>,
}

impl Writer {
    fn new(style: Style, numbers: Numbers) -> Self {
        Writer {
            style,
            numbers,
            out: Vec::new(),
            depth: 0,
            path: Vec::new(),
            bad_number: None,
        }
    }

    fn value(&mut self, value: &Value) {
        match value {
            Value::Null => self.out.extend_from_slice(b"null"),
            Value::Bool(true) => self.out.extend_from_slice(b"true"),
            Value::Bool(false) => self.out.extend_from_slice(b"false"),
            Value::Number(n) => self.number(n),
            Value::String(s) => self.string(s),
            Value::Array(items) => {
                if items.is_empty() {
                    self.out.extend_from_slice(b"[]");
                    return;
                }
                self.out.push(b'[');
                self.depth += 1;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(b',');
                    }
                    self.newline();
                    self.path.push(i.to_string());
                    self.value(item);
                    self.path.pop();
                }
                self.depth -= 1;
                self.newline();
                self.out.push(b']');
            }
            Value::Object(map) => {
                if map.is_empty() {
                    self.out.extend_from_slice(b"{}");
                    return;
                }
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                self.out.push(b'{');
                self.depth += 1;
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        self.out.push(b',');
                    }
                    self.newline();
                    self.string(key);
                    self.out.push(b':');
                    if self.style == Style::Pretty {
                        self.out.push(b' ');
                    }
                    self.path.push(key.replace('~', "~0").replace('/', "~1"));
                    self.value(item);
                    self.path.pop();
                }
                self.depth -= 1;
                self.newline();
                self.out.push(b'}');
            }
        }
    }

    fn newline(&mut self) {
        if self.style == Style::Pretty {
            self.out.push(b'\n');
            for _ in 0..self.depth {
                self.out.extend_from_slice(b"  ");
            }
        }
    }

    fn number(&mut self, n: &Number) {
        if self.numbers == Numbers::IntegersOnly
            && !(n.is_i64() || n.is_u64())
            && self.bad_number.is_none()
        {
            let mut pointer = String::new();
            for seg in &self.path {
                pointer.push('/');
                pointer.push_str(seg);
            }
            self.bad_number = Some(pointer);
        }
        self.out.extend_from_slice(n.to_string().as_bytes());
    }

    fn string(&mut self, s: &str) {
        self.out.push(b'"');
        for c in s.chars() {
            match c {
                '"' => self.out.extend_from_slice(b"\\\""),
                '\\' => self.out.extend_from_slice(b"\\\\"),
                '\n' => self.out.extend_from_slice(b"\\n"),
                '\r' => self.out.extend_from_slice(b"\\r"),
                '\t' => self.out.extend_from_slice(b"\\t"),
                '\u{08}' => self.out.extend_from_slice(b"\\b"),
                '\u{0c}' => self.out.extend_from_slice(b"\\f"),
                c if (c as u32) < 0x20 => {
                    self.out
                        .extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
                }
                c => {
                    let mut buf = [0u8; 4];
                    self.out
                        .extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        self.out.push(b'"');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sorts_keys_and_escapes_minimally() {
        let v = json!({"b": [1, {"y": null, "x": true}], "a": "<&>\"\\\n\u{1}é"});
        assert_eq!(
            String::from_utf8(canonical_json(&v)).expect("utf8"),
            r#"{"a":"<&>\"\\\n\u0001é","b":[1,{"x":true,"y":null}]}"#
        );
    }

    #[test]
    fn pretty_layout_is_fixed() {
        let v = json!({"z": {}, "a": [], "m": {"k": [1, 2]}});
        assert_eq!(
            String::from_utf8(canonical_json_pretty(&v)).expect("utf8"),
            "{\n  \"a\": [],\n  \"m\": {\n    \"k\": [\n      1,\n      2\n    ]\n  },\n  \"z\": {}\n}\n"
        );
    }

    #[test]
    fn exports_reject_non_integers_with_pointer() {
        let ok = json!({"a": [1, -2, 18446744073709551615u64]});
        assert!(canonicalize_exports(&ok).is_ok());
        for (raw, want) in [
            (r#"{"a":{"b/c":[0, 0.5]}}"#, "/a/b~1c/1"),
            (r#"{"n": 1e3}"#, "/n"),
            (r#"{"n": 1.0}"#, "/n"),
            (r#"{"n": 99999999999999999999}"#, "/n"),
            (r#"2.5"#, ""),
        ] {
            let v: Value = serde_json::from_str(raw).expect("valid json");
            match canonicalize_exports(&v) {
                Err(Error::ExportsNotCanonical { path }) => assert_eq!(path, want, "{raw}"),
                other => panic!("{raw}: expected ExportsNotCanonical, got {other:?}"),
            }
        }
    }
}
