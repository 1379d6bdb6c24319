//! The HCL syntax (`.tf`, `.tofu`): blocks into a [`Module`], and the
//! `var.`/`local.` references of expressions.

use std::collections::{BTreeMap, BTreeSet};

use hcl_edit::Span;
use hcl_edit::expr::{Expression, TraversalOperator};
use hcl_edit::structure::{Block, Body, Structure};
use hcl_edit::visit::{Visit, visit_expr};

use super::credentials::is_credential;
use super::{
    Credential, Expr, Loc, Module, ModuleCall, Output, Resource, SourceFile, Unparsable, Variable,
    line_of,
};

fn block_loc(file: &SourceFile, block: &Block) -> Loc {
    Loc {
        file: file.rel.clone(),
        line: block.span().map_or(0, |s| line_of(&file.text, s.start)),
    }
}

pub(super) fn parse_hcl_file(file: &SourceFile, m: &mut Module) -> Result<(), Unparsable> {
    let body = hcl_edit::parser::parse_body(&file.text).map_err(|e| {
        Unparsable(format!(
            "{}:{}: {}",
            file.rel,
            e.location().line(),
            e.message()
        ))
    })?;
    for structure in body.iter() {
        let Structure::Block(block) = structure else {
            continue;
        };
        let labels: Vec<&str> = block.labels.iter().map(|l| l.as_str()).collect();
        let loc = block_loc(file, block);
        match (block.ident.as_str(), labels.as_slice()) {
            ("variable", [name]) => {
                m.variables.push(hcl_variable(name, loc, &block.body));
            }
            ("output", [name]) => {
                m.outputs.push(Output {
                    name: (*name).to_owned(),
                    loc,
                    value: block
                        .body
                        .get_attribute("value")
                        .map(|a| Expr::Hcl(a.value.clone())),
                });
                collect_body_refs(&block.body, &mut m.var_refs);
            }
            ("module", [name]) => {
                let mut args = BTreeMap::new();
                let mut source = None;
                for attr in block.body.attributes() {
                    let key = attr.key.as_str();
                    if key == "source" {
                        source = literal_string(&attr.value);
                    } else if matches!(
                        key,
                        "version" | "providers" | "count" | "for_each" | "depends_on"
                    ) {
                        collect_expr_refs(&attr.value, &mut m.var_refs);
                    } else {
                        let mut refs = BTreeSet::new();
                        collect_expr_refs(&attr.value, &mut refs);
                        args.insert(key.to_owned(), refs);
                    }
                }
                for inner in block.body.blocks() {
                    collect_body_refs(&inner.body, &mut m.var_refs);
                }
                m.calls.push(ModuleCall {
                    name: (*name).to_owned(),
                    loc,
                    source,
                    args,
                    child: None,
                });
            }
            ("terraform", []) => {
                for inner in block.body.blocks() {
                    match inner.ident.as_str() {
                        "backend" => m.backends.push(block_loc(file, inner)),
                        "cloud" => m.clouds.push(block_loc(file, inner)),
                        "required_providers" => {
                            for attr in inner.body.attributes() {
                                let name = attr.key.as_str().to_owned();
                                let source = match &attr.value {
                                    Expression::Object(obj) => obj
                                        .iter()
                                        .find(|(k, _)| {
                                            matches!(k, hcl_edit::expr::ObjectKey::Ident(i) if i.as_str() == "source")
                                                || matches!(k, hcl_edit::expr::ObjectKey::Expression(e) if literal_string(e).as_deref() == Some("source"))
                                        })
                                        .and_then(|(_, v)| literal_string(v.expr())),
                                    // Legacy `name = "version"` form.
                                    _ => None,
                                };
                                m.required_providers.insert(
                                    name.clone(),
                                    source.unwrap_or(format!("hashicorp/{name}")),
                                );
                            }
                        }
                        _ => {}
                    }
                }
                if block.body.has_attribute("required_version") {
                    m.has_required_version = true;
                }
            }
            ("provider", [name]) => {
                hcl_credentials(file, name, &block.body, &mut m.credentials);
                collect_body_refs(&block.body, &mut m.var_refs);
            }
            ("resource" | "data", [ty, name]) => {
                let prefix = if block.ident.as_str() == "data" {
                    "data."
                } else {
                    ""
                };
                let mut ignore = BTreeSet::new();
                for lifecycle in block.body.get_blocks("lifecycle") {
                    if let Some(attr) = lifecycle.body.get_attribute("ignore_changes") {
                        collect_names(&attr.value, &mut ignore);
                    }
                }
                m.resources.push(Resource {
                    address: format!("{prefix}{ty}.{name}"),
                    ignore_changes: ignore,
                });
                collect_body_refs(&block.body, &mut m.var_refs);
            }
            ("locals", []) => {
                for attr in block.body.attributes() {
                    m.locals
                        .insert(attr.key.as_str().to_owned(), Expr::Hcl(attr.value.clone()));
                }
                collect_body_refs(&block.body, &mut m.var_refs);
            }
            _ => collect_body_refs(&block.body, &mut m.var_refs),
        }
    }
    Ok(())
}

fn hcl_variable(name: &str, loc: Loc, body: &Body) -> Variable {
    let ty_attr = body.get_attribute("type");
    Variable {
        name: name.to_owned(),
        loc,
        ty: ty_attr.map(|a| crate::types::parse_type_expr(&a.value)),
        type_text: ty_attr.map(|a| a.value.to_string().trim().to_owned()),
        has_default: body.has_attribute("default"),
        sensitive: body
            .get_attribute("sensitive")
            .and_then(|a| a.value.as_bool())
            .unwrap_or(false),
        nullable: body
            .get_attribute("nullable")
            .and_then(|a| a.value.as_bool()),
    }
}

/// A string expression without interpolation (a plain string or a template
/// made only of literal text).
pub fn literal_string(expr: &Expression) -> Option<String> {
    match expr {
        Expression::String(s) => Some(s.as_str().to_owned()),
        Expression::StringTemplate(t) => t
            .iter()
            .map(|e| e.as_literal().map(|l| l.as_str().to_owned()))
            .collect(),
        Expression::HeredocTemplate(h) => h
            .template
            .iter()
            .map(|e| e.as_literal().map(|l| l.as_str().to_owned()))
            .collect(),
        Expression::Parenthesis(p) => literal_string(p.inner()),
        _ => None,
    }
}

fn hcl_credentials(file: &SourceFile, provider: &str, body: &Body, out: &mut Vec<Credential>) {
    for structure in body.iter() {
        match structure {
            Structure::Attribute(attr) => {
                let loc = Loc {
                    file: file.rel.clone(),
                    line: attr.span().map_or(0, |s| line_of(&file.text, s.start)),
                };
                hcl_credential_expr(provider, attr.key.as_str(), &attr.value, &loc, out);
            }
            Structure::Block(block) => hcl_credentials(file, provider, &block.body, out),
        }
    }
}

fn hcl_credential_expr(
    provider: &str,
    name: &str,
    expr: &Expression,
    loc: &Loc,
    out: &mut Vec<Credential>,
) {
    if is_credential(name) && literal_string(expr).is_some_and(|s| !s.is_empty()) {
        out.push(Credential {
            provider: provider.to_owned(),
            argument: name.to_owned(),
            loc: loc.clone(),
        });
        return;
    }
    match expr {
        Expression::Object(obj) => {
            for (key, value) in obj.iter() {
                let key = match key {
                    hcl_edit::expr::ObjectKey::Ident(i) => i.as_str().to_owned(),
                    hcl_edit::expr::ObjectKey::Expression(e) => {
                        literal_string(e).unwrap_or_default()
                    }
                };
                hcl_credential_expr(provider, &key, value.expr(), loc, out);
            }
        }
        Expression::Array(items) => {
            for item in items.iter() {
                hcl_credential_expr(provider, "", item, loc, out);
            }
        }
        _ => {}
    }
}

/// Collects `var.NAME` references.
#[derive(Default)]
pub(super) struct RefVisitor {
    pub(super) vars: BTreeSet<String>,
}

impl Visit for RefVisitor {
    fn visit_expr(&mut self, expr: &Expression) {
        if let Expression::Traversal(t) = expr
            && let Expression::Variable(root) = &t.expr
            && let Some(first) = t.operators.first()
            && let TraversalOperator::GetAttr(name) = first.value()
            && root.as_str() == "var"
        {
            self.vars.insert(name.as_str().to_owned());
        }
        visit_expr(self, expr);
    }
}

fn collect_body_refs(body: &Body, out: &mut BTreeSet<String>) {
    let mut v = RefVisitor::default();
    v.visit_body(body);
    out.extend(v.vars);
}

fn collect_expr_refs(expr: &Expression, out: &mut BTreeSet<String>) {
    let mut v = RefVisitor::default();
    v.visit_expr(expr);
    out.extend(v.vars);
}

/// Every identifier, attribute name and string in an expression (for `ignore_changes`).
fn collect_names(expr: &Expression, out: &mut BTreeSet<String>) {
    struct Names<'a>(&'a mut BTreeSet<String>);
    impl Visit for Names<'_> {
        fn visit_expr(&mut self, expr: &Expression) {
            match expr {
                Expression::Variable(v) => {
                    self.0.insert(v.as_str().to_owned());
                }
                Expression::String(s) => {
                    for part in s.split(['.', '[', ']']) {
                        if !part.is_empty() {
                            self.0.insert(part.to_owned());
                        }
                    }
                }
                Expression::Traversal(t) => {
                    for op in &t.operators {
                        if let TraversalOperator::GetAttr(name) = op.value() {
                            self.0.insert(name.as_str().to_owned());
                        }
                    }
                }
                _ => {}
            }
            visit_expr(self, expr);
        }
    }
    Names(out).visit_expr(expr);
}
