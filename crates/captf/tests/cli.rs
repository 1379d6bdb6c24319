//! The `captf` command line: subcommands, output and exit codes, run as a real process.

use std::process::Command;

fn captf(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_captf"))
        .args(args)
        .output()
        .expect("captf runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn module(role: &str) -> String {
    format!("{}/../../modules/noop/{role}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn version_names_the_api_the_commit_and_the_contracts() {
    let (code, out, _) = captf(&["version"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("api infrastructure.cluster.x-k8s.io/v1alpha1"),
        "{out}"
    );
    assert!(out.contains("contract v1alpha1"), "{out}");
    for args in [&["version", "--json"][..], &["lint", "version", "--json"]] {
        let (code, out, err) = captf(args);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(v["contract"], serde_json::json!(["v1alpha1"]), "{out}");
        assert_eq!(v["version"], env!("CARGO_PKG_VERSION"), "{out}");
        // Built from a checkout, the binary names its commit.
        let head = std::process::Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
        if let Some(head) = head {
            assert_eq!(v["commit"], head, "{out}");
            assert!(v["date"].as_str().is_some_and(|d| d.len() >= 20), "{out}");
        }
    }
}

#[test]
fn crds_prints_seven_parseable_documents() {
    let (code, out, _) = captf(&["crds"]);
    assert_eq!(code, 0);
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&out)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML document"))
        .collect();
    assert_eq!(docs.len(), 7);
    assert!(docs.iter().all(|d| d["kind"] == "CustomResourceDefinition"));
}

#[test]
fn lint_exit_codes() {
    for role in ["cluster", "machine", "machinepool"] {
        let (code, out, _) = captf(&["lint", "module", &module(role), "--strict"]);
        assert_eq!(code, 0, "{role}: {out}");
    }
    let (code, _, err) = captf(&["lint", "module", &module("cluster"), "--role", "bogus"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("--role"), "{err}");
    assert_eq!(captf(&["lint", "module", "--no-such-flag", "x"]).0, 3);
    assert_eq!(captf(&["lint", "module", "/nonexistent/module"]).0, 2);
    // A cluster module linted as a machine breaks the contract.
    let (code, out, _) = captf(&[
        "lint",
        "module",
        &module("cluster"),
        "--role",
        "machine",
        "--json",
    ]);
    assert_eq!(code, 1, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
    assert!(report["summary"]["error"].as_u64().is_some_and(|n| n > 0));
}

#[test]
fn lint_image_exit_codes() {
    // Without --role, or with a bogus one: usage.
    assert_eq!(captf(&["lint", "image", "oci:/nonexistent"]).0, 3);
    let (code, _, err) = captf(&["lint", "image", "--role", "bogus", "oci:/x"]);
    assert_eq!(code, 3, "{err}");
    // Not an image layout: not extractable.
    let (code, out, _) = captf(&["lint", "image", "--role", "machine", "oci:/nonexistent"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("/nonexistent"), "{out}");
    // A reference that is not one is a usage error; a registry nobody serves is unreachable.
    let (code, _, err) = captf(&["lint", "image", "--role", "machine", "Not A Reference"]);
    assert_eq!(code, 3, "{err}");
    let (code, out, _) = captf(&[
        "lint",
        "image",
        "--role",
        "machine",
        "--json",
        "127.0.0.1:1/module:v1",
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("127.0.0.1:1"), "{out}");
}

#[test]
fn lint_schema_prints_the_label_of_the_user_variables() {
    for role in ["cluster", "machine", "machinepool"] {
        let (code, out, err) = captf(&["lint", "schema", &module(role)]);
        assert_eq!(code, 0, "{role}: {err}");
        assert_eq!(out.lines().count(), 1, "one line: {out}");
        let schema = captf_contract::varschema::parse(out.trim()).expect("a variables schema");
        assert_eq!(
            schema.properties.get("sleep_seconds").and_then(|s| s.kind),
            Some(captf_contract::varschema::Type::Number),
            "{role}: {out}"
        );
        // The manager's inputs are not the user's to set.
        assert!(
            schema.properties.keys().all(|k| !k.starts_with("captf_")),
            "{role}: {out}"
        );
    }
    let (code, out, err) = captf(&["lint", "schema", &module("cluster"), "--role", "bogus"]);
    assert_eq!((code, out.as_str()), (3, ""), "{err}");
    assert_eq!(captf(&["lint", "schema", "/nonexistent/module"]).0, 2);
}

#[test]
fn manager_refuses_bad_flags_naming_each() {
    let (code, _, err) = captf(&["manager", "--state-backups=-1", "--runner-image="]);
    assert_eq!(code, 1);
    assert!(err.contains("manager: invalid flags:"), "{err}");
    assert!(
        err.contains("--runner-image is empty") && err.contains("--state-backups"),
        "{err}"
    );
}

#[test]
fn invoked_as_runner_it_is_the_runner() {
    let dir = std::env::temp_dir().join(format!("captf-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let runner = dir.join("runner");
    std::fs::copy(env!("CARGO_BIN_EXE_captf"), &runner).expect("copy");
    let out = Command::new(&runner)
        .arg("version")
        .output()
        .expect("runner runs");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("runner"));
    let _ = std::fs::remove_dir_all(dir);
}
