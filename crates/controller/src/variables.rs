//! Module variables of a workload (pure): `spec.variablesFrom` sources merged in list order
//! (a later source wins), then `spec.variables` over all of them. A value that wins from a
//! Secret is declared sensitive. The merged variables are then held to the variables schema
//! the module image publishes, when it publishes one. Errors name the source and the key, never
//! a value.
//!
//! Nothing is copied or parsed before it is measured: `spec.variables` is held to
//! [`SPEC_VARIABLES`] before its values are copied (the webhook, which refuses more, may be
//! off), and each source value to the running total of [`MERGED_VARIABLES`] before it is
//! parsed, so what one pass builds is bounded whatever the object or its sources hold.

use std::collections::{BTreeMap, BTreeSet};

use captf_api::conditions::{Status, reasons};
use captf_api::{VariablesFormat, VariablesSource, WorkspaceSpec};
use captf_contract::bounds::{self, Exceeded, Limits, MERGED_VARIABLES, SPEC_VARIABLES, Size};
use captf_contract::varschema::{Given, LABEL, Schema, Seen};
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

/// The merged variables, and which of them a string-format source supplied.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Merged {
    pub variables: Variables,
    /// The names whose winning value came from a source without `format: JSON`: always a
    /// string, which Terraform converts to a primitive but never to a collection.
    pub from_strings: BTreeSet<String>,
}

/// What to do about variables over a limit.
pub(crate) const MOVE_LARGE_VALUES: &str =
    "move large values to a ConfigMap or Secret named in spec.variablesFrom";

fn joined(over: &[Exceeded]) -> String {
    over.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// `spec.variables` within [`SPEC_VARIABLES`], measured in place.
fn inline_within_limits(workspace: &WorkspaceSpec) -> Result<(), Gate> {
    let Some(variables) = &workspace.variables else {
        return Ok(());
    };
    let over = SPEC_VARIABLES.exceeded(&bounds::measure_variables(variables, &SPEC_VARIABLES));
    if over.is_empty() {
        return Ok(());
    }
    Err((
        Status::False,
        reasons::VARIABLES_INVALID,
        format!("spec.variables: {}; {MOVE_LARGE_VALUES}", joined(&over)),
    ))
}

/// The running measure of every variable a pass has read, as one JSON object, against
/// [`MERGED_VARIABLES`]. A value a later one overrides still counts: it was read.
struct Total {
    size: Size,
    members: usize,
}

impl Total {
    fn new() -> Total {
        // `{}`, nested 1 deep.
        let size = Size {
            bytes: 2,
            depth: 1,
            values: 0,
        };
        Total { size, members: 0 }
    }

    /// Counts one more variable `name` of `value`'s size: what the variables are over once
    /// it is counted.
    fn count(&mut self, name: &str, value: &Size, limits: &Limits) -> Result<(), String> {
        // The name, its colon and, after the first, a comma.
        self.size.bytes += bounds::json_len(name) + 1 + usize::from(self.members > 0);
        self.members += 1;
        self.size.add(value, 1);
        let over = limits.exceeded(&self.size);
        if over.is_empty() {
            return Ok(());
        }
        Err(format!(
            "the variables read up to {name:?} are over the limits of a pass: {}",
            joined(&over)
        ))
    }
}

/// The variables of `workspace` for `role`, from its inline variables and its sources
/// (`fetched[i]` for `spec.variablesFrom[i]`, `None` when missing).
pub fn merge(
    role: Role,
    namespace: &str,
    workspace: &WorkspaceSpec,
    fetched: &[Option<Fetched>],
) -> Result<Merged, Gate> {
    merge_within(role, namespace, workspace, fetched, &MERGED_VARIABLES)
}

fn merge_within(
    role: Role,
    namespace: &str,
    workspace: &WorkspaceSpec,
    fetched: &[Option<Fetched>],
    limits: &Limits,
) -> Result<Merged, Gate> {
    let invalid = |message: String| (Status::False, reasons::VARIABLES_INVALID, message);
    inline_within_limits(workspace)?;
    let mut total = Total::new();
    let mut out = Variables::new();
    let mut from_strings = BTreeSet::new();
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
            let not_json = || {
                invalid(format!(
                    "{what}: the value of {key:?} is not valid JSON (format: JSON; value omitted)"
                ))
            };
            // Measured before it is parsed: the source's bytes are in memory already, the
            // value they would parse to is not yet.
            let size = if json {
                bounds::measure_json(&text, limits.depth.saturating_sub(1)).ok_or_else(not_json)?
            } else {
                Size {
                    bytes: bounds::json_len(&text),
                    depth: 0,
                    values: 1,
                }
            };
            total
                .count(&key, &size, limits)
                .map_err(|why| invalid(format!("{what}: {why}")))?;
            let value = if json {
                serde_json::from_str(&text).map_err(|_| not_json())?
            } else {
                serde_json::Value::String(text)
            };
            if json {
                from_strings.remove(&key);
            } else {
                from_strings.insert(key.clone());
            }
            out.insert(
                key,
                Variable {
                    value,
                    sensitive: kind == SourceKind::Secret,
                },
            );
        }
    }
    for (name, value) in workspace.variables.iter().flatten() {
        captf_contract::validate_variable_name(role, name)
            .map_err(|e| invalid(format!("spec.variables: {e}")))?;
        let size = bounds::measure_value(value, limits.depth.saturating_sub(1));
        total
            .count(name, &size, limits)
            .map_err(|why| invalid(format!("spec.variables: {why}")))?;
        from_strings.remove(name);
        out.insert(
            name.clone(),
            Variable {
                value: value.clone(),
                sensitive: false,
            },
        );
    }
    Ok(Merged {
        variables: out,
        from_strings,
    })
}

/// The merged variables against the schema of `image`: every variable declared, every value
/// convertible to its type, every required variable set. The gate lists every problem, naming
/// variables and never values.
pub fn fit(schema: &Schema, image: &str, merged: &Merged) -> Result<(), Gate> {
    let given = merged.variables.iter().map(|(name, variable)| {
        let given = Given {
            value: &variable.value,
            from_string_source: merged.from_strings.contains(name),
        };
        (name.as_str(), given)
    });
    let problems = schema.check(given, Seen::All);
    if problems.is_empty() {
        return Ok(());
    }
    Err((
        Status::False,
        reasons::VARIABLES_INVALID,
        format!(
            "the variables do not fit the {LABEL} label of {image}: {}; correct spec.variables or the variablesFrom sources, or point spec.source.image at a module that takes them",
            problems.join("; ")
        ),
    ))
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
                        .variables
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

    /// `depth` arrays around a number.
    fn nested(depth: usize) -> serde_json::Value {
        (0..depth).fold(json!(1), |inner, _| json!([inner]))
    }

    #[test]
    fn limits_table() {
        use SourceKind::ConfigMap;
        // Small limits for a pass, so the sources stay small; spec.variables has its own always.
        let pass = Limits {
            bytes: 100,
            depth: 3,
            values: 10,
        };
        let cm = |name: &str| source(ConfigMap, name, false, true);
        let strings = |name: &str| source(ConfigMap, name, false, false);
        // (what, workspace, its sources, a fragment of the refusal)
        type Case<'a> = (
            &'a str,
            WorkspaceSpec,
            Vec<Option<Fetched>>,
            Option<&'a str>,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                "spec.variables at the values limit",
                workspace(Some(json!({"a": vec![0; 9_999]})), vec![]),
                vec![],
                None,
            ),
            (
                "spec.variables one value over",
                workspace(Some(json!({"a": vec![0; 10_000]})), vec![]),
                vec![],
                Some(
                    "spec.variables: 10001 values, at most 10000; move large values to a ConfigMap or Secret named in spec.variablesFrom",
                ),
            ),
            (
                "spec.variables too deep",
                workspace(Some(json!({"a": nested(32)})), vec![]),
                vec![],
                Some("spec.variables: arrays and objects nested more than 32 deep"),
            ),
            (
                "spec.variables too large",
                workspace(Some(json!({"a": "x".repeat(256 * 1024)})), vec![]),
                vec![],
                Some("spec.variables: 262152 bytes as compact JSON, at most 262144"),
            ),
            (
                "a source at the values limit",
                workspace(None, vec![cm("cm")]),
                vec![fetched(true, &[("a", b"[1,2,3,4,5,6,7,8,9]")])],
                None,
            ),
            (
                "a source value too deep, before it is parsed",
                workspace(None, vec![cm("cm")]),
                vec![fetched(true, &[("deep", b"[[[1]]]")])],
                Some(
                    "spec.variablesFrom[0] (ConfigMap ns/cm): the variables read up to \"deep\" are over the limits of a pass: arrays and objects nested more than 3 deep",
                ),
            ),
            (
                "values of two sources together",
                workspace(None, vec![cm("one"), cm("two")]),
                vec![
                    fetched(true, &[("a", b"[1,2,3,4,5]")]),
                    fetched(true, &[("b", b"[1,2,3,4]")]),
                ],
                Some(
                    "spec.variablesFrom[1] (ConfigMap ns/two): the variables read up to \"b\" are over the limits of a pass: 11 values, at most 10",
                ),
            ),
            (
                "a string source's bytes",
                workspace(None, vec![strings("cm")]),
                vec![fetched(true, &[("s", "x".repeat(95).as_bytes())])],
                Some(
                    "(ConfigMap ns/cm): the variables read up to \"s\" are over the limits of a pass: 103 bytes as compact JSON, at most 100",
                ),
            ),
            (
                "spec.variables count with the sources",
                workspace(Some(json!({"b": [1, 2, 3, 4]})), vec![cm("cm")]),
                vec![fetched(true, &[("a", b"[1,2,3,4,5]")])],
                Some(
                    "spec.variables: the variables read up to \"b\" are over the limits of a pass: 11 values",
                ),
            ),
        ];
        for (name, workspace, fetched, want) in cases {
            // The first four hold spec.variables alone to its limits, within a real pass's.
            let limits = if fetched.is_empty() {
                &MERGED_VARIABLES
            } else {
                &pass
            };
            match (
                merge_within(Role::Machine, "ns", &workspace, &fetched, limits),
                want,
            ) {
                (Ok(_), None) => {}
                (Err((status, reason, message)), Some(fragment)) => {
                    assert_eq!(
                        (status, reason),
                        (Status::False, reasons::VARIABLES_INVALID)
                    );
                    assert!(message.contains(fragment), "{name}: {message}");
                }
                (got, want) => panic!(
                    "{name}: got {:?}, want {want:?}",
                    got.map(|m| m.variables.len())
                ),
            }
        }
    }

    #[test]
    fn the_winning_source_decides_whether_a_value_is_a_string() -> anyhow::Result<()> {
        use SourceKind::{ConfigMap, Secret};
        let ws = workspace(
            Some(json!({"c": 3})),
            vec![
                source(ConfigMap, "strings", false, false),
                source(Secret, "json", false, true),
            ],
        );
        let fetched = [
            fetched(true, &[("a", b"1"), ("b", b"2"), ("c", b"3")]),
            fetched(true, &[("b", b"[1]")]),
        ];
        let merged = merge(Role::Machine, "ns", &ws, &fetched).map_err(|g| anyhow::anyhow!(g.2))?;
        assert_eq!(merged.from_strings, BTreeSet::from(["a".to_owned()]));
        Ok(())
    }

    #[test]
    fn fit_table() -> anyhow::Result<()> {
        let schema = captf_contract::varschema::parse(
            r#"{"type":"object","additionalProperties":false,"required":["region"],"properties":{
                "region":{"type":"string"},"size":{"type":"number"},"zones":{"type":"array","items":{"type":"string"}}}}"#,
        )?;
        let merged = |vars: serde_json::Value, strings: &[&str]| Merged {
            variables: vars
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| {
                    let variable = Variable {
                        value: v.clone(),
                        sensitive: true,
                    };
                    (k.clone(), variable)
                })
                .collect(),
            from_strings: strings.iter().map(|s| (*s).to_owned()).collect(),
        };
        let cases: &[(&str, Merged, &[&str])] = &[
            (
                "a numeric string from a string source is a number",
                merged(
                    json!({"region": "eu", "size": "3", "zones": ["a"]}),
                    &["size"],
                ),
                &[],
            ),
            (
                "a required variable nothing sets",
                merged(json!({"size": 3}), &[]),
                &[r#"variable "region" is required by the module and nothing sets it"#],
            ),
            (
                "a collection from a string source",
                merged(
                    json!({"region": "eu", "zones": "[\"hunter2\"]"}),
                    &["zones"],
                ),
                &[r#"variable "zones" must be an array, but its source has the string format"#],
            ),
            (
                "every problem at once",
                merged(json!({"extra": "hunter2", "size": "hunter2"}), &[]),
                &[
                    r#"variable "extra" is not declared by the module; variable "size" must be a number, got a string; variable "region" is required"#,
                    "the variables do not fit the io.captf.variables-schema label of r/m:v1: ",
                    "correct spec.variables or the variablesFrom sources",
                ],
            ),
        ];
        for (name, merged, fragments) in cases {
            match fit(&schema, "r/m:v1", merged) {
                Ok(()) => assert!(fragments.is_empty(), "{name}: fits"),
                Err((status, reason, message)) => {
                    assert_eq!(
                        (status, reason),
                        (Status::False, reasons::VARIABLES_INVALID)
                    );
                    assert!(!fragments.is_empty(), "{name}: {message}");
                    for fragment in *fragments {
                        assert!(message.contains(fragment), "{name}: {message}");
                    }
                    assert!(
                        !message.contains("hunter2"),
                        "{name}: a value leaked: {message}"
                    );
                }
            }
        }
        Ok(())
    }
}
