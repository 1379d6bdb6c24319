//! `captf-lint`: the CAPTF module linter (the `tfcapi-lint module` checks of
//! api.md §3.2.2, and the image checks of §3.2.3 on an unpacked image root
//! directory, which [`unpack`] makes from an OCI image layout), and the
//! variables schema a module image publishes ([`schema`]).
//!
//! ```no_run
//! use std::path::Path;
//! use captf_lint::{Options, lint_module};
//! use captf_contract::Role;
//!
//! let opts = Options { role: Some(Role::Machine), ..Options::default() };
//! let report = lint_module(Path::new("modules/noop/machine"), &opts);
//! print!("{}", report.to_text());
//! std::process::exit(report.exit_code(&opts));
//! ```
//!
//! Module loading reads `.tf`, `.tf.json`, `.tofu` and `.tofu.json` files of
//! the directory and of every local module it calls (`source` `.`, `..`,
//! `./…`, `../…`); remote modules are never fetched. A `.tofu` file replaces
//! the `.tf` file of the same stem (as OpenTofu does). No terraform/tofu
//! binary is needed.

#![forbid(unsafe_code)]

mod checks;
pub mod image;
mod load;
mod report;
pub mod rules;
pub mod schema;
pub mod types;
pub mod unpack;

use std::collections::BTreeSet;
use std::path::Path;

pub use captf_contract::Role;
pub use report::{Finding, Report, Severity, Status};
pub use rules::{RULES, Rule};

/// Exit code: no errors (and no warnings under `strict`).
pub const EXIT_OK: i32 = 0;
/// Exit code: at least one error, or a warning under `strict`.
pub const EXIT_FINDINGS: i32 = 1;
/// Exit code: module unreadable or unparsable (image: not extractable).
pub const EXIT_UNPARSABLE: i32 = 2;
/// Exit code: bad command line (unknown role or contract, role not inferable).
pub const EXIT_USAGE: i32 = 3;

const CANNOT_INFER_ROLE: &str =
    "cannot infer the role from the module; pass --role cluster|machine|machinepool";

/// What to lint against and how to count findings (the CLI flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `--role`; `None` infers it from the module (see [`infer_role`]).
    pub role: Option<Role>,
    /// `--contract` (default `v1alpha1`); must be one of [`captf_contract::versions`].
    pub contract: String,
    /// `--strict`: warnings count as errors for the exit code.
    pub strict: bool,
    /// `--allow-warning`: rule ids whose warnings are reported as info.
    pub allow_warnings: BTreeSet<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            role: None,
            contract: captf_contract::VERSION.to_owned(),
            strict: false,
            allow_warnings: BTreeSet::new(),
        }
    }
}

impl Options {
    /// Adds `--allow-warning` values; each may be comma-separated.
    pub fn allow_warning(mut self, ids: &str) -> Self {
        self.allow_warnings.extend(
            ids.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        );
        self
    }
}

/// Infers the role of a module from the contract inputs it declares
/// (`machinepool_name` ⇒ machinepool, `machine_name` ⇒ machine,
/// `control_plane_initialized`/`control_plane_endpoint` ⇒ cluster), falling
/// back to its outputs (`provider_id_list`, `interruptible`, `exports`).
pub fn infer_role(dir: &Path) -> Option<Role> {
    let loaded = load::load(dir).ok()?;
    checks::infer(&loaded.modules[0])
}

/// Runs every module check on the module in `dir`.
pub fn lint_module(dir: &Path, opts: &Options) -> Report {
    let mut report = Report::new(dir, opts);
    if !captf_contract::versions().contains(&opts.contract.as_str()) {
        report.status = Status::Usage(format!(
            "unknown contract {:?}; supported: {}",
            opts.contract,
            captf_contract::versions().join(", ")
        ));
        return report;
    }
    let loaded = match load::load(dir) {
        Ok(l) => l,
        Err(load::Unparsable(msg)) => {
            report.status = Status::Unparsable(msg);
            return report;
        }
    };
    let role = match opts.role.or_else(|| checks::infer(&loaded.modules[0])) {
        Some(r) => r,
        None => {
            report.status = Status::Usage(CANNOT_INFER_ROLE.to_owned());
            return report;
        }
    };
    report.role = Some(role);
    report.findings = checks::run(&loaded, role);
    report.finish(opts);
    report
}
