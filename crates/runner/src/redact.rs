//! Redaction: every secret value the runner knows is replaced by [`REDACTED`] in every text it
//! emits (engine output, failure summaries, the result document).
//!
//! Sources of secrets (api.md §4.4 step 7):
//! - the environment: every value except those of [`PUBLIC_ENV`] names (and `KUBERNETES_*`,
//!   `LC_*`), because the credentials mirror arrives by `envFrom` with arbitrary key names;
//! - every file of the credentials folder (`/var/run/captf/credentials`, the same mirror);
//! - values of root variables the rendered root declares `sensitive`;
//! - values a parsed plan marks sensitive ([`crate::plan::Plan::sensitive_values`]).
//!
//! Values that are too short or too common to be secrets ([`is_trivial`]) are ignored: replacing
//! every `1` or `true` in a log would hide everything and protect nothing. A multi-line secret is
//! also added line by line, since output is redacted one line at a time.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

/// What a secret is replaced with.
pub const REDACTED: &str = "(redacted)";

/// Shortest value treated as a secret.
pub const MIN_SECRET_LEN: usize = 6;

/// Environment variables whose values are not secret (set by the Job, the runtime or the runner).
pub const PUBLIC_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "HOSTNAME",
    "TMPDIR",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "TERM",
    "LANG",
    "USER",
    "SHELL",
    "_",
    "TF_IN_AUTOMATION",
    "TF_INPUT",
    "TF_DATA_DIR",
    "TF_CLI_CONFIG_FILE",
    "KUBE_NAMESPACE",
    "CHECKPOINT_DISABLE",
];

/// Whether the value of environment variable `name` may be secret.
pub fn env_is_secret(name: &str) -> bool {
    !(PUBLIC_ENV.contains(&name) || name.starts_with("KUBERNETES_") || name.starts_with("LC_"))
}

/// Whether `value` is too short or too plain to be treated as a secret.
pub fn is_trivial(value: &str) -> bool {
    let v = value.trim();
    v.chars().count() < MIN_SECRET_LEN
        || v.chars().all(|c| c.is_ascii_digit())
        || matches!(v, "true" | "false" | "null")
}

/// A set of secret values and the function that removes them from text.
///
/// `Debug` prints only the number of secrets.
#[derive(Clone, Default)]
pub struct Redactor {
    secrets: BTreeSet<String>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets.len())
    }
}

impl Redactor {
    /// An empty redactor.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one secret value (and, when it spans lines, each of its lines).
    pub fn add(&mut self, value: &str) {
        for candidate in std::iter::once(value)
            .chain(std::iter::once(value.trim()))
            .chain(value.lines().map(str::trim))
        {
            if !is_trivial(candidate) {
                self.secrets.insert(candidate.to_owned());
            }
        }
    }

    /// Adds every string and number leaf of `value`, and the compact JSON of every container
    /// (the engine may print a whole sensitive object).
    pub fn add_json(&mut self, value: &Value) {
        match value {
            Value::String(s) => self.add(s),
            Value::Number(n) => self.add(&n.to_string()),
            Value::Array(items) => {
                items.iter().for_each(|v| self.add_json(v));
                self.add(&value.to_string());
            }
            Value::Object(map) => {
                map.values().for_each(|v| self.add_json(v));
                self.add(&value.to_string());
            }
            Value::Null | Value::Bool(_) => {}
        }
    }

    /// Adds the secret values of an environment (see [`env_is_secret`]).
    pub fn add_env<'a>(&mut self, env: impl IntoIterator<Item = (&'a str, &'a str)>) {
        for (name, value) in env {
            if env_is_secret(name) {
                self.add(value);
            }
        }
    }

    /// Number of distinct secret strings held.
    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    /// Whether no secret is held.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `text` with every occurrence of every secret replaced by [`REDACTED`]. Overlapping
    /// matches merge into one replacement, so the result never shows part of a secret.
    pub fn redact(&self, text: &str) -> String {
        if self.secrets.is_empty() || text.is_empty() {
            return text.to_owned();
        }
        let mut ranges: Vec<(usize, usize)> = self
            .secrets
            .iter()
            .flat_map(|s| {
                text.match_indices(s.as_str())
                    .map(|(i, m)| (i, i + m.len()))
            })
            .collect();
        if ranges.is_empty() {
            return text.to_owned();
        }
        ranges.sort_unstable();
        let mut out = String::with_capacity(text.len());
        let mut pos = 0;
        let mut iter = ranges.into_iter().peekable();
        while let Some((start, mut end)) = iter.next() {
            while let Some(&(next_start, next_end)) = iter.peek() {
                if next_start > end {
                    break;
                }
                end = end.max(next_end);
                iter.next();
            }
            if start >= pos {
                out.push_str(&text[pos..start]);
                out.push_str(REDACTED);
                pos = end;
            } else if end > pos {
                pos = end;
            }
        }
        out.push_str(&text[pos..]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn redactor(secrets: &[&str]) -> Redactor {
        let mut r = Redactor::new();
        secrets.iter().for_each(|s| r.add(s));
        r
    }

    #[test]
    fn redacts_table() {
        let cases: &[(&[&str], &str, &str)] = &[
            (&[], "nothing to hide", "nothing to hide"),
            (&["hunter22"], "pw=hunter22!", "pw=(redacted)!"),
            (&["hunter22"], "hunter22 hunter22", "(redacted) (redacted)"),
            // Overlapping secrets merge into one replacement.
            (&["abcdef12", "ef123456"], "xabcdef123456y", "x(redacted)y"),
            // A secret inside another: the longer one wins.
            (
                &["secret-token-value", "token-value"],
                "a secret-token-value b",
                "a (redacted) b",
            ),
            // Trivial values are not secrets.
            (
                &["1", "true", "12345678", "abc"],
                "1 true 12345678 abc",
                "1 true 12345678 abc",
            ),
            // Multi-line secrets match line by line.
            (
                &["-----BEGIN KEY-----\nAAAABBBBCCCC\n-----END KEY-----"],
                "line AAAABBBBCCCC",
                "line (redacted)",
            ),
            // Non-ASCII text around a secret.
            (&["päss-wörd"], "ä päss-wörd ö", "ä (redacted) ö"),
        ];
        for (secrets, text, want) in cases {
            assert_eq!(
                redactor(secrets).redact(text),
                *want,
                "{secrets:?} in {text:?}"
            );
        }
    }

    #[test]
    fn env_values_are_secret_unless_public() {
        let mut r = Redactor::new();
        r.add_env([
            ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI"),
            ("HOME", "/captf/work"),
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("REGION", "eu-central-1"),
        ]);
        assert_eq!(
            r.redact("wJalrXUtnFEMI /captf/work 10.96.0.1 eu-central-1"),
            "(redacted) /captf/work 10.96.0.1 (redacted)"
        );
    }

    #[test]
    fn json_leaves_and_containers() {
        let mut r = Redactor::new();
        r.add_json(
            &json!({"user": "admin-user", "pw": "s3cr3t-pw", "ratio": 5432.125, "on": true}),
        );
        let text = r.redact("admin-user s3cr3t-pw 5432.125 true");
        assert_eq!(text, "(redacted) (redacted) (redacted) true");
        assert!(format!("{r:?}").starts_with("Redactor("));
        assert!(!format!("{r:?}").contains("s3cr3t"));
    }
}
