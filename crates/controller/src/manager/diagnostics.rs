//! The secure metrics server (`--diagnostics-address` without `--insecure-diagnostics`):
//! `/metrics` over HTTPS, each scrape authenticated by a TokenReview and authorized by a
//! SubjectAccessReview for `get` on the non-resource URL `/metrics`, as controller-runtime's
//! authenticated metrics filter does.
//!
//! The certificate is `tls.crt` and `tls.key` from [`CERT_DIR`] when both exist (read again
//! when they change, as a mounted Secret does when it is renewed), else a self-signed one made
//! at start. Decisions are remembered for [`DECISION_TTL`] per token (by its SHA-256), so a
//! scraper costs two API calls per token and period, not per scrape.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{
    TokenReview, TokenReviewSpec, TokenReviewStatus, UserInfo,
};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};
use kube::api::{Api, PostParams};
use rustls::SupportedProtocolVersion;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::Error;

/// Where a serving certificate is read from (`tls.crt`, `tls.key`), as in controller-runtime.
pub const CERT_DIR: &str = "/tmp/k8s-metrics-server/serving-certs";
/// The non-resource URL a scraper must be allowed to `get`.
const METRICS_PATH: &str = "/metrics";
/// How long a decision about a token is remembered (allowed or refused).
const DECISION_TTL: Duration = Duration::from_secs(10);
/// Tokens remembered at most.
const DECISION_CAPACITY: usize = 1024;
/// Longest wait for the API server's answer to one review.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often mounted certificate files are checked for a change.
const CERT_CHECK_INTERVAL: Duration = Duration::from_secs(10);

static FROM_TLS12: &[&SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];
static FROM_TLS13: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];

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

/// Serves `metrics` (the `/metrics` router) on `address` over HTTPS, behind TokenReview and
/// SubjectAccessReview made with `client`.
pub async fn serve(
    address: &str,
    tls_min_version: &str,
    client: kube::Client,
    metrics: Router,
) -> Result<(), Error> {
    let startup = |e: String| Error::Startup(format!("metrics server: {e}"));
    let (config, cert) = tls_config(Path::new(CERT_DIR), tls_min_version).map_err(startup)?;
    let addr = super::args::bind_address(address).map_err(Error::Startup)?;
    let tcp = TcpListener::bind(addr)
        .await
        .map_err(|e| startup(format!("{addr}: {e}")))?;
    tracing::info!(
        %addr,
        tls_min_version,
        certificate = %cert.origin(),
        "metrics server listening (HTTPS; TokenReview and SubjectAccessReview)"
    );
    if cert.from_files {
        tokio::spawn(watch_certificate(cert));
    }
    run(tcp, config, client, metrics).await
}

/// Serves over an already bound listener.
async fn run(
    tcp: TcpListener,
    config: Arc<rustls::ServerConfig>,
    client: kube::Client,
    metrics: Router,
) -> Result<(), Error> {
    let listener = tls_listener(tcp, TlsAcceptor::from(config))
        .map_err(|e| Error::Startup(format!("metrics server: {e}")))?;
    let auth = Arc::new(Auth::new(client));
    let app = metrics.layer(axum::middleware::from_fn_with_state(auth, authorize));
    axum::serve(listener, app)
        .await
        .map_err(|e| Error::Startup(format!("metrics server: {e}")))
}

// --- TLS ---------------------------------------------------------------------------------

/// The server's TLS configuration (ring, as kube's client) and its certificate.
fn tls_config(
    cert_dir: &Path,
    tls_min_version: &str,
) -> Result<(Arc<rustls::ServerConfig>, Arc<ServingCert>), String> {
    let versions = protocol_versions(tls_min_version)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cert = Arc::new(ServingCert::load(cert_dir, provider.clone())?);
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(cert.clone());
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(config), cert))
}

/// The modification times of `tls.crt` and `tls.key`, when both exist.
type Stamp = Option<(SystemTime, SystemTime)>;

/// The serving certificate; swapped in place when the files it was read from change.
#[derive(Debug)]
struct ServingCert {
    dir: PathBuf,
    /// Read from `dir` (else self-signed, and never changed).
    from_files: bool,
    stamp: Mutex<Stamp>,
    current: RwLock<Arc<CertifiedKey>>,
    provider: Arc<CryptoProvider>,
}

impl ServingCert {
    /// `tls.crt` and `tls.key` from `dir` when both exist (an error when they do not make a
    /// certificate), else a self-signed certificate.
    fn load(dir: &Path, provider: Arc<CryptoProvider>) -> Result<ServingCert, String> {
        let stamp = stamp(dir);
        let (key, from_files) = if stamp.is_some() {
            (read_pair(dir, &provider)?, true)
        } else {
            if dir.join("tls.crt").exists() || dir.join("tls.key").exists() {
                tracing::warn!(
                    dir = %dir.display(),
                    "only one of tls.crt and tls.key exists: using a self-signed certificate"
                );
            }
            (self_signed(&provider)?, false)
        };
        Ok(ServingCert {
            dir: dir.to_owned(),
            from_files,
            stamp: Mutex::new(stamp),
            current: RwLock::new(Arc::new(key)),
            provider,
        })
    }

    fn origin(&self) -> String {
        if self.from_files {
            format!("{}/tls.crt", self.dir.display())
        } else {
            "self-signed".into()
        }
    }

    /// Reads the files again when they changed since the last read; `Ok(true)` when the new
    /// certificate is now served. A pair that does not load leaves the current one in place.
    fn refresh(&self) -> Result<bool, String> {
        if !self.from_files {
            return Ok(false);
        }
        let now = stamp(&self.dir);
        {
            let mut last = self.stamp.lock().unwrap_or_else(PoisonError::into_inner);
            if now.is_none() || now == *last {
                return Ok(false);
            }
            // Tried once per change: a half-written pair is retried when its second file lands.
            *last = now;
        }
        let key = read_pair(&self.dir, &self.provider)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(key);
        Ok(true)
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

async fn watch_certificate(cert: Arc<ServingCert>) {
    let mut tick = tokio::time::interval(CERT_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match cert.refresh() {
            Ok(true) => {
                tracing::info!(certificate = %cert.origin(), "metrics server: certificate reloaded")
            }
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(%error, "metrics server: keeping the previous certificate")
            }
        }
    }
}

fn stamp(dir: &Path) -> Stamp {
    let modified = |name: &str| std::fs::metadata(dir.join(name)).and_then(|m| m.modified());
    Some((modified("tls.crt").ok()?, modified("tls.key").ok()?))
}

fn read_pair(dir: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path)
            .map(|bytes| (path.display().to_string(), bytes))
            .map_err(|e| format!("{}: {e}", path.display()))
    };
    let (crt_path, crt) = read("tls.crt")?;
    let chain = CertificateDer::pem_slice_iter(&crt)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{crt_path}: {e}"))?;
    if chain.is_empty() {
        return Err(format!("{crt_path}: no certificate"));
    }
    let (key_path, key) = read("tls.key")?;
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

/// Connections that completed their TLS handshake. Handshakes run in their own tasks, so a
/// client that stalls one holds up no other.
struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

fn tls_listener(tcp: TcpListener, acceptor: TlsAcceptor) -> std::io::Result<TlsListener> {
    let local = tcp.local_addr()?;
    let (sender, ready) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = sender.closed() => return,
                accepted = tcp.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::debug!(%error, "metrics server: accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let acceptor = acceptor.clone();
            let sender = sender.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => {
                        let _ = sender.send((tls, peer)).await;
                    }
                    Ok(Err(error)) => {
                        tracing::debug!(%peer, %error, "metrics server: TLS handshake failed")
                    }
                    Err(_) => tracing::debug!(%peer, "metrics server: TLS handshake timed out"),
                }
            });
        }
    });
    Ok(TlsListener { ready, local })
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
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

// --- Authentication and authorization ----------------------------------------------------

/// What a scrape gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// The metrics.
    Allowed,
    /// 401: no bearer token, or one the API server does not authenticate.
    Unauthenticated,
    /// 403: the token's user may not `get` `/metrics`.
    Forbidden,
    /// 503: the API server could not be asked (never remembered).
    Unavailable,
}

impl Outcome {
    fn refusal(self) -> Response {
        match self {
            Outcome::Allowed => StatusCode::OK.into_response(),
            Outcome::Unauthenticated => (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "Unauthorized: send a Kubernetes bearer token\n",
            )
                .into_response(),
            Outcome::Forbidden => (
                StatusCode::FORBIDDEN,
                "Forbidden: this user may not get /metrics\n",
            )
                .into_response(),
            Outcome::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "The token could not be reviewed; try again\n",
            )
                .into_response(),
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The user a TokenReview authenticated, if any.
fn authenticated_user(review: Option<&TokenReviewStatus>) -> Option<&UserInfo> {
    let review = review?;
    if review.authenticated != Some(true) {
        return None;
    }
    review
        .user
        .as_ref()
        .filter(|u| u.username.as_deref().is_some_and(|n| !n.is_empty()))
}

/// Asks whether `user` may `get` `/metrics`.
fn access_review(user: &UserInfo) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(METRICS_PATH.into()),
                verb: Some("get".into()),
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// What a scrape gets from the TokenReview's status and, when that authenticated a user, the
/// SubjectAccessReview's. A review without a status refuses.
fn outcome(
    review: Option<&TokenReviewStatus>,
    access: Option<&SubjectAccessReviewStatus>,
) -> Outcome {
    if authenticated_user(review).is_none() {
        return Outcome::Unauthenticated;
    }
    match access {
        Some(access) if access.allowed && access.denied != Some(true) => Outcome::Allowed,
        _ => Outcome::Forbidden,
    }
}

/// Decisions by token hash, each until it expires; at most `capacity` of them.
struct DecisionCache {
    entries: Mutex<HashMap<[u8; 32], (Instant, Outcome)>>,
    ttl: Duration,
    capacity: usize,
}

impl DecisionCache {
    fn new(ttl: Duration, capacity: usize) -> Self {
        DecisionCache {
            entries: Mutex::new(HashMap::new()),
            ttl,
            capacity: capacity.max(1),
        }
    }

    fn get(&self, key: &[u8; 32], now: Instant) -> Option<Outcome> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(key)
            .filter(|(until, _)| now < *until)
            .map(|(_, outcome)| *outcome)
    }

    fn insert(&self, key: [u8; 32], outcome: Outcome, now: Instant) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (until, _)| now < *until);
            if entries.len() >= self.capacity {
                let soonest = entries
                    .iter()
                    .min_by_key(|(_, (until, _))| *until)
                    .map(|(k, _)| *k);
                if let Some(soonest) = soonest {
                    entries.remove(&soonest);
                }
            }
        }
        entries.insert(key, (now + self.ttl, outcome));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// Reviews tokens with the API server.
struct Auth {
    client: kube::Client,
    decisions: DecisionCache,
}

impl Auth {
    fn new(client: kube::Client) -> Self {
        Auth {
            client,
            decisions: DecisionCache::new(DECISION_TTL, DECISION_CAPACITY),
        }
    }

    async fn decide(&self, token: &str) -> Outcome {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(outcome) = self.decisions.get(&key, Instant::now()) {
            return outcome;
        }
        let outcome = self.review(token).await;
        if outcome != Outcome::Unavailable {
            self.decisions.insert(key, outcome, Instant::now());
        }
        outcome
    }

    async fn review(&self, token: &str) -> Outcome {
        let reviews: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        let Some(review) = ask(
            "TokenReview",
            reviews.create(&PostParams::default(), &review),
        )
        .await
        else {
            return Outcome::Unavailable;
        };
        let Some(user) = authenticated_user(review.status.as_ref()) else {
            tracing::debug!("metrics scrape: token not authenticated");
            return Outcome::Unauthenticated;
        };
        let accesses: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let Some(access) = ask(
            "SubjectAccessReview",
            accesses.create(&PostParams::default(), &access_review(user)),
        )
        .await
        else {
            return Outcome::Unavailable;
        };
        let outcome = outcome(review.status.as_ref(), access.status.as_ref());
        tracing::debug!(
            user = user.username.as_deref().unwrap_or(""),
            ?outcome,
            "metrics scrape reviewed"
        );
        outcome
    }
}

async fn ask<T>(what: &str, call: impl Future<Output = kube::Result<T>>) -> Option<T> {
    match tokio::time::timeout(REVIEW_TIMEOUT, call).await {
        Ok(Ok(answer)) => Some(answer),
        Ok(Err(error)) => {
            tracing::warn!(%error, "metrics scrape: {what} failed");
            None
        }
        Err(_) => {
            tracing::warn!("metrics scrape: {what} timed out");
            None
        }
    }
}

/// Lets a request through to `/metrics` only for a token whose user may `get` it.
async fn authorize(State(auth): State<Arc<Auth>>, request: Request, next: Next) -> Response {
    let token = bearer_token(request.headers()).map(str::to_owned);
    let outcome = match token {
        None => Outcome::Unauthenticated,
        Some(token) => auth.decide(&token).await,
    };
    match outcome {
        Outcome::Allowed => next.run(request).await,
        refused => refused.refusal(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use axum::http::HeaderValue;
    use axum::routing::{get, post};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

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
    fn bearer_tokens() {
        for (header, token) in [
            (None, None),
            (Some("Bearer abc"), Some("abc")),
            (Some("bearer  abc "), Some("abc")),
            (Some("BEARER abc"), Some("abc")),
            (Some("Bearer "), None),
            (Some("Bearer"), None),
            (Some("Basic YTpi"), None),
            (Some("abc"), None),
        ] {
            let mut headers = HeaderMap::new();
            if let Some(h) = header {
                headers.insert(header::AUTHORIZATION, HeaderValue::from_static(h));
            }
            assert_eq!(bearer_token(&headers), token, "{header:?}");
        }
    }

    fn user(name: &str) -> UserInfo {
        UserInfo {
            username: Some(name.into()),
            groups: Some(vec!["system:serviceaccounts".into()]),
            uid: Some("u-1".into()),
            extra: Some(BTreeMap::from([(
                "authentication.kubernetes.io/pod-name".into(),
                vec!["p".into()],
            )])),
        }
    }

    fn review(authenticated: Option<bool>, user: Option<UserInfo>) -> TokenReviewStatus {
        TokenReviewStatus {
            authenticated,
            user,
            ..Default::default()
        }
    }

    fn access(allowed: bool, denied: Option<bool>) -> SubjectAccessReviewStatus {
        SubjectAccessReviewStatus {
            allowed,
            denied,
            ..Default::default()
        }
    }

    #[test]
    fn outcomes() {
        use Outcome::*;
        let someone = Some(user("system:serviceaccount:ns:reader"));
        let allowed = access(true, None);
        let not_allowed = access(false, None);
        let denied = access(false, Some(true));
        let contradictory = access(true, Some(true));
        let cases: [(
            Option<TokenReviewStatus>,
            Option<&SubjectAccessReviewStatus>,
            Outcome,
        ); 10] = [
            (None, Some(&allowed), Unauthenticated),
            (
                Some(review(None, someone.clone())),
                Some(&allowed),
                Unauthenticated,
            ),
            (
                Some(review(Some(false), someone.clone())),
                Some(&allowed),
                Unauthenticated,
            ),
            (
                Some(review(Some(true), None)),
                Some(&allowed),
                Unauthenticated,
            ),
            (
                Some(review(Some(true), Some(user("")))),
                Some(&allowed),
                Unauthenticated,
            ),
            (
                Some(review(Some(true), someone.clone())),
                Some(&allowed),
                Allowed,
            ),
            (
                Some(review(Some(true), someone.clone())),
                Some(&not_allowed),
                Forbidden,
            ),
            (
                Some(review(Some(true), someone.clone())),
                Some(&denied),
                Forbidden,
            ),
            (
                Some(review(Some(true), someone.clone())),
                Some(&contradictory),
                Forbidden,
            ),
            (Some(review(Some(true), someone.clone())), None, Forbidden),
        ];
        for (i, (review, access, want)) in cases.iter().enumerate() {
            assert_eq!(outcome(review.as_ref(), *access), *want, "case {i}");
        }
    }

    #[test]
    fn the_access_review_asks_for_get_on_metrics_as_the_user() {
        let u = user("system:serviceaccount:ns:reader");
        let spec = access_review(&u).spec;
        assert_eq!(spec.user, u.username);
        assert_eq!(spec.groups, u.groups);
        assert_eq!(spec.uid, u.uid);
        assert_eq!(spec.extra, u.extra);
        assert_eq!(
            spec.non_resource_attributes,
            Some(NonResourceAttributes {
                path: Some("/metrics".into()),
                verb: Some("get".into())
            })
        );
        assert!(spec.resource_attributes.is_none());
    }

    #[test]
    fn decisions_expire_and_stay_bounded() {
        let cache = DecisionCache::new(Duration::from_secs(10), 3);
        let t0 = Instant::now();
        let key = |n: u8| [n; 32];
        cache.insert(key(1), Outcome::Allowed, t0);
        assert_eq!(
            cache.get(&key(1), t0 + Duration::from_secs(9)),
            Some(Outcome::Allowed)
        );
        assert_eq!(cache.get(&key(1), t0 + Duration::from_secs(10)), None);
        assert_eq!(cache.get(&key(2), t0), None);
        cache.insert(key(2), Outcome::Forbidden, t0 + Duration::from_secs(1));
        cache.insert(
            key(3),
            Outcome::Unauthenticated,
            t0 + Duration::from_secs(2),
        );
        // Full: the entry expiring soonest makes room.
        cache.insert(key(4), Outcome::Allowed, t0 + Duration::from_secs(3));
        assert_eq!(cache.len(), 3);
        let at = t0 + Duration::from_secs(3);
        assert_eq!(cache.get(&key(1), at), None);
        assert_eq!(cache.get(&key(2), at), Some(Outcome::Forbidden));
        assert_eq!(cache.get(&key(4), at), Some(Outcome::Allowed));
        // Full of expired entries: all of them go.
        cache.insert(key(5), Outcome::Allowed, t0 + Duration::from_secs(60));
        assert_eq!(cache.len(), 1);
        // Overwriting a key never evicts another.
        cache.insert(key(5), Outcome::Forbidden, t0 + Duration::from_secs(61));
        assert_eq!(
            cache.get(&key(5), t0 + Duration::from_secs(61)),
            Some(Outcome::Forbidden)
        );
    }

    /// A fresh directory under the system temp dir.
    fn temp_dir(name: &str) -> PathBuf {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "captf-diagnostics-{}-{name}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    /// Writes a certificate for `localhost` into `dir` with the given modification time;
    /// returns it.
    fn write_cert(dir: &Path, modified: SystemTime) -> CertificateDer<'static> {
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

    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    fn served(cert: &ServingCert) -> CertificateDer<'static> {
        cert.current.read().expect("lock").cert[0].clone()
    }

    #[test]
    fn certificates_come_from_the_directory_else_are_self_signed() {
        let empty = temp_dir("empty");
        let generated = ServingCert::load(&empty, provider()).expect("self-signed");
        assert!(!generated.from_files);
        assert_eq!(generated.origin(), "self-signed");
        assert_eq!(generated.refresh(), Ok(false));
        let missing = ServingCert::load(&empty.join("nope"), provider()).expect("self-signed");
        assert!(!missing.from_files);

        let dir = temp_dir("files");
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let first = write_cert(&dir, t0);
        let cert = ServingCert::load(&dir, provider()).expect("from files");
        assert!(cert.from_files);
        assert_eq!(served(&cert), first);
        assert_eq!(
            cert.refresh(),
            Ok(false),
            "unchanged files are not read again"
        );

        let second = write_cert(&dir, t0 + Duration::from_secs(60));
        assert_eq!(cert.refresh(), Ok(true));
        assert_eq!(served(&cert), second);

        // A broken pair keeps the served certificate, and is not retried until it changes.
        std::fs::write(dir.join("tls.key"), "not a key").expect("write");
        let err = cert.refresh().expect_err("broken key");
        assert!(err.contains("tls.key"), "{err}");
        assert_eq!(served(&cert), second);
        assert_eq!(cert.refresh(), Ok(false));

        // A broken pair at start is a start-up error, not a silent self-signed certificate.
        let err = ServingCert::load(&dir, provider()).expect_err("broken");
        assert!(err.contains("tls.key"), "{err}");
        std::fs::write(dir.join("tls.crt"), "nothing").expect("write");
        let err = ServingCert::load(&dir, provider()).expect_err("no certificate");
        assert!(err.contains("no certificate"), "{err}");
        // One file alone: self-signed.
        std::fs::remove_file(dir.join("tls.key")).expect("rm");
        assert!(
            !ServingCert::load(&dir, provider())
                .expect("self-signed")
                .from_files
        );
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&empty);
    }

    /// A fake API server: tokens `reader` and `nobody` authenticate as ServiceAccounts of
    /// those names, others do not; only `reader` may get /metrics. Counts TokenReviews, and
    /// answers them with 500 while `failing` is set.
    #[derive(Default)]
    struct Fake {
        token_reviews: AtomicUsize,
        failing: AtomicBool,
    }

    async fn fake_api_server(fake: Arc<Fake>) -> kube::Client {
        let json =
            |v: serde_json::Value| ([(header::CONTENT_TYPE, "application/json")], v.to_string());
        let app = Router::new()
            .route(
                "/apis/authentication.k8s.io/v1/tokenreviews",
                post(move |body: axum::body::Bytes| async move {
                    fake.token_reviews.fetch_add(1, Ordering::Relaxed);
                    if fake.failing.load(Ordering::Relaxed) {
                        return (StatusCode::INTERNAL_SERVER_ERROR, "etcd is down").into_response();
                    }
                    let review: TokenReview = serde_json::from_slice(&body).expect("TokenReview");
                    let status = match review.spec.token.as_deref() {
                        Some(t @ ("reader" | "nobody")) => serde_json::json!({
                            "authenticated": true,
                            "user": {"username": format!("system:serviceaccount:ns:{t}"), "groups": ["system:serviceaccounts"], "uid": "1"}
                        }),
                        _ => serde_json::json!({"authenticated": false, "error": "invalid token"}),
                    };
                    json(serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {}, "spec": {}, "status": status})).into_response()
                }),
            )
            .route(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                post(move |body: axum::body::Bytes| async move {
                    let sar: SubjectAccessReview = serde_json::from_slice(&body).expect("SAR");
                    let attrs = sar.spec.non_resource_attributes.unwrap_or_default();
                    let allowed = sar.spec.user.as_deref() == Some("system:serviceaccount:ns:reader")
                        && attrs.path.as_deref() == Some("/metrics")
                        && attrs.verb.as_deref() == Some("get");
                    json(serde_json::json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {}, "spec": {}, "status": {"allowed": allowed}}))
                }),
            );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        let config = kube::Config::new(format!("http://{addr}").parse().expect("uri"));
        kube::Client::try_from(config).expect("client")
    }

    /// Starts the secure server with the certificate in `dir`; returns its address.
    async fn start(dir: &Path, min: &str, client: kube::Client) -> SocketAddr {
        let (config, _cert) = tls_config(dir, min).expect("TLS config");
        let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = tcp.local_addr().expect("addr");
        let metrics = Router::new().route("/metrics", get(|| async { "captf_build_info 1\n" }));
        tokio::spawn(run(tcp, config, client, metrics));
        addr
    }

    /// GETs /metrics over TLS trusting only `cert`; `(status, headers and body)`.
    async fn scrape(
        addr: SocketAddr,
        cert: &CertificateDer<'static>,
        versions: &[&'static SupportedProtocolVersion],
        token: Option<&str>,
    ) -> std::io::Result<(u16, String)> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.clone()).expect("root");
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = TcpStream::connect(addr).await?;
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await?;
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        tls.write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}\r\n")
                .as_bytes(),
        )
        .await?;
        let mut response = Vec::new();
        if let Err(e) = tls.read_to_end(&mut response).await
            && (e.kind() != std::io::ErrorKind::UnexpectedEof || response.is_empty())
        {
            return Err(e);
        }
        let response = String::from_utf8_lossy(&response).into_owned();
        let status = response
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Ok((status, response))
    }

    #[tokio::test]
    async fn scrapes_are_authenticated_authorized_and_remembered() {
        let dir = temp_dir("serve");
        let cert = write_cert(&dir, SystemTime::now());
        let fake = Arc::new(Fake::default());
        let addr = start(&dir, "VersionTLS12", fake_api_server(fake.clone()).await).await;
        let reviews = &fake.token_reviews;
        let tls12 = &[&rustls::version::TLS12][..];

        let (status, response) = scrape(addr, &cert, tls12, None).await.expect("no token");
        assert_eq!(status, 401, "{response}");
        assert!(
            response.to_lowercase().contains("www-authenticate: bearer"),
            "{response}"
        );
        assert_eq!(reviews.load(Ordering::Relaxed), 0, "no token, no review");

        let (status, response) = scrape(addr, &cert, tls12, Some("forged"))
            .await
            .expect("forged");
        assert_eq!(status, 401, "{response}");
        let (status, response) = scrape(addr, &cert, tls12, Some("nobody"))
            .await
            .expect("nobody");
        assert_eq!(status, 403, "{response}");
        assert!(!response.contains("captf_build_info"), "{response}");
        for _ in 0..3 {
            let (status, response) = scrape(addr, &cert, FROM_TLS13, Some("reader"))
                .await
                .expect("reader");
            assert_eq!(status, 200, "{response}");
            assert!(response.contains("captf_build_info 1"), "{response}");
        }
        assert_eq!(reviews.load(Ordering::Relaxed), 3, "one review per token");
        let (status, _) = scrape(addr, &cert, tls12, Some("nobody"))
            .await
            .expect("again");
        assert_eq!(
            (status, reviews.load(Ordering::Relaxed)),
            (403, 3),
            "refusals are remembered too"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_failing_api_server_refuses_with_503_and_is_asked_again() {
        let dir = temp_dir("failing");
        let cert = write_cert(&dir, SystemTime::now());
        let fake = Arc::new(Fake::default());
        fake.failing.store(true, Ordering::Relaxed);
        let addr = start(&dir, "VersionTLS12", fake_api_server(fake.clone()).await).await;
        let (status, response) = scrape(addr, &cert, FROM_TLS12, Some("reader"))
            .await
            .expect("scrape");
        assert_eq!(status, 503, "{response}");
        fake.failing.store(false, Ordering::Relaxed);
        let (status, response) = scrape(addr, &cert, FROM_TLS12, Some("reader"))
            .await
            .expect("scrape");
        assert_eq!(status, 200, "{response}");
        assert_eq!(fake.token_reviews.load(Ordering::Relaxed), 2);

        // Nothing listening at all.
        let port = TcpListener::bind("127.0.0.1:0")
            .await
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let client = kube::Client::try_from(kube::Config::new(
            format!("http://127.0.0.1:{port}").parse().expect("uri"),
        ))
        .expect("client");
        let addr = start(&dir, "VersionTLS12", client).await;
        let (status, response) = scrape(addr, &cert, FROM_TLS12, Some("reader"))
            .await
            .expect("scrape");
        assert_eq!(status, 503, "{response}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn tls13_minimum_refuses_tls12_clients() {
        let dir = temp_dir("tls13");
        let cert = write_cert(&dir, SystemTime::now());
        let addr = start(&dir, "VersionTLS13", fake_api_server(Arc::default()).await).await;
        assert!(
            scrape(addr, &cert, &[&rustls::version::TLS12], None)
                .await
                .is_err(),
            "a TLS 1.2 client must not get through"
        );
        let (status, _) = scrape(addr, &cert, FROM_TLS13, None)
            .await
            .expect("TLS 1.3");
        assert_eq!(status, 401);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
