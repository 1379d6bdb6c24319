//! The install manifests under config/, built by the real kustomize: config/default (what
//! kustomize users apply; config/clusterctl adds only clusterctl variables to it, and is
//! installed by the install suite) and the optional components. Every object is server-side dry-run
//! against the real API server with strict field validation, after the CRDs they need (ours,
//! cert-manager's and the Prometheus Operator's, from hack/build-tools.sh `manifest-crds`) are
//! installed for real. Every metric an alert names is one a running manager serves, and the
//! alert rules pass Prometheus' own rule checker and unit tests (promtool). The Deployment,
//! the webhook configuration and the references kustomize keeps in step are checked against
//! spec/operations.md §2, §3 and §6.1.

mod alerts;
mod api_server;
mod components;
mod deployment;
mod webhooks;

use std::path::{Path, PathBuf};
use std::process::Command;

use captf_e2e::workspace;
use serde_json::Value;

const IMAGE_NAME: &str = "ghcr.io/captf-io/cluster-api-provider-terraform";
const IMAGE: &str = "ghcr.io/captf-io/cluster-api-provider-terraform:dev";
const NAMESPACE: &str = "captf-system";

// ------------------------------------------------------------------------------ helpers

/// The cache folder hack/build-tools.sh fills (`$CAPTF_CACHE`, default `~/.cache/captf`).
fn cache() -> PathBuf {
    captf_testenv::tools::cache_dir()
}

/// A binary built by hack/build-tools.sh (`$CAPTF_BIN`, default `<cache>/bin`).
fn tool(name: &str) -> PathBuf {
    let bin = std::env::var_os("CAPTF_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache().join("bin"));
    let path = bin.join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `hack/build-tools.sh {name}`",
        path.display()
    );
    path
}

/// The third-party CRDs (`$CAPTF_MANIFEST_CRDS`, default `<cache>/manifest-crds`).
fn manifest_crds() -> PathBuf {
    let dir = std::env::var_os("CAPTF_MANIFEST_CRDS")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache().join("manifest-crds"));
    assert!(
        dir.is_dir(),
        "{} is missing: run `hack/build-tools.sh manifest-crds`",
        dir.display()
    );
    dir
}

/// Every document of a YAML stream, as JSON values.
fn documents(yaml: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// `kustomize build <dir>`.
fn build(dir: &Path) -> Vec<Value> {
    let out = Command::new(tool("kustomize"))
        .arg("build")
        .arg(dir)
        .output()
        .expect("running kustomize");
    assert!(
        out.status.success(),
        "kustomize build {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    documents(&String::from_utf8(out.stdout).expect("UTF-8"))
}

/// `kustomize build` of a kustomization of our own, written to a fresh temporary folder, as a
/// user would write one. `{config}` in it stands for the relative path to the workspace's
/// config/ (kustomize takes no absolute path to a component or base).
fn build_overlay(kustomization: &str) -> Vec<Value> {
    build_overlay_with(kustomization, &[])
}

/// [`build_overlay`] with more files next to the kustomization.
fn build_overlay_with(kustomization: &str, files: &[(&str, &str)]) -> Vec<Value> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "captf-manifests-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temporary folder");
    let dir = dir.canonicalize().expect("canonical");
    let config = workspace()
        .canonicalize()
        .expect("workspace")
        .join("config");
    let up = "../".repeat(dir.components().count() - 1);
    let relative = format!(
        "{up}{}",
        config
            .strip_prefix("/")
            .expect("absolute")
            .to_str()
            .expect("UTF-8 path")
    );
    std::fs::write(
        dir.join("kustomization.yaml"),
        kustomization.replace("{config}", &relative),
    )
    .expect("kustomization");
    for (file, content) in files {
        std::fs::write(dir.join(file), content).expect("file");
    }
    let objects = build(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    objects
}

fn config(sub: &str) -> PathBuf {
    workspace().join("config").join(sub)
}

fn kind(o: &Value) -> &str {
    o["kind"].as_str().unwrap_or("")
}

fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or("")
}

fn describe(o: &Value) -> String {
    match o["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{} {ns}/{}", kind(o), name(o)),
        None => format!("{} {}", kind(o), name(o)),
    }
}

/// The one object of `kind` named `name`.
fn find<'a>(objects: &'a [Value], kind_: &str, name_: &str) -> &'a Value {
    let found: Vec<_> = objects
        .iter()
        .filter(|o| kind(o) == kind_ && name(o) == name_)
        .collect();
    assert_eq!(found.len(), 1, "{kind_} {name_} in the build");
    found[0]
}

/// The container named `name` of a Deployment.
fn container<'a>(deployment: &'a Value, name_: &str) -> &'a Value {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name_))
        .unwrap_or_else(|| panic!("container {name_}"))
}

/// The entry named `name` of a list of `{name: ...}` objects.
fn named<'a>(list: &'a Value, name_: &str) -> &'a Value {
    list.as_array()
        .and_then(|l| l.iter().find(|e| e["name"] == name_))
        .unwrap_or_else(|| panic!("no entry {name_} in {list}"))
}

/// Whether every label of `selector` is among `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| labels.get(k) == Some(v)))
}
