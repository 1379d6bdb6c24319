//! Shared pieces of the end-to-end suites: the module and runner images in the node's registry,
//! the manager as a real process, and waits with deadlines.
#![forbid(unsafe_code)]

pub mod alerts;
pub mod capi;
pub mod demo;
pub mod engine;
pub mod fixture;
pub mod install;
pub mod passes;
pub mod registry;
pub mod stand_in;
pub mod templates;
pub mod webhooks;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use captf_testenv::TestEnv;
use captf_testenv::process::served;
use captf_testenv::tools::Tools;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `captf` binary built next to the test executable (`cargo test --workspace` builds it).
pub fn captf_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("CAPTF_BIN_CAPTF") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    let candidates = [
        exe.with_file_name("captf"),
        exe.parent()
            .and_then(Path::parent)
            .map(|p| p.join("captf"))
            .unwrap_or_default(),
    ];
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .context("the captf binary is not built next to the tests: run `cargo build -p captf` (or set CAPTF_BIN_CAPTF)")
}

/// The images of a test run, pushed into each environment's registry once by
/// [`write_images`]: the manager image (its `/runner` is what every Job's init container copies)
/// and the standard module images (`captf.local/modules/noop-<role>:e2e` with OpenTofu,
/// `...:e2e-terraform` with Terraform, `captf.local/modules/time-cluster:...` with a real
/// provider), all built by `captf_testenv::images`.
#[derive(Clone, Debug)]
pub struct Images {
    /// `captf.local/captf@sha256:...`: the manager's `--runner-image`, pinned by digest.
    pub runner: String,
    /// By name under the registry (`modules/noop-cluster:e2e`, ...).
    pub pushed: std::collections::BTreeMap<String, captf_testenv::images::PushedImage>,
}

impl Images {
    /// `captf.local/<name>@sha256:...` of a standard image.
    pub fn pinned(&self, name: &str) -> anyhow::Result<String> {
        let image = self
            .pushed
            .get(name)
            .with_context(|| format!("no standard image {name}"))?;
        let repository = name.rsplit_once(':').map_or(name, |(r, _)| r);
        Ok(format!(
            "{}/{repository}@{}",
            captf_testenv::node::IMAGE_REGISTRY,
            image.digest
        ))
    }
}

/// Pushes the standard images into the node's registry once per environment (tests run in
/// parallel; the push is idempotent but not free). The static `captf` binary must be built
/// first (`captf_testenv::images::CAPTF_STATIC_BUILD`; `hack/test-all.sh` does).
pub fn write_images(env: &TestEnv) -> anyhow::Result<Images> {
    // Per registry: a test binary may run a second environment (a rebuilt management
    // cluster), whose node pulls from its own registry.
    static WRITTEN: std::sync::Mutex<std::collections::BTreeMap<String, Images>> =
        std::sync::Mutex::new(std::collections::BTreeMap::new());
    let mut written = WRITTEN
        .lock()
        .map_err(|_| anyhow::anyhow!("a test panicked while pushing images"))?;
    if let Some(images) = written.get(env.registry()) {
        return Ok(images.clone());
    }
    let images = write_images_now(env)?;
    written.insert(env.registry().to_owned(), images.clone());
    Ok(images)
}

fn write_images_now(env: &TestEnv) -> anyhow::Result<Images> {
    let captf = captf_testenv::images::require_captf_static()?;
    let tools = Tools::locate()?;
    let pushed = captf_testenv::images::push_standard(&tools, env.registry(), &captf, "e2e")?;
    let mut images = Images {
        runner: String::new(),
        pushed,
    };
    images.runner = images.pinned("captf:e2e")?;
    Ok(images)
}

/// Applies every document of a YAML file (server-side apply, as the installer would).
pub async fn apply_file(client: &kube::Client, path: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    apply_yaml(client, &text).await
}

/// Applies YAML documents with server-side apply.
pub async fn apply_yaml(client: &kube::Client, yaml: &str) -> anyhow::Result<()> {
    use serde::Deserialize;
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value = serde_json::Value::deserialize(doc)?;
        if value.is_null() {
            continue;
        }
        let object: DynamicObject = serde_json::from_value(value.clone())?;
        let types = object
            .types
            .clone()
            .context("object without apiVersion/kind")?;
        let (group, version) = types
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", &types.api_version));
        let gvk = GroupVersionKind::gvk(group, version, &types.kind);
        let plural = plural(&types.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
        let name = object
            .metadata
            .name
            .clone()
            .context("object without a name")?;
        let api: Api<DynamicObject> = match &object.metadata.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        api.patch(
            &name,
            &PatchParams::apply("captf-e2e").force(),
            &Patch::Apply(&value),
        )
        .await
        .with_context(|| format!("applying {} {name}", types.kind))?;
    }
    Ok(())
}

/// The resource name of `kind`, as the API server pluralizes the kinds these tests apply
/// (`TerraformClusterIdentity` to `terraformclusteridentities`, `ValidatingAdmissionPolicy` to
/// `validatingadmissionpolicies`, `ClusterClass` to `clusterclasses`, `Secret` to `secrets`).
fn plural(kind: &str) -> String {
    let lower = kind.to_lowercase();
    match lower.strip_suffix('y') {
        Some(stem) if !stem.ends_with(['a', 'e', 'i', 'o', 'u']) => format!("{stem}ies"),
        _ if lower.ends_with('s') => format!("{lower}es"),
        _ => format!("{lower}s"),
    }
}

/// Installs the manager's ServiceAccount and RBAC from `config/rbac` and writes a kubeconfig
/// for that ServiceAccount, so the manager runs with exactly the permissions an install grants.
pub async fn manager_kubeconfig(env: &TestEnv, client: &kube::Client) -> anyhow::Result<PathBuf> {
    apply_yaml(
        client,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: captf-system}\n",
    )
    .await?;
    let rbac = workspace().join("config/rbac");
    for file in [
        "service_account.yaml",
        "role.yaml",
        "role_binding.yaml",
        "leader_election_role.yaml",
        "runner_clusterrole.yaml",
    ] {
        apply_file(client, &rbac.join(file)).await?;
    }
    let token = service_account_token(client, "captf-system", "captf-controller-manager").await?;
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD
        .encode(std::fs::read(env.dir.join("pki/ca.crt"))?);
    // Tests in one binary run this at once: each call writes its own file, so a manager never
    // reads one another test is still writing.
    static WRITES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = env.dir.join(format!("manager-{n}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\nusers:\n- name: manager\n  user:\n    token: {token}\ncontexts:\n- name: manager\n  context: {{cluster: local, user: manager}}\ncurrent-context: manager\n",
            env.state.server
        ),
    )?;
    Ok(path)
}

/// A token of a ServiceAccount (TokenRequest, valid for a day, the API server's audience).
pub async fn service_account_token(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<String> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(86_400),
            ..Default::default()
        },
        ..Default::default()
    };
    let token: TokenRequest = sas
        .create_subresource("token", name, &kube::api::PostParams::default(), &request)
        .await
        .with_context(|| format!("a token for {namespace}/{name}"))?;
    Ok(token.status.context("no token")?.token)
}

/// A `captf manager` process; killed when dropped.
pub struct Manager {
    child: Child,
    pub metrics: String,
    pub health: String,
    log: PathBuf,
}

impl Manager {
    /// Starts `captf manager` with `kubeconfig` (see [`manager_kubeconfig`]) and `extra` flags,
    /// serving `/metrics` over plain HTTP without authentication (`--insecure-diagnostics`).
    pub fn start(
        env: &TestEnv,
        kubeconfig: &Path,
        name: &str,
        extra: &[&str],
    ) -> anyhow::Result<Manager> {
        Self::spawn(env, kubeconfig, name, extra, true, None)
    }

    /// Like [`Manager::start`], but the manager aborts, as a killed process would, the moment a
    /// pass reaches crash point `point` (`CAPTF_TEST_CRASH_AT`, see
    /// `crates/controller/src/failpoint.rs`).
    pub fn start_crashing_at(
        env: &TestEnv,
        kubeconfig: &Path,
        name: &str,
        extra: &[&str],
        point: &str,
    ) -> anyhow::Result<Manager> {
        Self::spawn(env, kubeconfig, name, extra, true, Some(point))
    }

    /// Waits until the process has ended, and says how.
    pub async fn ended(&mut self, timeout: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let child = &mut self.child;
        let mut status = None;
        captf_testenv::wait_for("the manager to end", timeout, || {
            status = status.or(child.try_wait().ok().flatten());
            std::future::ready(Ok(status.map(|_| ())))
        })
        .await
        .with_context(|| {
            format!(
                "manager log:\n{}",
                captf_testenv::control_plane::tail(&self.log, 60)
            )
        })?;
        status.context("no exit status")
    }

    /// Like [`Manager::start`], but `/metrics` is the secure server: HTTPS with its
    /// self-signed certificate, behind TokenReview and SubjectAccessReview (see
    /// [`Manager::get_https`]).
    pub fn start_secure(
        env: &TestEnv,
        kubeconfig: &Path,
        name: &str,
        extra: &[&str],
    ) -> anyhow::Result<Manager> {
        Self::spawn(env, kubeconfig, name, extra, false, None)
    }

    fn spawn(
        env: &TestEnv,
        kubeconfig: &Path,
        name: &str,
        extra: &[&str],
        insecure: bool,
        crash_at: Option<&str>,
    ) -> anyhow::Result<Manager> {
        let log = env.dir.join(format!("manager-{name}.log"));
        let out = std::fs::File::create(&log)?;
        // Port 0 and the bound port read back from the log: a port picked free beforehand
        // can be taken by any connection before the manager binds it.
        let mut child = Command::new(captf_binary()?)
            .arg("manager")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--runner-image={}", write_images(env)?.runner))
            .arg("--diagnostics-address=127.0.0.1:0")
            .arg("--health-addr=127.0.0.1:0")
            .args(insecure.then_some("--insecure-diagnostics"))
            .arg("--log-level=info,captf_controller=debug")
            // No webhooks unless the test registers them (tests/webhooks/).
            .args(
                (!extra.iter().any(|f| f.starts_with("--webhook-port")))
                    .then_some("--webhook-port=0"),
            )
            .args(extra)
            .env("POD_NAMESPACE", "captf-system")
            .env("SERVICE_ACCOUNT_NAME", "captf-controller-manager")
            .env("POD_NAME", format!("manager-{name}"))
            .envs(crash_at.map(|point| ("CAPTF_TEST_CRASH_AT", point)))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting captf manager")?;
        let [health, metrics] = match served(&mut child, &log, &["health", "metrics"]) {
            Ok(bound) => bound,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        Ok(Manager {
            child,
            metrics: format!(
                "{}://{metrics}/metrics",
                if insecure { "http" } else { "https" }
            ),
            health: format!("http://{health}"),
            log,
        })
    }

    /// The end of the manager's log so far (for failure messages).
    pub fn log(&self) -> String {
        captf_testenv::control_plane::tail(&self.log, 60)
    }

    /// The manager's whole log so far (for what a test asserts was logged, or never was).
    pub fn whole_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until a line of the manager's log satisfies `wanted`, and returns that line. A
    /// line logged after the effect it reports (removed, then logged) can lag what a test
    /// observed through the API, so reading the log once would race.
    pub async fn logged(
        &self,
        what: &str,
        timeout: Duration,
        wanted: impl Fn(&str) -> bool,
    ) -> anyhow::Result<String> {
        captf_testenv::wait_for(what, timeout, || async {
            Ok(self
                .whole_log()
                .lines()
                .find(|l| wanted(l))
                .map(str::to_owned))
        })
        .await
        .with_context(|| format!("manager log:\n{}", self.whole_log()))
    }

    /// GETs a URL of the manager (plain HTTP on loopback).
    pub fn get(url: &str) -> anyhow::Result<String> {
        use std::io::{Read, Write};
        let rest = url.strip_prefix("http://").context("http URL")?;
        let (host, path) = rest
            .split_once('/')
            .map(|(h, p)| (h, format!("/{p}")))
            .unwrap_or((rest, "/".into()));
        let mut stream = std::net::TcpStream::connect(host)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
        let mut body = String::new();
        stream.read_to_string(&mut body)?;
        Ok(body
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or(body))
    }

    /// GETs an `https://` URL of the manager, with `Authorization: Bearer <token>` when a
    /// token is given; `(status, body)`. Any server certificate is accepted (the manager's is
    /// self-signed and made at start), but its handshake signatures are checked.
    pub fn get_https(url: &str, token: Option<&str>) -> anyhow::Result<(u16, String)> {
        use std::io::{Read, Write};
        let rest = url.strip_prefix("https://").context("https URL")?;
        let (host, path) = rest
            .split_once('/')
            .map(|(h, p)| (h, format!("/{p}")))
            .unwrap_or((rest, "/".into()));
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(std::sync::Arc::new(AnyCertificate::new(provider)))
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("localhost")?;
        let connection = rustls::ClientConnection::new(std::sync::Arc::new(config), name)?;
        let tcp = std::net::TcpStream::connect(host)?;
        tcp.set_read_timeout(Some(Duration::from_secs(15)))?;
        tcp.set_write_timeout(Some(Duration::from_secs(15)))?;
        let mut tls = rustls::StreamOwned::new(connection, tcp);
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        write!(tls, "GET {path} HTTP/1.0\r\nHost: {host}\r\n{auth}\r\n")?;
        tls.flush()?;
        let mut response = Vec::new();
        if let Err(e) = tls.read_to_end(&mut response) {
            // A server that closes without close_notify still sent its whole response.
            if e.kind() != std::io::ErrorKind::UnexpectedEof || response.is_empty() {
                return Err(e.into());
            }
        }
        let response = String::from_utf8_lossy(&response).into_owned();
        let (head, body) = response
            .split_once("\r\n\r\n")
            .context("no HTTP response")?;
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("no status in {head:?}"))?;
        Ok((status, body.to_owned()))
    }

    /// Whether the process still runs.
    /// SIGKILL: the process gets no chance to clean up (a crash, a lost node).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The most memory the process has held resident so far (`VmHWM`), in bytes.
    pub fn peak_resident_bytes(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .context("no VmHWM")?
            .trim()
            .parse::<u64>()?;
        Ok(kib * 1024)
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`): the process stalls as in a long pause or a frozen
    /// node, and resumes where it stood.
    pub fn stall(&self, stalled: bool) -> anyhow::Result<()> {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let pid = i32::try_from(self.child.id()).context("pid")?;
        let signal = if stalled {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        };
        kill(Pid::from_raw(pid), signal).context("signal")?;
        Ok(())
    }

    /// Sends SIGTERM (what the kubelet sends a stopping pod) and waits up to `within` for the
    /// process to exit; its exit status.
    pub async fn terminate(
        &mut self,
        within: std::time::Duration,
    ) -> anyhow::Result<std::process::ExitStatus> {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let pid = i32::try_from(self.child.id()).context("pid")?;
        kill(Pid::from_raw(pid), Signal::SIGTERM).context("SIGTERM")?;
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the manager did not exit within {within:?} of SIGTERM:\n{}",
                self.log()
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The certificate (DER) a TLS server on loopback `port` presents.
pub fn served_certificate(port: u16) -> anyhow::Result<Vec<u8>> {
    served_certificate_at((std::net::Ipv4Addr::LOCALHOST, port).into())
}

/// The DER certificate a TLS server at `address` presents.
pub fn served_certificate_at(address: std::net::SocketAddr) -> anyhow::Result<Vec<u8>> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let verifier = std::sync::Arc::new(AnyCertificate::new(provider.clone()));
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost")?;
    let mut connection = rustls::ClientConnection::new(std::sync::Arc::new(config), name)?;
    let mut tcp = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(10))?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    while connection.is_handshaking() {
        connection.complete_io(&mut tcp)?;
    }
    let seen = verifier
        .seen
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    Ok(seen)
}

/// Accepts any server certificate (tests only), still checking the handshake signatures, and
/// remembers the last one it was shown.
#[derive(Debug)]
struct AnyCertificate {
    provider: std::sync::Arc<rustls::crypto::CryptoProvider>,
    seen: std::sync::Mutex<Vec<u8>>,
}

impl AnyCertificate {
    fn new(provider: std::sync::Arc<rustls::crypto::CryptoProvider>) -> Self {
        AnyCertificate {
            provider,
            seen: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if let Ok(mut seen) = self.seen.lock() {
            *seen = end_entity.to_vec();
        }
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn plurals_as_the_api_server_names_them() {
        for (kind, plural) in [
            ("Secret", "secrets"),
            ("TerraformClusterIdentity", "terraformclusteridentities"),
            ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
            (
                "ValidatingAdmissionPolicyBinding",
                "validatingadmissionpolicybindings",
            ),
            ("Gateway", "gateways"),
        ] {
            assert_eq!(super::plural(kind), plural, "{kind}");
        }
    }
}
