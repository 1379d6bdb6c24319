//! What a denial says: every violation of a request at once, each naming its field, as the API
//! server's own `field.ErrorList` does, so `kubectl` prints them like a schema error.

use std::fmt;

/// How a field is wrong; the `StatusCause.reason` the API server's clients know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A value that must be set is not.
    Required,
    /// The value is wrong (syntax, range, or a change of an immutable field).
    Invalid,
    /// The value may not be set, or not by this user.
    Forbidden,
    /// A list or map has too many entries.
    TooMany,
    /// A value is too large.
    TooLong,
}

impl Problem {
    /// The `StatusCause.reason`.
    pub fn cause(self) -> &'static str {
        match self {
            Problem::Required => "FieldValueRequired",
            Problem::Invalid => "FieldValueInvalid",
            Problem::Forbidden => "FieldValueForbidden",
            Problem::TooMany => "FieldValueTooMany",
            Problem::TooLong => "FieldValueTooLong",
        }
    }

    /// The words the API server puts between the field and the detail.
    fn words(self) -> &'static str {
        match self {
            Problem::Required => "Required value",
            Problem::Invalid => "Invalid value",
            Problem::Forbidden => "Forbidden",
            Problem::TooMany => "Too many",
            Problem::TooLong => "Too long",
        }
    }
}

/// One wrong field: the path (`spec.jobs.env[2].name`, empty for the object as a whole), how
/// it is wrong, and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub field: String,
    pub problem: Problem,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        write!(f, "{}: {}", self.problem.words(), self.detail)
    }
}

/// The violations found so far, in the order the rules found them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Violations(Vec<Violation>);

impl Violations {
    pub fn push(&mut self, field: impl Into<String>, problem: Problem, detail: impl Into<String>) {
        self.0.push(Violation {
            field: field.into(),
            problem,
            detail: detail.into(),
        });
    }

    pub fn required(&mut self, field: impl Into<String>, detail: impl Into<String>) {
        self.push(field, Problem::Required, detail);
    }

    pub fn invalid(&mut self, field: impl Into<String>, detail: impl Into<String>) {
        self.push(field, Problem::Invalid, detail);
    }

    pub fn forbidden(&mut self, field: impl Into<String>, detail: impl Into<String>) {
        self.push(field, Problem::Forbidden, detail);
    }

    /// `field` may not change once the object exists.
    pub fn immutable(&mut self, field: impl Into<String>, what_to_do: &str) {
        self.invalid(field, format!("the field is immutable; {what_to_do}"));
    }

    /// These violations, then `later`'s.
    pub fn then(mut self, later: Violations) -> Violations {
        self.0.extend(later.0);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Violation> {
        self.0.iter()
    }

    pub fn into_vec(self) -> Vec<Violation> {
        self.0
    }

    /// The denial's message: `<Kind> "<name>" is invalid: <violation>` (a bracketed list when
    /// there are several), as the API server words a schema error.
    pub fn message(&self, kind: &str, name: &str) -> String {
        let list: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        let list = match list.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        format!("{kind}.infrastructure.cluster.x-k8s.io {name:?} is invalid: {list}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_like_the_api_servers() {
        let mut v = Violations::default();
        v.required("spec.secretRef.name", "name the credentials Secret");
        assert_eq!(
            v.message("TerraformClusterIdentity", "aws"),
            "TerraformClusterIdentity.infrastructure.cluster.x-k8s.io \"aws\" is invalid: spec.secretRef.name: Required value: name the credentials Secret"
        );
        v.immutable("spec.source", "create a new object instead");
        assert_eq!(
            v.message("TerraformMachine", "m"),
            "TerraformMachine.infrastructure.cluster.x-k8s.io \"m\" is invalid: [spec.secretRef.name: Required value: name the credentials Secret, spec.source: Invalid value: the field is immutable; create a new object instead]"
        );
        assert_eq!(
            v.iter().map(|v| v.problem.cause()).collect::<Vec<_>>(),
            ["FieldValueRequired", "FieldValueInvalid"]
        );
        let mut whole = Violations::default();
        whole.push("", Problem::TooLong, "the object is 2 bytes");
        assert_eq!(
            whole.message("TerraformCluster", "c"),
            "TerraformCluster.infrastructure.cluster.x-k8s.io \"c\" is invalid: Too long: the object is 2 bytes"
        );
    }
}
