//! The crate's single error type and the `StateReadable` reasons it maps to.
//!
//! Messages name the Secret and what is wrong, and point at a runbook, but never quote state
//! content: outputs and resource attributes may be secret, and these messages end up in
//! conditions, Events and logs.

use captf_api::conditions::reasons;

/// The runbook every state read error points at (operations §15.3).
pub const RUNBOOK_UNREADABLE: &str = "docs/runbooks/state-unreadable.md";
/// The runbook a damaged backup set points at (operations §15.4).
pub const RUNBOOK_RESTORE: &str = "docs/runbooks/state-restore.md";

/// Everything that can make a state or a backup set unreadable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The chunk Secrets disagree: a gap, a duplicate, an unexpected name, the base Secret
    /// missing, or a chunk without the `tfstate` data key. Can be transient while the backend
    /// writes a multi-chunk state (its writes are per Secret, not atomic).
    #[error(
        "state Secret {secret} {problem}; this can be transient while a multi-chunk state is \
         being written, otherwise restore a backup (captf.io/restore-state); see {RUNBOOK_UNREADABLE}"
    )]
    Inconsistent {
        /// The Secret the problem is about (for a gap: the name of the missing Secret).
        secret: String,
        /// What is wrong, as a sentence fragment after the Secret name.
        problem: String,
    },

    /// The chunks are in order but their content cannot be read: not gzip, truncated gzip, a
    /// decompressed size over the cap (gzip bomb), too many chunks, invalid JSON, or a required
    /// field missing.
    #[error(
        "state {base} is corrupt: {problem}; restore a backup taken before the corruption \
         (captf.io/restore-state); see {RUNBOOK_UNREADABLE}"
    )]
    Corrupt {
        /// The base state Secret.
        base: String,
        /// What is wrong.
        problem: String,
    },

    /// The document is an OpenTofu client-side encryption envelope (`encryption_version`).
    #[error(
        "state {base} is encrypted by OpenTofu state encryption, which CAPTF cannot read: remove \
         the module's encryption block, decrypt the state on a workstation and `tofu state push` \
         the plain state with the same backend configuration (no backup exists); see {RUNBOOK_UNREADABLE}"
    )]
    Encrypted {
        /// The base state Secret.
        base: String,
    },

    /// The document's `version` is not 4, or missing. Maps to `StateCorrupt` but stays a
    /// variant of its own so the message can name the version.
    #[error(
        "state {base}: {}; CAPTF reads state format version 4 (Terraform >= 0.12, OpenTofu); \
         restore a backup (captf.io/restore-state); see {RUNBOOK_UNREADABLE}",
        describe_version(version.as_deref())
    )]
    UnsupportedVersion {
        /// The `version` value as JSON text (`3`, `"4"`), or `None` when the field is missing.
        version: Option<String>,
        /// The base state Secret.
        base: String,
    },

    /// A backup set is not complete (a chunk missing, counts or serials disagree, the digest does
    /// not match): it is neither listed nor restorable.
    #[error(
        "backup set {set} is incomplete or damaged: {problem}; pick another serial; see {RUNBOOK_RESTORE}"
    )]
    BackupIncomplete {
        /// The set's base name (`captf.io/state-backup-set`, or the first chunk's name).
        set: String,
        /// What is missing or wrong.
        problem: String,
    },
}

fn describe_version(version: Option<&str>) -> String {
    match version {
        Some(v) => format!("state version {v} is not supported"),
        None => "the document has no `version` field, so it is not a Terraform state".to_owned(),
    }
}

impl StateError {
    /// The condition reason this error sets: the `StateReadable` reason for read errors,
    /// `RestoreJobSucceeded`'s `RestoreBackupNotFound` for a damaged backup set (only complete
    /// sets are restorable, concepts §16.7).
    pub fn reason(&self) -> &'static str {
        match self {
            StateError::Inconsistent { .. } => reasons::STATE_INCONSISTENT,
            StateError::Corrupt { .. } | StateError::UnsupportedVersion { .. } => {
                reasons::STATE_CORRUPT
            }
            StateError::Encrypted { .. } => reasons::STATE_ENCRYPTED,
            StateError::BackupIncomplete { .. } => reasons::RESTORE_BACKUP_NOT_FOUND,
        }
    }

    /// A bounded, static label for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            StateError::Inconsistent { .. } => "Inconsistent",
            StateError::Corrupt { .. } => "Corrupt",
            StateError::Encrypted { .. } => "Encrypted",
            StateError::UnsupportedVersion { .. } => "UnsupportedVersion",
            StateError::BackupIncomplete { .. } => "BackupIncomplete",
        }
    }

    /// The `reason` label of `captf_state_read_errors_total` (operations.md §11.4): an
    /// unsupported version and an incomplete backup set count as corrupt.
    pub fn metric_reason(&self) -> &'static str {
        match self {
            StateError::Inconsistent { .. } => "inconsistent",
            StateError::Encrypted { .. } => "encrypted",
            StateError::Corrupt { .. }
            | StateError::UnsupportedVersion { .. }
            | StateError::BackupIncomplete { .. } => "corrupt",
        }
    }

    /// A state past a cap or unreadable as a state (`StateCorrupt`).
    pub fn corrupt(base: &str, problem: impl Into<String>) -> Self {
        StateError::Corrupt {
            base: base.to_owned(),
            problem: problem.into(),
        }
    }

    /// A chunk set that is not one whole state (`StateInconsistent`).
    pub fn inconsistent(secret: impl Into<String>, problem: impl Into<String>) -> Self {
        StateError::Inconsistent {
            secret: secret.into(),
            problem: problem.into(),
        }
    }
}

/// Crate-wide result alias.
pub type Result<T, E = StateError> = std::result::Result<T, E>;

/// The `StateReadable` reasons a state read can end in (the lock reason `StateLocked` comes from
/// the lease check, not from reading).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateReadableReason {
    /// The state was read.
    Read,
    /// No Secret at all and the object never applied: normal for a new object.
    NotFound,
    /// No Secret at all although the object applied before: the state is gone.
    Lost,
    /// See [`StateError::Inconsistent`].
    Inconsistent,
    /// See [`StateError::Corrupt`] and [`StateError::UnsupportedVersion`].
    Corrupt,
    /// See [`StateError::Encrypted`].
    Encrypted,
}

impl StateReadableReason {
    /// The condition reason constant from `captf_api::conditions::reasons`.
    pub const fn reason(self) -> &'static str {
        match self {
            StateReadableReason::Read => reasons::STATE_READ,
            StateReadableReason::NotFound => reasons::STATE_NOT_FOUND,
            StateReadableReason::Lost => reasons::STATE_LOST,
            StateReadableReason::Inconsistent => reasons::STATE_INCONSISTENT,
            StateReadableReason::Corrupt => reasons::STATE_CORRUPT,
            StateReadableReason::Encrypted => reasons::STATE_ENCRYPTED,
        }
    }

    /// The `StateReadable` condition status that goes with the reason: `True` once read,
    /// `Unknown` before there is anything to read (concepts §16.3), `False` otherwise.
    pub const fn status(self) -> &'static str {
        match self {
            StateReadableReason::Read => "True",
            StateReadableReason::NotFound => "Unknown",
            _ => "False",
        }
    }
}

impl StateError {
    /// The `StateReadable` reason of a read error, or `None` for a backup error (which is no
    /// statement about the live state).
    pub fn readable_reason(&self) -> Option<StateReadableReason> {
        match self {
            StateError::Inconsistent { .. } => Some(StateReadableReason::Inconsistent),
            StateError::Corrupt { .. } | StateError::UnsupportedVersion { .. } => {
                Some(StateReadableReason::Corrupt)
            }
            StateError::Encrypted { .. } => Some(StateReadableReason::Encrypted),
            StateError::BackupIncomplete { .. } => None,
        }
    }
}

/// The reason when the backend selector matched no Secret at all: `StateLost` if the object ever
/// applied (`captf.io/applied` on the durable inputs Secret), else `StateNotFound`. The caller
/// decides this because only it knows both facts; [`crate::decode`] is never called with no chunk.
pub fn classify_missing(ever_applied: bool) -> StateReadableReason {
    if ever_applied {
        StateReadableReason::Lost
    } else {
        StateReadableReason::NotFound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_state_is_lost_only_after_an_apply() {
        assert_eq!(classify_missing(true).reason(), "StateLost");
        assert_eq!(classify_missing(true).status(), "False");
        assert_eq!(classify_missing(false).reason(), "StateNotFound");
        assert_eq!(classify_missing(false).status(), "Unknown");
    }

    #[test]
    fn unsupported_version_reads_as_corrupt_but_names_the_version() {
        let e = StateError::UnsupportedVersion {
            version: Some("3".into()),
            base: "tfstate-default-x-c".into(),
        };
        assert_eq!(e.reason(), "StateCorrupt");
        assert_eq!(e.category(), "UnsupportedVersion");
        assert_eq!(e.readable_reason(), Some(StateReadableReason::Corrupt));
        let msg = e.to_string();
        assert!(msg.contains("state version 3 is not supported"), "{msg}");
        assert!(msg.contains(RUNBOOK_UNREADABLE), "{msg}");
    }

    #[test]
    fn every_variant_maps_to_its_reason() {
        let cases = [
            (StateError::inconsistent("s", "p"), "StateInconsistent"),
            (StateError::corrupt("b", "p"), "StateCorrupt"),
            (StateError::Encrypted { base: "b".into() }, "StateEncrypted"),
            (
                StateError::BackupIncomplete {
                    set: "s".into(),
                    problem: "p".into(),
                },
                "RestoreBackupNotFound",
            ),
        ];
        for (e, reason) in cases {
            assert_eq!(e.reason(), reason);
            if let Some(r) = e.readable_reason() {
                assert_eq!(r.reason(), reason);
            }
        }
    }
}
