//! CAPTF installed as a Cluster API user installs it (`captf_e2e::install`): cert-manager, then
//! `clusterctl init` of the core provider and CAPTF from a local repository, every controller a
//! Deployment on the test node. One installation serves the binary; tests that stop or change
//! the manager hold it alone ([`exclusive`]), the others share it ([`shared`]).

mod certificate;
mod environment;
mod fail_closed;
mod moving;
mod provisioning;
mod recovery;

use std::time::Duration;

use captf_e2e::install::{self, Installed};
use captf_testenv::{TestEnv, wait_for};
use tokio::sync::{OnceCell, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Applies and destroys run through the test node one after the other.
pub const LONG: Duration = Duration::from_secs(300);

static INSTALLED: OnceCell<Installed> = OnceCell::const_new();
static TARGET: OnceCell<(TestEnv, Installed)> = OnceCell::const_new();
static MANAGER: RwLock<()> = RwLock::const_new(());

/// The installation and a client; the first caller installs.
pub async fn installed() -> (&'static TestEnv, kube::Client, &'static Installed) {
    let env = TestEnv::shared();
    let client = env.client().await.expect("client");
    let installed = INSTALLED
        .get_or_try_init(|| install::install(env, &client))
        .await
        .unwrap_or_else(|e| panic!("installing with clusterctl: {e:#}\n{}", logs(env)));
    (env, client, installed)
}

/// A second management cluster with CAPTF installed the same way: where `clusterctl move` and
/// the recovery drill take what the first one made. Started by the first caller, stopped when
/// the test binary exits.
pub async fn target() -> (&'static TestEnv, kube::Client, &'static Installed) {
    let (env, installed) = TARGET
        .get_or_try_init(|| async {
            let dir =
                std::env::temp_dir().join(format!("captf-testenv-{}-target", std::process::id()));
            let cleanup = std::env::var_os("CAPTF_TESTENV_KEEP").is_none();
            let env = tokio::task::spawn_blocking(move || {
                TestEnv::start(&dir, Some(std::process::id()), cleanup)
            })
            .await??;
            let client = env.client().await?;
            let installed = install::install(&env, &client).await?;
            anyhow::Ok((env, installed))
        })
        .await
        .unwrap_or_else(|e| panic!("the second management cluster: {e:#}"));
    let client = env.client().await.expect("client");
    (env, client, installed)
}

/// For a test that relies on the manager as installed; waits until it is available (a test
/// before may have changed and restored it).
pub async fn shared(client: &kube::Client) -> RwLockReadGuard<'static, ()> {
    let guard = MANAGER.read().await;
    available(client).await;
    guard
}

/// For a test that stops or changes the manager: no other test runs meanwhile. It restores
/// what it changed with a [`Restore`], which runs even when it fails.
pub async fn exclusive(client: &kube::Client) -> RwLockWriteGuard<'static, ()> {
    let guard = MANAGER.write().await;
    available(client).await;
    guard
}

async fn available(client: &kube::Client) {
    install::available(client, install::NAMESPACE, install::DEPLOYMENT)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the manager as installed: {e:#}\n{}",
                logs(TestEnv::shared())
            )
        });
}

/// A kubectl command that puts the installed manager back as it was, run when the test that
/// changed it ends, however it ends.
pub struct Restore(pub Vec<String>);

impl Drop for Restore {
    fn drop(&mut self) {
        let args: Vec<&str> = self.0.iter().map(String::as_str).collect();
        if let Err(e) = install::kubectl(TestEnv::shared(), &args) {
            eprintln!("restoring the manager: {e:#}");
        }
    }
}

/// The last lines of every manager pod's log and the Cluster API manager's, for failures.
pub fn logs(env: &TestEnv) -> String {
    let mut out = String::new();
    for (ns, selector) in [
        (install::NAMESPACE, "control-plane=controller-manager"),
        ("capi-system", "cluster.x-k8s.io/provider=cluster-api"),
    ] {
        let text = install::kubectl(
            env,
            &[
                "logs",
                "-n",
                ns,
                "-l",
                selector,
                "--prefix",
                "--tail=40",
                "--all-containers",
            ],
        )
        .unwrap_or_else(|e| format!("{e:#}"));
        out.push_str(&format!("--- {ns} ({selector}):\n{text}\n"));
    }
    out
}

/// A fresh namespace with the identity `noop-<ns>` allowed in it.
pub async fn namespace(env: &TestEnv, client: &kube::Client, prefix: &str) -> String {
    let ns = env.namespace(client, prefix).await.expect("namespace");
    captf_e2e::fixture::identity(client, &ns).await;
    ns
}

/// Waits for `what` with the installation's logs on failure.
pub async fn wait<T, F, Fut>(env: &TestEnv, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    wait_for(what, LONG, check)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", logs(env)))
}
