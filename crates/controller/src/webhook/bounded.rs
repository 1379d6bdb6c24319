//! A review body bounded before it is parsed into values.
//!
//! Parsed, JSON takes many times its size (an array of small numbers about sixteen), so the
//! body is first read only as text: `spec.variables` is measured against
//! [`SPEC_VARIABLES`] and the object's size against [`MAX_OBJECT_BYTES`], what no rule reads
//! (`managedFields`, and variables over the limits) is set aside, and only a body whose values
//! are then within [`MAX_REVIEW_VALUES`] is parsed. What a review costs is bounded by those
//! limits and the body cap, not by what the object holds.

use std::borrow::Cow;
use std::fmt;

use captf_contract::bounds::{self, Exceeded, SPEC_VARIABLES};
use serde::Deserializer as _;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::Endpoint;
use super::violations::{Problem, Violations};
use crate::variables::MOVE_LARGE_VALUES;

/// The most bytes of JSON a workload object or template may grow to, as the API server sends
/// it: room for `spec.variables` at its limit, the 256 KiB of annotations the API server
/// allows, and their `managedFields`, under the 1.5 MiB etcd stores.
pub const MAX_OBJECT_BYTES: usize = 1024 * 1024;

/// The most values a review may hold once what no rule reads is set aside: the object and its
/// old version, each with `spec.variables` at its limit and room for the rest.
pub const MAX_REVIEW_VALUES: usize = 64_000;

/// Deeper than this, a body is not parsed (serde_json itself stops at 128).
const MAX_REVIEW_DEPTH: usize = 100;

/// A body ready to be parsed, and what the object breaks of the limits.
#[derive(Debug)]
pub struct Prepared<'b> {
    /// The body, with what no rule reads replaced by `null`.
    pub body: Cow<'b, [u8]>,
    /// Limits the new object breaks; empty for a delete.
    pub violations: Violations,
}

/// Why a body is refused before it is parsed: the request's uid, when it has one, and what
/// is wrong.
#[derive(Debug, PartialEq)]
pub struct Refused {
    pub uid: String,
    pub message: String,
}

/// Where a kind keeps its variables.
fn variables_field(endpoint: Endpoint) -> Option<&'static str> {
    match endpoint {
        Endpoint::Identity => None,
        Endpoint::ClusterTemplate | Endpoint::MachineTemplate | Endpoint::MachinePoolTemplate => {
            Some("spec.template.spec.variables")
        }
        _ => Some("spec.variables"),
    }
}

/// The value of member `name` of the JSON object `raw` (the last, when it is there twice, as
/// a parse keeps it); none when `raw` is no object. Nothing else of `raw` is kept.
fn member<'a>(raw: Option<&'a RawValue>, name: &str) -> Option<&'a RawValue> {
    struct Find<'n>(&'n str);

    impl<'de> Visitor<'de> for Find<'_> {
        type Value = Option<&'de RawValue>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = None;
            while let Some(wanted) = map.next_key_seed(KeyIs(self.0))? {
                if wanted {
                    found = Some(map.next_value::<&'de RawValue>()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }

    /// Whether a key is `name`, read without keeping it.
    struct KeyIs<'n>(&'n str);

    impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
        type Value = bool;

        fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<bool, D::Error> {
            de.deserialize_str(self)
        }
    }

    impl Visitor<'_> for KeyIs<'_> {
        type Value = bool;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a key")
        }

        fn visit_str<E>(self, key: &str) -> Result<bool, E> {
            Ok(key == self.0)
        }
    }

    let mut de = serde_json::Deserializer::from_str(raw?.get());
    de.deserialize_map(Find(name)).ok().flatten()
}

/// The object's `managedFields` and its variables, as text.
fn parts(object: Option<&RawValue>, templated: bool) -> (Option<&RawValue>, Option<&RawValue>) {
    let managed = member(member(object, "metadata"), "managedFields");
    let mut spec = member(object, "spec");
    if templated {
        spec = member(member(spec, "template"), "spec");
    }
    (managed, member(spec, "variables"))
}

/// The body of `endpoint`'s review, bounded: see the module documentation.
pub fn prepare(endpoint: Endpoint, body: &[u8]) -> Result<Prepared<'_>, Refused> {
    // Checked as JSON once, without a value built.
    let whole: &RawValue = serde_json::from_slice(body).map_err(|e| Refused {
        uid: String::new(),
        message: format!("the body is not an AdmissionReview: {e}"),
    })?;
    let request = member(Some(whole), "request");
    let uid = member(request, "uid")
        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        .unwrap_or_default();
    let (object, old_object) = (member(request, "object"), member(request, "oldObject"));
    let mut violations = Violations::default();
    let field = variables_field(endpoint);
    let templated = field.is_some_and(|f| f.starts_with("spec.template"));
    let (new_managed, new_variables) = parts(object, templated);
    let (old_managed, old_variables) = parts(old_object, templated);
    // Set aside: never parsed, so they cost nothing whatever they hold.
    let mut aside: Vec<&RawValue> = [new_managed, old_managed].into_iter().flatten().collect();
    let over = |raw: &RawValue| {
        bounds::measure_variables_json(raw.get(), &SPEC_VARIABLES)
            .map(|size| SPEC_VARIABLES.exceeded(&size))
            .unwrap_or_default()
    };
    if let (Some(field), Some(new)) = (field, new_variables) {
        let exceeded = over(new);
        if !exceeded.is_empty() {
            // Unchanged, as the API server writes both objects alike: an object stored before
            // the limits (or while the webhook was off) keeps taking unrelated updates.
            if old_variables.is_none_or(|old| old.get() != new.get()) {
                for e in exceeded {
                    let problem = match e {
                        Exceeded::Bytes(..) => Problem::TooLong,
                        Exceeded::Values(..) => Problem::TooMany,
                        Exceeded::Depth(_) => Problem::Invalid,
                    };
                    violations.push(field, problem, format!("{e}; {MOVE_LARGE_VALUES}"));
                }
            }
            aside.push(new);
        }
    }
    if let Some(old) = old_variables
        && !over(old).is_empty()
    {
        aside.push(old);
    }
    if field.is_some()
        && let Some(new) = object.filter(|o| o.get() != "null")
    {
        let old_len = old_object
            .filter(|o| o.get() != "null")
            .map(|o| o.get().len());
        let new_len = new.get().len();
        // Checked only as it grows, so shrinking an object over the limit, or removing a
        // finalizer from one, is never refused.
        if new_len > MAX_OBJECT_BYTES && old_len.is_none_or(|old| new_len > old) {
            violations.push(
                "",
                Problem::TooLong,
                format!(
                    "the object is {new_len} bytes of JSON, at most {MAX_OBJECT_BYTES}; keep large data out of labels, annotations and spec: a ConfigMap or Secret named in spec.variablesFrom holds up to 1 MiB"
                ),
            );
        }
    }
    let body = set_aside(body, &aside);
    let size = bounds::measure_json(
        std::str::from_utf8(&body).unwrap_or_default(),
        MAX_REVIEW_DEPTH,
    )
    .unwrap_or_default();
    if size.depth > MAX_REVIEW_DEPTH || size.values > MAX_REVIEW_VALUES {
        let what = if size.depth > MAX_REVIEW_DEPTH {
            format!("nests arrays and objects more than {MAX_REVIEW_DEPTH} deep")
        } else {
            format!(
                "holds {} values besides managedFields and spec.variables over their limits, at most {MAX_REVIEW_VALUES}",
                size.values
            )
        };
        return Err(Refused {
            uid,
            message: format!("the AdmissionReview {what}: it is not read"),
        });
    }
    Ok(Prepared { body, violations })
}

/// `body` with each of `parts` (JSON values within it) replaced by `null`.
fn set_aside<'b>(body: &'b [u8], parts: &[&RawValue]) -> Cow<'b, [u8]> {
    let start = body.as_ptr() as usize;
    let mut ranges: Vec<(usize, usize)> = parts
        .iter()
        .map(|raw| {
            let text = raw.get();
            let at = (text.as_ptr() as usize).saturating_sub(start);
            (at, at + text.len())
        })
        .filter(|&(_, end)| end <= body.len())
        .collect();
    if ranges.is_empty() {
        return Cow::Borrowed(body);
    }
    ranges.sort_unstable();
    let mut out = Vec::with_capacity(body.len());
    let mut from = 0;
    for (at, end) in ranges {
        // Parts never overlap: each is a different field of one of two objects.
        if at < from {
            continue;
        }
        out.extend_from_slice(&body[from..at]);
        out.extend_from_slice(b"null");
        from = end;
    }
    out.extend_from_slice(&body[from..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn review(object: Value, old: Value) -> Vec<u8> {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "UPDATE", "object": object, "oldObject": old}
        })
        .to_string()
        .into_bytes()
    }

    fn cluster(variables: Value) -> Value {
        json!({
            "metadata": {"name": "c", "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"source": {"image": "r/m:v1"}, "variables": variables}
        })
    }

    fn template(variables: Value) -> Value {
        json!({"metadata": {"name": "t"}, "spec": {"template": {"spec": {"variables": variables}}}})
    }

    fn too_many() -> Value {
        json!({"a": vec![0; 10_000]})
    }

    /// The violations as `field: cause` and the parsed body.
    fn prepared(endpoint: Endpoint, body: &[u8]) -> (Vec<String>, Value) {
        let p = prepare(endpoint, body).expect("prepared");
        let v = p
            .violations
            .iter()
            .map(|v| format!("{}: {}", v.field, v.problem.cause()))
            .collect();
        (v, serde_json::from_slice(&p.body).expect("json"))
    }

    #[test]
    fn variables_over_a_limit_are_named_and_never_parsed() {
        let small = json!({"a": 1});
        let deep = json!({"a": (0..32).fold(json!(1), |v, _| json!([v]))});
        let long = json!({"a": "x".repeat(256 * 1024)});
        // (what, endpoint, object, old object, violations, new variables kept, old kept)
        type Case<'a> = (&'a str, Endpoint, Value, Value, &'a [&'a str], bool, bool);
        let cases: Vec<Case<'_>> = vec![
            (
                "within the limits",
                Endpoint::Cluster,
                cluster(small.clone()),
                Value::Null,
                &[],
                true,
                true,
            ),
            (
                "too many values",
                Endpoint::Cluster,
                cluster(too_many()),
                cluster(small.clone()),
                &["spec.variables: FieldValueTooMany"],
                false,
                true,
            ),
            (
                "too deep",
                Endpoint::Machine,
                cluster(deep),
                Value::Null,
                &["spec.variables: FieldValueInvalid"],
                false,
                true,
            ),
            (
                "too long",
                Endpoint::MachinePool,
                cluster(long),
                Value::Null,
                &["spec.variables: FieldValueTooLong"],
                false,
                true,
            ),
            (
                "a template's",
                Endpoint::MachineTemplate,
                template(too_many()),
                Value::Null,
                &["spec.template.spec.variables: FieldValueTooMany"],
                false,
                true,
            ),
            (
                "unchanged over the limits: refused no update, parsed in neither",
                Endpoint::Cluster,
                cluster(too_many()),
                cluster(too_many()),
                &[],
                false,
                false,
            ),
            (
                "shrunk within the limits",
                Endpoint::Cluster,
                cluster(small.clone()),
                cluster(too_many()),
                &[],
                true,
                false,
            ),
            (
                "an identity has none",
                Endpoint::Identity,
                cluster(too_many()),
                Value::Null,
                &[],
                true,
                true,
            ),
        ];
        for (what, endpoint, object, old, want, new_kept, old_kept) in cases {
            let body = review(object.clone(), old.clone());
            let (violations, parsed) = prepared(endpoint, &body);
            assert_eq!(violations, want, "{what}");
            let at = |o: &str| {
                let path = match endpoint {
                    Endpoint::MachineTemplate => "/spec/template/spec/variables",
                    _ => "/spec/variables",
                };
                parsed["request"][o].pointer(path).cloned()
            };
            let kept = |o: &Value| {
                o.pointer("/spec/variables")
                    .or(o.pointer("/spec/template/spec/variables"))
                    .cloned()
            };
            assert_eq!(
                at("object"),
                if new_kept {
                    kept(&object)
                } else {
                    Some(Value::Null)
                },
                "{what}: object"
            );
            if !old.is_null() {
                assert_eq!(
                    at("oldObject"),
                    if old_kept {
                        kept(&old)
                    } else {
                        Some(Value::Null)
                    },
                    "{what}: old object"
                );
            }
            // No rule reads managedFields: never parsed either.
            assert_eq!(
                parsed["request"]["object"]["metadata"].get("managedFields"),
                object["metadata"]
                    .get("managedFields")
                    .map(|_| &Value::Null),
                "{what}"
            );
        }
    }

    #[test]
    fn an_object_may_not_grow_past_its_limit() {
        let big = |n: usize| {
            let mut c = cluster(json!({"a": 1}));
            c["metadata"]["annotations"] = json!({"note": "x".repeat(n)});
            c
        };
        let over = MAX_OBJECT_BYTES;
        let cases: Vec<(&str, Value, Value, bool)> = vec![
            ("created over", big(over), Value::Null, true),
            ("created under", big(over - 1_000), Value::Null, false),
            ("grown over", big(over + 10), big(over), true),
            ("shrunk, still over", big(over), big(over + 10), false),
            ("unchanged over", big(over), big(over), false),
        ];
        for (what, object, old, refused) in cases {
            let (violations, _) = prepared(Endpoint::Cluster, &review(object, old));
            assert_eq!(
                violations,
                if refused {
                    vec![": FieldValueTooLong".to_owned()]
                } else {
                    vec![]
                },
                "{what}"
            );
        }
    }

    #[test]
    fn a_body_of_too_many_values_is_not_parsed() {
        // Outside spec.variables, where no variables limit applies: a label map, say.
        let labels: serde_json::Map<String, Value> = (0..MAX_REVIEW_VALUES)
            .map(|i| (format!("l{i}"), json!("")))
            .collect();
        let mut object = cluster(json!({"a": 1}));
        object["metadata"]["labels"] = Value::Object(labels);
        let refused =
            prepare(Endpoint::Cluster, &review(object, Value::Null)).expect_err("refused");
        assert_eq!(refused.uid, "u-1");
        assert!(
            refused.message.contains("at most 64000"),
            "{}",
            refused.message
        );
        // Unchanged variables over their limits do not count: they are never parsed.
        let body = review(
            cluster(json!({"a": vec![0; 40_000]})),
            cluster(json!({"a": vec![0; 40_000]})),
        );
        assert!(prepare(Endpoint::Cluster, &body).is_ok());
        let deep = format!(
            r#"{{"request":{{"uid":"u-2","object":{}1{}}}}}"#,
            "[".repeat(120),
            "]".repeat(120)
        );
        let refused = prepare(Endpoint::Cluster, deep.as_bytes()).expect_err("deep");
        assert_eq!(refused.uid, "u-2");
        assert!(
            refused.message.contains("more than 100 deep"),
            "{}",
            refused.message
        );
        let err = prepare(Endpoint::Cluster, b"{not json").expect_err("not json");
        assert!(
            err.message.contains("not an AdmissionReview"),
            "{}",
            err.message
        );
    }
}
