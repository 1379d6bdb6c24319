//! Image checks on unpacked image roots built in temporary directories.

#![cfg(unix)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use captf_contract::varschema;
use captf_lint::image::{ImageConfig, ImageOptions, lint_image_dir};
use captf_lint::{EXIT_FINDINGS, EXIT_OK, Options, Role, Severity};

fn write(root: &Path, path: &str, text: &str, mode: u32) {
    let p = root.join(path.trim_start_matches('/'));
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs::write(&p, text).expect("write");
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).expect("chmod");
}

fn copy_module(from: &Path, root: &Path) {
    for entry in fs::read_dir(from).expect("read module") {
        let p = entry.expect("entry").path();
        let name = p.file_name().expect("name").to_string_lossy().into_owned();
        if name.ends_with(".tf") {
            let text = fs::read_to_string(&p).expect("read");
            write(root, &format!("/captf/module/{name}"), &text, 0o644);
        }
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn opts(role: Role) -> ImageOptions {
    ImageOptions {
        module: Options {
            role: Some(role),
            ..Options::default()
        },
        ..ImageOptions::default()
    }
}

#[test]
fn noop_machine_image_is_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    copy_module(Path::new("../../modules/noop/machine"), root);
    write(root, "/usr/local/bin/tofu", "#!/bin/true\n", 0o755);
    symlink("/usr/local/bin/tofu", root.join("captf/runtime")).expect("symlink");
    write(
        root,
        "/etc/passwd",
        "root:x:0:0:root:/root:/bin/bash\ncaptf:x:65532:65532::/home/captf:/bin/sh\n",
        0o644,
    );
    fs::create_dir_all(root.join("captf/work")).expect("mkdir");
    let config = ImageConfig {
        user: Some("captf".to_owned()),
        labels: labels(&[
            ("io.captf.role", "machine"),
            ("io.captf.contract", "v1alpha1"),
            ("io.captf.runtime", "tofu"),
            ("io.captf.capacity", r#"{"cpu":"2","memory":"4Gi"}"#),
            (
                "io.captf.node-info",
                r#"{"architecture":"amd64","operatingSystem":"linux"}"#,
            ),
        ]),
        os: Some("linux".to_owned()),
        architecture: Some("amd64".to_owned()),
        ..ImageConfig::default()
    };
    let o = opts(Role::Machine);
    let report = lint_image_dir(root, &config, &o);
    assert_eq!(
        report.ids(),
        BTreeSet::from(["image/providers-absent"]),
        "{}",
        report.to_text()
    );
    assert_eq!(report.exit_code(&o.module), EXIT_OK);
}

#[test]
fn broken_image_reports_each_problem() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    // Module with a provider requirement, a link out of the module and a
    // backend block (module checks run too, paths prefixed).
    write(
        root,
        "/captf/module/main.tf",
        "terraform {\n  backend \"s3\" {}\n  required_providers {\n    aws = { source = \"hashicorp/aws\" }\n  }\n}\n",
        0o600,
    );
    write(root, "/etc/hosts", "127.0.0.1 localhost\n", 0o644);
    symlink("/etc/hosts", root.join("captf/module/hosts.tf")).expect("symlink");
    // Runtime present but not executable; named after terraform.
    write(root, "/usr/bin/terraform", "bin", 0o644);
    symlink("/usr/bin/terraform", root.join("captf/runtime")).expect("symlink");
    // Reserved path with content; /var/run -> /run as on Ubuntu.
    write(root, "/captf/work/leftover", "x", 0o644);
    write(root, "/run/captf/credentials/key", "x", 0o644);
    symlink("/run", root.join("var/run")).unwrap_or_else(|_| {
        fs::create_dir_all(root.join("var")).expect("mkdir");
        symlink("/run", root.join("var/run")).expect("symlink");
    });
    // Mirror: a stray file and no aws package for linux_amd64.
    write(root, "/captf/providers/README", "x", 0o644);
    write(
        root,
        "/captf/providers/registry.opentofu.org/hashicorp/aws/terraform-provider-aws_5.0.0_linux_arm64.zip",
        "zip",
        0o644,
    );
    let config = ImageConfig {
        user: Some("65532".to_owned()),
        labels: labels(&[
            ("io.captf.role", "cluster"),
            ("io.captf.contract", "v0"),
            ("io.captf.runtime", "tofu"),
            ("io.captf.capacity", r#"{"cpu":4}"#),
        ]),
        entrypoint: vec!["/bin/sh".to_owned()],
        os: Some("linux".to_owned()),
        architecture: Some("arm64".to_owned()),
        ..ImageConfig::default()
    };
    let o = opts(Role::Machine);
    let report = lint_image_dir(root, &config, &o);
    let ids = report.ids();
    for id in [
        "image/module-link",
        "image/module-readable",
        "image/runtime-present",
        "image/runtime-version",
        "image/reserved-paths",
        "image/entrypoint",
        "image/platform",
        "image/providers-layout",
        "image/providers-complete",
        "image/label-role",
        "image/label-contract",
        "image/label-capacity",
        "module/backend",
        "input/required",
    ] {
        assert!(ids.contains(id), "missing {id}:\n{}", report.to_text());
    }
    let reserved: BTreeSet<_> = report
        .findings
        .iter()
        .filter(|f| f.id == "image/reserved-paths")
        .map(|f| f.file.as_str())
        .collect();
    assert_eq!(
        reserved,
        BTreeSet::from(["/captf/work", "/var/run/captf/credentials"])
    );
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.id == "module/backend" && f.file == "/captf/module/main.tf")
    );
    assert_eq!(report.exit_code(&o.module), EXIT_FINDINGS);
}

#[test]
fn missing_module_and_runtime_root_user() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = ImageConfig {
        user: Some("ghost".to_owned()),
        ..ImageConfig::default()
    };
    let report = lint_image_dir(tmp.path(), &config, &opts(Role::Cluster));
    let ids = report.ids();
    for id in [
        "image/module-present",
        "image/runtime-present",
        "image/user-unresolved",
        "image/providers-absent",
        "image/label-role",
    ] {
        assert!(ids.contains(id), "missing {id}:\n{}", report.to_text());
    }
    let root_report = lint_image_dir(tmp.path(), &ImageConfig::default(), &opts(Role::Cluster));
    assert!(
        root_report
            .findings
            .iter()
            .any(|f| f.id == "image/user-root" && f.severity == Severity::Warning)
    );
}

#[test]
fn variables_schema_label_must_parse_and_match_the_module() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let module = Path::new("../../modules/noop/machine");
    copy_module(module, root);
    let current = captf_lint::schema::module_schema(module, Some(Role::Machine))
        .expect("the noop module loads");
    let mut stale = current.clone();
    stale.properties.remove("sleep_seconds");
    stale.required.push("drift".to_owned());
    let label_of = |schema| varschema::to_label(schema).expect("small schema");
    let findings = |value: Option<&str>| -> Vec<(Severity, String)> {
        let config = ImageConfig {
            labels: value
                .map(|v| labels(&[(varschema::LABEL, v)]))
                .unwrap_or_default(),
            ..ImageConfig::default()
        };
        lint_image_dir(root, &config, &opts(Role::Machine))
            .findings
            .into_iter()
            .filter(|f| f.id == "image/label-variables-schema")
            .map(|f| (f.severity, f.message))
            .collect()
    };

    assert_eq!(findings(None), []);
    assert_eq!(findings(Some(&label_of(&current))), []);
    // Key order and spacing are not part of the comparison.
    let spaced = serde_json::to_string_pretty(&current).expect("JSON");
    assert_eq!(findings(Some(&spaced)), []);

    let found = findings(Some(&label_of(&stale)));
    assert!(
        matches!(found.as_slice(), [(Severity::Warning, m)]
            if m.contains("(variables drift, sleep_seconds)") && m.contains("captf lint schema")),
        "{found:?}"
    );
    for bad in [
        "not json",
        r#"{"type":"array"}"#,
        r#"{"type":"object","pattern":"x"}"#,
    ] {
        let found = findings(Some(bad));
        assert!(
            matches!(found.as_slice(), [(Severity::Error, m)] if m.contains(varschema::LABEL)),
            "{bad}: {found:?}"
        );
    }
}

/// An unpacker that is not root cannot give the image's files to their owners; the owners it
/// recorded decide what the image user may read.
#[test]
fn recorded_owners_stand_in_for_the_file_system() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    copy_module(Path::new("../../modules/noop/machine"), root);
    let module = root.join("captf/module");
    let mut owners = captf_lint::unpack::Owners::new();
    for entry in fs::read_dir(&module).expect("module") {
        let path = entry.expect("entry").path();
        // Readable by their owner alone: the image user, says the image.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        owners.insert(path, (65532, 65532));
    }
    write(root, "/usr/local/bin/tofu", "#!/bin/true\n", 0o755);
    symlink("/usr/local/bin/tofu", root.join("captf/runtime")).expect("symlink");
    let config = ImageConfig {
        user: Some("65532".to_owned()),
        ..ImageConfig::default()
    };
    let o = opts(Role::Machine);
    let by_the_files = lint_image_dir(root, &config, &o);
    assert!(
        by_the_files.ids().contains("image/module-readable"),
        "the test's files belong to whoever runs it: {}",
        by_the_files.to_text()
    );
    let by_the_image = captf_lint::image::lint_image_dir_with_owners(root, &config, &o, &owners);
    assert!(
        !by_the_image.ids().contains("image/module-readable"),
        "{}",
        by_the_image.to_text()
    );
}
