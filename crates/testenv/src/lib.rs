//! A real local Kubernetes control plane for CAPTF's tests and demo.
//!
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a node of containerd, the
//! kubelet and kube-proxy are the real binaries (built by `hack/build-tools.sh`, containerd and
//! runc from Debian); pods run as real containers from images in the node's registry (see
//! [`node`]).
//! A supervisor process owns all of it ([`supervisor`]); `captf-testenv up` starts one for
//! people, [`TestEnv::shared`] starts one per test binary that ends with the test binary.
#![forbid(unsafe_code)]

pub mod control_plane;
pub mod fixtures;
pub mod images;
pub mod node;
pub mod oci;
pub mod pki;
pub mod process;
pub mod supervisor;
pub mod tools;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

pub use supervisor::State;

/// Builds a client from a kubeconfig file.
pub async fn client_from_kubeconfig(path: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(path).with_context(|| path.display().to_string())?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// A running control plane.
#[derive(Clone, Debug)]
pub struct TestEnv {
    pub dir: PathBuf,
    pub state: State,
}

static SHARED: OnceLock<Result<TestEnv, String>> = OnceLock::new();

impl TestEnv {
    /// The control plane of this test binary, started on first use and stopped by its
    /// supervisor when the test binary exits. Panics with the reason if it cannot start.
    pub fn shared() -> &'static TestEnv {
        let env = SHARED.get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("captf-testenv-{}", std::process::id()));
            // CAPTF_TESTENV_KEEP=1 keeps the folder (logs, pods) for a look after a failure.
            let cleanup = std::env::var_os("CAPTF_TESTENV_KEEP").is_none();
            TestEnv::start(&dir, Some(std::process::id()), cleanup).map_err(|e| format!("{e:#}"))
        });
        match env {
            Ok(env) => env,
            Err(e) => panic!("the local control plane did not start: {e}"),
        }
    }

    /// Starts a supervisor for `dir` and waits until the control plane is ready.
    pub fn start(dir: &Path, watch_pid: Option<u32>, cleanup: bool) -> anyhow::Result<TestEnv> {
        std::fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        let log_path = dir.join("supervisor.log");
        let log = std::fs::File::create(&log_path)?;
        let mut command = Command::new(testenv_binary()?);
        command.arg("supervise").arg("--dir").arg(&dir);
        if let Some(pid) = watch_pid {
            command.arg("--watch-pid").arg(pid.to_string());
        }
        if cleanup {
            command.arg("--cleanup");
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .context("starting captf-testenv supervise")?;
        let state_file = dir.join("state.json");
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Ok(bytes) = std::fs::read(&state_file) {
                let state: State = serde_json::from_slice(&bytes)?;
                return Ok(TestEnv { dir, state });
            }
            if let Some(status) = child.try_wait()? {
                anyhow::bail!(
                    "supervisor exited ({status}):\n{}",
                    control_plane::tail(&log_path, 40)
                );
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "control plane not ready after 300s:\n{}",
                control_plane::tail(&log_path, 40)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Attaches to the control plane a supervisor already runs in `dir`.
    pub fn attach(dir: &Path) -> anyhow::Result<TestEnv> {
        let bytes = std::fs::read(dir.join("state.json")).with_context(|| {
            format!(
                "no control plane running in {} (start one with `captf-testenv up`)",
                dir.display()
            )
        })?;
        let state: State = serde_json::from_slice(&bytes)?;
        anyhow::ensure!(
            process::alive(state.supervisor_pid),
            "the supervisor of {} is gone",
            dir.display()
        );
        Ok(TestEnv {
            dir: dir.to_owned(),
            state,
        })
    }

    /// Restarts a component of the control plane (`etcd` or `kube-apiserver`: stopped, then
    /// started again with the same flags and data) and returns once it is healthy again.
    pub async fn restart(&self, component: &str) -> anyhow::Result<()> {
        let done = self.dir.join(supervisor::RESTART_DONE);
        let _ = std::fs::remove_file(&done);
        std::fs::write(self.dir.join(supervisor::RESTART_REQUEST), component)?;
        let pid = i32::try_from(self.state.supervisor_pid)?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGUSR1,
        )?;
        let outcome = wait_for(
            &format!("{component} restarted"),
            Duration::from_secs(180),
            || {
                let done = done.clone();
                async move { Ok(std::fs::read_to_string(&done).ok()) }
            },
        )
        .await?;
        anyhow::ensure!(outcome == format!("restarted {component}"), "{outcome}");
        Ok(())
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.state.kubeconfig
    }

    /// A new admin client (create one per test: a client belongs to the runtime it was made in).
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        client_from_kubeconfig(self.kubeconfig()).await
    }

    /// Creates a fresh namespace `<prefix>-<n>` and waits for its `default` ServiceAccount, so
    /// pods can be created in it at once.
    pub async fn namespace(&self, client: &kube::Client, prefix: &str) -> anyhow::Result<String> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let api: Api<Namespace> = Api::all(client.clone());
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), &name);
        let deadline = Instant::now() + Duration::from_secs(30);
        while sas.get_opt("default").await?.is_none() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "namespace {name} got no default ServiceAccount in 30s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(name)
    }

    /// Runs `ctr -n k8s.io <args>` against the node's containerd (the kubelet's namespace) and
    /// returns its output: what the runtime itself holds for a container, not the pod spec.
    pub fn ctr(&self, args: &[&str]) -> anyhow::Result<String> {
        let socket = node::NodeLayout {
            root: self.state.node_dir.clone(),
        }
        .containerd_socket();
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&socket)
            .args(["-n", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running ctr (Debian's containerd package)")?;
        anyhow::ensure!(
            out.status.success(),
            "ctr {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Tells the node's containerd to pull images named `name` (`address:port`) from
    /// `endpoint` over plain HTTP, as it does for `captf.local`; containerd reads this on every
    /// pull.
    pub fn route_registry(&self, name: &str, endpoint: &str) -> anyhow::Result<()> {
        let dir = node::NodeLayout {
            root: self.state.node_dir.clone(),
        }
        .registry_hosts()
        .join(name);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("hosts.toml"),
            node::config::registry_host(endpoint),
        )?;
        Ok(())
    }

    /// `host:port` of the node's image registry: push images there, reference them as
    /// `captf.local/<name>` (containerd resolves the name to it).
    pub fn registry(&self) -> &str {
        &self.state.registry
    }
}

/// The `captf-testenv` binary: `$CAPTF_TESTENV_BIN`, else next to the running executable
/// (tests run from `target/<profile>/deps/`, the binary sits in `target/<profile>/`).
fn testenv_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("CAPTF_TESTENV_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    let candidates = [
        exe.with_file_name("captf-testenv"),
        exe.parent()
            .and_then(Path::parent)
            .map(|p| p.join("captf-testenv"))
            .unwrap_or_default(),
    ];
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .context("captf-testenv binary not found next to the test binary; build it with `cargo build -p captf-testenv` or set CAPTF_TESTENV_BIN")
}

/// Polls `check` every 100 ms until it returns `Some`, failing after `timeout` with `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
