//! The inputs hash (`captf.io/inputs-hash`) and the pool approval hash.
//!
//! Value: `h2:` followed by the lowercase hex SHA-256 of a sequence of
//! length-prefixed fields. Each field is written as
//!
//! ```text
//! <label> ":" <decimal byte length of data> ":" <data> "\n"
//! ```
//!
//! in this order:
//!
//! | label       | data                                                                      |
//! |-------------|---------------------------------------------------------------------------|
//! | `scheme`    | `h2`                                                                      |
//! | `contract`  | `v1alpha1`                                                                |
//! | `role`      | `cluster`, `machine` or `machinepool`                                     |
//! | `image`     | `spec.source.image` exactly as written (never the resolved digest)        |
//! | `inputs`    | compact canonical JSON of the role inputs after [`RoleInputs::hash_view`], numbers integers only |
//! | `variables` | only if there is at least one user variable: compact canonical JSON of `{name: value}` |
//! | `sensitive` | only with `variables`: compact canonical JSON array of the sensitive names, sorted (`[]` if none) |
//!
//! Length prefixes make the encoding injective, so no image string or value
//! can shift bytes from one field into another. Objects without variables
//! hash exactly as before variables existed. The approval hash is the same
//! computation over [`RoleInputs::approval_view`].

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::canonical::{Numbers, Style, write};
use crate::error::Result;
use crate::inputs::RoleInputs;
use crate::role::VERSION;
use crate::variables::Variables;

/// Scheme tag, also the value prefix (`h2:`).
pub const HASH_SCHEME: &str = "h2";

/// Hash of everything that, when changed, must re-apply a cluster or pool.
///
/// Fails with [`crate::Error::ExportsNotCanonical`] when `captf_cluster_outputs`
/// holds a fractional or exponent-form number.
pub fn inputs_hash(inputs: &RoleInputs, image: &str, variables: &Variables) -> Result<String> {
    digest(&inputs.hash_view(), image, variables)
}

/// Hash an approval covers: [`inputs_hash`] without `bootstrap_data` (pools only;
/// for the other roles it equals [`inputs_hash`]).
pub fn approval_hash(inputs: &RoleInputs, image: &str, variables: &Variables) -> Result<String> {
    digest(&inputs.approval_view().hash_view(), image, variables)
}

fn digest(view: &RoleInputs, image: &str, variables: &Variables) -> Result<String> {
    let inputs = write(&view.to_value()?, Style::Compact, Numbers::IntegersOnly)?;
    let mut h = Sha256::new();
    field(&mut h, "scheme", HASH_SCHEME.as_bytes());
    field(&mut h, "contract", VERSION.as_bytes());
    field(&mut h, "role", view.role().as_str().as_bytes());
    field(&mut h, "image", image.as_bytes());
    field(&mut h, "inputs", &inputs);
    if !variables.is_empty() {
        let values: Map<String, Value> = variables
            .iter()
            .map(|(k, v)| (k.clone(), v.value.clone()))
            .collect();
        let sensitive: Vec<Value> = variables
            .iter()
            .filter(|(_, v)| v.sensitive)
            .map(|(k, _)| Value::String(k.clone()))
            .collect();
        field(
            &mut h,
            "variables",
            &write(&Value::Object(values), Style::Compact, Numbers::Any)?,
        );
        field(
            &mut h,
            "sensitive",
            &write(&Value::Array(sensitive), Style::Compact, Numbers::Any)?,
        );
    }
    Ok(format!("{HASH_SCHEME}:{}", hex::encode(h.finalize())))
}

fn field(h: &mut Sha256, label: &str, data: &[u8]) {
    h.update(label.as_bytes());
    h.update(b":");
    h.update(data.len().to_string().as_bytes());
    h.update(b":");
    h.update(data);
    h.update(b"\n");
}
