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
//! Of the environment and the credential files, values that are too short or too common to be
//! secrets ([`is_trivial`]) are ignored: replacing every `1` or `true` in a log would hide
//! everything and protect nothing. A value declared sensitive ([`Redactor::add_known`]) is a
//! secret however it looks, from [`MIN_DECLARED_LEN`] characters on: one shorter than
//! [`MIN_SECRET_LEN`] is replaced where it stands as a word of its own (a `1` or `42` is
//! never hidden: it would hide every count and protect nothing). A multi-line secret is also added line by line, since output is redacted
//! one line at a time, and every secret is also looked for as the engine may print it: escaped
//! inside a JSON string, and base64-encoded (standard and URL-safe, with and without padding).

use std::collections::BTreeSet;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
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

/// Shortest value declared sensitive that is treated as a secret.
pub const MIN_DECLARED_LEN: usize = 4;

/// Digits-only values this long are secrets (an account number, a PIN); shorter ones are
/// ports and counts.
pub const MIN_SECRET_DIGITS: usize = 8;

/// Whether `value` is too short or too plain to be treated as a secret.
pub fn is_trivial(value: &str) -> bool {
    let v = value.trim();
    let digits = v.chars().all(|c| c.is_ascii_digit());
    v.chars().count() < MIN_SECRET_LEN
        || (digits && v.len() < MIN_SECRET_DIGITS)
        || matches!(v, "true" | "false" | "null")
}

/// A set of secret values and the function that removes them from text.
///
/// `Debug` prints only the number of secrets.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Replaced wherever they appear.
    secrets: BTreeSet<String>,
    /// Short declared secrets: replaced only as words of their own.
    words: BTreeSet<String>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Redactor({} secrets)", self.len())
    }
}

impl Redactor {
    /// An empty redactor.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one value that may be secret (of the environment or a credential file), unless it
    /// is trivial; and, when it spans lines, each of its lines.
    pub fn add(&mut self, value: &str) {
        for candidate in candidates(value) {
            if !is_trivial(candidate) {
                self.insert(candidate, false);
            }
        }
    }

    /// Adds one value declared sensitive: a secret whatever it looks like from
    /// [`MIN_DECLARED_LEN`] characters on; one shorter than [`MIN_SECRET_LEN`] is replaced as a
    /// word of its own.
    pub fn add_known(&mut self, value: &str) {
        for candidate in candidates(value) {
            let length = candidate.trim().chars().count();
            if length >= MIN_DECLARED_LEN {
                self.insert(candidate, length < MIN_SECRET_LEN);
            }
        }
    }

    /// Adds every string and number leaf of `value` and the compact JSON of every container
    /// (the engine may print a whole sensitive object), all declared sensitive.
    pub fn add_json(&mut self, value: &Value) {
        match value {
            Value::String(s) => self.add_known(s),
            Value::Number(n) => self.add_known(&n.to_string()),
            Value::Array(items) => {
                items.iter().for_each(|v| self.add_json(v));
                self.add_known(&value.to_string());
            }
            Value::Object(map) => {
                map.values().for_each(|v| self.add_json(v));
                self.add_known(&value.to_string());
            }
            Value::Null | Value::Bool(_) => {}
        }
    }

    /// `secret` and the forms the engine may print it in.
    fn insert(&mut self, secret: &str, word: bool) {
        let set = if word {
            &mut self.words
        } else {
            &mut self.secrets
        };
        set.insert(secret.to_owned());
        // Inside a JSON string: quotes, backslashes and control characters escaped.
        let quoted = serde_json::to_string(secret).unwrap_or_default();
        if let Some(escaped) = quoted.get(1..quoted.len().saturating_sub(1))
            && escaped != secret
        {
            set.insert(escaped.to_owned());
        }
        for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
            set.insert(engine.encode(secret));
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

    /// Number of distinct secret strings held (each form counts).
    pub fn len(&self) -> usize {
        self.secrets.len() + self.words.len()
    }

    /// Whether no secret is held.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty() && self.words.is_empty()
    }

    /// `text` with every occurrence of every secret replaced by [`REDACTED`]. Overlapping
    /// matches merge into one replacement, so the result never shows part of a secret.
    pub fn redact(&self, text: &str) -> String {
        if self.is_empty() || text.is_empty() {
            return text.to_owned();
        }
        let anywhere = self.secrets.iter().flat_map(|s| {
            text.match_indices(s.as_str())
                .map(|(i, m)| (i, i + m.len()))
        });
        let words = self.words.iter().flat_map(|s| {
            text.match_indices(s.as_str())
                .map(|(i, m)| (i, i + m.len()))
                .filter(|&(start, end)| alone(text, start, end))
        });
        let mut ranges: Vec<(usize, usize)> = anywhere.chain(words).collect();
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

/// A value, trimmed, and each of its lines.
fn candidates(value: &str) -> impl Iterator<Item = &str> {
    std::iter::once(value)
        .chain(std::iter::once(value.trim()))
        .chain(value.lines().map(str::trim))
}

/// Whether `text[start..end]` stands as a word of its own: no letter, digit or `_` touches it.
fn alone(text: &str, start: usize, end: usize) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    !text[..start].chars().next_back().is_some_and(word)
        && !text[end..].chars().next().is_some_and(word)
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
                &["1", "true", "1234567", "abc"],
                "1 true 1234567 abc",
                "1 true 1234567 abc",
            ),
            // A long number is (an account, a PIN).
            (&["12345678"], "acct 12345678.", "acct (redacted)."),
            // Escaped inside a JSON string, as the engine prints values.
            (
                &["pa\"ss\\word"],
                r#"{"pw":"pa\"ss\\word"}"#,
                r#"{"pw":"(redacted)"}"#,
            ),
            // Base64-encoded, as a Secret's data or a kubeconfig holds it.
            (
                &["hunter22-pw?>"],
                "data: aHVudGVyMjItcHc/Pg== url: aHVudGVyMjItcHc_Pg",
                "data: (redacted) url: (redacted)",
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
    fn a_short_declared_secret_is_replaced_as_a_word_of_its_own() {
        let mut r = Redactor::new();
        r.add_known("ab12");
        r.add_known(" ");
        r.add_known("1");
        r.add_known("abc");
        assert_eq!(
            r.redact("user=ab12 cab12e ab12_x (ab12) 1 abc"),
            "user=(redacted) cab12e ab12_x ((redacted)) 1 abc"
        );
        let mut plain = Redactor::new();
        plain.add("ab12");
        assert!(plain.is_empty(), "an undeclared short value is no secret");
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
