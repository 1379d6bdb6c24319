//! The HTTPS listeners of the manager (the secure metrics server and the admission webhooks):
//! rustls with ring, as kube's client uses, and a serving certificate read from a directory
//! and read again when its files change, as a mounted Secret does when cert-manager renews it.
//! A renewed certificate is served by the next handshake, without a restart.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use rustls::SupportedProtocolVersion;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Longest TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections a listener holds open at once, handshakes included; more wait in the
/// kernel's accept queue until one closes. Every connection holds buffers, and one that sends
/// a request body holds that body too.
pub const MAX_CONNECTIONS: usize = 64;
/// How often mounted certificate files are checked for a change.
pub const CERT_CHECK_INTERVAL: Duration = Duration::from_secs(10);

pub(crate) static FROM_TLS12: &[&SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];
pub(crate) static FROM_TLS13: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// The TLS versions `--tls-min-version` allows, or the flag's problem.
pub fn protocol_versions(
    flag: &str,
) -> Result<&'static [&'static SupportedProtocolVersion], String> {
    match flag {
        "VersionTLS12" => Ok(FROM_TLS12),
        "VersionTLS13" => Ok(FROM_TLS13),
        "VersionTLS10" | "VersionTLS11" => Err(format!(
            "--tls-min-version {flag:?}: TLS 1.0 and 1.1 are not supported; use VersionTLS12 or VersionTLS13"
        )),
        _ => Err(format!(
            "--tls-min-version {flag:?}: use VersionTLS12 or VersionTLS13"
        )),
    }
}

/// Where a serving certificate is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    pub dir: PathBuf,
    pub cert: String,
    pub key: String,
}

impl CertFiles {
    /// `tls.crt` and `tls.key` in `dir`, as controller-runtime names them.
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        CertFiles {
            dir: dir.into(),
            cert: "tls.crt".into(),
            key: "tls.key".into(),
        }
    }

    fn cert_path(&self) -> PathBuf {
        self.dir.join(&self.cert)
    }

    fn key_path(&self) -> PathBuf {
        self.dir.join(&self.key)
    }

    /// The modification times of both files, when both exist.
    fn stamp(&self) -> Stamp {
        let modified = |path: PathBuf| std::fs::metadata(path).and_then(|m| m.modified());
        Some((
            modified(self.cert_path()).ok()?,
            modified(self.key_path()).ok()?,
        ))
    }
}

/// What to serve when the certificate files do not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhenMissing {
    /// A self-signed certificate made at start (the metrics server: scrapers skip verification).
    SelfSign,
    /// Nothing: an error (the webhooks: the API server would refuse any other certificate).
    Refuse,
}

/// The server's TLS configuration and its certificate.
pub fn server_config(
    files: &CertFiles,
    when_missing: WhenMissing,
    tls_min_version: &str,
) -> Result<(Arc<rustls::ServerConfig>, Arc<ServingCert>), String> {
    let versions = protocol_versions(tls_min_version)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cert = Arc::new(ServingCert::load(files, when_missing, provider.clone())?);
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(cert.clone());
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(config), cert))
}

/// The modification times of the certificate and key files, when both exist.
type Stamp = Option<(SystemTime, SystemTime)>;

/// The serving certificate; swapped in place when the files it was read from change.
#[derive(Debug)]
pub struct ServingCert {
    files: CertFiles,
    /// Read from `files` (else self-signed, and never changed).
    pub(crate) from_files: bool,
    stamp: Mutex<Stamp>,
    current: RwLock<Arc<CertifiedKey>>,
    provider: Arc<CryptoProvider>,
}

impl ServingCert {
    /// The pair in `files` when both exist (an error when they do not make a certificate),
    /// else what `when_missing` says.
    fn load(
        files: &CertFiles,
        when_missing: WhenMissing,
        provider: Arc<CryptoProvider>,
    ) -> Result<ServingCert, String> {
        let stamp = files.stamp();
        let (key, from_files) = if stamp.is_some() {
            (read_pair(files, &provider)?, true)
        } else if when_missing == WhenMissing::Refuse {
            return Err(format!(
                "no certificate: {} and {} must both exist",
                files.cert_path().display(),
                files.key_path().display()
            ));
        } else {
            if files.cert_path().exists() || files.key_path().exists() {
                tracing::warn!(
                    dir = %files.dir.display(),
                    "only one of {} and {} exists: using a self-signed certificate",
                    files.cert,
                    files.key
                );
            }
            (self_signed(&provider)?, false)
        };
        Ok(ServingCert {
            files: files.clone(),
            from_files,
            stamp: Mutex::new(stamp),
            current: RwLock::new(Arc::new(key)),
            provider,
        })
    }

    pub fn origin(&self) -> String {
        if self.from_files {
            self.files.cert_path().display().to_string()
        } else {
            "self-signed".into()
        }
    }

    /// Reads the files again when they changed since the last read; `Ok(true)` when the new
    /// certificate is now served. A pair that does not load leaves the current one in place.
    pub(crate) fn refresh(&self) -> Result<bool, String> {
        if !self.from_files {
            return Ok(false);
        }
        let now = self.files.stamp();
        {
            let mut last = self.stamp.lock().unwrap_or_else(PoisonError::into_inner);
            if now.is_none() || now == *last {
                return Ok(false);
            }
            // Tried once per change: a half-written pair is retried when its second file lands.
            *last = now;
        }
        let key = read_pair(&self.files, &self.provider)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(key);
        Ok(true)
    }

    #[cfg(test)]
    pub(crate) fn served(&self) -> CertificateDer<'static> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .cert[0]
            .clone()
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// Checks the files every [`CERT_CHECK_INTERVAL`] and serves a changed pair; `server` names
/// the listener in the logs.
pub async fn watch_certificate(cert: Arc<ServingCert>, server: &'static str) {
    if !cert.from_files {
        return;
    }
    let mut tick = tokio::time::interval(CERT_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match cert.refresh() {
            Ok(true) => {
                tracing::info!(certificate = %cert.origin(), "{server}: certificate reloaded")
            }
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(%error, "{server}: keeping the previous certificate")
            }
        }
    }
}

fn read_pair(files: &CertFiles, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let read = |path: PathBuf| {
        std::fs::read(&path)
            .map(|bytes| (path.display().to_string(), bytes))
            .map_err(|e| format!("{}: {e}", path.display()))
    };
    let (crt_path, crt) = read(files.cert_path())?;
    let chain = CertificateDer::pem_slice_iter(&crt)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{crt_path}: {e}"))?;
    if chain.is_empty() {
        return Err(format!("{crt_path}: no certificate"));
    }
    let (key_path, key) = read(files.key_path())?;
    let key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("{key_path}: {e}"))?;
    CertifiedKey::from_der(chain, key, provider)
        .map_err(|e| format!("{crt_path} with {key_path}: {e}"))
}

fn self_signed(provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    // The pod's name, when it is a plain DNS label (anything else would fail the generation).
    if let Ok(host) = std::env::var("HOSTNAME")
        && !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    {
        names.push(host);
    }
    let generated = rcgen::generate_simple_self_signed(names)
        .map_err(|e| format!("self-signed certificate: {e}"))?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        generated.signing_key.serialize_der(),
    ));
    CertifiedKey::from_der(vec![generated.cert.der().clone()], key, provider)
        .map_err(|e| format!("self-signed certificate: {e}"))
}

/// A connection of a [`TlsListener`]: while it is open it holds one of the listener's
/// places.
pub struct Held<S> {
    io: S,
    _place: OwnedSemaphorePermit,
}

impl<S> Held<S> {
    /// `io`, holding `place` while it is open.
    pub fn new(io: S, place: OwnedSemaphorePermit) -> Self {
        Held { io, _place: place }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Held<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Held<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Connections that completed their TLS handshake. Handshakes run in their own tasks, so a
/// client that stalls one holds up no other; at most `max_connections` are open at once,
/// handshakes included.
pub struct TlsListener {
    ready: mpsc::Receiver<(Held<TlsStream<TcpStream>>, SocketAddr)>,
    local: SocketAddr,
}

/// Accepts on `tcp`, at most `max_connections` at once, and hands out connections once their
/// handshake is done; `server` names the listener in the logs.
pub fn tls_listener(
    tcp: TcpListener,
    config: Arc<rustls::ServerConfig>,
    server: &'static str,
    max_connections: usize,
) -> std::io::Result<TlsListener> {
    let acceptor = TlsAcceptor::from(config);
    let local = tcp.local_addr()?;
    let (sender, ready) = mpsc::channel(max_connections.max(1));
    let places = Arc::new(Semaphore::new(max_connections));
    tokio::spawn(async move {
        loop {
            // A place first: past the cap, connections wait in the kernel's queue, unread.
            let place = tokio::select! {
                _ = sender.closed() => return,
                place = places.clone().acquire_owned() => place,
            };
            let Ok(place) = place else { return };
            let accepted = tokio::select! {
                _ = sender.closed() => return,
                accepted = tcp.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::debug!(%error, "{server}: accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let acceptor = acceptor.clone();
            let sender = sender.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => {
                        let held = Held {
                            io: tls,
                            _place: place,
                        };
                        let _ = sender.send((held, peer)).await;
                    }
                    Ok(Err(error)) => {
                        tracing::debug!(%peer, %error, "{server}: TLS handshake failed")
                    }
                    Err(_) => tracing::debug!(%peer, "{server}: TLS handshake timed out"),
                }
            });
        }
    });
    Ok(TlsListener { ready, local })
}

impl axum::serve::Listener for TlsListener {
    type Io = Held<TlsStream<TcpStream>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept loop only ends once this receiver is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// Test helpers shared by the servers' tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::SystemTime;

    use rustls::pki_types::CertificateDer;

    /// A fresh directory under the system temp dir.
    pub fn temp_dir(name: &str) -> PathBuf {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "captf-tls-{}-{name}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    /// Writes a certificate for `localhost` into `dir` as `tls.crt`/`tls.key` with the given
    /// modification time; returns it.
    pub fn write_cert(dir: &Path, modified: SystemTime) -> CertificateDer<'static> {
        let generated =
            rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("cert");
        for (name, text) in [
            ("tls.crt", generated.cert.pem()),
            ("tls.key", generated.signing_key.serialize_pem()),
        ] {
            std::fs::write(dir.join(name), text).expect("write");
            std::fs::File::options()
                .write(true)
                .open(dir.join(name))
                .and_then(|f| f.set_modified(modified))
                .expect("mtime");
        }
        generated.cert.der().clone()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::testing::{temp_dir, write_cert};
    use super::*;

    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    fn load(dir: &Path, when_missing: WhenMissing) -> Result<ServingCert, String> {
        ServingCert::load(&CertFiles::in_dir(dir), when_missing, provider())
    }

    #[test]
    fn tls_versions() {
        assert_eq!(protocol_versions("VersionTLS12").expect("12").len(), 2);
        assert_eq!(
            protocol_versions("VersionTLS13").expect("13"),
            &[&rustls::version::TLS13]
        );
        for (flag, says) in [
            ("VersionTLS10", "not supported"),
            ("VersionTLS11", "not supported"),
            ("VersionTLS14", "use VersionTLS12 or VersionTLS13"),
            ("1.2", "use VersionTLS12 or VersionTLS13"),
        ] {
            let err = protocol_versions(flag).expect_err(flag);
            assert!(err.contains(says), "{err}");
        }
    }

    #[test]
    fn certificates_come_from_the_directory_else_are_self_signed_or_refused() {
        let empty = temp_dir("empty");
        let generated = load(&empty, WhenMissing::SelfSign).expect("self-signed");
        assert!(!generated.from_files);
        assert_eq!(generated.origin(), "self-signed");
        assert_eq!(generated.refresh(), Ok(false));
        let missing = load(&empty.join("nope"), WhenMissing::SelfSign).expect("self-signed");
        assert!(!missing.from_files);
        let err = load(&empty, WhenMissing::Refuse).expect_err("refused");
        assert!(
            err.contains("tls.crt") && err.contains("must both exist"),
            "{err}"
        );

        let dir = temp_dir("files");
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let first = write_cert(&dir, t0);
        let cert = load(&dir, WhenMissing::Refuse).expect("from files");
        assert!(cert.from_files);
        assert_eq!(cert.served(), first);
        assert_eq!(
            cert.refresh(),
            Ok(false),
            "unchanged files are not read again"
        );

        let second = write_cert(&dir, t0 + Duration::from_secs(60));
        assert_eq!(cert.refresh(), Ok(true));
        assert_eq!(cert.served(), second);

        // A broken pair keeps the served certificate, and is not retried until it changes.
        std::fs::write(dir.join("tls.key"), "not a key").expect("write");
        let err = cert.refresh().expect_err("broken key");
        assert!(err.contains("tls.key"), "{err}");
        assert_eq!(cert.served(), second);
        assert_eq!(cert.refresh(), Ok(false));

        // A broken pair at start is a start-up error, not a silent self-signed certificate.
        let err = load(&dir, WhenMissing::SelfSign).expect_err("broken");
        assert!(err.contains("tls.key"), "{err}");
        std::fs::write(dir.join("tls.crt"), "nothing").expect("write");
        let err = load(&dir, WhenMissing::SelfSign).expect_err("no certificate");
        assert!(err.contains("no certificate"), "{err}");
        // One file alone: self-signed.
        std::fs::remove_file(dir.join("tls.key")).expect("rm");
        assert!(
            !load(&dir, WhenMissing::SelfSign)
                .expect("self-signed")
                .from_files
        );
        // Other file names.
        let named = temp_dir("named");
        write_cert(&named, t0);
        std::fs::rename(named.join("tls.crt"), named.join("serving.pem")).expect("mv");
        let files = CertFiles {
            cert: "serving.pem".into(),
            ..CertFiles::in_dir(&named)
        };
        let cert = ServingCert::load(&files, WhenMissing::Refuse, provider()).expect("named");
        assert!(cert.origin().ends_with("serving.pem"));
        for d in [dir, empty, named] {
            let _ = std::fs::remove_dir_all(&d);
        }
    }
}
