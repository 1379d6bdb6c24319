//! The JSON syntax (`.tf.json`, `.tofu.json`): objects into a [`Module`],
//! and the `var.`/`local.` references of the templates in its strings.

use std::collections::{BTreeMap, BTreeSet};

use hcl_edit::visit::Visit;
use serde_json::{Map, Value};

use super::credentials::is_credential;
use super::hcl::RefVisitor;
use super::{
    Credential, Expr, Loc, Module, ModuleCall, Output, Resource, SourceFile, Unparsable, Variable,
    line_of,
};

/// Finds the line of the first occurrence of each quoted key in turn.
fn json_line(text: &str, keys: &[&str]) -> usize {
    let mut pos = 0;
    for key in keys {
        let needle = serde_json::to_string(key).unwrap_or_default();
        match text[pos..].find(&needle) {
            Some(i) => pos += i,
            None => break,
        }
    }
    line_of(text, pos)
}

/// A JSON block value may be an object or an array of objects.
fn objects(v: &Value) -> Vec<&Map<String, Value>> {
    match v {
        Value::Object(o) => vec![o],
        Value::Array(items) => items.iter().filter_map(Value::as_object).collect(),
        _ => Vec::new(),
    }
}

fn labeled(v: &Value) -> Vec<(&str, &Map<String, Value>)> {
    objects(v)
        .into_iter()
        .flat_map(|o| {
            o.iter()
                .filter(|(k, _)| k.as_str() != "//")
                .flat_map(|(k, v)| objects(v).into_iter().map(move |b| (k.as_str(), b)))
        })
        .collect()
}

fn json_var_refs(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::String(s) if s.contains("${") || s.contains("%{") => {
            if let Ok(t) = hcl_edit::parser::parse_template(s) {
                let mut visitor = RefVisitor::default();
                visitor.visit_template(&t);
                out.extend(visitor.vars);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| json_var_refs(i, out)),
        Value::Object(o) => o
            .iter()
            .filter(|(k, _)| k.as_str() != "//")
            .for_each(|(_, v)| json_var_refs(v, out)),
        _ => {}
    }
}

fn json_type(v: &Value) -> (Result<crate::types::Ty, String>, String) {
    match v {
        Value::String(s) => {
            // JSON syntax: the string holds the type expression (maybe as "${...}").
            let inner = s
                .strip_prefix("${")
                .and_then(|r| r.strip_suffix('}'))
                .unwrap_or(s);
            (crate::types::parse_type_str(inner), s.clone())
        }
        other => (
            Err("type must be a string in JSON syntax".to_owned()),
            other.to_string(),
        ),
    }
}

pub(super) fn parse_json_file(file: &SourceFile, m: &mut Module) -> Result<(), Unparsable> {
    let doc: Value = serde_json::from_str(&file.text)
        .map_err(|e| Unparsable(format!("{}:{}: {e}", file.rel, e.line())))?;
    let Value::Object(top) = &doc else {
        return Err(Unparsable(format!(
            "{}:1: a JSON configuration file must hold an object",
            file.rel
        )));
    };
    let loc = |keys: &[&str]| Loc {
        file: file.rel.clone(),
        line: json_line(&file.text, keys),
    };
    for (kind, value) in top {
        match kind.as_str() {
            "variable" => {
                for (name, body) in labeled(value) {
                    let (ty, type_text) = match body.get("type") {
                        Some(t) => {
                            let (ty, text) = json_type(t);
                            (Some(ty), Some(text))
                        }
                        None => (None, None),
                    };
                    m.variables.push(Variable {
                        name: name.to_owned(),
                        loc: loc(&["variable", name]),
                        ty,
                        type_text,
                        has_default: body.contains_key("default"),
                        sensitive: body
                            .get("sensitive")
                            .and_then(Value::as_bool)
                            .unwrap_or(false),
                        nullable: body.get("nullable").and_then(Value::as_bool),
                    });
                }
            }
            "output" => {
                for (name, body) in labeled(value) {
                    m.outputs.push(Output {
                        name: name.to_owned(),
                        loc: loc(&["output", name]),
                        value: body.get("value").cloned().map(Expr::Json),
                    });
                    json_var_refs(&Value::Object(body.clone()), &mut m.var_refs);
                }
            }
            "module" => {
                for (name, body) in labeled(value) {
                    let mut args = BTreeMap::new();
                    let mut source = None;
                    for (key, v) in body {
                        match key.as_str() {
                            "//" => {}
                            "source" => source = v.as_str().map(str::to_owned),
                            "version" | "providers" | "count" | "for_each" | "depends_on" => {
                                json_var_refs(v, &mut m.var_refs);
                            }
                            _ => {
                                let mut refs = BTreeSet::new();
                                json_var_refs(v, &mut refs);
                                args.insert(key.clone(), refs);
                            }
                        }
                    }
                    m.calls.push(ModuleCall {
                        name: name.to_owned(),
                        loc: loc(&["module", name]),
                        source,
                        args,
                        child: None,
                    });
                }
            }
            "terraform" => {
                for body in objects(value) {
                    if body.contains_key("backend") {
                        m.backends.push(loc(&["terraform", "backend"]));
                    }
                    if body.contains_key("cloud") {
                        m.clouds.push(loc(&["terraform", "cloud"]));
                    }
                    if body.contains_key("required_version") {
                        m.has_required_version = true;
                    }
                    for rp in body
                        .get("required_providers")
                        .map(objects)
                        .unwrap_or_default()
                    {
                        for (name, v) in rp.iter().filter(|(k, _)| k.as_str() != "//") {
                            let source = v
                                .get("source")
                                .and_then(Value::as_str)
                                .map(str::to_owned)
                                .unwrap_or(format!("hashicorp/{name}"));
                            m.required_providers.insert(name.clone(), source);
                        }
                    }
                }
            }
            "provider" => {
                for (name, body) in labeled(value) {
                    json_credentials(file, name, &Value::Object(body.clone()), "", m);
                    json_var_refs(&Value::Object(body.clone()), &mut m.var_refs);
                }
            }
            "resource" | "data" => {
                let prefix = if kind == "data" { "data." } else { "" };
                for (ty, named) in labeled(value) {
                    for (name, body) in named
                        .iter()
                        .filter(|(k, _)| k.as_str() != "//")
                        .flat_map(|(k, v)| objects(v).into_iter().map(move |b| (k, b)))
                    {
                        let mut ignore = BTreeSet::new();
                        if let Some(lifecycle) = body.get("lifecycle") {
                            for l in objects(lifecycle) {
                                match l.get("ignore_changes") {
                                    Some(Value::Array(items)) => {
                                        for item in items.iter().filter_map(Value::as_str) {
                                            ignore.extend(
                                                item.split(['.', '[', ']'])
                                                    .filter(|p| !p.is_empty())
                                                    .map(str::to_owned),
                                            );
                                        }
                                    }
                                    Some(Value::String(s)) => {
                                        ignore.insert(s.clone());
                                    }
                                    _ => {}
                                }
                            }
                        }
                        m.resources.push(Resource {
                            address: format!("{prefix}{ty}.{name}"),
                            ignore_changes: ignore,
                        });
                        json_var_refs(&Value::Object(body.clone()), &mut m.var_refs);
                    }
                }
            }
            "locals" => {
                for body in objects(value) {
                    for (k, v) in body.iter().filter(|(k, _)| k.as_str() != "//") {
                        m.locals.insert(k.clone(), Expr::Json(v.clone()));
                    }
                }
                json_var_refs(value, &mut m.var_refs);
            }
            "//" => {}
            _ => json_var_refs(value, &mut m.var_refs),
        }
    }
    Ok(())
}

fn json_credentials(file: &SourceFile, provider: &str, v: &Value, key: &str, m: &mut Module) {
    match v {
        Value::String(s)
            if is_credential(key) && !s.is_empty() && !s.contains("${") && !s.contains("%{") =>
        {
            m.credentials.push(Credential {
                provider: provider.to_owned(),
                argument: key.to_owned(),
                loc: Loc {
                    file: file.rel.clone(),
                    line: json_line(&file.text, &["provider", provider, key]),
                },
            });
        }
        Value::Object(o) => {
            for (k, v) in o.iter().filter(|(k, _)| k.as_str() != "//") {
                json_credentials(file, provider, v, k, m);
            }
        }
        Value::Array(items) => {
            for item in items {
                json_credentials(file, provider, item, key, m);
            }
        }
        _ => {}
    }
}
