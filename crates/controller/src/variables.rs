//! Module variables of a workload (pure): `spec.variablesFrom` sources merged in list order
//! (a later source wins), then `spec.variables` over all of them. A value that wins from a
//! Secret is declared sensitive. Errors name the source and the key, never a value.

use std::collections::BTreeMap;

use captf_api::conditions::{Status, reasons};
use captf_api::{VariablesFormat, VariablesSource, WorkspaceSpec};
use captf_contract::{Role, Variable, Variables};

/// The gate a pass reports when the variables cannot be built: (status, reason, message).
pub type Gate = (Status, &'static str, String);

/// The label a ConfigMap or Secret needs to be used as a variables source.
pub const SOURCE_LABEL: &str = "captf.io/variables";

/// Which kind of object a source names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    ConfigMap,
    Secret,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::ConfigMap => "ConfigMap",
            SourceKind::Secret => "Secret",
        }
    }
}

/// What a source named, as read: `None` when it does not exist.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fetched {
    /// It carries `captf.io/variables=true`.
    pub labelled: bool,
    /// Every key with its bytes (ConfigMap `data` and `binaryData`, Secret `data`).
    pub data: BTreeMap<String, Vec<u8>>,
}

/// The kind and name a source names, or why it names none.
pub fn target(index: usize, source: &VariablesSource) -> Result<(SourceKind, &str), Gate> {
    match (&source.config_map_ref, &source.secret_ref) {
        (Some(c), None) => Ok((SourceKind::ConfigMap, c.name.as_str())),
        (None, Some(s)) => Ok((SourceKind::Secret, s.name.as_str())),
        _ => Err((
            Status::False,
            reasons::VARIABLES_INVALID,
            format!("spec.variablesFrom[{index}]: set exactly one of configMapRef and secretRef"),
        )),
    }
}

/// Whether `workspace` takes variables from the `kind` named `name` (of its namespace).
pub fn references(workspace: &WorkspaceSpec, kind: SourceKind, name: &str) -> bool {
    workspace
        .variables_from
        .iter()
        .flatten()
        .enumerate()
        .any(|(i, s)| target(i, s).is_ok_and(|t| t == (kind, name)))
}

/// A kind whose spec holds a [`WorkspaceSpec`].
pub trait Workspaced {
    fn workspace(&self) -> &WorkspaceSpec;
}

impl Workspaced for captf_api::TerraformCluster {
    fn workspace(&self) -> &WorkspaceSpec {
        &self.spec.workspace
    }
}

impl Workspaced for captf_api::TerraformMachine {
    fn workspace(&self) -> &WorkspaceSpec {
        &self.spec.workspace
    }
}

impl Workspaced for captf_api::TerraformMachinePool {
    fn workspace(&self) -> &WorkspaceSpec {
        &self.spec.workspace
    }
}

/// The variables of `workspace` for `role`, from its inline variables and its sources
/// (`fetched[i]` for `spec.variablesFrom[i]`, `None` when missing).
pub fn merge(
    role: Role,
    namespace: &str,
    workspace: &WorkspaceSpec,
    fetched: &[Option<Fetched>],
) -> Result<Variables, Gate> {
    let invalid = |message: String| (Status::False, reasons::VARIABLES_INVALID, message);
    let mut out = Variables::new();
    for (index, source) in workspace.variables_from.iter().flatten().enumerate() {
        let (kind, name) = target(index, source)?;
        let what = format!(
            "spec.variablesFrom[{index}] ({} {namespace}/{name})",
            kind.as_str()
        );
        let optional = source.optional.unwrap_or(false);
        let data = match fetched.get(index).cloned().flatten() {
            Some(f) if f.labelled => f.data,
            _ if optional => continue,
            None => {
                return Err((
                    Status::False,
                    reasons::VARIABLES_SOURCE_NOT_FOUND,
                    format!("{what} does not exist: create it, or mark the source optional"),
                ));
            }
            Some(_) => {
                return Err((
                    Status::False,
                    reasons::VARIABLES_SOURCE_NOT_FOUND,
                    format!(
                        "{what} is not labelled {SOURCE_LABEL}=true, so it is not read: label it to use it as a variables source"
                    ),
                ));
            }
        };
        let json = source.format == Some(VariablesFormat::Json);
        for (key, bytes) in data {
            captf_contract::validate_variable_name(role, &key)
                .map_err(|e| invalid(format!("{what}: key {key:?}: {e}")))?;
            let text = String::from_utf8(bytes)
                .map_err(|_| invalid(format!("{what}: the value of {key:?} is not UTF-8")))?;
            let value = if json {
                serde_json::from_str(&text).map_err(|_| {
                    invalid(format!(
                        "{what}: the value of {key:?} is not valid JSON (format: JSON; value omitted)"
                    ))
                })?
            } else {
                serde_json::Value::String(text)
            };
            out.insert(
                key,
                Variable {
                    value,
                    sensitive: kind == SourceKind::Secret,
                },
            );
        }
    }
    for (name, value) in workspace.variables.clone().unwrap_or_default() {
        captf_contract::validate_variable_name(role, &name)
            .map_err(|e| invalid(format!("spec.variables: {e}")))?;
        out.insert(
            name,
            Variable {
                value,
                sensitive: false,
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use captf_api::VariablesSourceReference;
    use serde_json::json;

    fn source(kind: SourceKind, name: &str, optional: bool, json: bool) -> VariablesSource {
        let reference = Some(VariablesSourceReference { name: name.into() });
        VariablesSource {
            config_map_ref: (kind == SourceKind::ConfigMap)
                .then(|| reference.clone())
                .flatten(),
            secret_ref: (kind == SourceKind::Secret).then_some(reference).flatten(),
            optional: optional.then_some(true),
            format: json.then_some(VariablesFormat::Json),
        }
    }

    fn fetched(labelled: bool, pairs: &[(&str, &[u8])]) -> Option<Fetched> {
        Some(Fetched {
            labelled,
            data: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
                .collect(),
        })
    }

    fn workspace(
        inline: Option<serde_json::Value>,
        sources: Vec<VariablesSource>,
    ) -> WorkspaceSpec {
        WorkspaceSpec {
            variables: inline.map(|v| serde_json::from_value(v).expect("object")),
            variables_from: (!sources.is_empty()).then_some(sources),
            ..Default::default()
        }
    }

    #[test]
    fn references_table() {
        use SourceKind::{ConfigMap, Secret};
        let ws = workspace(
            None,
            vec![
                source(ConfigMap, "defaults", false, false),
                source(Secret, "tokens", true, false),
            ],
        );
        let cases = [
            (ConfigMap, "defaults", true),
            (Secret, "tokens", true),
            (Secret, "defaults", false),
            (ConfigMap, "other", false),
        ];
        for (kind, name, want) in cases {
            assert_eq!(references(&ws, kind, name), want, "{kind:?} {name}");
        }
        assert!(!references(&workspace(None, vec![]), ConfigMap, "defaults"));
    }

    type Want = Result<Vec<(&'static str, serde_json::Value, bool)>, (&'static str, &'static str)>;

    #[test]
    fn merge_table() {
        use SourceKind::{ConfigMap, Secret};
        let cases: Vec<(&str, WorkspaceSpec, Vec<Option<Fetched>>, Want)> = vec![
            (
                "strings from a ConfigMap, JSON from a Secret, inline over both",
                workspace(
                    Some(json!({"size": "large"})),
                    vec![
                        source(ConfigMap, "defaults", false, false),
                        source(Secret, "secrets", false, true),
                    ],
                ),
                vec![
                    fetched(
                        true,
                        &[("size", b"small"), ("disk", b"3"), ("region", b"eu")],
                    ),
                    fetched(true, &[("disk", b"5"), ("token", b"\"abc\"")]),
                ],
                Ok(vec![
                    ("disk", json!(5), true),
                    ("region", json!("eu"), false),
                    ("size", json!("large"), false),
                    ("token", json!("abc"), true),
                ]),
            ),
            (
                "a missing optional source contributes nothing",
                workspace(None, vec![source(ConfigMap, "maybe", true, false)]),
                vec![None],
                Ok(vec![]),
            ),
            (
                "an unlabelled optional source contributes nothing",
                workspace(None, vec![source(Secret, "maybe", true, false)]),
                vec![fetched(false, &[("a", b"1")])],
                Ok(vec![]),
            ),
            (
                "a missing source",
                workspace(None, vec![source(ConfigMap, "gone", false, false)]),
                vec![None],
                Err((
                    reasons::VARIABLES_SOURCE_NOT_FOUND,
                    "ConfigMap ns/gone) does not exist",
                )),
            ),
            (
                "an unlabelled source",
                workspace(None, vec![source(Secret, "plain", false, false)]),
                vec![fetched(false, &[("a", b"1")])],
                Err((
                    reasons::VARIABLES_SOURCE_NOT_FOUND,
                    "not labelled captf.io/variables=true",
                )),
            ),
            (
                "a key that is no Terraform identifier",
                workspace(None, vec![source(ConfigMap, "cm", false, false)]),
                vec![fetched(true, &[("app.conf", b"x")])],
                Err((reasons::VARIABLES_INVALID, "key \"app.conf\"")),
            ),
            (
                "a reserved key",
                workspace(None, vec![source(ConfigMap, "cm", false, false)]),
                vec![fetched(true, &[("machine_name", b"x")])],
                Err((reasons::VARIABLES_INVALID, "key \"machine_name\"")),
            ),
            (
                "invalid JSON names the key, never the value",
                workspace(None, vec![source(Secret, "s", false, true)]),
                vec![fetched(true, &[("password", b"hunter2{")])],
                Err((
                    reasons::VARIABLES_INVALID,
                    "value of \"password\" is not valid JSON",
                )),
            ),
            (
                "a value that is not UTF-8",
                workspace(None, vec![source(Secret, "s", false, false)]),
                vec![fetched(true, &[("blob", &[0xff, 0xfe])])],
                Err((reasons::VARIABLES_INVALID, "not UTF-8")),
            ),
            (
                "both references set",
                workspace(
                    None,
                    vec![VariablesSource {
                        secret_ref: Some(VariablesSourceReference { name: "s".into() }),
                        ..source(ConfigMap, "cm", false, false)
                    }],
                ),
                vec![None],
                Err((
                    reasons::VARIABLES_INVALID,
                    "exactly one of configMapRef and secretRef",
                )),
            ),
            (
                "a reserved inline name",
                workspace(Some(json!({"captf_x": 1})), vec![]),
                vec![],
                Err((reasons::VARIABLES_INVALID, "spec.variables")),
            ),
        ];
        for (name, workspace, fetched, want) in cases {
            let got = merge(Role::Machine, "ns", &workspace, &fetched);
            match (got, want) {
                (Ok(got), Ok(want)) => {
                    let got: Vec<(&str, serde_json::Value, bool)> = got
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.value.clone(), v.sensitive))
                        .collect();
                    assert_eq!(got, want, "{name}");
                }
                (Err((status, reason, message)), Err((want_reason, fragment))) => {
                    assert_eq!((status, reason), (Status::False, want_reason), "{name}");
                    assert!(message.contains(fragment), "{name}: {message}");
                    assert!(
                        !message.contains("hunter2"),
                        "{name}: a value leaked: {message}"
                    );
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }
}
