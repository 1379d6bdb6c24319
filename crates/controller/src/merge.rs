//! The JSON merge patch (RFC 7396) that turns one document into another (pure): a status write
//! carries only what changed, and a field that disappeared is written as `null`, which a merge
//! patch of the whole new document would silently keep.

use serde_json::{Map, Value};

/// The merge patch from `before` to `after`; `None` when they are equal.
pub fn diff(before: &Value, after: &Value) -> Option<Value> {
    if before == after {
        return None;
    }
    match (before, after) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = Map::new();
            for (key, old_value) in old {
                match new.get(key) {
                    None | Some(Value::Null) if !old_value.is_null() => {
                        patch.insert(key.clone(), Value::Null);
                    }
                    Some(new_value) => {
                        if let Some(change) = diff(old_value, new_value) {
                            patch.insert(key.clone(), change);
                        }
                    }
                    None => {}
                }
            }
            for (key, new_value) in new {
                if !old.contains_key(key) && !new_value.is_null() {
                    patch.insert(key.clone(), strip_nulls(new_value));
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        // Lists and scalars are replaced whole (a merge patch cannot address list items).
        (_, new) => Some(strip_nulls(new)),
    }
}

/// A value to write as-is: `null` members inside a new object would mean "delete" to the
/// server, so they are left out.
fn strip_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_table() {
        let rows = [
            ("equal", json!({"a": 1}), json!({"a": 1}), None),
            (
                "changed scalar",
                json!({"a": 1}),
                json!({"a": 2}),
                Some(json!({"a": 2})),
            ),
            (
                "removed field",
                json!({"a": 1, "b": 2}),
                json!({"a": 1}),
                Some(json!({"b": null})),
            ),
            (
                "nulled field",
                json!({"a": 1, "b": 2}),
                json!({"a": 1, "b": null}),
                Some(json!({"b": null})),
            ),
            (
                "added field",
                json!({"a": 1}),
                json!({"a": 1, "b": {"c": 1, "d": null}}),
                Some(json!({"b": {"c": 1}})),
            ),
            (
                "absent stays absent",
                json!({"a": 1}),
                json!({"a": 1, "b": null}),
                None,
            ),
            (
                "nested removal",
                json!({"lastRun": {"job": "a", "error": {"kind": "step"}}}),
                json!({"lastRun": {"job": "b"}}),
                Some(json!({"lastRun": {"job": "b", "error": null}})),
            ),
            (
                "lists replaced whole",
                json!({"conditions": [{"type": "A"}, {"type": "B"}]}),
                json!({"conditions": [{"type": "A"}]}),
                Some(json!({"conditions": [{"type": "A"}]})),
            ),
        ];
        for (name, before, after, want) in rows {
            assert_eq!(diff(&before, &after), want, "{name}");
        }
    }

    #[test]
    fn applying_the_patch_gives_the_new_document() {
        let before = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x", "e": {"f": 1}});
        let after = json!({"a": {"b": 2, "c": [3]}, "g": true});
        let patch = diff(&before, &after).expect("a change");
        let mut merged = before.clone();
        json_patch::merge(&mut merged, &patch);
        assert_eq!(merged, after);
    }
}
