//! The controller's errors. Each has a static [`Error::category`] used as metric label and in logs.

/// Errors of the manager.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The manager cannot start: flags, configuration, CRDs missing.
    #[error("{0}")]
    Startup(String),
    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// The object itself is invalid; a change is needed before anything can happen.
    #[error("{0}")]
    InvalidObject(String),
    /// Rendering the module inputs failed.
    #[error("rendering inputs: {0}")]
    Contract(#[from] captf_contract::Error),
    /// (De)serialising an object failed.
    #[error("{0}")]
    Serde(#[from] serde_json::Error),
    /// The pass panicked: a bug in CAPTF, never the object's fault.
    #[error("the pass panicked: {0} (a bug in CAPTF: please report it with this log line)")]
    Panicked(String),
}

impl Error {
    /// A bounded label for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Startup(_) => "startup",
            Error::Kube { .. } => "kube",
            Error::InvalidObject(_) => "invalid_object",
            Error::Contract(_) => "contract",
            Error::Serde(_) => "serialization",
            Error::Panicked(_) => "panic",
        }
    }
}

/// Adds what was being done to a kube error.
pub trait KubeContext<T> {
    fn during(self, action: impl FnOnce() -> String) -> Result<T, Error>;
}

impl<T> KubeContext<T> for Result<T, kube::Error> {
    fn during(self, action: impl FnOnce() -> String) -> Result<T, Error> {
        self.map_err(|source| Error::Kube {
            action: action(),
            source,
        })
    }
}

/// The result of manager operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
