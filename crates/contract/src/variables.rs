//! User variables (`spec.variables` / `spec.variablesFrom`, api.md §2.2.7).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::role::{META_ARGUMENTS, RESERVED_PREFIX, Role};
use crate::spec::input_specs;

/// One user variable after merging its sources.
#[derive(Debug, Clone, PartialEq)]
pub struct Variable {
    /// The raw JSON value; the module's own declaration converts it.
    pub value: Value,
    /// The winning value came from a Secret; the root declares it `sensitive`.
    pub sensitive: bool,
}

/// Merged user variables by name; a BTreeMap so iteration (`keys()`) is sorted.
pub type Variables = BTreeMap<String, Variable>;

/// Parses an inline variables object (`spec.variables`, a ConfigMap or Secret key).
///
/// Every variable is returned non-sensitive; the caller marks Secret-sourced ones.
/// Names are not validated here (see [`validate_variable_name`]).
pub fn parse_variables(raw: &[u8]) -> Result<Variables> {
    let value: Value = serde_json::from_slice(raw).map_err(|e| Error::VariablesMalformed {
        line: e.line(),
        column: e.column(),
    })?;
    let Value::Object(map) = value else {
        return Err(Error::VariablesNotObject);
    };
    Ok(map
        .into_iter()
        .map(|(name, value)| {
            (
                name,
                Variable {
                    value,
                    sensitive: false,
                },
            )
        })
        .collect())
}

/// Checks a user variable name against the contract rules, in documented order:
/// syntax, the `captf_` prefix, module meta-arguments, the role's contract inputs.
pub fn validate_variable_name(role: Role, name: &str) -> Result<()> {
    if !is_identifier(name) {
        return Err(Error::VariableName {
            name: name.to_owned(),
        });
    }
    let why = if name.starts_with(RESERVED_PREFIX) {
        Some("the captf_ prefix is reserved for controller-injected inputs")
    } else if META_ARGUMENTS.contains(&name) {
        Some("it is a module meta-argument")
    } else if input_specs(role).iter().any(|s| s.name == name) {
        Some("it is a contract input of the role")
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::VariableReserved {
            name: name.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

/// `^[a-zA-Z_][a-zA-Z0-9_-]*$` without pulling a regex engine into the library.
fn is_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_alphabetic() || b == b'_' => {}
        _ => return false,
    }
    bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}
