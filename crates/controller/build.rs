//! The commit the binary is built from and that commit's date, for `captf_build_info` and
//! `captf version`: `$CAPTF_COMMIT` / `$CAPTF_DATE` when the build sets them (the
//! Dockerfile's build arguments: its context has no `.git`), else what git says of the source
//! tree, else `unknown`.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CAPTF_COMMIT");
    println!("cargo:rerun-if-env-changed=CAPTF_DATE");
    let given = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let commit = given("CAPTF_COMMIT").or_else(|| git(&["rev-parse", "HEAD"]));
    let date = given("CAPTF_DATE").or_else(|| git(&["log", "-1", "--format=%cI"]));
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        // A new commit or a checkout moves HEAD or the branch it names.
        let dir = Path::new(&dir);
        println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
        if let Ok(head) = std::fs::read_to_string(dir.join("HEAD"))
            && let Some(branch) = head.trim().strip_prefix("ref: ")
        {
            println!("cargo:rerun-if-changed={}", dir.join(branch).display());
        }
        println!(
            "cargo:rerun-if-changed={}",
            dir.join("packed-refs").display()
        );
    }
    let unknown = || "unknown".to_owned();
    println!(
        "cargo:rustc-env=CAPTF_COMMIT={}",
        commit.unwrap_or_else(unknown)
    );
    println!(
        "cargo:rustc-env=CAPTF_DATE={}",
        date.unwrap_or_else(unknown)
    );
}

/// What git prints for `args` in the source tree, when git and a repository are there.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(std::env::var_os("CARGO_MANIFEST_DIR")?)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    String::from_utf8(out.stdout)
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}
