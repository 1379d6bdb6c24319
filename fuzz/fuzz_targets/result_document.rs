//! The runner's result document as the manager reads it from a Job's termination message: at
//! most `MAX_RESULT_BYTES`, trimmed, parsed as `captf_runner::result::ResultDocument`
//! (`reconcile::finished::bookkeeping::collect`), then recorded through
//! `decide::Finished` (`last_run`, `summary`, `result_label`) with the step labels of the
//! metrics. And the runner's side: whatever document it holds, `ResultDocument::encode` writes
//! at most `MAX_RESULT_BYTES` that the manager reads back.
//!
//! The input is the termination message. Its first byte also picks the Job's operation and
//! whether it succeeded or hit its deadline.

#![no_main]

use std::collections::BTreeMap;

use captf_api::Operation;
use captf_controller::decide::Finished;
use captf_runner::result::{MAX_RESULT_BYTES, ResultDocument};
use captf_runner::steps::step_label;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = std::str::from_utf8(data) else {
        return;
    };
    // As the bookkeeping reads it.
    let result: Option<ResultDocument> = Some(message)
        .filter(|m| m.len() <= MAX_RESULT_BYTES)
        .and_then(|m| serde_json::from_str(m.trim()).ok());
    let pick = data.first().copied().unwrap_or_default();
    let op = Operation::ALL[usize::from(pick) % Operation::ALL.len()];
    for (succeeded, deadline) in [(true, false), (false, false), (false, true)] {
        let finished = Finished {
            name: "captf-c-demo-apply-a1-000000".into(),
            op,
            succeeded,
            deadline,
            result: result.clone(),
            image_id: None,
            pin: None,
            markers: BTreeMap::new(),
            created_at: None,
            started_at: None,
            finished_at: None,
            container_started_at: None,
            annotations: BTreeMap::new(),
            pull_failure: None,
        };
        let last = finished.last_run();
        let steps = last.steps.as_deref().unwrap_or_default();
        assert!(steps.len() <= 16);
        assert!(steps.iter().all(|s| s.name.chars().count() <= 64));
        if let Some(e) = &last.error {
            assert!(e.step.as_ref().is_none_or(|s| s.chars().count() <= 64));
            assert!(e.summary.as_ref().is_none_or(|s| s.chars().count() <= 512));
        }
        if let Some(d) = &last.drift {
            assert!(d.resources.as_ref().is_none_or(|r| r.len() <= 20));
        }
        serde_json::to_value(&last).expect("lastRun serializes");
        let _ = (finished.summary(), finished.result_label());
    }
    if let Some(doc) = &result {
        for step in &doc.steps {
            let _ = step_label(&step.name);
        }
        // The runner's side: every document it holds encodes within the cap, as one the
        // manager reads back.
        let encoded = doc.encode();
        assert!(encoded.len() <= MAX_RESULT_BYTES, "{} bytes", encoded.len());
        let text = std::str::from_utf8(&encoded).expect("UTF-8");
        let back: ResultDocument =
            serde_json::from_str(text.trim()).expect("the manager reads what the runner wrote");
        assert_eq!(back.version, doc.version);
        // `op` and the plan hash are the runner's own (an operation, `p2:<hex>`): of that
        // size, the error kind survives any shrinking.
        let bounded = doc.op.as_ref().is_none_or(|op| op.len() <= 64)
            && doc.plan.as_ref().is_none_or(|p| p.hash.len() <= 128);
        if bounded {
            assert_eq!(
                back.error.as_ref().map(|e| e.kind),
                doc.error.as_ref().map(|e| e.kind),
                "the error kind survives any shrinking"
            );
        }
    }
});
