//! The variables schema a module image publishes in its `io.captf.variables-schema` label: a
//! small JSON Schema subset describing the module's user variables, so a variable the module
//! does not declare, or a value of the wrong type, is refused when it is written instead of
//! failing a Job's plan minutes later.
//!
//! The subset is `type`, `properties`, `required`, `items`, `prefixItems` and
//! `additionalProperties`; a label with any other keyword is refused as a whole rather than
//! half understood. `null` is accepted everywhere: the schema does not record nullability.
//!
//! The checks follow Terraform's own conversions, so a value Terraform would take is never
//! refused: a number or bool where a string is wanted, a numeric string where a number is
//! wanted, `"true"`/`"false"` where a bool is wanted, and an object attribute the type does not
//! name (Terraform drops it). Messages name the variable and the path inside it, never a value:
//! values may come from Secrets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The image config label that carries the schema.
pub const LABEL: &str = "io.captf.variables-schema";

/// The largest label accepted: the webhooks parse it on every cache miss.
pub const MAX_LABEL_BYTES: usize = 32 * 1024;

/// A JSON Schema type of the subset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Type {
    /// Terraform `string`.
    String,
    /// Terraform `number`.
    Number,
    /// Terraform `bool`.
    Boolean,
    /// Terraform `list`, `set` and `tuple`.
    Array,
    /// Terraform `map` and `object`.
    Object,
}

impl Type {
    fn with_article(self) -> &'static str {
        match self {
            Type::String => "a string",
            Type::Number => "a number",
            Type::Boolean => "a bool",
            Type::Array => "an array",
            Type::Object => "an object",
        }
    }
}

/// One node of a schema. The default (no `type`) accepts any value: Terraform's `any`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Schema {
    /// The value's type; unset accepts anything.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Type>,
    /// An object's named attributes (at the root: the module's variables).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, Schema>,
    /// The properties that must be present (at the root: variables without a default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<String>,
    /// The element schema of a list or set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Box<Schema>>,
    /// A tuple's positional element schemas; the value must have exactly as many elements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_items: Option<Vec<Schema>>,
    /// `false` at the root (an undeclared variable is an error), or a map's value schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_properties: Option<Additional>,
}

/// The `additionalProperties` keyword: a boolean or a schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Additional {
    /// `true` lets any other key through unchecked; `false` refuses it.
    Allowed(bool),
    /// Other keys are allowed, and their values must fit this schema (a Terraform map).
    Values(Box<Schema>),
}

/// Why a label is not a variables schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// Over [`MAX_LABEL_BYTES`].
    #[error("{LABEL} is {size} bytes; the limit is {MAX_LABEL_BYTES}")]
    TooLarge {
        /// The label's size.
        size: usize,
    },
    /// Not JSON, or a keyword outside the subset (the message is serde's, about the schema,
    /// which holds no user value).
    #[error("{LABEL} is not a variables schema: {0}")]
    Invalid(String),
    /// Valid, but the root does not describe an object of variables.
    #[error(
        "{LABEL} must describe an object (\"type\": \"object\") whose properties are the module's variables"
    )]
    NotObject,
}

/// Parses the label's value.
pub fn parse(label: &str) -> Result<Schema, SchemaError> {
    if label.len() > MAX_LABEL_BYTES {
        return Err(SchemaError::TooLarge { size: label.len() });
    }
    let schema: Schema =
        serde_json::from_str(label).map_err(|e| SchemaError::Invalid(e.to_string()))?;
    if schema.kind != Some(Type::Object) {
        return Err(SchemaError::NotObject);
    }
    Ok(schema)
}

/// The compact JSON of `schema`, the label's value; an error when it is over
/// [`MAX_LABEL_BYTES`].
pub fn to_label(schema: &Schema) -> Result<String, SchemaError> {
    let json = serde_json::to_string(schema).map_err(|e| SchemaError::Invalid(e.to_string()))?;
    if json.len() > MAX_LABEL_BYTES {
        return Err(SchemaError::TooLarge { size: json.len() });
    }
    Ok(json)
}

/// One variable to check.
#[derive(Debug, Clone, Copy)]
pub struct Given<'a> {
    /// The value, as JSON.
    pub value: &'a Value,
    /// The value came from a variablesFrom source of the string format: it is always a JSON
    /// string, which Terraform can convert to a primitive but never to a collection.
    pub from_string_source: bool,
}

/// How many of the variables the caller sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// All of them: a required variable that is missing is a problem.
    All,
    /// Only some (the admission webhook sees `spec.variables`, not the variablesFrom
    /// sources): a missing variable may come from elsewhere.
    Some,
}

impl Schema {
    /// The problems of `variables` against this (root) schema, one message each, sorted by
    /// variable; empty when Terraform would accept them.
    pub fn check<'a>(
        &self,
        variables: impl IntoIterator<Item = (&'a str, Given<'a>)>,
        seen: Seen,
    ) -> Vec<String> {
        let variables: BTreeMap<&str, Given<'_>> = variables.into_iter().collect();
        let mut out = Vec::new();
        for (name, given) in &variables {
            let at = format!("variable {name:?}");
            match self.properties.get(*name) {
                Some(declared) => {
                    declared.check_value(given.value, &at, given.from_string_source, &mut out)
                }
                None => match &self.additional_properties {
                    Some(Additional::Allowed(true)) => {}
                    Some(Additional::Values(values)) => {
                        values.check_value(given.value, &at, given.from_string_source, &mut out)
                    }
                    _ => out.push(format!("{at} is not declared by the module")),
                },
            }
        }
        if seen == Seen::All {
            for name in &self.required {
                if !variables.contains_key(name.as_str()) {
                    out.push(format!(
                        "variable {name:?} is required by the module and nothing sets it"
                    ));
                }
            }
        }
        out
    }

    fn check_value(&self, value: &Value, at: &str, from_string: bool, out: &mut Vec<String>) {
        let Some(kind) = self.kind else { return };
        if value.is_null() {
            return;
        }
        if from_string && matches!(kind, Type::Array | Type::Object) {
            out.push(format!(
                "{at} must be {}, but its source has the string format and supplies a string: set format: JSON on the source",
                kind.with_article()
            ));
            return;
        }
        let fits = match (kind, value) {
            (Type::String, Value::String(_) | Value::Number(_) | Value::Bool(_)) => true,
            (Type::Number, Value::Number(_)) => true,
            (Type::Number, Value::String(s)) => s.trim().parse::<serde_json::Number>().is_ok(),
            (Type::Boolean, Value::Bool(_)) => true,
            (Type::Boolean, Value::String(s)) => s == "true" || s == "false",
            (Type::Array, Value::Array(elements)) => {
                self.check_elements(elements, at, out);
                true
            }
            (Type::Object, Value::Object(attributes)) => {
                self.check_attributes(attributes, at, out);
                true
            }
            _ => false,
        };
        if !fits {
            out.push(format!(
                "{at} must be {}, got {}",
                kind.with_article(),
                described(value)
            ));
        }
    }

    fn check_elements(&self, elements: &[Value], at: &str, out: &mut Vec<String>) {
        let positional = self.prefix_items.as_deref();
        for (i, element) in elements.iter().enumerate() {
            let schema = match positional {
                Some(tuple) => tuple.get(i),
                None => self.items.as_deref(),
            };
            if let Some(schema) = schema {
                schema.check_value(element, &format!("{at}[{i}]"), false, out);
            }
        }
        if let Some(tuple) = positional
            && tuple.len() != elements.len()
        {
            out.push(format!(
                "{at} must have {} elements, got {}",
                tuple.len(),
                elements.len()
            ));
        }
    }

    fn check_attributes(
        &self,
        attributes: &serde_json::Map<String, Value>,
        at: &str,
        out: &mut Vec<String>,
    ) {
        for (key, value) in attributes {
            let path = format!("{at}.{key}");
            if let Some(schema) = self.properties.get(key) {
                schema.check_value(value, &path, false, out);
            } else if let Some(Additional::Values(values)) = &self.additional_properties {
                values.check_value(value, &path, false, out);
            }
            // Otherwise Terraform's object conversion drops the attribute: not an error.
        }
        for key in &self.required {
            if !attributes.contains_key(key) {
                out.push(format!("{at} is missing the required attribute {key:?}"));
            }
        }
    }
}

/// The JSON type of `value` with an article; never the value itself.
fn described(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A module with `region` (string, required), `size` (number, default), `spot` (bool),
    /// `zones` (list(string)), `tags` (map(string)), `disk` (object with a required `gib`),
    /// `pair` (tuple([string, number])) and `extra` (any).
    const LABEL_VALUE: &str = r#"{"type":"object","additionalProperties":false,"required":["region"],"properties":{
        "region":{"type":"string"},
        "size":{"type":"number"},
        "spot":{"type":"boolean"},
        "zones":{"type":"array","items":{"type":"string"}},
        "tags":{"type":"object","additionalProperties":{"type":"string"}},
        "disk":{"type":"object","required":["gib"],"properties":{"gib":{"type":"number"},"kind":{"type":"string"}}},
        "pair":{"type":"array","prefixItems":[{"type":"string"},{"type":"number"}]},
        "extra":{}
    }}"#;

    fn schema() -> anyhow::Result<Schema> {
        Ok(parse(LABEL_VALUE)?)
    }

    fn check(schema: &Schema, vars: &Value, from_string: bool, seen: Seen) -> Vec<String> {
        let Value::Object(vars) = vars else {
            return vec!["not an object".into()];
        };
        schema.check(
            vars.iter().map(|(k, v)| {
                (
                    k.as_str(),
                    Given {
                        value: v,
                        from_string_source: from_string,
                    },
                )
            }),
            seen,
        )
    }

    #[test]
    fn values_are_checked_as_terraform_converts_them() -> anyhow::Result<()> {
        let schema = schema()?;
        let cases: &[(Value, &[&str])] = &[
            (json!({"region": "eu-west-1"}), &[]),
            // Terraform converts primitives: all of these are accepted.
            (
                json!({"region": 5, "size": "3.5", "spot": "true", "extra": {"any": [1]}}),
                &[],
            ),
            (json!({"region": true, "size": -2e3, "spot": false}), &[]),
            // null leaves the module's default.
            (json!({"region": null, "size": null, "disk": null}), &[]),
            (
                json!({"region": "r", "size": "big", "spot": "yes"}),
                &[
                    r#"variable "size" must be a number, got a string"#,
                    r#"variable "spot" must be a bool, got a string"#,
                ],
            ),
            (
                json!({"region": ["a"]}),
                &[r#"variable "region" must be a string, got an array"#],
            ),
            (
                json!({"region": "r", "instnce_type": "m5"}),
                &[r#"variable "instnce_type" is not declared by the module"#],
            ),
            (
                json!({"region": "r", "zones": ["a", 1, {"b": 1}], "tags": {"team": "x", "n": [1]}}),
                &[
                    r#"variable "tags".n must be a string, got an array"#,
                    r#"variable "zones"[2] must be a string, got an object"#,
                ],
            ),
            (
                json!({"region": "r", "disk": {"kind": "ssd", "unknown": 1}}),
                &[r#"variable "disk" is missing the required attribute "gib""#],
            ),
            (
                json!({"region": "r", "disk": {"gib": "lots"}}),
                &[r#"variable "disk".gib must be a number, got a string"#],
            ),
            (
                json!({"region": "r", "pair": ["a", "b", 3]}),
                &[
                    r#"variable "pair"[1] must be a number, got a string"#,
                    r#"variable "pair" must have 2 elements, got 3"#,
                ],
            ),
            (
                json!({"region": "r", "tags": "team=x"}),
                &[r#"variable "tags" must be an object, got a string"#],
            ),
        ];
        for (vars, want) in cases {
            assert_eq!(check(&schema, vars, false, Seen::All), *want, "{vars}");
        }
        Ok(())
    }

    #[test]
    fn a_missing_required_variable_counts_only_when_all_are_seen() -> anyhow::Result<()> {
        let schema = schema()?;
        let vars = json!({"size": 3});
        assert_eq!(
            check(&schema, &vars, false, Seen::All),
            [r#"variable "region" is required by the module and nothing sets it"#]
        );
        assert_eq!(
            check(&schema, &vars, false, Seen::Some),
            Vec::<String>::new()
        );
        Ok(())
    }

    #[test]
    fn a_string_source_cannot_supply_a_collection() -> anyhow::Result<()> {
        let schema = schema()?;
        let vars = json!({"region": "r", "size": "4", "zones": "[\"a\"]"});
        assert_eq!(
            check(&schema, &vars, true, Seen::All),
            [
                r#"variable "zones" must be an array, but its source has the string format and supplies a string: set format: JSON on the source"#
            ]
        );
        Ok(())
    }

    #[test]
    fn messages_never_carry_a_value() -> anyhow::Result<()> {
        let schema = schema()?;
        let secret = "hunter2-very-secret";
        let vars =
            json!({"region": [secret], "size": secret, "disk": {"gib": secret}, "pair": [secret]});
        for message in check(&schema, &vars, false, Seen::All) {
            assert!(!message.contains(secret), "{message}");
        }
        Ok(())
    }

    #[test]
    fn the_root_decides_what_an_undeclared_variable_means() -> anyhow::Result<()> {
        let open = parse(r#"{"type":"object","additionalProperties":true}"#)?;
        let values = parse(r#"{"type":"object","additionalProperties":{"type":"number"}}"#)?;
        let closed = parse(r#"{"type":"object"}"#)?;
        let vars = json!({"anything": "x"});
        assert!(check(&open, &vars, false, Seen::All).is_empty());
        assert_eq!(
            check(&values, &vars, false, Seen::All),
            [r#"variable "anything" must be a number, got a string"#]
        );
        assert_eq!(
            check(&closed, &vars, false, Seen::All),
            [r#"variable "anything" is not declared by the module"#]
        );
        Ok(())
    }

    #[test]
    fn labels_outside_the_subset_are_refused() {
        let too_large = format!(
            r#"{{"type":"object","properties":{{"a":{{"type":"string"}}}},"required":["{}"]}}"#,
            "x".repeat(MAX_LABEL_BYTES)
        );
        let kind = |e: &SchemaError| match e {
            SchemaError::TooLarge { .. } => "too large",
            SchemaError::Invalid(_) => "invalid",
            SchemaError::NotObject => "not an object",
        };
        let cases = [
            ("not json", "invalid"),
            (r#"{"type":"object","pattern":"^a"}"#, "invalid"),
            (r#"{"type":"integer"}"#, "invalid"),
            (
                r#"{"type":"object","additionalProperties":"no"}"#,
                "invalid",
            ),
            (r#"{"type":"array"}"#, "not an object"),
            (r#"{}"#, "not an object"),
            (&too_large, "too large"),
        ];
        for (label, want) in cases {
            let got = parse(label).map_err(|e| kind(&e));
            assert_eq!(got.err(), Some(want), "{label:.60}");
        }
    }

    #[test]
    fn a_schema_survives_its_label() -> anyhow::Result<()> {
        let schema = schema()?;
        assert_eq!(parse(&to_label(&schema)?)?, schema);
        assert!(!to_label(&schema)?.contains(' '), "compact JSON");
        Ok(())
    }
}
