//! The real Cluster API controllers built by `hack/build-tools.sh capi`: the core
//! (`capi-manager`) and the kubeadm bootstrap and control plane providers, each as a process,
//! with its webhooks served over TLS on loopback and registered with the control plane for one
//! test namespace only (hack/capi.md).
//!
//! A manager watches every namespace (with `--namespace` v1.14's MachineDeployment controller
//! fails: "failed to cast MachineSet informer to SharedIndexInformer"), so two of one kind must
//! never run at once: each test binary that starts them holds one test.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use captf_testenv::TestEnv;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

use crate::{Manager, apply_yaml};

/// Which of the Cluster API managers to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Controllers {
    /// Clusters, Machines, MachineDeployments, MachinePools, topology.
    Core,
    /// KubeadmConfig: the bootstrap data of each Machine (kubeadm init or join).
    KubeadmBootstrap,
    /// KubeadmControlPlane: the control-plane Machines of a ClusterClass.
    KubeadmControlPlane,
}

impl Controllers {
    fn binary(self) -> &'static str {
        match self {
            Controllers::Core => "capi-manager",
            Controllers::KubeadmBootstrap => "capi-kubeadm-bootstrap-manager",
            Controllers::KubeadmControlPlane => "capi-kubeadm-control-plane-manager",
        }
    }

    fn webhooks(self) -> &'static str {
        match self {
            Controllers::Core => "core-webhooks.yaml",
            Controllers::KubeadmBootstrap => "kubeadm-bootstrap-webhooks.yaml",
            Controllers::KubeadmControlPlane => "kubeadm-control-plane-webhooks.yaml",
        }
    }

    /// CRDs the test control plane does not install with the core ones.
    fn crds(self) -> Option<&'static str> {
        match self {
            Controllers::Core => None,
            Controllers::KubeadmBootstrap => Some("kubeadm-bootstrap-crds"),
            Controllers::KubeadmControlPlane => Some("kubeadm-control-plane-crds"),
        }
    }
}

/// A Cluster API manager whose webhooks serve one namespace. Dropping it removes its webhook
/// configurations first: they fail closed, so with the manager gone every write of a CAPI
/// object would be refused.
pub struct CapiManager {
    child: Child,
    log: PathBuf,
    kubeconfig: PathBuf,
    webhooks: Vec<(ApiResource, String)>,
}

impl CapiManager {
    /// Starts the core controllers and registers their webhooks for `ns`.
    pub async fn start(env: &TestEnv, client: &kube::Client, ns: &str) -> anyhow::Result<Self> {
        Self::start_with(env, client, ns, &[]).await
    }

    /// [`CapiManager::start`] with more flags (`--feature-gates=ClusterTopology=true`).
    pub async fn start_with(
        env: &TestEnv,
        client: &kube::Client,
        ns: &str,
        flags: &[&str],
    ) -> anyhow::Result<Self> {
        Self::run(Controllers::Core, env, client, ns, flags).await
    }

    /// `which` for `ns` with `flags`, its CRDs installed first.
    pub async fn run(
        which: Controllers,
        env: &TestEnv,
        client: &kube::Client,
        ns: &str,
        flags: &[&str],
    ) -> anyhow::Result<Self> {
        let cache = captf_testenv::tools::cache_dir();
        let binary = cache.join("bin").join(which.binary());
        let manifests = cache.join("capi-manager").join(which.webhooks());
        anyhow::ensure!(
            binary.exists() && manifests.exists(),
            "{} or {} is missing: run bash hack/build-tools.sh capi",
            binary.display(),
            manifests.display()
        );
        if let Some(crds) = which.crds() {
            install_crds(client, &cache.join("capi-manager").join(crds)).await?;
        }
        let dir = env.dir.join(format!("{}-{ns}", which.binary()));
        std::fs::create_dir_all(&dir)?;
        let certified = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_owned(),
            "localhost".to_owned(),
        ])?;
        let cert = certified.cert.pem();
        std::fs::write(dir.join("tls.crt"), &cert)?;
        std::fs::write(dir.join("tls.key"), certified.signing_key.serialize_pem())?;

        let health = captf_testenv::process::free_port()?;
        let webhook = captf_testenv::process::free_port()?;
        let log = dir.join(format!("{}.log", which.binary()));
        let out = std::fs::File::create(&log)?;
        let child = Command::new(&binary)
            .arg(format!("--kubeconfig={}", env.kubeconfig().display()))
            .arg("--leader-elect=false")
            .arg(format!("--health-addr=127.0.0.1:{health}"))
            .arg("--diagnostics-address=0")
            .arg(format!("--webhook-port={webhook}"))
            .arg(format!("--webhook-cert-dir={}", dir.display()))
            .args(flags)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", which.binary()))?;
        let mut manager = CapiManager {
            child,
            log,
            kubeconfig: env.kubeconfig().to_owned(),
            webhooks: Vec::new(),
        };
        let ready = format!("http://127.0.0.1:{health}/readyz");
        let what = format!("{} ready", which.binary());
        captf_testenv::wait_for(&what, Duration::from_secs(60), || async {
            Ok(Manager::get(&ready).ok().filter(|b| b.trim() == "ok"))
        })
        .await
        .with_context(|| manager.log())?;

        let text = std::fs::read_to_string(&manifests)?;
        let ca = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, cert);
        for document in serde_yaml::Deserializer::from_str(&text) {
            let mut config = <serde_json::Value as serde::Deserialize>::deserialize(document)?;
            if config.is_null() {
                continue;
            }
            let name = format!(
                "{}-{ns}-{}",
                which.binary(),
                config["metadata"]["name"].as_str().unwrap_or("webhooks")
            );
            config["metadata"] = serde_json::json!({"name": name});
            for hook in config["webhooks"].as_array_mut().into_iter().flatten() {
                let path = hook["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap_or("/")
                    .to_owned();
                hook["clientConfig"] = serde_json::json!({
                    "url": format!("https://127.0.0.1:{webhook}{path}"),
                    "caBundle": ca,
                });
                hook["namespaceSelector"] =
                    serde_json::json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
            }
            let kind = config["kind"].as_str().unwrap_or_default().to_owned();
            let resource = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", &kind),
                &format!("{}s", kind.to_lowercase()),
            );
            apply_yaml(client, &serde_json::to_string(&config)?).await?;
            manager.webhooks.push((resource, name));
        }
        Ok(manager)
    }

    /// The manager's log so far (for failure messages).
    pub fn log(&self) -> String {
        captf_testenv::control_plane::tail(&self.log, 60)
    }
}

impl Drop for CapiManager {
    fn drop(&mut self) {
        let kubeconfig = self.kubeconfig.clone();
        let webhooks = std::mem::take(&mut self.webhooks);
        // Drop runs inside the test's runtime: the deletes get their own thread and runtime.
        let removed = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let client = captf_testenv::client_from_kubeconfig(&kubeconfig).await?;
                for (resource, name) in webhooks {
                    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
                    api.delete(&name, &DeleteParams::default()).await?;
                }
                anyhow::Ok(())
            })
        })
        .join();
        if !matches!(removed, Ok(Ok(()))) {
            eprintln!("capi-manager: its webhook configurations could not all be removed");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Applies the CRDs in `dir` and waits until the API server serves each.
async fn install_crds(client: &kube::Client, dir: &std::path::Path) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for entry in std::fs::read_dir(dir)? {
        let text = std::fs::read_to_string(entry?.path())?;
        apply_yaml(client, &text).await?;
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text)?;
        let name = crd.metadata.name.unwrap_or_default();
        captf_testenv::wait_for(
            &format!("CRD {name} established"),
            Duration::from_secs(60),
            || async {
                let crd = crds.get(&name).await?;
                let established = crd.status.and_then(|s| s.conditions).is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
                Ok(established.then_some(()))
            },
        )
        .await?;
    }
    Ok(())
}
