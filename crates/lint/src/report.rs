//! Findings, the report and its text/JSON renderings (api.md §3.2.1).

use std::fmt;
use std::path::Path;

use serde::Serialize;

use crate::{EXIT_FINDINGS, EXIT_OK, EXIT_UNPARSABLE, EXIT_USAGE, Options, Role};

/// Severity of a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Fails the exit code.
    Error,
    /// Fails the exit code only under `--strict`.
    Warning,
    /// Never fails.
    Info,
}

impl Severity {
    /// `error`, `warning` or `info`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One finding. `file` is relative to the linted directory; whole-module
/// findings have an empty file and line 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Rule id, e.g. `output/required`.
    pub id: &'static str,
    /// Severity (after `--allow-warning`).
    pub severity: Severity,
    /// File relative to the linted directory, or empty.
    pub file: String,
    /// 1-based line, or 0.
    pub line: usize,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl Finding {
    /// A finding for the whole module.
    pub fn module(id: &'static str, severity: Severity, message: impl Into<String>) -> Finding {
        Finding {
            id,
            severity,
            file: String::new(),
            line: 0,
            message: message.into(),
        }
    }
}

/// Whether the lint ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Checks ran; see the findings.
    Checked,
    /// The module (or image root) could not be read or parsed (exit 2).
    Unparsable(String),
    /// Bad options: unknown contract, role not given and not inferable (exit 3).
    Usage(String),
}

/// The result of linting one module (or image root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The directory as given.
    pub module: String,
    /// Contract version linted against.
    pub contract: String,
    /// Role linted against (given or inferred); `None` when it could not be determined.
    pub role: Option<Role>,
    /// Findings sorted by file, line, id.
    pub findings: Vec<Finding>,
    /// Whether the checks ran.
    pub status: Status,
}

impl Report {
    pub(crate) fn new(dir: &Path, opts: &Options) -> Report {
        Report {
            module: dir.display().to_string(),
            contract: opts.contract.clone(),
            role: opts.role,
            findings: Vec::new(),
            status: Status::Checked,
        }
    }

    /// The report on `module` when it could not be read at all (`why`, exit code 2).
    pub fn unparsable(module: &str, opts: &Options, why: String) -> Report {
        let mut report = Report::new(Path::new(module), opts);
        report.status = Status::Unparsable(why);
        report
    }

    /// Applies `--allow-warning` and sorts.
    pub(crate) fn finish(&mut self, opts: &Options) {
        for f in &mut self.findings {
            if f.severity == Severity::Warning && opts.allow_warnings.contains(f.id) {
                f.severity = Severity::Info;
                f.message.push_str(" (allowed warning)");
            }
        }
        self.findings.sort_by(|a, b| {
            (&a.file, a.line, a.id, &a.message).cmp(&(&b.file, b.line, b.id, &b.message))
        });
        self.findings.dedup();
    }

    /// Number of findings of `severity`.
    pub fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == severity)
            .count()
    }

    /// The set of rule ids found (any severity).
    pub fn ids(&self) -> std::collections::BTreeSet<&'static str> {
        self.findings.iter().map(|f| f.id).collect()
    }

    /// Exit code (api.md §3.2.1): 0 ok, 1 findings (errors, or warnings
    /// under `strict`), 2 unparsable, 3 usage.
    pub fn exit_code(&self, opts: &Options) -> i32 {
        match self.status {
            Status::Usage(_) => EXIT_USAGE,
            Status::Unparsable(_) => EXIT_UNPARSABLE,
            Status::Checked => {
                if self.count(Severity::Error) > 0
                    || (opts.strict && self.count(Severity::Warning) > 0)
                {
                    EXIT_FINDINGS
                } else {
                    EXIT_OK
                }
            }
        }
    }

    fn summary_line(&self) -> String {
        let role = self.role.map_or("-", Role::as_str);
        format!(
            "{} error(s), {} warning(s), {} info (module {}, role {role}, contract {})",
            self.count(Severity::Error),
            self.count(Severity::Warning),
            self.count(Severity::Info),
            self.module,
            self.contract
        )
    }

    /// Text output: one line per finding
    /// `<severity> <id> <file>:<line> <message>` (file `-` for whole-module
    /// findings), then a summary line. A module that could not be linted
    /// prints `fatal: <reason>` before the summary.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            let file = if f.file.is_empty() { "-" } else { &f.file };
            out.push_str(&format!(
                "{} {} {}:{} {}\n",
                f.severity, f.id, file, f.line, f.message
            ));
        }
        match &self.status {
            Status::Checked => {}
            Status::Unparsable(msg) => out.push_str(&format!("fatal: unparsable: {msg}\n")),
            Status::Usage(msg) => out.push_str(&format!("fatal: usage: {msg}\n")),
        }
        out.push_str(&self.summary_line());
        out.push('\n');
        out
    }

    /// The JSON report value (api.md §3.2.1); `error` is added when the
    /// checks could not run.
    pub fn to_json_value(&self) -> serde_json::Value {
        serde_json::to_value(self.json_report()).unwrap_or(serde_json::Value::Null)
    }

    fn json_report(&self) -> JsonReport<'_> {
        JsonReport {
            module: &self.module,
            contract: &self.contract,
            role: self.role.map(Role::as_str),
            findings: &self.findings,
            summary: JsonSummary {
                error: self.count(Severity::Error),
                warning: self.count(Severity::Warning),
                info: self.count(Severity::Info),
            },
            error: match &self.status {
                Status::Checked => None,
                Status::Unparsable(msg) => Some(format!("unparsable: {msg}")),
                Status::Usage(msg) => Some(format!("usage: {msg}")),
            },
        }
    }

    /// Pretty JSON report followed by a newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(&self.json_report())
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        s.push('\n');
        s
    }
}

/// Field order of the JSON report (independent of serde_json's map ordering).
#[derive(Serialize)]
struct JsonReport<'a> {
    module: &'a str,
    contract: &'a str,
    role: Option<&'static str>,
    findings: &'a [Finding],
    summary: JsonSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct JsonSummary {
    error: usize,
    warning: usize,
    info: usize,
}
