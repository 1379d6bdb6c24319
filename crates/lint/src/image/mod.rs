//! Image checks (api.md §3.2.3) on an unpacked image root filesystem: a
//! directory laid out like the image (`<root>/captf/module`,
//! `<root>/captf/runtime`, `<root>/captf/providers`, ...), plus the parts of
//! the image config the checks need ([`ImageConfig`]). Pulling and unpacking
//! an image (registry, OCI layout, layer whiteouts, size caps) is left to the
//! caller. Symlinks are resolved inside the root, as the container would.
//!
//! The module checks run on `/captf/module`; their findings carry paths
//! prefixed with `/captf/module/`.
//!
//! The checks are grouped by what they look at: `users` (the image user and
//! what it can read), `labels`, `mirror` (the provider mirror), and here the
//! platform, the runtime, the reserved paths and the module files. Paths are
//! resolved inside the root by `paths`.

mod labels;
mod mirror;
mod paths;
mod users;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::report::{Finding, Report, Severity, Status};
use crate::rules::{
    IMAGE_ENTRYPOINT, IMAGE_MODULE_LINK, IMAGE_MODULE_PRESENT, IMAGE_PLATFORM,
    IMAGE_RESERVED_PATHS, IMAGE_RUNTIME_PRESENT, IMAGE_RUNTIME_VERSION,
};
use crate::unpack::{self, Owners, UnpackError};
use crate::{Options, Role, checks, load, schema};

use labels::stale_schema;
use mirror::required_providers;
use paths::{Resolved, host, resolve, walk};
use users::{Access, User, allowed, owner};

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

/// Where the role module is in the image.
const MODULE: &str = "/captf/module";
/// Where the image keeps its provider mirror.
const PROVIDERS: &str = "/captf/providers";

/// The role to lint for, or the usage error of a missing role or an unknown contract.
fn role_and_contract(mopts: &Options) -> Result<Role, Status> {
    if !captf_contract::versions().contains(&mopts.contract.as_str()) {
        return Err(Status::Usage(format!(
            "unknown contract {:?}",
            mopts.contract
        )));
    }
    mopts
        .role
        .ok_or_else(|| Status::Usage("--role is required for image linting".to_owned()))
}

/// Lints the image `reference`, `oci:<dir>` (an OCI image layout; `captf lint image` copies
/// a registry's image into one first): unpacks it (see
/// [`unpack`]) and runs [`lint_image_dir`] on it. `explicit_platform` says `--platform` was
/// given: the platform of a layout of one image is then checked too.
pub fn lint_image(reference: &str, opts: &ImageOptions, explicit_platform: bool) -> Report {
    let mopts = &opts.module;
    let mut report = Report::new(Path::new(reference), mopts);
    if let Err(usage) = role_and_contract(mopts) {
        report.status = usage;
        return report;
    }
    let Some(layout) = reference.strip_prefix("oci:") else {
        report.status = Status::Unparsable(format!(
            "{reference}: this library reads OCI layouts only; copy the image into one (`captf lint image` does, as do `crane pull --format=oci {reference} DIR` and `skopeo copy docker://{reference} oci:DIR`) and lint oci:DIR"
        ));
        return report;
    };
    match unpack::oci_layout(Path::new(layout), &opts.platform, explicit_platform) {
        Ok(unpacked) => {
            let owners = (!unpacked.owners_kept).then(|| unpacked.owners());
            let mut report = lint_root(unpacked.root(), &unpacked.config, opts, owners);
            report.module = format!("{reference}@{}", unpacked.digest);
            report
        }
        Err(e @ UnpackError::NoPlatform { .. }) => {
            report.findings.push(image_finding(
                IMAGE_PLATFORM,
                Severity::Error,
                "",
                e.to_string(),
            ));
            report.finish(mopts);
            report
        }
        Err(UnpackError::Unextractable(why)) => {
            report.status = Status::Unparsable(format!("{reference}: {why}"));
            report
        }
    }
}

/// Runs the image checks and the module checks (on `/captf/module`) on an
/// unpacked image root.
pub fn lint_image_dir(root: &Path, config: &ImageConfig, opts: &ImageOptions) -> Report {
    lint_root(root, config, opts, None)
}

/// [`lint_image_dir`], with the files' owners (by host path) from `owners` where the file
/// system could not keep them: what an unpacker not running as root records.
pub fn lint_image_dir_with_owners(
    root: &Path,
    config: &ImageConfig,
    opts: &ImageOptions,
    owners: &Owners,
) -> Report {
    lint_root(root, config, opts, Some(owners))
}

fn lint_root(
    root: &Path,
    config: &ImageConfig,
    opts: &ImageOptions,
    owners: Option<&Owners>,
) -> Report {
    let mopts = &opts.module;
    let mut report = Report::new(root, mopts);
    let role = match role_and_contract(mopts) {
        Ok(role) => role,
        Err(usage) => {
            report.status = usage;
            return report;
        }
    };
    if !root.is_dir() {
        report.status =
            Status::Unparsable(format!("{} is not an unpacked image root", root.display()));
        return report;
    }
    let mut out = Vec::new();

    let user = users::check_user(root, config.user.as_deref(), &mut out);

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

    let published = labels::check_labels(config, role, mopts, &mut out);
    check_runtime(root, config, user.as_ref(), owners, &mut out);
    check_reserved_paths(root, &mut out);
    let (module_dir, has_module_file) = check_module_files(root, &mut out);
    users::check_readable(root, user.as_ref(), owners, &mut out);

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
    mirror::check_providers(root, required, want_os, want_arch, &mut out);

    report.findings = out;
    report.finish(mopts);
    report
}

/// Runtime: `/captf/runtime` is a file the image user can run, and looks like
/// the binary `io.captf.runtime` names.
fn check_runtime(
    root: &Path,
    config: &ImageConfig,
    user: Option<&User>,
    owners: Option<&Owners>,
    out: &mut Vec<Finding>,
) {
    const RUNTIME: &str = "/captf/runtime";
    match resolve(root, RUNTIME) {
        Resolved::Found(path, image_path) => {
            let md = fs::metadata(&path);
            match md {
                Ok(md) if md.is_file() && allowed(&md, owner(&path, &md, owners), user, Access::Exec) => {}
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
            if let Some(want) = config.labels.get("io.captf.runtime").map(String::as_str) {
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
}

/// Reserved paths: empty in the image, as the Job mounts over them.
fn check_reserved_paths(root: &Path, out: &mut Vec<Finding>) {
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
}

/// Module: files at the top level of `/captf/module`, and links that stay
/// inside it. Returns the module directory (host path) and whether it holds a
/// module file.
fn check_module_files(root: &Path, out: &mut Vec<Finding>) -> (Option<PathBuf>, bool) {
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
            && load::EXTENSIONS.iter().any(|x| rest.ends_with(x))
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
    (module_dir, has_module_file)
}
