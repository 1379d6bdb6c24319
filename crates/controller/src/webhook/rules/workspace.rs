//! The rules every workload spec shares (operations.md §6.2): the module image, the Job policy
//! and the variables.

use captf_api::common::WorkspaceSpec;
use captf_contract::{MAX_VARIABLES, Role};

use super::jobs::job_policy;
use crate::webhook::violations::{Problem, Violations};

/// Source, Job policy, variables, variables sources and identity of `new` (at `path`,
/// normally `spec`). On an update (`old` set) only what changed is checked, so an object
/// stored before a rule existed never has an unrelated update (removing a finalizer, say)
/// refused. An object being deleted is checked alike: its destroy Jobs run with the policy it
/// holds then.
pub fn workspace(
    v: &mut Violations,
    path: &str,
    role: Role,
    new: &WorkspaceSpec,
    old: Option<&WorkspaceSpec>,
) {
    if old.is_none_or(|old| old.source != new.source) {
        source_image(v, &format!("{path}.source.image"), &new.source.image);
    }
    if old.is_none_or(|old| old.jobs != new.jobs)
        && let Some(policy) = &new.jobs
    {
        job_policy(v, &format!("{path}.jobs"), policy);
    }
    if old.is_none_or(|old| old.variables != new.variables)
        && let Some(variables) = &new.variables
    {
        self::variables(v, &format!("{path}.variables"), role, variables);
    }
    if old.is_none_or(|old| old.variables_from != new.variables_from) {
        for (i, source) in new.variables_from.iter().flatten().enumerate() {
            if source.config_map_ref.is_some() == source.secret_ref.is_some() {
                v.invalid(
                    format!("{path}.variablesFrom[{i}]"),
                    "set exactly one of configMapRef and secretRef",
                );
            }
        }
    }
    if old.is_none_or(|old| old.identity_ref != new.identity_ref)
        && let Some(identity) = &new.identity_ref
        && identity.name.is_empty()
    {
        v.required(
            format!("{path}.identityRef.name"),
            "name a TerraformClusterIdentity, or remove identityRef",
        );
    }
}

/// The module image must be a reference a container runtime accepts.
pub fn source_image(v: &mut Violations, field: &str, image: &str) {
    if image.is_empty() {
        v.required(
            field,
            "name the module image, e.g. ghcr.io/example/module:v1.0.0",
        );
    } else if let Err(problem) = captf_api::image::parse(image) {
        v.invalid(
            field,
            format!(
                "{image:?}: {problem}; write [registry/]repository[:tag][@sha256:<digest>], e.g. ghcr.io/example/module:v1.0.0"
            ),
        );
    }
}

/// Variable names: identifiers that are not contract inputs, `captf_` names or module
/// meta-arguments. Values are never echoed (they may be secrets).
pub fn variables(
    v: &mut Violations,
    path: &str,
    role: Role,
    variables: &serde_json::Map<String, serde_json::Value>,
) {
    if variables.len() > MAX_VARIABLES {
        v.push(
            path,
            Problem::TooMany,
            format!(
                "{} variables, at most {MAX_VARIABLES}; group related settings into objects",
                variables.len()
            ),
        );
    }
    for name in variables.keys() {
        if let Err(e) = captf_contract::validate_variable_name(role, name) {
            let why = match e {
                captf_contract::Error::VariableReserved { why, .. } => {
                    format!("the name is reserved: {why}; rename the module variable")
                }
                _ => "a variable name must match ^[a-zA-Z_][a-zA-Z0-9_-]*$".to_owned(),
            };
            v.invalid(
                format!("{path}[{name:?}]"),
                format!("(value omitted): {why}"),
            );
        }
    }
}
