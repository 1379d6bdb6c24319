//! CAPTF's in-Job runner (api.md PART 4): `captf runner copy DST`, `captf runner run --op=…` and
//! `captf runner version`.
//!
//! The decisions are pure functions, tested by tables:
//! - [`steps`]: the engine invocations of each operation;
//! - [`plan`]: the `show -json` plan: summary, `p2:` fingerprint, destructive changes, sensitive
//!   values; [`drift`]: what counts as drift;
//! - [`diagnostics`]: failure summaries from engine output, `Apply complete!` counts;
//! - [`redact`]: secret values removed from every text the runner emits;
//! - [`result`]: the result document and its 4096-byte encoding.
//!
//! The I/O lives in [`prepare`] (working copy of the config, step environment, `cli.tfrc`),
//! [`exec`] (one engine process: output through the redactor, SIGTERM forwarding with a stop
//! timeout), [`events`] (progress Events, in the background), [`copy`] and [`run`] (the whole
//! operation). [`cli`] holds the argument parser the
//! `captf` binary hands its `runner` arguments to.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod cli;
pub mod copy;
pub mod diagnostics;
pub mod drift;
pub mod error;
pub mod events;
pub mod exec;
pub mod expect;
pub mod plan;
pub mod prepare;
pub mod redact;
pub mod result;
pub mod run;
pub mod steps;

pub use cli::{Invocation, RunArgs, main};
pub use error::{Error, Result};
pub use result::ResultDocument;
pub use run::{Outcome, run};

/// Exit code of a successful run (api.md §4.1).
pub const EXIT_OK: u8 = 0;
/// Exit code of any unsuccessful run: a failed, interrupted, blocked or plan-changed run, a
/// preflight or prepare failure, a result that could not be written, a copy I/O error.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code of a usage error: bad flag, unknown `--op`, wrong argument count.
pub const EXIT_USAGE: u8 = 2;

/// The version of this binary (the workspace version).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
