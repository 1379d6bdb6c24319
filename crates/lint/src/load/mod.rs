//! Loading a module directory (HCL `.tf`/`.tofu` and JSON `.tf.json`/`.tofu.json`
//! files, plus local module calls) into a small model the checks work on.
//!
//! This module holds the model, the walk over the module tree and the
//! `.tofu`-over-`.tf` shadowing; each syntax is read by its own module
//! (`hcl`, `json`) into a [`Module`] per file.

mod credentials;
mod hcl;
mod json;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use hcl_edit::expr::Expression;
use serde_json::Value;

use hcl::parse_hcl_file;
use json::parse_json_file;

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

/// The endings of module files (the image linter looks for them too).
pub(crate) const EXTENSIONS: [&str; 4] = [".tf.json", ".tofu.json", ".tf", ".tofu"];

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

fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}
