//! Loading a module directory (HCL `.tf`/`.tofu` and JSON `.tf.json`/`.tofu.json`
//! files, plus local module calls) into a small model the checks work on.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use hcl_edit::Span;
use hcl_edit::expr::{Expression, TraversalOperator};
use hcl_edit::structure::{Block, Body, Structure};
use hcl_edit::visit::{Visit, visit_expr};
use serde_json::{Map, Value};

/// Where something was declared: a path relative to the linted root and a 1-based line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loc {
    pub file: String,
    pub line: usize,
}

/// An expression, in the syntax it was written in.
#[derive(Debug, Clone)]
pub enum Expr {
    Hcl(Expression),
    Json(Value),
}

#[derive(Debug, Clone)]
pub struct Variable {
    pub name: String,
    pub loc: Loc,
    /// `None`: no `type`; `Some(Err)`: unreadable type.
    pub ty: Option<Result<crate::types::Ty, String>>,
    pub type_text: Option<String>,
    pub has_default: bool,
    pub sensitive: bool,
    /// `Some(false)` when `nullable = false`.
    pub nullable: Option<bool>,
}

#[derive(Debug, Clone)]
pub struct Output {
    pub name: String,
    pub loc: Loc,
    pub value: Option<Expr>,
}

#[derive(Debug, Clone)]
pub struct ModuleCall {
    pub name: String,
    pub loc: Loc,
    pub source: Option<String>,
    /// Input arguments (not meta-arguments) and the variables each references.
    pub args: BTreeMap<String, BTreeSet<String>>,
    /// Index into [`Loaded::modules`] when the call is local and resolved.
    pub child: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct Credential {
    pub provider: String,
    pub argument: String,
    pub loc: Loc,
}

#[derive(Debug, Clone)]
pub struct Resource {
    pub address: String,
    /// Names appearing in `lifecycle { ignore_changes }` (`all` included as is).
    pub ignore_changes: BTreeSet<String>,
}

#[derive(Debug, Clone)]
pub struct Shadow {
    pub tofu_file: String,
    pub tf_file: String,
    pub only_tofu: Vec<String>,
    pub only_tf: Vec<String>,
}

/// One module directory (the root or a local module).
#[derive(Debug, Clone, Default)]
pub struct Module {
    /// Path relative to the root (`""` for the root).
    pub rel_dir: String,
    pub variables: Vec<Variable>,
    pub outputs: Vec<Output>,
    pub calls: Vec<ModuleCall>,
    pub resources: Vec<Resource>,
    pub backends: Vec<Loc>,
    pub clouds: Vec<Loc>,
    pub has_required_version: bool,
    /// `required_providers`: local name → source address (`NS/TYPE` or `HOST/NS/TYPE`).
    pub required_providers: BTreeMap<String, String>,
    pub credentials: Vec<Credential>,
    pub locals: BTreeMap<String, Expr>,
    /// Variables referenced anywhere except in variable blocks and module-call arguments.
    pub var_refs: BTreeSet<String>,
    pub shadows: Vec<Shadow>,
}

/// A problem found while resolving local modules or module files.
#[derive(Debug, Clone)]
pub struct Escape {
    pub loc: Loc,
    pub message: String,
}

/// The whole module tree.
#[derive(Debug, Default)]
pub struct Loaded {
    /// `modules[0]` is the root.
    pub modules: Vec<Module>,
    pub escapes: Vec<Escape>,
}

/// The module could not be read or parsed (exit code 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unparsable(pub String);

const EXTENSIONS: [&str; 4] = [".tf.json", ".tofu.json", ".tf", ".tofu"];

fn module_extension(name: &str) -> Option<&'static str> {
    if name.starts_with('.')
        || name.ends_with('~')
        || (name.starts_with('#') && name.ends_with('#'))
    {
        return None;
    }
    EXTENSIONS.into_iter().find(|e| name.ends_with(e))
}

/// Whether a module `source` is a local path (`.`, `..`, `./…`, `../…`).
pub fn is_local_source(source: &str) -> bool {
    source == "." || source == ".." || source.starts_with("./") || source.starts_with("../")
}

/// Loads the module at `dir` and every local module it calls.
pub fn load(dir: &Path) -> Result<Loaded, Unparsable> {
    let root = fs::canonicalize(dir).map_err(|e| {
        Unparsable(format!(
            "cannot read module directory {}: {e}",
            dir.display()
        ))
    })?;
    if !root.is_dir() {
        return Err(Unparsable(format!("{} is not a directory", dir.display())));
    }
    let mut loaded = Loaded::default();
    let mut seen: BTreeMap<PathBuf, usize> = BTreeMap::new();
    load_subtree(&root, &root, &mut loaded, &mut seen)?;
    Ok(loaded)
}

fn load_subtree(
    root: &Path,
    path: &Path,
    loaded: &mut Loaded,
    seen: &mut BTreeMap<PathBuf, usize>,
) -> Result<usize, Unparsable> {
    if let Some(&i) = seen.get(path) {
        return Ok(i);
    }
    let rel = rel_path(root, path);
    let index = loaded.modules.len();
    seen.insert(path.to_path_buf(), index);
    let module = load_dir(root, path, &rel, &mut loaded.escapes, index == 0)?;
    loaded.modules.push(module);
    let calls = loaded.modules[index].calls.clone();
    for (ci, call) in calls.iter().enumerate() {
        let Some(source) = call.source.as_deref().filter(|s| is_local_source(s)) else {
            continue;
        };
        match fs::canonicalize(path.join(source)) {
            Ok(target) if target.starts_with(root) && target.is_dir() => {
                let child = load_subtree(root, &target, loaded, seen)?;
                loaded.modules[index].calls[ci].child = Some(child);
            }
            Ok(target) if !target.starts_with(root) => loaded.escapes.push(Escape {
                loc: call.loc.clone(),
                message: format!(
                    "module {:?} source {source:?} resolves outside the module root; copy the module into the root directory",
                    call.name
                ),
            }),
            _ => loaded.escapes.push(Escape {
                loc: call.loc.clone(),
                message: format!(
                    "module {:?} source {source:?} does not resolve to an existing directory; fix the path",
                    call.name
                ),
            }),
        }
    }
    Ok(index)
}

fn rel_path(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .map(|p| {
            p.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/")
        })
        .unwrap_or_else(|_| path.display().to_string())
}

fn join_rel(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

struct SourceFile {
    name: String,
    rel: String,
    text: String,
    json: bool,
}

fn load_dir(
    root: &Path,
    dir: &Path,
    rel_dir: &str,
    escapes: &mut Vec<Escape>,
    is_root: bool,
) -> Result<Module, Unparsable> {
    let entries = fs::read_dir(dir)
        .map_err(|e| Unparsable(format!("cannot read directory {}: {e}", dir.display())))?;
    let mut files: BTreeMap<String, SourceFile> = BTreeMap::new();
    for entry in entries {
        let entry = entry.map_err(|e| Unparsable(format!("cannot read {}: {e}", dir.display())))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(ext) = module_extension(&name) else {
            continue;
        };
        let path = entry.path();
        let rel = join_rel(rel_dir, &name);
        match fs::canonicalize(&path) {
            Ok(target) if !target.starts_with(root) => {
                escapes.push(Escape {
                    loc: Loc { file: rel, line: 0 },
                    message: format!(
                        "module file {name} is a symlink to {} outside the module root; copy the file instead",
                        target.display()
                    ),
                });
                continue;
            }
            Ok(target) if !target.is_file() => continue,
            Ok(_) => {}
            Err(_) => {
                escapes.push(Escape {
                    loc: Loc { file: rel, line: 0 },
                    message: format!("module file {name} is a dangling symlink; remove or fix it"),
                });
                continue;
            }
        }
        let text =
            fs::read_to_string(&path).map_err(|e| Unparsable(format!("cannot read {rel}: {e}")))?;
        files.insert(
            name.clone(),
            SourceFile {
                name,
                rel,
                text,
                json: ext.ends_with(".json"),
            },
        );
    }
    if files.is_empty() {
        return Err(Unparsable(if is_root {
            format!(
                "no .tf, .tf.json, .tofu or .tofu.json file in {}",
                dir.display()
            )
        } else {
            format!("local module {rel_dir} has no .tf, .tf.json, .tofu or .tofu.json file")
        }));
    }

    let mut module = Module {
        rel_dir: rel_dir.to_owned(),
        ..Module::default()
    };
    // Parse every file; `.tofu` files shadow the `.tf` file of the same stem (OpenTofu view).
    let mut parsed: BTreeMap<String, Module> = BTreeMap::new();
    for file in files.values() {
        let mut m = Module::default();
        if file.json {
            parse_json_file(file, &mut m)?;
        } else {
            parse_hcl_file(file, &mut m)?;
        }
        parsed.insert(file.name.clone(), m);
    }
    let mut shadowed: BTreeSet<String> = BTreeSet::new();
    for name in files.keys() {
        let tf_name = if let Some(stem) = name.strip_suffix(".tofu.json") {
            format!("{stem}.tf.json")
        } else if let Some(stem) = name.strip_suffix(".tofu") {
            format!("{stem}.tf")
        } else {
            continue;
        };
        if let (Some(tofu), Some(tf)) = (parsed.get(name), parsed.get(&tf_name)) {
            shadowed.insert(tf_name.clone());
            let a = declarations(tofu);
            let b = declarations(tf);
            if a != b {
                module.shadows.push(Shadow {
                    tofu_file: join_rel(rel_dir, name),
                    tf_file: join_rel(rel_dir, &tf_name),
                    only_tofu: a.difference(&b).cloned().collect(),
                    only_tf: b.difference(&a).cloned().collect(),
                });
            }
        }
    }
    for (name, m) in parsed {
        if shadowed.contains(&name) {
            continue;
        }
        merge(&mut module, m);
    }
    Ok(module)
}

fn declarations(m: &Module) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    set.extend(m.variables.iter().map(|v| format!("variable.{}", v.name)));
    set.extend(m.outputs.iter().map(|o| format!("output.{}", o.name)));
    set.extend(m.calls.iter().map(|c| format!("module.{}", c.name)));
    set.extend(m.resources.iter().map(|r| r.address.clone()));
    set.extend(m.locals.keys().map(|k| format!("local.{k}")));
    set
}

fn merge(into: &mut Module, m: Module) {
    into.variables.extend(m.variables);
    into.outputs.extend(m.outputs);
    into.calls.extend(m.calls);
    into.resources.extend(m.resources);
    into.backends.extend(m.backends);
    into.clouds.extend(m.clouds);
    into.has_required_version |= m.has_required_version;
    into.required_providers.extend(m.required_providers);
    into.credentials.extend(m.credentials);
    into.locals.extend(m.locals);
    into.var_refs.extend(m.var_refs);
}

// ---------------------------------------------------------------------------
// HCL

fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

fn block_loc(file: &SourceFile, block: &Block) -> Loc {
    Loc {
        file: file.rel.clone(),
        line: block.span().map_or(0, |s| line_of(&file.text, s.start)),
    }
}

fn parse_hcl_file(file: &SourceFile, m: &mut Module) -> Result<(), Unparsable> {
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

/// Credential argument names checked by `module/provider-config` (lower case).
pub const CREDENTIAL_NAMES: [&str; 21] = [
    "access_key",
    "secret_key",
    "secret_access_key",
    "session_token",
    "token",
    "access_token",
    "auth_token",
    "bearer_token",
    "api_token",
    "api_key",
    "apikey",
    "password",
    "passphrase",
    "client_secret",
    "client_certificate",
    "client_certificate_password",
    "client_key",
    "private_key",
    "private_key_password",
    "ssh_private_key",
    "secret",
];

fn is_credential(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    CREDENTIAL_NAMES.contains(&lower.as_str())
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

/// Collects `var.NAME` and `local.NAME` references.
#[derive(Default)]
struct RefVisitor {
    vars: BTreeSet<String>,
    locals: BTreeSet<String>,
}

impl Visit for RefVisitor {
    fn visit_expr(&mut self, expr: &Expression) {
        if let Expression::Traversal(t) = expr
            && let Expression::Variable(root) = &t.expr
            && let Some(first) = t.operators.first()
            && let TraversalOperator::GetAttr(name) = first.value()
        {
            match root.as_str() {
                "var" => {
                    self.vars.insert(name.as_str().to_owned());
                }
                "local" => {
                    self.locals.insert(name.as_str().to_owned());
                }
                _ => {}
            }
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

/// `local.NAME` references of an HCL expression.
pub fn local_refs(expr: &Expression) -> BTreeSet<String> {
    let mut v = RefVisitor::default();
    v.visit_expr(expr);
    v.locals
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

// ---------------------------------------------------------------------------
// JSON

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

fn json_refs(v: &Value, vars: &mut BTreeSet<String>, locals: &mut BTreeSet<String>) {
    match v {
        Value::String(s) if s.contains("${") || s.contains("%{") => {
            if let Ok(t) = hcl_edit::parser::parse_template(s) {
                let mut visitor = RefVisitor::default();
                visitor.visit_template(&t);
                vars.extend(visitor.vars);
                locals.extend(visitor.locals);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| json_refs(i, vars, locals)),
        Value::Object(o) => o
            .iter()
            .filter(|(k, _)| k.as_str() != "//")
            .for_each(|(_, v)| json_refs(v, vars, locals)),
        _ => {}
    }
}

fn json_var_refs(v: &Value, out: &mut BTreeSet<String>) {
    let mut locals = BTreeSet::new();
    json_refs(v, out, &mut locals);
}

/// `local.NAME` references inside a JSON-syntax expression.
pub fn json_local_refs(v: &Value) -> BTreeSet<String> {
    let (mut vars, mut locals) = (BTreeSet::new(), BTreeSet::new());
    json_refs(v, &mut vars, &mut locals);
    locals
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

fn parse_json_file(file: &SourceFile, m: &mut Module) -> Result<(), Unparsable> {
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
