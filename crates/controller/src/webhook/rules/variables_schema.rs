//! Inline variables against the variables schema of the module image (operations.md §6.2):
//! a variable the module does not declare, or a value Terraform cannot convert to the
//! declared type, is refused at the write rather than at the Job's plan. The webhook sees
//! `spec.variables` only, not the variablesFrom sources, so a required variable that is not
//! set inline may still come from a source and is not asked for here.

use captf_api::common::WorkspaceSpec;
use captf_contract::varschema::{Given, LABEL, Schema, Seen};

use crate::webhook::violations::Violations;

/// Whether the inline variables of `new` need checking against its image's schema: on a
/// create, and on an update that changes them or the image (an unrelated update, removing a
/// finalizer say, must not depend on a registry). Never while deleting.
pub fn needs_check(new: &WorkspaceSpec, old: Option<&WorkspaceSpec>, deleting: bool) -> bool {
    !deleting
        && new.variables.as_ref().is_some_and(|v| !v.is_empty())
        && old.is_none_or(|old| {
            old.variables != new.variables || old.source.image != new.source.image
        })
}

/// One violation of `{path}.variables` per problem; values are never echoed.
pub fn variables_fit(v: &mut Violations, path: &str, workspace: &WorkspaceSpec, schema: &Schema) {
    let Some(variables) = &workspace.variables else {
        return;
    };
    let given = variables.iter().map(|(name, value)| {
        let given = Given {
            value,
            from_string_source: false,
        };
        (name.as_str(), given)
    });
    for problem in schema.check(given, Seen::Some) {
        v.invalid(
            format!("{path}.variables"),
            format!(
                "{problem}, by the {LABEL} label of {}: correct the variable, or point {path}.source.image at a module that takes it",
                workspace.source.image
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn workspace(image: &str, variables: serde_json::Value) -> WorkspaceSpec {
        let mut w = WorkspaceSpec::default();
        w.source.image = image.into();
        w.variables = variables.as_object().cloned();
        w
    }

    #[test]
    fn only_new_variables_or_a_new_image_are_checked() {
        let base = workspace("r/m:v1", json!({"size": 2}));
        let other_vars = workspace("r/m:v1", json!({"size": 3}));
        let other_image = workspace("r/m:v2", json!({"size": 2}));
        let none = workspace("r/m:v1", serde_json::Value::Null);
        let empty = workspace("r/m:v1", json!({}));
        let cases = [
            ("create", &base, None, false, true),
            ("create without variables", &none, None, false, false),
            ("create with an empty object", &empty, None, false, false),
            ("unrelated update", &base, Some(&base), false, false),
            ("variables changed", &other_vars, Some(&base), false, true),
            ("image changed", &other_image, Some(&base), false, true),
            ("deleting", &other_vars, Some(&base), true, false),
        ];
        for (name, new, old, deleting, want) in cases {
            assert_eq!(needs_check(new, old, deleting), want, "{name}");
        }
    }

    #[test]
    fn each_problem_is_a_violation_of_the_variables_field() -> anyhow::Result<()> {
        let schema = captf_contract::varschema::parse(
            r#"{"type":"object","additionalProperties":false,"required":["region"],"properties":{"size":{"type":"number"},"region":{"type":"string"}}}"#,
        )?;
        let mut v = Violations::default();
        let w = workspace(
            "r/m:v1",
            json!({"size": "secret-looking-value", "instnce_type": "m5"}),
        );
        variables_fit(&mut v, "spec.template.spec", &w, &schema);
        let got: Vec<(&str, &str)> = v
            .iter()
            .map(|v| (v.field.as_str(), v.detail.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "spec.template.spec.variables",
                    "variable \"instnce_type\" is not declared by the module, by the io.captf.variables-schema label of r/m:v1: correct the variable, or point spec.template.spec.source.image at a module that takes it"
                ),
                (
                    "spec.template.spec.variables",
                    "variable \"size\" must be a number, got a string, by the io.captf.variables-schema label of r/m:v1: correct the variable, or point spec.template.spec.source.image at a module that takes it"
                ),
            ]
        );
        // A required variable is not asked for: it may come from a variablesFrom source.
        let mut v = Violations::default();
        variables_fit(
            &mut v,
            "spec",
            &workspace("r/m:v1", json!({"size": 1})),
            &schema,
        );
        assert!(v.is_empty());
        Ok(())
    }
}
