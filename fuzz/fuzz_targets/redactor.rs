//! The runner's redactor (`captf_runner::redact::Redactor`): secrets from the environment
//! (`add_env`), credential files (`add`), sensitive variables and plan values (`add_known`,
//! `add_json`), removed from the engine's output line by line (as `exec` prints it) and from
//! failure summaries (`diagnostics::failure_summary`, `error_resources`, as `run` records them).
//!
//! Invariant: a secret the redactor holds never appears in what it lets through, as it is,
//! JSON-escaped or base64-encoded: not in the text between two `(redacted)` marks. Declared
//! values count from `MIN_SECRET_LEN` characters (shorter ones are replaced as words only),
//! others when they are not trivial (`is_trivial`).
//!
//! The input: directive lines, then a line `---`, then the text. A directive is
//! `known: VALUE`, `add: VALUE`, `env: NAME=VALUE` or `json: JSON`; `\n` in a value is a
//! newline. Without a `---` line, the first line is a declared secret and the rest the text.

#![no_main]

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use captf_runner::diagnostics::{error_resources, failure_summary};
use captf_runner::redact::{MIN_SECRET_LEN, REDACTED, Redactor, env_is_secret, is_trivial};
use captf_runner::result::{ErrorKind, RunError};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let input = String::from_utf8_lossy(data);
    let (directives, text) = match input.split_once("\n---\n") {
        Some((d, t)) => (d.lines().collect::<Vec<_>>(), t.to_owned()),
        None => match input.split_once('\n') {
            Some((secret, t)) => (vec![secret], t.to_owned()),
            None => return,
        },
    };
    let mut redactor = Redactor::new();
    // The values that must never show: (value, declared).
    let mut secrets: Vec<String> = Vec::new();
    for line in &directives {
        let unescape = |v: &str| v.replace("\\n", "\n");
        if let Some(v) = line.strip_prefix("known: ") {
            let v = unescape(v);
            redactor.add_known(&v);
            declared(&v, &mut secrets);
        } else if let Some(v) = line.strip_prefix("add: ") {
            let v = unescape(v);
            redactor.add(&v);
            plain(&v, &mut secrets);
        } else if let Some(v) = line.strip_prefix("env: ") {
            let v = unescape(v);
            let (name, value) = v.split_once('=').unwrap_or((&v, ""));
            redactor.add_env([(name, value)]);
            if env_is_secret(name) {
                plain(value, &mut secrets);
            }
        } else if let Some(v) = line.strip_prefix("json: ") {
            if let Ok(value) = serde_json::from_str::<Value>(v) {
                redactor.add_json(&value);
                json_leaves(&value, &mut secrets);
            }
        } else if directives.len() == 1 {
            redactor.add_known(line);
            declared(line, &mut secrets);
        }
    }
    let _ = format!("{redactor:?}");
    let forms: Vec<String> = secrets.iter().flat_map(|s| forms(s)).collect();

    // The whole text, and each line as the runner prints engine output.
    check(&forms, &redactor.redact(&text), "the text");
    let one_line: Vec<String> = forms
        .iter()
        .filter(|f| !f.contains(['\n', '\r']))
        .cloned()
        .collect();
    for line in text.split_inclusive('\n') {
        let printed = redactor.redact(line.trim_end_matches(['\n', '\r']));
        check(&one_line, &printed, "a line of output");
    }
    // The failure summary a failed step records (`run`: `fail` over `failure_summary`), from
    // the engine's stderr and from `validate -json`, and the resources an apply failed on.
    let recorded = |summary: &str| RunError::new(ErrorKind::Step, Some("apply"), summary).tail;
    let full = redactor.redact(&failure_summary("apply", 1, None, &text));
    let summary = recorded(&full);
    check(&forms, &summary, "a failure summary");
    no_cut_head(&forms, &full, &summary);
    let full = redactor.redact(&failure_summary("validate", 1, Some(text.as_bytes()), ""));
    let validate = recorded(&full);
    check(&forms, &validate, "a validate summary");
    no_cut_head(&forms, &full, &validate);
    for resource in error_resources(&text) {
        check(&forms, &redactor.redact(&resource), "an error resource");
    }
});

/// A value declared sensitive: itself, trimmed and each line, from `MIN_SECRET_LEN` characters.
fn declared(value: &str, out: &mut Vec<String>) {
    for candidate in candidates(value) {
        if candidate.trim().chars().count() >= MIN_SECRET_LEN {
            out.push(candidate.to_owned());
        }
    }
}

/// A value that may be secret: itself, trimmed and each line, unless trivial.
fn plain(value: &str, out: &mut Vec<String>) {
    for candidate in candidates(value) {
        if !is_trivial(candidate) {
            out.push(candidate.to_owned());
        }
    }
}

fn candidates(value: &str) -> impl Iterator<Item = &str> {
    std::iter::once(value)
        .chain(std::iter::once(value.trim()))
        .chain(value.lines().map(str::trim))
}

fn json_leaves(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => declared(s, out),
        Value::Number(n) => declared(&n.to_string(), out),
        Value::Array(items) => {
            items.iter().for_each(|v| json_leaves(v, out));
            declared(&value.to_string(), out);
        }
        Value::Object(map) => {
            map.values().for_each(|v| json_leaves(v, out));
            declared(&value.to_string(), out);
        }
        Value::Null | Value::Bool(_) => {}
    }
}

/// A secret as it is, JSON-escaped and base64-encoded: the forms the engine may print it in.
fn forms(secret: &str) -> Vec<String> {
    let quoted = serde_json::to_string(secret).expect("a string serializes");
    vec![
        secret.to_owned(),
        quoted[1..quoted.len() - 1].to_owned(),
        STANDARD.encode(secret),
        STANDARD_NO_PAD.encode(secret),
        URL_SAFE.encode(secret),
        URL_SAFE_NO_PAD.encode(secret),
    ]
}

/// No form of a secret stands between two marks.
fn check(forms: &[String], redacted: &str, what: &str) {
    let through: Vec<&str> = redacted.split(REDACTED).collect();
    for form in forms {
        if let Some(part) = through.iter().find(|p| p.contains(form.as_str())) {
            panic!("{what} shows the secret {form:?} in {part:?}");
        }
    }
}

/// A secret that a cap cuts shows none of its head: what a summary lets through after its last
/// mark does not end in `MIN_SECRET_LEN` or more leading characters of a secret whose
/// occurrence in `full` (the redacted summary before any cap) goes on past that point. The
/// redacted one: in a run of a repeated character longer than a secret made of it, redaction
/// leaves the run's remainder, which is no secret's head.
fn no_cut_head(forms: &[String], full: &str, recorded: &str) {
    let last = recorded.rsplit(REDACTED).next().unwrap_or_default();
    if last.is_empty() {
        return;
    }
    for form in forms {
        for (k, _) in form.char_indices().skip(MIN_SECRET_LEN) {
            let head = &form[..k];
            if !last.ends_with(head) {
                continue;
            }
            for (start, _) in full.match_indices(last) {
                let end = start + last.len();
                if full[end - head.len()..].starts_with(form.as_str()) {
                    panic!("a failure summary cut the secret {form:?} and shows its head {head:?}");
                }
            }
        }
    }
}
