//! Where the binaries built by `hack/build-tools.sh` live.

use std::path::{Path, PathBuf};

/// Paths of the control plane binaries, the engines and the Cluster API CRDs.
#[derive(Clone, Debug)]
pub struct Tools {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kube_scheduler: PathBuf,
    pub tofu: PathBuf,
    pub terraform: PathBuf,
    pub capi_crds: PathBuf,
    /// The OCI registry (distribution's `registry serve <config>`).
    pub registry: PathBuf,
    /// Pushes and reads images ([`crate::oci::Crane`]).
    pub crane: PathBuf,
}

/// The cache root: `$CAPTF_CACHE`, else `$HOME/.cache/captf`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CAPTF_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".cache/captf")
}

/// Where `hack/build-tools.sh` puts its binaries: `$CAPTF_BIN`, else `<cache>/bin`.
pub fn bin_dir() -> PathBuf {
    std::env::var_os("CAPTF_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("bin"))
}

impl Tools {
    /// Finds every tool under `$CAPTF_BIN` (default `<cache>/bin`) and the CAPI CRDs under
    /// `$CAPTF_CAPI_CRDS` (default `<cache>/capi-crds`); names what is missing and how to build it.
    pub fn locate() -> anyhow::Result<Self> {
        let bin = bin_dir();
        let crds = std::env::var_os("CAPTF_CAPI_CRDS")
            .map(PathBuf::from)
            .unwrap_or_else(|| cache_dir().join("capi-crds"));
        let tools = Tools {
            etcd: bin.join("etcd"),
            kube_apiserver: bin.join("kube-apiserver"),
            kube_controller_manager: bin.join("kube-controller-manager"),
            kube_scheduler: bin.join("kube-scheduler"),
            tofu: bin.join("tofu"),
            terraform: bin.join("terraform"),
            capi_crds: crds,
            registry: bin.join("registry"),
            crane: bin.join("crane"),
        };
        let missing: Vec<&Path> = [
            &tools.etcd,
            &tools.kube_apiserver,
            &tools.kube_controller_manager,
            &tools.kube_scheduler,
            &tools.tofu,
            &tools.terraform,
            &tools.capi_crds,
            &tools.registry,
            &tools.crane,
        ]
        .into_iter()
        .map(PathBuf::as_path)
        .filter(|p| !p.exists())
        .collect();
        if missing.is_empty() {
            Ok(tools)
        } else {
            anyhow::bail!(
                "missing test tools: {}; build them with `hack/build-tools.sh` (set CAPTF_CACHE or CAPTF_BIN if they live elsewhere)",
                missing
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    }
}
