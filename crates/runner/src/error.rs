//! The crate's error type.
//!
//! Messages name the file, step or flag and the cause, never a value that may be secret: an
//! error text ends up in the result document (after redaction) and the Job's log.

use std::path::PathBuf;

/// Everything that can stop a run before or between engine steps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The module image breaks the image contract (module dir, runtime binary).
    #[error("image layout: {0}")]
    ImageLayout(String),

    /// A file or folder could not be read, written or created.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What the runner was doing (`reading config file`, `creating`, …).
        what: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// The per-run config lacks a file the operation needs.
    #[error("config {}: missing {file} (the per-run Secret must hold it)", dir.display())]
    MissingConfig {
        /// The config dir (`--config`).
        dir: PathBuf,
        /// The missing file name.
        file: &'static str,
    },

    /// A rendered config file is not what the runner can read (e.g. not JSON).
    #[error("config file {}: {reason}", path.display())]
    BadConfig {
        /// The file.
        path: PathBuf,
        /// Why it is unusable (no value quoted).
        reason: String,
    },

    /// The plan key is unreadable or too short: fingerprinting runs fail closed.
    #[error("plan key {}: {reason}", path.display())]
    PlanKey {
        /// `--plan-key-file`.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },

    /// The restore backup could not be assembled.
    #[error("restore backup: {0}")]
    Restore(String),

    /// `show -json` output that is not a plan document.
    #[error("show -json output is not a plan document: {0}")]
    PlanJson(String),

    /// The engine could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// `bin[0]`.
        program: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// A command-line usage error.
    #[error("{0}")]
    Usage(String),
}

impl Error {
    /// A bounded, static label for metrics, events and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Error::ImageLayout(_) => "ImageLayout",
            Error::Io { .. } => "Io",
            Error::MissingConfig { .. } => "MissingConfig",
            Error::BadConfig { .. } => "BadConfig",
            Error::PlanKey { .. } => "PlanKey",
            Error::Restore(_) => "Restore",
            Error::PlanJson(_) => "PlanJson",
            Error::Spawn { .. } => "Spawn",
            Error::Usage(_) => "Usage",
        }
    }

    /// An [`Error::Io`] for `path`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            what,
            path: path.into(),
            source,
        }
    }
}

/// Crate-wide result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
