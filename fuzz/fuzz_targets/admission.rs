//! AdmissionReview handling: the manager's webhook answer to one review body, with every rule
//! of `webhook::rules` and the delete guards, through `webhook::review::review_offline` (the
//! webhook's `review` without the API server or a registry; the image's variables schema is the
//! fixed one below).
//!
//! The input's first line names the endpoint's kind (`TerraformMachine`, ...; any other line
//! picks one by its length); the rest is the request body.

#![no_main]

use captf_contract::varschema;
use captf_controller::webhook::Endpoint;
use captf_controller::webhook::review::review_offline;
use captf_controller::webhook::rules::ManagerUser;
use captf_fuzz::{MARKER, assert_no_marker, first_line, string_leaves};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// The module's variables schema: every type, a required variable, undeclared ones refused.
const SCHEMA: &str = r#"{"type":"object","additionalProperties":false,"required":["region"],"properties":{
    "region":{"type":"string"},
    "size":{"type":"number"},
    "spot":{"type":"boolean"},
    "zones":{"type":"array","items":{"type":"string"}},
    "tags":{"type":"object","additionalProperties":{"type":"string"}},
    "disk":{"type":"object","required":["gib"],"properties":{"gib":{"type":"number"}}},
    "pair":{"type":"array","prefixItems":[{"type":"string"},{"type":"number"}]},
    "extra":{}
}}"#;

fuzz_target!(|data: &[u8]| {
    let (line, body) = first_line(data);
    let endpoint = Endpoint::ALL
        .into_iter()
        .find(|e| e.kind().as_bytes() == line)
        .unwrap_or(Endpoint::ALL[line.len() % Endpoint::ALL.len()]);
    let manager = ManagerUser::new(Some("captf-system"), Some("captf-controller-manager"));
    let schema = varschema::parse(SCHEMA).expect("the fixed schema parses");

    let answer = review_offline(&manager, Some(&schema), endpoint, body);
    // The webhook's router writes this; an error would send the API server an empty body.
    let written = serde_json::to_string(&answer).expect("the answer serializes");
    let response = answer
        .response
        .as_ref()
        .expect("every answer carries a response");
    // Lossy: serde skips the fields it does not know without reading their strings.
    let review = serde_json::from_str::<Value>(&String::from_utf8_lossy(body)).ok();
    let request: Option<Value> = review.as_ref().and_then(|v| v.get("request").cloned());
    if response.allowed {
        assert!(holds_a_request(body), "only a request is allowed");
    } else if response.result.code == 0 {
        // No request could be read: kube's `AdmissionResponse::invalid`, which has no code.
        assert!(
            response.result.message.contains("AdmissionReview"),
            "{}",
            response.result.message
        );
    } else {
        assert!(
            matches!(response.result.code, 400 | 403 | 422),
            "offline, a refusal is a bad request, a guard or invalid: {}",
            response.result.code
        );
        if response.result.code == 422 {
            let causes = response
                .result
                .details
                .as_ref()
                .map_or(0, |d| d.causes.len());
            assert!(causes > 0, "an invalid object names its fields");
        }
    }
    if let Some(request) = &request
        && let Some(uid) = request.get("uid").and_then(Value::as_str)
        && serde_json::from_slice::<serde_json::Map<String, Value>>(body).is_ok()
        && !response.uid.is_empty()
    {
        assert_eq!(response.uid, uid, "the answer names the request it answers");
    }
    if let Some(review) = review
        && variables_are_the_only_secret_place(review)
    {
        assert_no_marker("the admission answer", &written);
    }
});

/// Whether `body` holds a `request`, read as the webhook reads a review: members it does not
/// know are skipped unread. A `Value` refuses more (a lone surrogate escape in a member no one
/// reads, say), so it cannot tell.
fn holds_a_request(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe {
        request: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Probe>(body).is_ok_and(|p| p.request.is_some())
}

/// Whether the marker stands in `spec.variables` values (or a template's) of the object or the
/// old object, and nowhere else in the review: the rules never echo a variable's value.
fn variables_are_the_only_secret_place(mut review: Value) -> bool {
    let mut secret = Vec::new();
    for object in ["request/object", "request/oldObject"] {
        for at in ["/spec/variables", "/spec/template/spec/variables"] {
            let pointer = format!("/{object}{at}");
            if let Some(Value::Object(variables)) = review.pointer_mut(&pointer) {
                for value in variables.values_mut() {
                    string_leaves(value, &mut secret);
                    *value = Value::Null;
                }
            }
        }
    }
    secret.iter().any(|s| s.contains(MARKER)) && !review.to_string().contains(MARKER)
}
