//! The result document (api.md §4.6): compact JSON written to the termination-message path,
//! at most [`MAX_RESULT_BYTES`].
//!
//! `drift` and `error` are always present (`null` when unset); `changes` and `plan` only when
//! set. Counters use the controller's vocabulary (`create`, `update`, `replace`, `delete`, as in
//! `status.lastRun.drift`), not the older `add`/`change`/`destroy`; `changes` keeps the engine's
//! own words from its `Apply complete!` line.
//!
//! [`ResultDocument::encode`] shrinks an oversized document, re-checking after each stage:
//! 1. drop `changes`, then `error.resources`;
//! 2. halve `error.tail` repeatedly, keeping the latter half (below 16 bytes: empty);
//! 3. halve `plan.resources` repeatedly (`plan.truncated = true`);
//! 4. empty `drift.resources`;
//! 5. drop steps from the second onward until only the first and the last remain;
//! 6. last resort: `{version, op, error: {kind}, plan: {hash, counts…, truncated}}`.

use serde::{Deserialize, Serialize};

use crate::drift::Drift;
use crate::plan::{PlanSummary, is_zero, truncate_str};

/// Version of the document layout.
pub const RESULT_VERSION: u32 = 1;
/// Cap of a termination message.
pub const MAX_RESULT_BYTES: usize = 4096;
/// Cap of `error.tail` and of each `error.resources` entry.
pub const MAX_SUMMARY_BYTES: usize = 512;
/// Most `error.resources` entries.
pub const MAX_ERROR_RESOURCES: usize = 10;

/// Class of a failed run (`status.lastRun.error.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// The image breaks the image contract (no step).
    ImageLayout,
    /// A step failed (including the `flags` and `prepare` pseudo-steps).
    Step,
    /// A step was stopped by SIGTERM.
    Interrupted,
    /// A guarded apply stopped before a destructive plan (no step).
    Blocked,
    /// An approved apply planned something else (no step).
    PlanChanged,
    /// The backend holds another state than the one the Job was started for (step
    /// `state-check`); the engine did not run against it.
    StateMismatch,
}

impl ErrorKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::ImageLayout => "image-layout",
            ErrorKind::Step => "step",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::Blocked => "blocked",
            ErrorKind::PlanChanged => "plan-changed",
            ErrorKind::StateMismatch => "state-mismatch",
        }
    }
}

/// `image`: what ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageInfo {
    /// `--image`, echoed.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The image ships a provider mirror (`/captf/providers`).
    #[serde(default, skip_serializing_if = "crate::plan::is_false")]
    pub providers_mirror: bool,
}

/// `runtime`: the engine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeInfo {
    /// `--bin`.
    pub command: Vec<String>,
    /// `terraform_version` of `<bin> version -json`; empty when unknown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
}

/// One executed step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Step name.
    pub name: String,
    /// Exit code (128 + signal when killed by a signal).
    pub exit: i32,
    /// Wall time, rounded to 0.1 s.
    pub seconds: f64,
}

impl StepRecord {
    /// A record with `seconds` rounded to one decimal.
    pub fn new(name: impl Into<String>, exit: i32, elapsed: std::time::Duration) -> Self {
        StepRecord {
            name: name.into(),
            exit,
            seconds: (elapsed.as_secs_f64() * 10.0).round() / 10.0,
        }
    }
}

/// `error`: why the run failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunError {
    /// Class.
    pub kind: ErrorKind,
    /// Failing step; `null` for `image-layout`, `blocked`, `plan-changed`.
    #[serde(default)]
    pub step: Option<String>,
    /// Curated, redacted summary (≤ 512 bytes), despite its name.
    #[serde(default)]
    pub tail: String,
    /// `<address>: <summary>` of resources an apply or destroy failed on (≤ 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
}

impl RunError {
    /// An error of `kind` at `step` with `summary` cut to [`MAX_SUMMARY_BYTES`].
    pub fn new(kind: ErrorKind, step: Option<&str>, summary: &str) -> Self {
        RunError {
            kind,
            step: step.map(str::to_owned),
            tail: truncate_str(summary, MAX_SUMMARY_BYTES),
            resources: Vec::new(),
        }
    }
}

/// `changes`: counts from the engine's final `Apply complete!` / `Destroy complete!` line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    /// Resources added.
    pub add: u32,
    /// Resources changed.
    pub change: u32,
    /// Resources destroyed.
    pub destroy: u32,
    /// Resources imported.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub import: u32,
}

/// The whole result document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultDocument {
    /// [`RESULT_VERSION`].
    pub version: u32,
    /// The operation; absent when `--op` could not be parsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// What ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageInfo>,
    /// The engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeInfo>,
    /// Executed steps in order.
    #[serde(default)]
    pub steps: Vec<StepRecord>,
    /// Drift found by a drift run.
    #[serde(default)]
    pub drift: Option<Drift>,
    /// Why the run failed.
    #[serde(default)]
    pub error: Option<RunError>,
    /// Counts of an apply or destroy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Changes>,
    /// The plan of a plan run, a blocked apply or a changed approved plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanSummary>,
}

impl ResultDocument {
    /// The skeleton every run starts from.
    pub fn new(op: &str, image: &str, command: &[String]) -> Self {
        ResultDocument {
            version: RESULT_VERSION,
            op: Some(op.to_owned()),
            image: Some(ImageInfo {
                reference: image.to_owned(),
                providers_mirror: false,
            }),
            runtime: Some(RuntimeInfo {
                command: command.to_vec(),
                version: String::new(),
            }),
            steps: Vec::new(),
            drift: None,
            error: None,
            changes: None,
            plan: None,
        }
    }

    /// The minimal document of a command-line error: `{version, steps: [], error: {kind: step,
    /// step: flags, tail}}`.
    pub fn usage_error(message: &str) -> Self {
        ResultDocument {
            version: RESULT_VERSION,
            op: None,
            image: None,
            runtime: None,
            steps: Vec::new(),
            drift: None,
            error: Some(RunError::new(
                ErrorKind::Step,
                Some(crate::steps::FLAGS_STEP),
                message,
            )),
            changes: None,
            plan: None,
        }
    }

    /// Compact JSON of at most [`MAX_RESULT_BYTES`] (see the module docs for the order in which
    /// parts are dropped).
    pub fn encode(&self) -> Vec<u8> {
        let mut doc = self.clone();
        let fits = |d: &ResultDocument| -> Option<Vec<u8>> {
            let bytes = serde_json::to_vec(d).unwrap_or_default();
            (!bytes.is_empty() && bytes.len() <= MAX_RESULT_BYTES).then_some(bytes)
        };
        if let Some(b) = fits(&doc) {
            return b;
        }
        // 1.
        doc.changes = None;
        if let Some(b) = fits(&doc) {
            return b;
        }
        if let Some(e) = doc.error.as_mut() {
            e.resources.clear();
        }
        if let Some(b) = fits(&doc) {
            return b;
        }
        // 2.
        while let Some(e) = doc.error.as_mut().filter(|e| !e.tail.is_empty()) {
            e.tail = latter_half(&e.tail);
            if let Some(b) = fits(&doc) {
                return b;
            }
        }
        // 3.
        while let Some(p) = doc.plan.as_mut().filter(|p| !p.resources.is_empty()) {
            let keep = p.resources.len() / 2;
            p.resources.truncate(keep);
            p.truncated = true;
            if let Some(b) = fits(&doc) {
                return b;
            }
        }
        // 4.
        if let Some(d) = doc.drift.as_mut() {
            d.resources.clear();
        }
        if let Some(b) = fits(&doc) {
            return b;
        }
        // 5.
        while doc.steps.len() > 2 {
            doc.steps.remove(1);
            if let Some(b) = fits(&doc) {
                return b;
            }
        }
        // 6.
        last_resort(&doc)
    }
}

/// The latter half of `s` (on a character boundary); empty below 16 bytes.
fn latter_half(s: &str) -> String {
    let mut start = s.len() / 2;
    while start < s.len() && !s.is_char_boundary(start) {
        start += 1;
    }
    let half = &s[start..];
    if half.len() < 16 {
        String::new()
    } else {
        half.to_owned()
    }
}

fn last_resort(doc: &ResultDocument) -> Vec<u8> {
    let mut v = serde_json::json!({ "version": doc.version });
    if let Some(op) = &doc.op {
        v["op"] = op.as_str().into();
    }
    if let Some(e) = &doc.error {
        v["error"] = serde_json::json!({ "kind": e.kind });
    }
    if let Some(p) = &doc.plan {
        let mut plan = serde_json::to_value(PlanSummary {
            resources: Vec::new(),
            ..p.clone()
        })
        .unwrap_or_default();
        plan["truncated"] = true.into();
        v["plan"] = plan;
    }
    let bytes = serde_json::to_vec(&v).unwrap_or_default();
    if bytes.len() <= MAX_RESULT_BYTES {
        bytes
    } else {
        // Only an `op` or `hash` longer than the cap gets here (both are bounded in practice).
        format!("{{\"version\":{}}}", doc.version).into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn full() -> ResultDocument {
        let mut d = ResultDocument::new("apply", "img:v1", &["/captf/runtime".to_owned()]);
        d.steps = ["init", "validate", "plan", "show-json", "apply"]
            .iter()
            .map(|n| StepRecord::new(*n, 0, std::time::Duration::from_millis(1234)))
            .collect();
        d
    }

    fn parse(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).expect("valid JSON")
    }

    #[test]
    fn small_documents_are_unchanged_and_keep_null_members() {
        let d = full();
        let v = parse(&d.encode());
        assert_eq!(
            v,
            json!({
                "version": 1, "op": "apply",
                "image": {"ref": "img:v1"},
                "runtime": {"command": ["/captf/runtime"]},
                "steps": [
                    {"name": "init", "exit": 0, "seconds": 1.2},
                    {"name": "validate", "exit": 0, "seconds": 1.2},
                    {"name": "plan", "exit": 0, "seconds": 1.2},
                    {"name": "show-json", "exit": 0, "seconds": 1.2},
                    {"name": "apply", "exit": 0, "seconds": 1.2},
                ],
                "drift": null, "error": null,
            })
        );
        let back: ResultDocument = serde_json::from_value(v).expect("round trip");
        assert_eq!(back, d);
    }

    #[test]
    fn usage_error_is_minimal() {
        let v = parse(&ResultDocument::usage_error("unexpected argument 'x'").encode());
        assert_eq!(
            v,
            json!({"version": 1, "steps": [], "drift": null,
                   "error": {"kind": "step", "step": "flags", "tail": "unexpected argument 'x'"}})
        );
    }

    /// Each stage, in order: what a document needs to shrink to fit.
    #[test]
    fn shrink_stages() {
        let long_plan = |n: usize| PlanSummary {
            resources: (0..n)
                .map(|i| format!("module.role.aws_instance.r{i:04} (create)"))
                .collect(),
            ..PlanSummary::empty()
        };
        type Check = fn(&Value);
        let cases: Vec<(&str, ResultDocument, Check)> = vec![
            (
                "1: changes dropped",
                {
                    let mut d = full();
                    d.changes = Some(Changes {
                        add: 1,
                        ..Changes::default()
                    });
                    // Overshoot by less than one step (36 bytes) < `changes` (43 bytes).
                    while serde_json::to_vec(&d).expect("json").len() <= MAX_RESULT_BYTES {
                        d.steps.push(StepRecord::new("s", 0, Default::default()));
                    }
                    d
                },
                |v| {
                    assert!(v.get("changes").is_none());
                    assert!(v["steps"].as_array().map_or(0, Vec::len) > 100);
                },
            ),
            (
                "2: tail halved, keeping its end",
                {
                    let mut d = full();
                    let mut e = RunError::new(ErrorKind::Step, Some("apply"), "");
                    e.tail = format!("{}END", "x".repeat(4000));
                    d.error = Some(e);
                    d
                },
                |v| {
                    let tail = v["error"]["tail"].as_str().expect("tail");
                    assert!(tail.ends_with("END") && tail.len() < 4000, "{}", tail.len());
                    assert_eq!(v["steps"].as_array().map(Vec::len), Some(5));
                },
            ),
            (
                "3: plan resources halved",
                {
                    let mut d = full();
                    d.plan = Some(long_plan(200));
                    d
                },
                |v| {
                    let n = v["plan"]["resources"].as_array().map_or(0, Vec::len);
                    assert!(n > 0 && n < 200, "{n}");
                    assert_eq!(v["plan"]["truncated"], true);
                    assert_eq!(v["steps"].as_array().map(Vec::len), Some(5));
                },
            ),
            (
                "4: drift resources emptied",
                {
                    let mut d = full();
                    d.drift = Some(Drift {
                        detected: true,
                        update: 20,
                        resources: (0..20).map(|i| format!("{}{i}", "r".repeat(250))).collect(),
                        ..Drift::none()
                    });
                    d
                },
                |v| {
                    assert_eq!(v["drift"]["resources"], json!([]));
                    assert_eq!(v["drift"]["update"], 20);
                    assert_eq!(v["steps"].as_array().map(Vec::len), Some(5));
                },
            ),
            (
                "5: middle steps dropped",
                {
                    let mut d = full();
                    d.steps = (0..200)
                        .map(|i| StepRecord::new(format!("step-{i:03}"), 0, Default::default()))
                        .collect();
                    d
                },
                |v| {
                    let steps = v["steps"].as_array().expect("steps");
                    assert!(steps.len() < 200);
                    assert_eq!(steps[0]["name"], "step-000");
                    assert_eq!(steps[steps.len() - 1]["name"], "step-199");
                },
            ),
            (
                "6: last resort",
                {
                    let mut d = full();
                    d.image = Some(ImageInfo {
                        reference: "i".repeat(5000),
                        providers_mirror: true,
                    });
                    d.error = Some(RunError::new(ErrorKind::Blocked, None, "blocked"));
                    d.plan = Some(PlanSummary {
                        delete: 3,
                        ..long_plan(10)
                    });
                    d
                },
                |v| {
                    assert_eq!(
                        *v,
                        json!({"version": 1, "op": "apply", "error": {"kind": "blocked"},
                               "plan": {"hash": crate::plan::EMPTY_PLAN_HASH, "create": 0, "update": 0,
                                        "replace": 0, "delete": 3, "truncated": true}})
                    );
                },
            ),
        ];
        for (what, doc, check) in cases {
            let bytes = doc.encode();
            assert!(
                bytes.len() <= MAX_RESULT_BYTES,
                "{what}: {} bytes",
                bytes.len()
            );
            let v = parse(&bytes);
            check(&v);
            if what.starts_with('6') {
                continue;
            }
            let back: ResultDocument = serde_json::from_value(v).expect(what);
            assert_eq!(back.version, 1, "{what}");
        }
    }

    #[test]
    fn latter_half_table() {
        let cases = [
            ("", ""),
            ("short", ""),
            ("0123456789abcdef0123456789abcdef", "0123456789abcdef"),
            ("ääääääääääääääääääää", "ääääääääää"),
        ];
        for (input, want) in cases {
            assert_eq!(latter_half(input), want, "{input:?}");
        }
    }

    #[test]
    fn seconds_are_rounded() {
        let r = StepRecord::new("init", 0, std::time::Duration::from_millis(4149));
        assert_eq!(r.seconds, 4.1);
        let r = StepRecord::new("init", 0, std::time::Duration::from_millis(4150));
        assert_eq!(r.seconds, 4.2);
    }
}
