//! The HTTP side of reading an image config: manifest, (index,) config blob, with the
//! registry's Basic or Bearer authentication and redirects to blob storage.

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
                InspectError::Unreachable(format!("GET {url}: no data for {}s", TIMEOUT.as_secs()))
            })?
        {
            let frame = frame.map_err(|e| {
                InspectError::Unreachable(format!("GET {url}: reading the blob: {e}"))
            })?;
            if let Some(data) = frame.data_ref() {
                written += data.len() as u64;
                if written > max {
                    drop(out);
                    let _ = tokio::fs::remove_file(file).await;
                    return Err(InspectError::Invalid(format!(
                        "GET {url}: the blob is larger than {} MiB: over the size cap",
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
                "GET {url}: the registry served content with digest {got}"
            )));
        }
        Ok(())
    }

    /// GETs `path` of the registry: answers one authentication challenge, follows redirects
    /// (without the registry's credentials to another host); a success's response, whose body
    /// is left to the caller.
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
                            "GET {url}: HTTP {status} without a usable redirect"
                        ))
                    })?;
                url = resolve(&url, location);
                continue;
            }
            if status.is_success() {
                return Ok((url, response));
            }
            // An error's body is short; only its start is shown, if it comes at all.
            let body = short_body(&url, response).await.unwrap_or_default();
            return match status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                    Err(InspectError::Unauthorized(format!(
                        "GET {url}: HTTP {status}: {}",
                        if self.credential.is_some() {
                            self.from.refused()
                        } else {
                            self.from.missing()
                        }
                    )))
                }
                StatusCode::NOT_FOUND => Err(InspectError::NotFound(format!(
                    "GET {url}: HTTP 404: no such repository, tag or digest"
                ))),
                _ => Err(InspectError::Unreachable(format!(
                    "GET {url}: HTTP {status}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(200)]).trim()
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
            InspectError::Unauthorized(format!("GET {url}: HTTP 401 ({why}): {fix}"))
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
                let separator = if realm.contains('?') { '&' } else { '?' };
                let url = format!("{realm}{separator}{query}");
                let response = self.send(&url, None, basic).await?;
                let status = response.status();
                let body = short_body(&url, response).await?;
                if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                    return Err(unauthorized(&format!(
                        "the token service {realm} refused with HTTP {status}"
                    )));
                }
                if !status.is_success() {
                    return Err(InspectError::Unreachable(format!(
                        "GET {realm}: HTTP {status} from the token service"
                    )));
                }
                #[derive(serde::Deserialize)]
                struct Token {
                    token: Option<String>,
                    access_token: Option<String>,
                }
                let token: Token = serde_json::from_slice(&body).map_err(|e| {
                    InspectError::Invalid(format!("GET {realm}: the token is not JSON ({e})"))
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
            .map_err(|e| InspectError::Invalid(format!("{url} is not a URL ({e})")))?;
        let mut request = Request::get(uri).header(header::USER_AGENT, "captf-manager");
        if let Some(accept) = accept {
            request = request.header(header::ACCEPT, accept);
        }
        if let Some(authorization) = authorization {
            request = request.header(header::AUTHORIZATION, authorization);
        }
        let request = request
            .body(Empty::new())
            .map_err(|e| InspectError::Invalid(format!("GET {url}: {e}")))?;
        // Every request, the token service's included, is bounded: a registry that accepts
        // the connection and never answers must not hang the caller.
        tokio::time::timeout(TIMEOUT, self.http.request(request))
            .await
            .map_err(|_| {
                InspectError::Unreachable(format!(
                    "GET {url}: no answer within {}s",
                    TIMEOUT.as_secs()
                ))
            })?
            .map_err(|e| InspectError::Unreachable(format!("GET {url}: {}", chain(&e))))
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
            "GET {url}: the body did not arrive within {}s",
            TIMEOUT.as_secs()
        ))
    })?
    .map(|b| b.to_bytes())
    .map_err(|e| {
        InspectError::Unreachable(format!(
            "GET {url}: reading the body (at most {MAX_BODY} bytes): {e}"
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

/// A redirect target: absolute, or a path on the current host.
fn resolve(current: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.to_owned();
    }
    let origin_end = current
        .find("://")
        .and_then(|i| current[i + 3..].find('/').map(|j| i + 3 + j))
        .unwrap_or(current.len());
    format!("{}{location}", &current[..origin_end])
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
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A registry on a loopback port that answers every request with `head` and then sends
    /// nothing more, holding the connection open.
    async fn stalling(head: String) -> anyhow::Result<String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let host = listener.local_addr()?.to_string();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let _ = socket.write_all(head.as_bytes()).await;
                held.push(socket);
            }
        });
        Ok(host)
    }

    /// Each way a registry can stall ends in an error naming the request after [`TIMEOUT`]
    /// (in the runtime's paused time: the test takes no real 30 s).
    #[tokio::test(start_paused = true)]
    async fn a_registry_that_stalls_fails_the_request() -> anyhow::Result<()> {
        let registry = Registry::new()?;
        let keyring = Keyring::parse(br#"{"auths": {}}"#).map_err(anyhow::Error::msg)?;
        let token_service = stalling(String::new()).await?;
        let challenge = format!(
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"http://{token_service}/token\"\r\nContent-Length: 0\r\n\r\n"
        );
        let partial = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc";
        let cases = [
            (String::new(), "no answer within 30s"),
            (partial.to_owned(), "the body did not arrive within 30s"),
            (
                "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100\r\n\r\n".to_owned(),
                "HTTP 500 Internal Server Error",
            ),
            (
                challenge,
                &format!(
                    "GET http://{token_service}/token?scope=repository%3Am%3Apull: no answer within 30s"
                ),
            ),
        ];
        for (head, want) in cases {
            let host = stalling(head.clone()).await?;
            let image =
                captf_api::image::parse(&format!("{host}/m:t")).map_err(anyhow::Error::msg)?;
            let mut session =
                registry.session(&image, &keyring, CredentialSource::AuthFiles, false);
            let got = session
                .get("/v2/m/manifests/t", None)
                .await
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(got.contains(want), "{head:?}: {got}");
        }

        let host = stalling(partial.to_owned()).await?;
        let image = captf_api::image::parse(&format!("{host}/m:t")).map_err(anyhow::Error::msg)?;
        let mut session = registry.session(&image, &keyring, CredentialSource::AuthFiles, false);
        let dir = tempfile::tempdir()?;
        let got = session
            .blob_to_file("sha256:00", &dir.path().join("blob"), 1 << 20)
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(got.contains("no data for 30s"), "{got}");
        Ok(())
    }

    #[test]
    fn endpoint_table() {
        let cases = [
            ("docker.io", "https://registry-1.docker.io"),
            ("ghcr.io", "https://ghcr.io"),
            (
                "registry.example.com:5000",
                "https://registry.example.com:5000",
            ),
            ("localhost:5000", "http://localhost:5000"),
            ("localhost", "http://localhost"),
            ("127.0.0.1:41000", "http://127.0.0.1:41000"),
            ("[::1]:5000", "http://[::1]:5000"),
            ("10.0.0.1:5000", "https://10.0.0.1:5000"),
        ];
        for (registry, want) in cases {
            assert_eq!(endpoint(registry), want, "{registry}");
        }
    }

    #[test]
    fn resolve_table() {
        let cases = [
            (
                "http://127.0.0.1:5000/v2/a/blobs/x",
                "/storage/x",
                "http://127.0.0.1:5000/storage/x",
            ),
            (
                "https://r.example.com/v2/a/blobs/x",
                "https://cdn.example.net/x?sig=1",
                "https://cdn.example.net/x?sig=1",
            ),
        ];
        for (current, location, want) in cases {
            assert_eq!(resolve(current, location), want, "{location}");
        }
    }
}
