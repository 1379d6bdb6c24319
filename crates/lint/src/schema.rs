//! The variables schema of a module (`captf lint schema`): the value of the image label
//! [`captf_contract::varschema::LABEL`], derived from the root module's user variables so the
//! webhooks can refuse `spec.variables` the module would not take.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use captf_contract::varschema::{self, Additional, Schema, Type};
use captf_contract::{RESERVED_PREFIX, Role, input_names};

use crate::load::{self, Module};
use crate::types::Ty;
use crate::{EXIT_FINDINGS, EXIT_UNPARSABLE, EXIT_USAGE, checks};

/// Why `captf lint schema` printed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The module could not be read or parsed.
    Unparsable(String),
    /// The role was not given and cannot be inferred.
    Usage(String),
    /// The label would be over [`varschema::MAX_LABEL_BYTES`].
    TooLarge(String),
}

impl Failure {
    /// The exit code, as `captf lint module` counts them.
    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::Unparsable(_) => EXIT_UNPARSABLE,
            Failure::Usage(_) => EXIT_USAGE,
            Failure::TooLarge(_) => EXIT_FINDINGS,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Unparsable(msg) => write!(f, "unparsable: {msg}"),
            Failure::Usage(msg) => write!(f, "usage: {msg}"),
            Failure::TooLarge(msg) => write!(
                f,
                "{msg}; declare fewer or simpler variables, or publish no label (variables are then checked by name only)"
            ),
        }
    }
}

/// The variables schema of the module in `dir` for `role` (inferred as [`crate::lint_module`]
/// does when `None`).
pub fn module_schema(dir: &Path, role: Option<Role>) -> Result<Schema, Failure> {
    let loaded = load::load(dir).map_err(|load::Unparsable(msg)| Failure::Unparsable(msg))?;
    let root = &loaded.modules[0];
    let role = role
        .or_else(|| checks::infer(root))
        .ok_or_else(|| Failure::Usage(crate::CANNOT_INFER_ROLE.to_owned()))?;
    Ok(variables_schema(root, role))
}

/// [`module_schema`] as the label's value: compact JSON on one line.
pub fn module_label(dir: &Path, role: Option<Role>) -> Result<String, Failure> {
    varschema::to_label(&module_schema(dir, role)?).map_err(|e| Failure::TooLarge(e.to_string()))
}

/// The root schema of `root`'s user variables: every variable except the `captf_` ones and
/// the role's contract inputs, which the manager sets and a user may not.
pub(crate) fn variables_schema(root: &Module, role: Role) -> Schema {
    let contract = input_names(role);
    let mut schema = Schema {
        kind: Some(Type::Object),
        additional_properties: Some(Additional::Allowed(false)),
        ..Schema::default()
    };
    let mut required = BTreeSet::new();
    for var in &root.variables {
        if var.name.starts_with(RESERVED_PREFIX) || contract.contains(&var.name.as_str()) {
            continue;
        }
        // A type the linter cannot read must not make the webhooks refuse what Terraform takes.
        let value = match &var.ty {
            Some(Ok(ty)) => type_schema(ty),
            _ => Schema::default(),
        };
        schema.properties.insert(var.name.clone(), value);
        if !var.has_default {
            required.insert(var.name.clone());
        }
    }
    schema.required = required.into_iter().collect();
    schema
}

/// The schema of the values a Terraform type constraint accepts.
pub fn type_schema(ty: &Ty) -> Schema {
    let typed = |kind| Schema {
        kind: Some(kind),
        ..Schema::default()
    };
    match ty {
        Ty::Any => Schema::default(),
        Ty::String => typed(Type::String),
        Ty::Number => typed(Type::Number),
        Ty::Bool => typed(Type::Boolean),
        Ty::List(t) | Ty::Set(t) => Schema {
            items: Some(Box::new(type_schema(t))),
            ..typed(Type::Array)
        },
        Ty::Tuple(ts) => Schema {
            prefix_items: Some(ts.iter().map(type_schema).collect()),
            ..typed(Type::Array)
        },
        Ty::Map(t) => Schema {
            additional_properties: Some(Additional::Values(Box::new(type_schema(t)))),
            ..typed(Type::Object)
        },
        Ty::Object(attrs) => Schema {
            properties: attrs
                .iter()
                .map(|(name, (t, _))| (name.clone(), type_schema(t)))
                .collect(),
            required: attrs
                .iter()
                .filter(|(_, (_, optional))| !optional)
                .map(|(name, _)| name.clone())
                .collect(),
            ..typed(Type::Object)
        },
    }
}

/// The variables whose entry differs between two root schemas, sorted: what a stale label
/// gets wrong.
pub(crate) fn differing_variables(a: &Schema, b: &Schema) -> Vec<String> {
    let names: BTreeSet<&String> = a.properties.keys().chain(b.properties.keys()).collect();
    names
        .into_iter()
        .filter(|name| {
            a.properties.get(*name) != b.properties.get(*name)
                || a.required.contains(name) != b.required.contains(name)
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::load::Variable;
    use crate::types::parse_type_str;

    fn var(name: &str, ty: Option<&str>, has_default: bool) -> Variable {
        Variable {
            name: name.to_owned(),
            loc: load::Loc::default(),
            ty: ty.map(parse_type_str),
            type_text: ty.map(str::to_owned),
            has_default,
            sensitive: false,
            nullable: None,
        }
    }

    fn json_of(schema: &Schema) -> anyhow::Result<Value> {
        Ok(serde_json::to_value(schema)?)
    }

    #[test]
    fn every_type_maps_to_its_schema() -> anyhow::Result<()> {
        let cases = [
            ("string", json!({"type": "string"})),
            ("number", json!({"type": "number"})),
            ("bool", json!({"type": "boolean"})),
            ("any", json!({})),
            (
                "list(string)",
                json!({"type": "array", "items": {"type": "string"}}),
            ),
            (
                "set(number)",
                json!({"type": "array", "items": {"type": "number"}}),
            ),
            ("list(any)", json!({"type": "array", "items": {}})),
            (
                "tuple([string, bool])",
                json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}]}),
            ),
            ("tuple([])", json!({"type": "array", "prefixItems": []})),
            (
                "map(string)",
                json!({"type": "object", "additionalProperties": {"type": "string"}}),
            ),
            (
                "map(any)",
                json!({"type": "object", "additionalProperties": {}}),
            ),
            (
                "object({b = optional(number, 3), a = string, c = list(bool)})",
                json!({
                    "type": "object",
                    "properties": {
                        "a": {"type": "string"},
                        "b": {"type": "number"},
                        "c": {"type": "array", "items": {"type": "boolean"}}
                    },
                    "required": ["a", "c"]
                }),
            ),
            (
                "map(object({x = optional(string)}))",
                json!({
                    "type": "object",
                    "additionalProperties": {"type": "object", "properties": {"x": {"type": "string"}}}
                }),
            ),
        ];
        for (ty, want) in cases {
            let ty_parsed = parse_type_str(ty).map_err(anyhow::Error::msg)?;
            assert_eq!(json_of(&type_schema(&ty_parsed))?, want, "{ty}");
        }
        Ok(())
    }

    #[test]
    fn the_root_holds_only_user_variables() -> anyhow::Result<()> {
        let root = Module {
            variables: vec![
                var("captf_contract", Some("string"), false),
                var("captf_debug", Some("bool"), true),
                var("machine_name", Some("string"), false),
                var("failure_domain", Some("string"), true),
                var("zone", Some("string"), false),
                var("size", Some("number"), true),
                var("anything", None, false),
                var("loose", None, true),
                var("broken", Some("strng"), true),
                var("legacy", Some("\"string\""), false),
                var(
                    "disk",
                    Some("object({gib = number, kind = optional(string)})"),
                    true,
                ),
            ],
            ..Module::default()
        };
        let want = json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "anything": {},
                "broken": {},
                "disk": {
                    "type": "object",
                    "properties": {"gib": {"type": "number"}, "kind": {"type": "string"}},
                    "required": ["gib"]
                },
                "legacy": {},
                "loose": {},
                "size": {"type": "number"},
                "zone": {"type": "string"}
            },
            "required": ["anything", "legacy", "zone"]
        });
        assert_eq!(json_of(&variables_schema(&root, Role::Machine))?, want);
        Ok(())
    }

    #[test]
    fn contract_inputs_depend_on_the_role() -> anyhow::Result<()> {
        let root = Module {
            variables: vec![var("replicas", Some("number"), true)],
            ..Module::default()
        };
        let pool = variables_schema(&root, Role::MachinePool);
        let machine = variables_schema(&root, Role::Machine);
        assert!(pool.properties.is_empty());
        assert_eq!(
            json_of(&machine)?["properties"],
            json!({"replicas": {"type": "number"}})
        );
        Ok(())
    }

    #[test]
    fn a_derived_schema_is_a_valid_label() -> anyhow::Result<()> {
        let root = Module {
            variables: vec![
                var("zone", Some("string"), false),
                var("tags", Some("map(string)"), true),
                var("pair", Some("tuple([string, number])"), true),
            ],
            ..Module::default()
        };
        let schema = variables_schema(&root, Role::Cluster);
        assert_eq!(varschema::parse(&varschema::to_label(&schema)?)?, schema);
        Ok(())
    }

    #[test]
    fn differing_variables_names_changed_added_and_removed() {
        let old = Module {
            variables: vec![
                var("same", Some("string"), true),
                var("retyped", Some("string"), true),
                var("removed", Some("string"), true),
                var("now_required", Some("string"), true),
            ],
            ..Module::default()
        };
        let new = Module {
            variables: vec![
                var("same", Some("string"), true),
                var("retyped", Some("number"), true),
                var("added", Some("string"), true),
                var("now_required", Some("string"), false),
            ],
            ..Module::default()
        };
        assert_eq!(
            differing_variables(
                &variables_schema(&old, Role::Cluster),
                &variables_schema(&new, Role::Cluster)
            ),
            ["added", "now_required", "removed", "retyped"]
        );
    }

    #[test]
    fn failures_exit_as_lint_module_does() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path();
        assert_eq!(
            module_label(&dir.join("missing"), Some(Role::Machine)).map_err(|e| e.exit_code()),
            Err(EXIT_UNPARSABLE)
        );
        std::fs::write(
            dir.join("main.tf"),
            "variable \"zone\" {\n  type = string\n}\n",
        )?;
        assert_eq!(
            module_label(dir, None).map_err(|e| e.exit_code()),
            Err(EXIT_USAGE)
        );
        assert_eq!(
            module_label(dir, Some(Role::Cluster)).as_deref(),
            Ok(
                r#"{"type":"object","properties":{"zone":{"type":"string"}},"required":["zone"],"additionalProperties":false}"#
            )
        );
        let many: String = (0..1200)
            .map(|i| {
                format!("variable \"knob_{i:04}\" {{\n  type = string\n  default = \"\"\n}}\n")
            })
            .collect();
        std::fs::write(dir.join("main.tf"), many)?;
        let too_large =
            module_label(dir, Some(Role::Cluster)).map_err(|e| (e.exit_code(), e.to_string()));
        assert!(
            matches!(&too_large, Err((EXIT_FINDINGS, m)) if m.contains("the limit is 32768")),
            "{too_large:?}"
        );
        Ok(())
    }
}
