//! The HTTP side of reading an image config: manifest, (index,) config blob, with the
//! registry's Basic or Bearer authentication and redirects to blob storage.
//!
//! A tenant names the registry, so a registry is untrusted: it must not make the manager fetch
//! from anywhere else it can reach (a redirect or a token realm is followed only where
//! [`refused_hop`] allows), and nothing it answers beyond the status reaches an error, which
//! becomes a condition and an event the tenant reads (an error's body is never read; URLs are
//! shown without their query).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use captf_api::image::ImageReference;
use http::{HeaderValue, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::auth::{Challenge, Credential, Keyring, parse_challenge};
use super::manifest::{self, Manifest};

/// A manifest or config larger than this is refused (both are a few KiB in practice).
const MAX_BODY: usize = 4 << 20;
/// Registries redirect blobs to storage once; more is a loop.
const MAX_REDIRECTS: usize = 3;
/// The whole inspection, all requests together.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Why an image's labels could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The registry wants credentials it was not given, or refused them.
    #[error("{0}")]
    Unauthorized(String),
    /// No such repository, tag or digest.
    #[error("{0}")]
    NotFound(String),
    /// The registry could not be reached or failed.
    #[error("{0}")]
    Unreachable(String),
    /// The registry answered with something that is not a valid image.
    #[error("{0}")]
    Invalid(String),
    /// The registry redirected (or sent for a token) where the manager does not go.
    #[error("{0}")]
    Refused(String),
}

/// A client for registries, shared by every inspection.
#[derive(Clone)]
pub struct Registry {
    http: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

impl Registry {
    /// Trusts the system's root certificates.
    pub fn new() -> std::io::Result<Self> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Registry {
            http: Client::builder(TokioExecutor::new()).build(https),
        })
    }

    /// The labels of the config of `image` (for an index, of its linux/amd64 image), read
    /// with the credential `keyring` holds for its registry, within [`TIMEOUT`].
    pub async fn labels(
        &self,
        image: &ImageReference,
        keyring: &Keyring,
    ) -> Result<BTreeMap<String, String>, InspectError> {
        self.labels_within(image, keyring, TIMEOUT).await
    }

    /// [`Registry::labels`] within `timeout`, for all requests together.
    pub async fn labels_within(
        &self,
        image: &ImageReference,
        keyring: &Keyring,
        timeout: Duration,
    ) -> Result<BTreeMap<String, String>, InspectError> {
        let mut session = self.session(image, keyring, CredentialSource::PullSecrets, false);
        tokio::time::timeout(timeout, session.labels(image))
            .await
            .unwrap_or_else(|_| {
                Err(InspectError::Unreachable(format!(
                    "the registry {} did not answer within {}s",
                    image.registry,
                    timeout.as_secs()
                )))
            })
    }

    /// A session with the registry of `image`, answering its challenges with the credential
    /// `keyring` holds (which came `from` there); `insecure` speaks plain HTTP to it.
    pub(super) fn session<'a>(
        &'a self,
        image: &'a ImageReference,
        keyring: &'a Keyring,
        from: CredentialSource,
        insecure: bool,
    ) -> Session<'a> {
        Session {
            http: &self.http,
            base: if insecure {
                format!("http://{}", image.registry)
            } else {
                endpoint(&image.registry)
            },
            repository: &image.repository,
            credential: keyring.for_registry(&image.registry),
            from,
            authorization: None,
        }
    }
}

/// Where a session's credentials come from, for what a refusal tells the user to do.
#[derive(Clone, Copy, Debug)]
pub(super) enum CredentialSource {
    /// The object's image pull Secrets (the manager).
    PullSecrets,
    /// The user's docker or containers auth files (the command line).
    AuthFiles,
}

impl CredentialSource {
    fn refused(self) -> &'static str {
        match self {
            CredentialSource::PullSecrets => "the registry refused the pull Secret's credentials",
            CredentialSource::AuthFiles => "the registry refused the credentials of the auth file",
        }
    }

    fn missing(self) -> &'static str {
        match self {
            CredentialSource::PullSecrets => "no pull Secret holds credentials for this registry",
            CredentialSource::AuthFiles => {
                "no auth file holds credentials for this registry: log in (`crane auth login`, `docker login` or `podman login`)"
            }
        }
    }

    fn fix(self) -> &'static str {
        match self {
            CredentialSource::PullSecrets => {
                "no pull Secret in spec.template.spec.jobs.imagePullSecrets holds credentials for this registry: add one"
            }
            CredentialSource::AuthFiles => self.missing(),
        }
    }
}

/// `scheme://host[:port]` of a registry's API. Loopback registries speak plain HTTP, as
/// Docker and go-containerregistry assume; Docker Hub's API lives at registry-1.docker.io.
pub fn endpoint(registry: &str) -> String {
    let host = registry.rsplit_once(':').map_or(registry, |(h, port)| {
        if port.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            registry
        }
    });
    let loopback = host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match registry {
        "docker.io" => "https://registry-1.docker.io".to_owned(),
        _ if loopback => format!("http://{registry}"),
        _ => format!("https://{registry}"),
    }
}

pub(super) struct Session<'a> {
    http: &'a Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    base: String,
    repository: &'a str,
    credential: Option<&'a Credential>,
    from: CredentialSource,
    /// The `Authorization` value once a challenge was answered.
    authorization: Option<HeaderValue>,
}

impl Session<'_> {
    async fn labels(
        &mut self,
        image: &ImageReference,
    ) -> Result<BTreeMap<String, String>, InspectError> {
        let base = self.base.clone();
        let invalid = |e: String| InspectError::Invalid(format!("{base}: {e}"));
        let repository = self.repository;
        let (content_type, body) = self.named_manifest(image).await?;
        let config = match manifest::parse(content_type.as_deref(), &body).map_err(invalid)? {
            Manifest::Image { config } => config,
            Manifest::Index { chosen } => {
                let (content_type, body) = self
                    .get(
                        &format!("/v2/{repository}/manifests/{chosen}"),
                        Some(manifest::ACCEPT),
                    )
                    .await?;
                manifest::verify(&chosen, &body).map_err(invalid)?;
                match manifest::parse(content_type.as_deref(), &body).map_err(invalid)? {
                    Manifest::Image { config } => config,
                    Manifest::Index { .. } => {
                        return Err(invalid("an image index inside an image index".into()));
                    }
                }
            }
        };
        let (_, body) = self
            .get(&format!("/v2/{repository}/blobs/{config}"), None)
            .await?;
        manifest::verify(&config, &body).map_err(invalid)?;
        manifest::labels(&body).map_err(invalid)
    }

    /// The manifest `image` names (its digest, else its tag, else `latest`), checked against
    /// the digest when it names one.
    pub(super) async fn named_manifest(
        &mut self,
        image: &ImageReference,
    ) -> Result<(Option<String>, Bytes), InspectError> {
        let reference = image
            .digest
            .as_deref()
            .or(image.tag.as_deref())
            .unwrap_or("latest");
        let repository = self.repository;
        let (content_type, body) = self
            .get(
                &format!("/v2/{repository}/manifests/{reference}"),
                Some(manifest::ACCEPT),
            )
            .await?;
        if let Some(digest) = &image.digest {
            manifest::verify(digest, &body)
                .map_err(|e| InspectError::Invalid(format!("{}: {e}", self.base)))?;
        }
        Ok((content_type, body))
    }

    /// GETs `path` of the registry and reads at most [`MAX_BODY`] of it.
    pub(super) async fn get(
        &mut self,
        path: &str,
        accept: Option<&str>,
    ) -> Result<(Option<String>, Bytes), InspectError> {
        let (url, response) = self.fetch(path, accept).await?;
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = short_body(&url, response).await?;
        Ok((content_type, body))
    }

    /// Writes the blob `digest` of the repository to `file`, at most `max` bytes, and checks
    /// it against its digest (a blob that does not match is removed).
    pub(super) async fn blob_to_file(
        &mut self,
        digest: &str,
        file: &std::path::Path,
        max: u64,
    ) -> Result<(), InspectError> {
        use sha2::{Digest, Sha256};
        use tokio::io::AsyncWriteExt;
        let repository = self.repository;
        let (url, response) = self
            .fetch(&format!("/v2/{repository}/blobs/{digest}"), None)
            .await?;
        let write_error =
            |e: std::io::Error| InspectError::Unreachable(format!("{}: {e}", file.display()));
        let mut out = tokio::fs::File::create(file).await.map_err(write_error)?;
        let mut hash = Sha256::new();
        let mut written = 0u64;
        let mut body = response.into_body();
        // A large layer may take long; a registry that stops sending must not hang the caller.
        while let Some(frame) = tokio::time::timeout(TIMEOUT, body.frame())
            .await
            .map_err(|_| {
                InspectError::Unreachable(format!(
                    "GET {}: no data for {}s",
                    shown(&url),
                    TIMEOUT.as_secs()
                ))
            })?
        {
            let frame = frame.map_err(|e| {
                InspectError::Unreachable(format!("GET {}: reading the blob: {e}", shown(&url)))
            })?;
            if let Some(data) = frame.data_ref() {
                written += data.len() as u64;
                if written > max {
                    drop(out);
                    let _ = tokio::fs::remove_file(file).await;
                    return Err(InspectError::Invalid(format!(
                        "GET {}: the blob is larger than {} MiB: over the size cap",
                        shown(&url),
                        max >> 20
                    )));
                }
                hash.update(data);
                out.write_all(data).await.map_err(write_error)?;
            }
        }
        out.flush().await.map_err(write_error)?;
        let got = format!("sha256:{}", hex::encode(hash.finalize()));
        if got != digest {
            drop(out);
            let _ = tokio::fs::remove_file(file).await;
            return Err(InspectError::Invalid(format!(
                "GET {}: the registry served content with digest {got}",
                shown(&url)
            )));
        }
        Ok(())
    }

    /// GETs `path` of the registry: answers one authentication challenge, follows redirects
    /// that [`refused_hop`] allows (without the registry's credentials to another host); a
    /// success's response, whose body is left to the caller.
    async fn fetch(
        &mut self,
        path: &str,
        accept: Option<&str>,
    ) -> Result<(String, hyper::Response<hyper::body::Incoming>), InspectError> {
        let mut url = format!("{}{path}", self.base);
        let mut challenged = false;
        let mut redirects = 0;
        loop {
            let same_host = url.starts_with(&format!("{}/", self.base));
            let authorization = self.authorization.clone().filter(|_| same_host);
            let response = self.send(&url, accept, authorization).await?;
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED && same_host && !challenged {
                challenged = true;
                let challenge = response
                    .headers()
                    .get(header::WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(parse_challenge);
                self.authorization = Some(self.answer(&url, challenge).await?);
                continue;
            }
            if status.is_redirection() {
                redirects += 1;
                let location = response
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .filter(|_| redirects <= MAX_REDIRECTS)
                    .ok_or_else(|| {
                        InspectError::Unreachable(format!(
                            "GET {}: HTTP {status} without a usable redirect",
                            shown(&url)
                        ))
                    })?;
                let next = resolve(&url, location);
                if let Some(refusal) = refused_hop(&url, &next) {
                    return Err(InspectError::Refused(format!(
                        "GET {}: HTTP {status}: the redirect to {} was not followed: {refusal}",
                        shown(&url),
                        origin(&next)
                    )));
                }
                url = next;
                continue;
            }
            if status.is_success() {
                return Ok((url, response));
            }
            // The body of an error is never read: the server may not be a registry at all, and
            // its words must not reach a condition, an event or a log the tenant can read.
            drop(response);
            let target = shown(&url);
            return match status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                    Err(InspectError::Unauthorized(format!(
                        "GET {target}: HTTP {status}: {}",
                        if self.credential.is_some() {
                            self.from.refused()
                        } else {
                            self.from.missing()
                        }
                    )))
                }
                StatusCode::NOT_FOUND => Err(InspectError::NotFound(format!(
                    "GET {target}: HTTP 404: no such repository, tag or digest; check the image reference"
                ))),
                _ if status.is_server_error() => Err(InspectError::Unreachable(format!(
                    "GET {target}: HTTP {status} from the registry {}: try again later, or ask its operator",
                    origin(&url)
                ))),
                _ => Err(InspectError::Unreachable(format!(
                    "GET {target}: HTTP {status} from the registry {}: not an answer of the OCI distribution API; check that the image reference names a registry",
                    origin(&url)
                ))),
            };
        }
    }

    /// The `Authorization` value answering a challenge: the credential itself for Basic, a
    /// token from the realm (anonymous without a credential) for Bearer.
    async fn answer(
        &self,
        url: &str,
        challenge: Option<Challenge>,
    ) -> Result<HeaderValue, InspectError> {
        let basic = self.credential.map(basic);
        let unauthorized = |why: &str| {
            let fix = if self.credential.is_some() {
                match self.from {
                    CredentialSource::PullSecrets => {
                        "check the credentials of the pull Secret for this registry"
                    }
                    CredentialSource::AuthFiles => {
                        "check the credentials of the auth file for this registry"
                    }
                }
            } else {
                self.from.fix()
            };
            InspectError::Unauthorized(format!("GET {}: HTTP 401 ({why}): {fix}", shown(url)))
        };
        match challenge {
            Some(Challenge::Basic) => basic.ok_or_else(|| unauthorized("Basic authentication")),
            Some(Challenge::Bearer {
                realm,
                service,
                scope,
            }) => {
                let scope = scope.unwrap_or_else(|| format!("repository:{}:pull", self.repository));
                let query = {
                    let mut query = form_urlencoded::Serializer::new(String::new());
                    if let Some(service) = &service {
                        query.append_pair("service", service);
                    }
                    query.append_pair("scope", &scope);
                    query.finish()
                };
                // The realm is the registry's word, like a redirect: the same rule keeps it
                // from sending the manager (and the credential) anywhere else.
                if let Some(refusal) = refused_hop(url, &realm) {
                    return Err(InspectError::Refused(format!(
                        "GET {}: HTTP 401: the token service {} was not asked: {refusal}",
                        shown(url),
                        origin(&realm)
                    )));
                }
                let separator = if realm.contains('?') { '&' } else { '?' };
                let token_url = format!("{realm}{separator}{query}");
                let realm = shown(&realm);
                let response = self.send(&token_url, None, basic).await?;
                let status = response.status();
                if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                    return Err(unauthorized(&format!(
                        "the token service {realm} refused with HTTP {status}"
                    )));
                }
                if !status.is_success() {
                    return Err(InspectError::Unreachable(format!(
                        "GET {realm}: HTTP {status} from the token service: try again later, or ask the registry's operator"
                    )));
                }
                let body = short_body(&token_url, response).await?;
                #[derive(serde::Deserialize)]
                struct Token {
                    token: Option<String>,
                    access_token: Option<String>,
                }
                let token: Token = serde_json::from_slice(&body).map_err(|e| {
                    InspectError::Invalid(format!(
                        "GET {realm}: the token service's answer {}",
                        super::manifest::json_problem(&e)
                    ))
                })?;
                let token = token.token.or(token.access_token).ok_or_else(|| {
                    InspectError::Invalid(format!("GET {realm}: the answer holds no token"))
                })?;
                HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                    InspectError::Invalid(format!("GET {realm}: the token is not a header value"))
                })
            }
            None => Err(unauthorized(
                "an authentication scheme CAPTF does not support",
            )),
        }
    }

    async fn send(
        &self,
        url: &str,
        accept: Option<&str>,
        authorization: Option<HeaderValue>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, InspectError> {
        let uri: Uri = url
            .parse()
            .map_err(|e| InspectError::Invalid(format!("{} is not a URL ({e})", shown(url))))?;
        let mut request = Request::get(uri).header(header::USER_AGENT, "captf-manager");
        if let Some(accept) = accept {
            request = request.header(header::ACCEPT, accept);
        }
        if let Some(authorization) = authorization {
            request = request.header(header::AUTHORIZATION, authorization);
        }
        let request = request
            .body(Empty::new())
            .map_err(|e| InspectError::Invalid(format!("GET {}: {e}", shown(url))))?;
        // Every request, the token service's included, is bounded: a registry that accepts
        // the connection and never answers must not hang the caller.
        tokio::time::timeout(TIMEOUT, self.http.request(request))
            .await
            .map_err(|_| {
                InspectError::Unreachable(format!(
                    "GET {}: no answer within {}s",
                    shown(url),
                    TIMEOUT.as_secs()
                ))
            })?
            .map_err(|e| InspectError::Unreachable(format!("GET {}: {}", shown(url), chain(&e))))
    }
}

/// At most [`MAX_BODY`] of a response's body, within [`TIMEOUT`].
async fn short_body(
    url: &str,
    response: hyper::Response<hyper::body::Incoming>,
) -> Result<Bytes, InspectError> {
    tokio::time::timeout(
        TIMEOUT,
        Limited::new(response.into_body(), MAX_BODY).collect(),
    )
    .await
    .map_err(|_| {
        InspectError::Unreachable(format!(
            "GET {}: the body did not arrive within {}s",
            shown(url),
            TIMEOUT.as_secs()
        ))
    })?
    .map(|b| b.to_bytes())
    .map_err(|e| {
        InspectError::Unreachable(format!(
            "GET {}: reading the body (at most {MAX_BODY} bytes): {e}",
            shown(url)
        ))
    })
}

fn basic(credential: &Credential) -> HeaderValue {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD
        .encode(format!("{}:{}", credential.username, credential.password));
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}"))
        .unwrap_or_else(|_| HeaderValue::from_static(""));
    value.set_sensitive(true);
    value
}

/// A redirect target (RFC 3986 §5.2, without dot segments): absolute, scheme-relative
/// (`//host/path`), a path on the current host, or a path relative to the current one.
fn resolve(current: &str, location: &str) -> String {
    let scheme_end = current.find("://").map_or(0, |i| i + 3);
    let has_scheme = location.split_once(':').is_some_and(|(scheme, _)| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    });
    if has_scheme {
        return location.to_owned();
    }
    if location.starts_with("//") {
        return format!("{}{location}", &current[..scheme_end.saturating_sub(2)]);
    }
    let origin_end = current[scheme_end..]
        .find('/')
        .map_or(current.len(), |j| scheme_end + j);
    if location.starts_with('/') {
        return format!("{}{location}", &current[..origin_end]);
    }
    // Relative to the current path's folder: never glued to the host, where `.evil.example`
    // would become another host.
    let path = current[origin_end..]
        .split(['?', '#'])
        .next()
        .unwrap_or_default();
    let folder = path.rfind('/').map_or("/", |i| &path[..=i]);
    format!("{}{folder}{location}", &current[..origin_end])
}

/// Why the manager does not go on from `from` to `to` (a redirect, or a token realm), if it
/// does not. From https only to https (a downgrade would let anyone on the path read and
/// steer the answer, and sees the credential a realm gets); from plain http (a loopback
/// registry, or `captf lint image --insecure`) only to the same `http://host:port`. A
/// registry is named by a tenant: without this it could point the manager at any service the
/// manager can reach and past the tenant's network policies. Registries redirect blobs to
/// https storage, which stays allowed.
fn refused_hop(from: &str, to: &str) -> Option<&'static str> {
    let (Ok(from), Ok(to)) = (from.parse::<Uri>(), to.parse::<Uri>()) else {
        return Some("the target is not a URL");
    };
    let scheme = |u: &Uri| u.scheme_str().map(str::to_ascii_lowercase);
    match (scheme(&from).as_deref(), scheme(&to).as_deref()) {
        (Some("https"), Some("https")) => None,
        (Some("https"), _) => Some(
            "a registry reached over https is followed only to https, never downgraded to plain http; serve the registry's storage over https",
        ),
        (Some("http"), _) if same_origin(&from, &to) => None,
        (Some("http"), _) => Some(
            "a registry reached over plain http is followed only on its own host and port; make it serve blobs itself (distribution: storage.redirect.disable: true), or serve it over https",
        ),
        _ => Some("only http and https are followed"),
    }
}

/// Same scheme, host and port (the scheme's default port when none is written).
fn same_origin(a: &Uri, b: &Uri) -> bool {
    let port = |u: &Uri| {
        u.port_u16().or(match u.scheme_str() {
            Some("https") => Some(443),
            Some("http") => Some(80),
            _ => None,
        })
    };
    a.scheme_str()
        .zip(b.scheme_str())
        .is_some_and(|(x, y)| x.eq_ignore_ascii_case(y))
        && a.host()
            .zip(b.host())
            .is_some_and(|(x, y)| x.eq_ignore_ascii_case(y))
        && port(a) == port(b)
}

/// `scheme://host[:port]` of `url`, for a message.
fn origin(url: &str) -> String {
    match url.parse::<Uri>() {
        Ok(uri) => {
            let scheme = uri.scheme_str().unwrap_or("http");
            let host = uri.host().unwrap_or_default();
            match uri.port_u16() {
                Some(port) => format!("{scheme}://{host}:{port}"),
                None => format!("{scheme}://{host}"),
            }
        }
        Err(_) => "(not a URL)".to_owned(),
    }
}

/// `url` as errors show it: without user info, query or fragment, where a redirect to
/// storage carries its signature.
fn shown(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let authority_end = url[scheme_end..]
        .find('/')
        .map_or(url.len(), |j| scheme_end + j);
    match url[scheme_end..authority_end].rfind('@') {
        Some(at) => format!("{}{}", &url[..scheme_end], &url[scheme_end + at + 1..]),
        None => url.to_owned(),
    }
}

/// The error and its causes, which hyper keeps apart ("client error (Connect)" alone says
/// nothing).
fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    out
}

#[cfg(test)]
mod tests;
