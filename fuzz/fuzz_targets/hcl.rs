//! HCL loading: a module file read by `captf lint module` (`captf_lint::lint_module`, whose
//! loader parses `.tf` files with `load::hcl` and `.tf.json` files with `load::json`) for each
//! role and with the role inferred, and the variables schema `captf lint schema` derives from it
//! (`captf_lint::schema::module_label`), which the webhooks must accept.
//!
//! The input is the text of the module's `main.tf` (`main.tf.json` when it starts with `{`).
//! Beside it stands `modules/instance/main.tf`, so a local module call can resolve.

#![no_main]

use std::fs;
use std::path::PathBuf;
use std::sync::OnceLock;

use captf_contract::varschema;
use captf_lint::schema::module_label;
use captf_lint::{Options, Role, infer_role, lint_module};
use libfuzzer_sys::fuzz_target;

const CHILD: &str = r#"variable "tags" {
  type = map(string)
}

resource "null_resource" "instance" {
  triggers = var.tags
}

output "id" {
  value = null_resource.instance.id
}
"#;

fn module_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("captf-fuzz-hcl-")
            .tempdir()
            .expect("a temporary folder")
            .keep();
        fs::create_dir_all(dir.join("modules/instance")).expect("child module");
        fs::write(dir.join("modules/instance/main.tf"), CHILD).expect("child module");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let dir = module_dir();
    let (write, remove) = if text.trim_start().starts_with('{') {
        ("main.tf.json", "main.tf")
    } else {
        ("main.tf", "main.tf.json")
    };
    let _ = fs::remove_file(dir.join(remove));
    fs::write(dir.join(write), text).expect("the module file");

    let inferred = infer_role(dir);
    for role in [
        None,
        Some(Role::Cluster),
        Some(Role::Machine),
        Some(Role::MachinePool),
    ] {
        let opts = Options {
            role,
            ..Options::default()
        };
        let report = lint_module(dir, &opts);
        let _ = (report.to_text(), report.to_json(), report.exit_code(&opts));
        if role.is_none() {
            assert_eq!(
                report.role, inferred,
                "lint infers the role infer_role does"
            );
        }
        // What `captf lint schema` prints, the webhooks read.
        if let Ok(label) = module_label(dir, role) {
            let schema = varschema::parse(&label);
            assert!(schema.is_ok(), "{label}: {schema:?}");
        }
    }
    let _ = captf_lint::types::parse_type_str(text);
});
