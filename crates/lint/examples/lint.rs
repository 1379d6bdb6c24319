//! Minimal driver: `cargo run -p captf-lint --example lint -- DIR [ROLE] [--json] [--strict]`.
//! The real CLI is `captf lint module`.

use std::path::PathBuf;
use std::str::FromStr;

use captf_lint::{Options, Role, lint_module};

fn main() {
    let mut opts = Options::default();
    let mut dir = None;
    let mut json = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => json = true,
            "--strict" => opts.strict = true,
            a if dir.is_none() => dir = Some(PathBuf::from(a)),
            a => match Role::from_str(a) {
                Ok(r) => opts.role = Some(r),
                Err(e) => {
                    eprintln!("{e}");
                    std::process::exit(3);
                }
            },
        }
    }
    let Some(dir) = dir else {
        eprintln!("usage: lint DIR [ROLE] [--json] [--strict]");
        std::process::exit(3);
    };
    let report = lint_module(&dir, &opts);
    if json {
        print!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
    std::process::exit(report.exit_code(&opts));
}
