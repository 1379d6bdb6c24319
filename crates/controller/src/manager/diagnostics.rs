//! The secure metrics server (`--diagnostics-address` without `--insecure-diagnostics`):
//! `/metrics` over HTTPS, each scrape authenticated by a TokenReview and authorized by a
//! SubjectAccessReview for `get` on the non-resource URL `/metrics`, as controller-runtime's
//! authenticated metrics filter does.
//!
//! The certificate is `tls.crt` and `tls.key` from [`CERT_DIR`] when both exist (read again
//! when they change, as a mounted Secret does when it is renewed), else a self-signed one made
//! at start. Decisions are remembered for `DECISION_TTL` per token (by its SHA-256), so a
//! scraper costs two API calls per token and period, not per scrape.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

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
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;

use crate::Error;
use crate::tls::{CertFiles, WhenMissing, server_config, tls_listener, watch_certificate};

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

/// Serves `metrics` (the `/metrics` router) on `address` over HTTPS, behind TokenReview and
/// SubjectAccessReview made with `client`.
pub async fn serve(
    address: &str,
    tls_min_version: &str,
    client: kube::Client,
    metrics: Router,
) -> Result<(), Error> {
    let startup = |e: String| Error::Startup(format!("metrics server: {e}"));
    let files = CertFiles::in_dir(CERT_DIR);
    let (config, cert) =
        server_config(&files, WhenMissing::SelfSign, tls_min_version).map_err(startup)?;
    let addr = crate::settings::bind_address(address).map_err(Error::Startup)?;
    let tcp = TcpListener::bind(addr)
        .await
        .map_err(|e| startup(format!("{addr}: {e}")))?;
    let addr = tcp.local_addr().unwrap_or(addr);
    tracing::info!(
        %addr,
        tls_min_version,
        certificate = %cert.origin(),
        "metrics server listening (HTTPS; TokenReview and SubjectAccessReview)"
    );
    tokio::spawn(watch_certificate(cert, "metrics server"));
    run(tcp, config, client, metrics).await
}

/// Serves over an already bound listener.
async fn run(
    tcp: TcpListener,
    config: Arc<rustls::ServerConfig>,
    client: kube::Client,
    metrics: Router,
) -> Result<(), Error> {
    let listener = tls_listener(tcp, config, "metrics server", crate::tls::MAX_CONNECTIONS)
        .map_err(|e| Error::Startup(format!("metrics server: {e}")))?;
    let auth = Arc::new(Auth::new(client));
    let app = metrics.layer(axum::middleware::from_fn_with_state(auth, authorize));
    let timeout = crate::http::TLS_HEADER_TIMEOUT;
    crate::http::serve(listener, app, timeout, "metrics server").await;
    Ok(())
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

    use std::net::SocketAddr;
    use std::path::Path;
    use std::time::SystemTime;

    use axum::http::HeaderValue;
    use axum::routing::{get, post};
    use rustls::SupportedProtocolVersion;
    use rustls::pki_types::CertificateDer;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::tls::testing::{temp_dir, write_cert};
    use crate::tls::{FROM_TLS12, FROM_TLS13};

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
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
        let (config, _cert) =
            server_config(&CertFiles::in_dir(dir), WhenMissing::SelfSign, min).expect("TLS config");
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
