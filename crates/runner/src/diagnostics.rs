//! What the runner reads from engine output: failure summaries, the resources an apply failed
//! on, the `Apply complete!` counts, and the managed resources of `state list`. Pure text
//! functions; the caller redacts before anything leaves the runner.

use serde_json::Value;

use crate::plan::truncate_str;
use crate::result::{Changes, MAX_ERROR_RESOURCES, MAX_SUMMARY_BYTES};

/// `s` without ANSI escape sequences (CSI `ESC [ … letter` and two-byte `ESC x`).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        // CSI: parameters up to a final byte in `@`..=`~`; any other escape is two characters.
        if chars.next() == Some('[') {
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

/// A diagnostic line without the box-drawing frame the engines draw around diagnostics.
fn unframe(line: &str) -> &str {
    line.trim_start_matches(['│', '╷', '╵', ' ', '\t'])
        .trim_end()
}

/// The `Error: <summary>` headers of engine stderr, in order, without duplicates.
pub fn error_headers(stderr: &str) -> Vec<String> {
    let clean = strip_ansi(stderr);
    let mut out: Vec<String> = Vec::new();
    for line in clean.lines().map(unframe) {
        if let Some(h) = line.strip_prefix("Error: ") {
            let h = h.trim().to_owned();
            if !h.is_empty() && !out.contains(&h) {
                out.push(h);
            }
        }
    }
    out
}

/// `<address>: <summary>` for each error diagnostic that names a resource (`with <address>,`),
/// at most [`MAX_ERROR_RESOURCES`], each at most [`MAX_SUMMARY_BYTES`].
pub fn error_resources(stderr: &str) -> Vec<String> {
    let clean = strip_ansi(stderr);
    let mut out: Vec<String> = Vec::new();
    let mut header: Option<String> = None;
    for line in clean.lines().map(unframe) {
        if let Some(h) = line.strip_prefix("Error: ") {
            header = Some(h.trim().to_owned());
        } else if let (Some(h), Some(rest)) = (&header, line.strip_prefix("with ")) {
            let address = rest.trim_end_matches(',').trim();
            let entry = truncate_str(&format!("{address}: {h}"), MAX_SUMMARY_BYTES);
            if !out.contains(&entry) && out.len() < MAX_ERROR_RESOURCES {
                out.push(entry);
            }
            header = None;
        } else if line.starts_with("Warning: ") {
            header = None;
        }
    }
    out
}

/// The summary of `validate -json` output: `<summary>: <detail> (<file>:<line>)` of each error
/// diagnostic, joined by `; `. `None` when the output is not a validate document or has no error.
pub fn validate_summary(stdout: &[u8]) -> Option<String> {
    let doc: Value = serde_json::from_slice(stdout).ok()?;
    let parts: Vec<String> = doc
        .get("diagnostics")?
        .as_array()?
        .iter()
        .filter(|d| d.get("severity").and_then(Value::as_str) == Some("error"))
        .map(|d| {
            let text = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").trim();
            let mut s = text("summary").to_owned();
            let detail = text("detail");
            if !detail.is_empty() {
                s.push_str(": ");
                s.push_str(&detail.split_whitespace().collect::<Vec<_>>().join(" "));
            }
            if let Some(range) = d.get("range") {
                let file = range.get("filename").and_then(Value::as_str).unwrap_or("");
                let line = range.pointer("/start/line").and_then(Value::as_u64);
                if let Some(line) = line {
                    s.push_str(&format!(" ({file}:{line})"));
                }
            }
            s
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The failure summary of a step, not yet redacted nor cut: the redactor must see a secret
/// whole before [`crate::result::RunError::new`] cuts the text to [`MAX_SUMMARY_BYTES`]. From
/// `validate -json` diagnostics when `validate_stdout` is given, else from the `Error:` headers of
/// stderr, else `step <name> exited <code>; see the Job's logs`.
pub fn failure_summary(
    step: &str,
    exit: i32,
    validate_stdout: Option<&[u8]>,
    stderr: &str,
) -> String {
    let from_validate = validate_stdout.and_then(validate_summary);
    let headers = error_headers(stderr);
    match from_validate {
        Some(s) => s,
        None if !headers.is_empty() => headers.join("; "),
        None => format!("step {step} exited {exit}; see the Job's logs"),
    }
}

/// The counts of an `Apply complete! Resources: …` or `Destroy complete! Resources: …` line.
pub fn complete_counts(line: &str) -> Option<Changes> {
    let line = strip_ansi(line);
    let rest = ["Apply complete! Resources:", "Destroy complete! Resources:"]
        .iter()
        .find_map(|p| line.trim().strip_prefix(p))?;
    let mut c = Changes::default();
    let mut any = false;
    for part in rest.trim().trim_end_matches('.').split(',') {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(n) = n.parse::<u32>() else { continue };
        any = true;
        match what {
            "added" => c.add = n,
            "changed" => c.change = n,
            "destroyed" => c.destroy = n,
            "imported" => c.import = n,
            _ => {}
        }
    }
    any.then_some(c)
}

/// Number of managed resource instances in `state list` output (data sources excluded).
pub fn managed_addresses(state_list: &str) -> usize {
    state_list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && is_managed(l))
        .count()
}

fn is_managed(address: &str) -> bool {
    // Drop instance keys (`["a.b"]`, `[0]`), which may contain dots, then skip `module.<name>`
    // pairs: what follows is `data` for a data source, else the resource type.
    let mut plain = String::with_capacity(address.len());
    let mut depth = 0usize;
    let mut quoted = false;
    let mut prev = '\0';
    for c in address.chars() {
        match c {
            '"' if depth > 0 && prev != '\\' => quoted = !quoted,
            '[' if !quoted => depth += 1,
            ']' if !quoted => depth = depth.saturating_sub(1),
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
        prev = c;
    }
    let parts: Vec<&str> = plain.split('.').collect();
    let mut i = 0;
    while parts.get(i) == Some(&"module") {
        i += 2;
    }
    parts.get(i).is_some_and(|p| *p != "data")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOFU_STDERR: &str = "\u{1b}[31m╷\u{1b}[0m\n│ Error: local-exec provisioner error\n│ \n│   with terraform_data.slow,\n│   on main.tf line 3, in resource \"terraform_data\" \"slow\":\n│    3:   provisioner \"local-exec\" {\n│ \n│ Error running command 'exit 3': exit status 3.\n╵\n\nError: Failed to save state\n\nError: local-exec provisioner error\n";

    #[test]
    fn ansi_is_stripped() {
        assert_eq!(
            strip_ansi("\u{1b}[1m\u{1b}[31mError:\u{1b}[0m x"),
            "Error: x"
        );
        assert_eq!(strip_ansi("plain"), "plain");
    }

    #[test]
    fn headers_and_resources() {
        assert_eq!(
            error_headers(TOFU_STDERR),
            ["local-exec provisioner error", "Failed to save state"]
        );
        assert_eq!(
            error_resources(TOFU_STDERR),
            ["terraform_data.slow: local-exec provisioner error"]
        );
        assert!(error_headers("all good\n").is_empty());
    }

    #[test]
    #[allow(clippy::type_complexity)] // table rows are tuples
    fn summaries() {
        let validate = br#"{"format_version":"1.0","valid":false,"error_count":1,"warning_count":1,"diagnostics":[
            {"severity":"warning","summary":"Deprecated","detail":"x"},
            {"severity":"error","summary":"Unsupported attribute","detail":"This object does not have\n an attribute named \"exports\".","range":{"filename":"main.tf.json","start":{"line":12,"column":3}}}]}"#;
        let cases: Vec<(&str, i32, Option<&[u8]>, &str, &str)> = vec![
            (
                "validate",
                1,
                Some(&validate[..]),
                "",
                "Unsupported attribute: This object does not have an attribute named \"exports\". (main.tf.json:12)",
            ),
            (
                "apply",
                1,
                None,
                TOFU_STDERR,
                "local-exec provisioner error; Failed to save state",
            ),
            (
                "init",
                1,
                None,
                "something odd\n",
                "step init exited 1; see the Job's logs",
            ),
            (
                "validate",
                1,
                Some(b"not json"),
                "Error: Invalid JSON\n",
                "Invalid JSON",
            ),
        ];
        for (step, exit, v, stderr, want) in cases {
            assert_eq!(failure_summary(step, exit, v, stderr), want, "{step}");
        }
        let long = format!("Error: {}\n", "x".repeat(1000));
        // Found by the `redactor` fuzz target: cut here, a secret across the cut kept its head.
        assert_eq!(failure_summary("apply", 1, None, &long), "x".repeat(1000));
    }

    #[test]
    #[allow(clippy::type_complexity)] // table rows are tuples
    fn complete_lines() {
        let cases: &[(&str, Option<(u32, u32, u32, u32)>)] = &[
            (
                "Apply complete! Resources: 1 added, 2 changed, 3 destroyed.",
                Some((1, 2, 3, 0)),
            ),
            (
                "Apply complete! Resources: 4 imported, 1 added, 0 changed, 0 destroyed.",
                Some((1, 0, 0, 4)),
            ),
            (
                "Destroy complete! Resources: 3 destroyed.",
                Some((0, 0, 3, 0)),
            ),
            (
                "\u{1b}[1mApply complete! Resources: 0 added, 0 changed, 0 destroyed.\u{1b}[0m",
                Some((0, 0, 0, 0)),
            ),
            (
                "Apply complete! Resources: 0 added, 0 changed, 0 destroyed, 1 forgotten.",
                Some((0, 0, 0, 0)),
            ),
            ("Plan: 1 to add, 0 to change, 0 to destroy.", None),
            ("", None),
        ];
        for (line, want) in cases {
            let got = complete_counts(line).map(|c| (c.add, c.change, c.destroy, c.import));
            assert_eq!(got, *want, "{line:?}");
        }
    }

    #[test]
    fn state_list_counts_managed_only() {
        let out = "terraform_data.a\ndata.external.x\nmodule.role.terraform_data.b[0]\nmodule.role.data.http.y\nmodule.m[\"data.z\"].terraform_data.c\nmodule.m[\"a\"].data.x.y\n\n";
        assert_eq!(managed_addresses(out), 3);
        assert_eq!(managed_addresses(""), 0);
    }
}
