//! CAPTF installed the way a Cluster API user installs it (docs/installation.md): cert-manager
//! from its static manifest, then `clusterctl init` of the Cluster API core provider and CAPTF
//! from a local repository. Every controller runs as its Deployment on the test node, from the
//! images the project builds, and the API server calls every webhook through its Service.
//!
//! The local repository holds what a release publishes: for the core provider, `kustomize
//! build core/config/default` of the pinned Cluster API module with the release's image and
//! pull policy; for CAPTF, `kustomize build config/clusterctl` (config/default with its
//! clusterctl variables) with the image set to the manager image pushed into the node's
//! registry, pinned by digest (docs/installation.md, "Building the manifest"). clusterctl pulls the core image from `captf.local` through its `images:`
//! setting, as an air-gapped user mirrors it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use captf_testenv::images::{RELEASED_IMAGES, pin, push_released};
use captf_testenv::tools::{Tools, bin_dir, cache_dir};
use captf_testenv::{TestEnv, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::{Images, workspace, write_images};

/// Where `config/default` installs the manager.
pub const NAMESPACE: &str = "captf-system";
/// The manager's Deployment.
pub const DEPLOYMENT: &str = "captf-controller-manager";
/// The version the local repository publishes CAPTF as: the release series of `metadata.yaml`.
pub const VERSION: &str = "v0.1.0";
/// cert-manager's static manifest without its CRDs, rendered from its chart
/// (`hack/render-cert-manager.sh`).
pub const CERT_MANAGER_MANIFEST: &str = "hack/cert-manager/cert-manager.yaml";

/// Long enough for images to be pulled and cert-manager to issue the serving certificates.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);

/// What [`install`] set up: the local repository and clusterctl's configuration.
#[derive(Clone, Debug)]
pub struct Installed {
    /// `clusterctl.yaml`, the repository beside it.
    pub config: PathBuf,
    /// clusterctl's own folder (`XDG_CONFIG_HOME`), so it never reads the user's.
    pub home: PathBuf,
    /// The module images and the manager image (`captf.local/captf@sha256:...`).
    pub images: Images,
}

/// Installs cert-manager and runs `clusterctl init` on `env`, once per environment; waits
/// until every provider's Deployment is available.
pub async fn install(env: &TestEnv, client: &kube::Client) -> anyhow::Result<Installed> {
    let images = write_images(env)?;
    let tools = Tools::locate()?;
    let registry = env.registry().to_owned();
    tokio::task::spawn_blocking(move || push_released(&tools, &registry)).await??;

    let dir = env.dir.join("clusterctl");
    std::fs::create_dir_all(&dir)?;
    // Its CRDs (deploy/crds of the same module), then the rest.
    for manifest in [
        cache_dir().join("manifest-crds/cert-manager"),
        workspace().join(CERT_MANAGER_MANIFEST),
    ] {
        kubectl(
            env,
            &[
                "apply",
                "--server-side",
                "-f",
                &manifest.display().to_string(),
            ],
        )?;
    }
    for name in [
        "cert-manager",
        "cert-manager-webhook",
        "cert-manager-cainjector",
    ] {
        available(client, "cert-manager", name).await?;
    }

    let installed = Installed {
        config: write_repository(&dir, &images.runner)?,
        home: dir.join("home"),
        images,
    };
    let core = format!("cluster-api:{}", pin("CLUSTER_API_VERSION"));
    let infrastructure = format!("terraform:{VERSION}");
    clusterctl(
        env,
        &installed,
        &[
            "init",
            "--core",
            &core,
            "--bootstrap",
            "-",
            "--control-plane",
            "-",
            "--infrastructure",
            &infrastructure,
            "--wait-providers",
        ],
    )?;
    available(client, NAMESPACE, DEPLOYMENT).await?;
    Ok(installed)
}

/// Runs clusterctl on `env` with the local repository; fails with its output.
pub fn clusterctl(env: &TestEnv, installed: &Installed, args: &[&str]) -> anyhow::Result<String> {
    let mut command = Command::new(bin_dir().join("clusterctl"));
    command
        .args(args)
        .arg(format!("--config={}", installed.config.display()))
        .arg(format!("--kubeconfig={}", env.kubeconfig().display()))
        // No version check against GitHub; no configuration but ours.
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
        .env("XDG_CONFIG_HOME", &installed.home)
        .env("HOME", &installed.home);
    run(command)
}

/// Runs kubectl on `env`; fails with its output.
pub fn kubectl(env: &TestEnv, args: &[&str]) -> anyhow::Result<String> {
    let mut command = Command::new(bin_dir().join("kubectl"));
    command
        .args(args)
        .arg(format!("--kubeconfig={}", env.kubeconfig().display()));
    run(command)
}

fn run(mut command: Command) -> anyhow::Result<String> {
    let shown = format!("{command:?}");
    let out = command
        .output()
        .with_context(|| format!("running {shown}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    anyhow::ensure!(
        out.status.success(),
        "{shown} failed ({}):\n{text}",
        out.status
    );
    Ok(text)
}

/// Waits until Deployment `ns/name` has settled: all its replicas updated and available, and
/// no pod of an earlier rollout still terminating (the Deployment's counts leave those out).
pub async fn available(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_for(
        &format!("Deployment {ns}/{name} available"),
        INSTALL_TIMEOUT,
        || async {
            let Some(d) = deployments.get_opt(name).await? else {
                return Ok(None);
            };
            let wanted = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let status = d.status.unwrap_or_default();
            let done = d.metadata.generation == status.observed_generation
                && status.updated_replicas == Some(wanted)
                && status.available_replicas == Some(wanted)
                && status.replicas == Some(wanted);
            if !done {
                return Ok(None);
            }
            let selector = d
                .spec
                .and_then(|s| s.selector.match_labels)
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            let listed = pods.list(&ListParams::default().labels(&selector)).await?;
            Ok((listed.items.len() == wanted as usize).then_some(()))
        },
    )
    .await
}

/// Lays out the local repository under `dir` and writes `clusterctl.yaml`; returns its path.
fn write_repository(dir: &Path, manager_image: &str) -> anyhow::Result<PathBuf> {
    let capi = pin("CLUSTER_API_VERSION");
    let cache = cache_dir().join("capi-manager");
    let kustomize = bin_dir().join("kustomize");
    let build = dir.join("build");

    // The core provider as its release builds it (Makefile `release-manifests`): the image
    // from the production registry, pulled if not present.
    copy_tree(&cache.join("core-config"), &build.join("core-config"))?;
    write(
        &build.join("core/kustomization.yaml"),
        &format!(
            r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../core-config/default
images:
  - name: gcr.io/k8s-staging-cluster-api/cluster-api-controller
    newName: registry.k8s.io/cluster-api/cluster-api-controller
    newTag: {capi}
patches:
  - target: {{kind: Deployment}}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: IfNotPresent
"#
        ),
    )?;
    let core = dir.join(format!("cluster-api/{capi}"));
    write(
        &core.join("core-components.yaml"),
        &run_kustomize(&kustomize, &build.join("core"))?,
    )?;
    std::fs::copy(cache.join("metadata.yaml"), core.join("metadata.yaml"))?;

    // CAPTF as docs/installation.md builds it for clusterctl: config/clusterctl (config/default
    // and the flags as clusterctl variables) with the image set.
    std::fs::create_dir_all(build.join("captf"))?;
    write(
        &build.join("captf/kustomization.yaml"),
        &format!(
            r#"apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {}
images:
  - name: ghcr.io/captf-io/cluster-api-provider-terraform
    newName: {}
    digest: {}
"#,
            relative_to(&build.join("captf"), &workspace().join("config/clusterctl"))?,
            manager_image
                .split_once('@')
                .map_or(manager_image, |(repository, _)| repository),
            manager_image
                .split_once('@')
                .map_or("", |(_, digest)| digest),
        ),
    )?;
    let captf = dir.join(format!("infrastructure-terraform/{VERSION}"));
    write(
        &captf.join("infrastructure-components.yaml"),
        &run_kustomize(&kustomize, &build.join("captf"))?,
    )?;
    std::fs::copy(
        workspace().join("metadata.yaml"),
        captf.join("metadata.yaml"),
    )?;
    // The release carries the templates/ flavors, as `clusterctl generate cluster` finds them.
    for entry in std::fs::read_dir(workspace().join("templates"))? {
        let path = entry?.path();
        if let Some(file) = path.file_name() {
            std::fs::copy(&path, captf.join(file))?;
        }
    }

    let core_image = RELEASED_IMAGES
        .iter()
        .find(|i| i.binary == "capi-manager")
        .context("the core manager's image")?;
    let config = dir.join("clusterctl.yaml");
    write(
        &config,
        &format!(
            r#"providers:
  - name: cluster-api
    type: CoreProvider
    url: file://{core}/core-components.yaml
  - name: terraform
    type: InfrastructureProvider
    url: file://{captf}/infrastructure-components.yaml
# Installed beforehand from hack/cert-manager/cert-manager.yaml: clusterctl checks it works
# (retrying until it does) and never installs its own.
cert-manager:
  version: "{cert_manager}"
  externallyProvisioned: "true"
# A clusterctl variable of CAPTF's components (docs/installation.md), as a user sets one; the
# others keep their defaults.
CAPTF_FEATURE_GATES: "MachinePool=true"
# The core manager's image from the node's registry, where {core_image} is pushed.
images:
  cluster-api:
    repository: captf.local/cluster-api
"#,
            core = core.display(),
            captf = captf.display(),
            cert_manager = pin("CERT_MANAGER_VERSION"),
            core_image = core_image.reference(),
        ),
    )?;
    Ok(config)
}

fn run_kustomize(kustomize: &Path, dir: &Path) -> anyhow::Result<String> {
    let mut command = Command::new(kustomize);
    command.arg("build").arg(dir);
    let out = command.output().with_context(|| {
        format!(
            "running {} (hack/build-tools.sh kustomize)",
            kustomize.display()
        )
    })?;
    anyhow::ensure!(
        out.status.success(),
        "kustomize build {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text).with_context(|| path.display().to_string())
}

/// kustomize takes a base only by a relative path.
fn relative_to(from: &Path, to: &Path) -> anyhow::Result<String> {
    let from = std::fs::canonicalize(from)?;
    let to = std::fs::canonicalize(to)?;
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let ups = from.components().count() - common;
    let mut path = PathBuf::new();
    for _ in 0..ups {
        path.push("..");
    }
    path.extend(to.components().skip(common));
    Ok(path.display().to_string())
}

fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        from.is_dir(),
        "{} is missing: run hack/build-tools.sh capi",
        from.display()
    );
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
