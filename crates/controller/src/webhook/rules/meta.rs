//! Label and annotation syntax, as the API server checks it on real objects: templates carry
//! metadata that is only copied onto objects later, where a bad key would fail far from its
//! cause.

use std::collections::BTreeMap;

use captf_api::names::{is_dns_subdomain, is_label_value};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::webhook::violations::Violations;

/// The API server's cap on all annotations of an object together.
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// `[prefix/]name`: the prefix a DNS subdomain, the name 1-63 of `[A-Za-z0-9._-]` starting and
/// ending alphanumeric.
pub fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    prefix.is_none_or(|p| !p.is_empty() && is_dns_subdomain(p))
        && !name.is_empty()
        && is_label_value(name)
}

const KEY_RULE: &str = "a key is [prefix/]name: an optional DNS subdomain prefix, and a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit";
const VALUE_RULE: &str = "a label value is empty or at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit";

pub fn labels(v: &mut Violations, path: &str, labels: &BTreeMap<String, String>) {
    for (key, value) in labels {
        if !is_qualified_name(key) {
            v.invalid(format!("{path}[{key:?}]"), format!("{key:?}: {KEY_RULE}"));
        }
        if !is_label_value(value) {
            v.invalid(
                format!("{path}[{key:?}]"),
                format!("{value:?}: {VALUE_RULE}"),
            );
        }
    }
}

pub fn annotations(v: &mut Violations, path: &str, annotations: &BTreeMap<String, String>) {
    let mut total = 0;
    for (key, value) in annotations {
        total += key.len() + value.len();
        if !is_qualified_name(&key.to_ascii_lowercase()) {
            v.invalid(format!("{path}[{key:?}]"), format!("{key:?}: {KEY_RULE}"));
        }
    }
    if total > MAX_ANNOTATIONS_BYTES {
        v.push(
            path,
            crate::webhook::violations::Problem::TooMany,
            format!(
                "{total} bytes, at most {MAX_ANNOTATIONS_BYTES}; keep large data out of annotations"
            ),
        );
    }
}

/// The tokens of `captf.io/retry` and `captf.io/replan`: each is copied onto the Job that
/// answers it, so it is bounded like a label value.
pub fn requests(v: &mut Violations, annotations: &BTreeMap<String, String>) {
    for key in [
        captf_api::annotations::RETRY,
        captf_api::annotations::REPLAN,
    ] {
        if let Some(token) = annotations.get(key)
            && token.len() > captf_api::annotations::MAX_REQUEST_TOKEN
        {
            v.invalid(
                format!("metadata.annotations[{key:?}]"),
                format!(
                    "{} bytes, at most {}: any short new value asks again (kubectl captf sets the time)",
                    token.len(),
                    captf_api::annotations::MAX_REQUEST_TOKEN
                ),
            );
        }
    }
}

/// A label selector the API server can evaluate.
pub fn label_selector(v: &mut Violations, path: &str, selector: &LabelSelector) {
    if let Some(match_labels) = &selector.match_labels {
        labels(v, &format!("{path}.matchLabels"), match_labels);
    }
    for (i, expression) in selector.match_expressions.iter().flatten().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        if !is_qualified_name(&expression.key) {
            v.invalid(
                format!("{at}.key"),
                format!("{:?}: {KEY_RULE}", expression.key),
            );
        }
        let values = expression.values.as_deref().unwrap_or_default();
        match expression.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => v.required(
                format!("{at}.values"),
                "In and NotIn need at least one value",
            ),
            "Exists" | "DoesNotExist" if !values.is_empty() => v.forbidden(
                format!("{at}.values"),
                "Exists and DoesNotExist take no values; remove them",
            ),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => v.invalid(
                format!("{at}.operator"),
                format!("{other:?}: use In, NotIn, Exists or DoesNotExist"),
            ),
        }
        for (j, value) in values.iter().enumerate() {
            if !is_label_value(value) {
                v.invalid(
                    format!("{at}.values[{j}]"),
                    format!("{value:?}: {VALUE_RULE}"),
                );
            }
        }
    }
}
