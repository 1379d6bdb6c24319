//! Before the first engine step (api.md §4.4 steps 3–7, concepts §21): the image preflight, the
//! working copy of the config, the step environment, the provider-mirror CLI config, the restore
//! backup, the plan key, and the secrets the redactor learns from the config.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use captf_contract::render::{MAIN_TF_FILE, TFVARS_FILE};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::plan::MIN_PLAN_KEY_BYTES;
use crate::redact::Redactor;

/// The root module's folder under the workdir.
pub const ROOT_DIR: &str = "root";
/// The engine's data dir under the workdir (`TF_DATA_DIR`).
pub const DATA_DIR: &str = ".terraform";
/// The CLI config written when the image ships a provider mirror.
pub const CLI_CONFIG_FILE: &str = "cli.tfrc";
/// Module file endings the preflight accepts.
pub const MODULE_SUFFIXES: [&str; 4] = [".tf", ".tf.json", ".tofu", ".tofu.json"];
/// `TF_*` / `KUBE_*` variables that survive into the step environment.
pub const KEPT_ENGINE_VARS: [&str; 3] = ["TF_IN_AUTOMATION", "TF_INPUT", "KUBE_NAMESPACE"];
/// Most backup chunks a restore accepts.
pub const MAX_RESTORE_CHUNKS: usize = 32;
/// Cap on the decompressed restore state.
pub const MAX_RESTORE_BYTES: u64 = 64 * 1024 * 1024;
/// Cap on one credentials file read for redaction.
const MAX_CREDENTIAL_FILE: u64 = 1024 * 1024;

/// Checks the image contract: the module dir holds at least one module file at its top level,
/// and the runtime command exists and is executable (or resolves on `path`).
pub fn preflight(module: &Path, bin: &[String], path: Option<&str>) -> Result<()> {
    let entries = std::fs::read_dir(module).map_err(|e| {
        Error::ImageLayout(format!(
            "module dir {} is not readable: {e}",
            module.display()
        ))
    })?;
    let has_module_file = entries.filter_map(|e| e.ok()).any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        MODULE_SUFFIXES.iter().any(|s| name.ends_with(s))
            && e.file_type().is_ok_and(|t| !t.is_dir())
    });
    if !has_module_file {
        return Err(Error::ImageLayout(format!(
            "module dir {} has no .tf, .tf.json, .tofu or .tofu.json file",
            module.display()
        )));
    }
    let program = bin.first().map(String::as_str).unwrap_or("");
    if program.is_empty() {
        return Err(Error::ImageLayout("the runtime command is empty".into()));
    }
    if program.contains('/') {
        return check_executable(Path::new(program));
    }
    let found = path
        .unwrap_or("")
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .any(|p| check_executable(&p).is_ok());
    if found {
        Ok(())
    } else {
        Err(Error::ImageLayout(format!(
            "runtime {program} is not on PATH"
        )))
    }
}

fn check_executable(path: &Path) -> Result<()> {
    let meta = std::fs::metadata(path).map_err(|e| {
        Error::ImageLayout(format!("runtime {} does not exist: {e}", path.display()))
    })?;
    if meta.is_dir() {
        return Err(Error::ImageLayout(format!(
            "runtime {} is a directory",
            path.display()
        )));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(Error::ImageLayout(format!(
            "runtime {} is not executable",
            path.display()
        )));
    }
    Ok(())
}

/// The environment of every engine step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepEnv {
    /// Variables in order.
    pub vars: Vec<(String, String)>,
    /// Names dropped (`HOME`, `TF_*`, `KUBE_*`); logged, never their values.
    pub dropped: Vec<String>,
    /// The `TMPDIR` the runner added (to be created), when none was set.
    pub tmp_dir: Option<PathBuf>,
}

/// The step environment built from the runner's own (pure): drops `HOME` and every `TF_*` and
/// `KUBE_*` variable except [`KEPT_ENGINE_VARS`]; adds `TF_DATA_DIR=<workdir>/.terraform`,
/// `HOME=<workdir>`, `TMPDIR=<workdir>/tmp` when unset, and `TF_CLI_CONFIG_FILE` when
/// `cli_config` is given.
pub fn step_env(
    env: impl IntoIterator<Item = (String, String)>,
    workdir: &Path,
    cli_config: Option<&Path>,
) -> StepEnv {
    let mut vars = Vec::new();
    let mut dropped = Vec::new();
    for (k, v) in env {
        let engine_var = k.starts_with("TF_") || k.starts_with("KUBE_");
        if k == "HOME" || (engine_var && !KEPT_ENGINE_VARS.contains(&k.as_str())) {
            dropped.push(k);
        } else {
            vars.push((k, v));
        }
    }
    let mut tmp_dir = None;
    vars.push((
        "TF_DATA_DIR".into(),
        workdir.join(DATA_DIR).display().to_string(),
    ));
    vars.push(("HOME".into(), workdir.display().to_string()));
    if !vars.iter().any(|(k, v)| k == "TMPDIR" && !v.is_empty()) {
        vars.retain(|(k, _)| k != "TMPDIR");
        let tmp = workdir.join("tmp");
        vars.push(("TMPDIR".into(), tmp.display().to_string()));
        tmp_dir = Some(tmp);
    }
    if let Some(c) = cli_config {
        vars.push(("TF_CLI_CONFIG_FILE".into(), c.display().to_string()));
    }
    StepEnv {
        vars,
        dropped,
        tmp_dir,
    }
}

/// The CLI config that makes the engine install providers only from the image's mirror
/// (three-segment pattern so every registry host matches; no direct installation).
pub fn cli_config(providers: &Path) -> String {
    let path = serde_json::to_string(&providers.display().to_string())
        .unwrap_or_else(|_| "\"/captf/providers\"".into());
    format!(
        "provider_installation {{\n  filesystem_mirror {{\n    path    = {path}\n    include = [\"*/*/*\"]\n  }}\n  direct {{\n    exclude = [\"*/*/*\"]\n  }}\n}}\n"
    )
}

/// What [`prepare`] made.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// `<workdir>/root`: the engine's working directory.
    pub root: PathBuf,
    /// The step environment.
    pub env: StepEnv,
    /// The image ships a provider mirror (`cli.tfrc` written).
    pub providers_mirror: bool,
}

/// Creates `<workdir>/root` (0700), copies the config's top-level regular files (symlinks
/// followed, dot-names skipped) into it with mode 0600, checks that `required` files arrived,
/// builds the step environment and writes `cli.tfrc` when `providers` is a directory.
pub fn prepare(
    config: &Path,
    workdir: &Path,
    providers: &Path,
    env: impl IntoIterator<Item = (String, String)>,
    required: &[&'static str],
) -> Result<Prepared> {
    let root = workdir.join(ROOT_DIR);
    std::fs::create_dir_all(&root).map_err(|e| Error::io("creating", &root, e))?;
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| Error::io("setting the mode of", &root, e))?;
    let entries =
        std::fs::read_dir(config).map_err(|e| Error::io("reading config dir", config, e))?;
    let mut copied = BTreeSet::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("reading config dir", config, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let src = entry.path();
        if name.starts_with('.') || !std::fs::metadata(&src).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let bytes = std::fs::read(&src).map_err(|e| Error::io("reading config file", &src, e))?;
        write_private(&root.join(&name), &bytes)?;
        copied.insert(name);
    }
    for file in required {
        if !copied.contains(*file) {
            return Err(Error::MissingConfig {
                dir: config.to_owned(),
                file,
            });
        }
    }
    let providers_mirror = std::fs::metadata(providers).is_ok_and(|m| m.is_dir());
    let cli = workdir.join(CLI_CONFIG_FILE);
    if providers_mirror {
        write_private(&cli, cli_config(providers).as_bytes())?;
    }
    let env = step_env(env, workdir, providers_mirror.then_some(cli.as_path()));
    if let Some(tmp) = &env.tmp_dir {
        std::fs::create_dir_all(tmp).map_err(|e| Error::io("creating", tmp, e))?;
    }
    Ok(Prepared {
        root,
        env,
        providers_mirror,
    })
}

/// Writes the result document: mode 0600 when the runner creates the file; an existing file
/// (the kubelet's `/dev/termination-log`) keeps its mode when the runner may not change it.
pub fn write_result(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("writing", path, e))?;
    f.write_all(bytes)
        .map_err(|e| Error::io("writing", path, e))?;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    Ok(())
}

/// Writes `bytes` to `path` with mode 0600 (replacing any file there).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("writing", path, e))?;
    f.write_all(bytes)
        .map_err(|e| Error::io("writing", path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io("setting the mode of", path, e))
}

/// Whether an engine of `version` (`terraform_version` of `version -json`) has `issensitive()`:
/// Terraform 1.8 and OpenTofu 1.7 added it. Both engines report the same numbers, so OpenTofu
/// 1.7 counts as without it; an unknown version does too.
pub fn has_issensitive(version: &str) -> bool {
    let mut parts = version.split(['.', '-']).map(str::parse::<u64>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor) >= (1, 8),
        _ => false,
    }
}

/// Adds [`captf_contract::EXPORTS_SENSITIVE_FILE`] to `root` when its rendered root re-exports
/// `exports` (a cluster's): the state then records whether the module marks its exports
/// sensitive, and the manager publishes only exports that are not. Returns whether it did.
pub fn add_exports_flag(root: &Path) -> Result<bool> {
    let doc = read_json(&root.join(MAIN_TF_FILE))?;
    if doc.pointer("/output/exports").is_none() {
        return Ok(false);
    }
    let path = root.join(captf_contract::EXPORTS_SENSITIVE_FILE);
    write_private(&path, &captf_contract::exports_sensitive_root())?;
    Ok(true)
}

/// Values of the root variables the rendered root declares `sensitive` (from the copies in
/// `root`). A missing tfvars file yields nothing (a restore root has no variables).
pub fn sensitive_root_values(root: &Path) -> Result<Vec<Value>> {
    let main = root.join(MAIN_TF_FILE);
    let doc = read_json(&main)?;
    let sensitive: Vec<&String> = doc
        .get("variable")
        .and_then(Value::as_object)
        .map(|vars| {
            vars.iter()
                .filter(|(_, d)| d.get("sensitive") == Some(&Value::Bool(true)))
                .map(|(k, _)| k)
                .collect()
        })
        .unwrap_or_default();
    let tfvars = root.join(TFVARS_FILE);
    if sensitive.is_empty() || !tfvars.exists() {
        return Ok(Vec::new());
    }
    let values = read_json(&tfvars)?;
    Ok(sensitive
        .into_iter()
        .filter_map(|k| values.get(k).cloned())
        .collect())
}

fn read_json(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("reading config file", path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::BadConfig {
        path: path.to_owned(),
        reason: format!("not valid JSON (line {}, column {})", e.line(), e.column()),
    })
}

/// Adds the content of every regular file of the credentials folder to `redactor`. A missing
/// folder adds nothing.
pub fn add_credential_files(dir: &Path, redactor: &mut Redactor) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with('.')
            || !std::fs::metadata(&path).is_ok_and(|m| m.is_file())
        {
            continue;
        }
        let mut buf = Vec::new();
        if File::open(&path)
            .and_then(|f| f.take(MAX_CREDENTIAL_FILE).read_to_end(&mut buf))
            .is_ok()
        {
            redactor.add(&String::from_utf8_lossy(&buf));
        }
    }
}

/// Reads the plan key; fails closed when it is unreadable or shorter than
/// [`MIN_PLAN_KEY_BYTES`].
pub fn read_plan_key(path: &Path) -> Result<Vec<u8>> {
    let key = std::fs::read(path).map_err(|e| Error::PlanKey {
        path: path.to_owned(),
        reason: format!("unreadable: {e}"),
    })?;
    if key.len() < MIN_PLAN_KEY_BYTES {
        return Err(Error::PlanKey {
            path: path.to_owned(),
            reason: format!("{} bytes, at least {MIN_PLAN_KEY_BYTES} needed", key.len()),
        });
    }
    Ok(key)
}

/// A restore's backup, read from `<config>/restore/0 … <chunks-1>`.
#[derive(Debug)]
pub struct RestoreBackup {
    /// Each chunk's bytes, in order: written back verbatim as the state's Secrets.
    pub chunks: Vec<Vec<u8>>,
    /// The state's lineage.
    pub lineage: String,
    /// The state's serial.
    pub serial: u64,
}

/// Reads the backup chunks `<config>/restore/0 … <chunks-1>` (the gzip stream of a state, split
/// like the kubernetes backend splits it), decompresses the first gzip member under
/// [`MAX_RESTORE_BYTES`] and checks it is a state document with a lineage and a serial.
pub fn assemble_restore(config: &Path, chunks: usize) -> Result<RestoreBackup> {
    if chunks == 0 || chunks > MAX_RESTORE_CHUNKS {
        return Err(Error::Restore(format!(
            "--restore-chunks is {chunks}; a restore needs 1 to {MAX_RESTORE_CHUNKS} chunks"
        )));
    }
    let mut parts = Vec::with_capacity(chunks);
    for i in 0..chunks {
        let path = config.join("restore").join(i.to_string());
        parts.push(std::fs::read(&path).map_err(|e| Error::io("reading backup chunk", &path, e))?);
    }
    let compressed = parts.concat();
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(compressed.as_slice())
        .take(MAX_RESTORE_BYTES + 1)
        .read_to_end(&mut json)
        .map_err(|e| Error::Restore(format!("the chunks are not one gzip stream: {e}")))?;
    if json.len() as u64 > MAX_RESTORE_BYTES {
        return Err(Error::Restore(format!(
            "the state decompresses to more than {MAX_RESTORE_BYTES} bytes"
        )));
    }
    let doc = match serde_json::from_slice::<Value>(&json) {
        Ok(Value::Object(doc)) => doc,
        Ok(_) => return Err(Error::Restore("the state is not a JSON object".into())),
        Err(e) => {
            return Err(Error::Restore(format!(
                "the state is not valid JSON (line {}, column {})",
                e.line(),
                e.column()
            )));
        }
    };
    let lineage = doc
        .get("lineage")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let serial = doc.get("serial").and_then(Value::as_u64);
    match serial {
        Some(serial) if !lineage.is_empty() => Ok(RestoreBackup {
            chunks: parts,
            lineage: lineage.to_owned(),
            serial,
        }),
        _ => Err(Error::Restore("the state has no lineage or serial".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    #[allow(clippy::type_complexity)] // table rows are tuples
    fn step_env_table() {
        let w = Path::new("/captf/work");
        let cli = Path::new("/captf/work/cli.tfrc");
        let cases: Vec<(
            Vec<(String, String)>,
            Option<&Path>,
            Vec<(String, String)>,
            Vec<&str>,
        )> = vec![
            (
                env(&[
                    ("PATH", "/bin"),
                    ("HOME", "/root"),
                    ("TF_IN_AUTOMATION", "1"),
                    ("TF_INPUT", "0"),
                    ("TF_WORKSPACE", "evil"),
                    ("TF_VAR_x", "y"),
                    ("TF_CLI_ARGS", "-destroy"),
                    ("KUBE_NAMESPACE", "ns"),
                    ("KUBE_CONFIG_PATH", "/x"),
                    ("TMPDIR", "/tmp"),
                    ("AWS_REGION", "eu-1"),
                ]),
                Some(cli),
                env(&[
                    ("PATH", "/bin"),
                    ("TF_IN_AUTOMATION", "1"),
                    ("TF_INPUT", "0"),
                    ("KUBE_NAMESPACE", "ns"),
                    ("TMPDIR", "/tmp"),
                    ("AWS_REGION", "eu-1"),
                    ("TF_DATA_DIR", "/captf/work/.terraform"),
                    ("HOME", "/captf/work"),
                    ("TF_CLI_CONFIG_FILE", "/captf/work/cli.tfrc"),
                ]),
                vec![
                    "HOME",
                    "TF_WORKSPACE",
                    "TF_VAR_x",
                    "TF_CLI_ARGS",
                    "KUBE_CONFIG_PATH",
                ],
            ),
            (
                env(&[
                    ("TF_DATA_DIR", "/elsewhere"),
                    ("TF_CLI_CONFIG_FILE", "/root/.terraformrc"),
                ]),
                None,
                env(&[
                    ("TF_DATA_DIR", "/captf/work/.terraform"),
                    ("HOME", "/captf/work"),
                    ("TMPDIR", "/captf/work/tmp"),
                ]),
                vec!["TF_DATA_DIR", "TF_CLI_CONFIG_FILE"],
            ),
        ];
        for (input, cli, want, dropped) in cases {
            let got = step_env(input.clone(), w, cli);
            assert_eq!(got.vars, want, "{input:?}");
            assert_eq!(got.dropped, dropped, "{input:?}");
            assert_eq!(
                got.tmp_dir.is_some(),
                !input.iter().any(|(k, _)| k == "TMPDIR")
            );
        }
    }

    #[test]
    fn cli_config_uses_only_the_mirror() {
        let c = cli_config(Path::new("/captf/providers"));
        assert_eq!(
            c,
            "provider_installation {\n  filesystem_mirror {\n    path    = \"/captf/providers\"\n    include = [\"*/*/*\"]\n  }\n  direct {\n    exclude = [\"*/*/*\"]\n  }\n}\n"
        );
    }

    #[test]
    fn issensitive_exists_from_1_8() {
        for (version, has) in [
            ("1.5.7", false),
            ("1.7.5", false),
            ("1.8.0", true),
            ("1.12.6", true),
            ("1.15.5", true),
            ("2.0.0-alpha1", true),
            ("1.9.0-beta2", true),
            ("", false),
            ("v1.8.0", false),
        ] {
            assert_eq!(has_issensitive(version), has, "{version:?}");
        }
    }

    #[test]
    fn the_exports_flag_goes_only_beside_a_root_that_re_exports_exports() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cluster =
            r#"{"output":{"exports":{"value":"${module.role.exports}","sensitive":true}}}"#;
        std::fs::write(dir.path().join(MAIN_TF_FILE), cluster).expect("write");
        assert!(add_exports_flag(dir.path()).expect("cluster"));
        let flag = std::fs::read(dir.path().join(captf_contract::EXPORTS_SENSITIVE_FILE))
            .expect("flag file");
        let flag: Value = serde_json::from_slice(&flag).expect("json");
        assert_eq!(
            flag["output"][captf_contract::EXPORTS_SENSITIVE_OUTPUT]["value"],
            "${issensitive(module.role.exports)}"
        );
        let machine = tempfile::tempdir().expect("tempdir");
        let root = r#"{"output":{"provider_id":{"value":"${module.role.provider_id}"}}}"#;
        std::fs::write(machine.path().join(MAIN_TF_FILE), root).expect("write");
        assert!(!add_exports_flag(machine.path()).expect("machine"));
        assert!(
            !machine
                .path()
                .join(captf_contract::EXPORTS_SENSITIVE_FILE)
                .exists()
        );
    }

    #[test]
    fn prepare_copies_config_and_writes_cli_config() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let config = tmp.path().join("config");
        let data = config.join("..data");
        std::fs::create_dir_all(&data).expect("mkdir");
        std::fs::write(data.join(MAIN_TF_FILE), b"{}").expect("write");
        std::os::unix::fs::symlink(data.join(MAIN_TF_FILE), config.join(MAIN_TF_FILE))
            .expect("link");
        std::fs::write(config.join(TFVARS_FILE), b"{}").expect("write");
        std::fs::create_dir_all(config.join("restore")).expect("mkdir");
        let providers = tmp.path().join("providers");
        std::fs::create_dir_all(&providers).expect("mkdir");
        let work = tmp.path().join("work");
        let p = prepare(
            &config,
            &work,
            &providers,
            env(&[("PATH", "/bin")]),
            &[MAIN_TF_FILE, TFVARS_FILE],
        )
        .expect("prepare");
        let mut names: Vec<String> = std::fs::read_dir(&p.root)
            .expect("root")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, [MAIN_TF_FILE, TFVARS_FILE]);
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&p.root), 0o700);
        assert_eq!(mode(&p.root.join(MAIN_TF_FILE)), 0o600);
        assert!(p.providers_mirror);
        assert_eq!(mode(&work.join(CLI_CONFIG_FILE)), 0o600);
        assert!(work.join("tmp").is_dir());

        // Without the tfvars file a non-restore run fails naming it.
        std::fs::remove_file(config.join(TFVARS_FILE)).expect("rm");
        let err = prepare(
            &config,
            &tmp.path().join("w2"),
            &tmp.path().join("none"),
            env(&[]),
            &[MAIN_TF_FILE, TFVARS_FILE],
        )
        .expect_err("missing tfvars");
        assert!(
            err.to_string().contains("missing terraform.tfvars.json"),
            "{err}"
        );
        assert_eq!(err.category(), "MissingConfig");
    }

    #[test]
    #[allow(clippy::type_complexity)] // table rows are tuples
    fn preflight_table() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let module = tmp.path().join("module");
        let empty = tmp.path().join("empty");
        std::fs::create_dir_all(module.join("sub.tf")).expect("mkdir");
        std::fs::create_dir_all(&empty).expect("mkdir");
        std::fs::write(module.join("main.tofu"), b"").expect("write");
        let exe = tmp.path().join("runtime");
        std::fs::write(&exe, b"#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let plain = tmp.path().join("plain");
        std::fs::write(&plain, b"").expect("write");
        let bin_dir = tmp.path().display().to_string();
        let s = |p: &Path| p.display().to_string();
        let cases: Vec<(&Path, Vec<String>, Option<&str>, Option<&str>)> = vec![
            (&module, vec![s(&exe)], None, None),
            (
                &module,
                vec!["runtime".into()],
                Some(bin_dir.as_str()),
                None,
            ),
            (
                &module,
                vec!["runtime".into()],
                Some("/nonexistent"),
                Some("not on PATH"),
            ),
            (&empty, vec![s(&exe)], None, Some("has no .tf")),
            (
                Path::new("/nonexistent"),
                vec![s(&exe)],
                None,
                Some("not readable"),
            ),
            (&module, vec![], None, Some("empty")),
            (&module, vec![s(&plain)], None, Some("not executable")),
            (&module, vec![s(tmp.path())], None, Some("is a directory")),
            (
                &module,
                vec![s(&tmp.path().join("nope"))],
                None,
                Some("does not exist"),
            ),
        ];
        for (m, bin, path, want) in cases {
            let got = preflight(m, &bin, path);
            match want {
                None => assert!(got.is_ok(), "{bin:?}: {got:?}"),
                Some(w) => {
                    let err = got.expect_err("fails");
                    assert!(err.to_string().contains(w), "{bin:?}: {err}");
                    assert_eq!(err.category(), "ImageLayout");
                }
            }
        }
    }

    #[test]
    fn plan_key_fails_closed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let short = tmp.path().join("short");
        std::fs::write(&short, [1u8; 31]).expect("write");
        let good = tmp.path().join("good");
        std::fs::write(&good, [7u8; 32]).expect("write");
        assert!(
            read_plan_key(&short)
                .expect_err("short")
                .to_string()
                .contains("31 bytes")
        );
        assert!(
            read_plan_key(&tmp.path().join("missing"))
                .expect_err("missing")
                .to_string()
                .contains("unreadable")
        );
        assert_eq!(read_plan_key(&good).expect("good").len(), 32);
    }

    #[test]
    fn restore_assembles_chunks() {
        use flate2::{Compression, write::GzEncoder};
        let tmp = tempfile::tempdir().expect("tempdir");
        let config = tmp.path().join("config");
        std::fs::create_dir_all(config.join("restore")).expect("mkdir");
        let state = br#"{"version":4,"serial":3,"lineage":"l","resources":[]}"#;
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(state).expect("gzip");
        let gz = enc.finish().expect("gzip");
        let (a, b) = gz.split_at(gz.len() / 2);
        std::fs::write(config.join("restore/0"), a).expect("write");
        std::fs::write(config.join("restore/1"), b).expect("write");
        let backup = assemble_restore(&config, 2).expect("assembled");
        assert_eq!(backup.chunks, [a.to_vec(), b.to_vec()]);
        assert_eq!((backup.lineage.as_str(), backup.serial), ("l", 3));
        for (n, want) in [
            (0, "needs 1 to 32"),
            (1, "not one gzip stream"),
            (3, "reading backup chunk"),
        ] {
            let err = assemble_restore(&config, n).expect_err("fails").to_string();
            assert!(err.contains(want), "{n}: {err}");
        }
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(br#"{"version":4,"resources":[]}"#)
            .expect("gzip");
        std::fs::write(config.join("restore/0"), enc.finish().expect("gzip")).expect("write");
        let err = assemble_restore(&config, 1)
            .expect_err("no lineage")
            .to_string();
        assert!(err.contains("no lineage or serial"), "{err}");
    }

    #[test]
    fn sensitive_root_values_come_from_declared_variables() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            tmp.path().join(MAIN_TF_FILE),
            br#"{"variable": {"bootstrap_data": {"sensitive": true}, "name": {"type": "string"}}}"#,
        )
        .expect("write");
        std::fs::write(
            tmp.path().join(TFVARS_FILE),
            br#"{"bootstrap_data": "c2VjcmV0", "name": "public"}"#,
        )
        .expect("write");
        assert_eq!(
            sensitive_root_values(tmp.path()).expect("values"),
            [Value::String("c2VjcmV0".into())]
        );
        std::fs::write(tmp.path().join(MAIN_TF_FILE), b"{ not json").expect("write");
        let err = sensitive_root_values(tmp.path()).expect_err("bad json");
        assert!(err.to_string().contains("not valid JSON (line 1"), "{err}");
    }
}
