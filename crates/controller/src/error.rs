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

/// What retrying the pass can do about an error, which [`crate::reconcile::error_policy`]
/// turns into when to try again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// A conflict, a busy or unreachable API server, a timeout: try again soon, backing off
    /// while it lasts.
    Transient,
    /// Someone must act first (RBAC, a missing CRD, an API refusal of what was sent, inputs
    /// that do not render): try again rarely, in case they did.
    Operator,
    /// The object must change first: its next change wakes it.
    ObjectChange,
    /// A bug in CAPTF: back off, it may depend on a state that passes.
    Bug,
}

impl Error {
    /// What a retry can do about this error.
    pub fn retry(&self) -> Retry {
        match self {
            Error::Kube { source, .. } => match source {
                // 404: what was read or written went away meanwhile; the next pass sees it.
                kube::Error::Api(status) => match status.code {
                    400 | 401 | 403 | 405 | 413 | 415 | 422 => Retry::Operator,
                    _ => Retry::Transient,
                },
                _ => Retry::Transient,
            },
            Error::InvalidObject(_) => Retry::ObjectChange,
            Error::Startup(_) | Error::Contract(_) => Retry::Operator,
            Error::Serde(_) | Error::Panicked(_) => Retry::Bug,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> Error {
        Err::<(), _>(kube::Error::Api(Box::new(
            kube::core::Status::failure("refused", "Reason").with_code(code),
        )))
        .during(|| "patching the status".to_owned())
        .expect_err("an error")
    }

    #[test]
    fn what_a_retry_can_do() {
        let cases = [
            ("conflict", api(409), Retry::Transient),
            ("gone meanwhile", api(404), Retry::Transient),
            ("too many requests", api(429), Retry::Transient),
            ("server error", api(500), Retry::Transient),
            ("unavailable", api(503), Retry::Transient),
            ("forbidden", api(403), Retry::Operator),
            ("invalid", api(422), Retry::Operator),
            ("too large", api(413), Retry::Operator),
            (
                "object",
                Error::InvalidObject("no namespace".into()),
                Retry::ObjectChange,
            ),
            ("startup", Error::Startup("no CRD".into()), Retry::Operator),
            ("panic", Error::Panicked("index".into()), Retry::Bug),
        ];
        for (case, error, want) in cases {
            assert_eq!(error.retry(), want, "{case}: {error}");
        }
        assert!(api(409).to_string().starts_with("patching the status: "));
    }
}
