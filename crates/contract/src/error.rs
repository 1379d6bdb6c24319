//! The crate's single error type.
//!
//! Messages name the offending variable, role or JSON path but never quote a
//! user-supplied value: variable values may come from Secrets and end up in
//! conditions, Events and logs.

use crate::role::Role;

/// Everything that can go wrong while building, rendering or hashing contract inputs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A role string that is not `cluster`, `machine` or `machinepool`.
    #[error("contract: unknown role {role:?}")]
    UnknownRole {
        /// The string that failed to parse.
        role: String,
    },

    /// `spec.variables` (or a variables source) is valid JSON but not an object.
    #[error("contract: variables must be a JSON object")]
    VariablesNotObject,

    /// `spec.variables` (or a variables source) is not valid JSON.
    ///
    /// Only the position is kept: serde_json's message can quote the input.
    #[error("contract: variables are not valid JSON (line {line}, column {column})")]
    VariablesMalformed {
        /// 1-based line of the syntax error.
        line: usize,
        /// 1-based column of the syntax error.
        column: usize,
    },

    /// A user variable name that does not match `^[a-zA-Z_][a-zA-Z0-9_-]*$`.
    #[error("contract: variable {name:?}: name must match ^[a-zA-Z_][a-zA-Z0-9_-]*$")]
    VariableName {
        /// The rejected name.
        name: String,
    },

    /// A user variable name reserved by the contract (prefix, meta-argument or contract input).
    #[error("contract: variable {name:?} is reserved: {why}")]
    VariableReserved {
        /// The rejected name.
        name: String,
        /// Which rule reserves it.
        why: &'static str,
    },

    /// Inputs of one role were handed to the renderer of another.
    #[error("contract: inputs are for role {found}, expected {expected}")]
    RoleMismatch {
        /// The role the caller asked to render.
        expected: Role,
        /// The role the inputs belong to (from the value or from `captf_object.kind`).
        found: Role,
    },

    /// `main.tf.json` + `terraform.tfvars.json` exceed the size cap.
    #[error("contract: rendered inputs are {size} bytes, over the {limit} byte limit")]
    InputsTooLarge {
        /// Combined size of both files.
        size: usize,
        /// The cap ([`crate::MAX_RENDERED_BYTES`]).
        limit: usize,
    },

    /// A value that must hash canonically holds a fractional, exponent-form or
    /// out-of-range number (in practice: the cluster's `exports`).
    #[error("contract: number at {path:?} is not an integer; exports must be canonicalizable")]
    ExportsNotCanonical {
        /// JSON pointer (RFC 6901) of the offending number.
        path: String,
    },

    /// Serializing a typed input struct to JSON failed.
    #[error("contract: encoding inputs")]
    Encode(#[source] serde_json::Error),
}

impl Error {
    /// A bounded, static label for metrics and Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Error::UnknownRole { .. } => "UnknownRole",
            Error::VariablesNotObject => "VariablesNotObject",
            Error::VariablesMalformed { .. } => "VariablesMalformed",
            Error::VariableName { .. } => "VariableName",
            Error::VariableReserved { .. } => "VariableReserved",
            Error::RoleMismatch { .. } => "RoleMismatch",
            Error::InputsTooLarge { .. } => "InputsTooLarge",
            Error::ExportsNotCanonical { .. } => "ExportsNotCanonical",
            Error::Encode(_) => "Encode",
        }
    }
}

/// Crate-wide result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
