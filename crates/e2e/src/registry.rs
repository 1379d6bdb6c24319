//! A real OCI registry (the reference `registry` of distribution, built by
//! `hack/build-tools.sh registry`), behind htpasswd authentication, and `crane` (built by
//! `hack/build-tools.sh crane`) to push labelled images into it, on loopback for the manager;
//! [`TestRegistry::start_for_node`] lets the kubelet pull from it too.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use captf_testenv::TestEnv;

/// The registry's user and password.
pub const USER: &str = "captf";
pub const PASSWORD: &str = "registry-secret";
/// bcrypt of [`PASSWORD`] (the registry takes nothing else in an htpasswd file).
const HTPASSWD: &str = "captf:$2b$12$tK/YiNWGUAXjmJR.CjXaL.M4TGePLi/yGBsBQulhFvLi3efUWFmHC\n";

/// A running registry; killed when dropped.
pub struct TestRegistry {
    child: Child,
    dir: PathBuf,
    /// `127.0.0.1:<port>`, the registry part of image references.
    pub host: String,
    /// The forwarder of [`TestRegistry::start_for_node`].
    forwarder: Option<tokio::task::JoinHandle<()>>,
}

impl TestRegistry {
    /// Starts an in-memory registry on loopback that only serves [`USER`], and logs crane into
    /// it: for the manager (which speaks plain HTTP to loopback registries only), not the node.
    pub async fn start(env: &TestEnv, name: &str) -> anyhow::Result<Self> {
        Self::start_in(&env.dir, name).await
    }

    /// [`TestRegistry::start`] that the node's kubelet reaches too, under the same references:
    /// a forwarder on the host end of the node's veth pair passes connections to the loopback
    /// port, and containerd is told to reach `127.0.0.1:<port>` there over plain HTTP (the
    /// pull Secret's credentials go through unchanged).
    pub async fn start_for_node(env: &TestEnv, name: &str) -> anyhow::Result<Self> {
        let mut registry = Self::start_in(&env.dir, name).await?;
        let listener = tokio::net::TcpListener::bind((env.state.network.host_ip(), 0)).await?;
        let forward = listener.local_addr()?.to_string();
        let target = registry.host.clone();
        registry.forwarder = Some(tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        }));
        env.route_registry(&registry.host, &forward)?;
        Ok(registry)
    }

    /// [`TestRegistry::start`] on loopback, keeping its files under `parent`, for a test
    /// without a control plane.
    pub async fn start_in(parent: &std::path::Path, name: &str) -> anyhow::Result<Self> {
        Self::start_on(parent, name, std::net::Ipv4Addr::LOCALHOST.into()).await
    }

    async fn start_on(
        parent: &std::path::Path,
        name: &str,
        address: std::net::IpAddr,
    ) -> anyhow::Result<Self> {
        let cache = captf_testenv::tools::cache_dir();
        for tool in ["registry", "crane"] {
            anyhow::ensure!(
                cache.join("bin").join(tool).exists(),
                "{} is missing: run bash hack/build-tools.sh {tool}",
                cache.join("bin").join(tool).display()
            );
        }
        let dir = parent.join(format!("registry-{name}"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("htpasswd"), HTPASSWD)?;
        let port = captf_testenv::process::free_port_on(address)?;
        let host = format!("{address}:{port}");
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  inmemory: {{}}\nhttp:\n  addr: {host}\nauth:\n  htpasswd:\n    realm: captf-test\n    path: {}\n",
            dir.join("htpasswd").display()
        );
        std::fs::write(dir.join("config.yml"), config)?;
        let log = std::fs::File::create(dir.join("registry.log"))?;
        let child = Command::new(cache.join("bin/registry"))
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting the registry")?;
        let registry = TestRegistry {
            child,
            dir,
            host,
            forwarder: None,
        };
        let address = registry.host.clone();
        captf_testenv::wait_for("the registry to listen", Duration::from_secs(30), || {
            let address = address.clone();
            async move { Ok(std::net::TcpStream::connect(&address).ok().map(|_| ())) }
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", registry.log()))?;
        registry.crane(&["auth", "login", &registry.host, "-u", USER, "-p", PASSWORD])?;
        Ok(registry)
    }

    /// Pushes an image with one empty layer and `labels` to `<host>/<repository_tag>`;
    /// returns its reference.
    pub fn push(&self, repository_tag: &str, labels: &[(&str, &str)]) -> anyhow::Result<String> {
        let reference = format!("{}/{repository_tag}", self.host);
        let layer = self.dir.join("empty.tar");
        // An empty tar archive: two zero blocks.
        std::fs::write(&layer, [0u8; 1024])?;
        self.crane(&[
            "append",
            "-f",
            layer.to_str().context("path")?,
            "-t",
            &reference,
        ])?;
        let mut args = vec!["mutate".to_owned(), reference.clone()];
        for (key, value) in labels {
            args.extend(["--label".to_owned(), format!("{key}={value}")]);
        }
        args.extend(["-t".to_owned(), reference.clone()]);
        self.crane(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
        Ok(reference)
    }

    /// Pushes a real image (`captf_testenv::oci`) to `<host>/<repository_tag>` with crane
    /// logged in; returns `<host>/<repository>@sha256:...`.
    pub fn push_image(
        &self,
        repository_tag: &str,
        image: &captf_testenv::oci::Image,
    ) -> anyhow::Result<String> {
        let reference = format!("{}/{repository_tag}", self.host);
        let crane = captf_testenv::oci::Crane {
            path: captf_testenv::tools::cache_dir().join("bin/crane"),
            docker_config: Some(self.dir.join("docker")),
        };
        let store = captf_testenv::images::store()?;
        let written = captf_testenv::oci::push(&store, &crane, image, &reference)?;
        let repository = reference
            .rsplit_once(':')
            .map_or(reference.as_str(), |(r, _)| r);
        Ok(format!("{repository}@{}", written.digest()))
    }

    /// Creates the pull Secret `registry` for this registry in `ns`, for `jobs.imagePullSecrets`.
    pub async fn pull_secret(&self, client: &kube::Client, ns: &str) -> anyhow::Result<()> {
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(client.clone(), ns);
        let secret = serde_json::json!({
            "metadata": {"name": "registry"},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": self.docker_config()},
        });
        secrets
            .create(&Default::default(), &serde_json::from_value(secret)?)
            .await?;
        Ok(())
    }

    /// The `.dockerconfigjson` of a pull Secret for this registry.
    pub fn docker_config(&self) -> String {
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
        serde_json::json!({"auths": {&self.host: {"auth": auth}}}).to_string()
    }

    /// Runs crane, logged in to this registry, and returns its output.
    pub fn crane(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(captf_testenv::tools::cache_dir().join("bin/crane"))
            .args(args)
            .env("DOCKER_CONFIG", self.dir.join("docker"))
            .stdin(Stdio::null())
            .output()
            .context("running crane")?;
        anyhow::ensure!(
            out.status.success(),
            "crane {}: {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The registry's log (for failure messages).
    pub fn log(&self) -> String {
        captf_testenv::control_plane::tail(&self.dir.join("registry.log"), 30)
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        if let Some(forwarder) = self.forwarder.take() {
            forwarder.abort();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A module image of `role` built as the standard images are (OpenTofu, no provider mirror)
/// from the module in `module`, told apart from others of the same module by `version`.
pub fn module_image(
    role: &str,
    module: &std::path::Path,
    version: &str,
) -> anyhow::Result<captf_testenv::oci::Image> {
    engine_module_image(role, module, version, false)
}

/// [`module_image`] with Terraform as its engine when `terraform`, else OpenTofu.
pub fn engine_module_image(
    role: &str,
    module: &std::path::Path,
    version: &str,
    terraform: bool,
) -> anyhow::Result<captf_testenv::oci::Image> {
    let tools = captf_testenv::tools::Tools::locate()?;
    let engine = if terraform {
        captf_testenv::images::terraform_engine(&tools.terraform)?
    } else {
        captf_testenv::images::tofu_engine(&tools.tofu)?
    };
    captf_testenv::images::module_image(captf_testenv::images::ModuleImage {
        role,
        module: captf_testenv::images::module_layer(role, module)?,
        engine: &engine,
        providers: None,
        version,
        revision: "test",
    })
}
