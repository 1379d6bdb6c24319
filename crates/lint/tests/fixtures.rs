//! Fixture tests: one folder per module rule that fails exactly that rule,
//! good modules (including the no-op reference modules) that lint clean, and
//! golden text/JSON reports (`UPDATE_GOLDEN=1` rewrites them).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use captf_lint::{
    EXIT_FINDINGS, EXIT_OK, EXIT_UNPARSABLE, EXIT_USAGE, Options, RULES, Role, Severity, Status,
    lint_module,
};

const FIXTURES: &str = "tests/fixtures";

fn role_of(dir: &Path) -> Role {
    let text = fs::read_to_string(dir.join("role")).expect("fixture has a role file");
    Role::from_str(text.trim()).expect("valid role")
}

fn opts(role: Role) -> Options {
    Options {
        role: Some(role),
        ..Options::default()
    }
}

/// Every fixture directory (those holding a `role` file), relative to the crate.
fn fixture_dirs() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        if dir.join("role").is_file() {
            out.push(dir.to_path_buf());
            return;
        }
        let mut entries: Vec<_> = fs::read_dir(dir)
            .expect("readable fixtures")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.is_dir())
            .collect();
        entries.sort();
        for e in entries {
            walk(&e, out);
        }
    }
    let mut out = Vec::new();
    walk(Path::new(FIXTURES), &mut out);
    out
}

#[test]
fn every_module_rule_has_a_fixture_failing_exactly_that_rule() {
    let module_rules: Vec<_> = RULES.iter().filter(|r| r.module).collect();
    assert_eq!(module_rules.len(), 20);
    for rule in module_rules {
        let dir = Path::new(FIXTURES).join(rule.id);
        assert!(dir.is_dir(), "missing fixture {}", dir.display());
        let report = lint_module(&dir, &opts(role_of(&dir)));
        assert_eq!(report.status, Status::Checked, "{}", rule.id);
        assert_eq!(
            report.ids(),
            BTreeSet::from([rule.id]),
            "{}:\n{}",
            rule.id,
            report.to_text()
        );
        assert!(
            report.findings.iter().all(|f| f.severity == rule.severity),
            "{} severity:\n{}",
            rule.id,
            report.to_text()
        );
    }
}

#[test]
fn good_fixtures_lint_clean() {
    for name in ["cluster", "machine", "machine-tofu-only", "machinepool"] {
        let dir = Path::new(FIXTURES).join("good").join(name);
        let report = lint_module(&dir, &opts(role_of(&dir)));
        assert!(report.findings.is_empty(), "{name}:\n{}", report.to_text());
        assert_eq!(report.exit_code(&Options::default()), EXIT_OK);
    }
}

#[test]
fn noop_modules_lint_clean_for_their_roles() {
    for role in Role::ALL {
        let dir = Path::new("../../modules/noop").join(role.as_str());
        let o = Options {
            strict: true,
            ..opts(role)
        };
        let report = lint_module(&dir, &o);
        assert_eq!(report.status, Status::Checked);
        assert_eq!(report.count(Severity::Error), 0, "{}", report.to_text());
        assert_eq!(report.count(Severity::Warning), 0, "{}", report.to_text());
        assert_eq!(report.exit_code(&o), EXIT_OK);
        // The role is also inferred correctly.
        assert_eq!(captf_lint::infer_role(&dir), Some(role));
        // And they fail for any other role.
        for other in Role::ALL.into_iter().filter(|r| *r != role) {
            let r = lint_module(&dir, &opts(other));
            assert_eq!(
                r.exit_code(&opts(other)),
                EXIT_FINDINGS,
                "{role} as {other}"
            );
        }
    }
}

#[test]
fn golden_reports() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut failures = Vec::new();
    for dir in fixture_dirs() {
        let report = lint_module(&dir, &opts(role_of(&dir)));
        for (file, actual) in [
            ("expected.txt", report.to_text()),
            ("expected.json", report.to_json()),
        ] {
            let path = dir.join(file);
            if update {
                fs::write(&path, &actual).expect("write golden");
                continue;
            }
            let expected = fs::read_to_string(&path).unwrap_or_default();
            if expected != actual {
                failures.push(format!(
                    "{}:\n--- expected\n{expected}--- actual\n{actual}",
                    path.display()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "golden mismatch (UPDATE_GOLDEN=1 to rewrite):\n{}",
        failures.join("\n")
    );
}

#[test]
fn json_report_shape() {
    let dir = Path::new(FIXTURES).join("output/required");
    let report = lint_module(&dir, &opts(Role::Machine));
    let v: serde_json::Value = serde_json::from_str(&report.to_json()).expect("valid JSON");
    assert_eq!(v["contract"], "v1alpha1");
    assert_eq!(v["role"], "machine");
    assert_eq!(v["module"], "tests/fixtures/output/required");
    assert_eq!(
        v["findings"][0],
        serde_json::json!({
            "id": "output/required", "severity": "error", "file": "", "line": 0,
            "message": "contract output interruptible is not declared; declare it (its value may be null while unknown)"
        })
    );
    assert_eq!(
        v["summary"],
        serde_json::json!({"error": 1, "warning": 0, "info": 0})
    );
    assert!(v.get("error").is_none());
}

#[test]
fn exit_codes() {
    let warn_dir = Path::new(FIXTURES).join("input/default");
    let base = opts(Role::Machine);
    assert_eq!(lint_module(&warn_dir, &base).exit_code(&base), EXIT_OK);

    let strict = Options {
        strict: true,
        ..base.clone()
    };
    assert_eq!(
        lint_module(&warn_dir, &strict).exit_code(&strict),
        EXIT_FINDINGS
    );

    // An allowed warning becomes info and no longer fails under --strict.
    let allowed = strict
        .clone()
        .allow_warning("input/sensitive, input/default");
    let report = lint_module(&warn_dir, &allowed);
    assert_eq!(report.count(Severity::Info), 1);
    assert!(report.findings[0].message.ends_with("(allowed warning)"));
    assert_eq!(report.exit_code(&allowed), EXIT_OK);

    // Errors cannot be allowed.
    let err_dir = Path::new(FIXTURES).join("input/type");
    let allowed = base.clone().allow_warning("input/type");
    assert_eq!(
        lint_module(&err_dir, &allowed).exit_code(&allowed),
        EXIT_FINDINGS
    );

    // Info never fails.
    let info_dir = Path::new(FIXTURES).join("module/version");
    assert_eq!(lint_module(&info_dir, &strict).exit_code(&strict), EXIT_OK);

    // Unparsable and unreadable modules.
    let bad = Path::new(FIXTURES).join("cases/unparsable");
    assert_eq!(lint_module(&bad, &base).exit_code(&base), EXIT_UNPARSABLE);
    let missing = Path::new(FIXTURES).join("does-not-exist");
    assert_eq!(
        lint_module(&missing, &base).exit_code(&base),
        EXIT_UNPARSABLE
    );
    let empty = tempfile::tempdir().expect("tempdir");
    assert_eq!(
        lint_module(empty.path(), &base).exit_code(&base),
        EXIT_UNPARSABLE
    );

    // Usage: unknown contract; role neither given nor inferable.
    let v2 = Options {
        contract: "v2".to_owned(),
        ..base.clone()
    };
    let report = lint_module(&warn_dir, &v2);
    assert!(matches!(report.status, Status::Usage(_)));
    assert_eq!(report.exit_code(&v2), EXIT_USAGE);
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join("main.tf"), "locals {}\n").expect("write");
    assert_eq!(
        lint_module(dir.path(), &Options::default()).exit_code(&Options::default()),
        EXIT_USAGE
    );
}

#[test]
fn role_is_inferred_when_not_given() {
    for (dir, role) in [
        ("good/cluster", Role::Cluster),
        ("good/machine", Role::Machine),
        ("good/machinepool", Role::MachinePool),
    ] {
        let report = lint_module(&Path::new(FIXTURES).join(dir), &Options::default());
        assert_eq!(report.role, Some(role));
        assert!(report.findings.is_empty());
    }
}

#[cfg(unix)]
#[test]
fn symlinks_out_of_the_root_are_source_escapes() {
    let outside = tempfile::tempdir().expect("tempdir");
    fs::write(outside.path().join("extra.tf"), "locals {}\n").expect("write");
    fs::create_dir(outside.path().join("mod")).expect("mkdir");
    fs::write(outside.path().join("mod/main.tf"), "variable \"x\" {}\n").expect("write");

    let root = tempfile::tempdir().expect("tempdir");
    for entry in fs::read_dir(Path::new(FIXTURES).join("good/machine")).expect("read") {
        let p = entry.expect("entry").path();
        if p.extension().is_some_and(|e| e == "tf") {
            fs::copy(&p, root.path().join(p.file_name().expect("name"))).expect("copy");
        }
    }
    std::os::unix::fs::symlink(
        outside.path().join("extra.tf"),
        root.path().join("extra.tf"),
    )
    .expect("symlink");
    std::os::unix::fs::symlink(outside.path().join("mod"), root.path().join("mod"))
        .expect("symlink");
    fs::write(
        root.path().join("net.tf"),
        "module \"net\" {\n  source = \"./mod\"\n}\n",
    )
    .expect("write");

    let report = lint_module(root.path(), &opts(Role::Machine));
    assert_eq!(
        report.ids(),
        BTreeSet::from(["module/source-escape"]),
        "{}",
        report.to_text()
    );
    let files: BTreeSet<_> = report.findings.iter().map(|f| f.file.as_str()).collect();
    assert_eq!(files, BTreeSet::from(["extra.tf", "net.tf"]));
}
