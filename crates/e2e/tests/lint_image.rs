//! `captf lint image` against a real registry (distribution's, with htpasswd authentication):
//! a module image pushed with crane is pulled with the user's auth file, unpacked and linted;
//! from an index the image of the platform asked for is taken (or each one's), and a platform
//! the index lacks is an `image/platform` error; without credentials the command says how to
//! log in; credentials also come from the credential helper the Docker config names.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use captf_e2e::registry::{PASSWORD, TestRegistry, USER};

const LABELS: [(&str, &str); 5] = [
    ("io.captf.role", "machine"),
    ("io.captf.contract", "v1alpha1"),
    ("io.captf.runtime", "tofu"),
    ("io.captf.capacity", r#"{"cpu":"2","memory":"4Gi"}"#),
    (
        "io.captf.node-info",
        r#"{"architecture":"amd64","operatingSystem":"linux"}"#,
    ),
];

/// The root filesystem of a no-op machine image, as one layer tarball.
fn layer(dir: &Path) -> std::path::PathBuf {
    let root = dir.join("root");
    let module = captf_e2e::workspace().join("modules/noop/machine");
    std::fs::create_dir_all(root.join("captf/module")).expect("module folder");
    for entry in std::fs::read_dir(&module).expect("module") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|x| x == "tf") {
            std::fs::copy(
                &path,
                root.join("captf/module")
                    .join(path.file_name().expect("name")),
            )
            .expect("copy");
        }
    }
    std::fs::create_dir_all(root.join("etc")).expect("etc");
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\ncaptf:x:65532:65532::/home/captf:/bin/sh\n",
    )
    .expect("passwd");
    std::fs::create_dir_all(root.join("usr/local/bin")).expect("bin");
    std::fs::write(root.join("usr/local/bin/tofu"), "#!/bin/true\n").expect("runtime");
    let status = Command::new("chmod")
        .args(["-R", "a+rX,go-w"])
        .arg(&root)
        .status()
        .expect("chmod");
    assert!(status.success());
    std::os::unix::fs::symlink("/usr/local/bin/tofu", root.join("captf/runtime")).expect("link");
    std::fs::set_permissions(
        root.join("usr/local/bin/tofu"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod runtime");
    let tarball = dir.join("layer.tar");
    let status = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .args(["--owner=0", "--group=0", "-cf"])
        .arg(&tarball)
        .arg(".")
        .status()
        .expect("tar");
    assert!(status.success());
    tarball
}

/// Pushes the layer as the machine image for `platform` and returns its reference.
fn push(registry: &TestRegistry, tarball: &Path, tag: &str, platform: &str) -> String {
    let reference = format!("{}/modules/machine:{tag}", registry.host);
    registry
        .crane(&[
            "append",
            "-f",
            tarball.to_str().expect("path"),
            "-t",
            &reference,
        ])
        .expect("append");
    let mut args = vec![
        "mutate".to_owned(),
        reference.clone(),
        "--user".into(),
        "65532".into(),
        "--set-platform".into(),
        platform.into(),
    ];
    for (key, value) in LABELS {
        args.extend(["--label".to_owned(), format!("{key}={value}")]);
    }
    args.extend(["-t".to_owned(), reference.clone()]);
    registry
        .crane(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .expect("mutate");
    reference
}

/// `captf lint image --role machine --json ARGS…` with `home` as the only source of
/// credentials; the exit code and the JSON report.
fn lint(home: &Path, args: &[&str]) -> (i32, serde_json::Value, String) {
    lint_with_path(home, std::env::var_os("PATH").unwrap_or_default(), args)
}

/// [`lint`] with `path` as `PATH`, where credential helpers are looked up.
fn lint_with_path(
    home: &Path,
    path: std::ffi::OsString,
    args: &[&str],
) -> (i32, serde_json::Value, String) {
    let out = Command::new(captf_e2e::captf_binary().expect("captf"))
        .args(["lint", "image", "--role", "machine", "--json"])
        .args(args)
        .env("HOME", home)
        .env("PATH", path)
        .env_remove("DOCKER_CONFIG")
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("captf lint image");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap_or(-1), report, stdout)
}

/// The command succeeded and named the image it pulled by its digest.
fn linted(code: i32, report: &serde_json::Value, out: &str, image: &str) {
    assert_eq!(code, 0, "{out}");
    assert!(
        report["module"]
            .as_str()
            .is_some_and(|m| m.starts_with(&format!("{image}@sha256:"))),
        "{out}"
    );
}

#[tokio::test]
async fn a_module_image_in_a_registry_is_pulled_and_linted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let registry = TestRegistry::start_in(tmp.path(), "lint")
        .await
        .expect("registry");
    let tarball = layer(tmp.path());
    let amd64 = push(&registry, &tarball, "amd64", "linux/amd64");
    let arm64 = push(&registry, &tarball, "arm64", "linux/arm64");
    let index = format!("{}/modules/machine:multi", registry.host);
    registry
        .crane(&["index", "append", "-m", &amd64, "-m", &arm64, "-t", &index])
        .expect("index");
    let arm64_digest = registry
        .crane(&["digest", &arm64])
        .expect("digest")
        .trim()
        .to_owned();

    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join(".docker")).expect("home");
    std::fs::write(home.join(".docker/config.json"), registry.docker_config()).expect("auth");

    let (code, report, out) = lint(&home, &[&amd64]);
    linted(code, &report, &out, &amd64);

    // From the index, the image of the platform asked for.
    let (code, report, out) = lint(&home, &["--platform", "linux/arm64", &index]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        report["module"].as_str(),
        Some(format!("{index}@{arm64_digest}").as_str()),
        "{out}"
    );
    let (code, _, out) = lint(&home, &["--platform", "linux/s390x", &index]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("image/platform") && out.contains("linux/amd64, linux/arm64"),
        "{out}"
    );

    // Every platform of the index, one report each.
    let (code, reports, out) = lint(&home, &["--all-platforms", &index]);
    assert_eq!(code, 0, "{out}");
    let modules: Vec<&str> = reports
        .as_array()
        .expect("a report per platform")
        .iter()
        .filter_map(|r| r["module"].as_str())
        .collect();
    assert_eq!(modules.len(), 2, "{out}");
    assert!(
        modules.contains(&format!("{index}@{arm64_digest}").as_str()),
        "{out}"
    );

    // Without credentials.
    let nobody = tmp.path().join("nobody");
    std::fs::create_dir_all(&nobody).expect("home");
    let (code, _, out) = lint(&nobody, &[&amd64]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("log in"), "{out}");

    // From the credential helper the Docker config names (`credsStore`), asked for the
    // registry's host on its standard input, as Docker asks it.
    let helped = tmp.path().join("helped");
    std::fs::create_dir_all(helped.join(".docker")).expect("home");
    let config = helped.join(".docker/config.json");
    std::fs::write(&config, r#"{"credsStore": "e2e"}"#).expect("config");
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let helper = bin.join("docker-credential-e2e");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\nread server\nif [ \"$1\" = get ] && [ \"$server\" = '{host}' ]; then\n  echo '{{\"ServerURL\":\"{host}\",\"Username\":\"{USER}\",\"Secret\":\"{PASSWORD}\"}}'\nelse\n  echo 'credentials not found in native keychain'; exit 1\nfi\n",
            host = registry.host
        ),
    )
    .expect("helper");
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let (code, report, out) = lint_with_path(&helped, path.clone(), &[&amd64]);
    linted(code, &report, &out, &amd64);

    // A helper that is not installed is named, with the file that names it.
    std::fs::write(&config, r#"{"credsStore": "absent"}"#).expect("config");
    let (code, _, out) = lint_with_path(&helped, path, &[&amd64]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("the credential helper docker-credential-absent (credsStore) is not on PATH")
            && out.contains(".docker/config.json"),
        "{out}"
    );
}
