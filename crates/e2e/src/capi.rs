//! The real Cluster API core controllers (`capi-manager`, built by `hack/build-tools.sh capi`)
//! as a process watching one test namespace, with their webhooks served over TLS on loopback
//! and registered with the control plane for that namespace only (hack/capi.md).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use captf_testenv::TestEnv;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

use crate::{Manager, apply_yaml};

/// A `capi-manager` whose webhooks serve one namespace. Dropping it removes its webhook configurations first:
/// they fail closed, so with the manager gone every write of a CAPI object would be refused.
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
        let cache = captf_testenv::tools::cache_dir();
        let binary = cache.join("bin/capi-manager");
        let manifests = cache.join("capi-manager/core-webhooks.yaml");
        anyhow::ensure!(
            binary.exists() && manifests.exists(),
            "{} or {} is missing: run bash hack/build-tools.sh capi",
            binary.display(),
            manifests.display()
        );
        let dir = env.dir.join(format!("capi-{ns}"));
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
        let log = dir.join("capi-manager.log");
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
            .context("starting capi-manager")?;
        let mut manager = CapiManager {
            child,
            log,
            kubeconfig: env.kubeconfig().to_owned(),
            webhooks: Vec::new(),
        };
        let ready = format!("http://127.0.0.1:{health}/readyz");
        captf_testenv::wait_for("capi-manager ready", Duration::from_secs(60), || async {
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
                "capi-{ns}-{}",
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
