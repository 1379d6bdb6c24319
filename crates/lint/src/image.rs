//! Image checks (api.md §3.2.3) on an unpacked image root filesystem: a
//! directory laid out like the image (`<root>/captf/module`,
//! `<root>/captf/runtime`, `<root>/captf/providers`, ...), plus the parts of
//! the image config the checks need ([`ImageConfig`]). Pulling and unpacking
//! an image (registry, OCI layout, layer whiteouts, size caps) is left to the
//! caller. Symlinks are resolved inside the root, as the container would.
//!
//! The module checks run on `/captf/module`; their findings carry paths
//! prefixed with `/captf/module/`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use captf_contract::Role;
use captf_contract::varschema::{self, Schema};

use crate::report::{Finding, Report, Severity, Status};
use crate::rules::*;
use crate::{Options, checks, load, schema};

/// Image paths the Job mounts over; they must be empty in the image.
pub const RESERVED_PATHS: [&str; 4] = [
    "/captf/work",
    "/captf/bin",
    "/captf/config",
    "/var/run/captf/credentials",
];

/// The parts of the OCI image config the checks read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    /// `config.User` (`""`/`None` means root); `name`, `uid`, `name:group` or `uid:gid`.
    pub user: Option<String>,
    /// `config.Labels`.
    pub labels: BTreeMap<String, String>,
    /// `config.Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `config.Cmd`.
    pub cmd: Vec<String>,
    /// `os` of the image config, e.g. `linux` (unchecked when `None`).
    pub os: Option<String>,
    /// `architecture` of the image config, e.g. `amd64` (unchecked when `None`).
    pub architecture: Option<String>,
    /// `variant`, e.g. `v8`.
    pub variant: Option<String>,
}

/// Options of `lint image` beyond the module options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageOptions {
    /// Module options (`role`, `contract`, `strict`, `allow_warnings`).
    pub module: Options,
    /// Platform checked, `os/arch[/variant]` (default `linux/amd64`).
    pub platform: String,
}

impl Default for ImageOptions {
    fn default() -> Self {
        ImageOptions {
            module: Options::default(),
            platform: "linux/amd64".to_owned(),
        }
    }
}

fn image_finding(id: &'static str, severity: Severity, path: &str, message: String) -> Finding {
    Finding {
        id,
        severity,
        file: path.to_owned(),
        line: 0,
        message,
    }
}

// ---------------------------------------------------------------------------
// Path resolution inside the root

#[derive(Debug)]
enum Resolved {
    /// Final host path (exists).
    Found(PathBuf, String),
    /// Some component does not exist (image path reached).
    Missing(String),
    /// Too many symlinks.
    Loop,
}

fn split(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_owned)
        .collect()
}

/// Resolves an absolute image path inside `root`, following symlinks the way
/// the container would (absolute link targets are relative to the root).
fn resolve(root: &Path, image_path: &str) -> Resolved {
    let mut todo: Vec<String> = split(image_path);
    todo.reverse();
    let mut cur: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        if c == ".." {
            cur.pop();
            continue;
        }
        cur.push(c);
        let host = root.join(cur.join("/"));
        match fs::symlink_metadata(&host) {
            Ok(md) if md.file_type().is_symlink() => {
                hops += 1;
                if hops > 40 {
                    return Resolved::Loop;
                }
                let Ok(target) = fs::read_link(&host) else {
                    return Resolved::Missing(format!("/{}", cur.join("/")));
                };
                let target = target.to_string_lossy().into_owned();
                cur.pop();
                if target.starts_with('/') {
                    cur.clear();
                }
                let mut parts = split(&target);
                parts.reverse();
                todo.extend(parts);
            }
            Ok(_) => {}
            Err(_) => return Resolved::Missing(format!("/{}", cur.join("/"))),
        }
    }
    let image = format!("/{}", cur.join("/"));
    Resolved::Found(root.join(cur.join("/")), image)
}

fn host(root: &Path, image_path: &str) -> PathBuf {
    root.join(image_path.trim_start_matches('/'))
}

/// Lists every entry under `dir` (image path), not following symlinks.
fn walk(root: &Path, dir: &str, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(host(root, dir)) else {
        return;
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let path = format!("{}/{name}", dir.trim_end_matches('/'));
        let is_dir = fs::symlink_metadata(host(root, &path)).is_ok_and(|m| m.is_dir());
        out.push(path.clone());
        if is_dir {
            walk(root, &path, out);
        }
    }
}

// ---------------------------------------------------------------------------
// Users and permissions

#[derive(Debug, Clone, PartialEq, Eq)]
struct User {
    uid: u32,
    gids: BTreeSet<u32>,
}

/// The fsGroup the Job's pod runs with (supplementary group of the runner).
const FS_GROUP: u32 = 65532;

fn read_db(root: &Path, path: &str) -> Vec<Vec<String>> {
    let text = match resolve(root, path) {
        Resolved::Found(p, _) => fs::read_to_string(p).unwrap_or_default(),
        _ => String::new(),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split(':').map(str::to_owned).collect())
        .collect()
}

/// Resolves `config.User`. `Ok(None)` = root; `Err(name)` = a name that is
/// not in the image's /etc/passwd (or /etc/group).
fn resolve_user(root: &Path, spec: Option<&str>) -> Result<Option<User>, String> {
    let spec = spec.unwrap_or("").trim();
    if spec.is_empty() {
        return Ok(None);
    }
    let (user, group) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let passwd = read_db(root, "/etc/passwd");
    let groups = read_db(root, "/etc/group");
    let (uid, primary, name) = match user.parse::<u32>() {
        Ok(uid) => {
            let entry = passwd
                .iter()
                .find(|e| e.get(2).and_then(|s| s.parse().ok()) == Some(uid));
            (
                uid,
                entry.and_then(|e| e.get(3)?.parse().ok()).unwrap_or(uid),
                entry.and_then(|e| e.first().cloned()),
            )
        }
        Err(_) => {
            let entry = passwd
                .iter()
                .find(|e| e.first().map(String::as_str) == Some(user))
                .ok_or_else(|| user.to_owned())?;
            (
                entry
                    .get(2)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| user.to_owned())?,
                entry.get(3).and_then(|s| s.parse().ok()).unwrap_or(0),
                Some(user.to_owned()),
            )
        }
    };
    if uid == 0 {
        return Ok(None);
    }
    let mut gids = BTreeSet::from([FS_GROUP]);
    match group {
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => {
                gids.insert(gid);
            }
            Err(_) => {
                let gid = groups
                    .iter()
                    .find(|e| e.first().map(String::as_str) == Some(g))
                    .and_then(|e| e.get(2)?.parse().ok())
                    .ok_or_else(|| g.to_owned())?;
                gids.insert(gid);
            }
        },
        None => {
            gids.insert(primary);
        }
    }
    if let Some(name) = name {
        for e in &groups {
            if e.get(3)
                .is_some_and(|members| members.split(',').any(|m| m == name))
                && let Some(gid) = e.get(2).and_then(|s| s.parse().ok())
            {
                gids.insert(gid);
            }
        }
    }
    Ok(Some(User { uid, gids }))
}

#[derive(Clone, Copy)]
enum Access {
    Read,
    Exec,
}

#[cfg(unix)]
fn allowed(md: &fs::Metadata, user: Option<&User>, access: Access) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mode = md.mode();
    let bit = match access {
        Access::Read => 4,
        Access::Exec => 1,
    };
    let Some(user) = user else {
        // root: read always; exec when any x bit is set (dirs always traversable).
        return matches!(access, Access::Read) || md.is_dir() || mode & 0o111 != 0;
    };
    let shift = if md.uid() == user.uid {
        6
    } else if user.gids.contains(&md.gid()) {
        3
    } else {
        0
    };
    mode & (bit << shift) != 0
}

#[cfg(not(unix))]
fn allowed(_: &fs::Metadata, _: Option<&User>, _: Access) -> bool {
    true
}

// ---------------------------------------------------------------------------
// Providers mirror

fn is_version(s: &str) -> bool {
    let core = s.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

fn is_target(s: &str) -> bool {
    s.split_once('_')
        .is_some_and(|(os, arch)| !os.is_empty() && !arch.is_empty() && !arch.contains('_'))
}

/// Checks the mirror layout; returns the packages found as
/// `(namespace/type lowercased, target)`.
fn mirror(root: &Path, out: &mut Vec<Finding>) -> BTreeSet<(String, String)> {
    const DIR: &str = "/captf/providers";
    let mut packages = BTreeSet::new();
    let layout = |out: &mut Vec<Finding>, path: &str, what: &str| {
        out.push(image_finding(
            IMAGE_PROVIDERS_LAYOUT,
            Severity::Error,
            path,
            format!(
                "{what}; a mirror holds HOST/NAMESPACE/TYPE/ with terraform-provider-TYPE_VERSION_OS_ARCH.zip + index.json + VERSION.json (packed) or VERSION/OS_ARCH/ (unpacked), as written by `tofu providers mirror`"
            ),
        ));
    };
    let mut entries = Vec::new();
    walk(root, DIR, &mut entries);
    for path in entries {
        let rel: Vec<&str> = path[DIR.len() + 1..].split('/').collect();
        let Ok(md) = fs::symlink_metadata(host(root, &path)) else {
            continue;
        };
        if md.file_type().is_symlink() && !matches!(resolve(root, &path), Resolved::Found(..)) {
            out.push(image_finding(
                    IMAGE_PROVIDERS_COMPLETE,
                    Severity::Error,
                    &path,
                    "broken link in the provider mirror; make it point at a file in the image or copy the file".to_owned(),
                ));
            continue;
        }
        let is_dir = matches!(resolve(root, &path), Resolved::Found(ref p, _) if p.is_dir());
        match rel.as_slice() {
            [_] | [_, _] | [_, _, _] if !is_dir => {
                layout(out, &path, "unexpected file in the provider mirror")
            }
            [_] | [_, _] | [_, _, _] => {}
            [_, ns, ty, name] if !is_dir => {
                let prefix = format!("terraform-provider-{ty}_");
                let ok = *name == "index.json"
                    || name.strip_suffix(".json").is_some_and(is_version)
                    || name
                        .strip_prefix(&prefix)
                        .and_then(|r| r.strip_suffix(".zip"))
                        .and_then(|r| r.split_once('_'))
                        .is_some_and(|(v, target)| {
                            let ok = is_version(v) && is_target(target);
                            if ok {
                                packages.insert((
                                    format!("{ns}/{ty}").to_ascii_lowercase(),
                                    target.to_owned(),
                                ));
                            }
                            ok
                        });
                if !ok {
                    layout(
                        out,
                        &path,
                        "unexpected file in a provider directory of the mirror",
                    );
                }
            }
            [_, _, _, version] if !is_version(version) => {
                layout(out, &path, "provider mirror directory is not a version");
            }
            [_, _, _, _] => {}
            [_, ns, ty, _, target] => {
                if is_dir && is_target(target) {
                    packages.insert((
                        format!("{ns}/{ty}").to_ascii_lowercase(),
                        (*target).to_owned(),
                    ));
                } else {
                    layout(
                        out,
                        &path,
                        "expected an OS_ARCH directory under the version directory",
                    );
                }
            }
            _ => {}
        }
    }
    packages
}

/// `NS/TYPE` (lowercase) of a provider source address, `None` for built-ins.
fn provider_key(source: &str) -> Option<String> {
    let parts: Vec<&str> = source.split('/').collect();
    let (host, ns, ty) = match parts.as_slice() {
        [ns, ty] => ("", *ns, *ty),
        [host, ns, ty] => (*host, *ns, *ty),
        _ => return None,
    };
    if host == "terraform.io" && ns == "builtin" {
        return None;
    }
    Some(format!("{ns}/{ty}").to_ascii_lowercase())
}

/// Providers the module tree needs: `required_providers` plus providers
/// implied by resource type prefixes (default namespace `hashicorp`).
fn required_providers(loaded: &load::Loaded) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for m in &loaded.modules {
        for source in m.required_providers.values() {
            if let Some(key) = provider_key(source) {
                out.insert(key, source.clone());
            }
        }
        for r in &m.resources {
            let ty = r.address.trim_start_matches("data.");
            let local = ty.split(['_', '.']).next().unwrap_or("");
            if local.is_empty() || local == "terraform" || m.required_providers.contains_key(local)
            {
                continue;
            }
            out.insert(format!("hashicorp/{local}"), format!("hashicorp/{local}"));
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Labels

/// The warning for a variables schema label that no longer describes the module.
fn stale_schema(published: &Schema, derived: &Schema) -> Finding {
    let names = schema::differing_variables(published, derived);
    let which = match names.as_slice() {
        [] => String::new(),
        names => format!(
            " (variables {}{})",
            names.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
            if names.len() > 5 { ", ..." } else { "" }
        ),
    };
    image_finding(
        IMAGE_LABEL_VARIABLES_SCHEMA,
        Severity::Warning,
        "",
        format!(
            "label {} does not match the variables of /captf/module{which}; regenerate it with `captf lint schema`",
            varschema::LABEL
        ),
    )
}

fn valid_quantity(s: &str) -> bool {
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    !num.is_empty()
        && num.parse::<f64>().is_ok()
        && [
            "", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
        ]
        .contains(&suffix)
}

fn check_capacity(value: &str) -> Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(value).map_err(|e| format!("not JSON: {e}"))?;
    let obj = v.as_object().ok_or("not a JSON object")?;
    for (k, q) in obj {
        let q = q
            .as_str()
            .ok_or_else(|| format!("{k}: quantity must be a string"))?;
        if k.is_empty() || !valid_quantity(q) {
            return Err(format!("{k}: {q:?} is not a resource quantity"));
        }
    }
    Ok(())
}

fn check_node_info(value: &str) -> Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(value).map_err(|e| format!("not JSON: {e}"))?;
    let obj = v.as_object().ok_or("not a JSON object")?;
    if obj.is_empty() {
        return Err("needs at least one of architecture, operatingSystem".to_owned());
    }
    for (k, v) in obj {
        let s = v.as_str().ok_or_else(|| format!("{k} must be a string"))?;
        match k.as_str() {
            "architecture" if ["amd64", "arm64", "s390x", "ppc64le"].contains(&s) => {}
            "operatingSystem" if s == "linux" => {}
            "architecture" | "operatingSystem" => return Err(format!("{k}: {s:?} not allowed")),
            other => return Err(format!("unknown key {other}")),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------

/// Runs the image checks and the module checks (on `/captf/module`) on an
/// unpacked image root.
pub fn lint_image_dir(root: &Path, config: &ImageConfig, opts: &ImageOptions) -> Report {
    let mopts = &opts.module;
    let mut report = Report::new(root, mopts);
    if !captf_contract::versions().contains(&mopts.contract.as_str()) {
        report.status = Status::Usage(format!("unknown contract {:?}", mopts.contract));
        return report;
    }
    let Some(role) = mopts.role else {
        report.status = Status::Usage("--role is required for image linting".to_owned());
        return report;
    };
    if !root.is_dir() {
        report.status =
            Status::Unparsable(format!("{} is not an unpacked image root", root.display()));
        return report;
    }
    let mut out = Vec::new();

    // User.
    let user = match resolve_user(root, config.user.as_deref()) {
        Ok(None) => {
            out.push(image_finding(
                IMAGE_USER_ROOT,
                Severity::Warning,
                "",
                "the image runs as root; set USER to a non-root uid such as 65532".to_owned(),
            ));
            None
        }
        Ok(Some(u)) => Some(u),
        Err(name) => {
            out.push(image_finding(
                IMAGE_USER_UNRESOLVED,
                Severity::Warning,
                "",
                format!(
                    "user {name:?} is not in the image's /etc/passwd (or /etc/group); permission checks assume an unknown non-root user: use a numeric USER"
                ),
            ));
            Some(User {
                uid: u32::MAX,
                gids: BTreeSet::from([FS_GROUP]),
            })
        }
    };

    // Platform, entrypoint.
    let mut want = opts.platform.split('/');
    let (want_os, want_arch, want_variant) = (want.next(), want.next(), want.next());
    if let (Some(os), Some(arch)) = (&config.os, &config.architecture) {
        let variant_ok = match (want_variant, &config.variant) {
            (Some(w), Some(v)) => w == v,
            _ => true,
        };
        if Some(os.as_str()) != want_os || Some(arch.as_str()) != want_arch || !variant_ok {
            out.push(image_finding(
                IMAGE_PLATFORM,
                Severity::Error,
                "",
                format!(
                    "image is for {os}/{arch}{} but {} was requested; build the image for that platform",
                    config.variant.as_deref().map(|v| format!("/{v}")).unwrap_or_default(),
                    opts.platform
                ),
            ));
        }
    }
    if !config.entrypoint.is_empty() || !config.cmd.is_empty() {
        out.push(image_finding(
            IMAGE_ENTRYPOINT,
            Severity::Info,
            "",
            "ENTRYPOINT/CMD are set but never used: the runner replaces both".to_owned(),
        ));
    }

    // Labels.
    let label = |k: &str| config.labels.get(k).map(String::as_str);
    match label("io.captf.role") {
        None => out.push(image_finding(
            IMAGE_LABEL_ROLE,
            Severity::Info,
            "",
            format!("label io.captf.role is not set; add io.captf.role={role}"),
        )),
        Some(r) if r != role.as_str() => out.push(image_finding(
            IMAGE_LABEL_ROLE,
            Severity::Error,
            "",
            format!("label io.captf.role is {r:?} but the image is linted as {role}; use the image for its role or fix the label"),
        )),
        Some(_) => {}
    }
    match label("io.captf.contract") {
        None => out.push(image_finding(
            IMAGE_LABEL_CONTRACT,
            Severity::Info,
            "",
            format!(
                "label io.captf.contract is not set; add io.captf.contract={}",
                mopts.contract
            ),
        )),
        Some(c) if c != mopts.contract => out.push(image_finding(
            IMAGE_LABEL_CONTRACT,
            Severity::Warning,
            "",
            format!(
                "label io.captf.contract is {c:?} but linting against {}",
                mopts.contract
            ),
        )),
        Some(_) => {}
    }
    for (key, check) in [
        (
            "io.captf.capacity",
            check_capacity as fn(&str) -> Result<(), String>,
        ),
        ("io.captf.node-info", check_node_info),
    ] {
        match (role, label(key)) {
            (Role::Machine, None) => out.push(image_finding(
                IMAGE_LABEL_CAPACITY,
                Severity::Info,
                "",
                format!("label {key} is not set; machine templates get no status for it"),
            )),
            (Role::Machine, Some(v)) => {
                if let Err(e) = check(v) {
                    out.push(image_finding(
                        IMAGE_LABEL_CAPACITY,
                        Severity::Error,
                        "",
                        format!("label {key} does not parse ({e}); see the image contract for its format"),
                    ));
                }
            }
            (_, Some(_)) => out.push(image_finding(
                IMAGE_LABEL_CAPACITY,
                Severity::Info,
                "",
                format!("label {key} is only read for the machine role"),
            )),
            (_, None) => {}
        }
    }

    // Parsed now, compared once the module is loaded.
    let published = match label(varschema::LABEL).map(varschema::parse) {
        Some(Ok(schema)) => Some(schema),
        Some(Err(e)) => {
            out.push(image_finding(
                IMAGE_LABEL_VARIABLES_SCHEMA,
                Severity::Error,
                "",
                // The parse error names the label.
                format!("{e}; regenerate it with `captf lint schema`"),
            ));
            None
        }
        None => None,
    };

    // Runtime.
    const RUNTIME: &str = "/captf/runtime";
    match resolve(root, RUNTIME) {
        Resolved::Found(path, image_path) => {
            let md = fs::metadata(&path);
            match md {
                Ok(md) if md.is_file() && allowed(&md, user.as_ref(), Access::Exec) => {}
                Ok(md) if md.is_file() => out.push(image_finding(
                    IMAGE_RUNTIME_PRESENT,
                    Severity::Error,
                    RUNTIME,
                    format!("{image_path} is not executable by the image user; chmod 0755 it"),
                )),
                _ => out.push(image_finding(
                    IMAGE_RUNTIME_PRESENT,
                    Severity::Error,
                    RUNTIME,
                    format!("{image_path} is not a regular file; install the tofu or terraform binary there (or link it)"),
                )),
            }
            if let Some(want) = label("io.captf.runtime") {
                let link = fs::read_link(host(root, RUNTIME))
                    .map(|t| t.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let names = format!("{link} {image_path}").to_ascii_lowercase();
                let other = match want {
                    "tofu" => names.contains("terraform").then_some("terraform"),
                    "terraform" => names.contains("tofu").then_some("tofu"),
                    _ => None,
                };
                if let Some(other) = other {
                    out.push(image_finding(
                        IMAGE_RUNTIME_VERSION,
                        Severity::Warning,
                        RUNTIME,
                        format!("{RUNTIME} resolves to {image_path}, which looks like {other}, but io.captf.runtime is {want:?}; fix the label or the binary"),
                    ));
                }
            }
        }
        Resolved::Missing(at) => out.push(image_finding(
            IMAGE_RUNTIME_PRESENT,
            Severity::Error,
            RUNTIME,
            format!("{RUNTIME} is missing ({at} does not exist); build FROM a CAPTF base image or install tofu/terraform there"),
        )),
        Resolved::Loop => out.push(image_finding(
            IMAGE_RUNTIME_PRESENT,
            Severity::Error,
            RUNTIME,
            format!("{RUNTIME} is a symlink loop"),
        )),
    }

    // Reserved paths.
    for dir in RESERVED_PATHS {
        if let Resolved::Found(path, image_path) = resolve(root, dir) {
            let non_empty =
                path.is_file() || fs::read_dir(&path).is_ok_and(|mut e| e.next().is_some());
            if non_empty {
                out.push(image_finding(
                    IMAGE_RESERVED_PATHS,
                    Severity::Error,
                    dir,
                    format!("{image_path} is not empty but the Job mounts over it; move those files elsewhere"),
                ));
            }
        }
    }

    // Module.
    const MODULE: &str = "/captf/module";
    let module_dir = match resolve(root, MODULE) {
        Resolved::Found(p, _) if p.is_dir() => Some(p),
        _ => None,
    };
    let mut entries = Vec::new();
    if module_dir.is_some() {
        walk(root, MODULE, &mut entries);
    }
    let has_module_file = entries.iter().any(|e| {
        let rest = &e[MODULE.len() + 1..];
        !rest.contains('/')
            && [".tf", ".tf.json", ".tofu", ".tofu.json"]
                .iter()
                .any(|x| rest.ends_with(x))
            && matches!(resolve(root, e), Resolved::Found(ref p, _) if p.is_file())
    });
    if !has_module_file {
        out.push(image_finding(
            IMAGE_MODULE_PRESENT,
            Severity::Error,
            MODULE,
            "no .tf, .tf.json, .tofu or .tofu.json file at the top level of /captf/module; COPY the role module there".to_owned(),
        ));
    }
    for e in &entries {
        let is_link = fs::symlink_metadata(host(root, e)).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            continue;
        }
        let ok = matches!(resolve(root, e), Resolved::Found(ref p, ref ip)
            if p.is_file() && ip.starts_with("/captf/module/"));
        if !ok {
            out.push(image_finding(
                IMAGE_MODULE_LINK,
                Severity::Error,
                e,
                "link does not end at a regular file inside /captf/module; copy the target instead"
                    .to_owned(),
            ));
        }
    }

    // Readability for a numeric non-root user.
    if let Some(u) = user.as_ref().filter(|u| u.uid != u32::MAX) {
        let mut unreadable = Vec::new();
        let mut paths = vec!["/captf".to_owned()];
        for top in [MODULE, "/captf/providers"] {
            if matches!(resolve(root, top), Resolved::Found(..)) {
                paths.push(top.to_owned());
                walk(root, top, &mut paths);
            }
        }
        for p in &paths {
            let Resolved::Found(hp, _) = resolve(root, p) else {
                continue;
            };
            let Ok(md) = fs::metadata(&hp) else { continue };
            let ok = if md.is_dir() {
                allowed(&md, Some(u), Access::Exec)
                    && (p == "/captf" || allowed(&md, Some(u), Access::Read))
            } else {
                allowed(&md, Some(u), Access::Read)
            };
            if !ok {
                unreadable.push(p.clone());
            }
        }
        if !unreadable.is_empty() {
            let shown: Vec<_> = unreadable.iter().take(5).cloned().collect();
            out.push(image_finding(
                IMAGE_MODULE_READABLE,
                Severity::Warning,
                "",
                format!(
                    "uid {} cannot read/traverse {} path(s): {}{}; make module and mirror files world-readable (0644 files, 0755 dirs)",
                    u.uid,
                    unreadable.len(),
                    shown.join(", "),
                    if unreadable.len() > 5 { ", ..." } else { "" }
                ),
            ));
        }
    }

    // Module checks, then the mirror (needs the module's providers).
    let mut required = BTreeMap::new();
    if let (Some(dir), true) = (&module_dir, has_module_file) {
        match load::load(dir) {
            Ok(loaded) => {
                for mut f in checks::run(&loaded, role) {
                    if !f.file.is_empty() {
                        f.file = format!("{MODULE}/{}", f.file);
                    }
                    out.push(f);
                }
                required = required_providers(&loaded);
                if let Some(published) = &published {
                    let derived = schema::variables_schema(&loaded.modules[0], role);
                    if *published != derived {
                        out.push(stale_schema(published, &derived));
                    }
                }
            }
            Err(load::Unparsable(msg)) => {
                report.status = Status::Unparsable(format!("{MODULE}: {msg}"));
            }
        }
    }
    match resolve(root, "/captf/providers") {
        Resolved::Found(p, _) if p.is_dir() => {
            let packages = mirror(root, &mut out);
            let (os, arch) = (want_os.unwrap_or("linux"), want_arch.unwrap_or("amd64"));
            let target = format!("{os}_{arch}");
            for (key, source) in required {
                if !packages.contains(&(key.clone(), target.clone())) {
                    out.push(image_finding(
                        IMAGE_PROVIDERS_COMPLETE,
                        Severity::Error,
                        "/captf/providers",
                        format!(
                            "no {target} package of provider {source} in the mirror; run `tofu providers mirror -platform={target} /captf/providers` in the image build"
                        ),
                    ));
                }
            }
        }
        _ => out.push(image_finding(
            IMAGE_PROVIDERS_ABSENT,
            Severity::Info,
            "",
            "no provider mirror at /captf/providers: init will download providers from the registry (needs egress)".to_owned(),
        )),
    }

    report.findings = out;
    report.finish(mopts);
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_node_info() {
        assert!(check_capacity(r#"{"cpu":"4","memory":"16Gi","x":"500m"}"#).is_ok());
        assert!(check_capacity(r#"{"cpu":4}"#).is_err());
        assert!(check_capacity(r#"{"cpu":"four"}"#).is_err());
        assert!(check_node_info(r#"{"architecture":"arm64","operatingSystem":"linux"}"#).is_ok());
        assert!(check_node_info(r#"{}"#).is_err());
        assert!(check_node_info(r#"{"architecture":"x86"}"#).is_err());
    }

    #[test]
    fn provider_keys() {
        assert_eq!(
            provider_key("hashicorp/aws").as_deref(),
            Some("hashicorp/aws")
        );
        assert_eq!(
            provider_key("registry.opentofu.org/Hashicorp/AWS").as_deref(),
            Some("hashicorp/aws")
        );
        assert_eq!(provider_key("terraform.io/builtin/terraform"), None);
        assert!(is_version("5.1.0") && is_version("1.0.0-beta1") && !is_version("v5"));
    }
}
