//! The generated root module and tfvars (api.md §2.3, §2.2.10).
//!
//! Both files are pretty canonical JSON (see [`crate::canonical`]): keys sorted
//! at every level, so bytes depend only on the values. Contract inputs and user
//! variables share the top-level tfvars object; user variable names are
//! validated here too, so a name can never shadow a contract input.

use serde_json::{Map, Value, json};

use crate::canonical::canonical_json_pretty;
use crate::error::{Error, Result};
use crate::hash::inputs_hash;
use crate::inputs::RoleInputs;
use crate::outputs::required_outputs;
use crate::role::Role;
use crate::spec::input_specs;
use crate::variables::{Variables, validate_variable_name};

/// Module `source` of the role call, relative to the root dir (`/captf/module`).
pub const MODULE_SOURCE: &str = "../../module";
/// Name of the module block in the generated root.
pub const MODULE_NAME: &str = "role";
/// File name of the generated root.
pub const MAIN_TF_FILE: &str = "main.tf.json";
/// File name of the variable values.
pub const TFVARS_FILE: &str = "terraform.tfvars.json";
/// Cap on `main.tf.json` + `terraform.tfvars.json` (both must fit one Secret).
pub const MAX_RENDERED_BYTES: usize = 1_000_000;

/// Both rendered files and the inputs hash they correspond to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// Bytes of `main.tf.json`.
    pub main_tf_json: Vec<u8>,
    /// Bytes of `terraform.tfvars.json` (cleartext, includes sensitive values).
    pub tfvars_json: Vec<u8>,
    /// `h2:<hex>` (see [`crate::hash`]).
    pub inputs_hash: String,
}

impl Rendered {
    /// Combined size counted against [`MAX_RENDERED_BYTES`].
    pub fn size(&self) -> usize {
        self.main_tf_json.len() + self.tfvars_json.len()
    }
}

/// The root output saying whether the module's `exports` output is sensitive, which the
/// sensitive re-export hides. Not in the rendered root: `issensitive()` exists only from
/// Terraform 1.8 and OpenTofu 1.7, and modules written for the original run on Terraform 1.5,
/// so the runner adds [`exports_sensitive_root`] next to it when its engine has the function. A
/// state without this output does not say whether its exports are sensitive.
pub const EXPORTS_SENSITIVE_OUTPUT: &str = "captf_exports_sensitive";

/// The file the runner adds to a root that re-exports `exports`.
pub const EXPORTS_SENSITIVE_FILE: &str = "captf_exports_sensitive.tf.json";

/// The contents of [`EXPORTS_SENSITIVE_FILE`]: the [`EXPORTS_SENSITIVE_OUTPUT`] output.
pub fn exports_sensitive_root() -> Vec<u8> {
    canonical_json_pretty(&json!({"output": {EXPORTS_SENSITIVE_OUTPUT: {
        "value": format!("${{issensitive(module.{MODULE_NAME}.exports)}}"),
    }}}))
}

/// Renders the root module, tfvars and inputs hash for `role`.
///
/// `image` is `spec.source.image` as written. Fails when the inputs belong to
/// another role (by variant or `captf_object.kind`), a variable name is
/// invalid or reserved, exports are not canonicalizable, or the files exceed
/// [`MAX_RENDERED_BYTES`].
pub fn render(
    role: Role,
    image: &str,
    inputs: &RoleInputs,
    variables: &Variables,
) -> Result<Rendered> {
    let found = inputs.role();
    if found != role {
        return Err(Error::RoleMismatch {
            expected: role,
            found,
        });
    }
    if let Some(kind_role) = Role::from_kind(&inputs.common().object.kind)
        && kind_role != role
    {
        return Err(Error::RoleMismatch {
            expected: role,
            found: kind_role,
        });
    }
    for name in variables.keys() {
        validate_variable_name(role, name)?;
    }

    let mut tfvars = match inputs.to_value()? {
        Value::Object(map) => map,
        // Every input type is a struct; anything else is a serializer bug.
        _ => {
            return Err(Error::Encode(serde::ser::Error::custom(
                "role inputs did not encode to a JSON object",
            )));
        }
    };
    for (name, var) in variables {
        tfvars.insert(name.clone(), var.value.clone());
    }

    let rendered = Rendered {
        main_tf_json: canonical_json_pretty(&root(role, variables)),
        tfvars_json: canonical_json_pretty(&Value::Object(tfvars)),
        inputs_hash: inputs_hash(inputs, image, variables)?,
    };
    let size = rendered.size();
    if size > MAX_RENDERED_BYTES {
        return Err(Error::InputsTooLarge {
            size,
            limit: MAX_RENDERED_BYTES,
        });
    }
    Ok(rendered)
}

/// The restore Job's root: only the (partial) kubernetes backend.
pub fn render_restore_root() -> Vec<u8> {
    canonical_json_pretty(&backend())
}

fn backend() -> Value {
    json!({"terraform": terraform_block()})
}

/// Partial backend: `init -backend-config` completes it.
fn terraform_block() -> Value {
    json!({"backend": {"kubernetes": {}}})
}

fn root(role: Role, variables: &Variables) -> Value {
    let mut declared = Map::new();
    let mut module = Map::new();
    module.insert("source".into(), Value::from(MODULE_SOURCE));

    for spec in input_specs(role) {
        let mut decl = Map::new();
        decl.insert("type".into(), Value::from(spec.type_expr));
        if spec.nullable {
            decl.insert("default".into(), Value::Null);
        }
        if spec.sensitive {
            decl.insert("sensitive".into(), Value::Bool(true));
        }
        declared.insert(spec.name.to_owned(), Value::Object(decl));
        module.insert(spec.name.to_owned(), forward(spec.name));
    }
    // No type: the module's own declaration converts the value (e.g. "40" → number).
    for (name, var) in variables {
        let decl = if var.sensitive {
            json!({"sensitive": true})
        } else {
            json!({})
        };
        declared.insert(name.clone(), decl);
        module.insert(name.clone(), forward(name));
    }

    // Every re-export is sensitive: a module may mark any output sensitive and a
    // non-sensitive root output referencing it would fail plan.
    let outputs: Map<String, Value> = required_outputs(role)
        .iter()
        .map(|name| {
            (
                (*name).to_owned(),
                json!({"value": format!("${{module.{MODULE_NAME}.{name}}}"), "sensitive": true}),
            )
        })
        .collect();

    let mut root = Map::new();
    root.insert("terraform".into(), terraform_block());
    root.insert("variable".into(), Value::Object(declared));
    root.insert(
        "module".into(),
        Value::Object(Map::from_iter([(
            MODULE_NAME.to_owned(),
            Value::Object(module),
        )])),
    );
    root.insert("output".into(), Value::Object(outputs));
    Value::Object(root)
}

fn forward(name: &str) -> Value {
    Value::String(format!("${{var.{name}}}"))
}
