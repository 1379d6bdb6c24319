//! The validating admission webhooks (operations.md §6), served over HTTPS by every replica,
//! leader or not: the API server calls them for every create and update of the seven kinds
//! (failing closed) and for deletes of machines and identities (failing open).
//!
//! The rules are pure functions ([`rules`], [`guards`]); [`review`] is the edge that decodes a
//! request and asks the API server what a rule cannot know by itself.

pub mod bounded;
pub mod guards;
pub mod review;
pub mod rules;
pub mod violations;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use review::Webhook;

use crate::Error;
use crate::settings::WebhookServer;
use crate::tls::{
    CERT_CHECK_INTERVAL, CertFiles, MAX_CONNECTIONS, WhenMissing, server_config, tls_listener,
    watch_certificate,
};

/// What the webhook server allows its clients, any pod that reaches its port included: a
/// client can hold a connection, its request's headers and its body only so long, and the
/// bodies the server holds together are bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections open at once; more wait, unaccepted, until one closes.
    pub connections: usize,
    /// From the handshake, or the answer to the previous request, to the last byte of the
    /// next request's headers: a connection that sends none in time, an idle one included, is
    /// closed.
    pub header_timeout: Duration,
    /// From the end of the headers to the last byte of the body.
    pub body_timeout: Duration,
    /// The largest body; a larger one is refused with 413 as soon as it is known (its
    /// `Content-Length`, or once that much has come), never read whole.
    pub max_body: usize,
    /// Bytes of bodies held at once, reserved as a request's headers announce them: a request
    /// that cannot have its share before its body deadline is answered 503.
    pub bodies_in_flight: usize,
}

impl ServerLimits {
    /// The API server's own webhook timeout is 10 s, so no slower request is of any use. The
    /// largest review the API server sends is an update of two objects of the 1.5 MiB etcd
    /// stores, with the request around them.
    pub const DEFAULT: ServerLimits = ServerLimits {
        connections: MAX_CONNECTIONS,
        header_timeout: Duration::from_secs(10),
        body_timeout: Duration::from_secs(10),
        max_body: 4 << 20,
        bodies_in_flight: 32 << 20,
    };
}

/// One webhook path per kind, as controller-runtime names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Cluster,
    ClusterTemplate,
    Machine,
    MachineTemplate,
    MachinePool,
    MachinePoolTemplate,
    Identity,
}

impl Endpoint {
    pub const ALL: [Endpoint; 7] = [
        Endpoint::Cluster,
        Endpoint::ClusterTemplate,
        Endpoint::Machine,
        Endpoint::MachineTemplate,
        Endpoint::MachinePool,
        Endpoint::MachinePoolTemplate,
        Endpoint::Identity,
    ];

    pub fn kind(self) -> &'static str {
        match self {
            Endpoint::Cluster => "TerraformCluster",
            Endpoint::ClusterTemplate => "TerraformClusterTemplate",
            Endpoint::Machine => "TerraformMachine",
            Endpoint::MachineTemplate => "TerraformMachineTemplate",
            Endpoint::MachinePool => "TerraformMachinePool",
            Endpoint::MachinePoolTemplate => "TerraformMachinePoolTemplate",
            Endpoint::Identity => "TerraformClusterIdentity",
        }
    }

    /// The resource (`terraformclusteridentities`).
    pub fn plural(self) -> &'static str {
        match self {
            Endpoint::Identity => "terraformclusteridentities",
            _ => match self.kind() {
                "TerraformCluster" => "terraformclusters",
                "TerraformClusterTemplate" => "terraformclustertemplates",
                "TerraformMachine" => "terraformmachines",
                "TerraformMachineTemplate" => "terraformmachinetemplates",
                "TerraformMachinePool" => "terraformmachinepools",
                _ => "terraformmachinepooltemplates",
            },
        }
    }

    /// `/validate-infrastructure-cluster-x-k8s-io-v1alpha1-<kind lowercase>`.
    pub fn path(self) -> String {
        format!(
            "/validate-infrastructure-cluster-x-k8s-io-v1alpha1-{}",
            self.kind().to_ascii_lowercase()
        )
    }

    /// Whether deletes of the kind are guarded (a second webhook entry, failing open).
    pub fn guards_delete(self) -> bool {
        matches!(self, Endpoint::Machine | Endpoint::Identity)
    }
}

/// Every webhook path, reading bodies within `limits`.
pub fn router(webhook: Arc<Webhook>, limits: ServerLimits) -> Router {
    let budget = Arc::new(Semaphore::new(limits.bodies_in_flight));
    let mut router = Router::new();
    for endpoint in Endpoint::ALL {
        let (webhook, budget) = (webhook.clone(), budget.clone());
        router = router.route(
            &endpoint.path(),
            post(move |request: Request| async move {
                // The body's share of the budget is held until the answer is written: the
                // parsed review it becomes is bounded by its size.
                let (body, _share) = match read_body(request, &limits, budget).await {
                    Ok(read) => read,
                    Err(refused) => return refused,
                };
                let answer = review::review(&webhook, endpoint, &body).await;
                let body = serde_json::to_vec(&answer).unwrap_or_default();
                ([(header::CONTENT_TYPE, "application/json")], body).into_response()
            }),
        );
    }
    router
}

/// A refusal that also closes the connection: what is left of the request is not read.
fn refuse(status: StatusCode, message: String) -> Response {
    (status, [(header::CONNECTION, "close")], message).into_response()
}

/// The request's body within `limits`, with its share of `budget`; or the answer refusing it.
async fn read_body(
    request: Request,
    limits: &ServerLimits,
    budget: Arc<Semaphore>,
) -> Result<(Bytes, OwnedSemaphorePermit), Response> {
    let too_large = || {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is over {} bytes", limits.max_body),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limits.max_body) {
        return Err(too_large());
    }
    let deadline = tokio::time::Instant::now() + limits.body_timeout;
    // Without a length (a chunked body) the largest is reserved.
    let share = u32::try_from(declared.unwrap_or(limits.max_body)).unwrap_or(u32::MAX);
    let share = match tokio::time::timeout_at(deadline, budget.acquire_many_owned(share)).await {
        Ok(Ok(share)) => share,
        _ => {
            return Err(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many request bodies are being read; retry".to_owned(),
            ));
        }
    };
    let body = http_body_util::Limited::new(request.into_body(), limits.max_body).collect();
    match tokio::time::timeout_at(deadline, body).await {
        Ok(Ok(body)) => Ok((body.to_bytes(), share)),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err(refuse(
            StatusCode::BAD_REQUEST,
            format!("the body could not be read: {e}"),
        )),
        Err(_) => Err(refuse(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the body did not arrive within {}s",
                limits.body_timeout.as_secs_f64()
            ),
        )),
    }
}

/// Serves the webhooks on `--webhook-port` once the certificate in `--webhook-cert-dir` loads
/// (cert-manager may not have issued it yet); `ready` is set from then on. Port 0 serves
/// nothing and is ready at once.
pub async fn serve(
    args: WebhookServer,
    webhook: Arc<Webhook>,
    ready: Arc<AtomicBool>,
) -> Result<(), Error> {
    if args.port == 0 {
        tracing::info!("webhook server disabled (--webhook-port=0)");
        ready.store(true, Ordering::Relaxed);
        return std::future::pending().await;
    }
    let files = CertFiles {
        dir: args.cert_dir.clone(),
        cert: args.cert_name.clone(),
        key: args.key_name.clone(),
    };
    let mut warned = false;
    let (config, cert) = loop {
        match server_config(&files, WhenMissing::Refuse, &args.tls_min_version) {
            Ok(loaded) => break loaded,
            Err(error) => {
                if !warned {
                    tracing::warn!(%error, "webhook server: waiting for its certificate; /readyz fails until it loads");
                    warned = true;
                }
                tokio::time::sleep(CERT_CHECK_INTERVAL).await;
            }
        }
    };
    let addr = std::net::SocketAddr::from(([0, 0, 0, 0], args.port));
    let tcp = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Startup(format!("webhook server on {addr}: {e}")))?;
    tracing::info!(%addr, certificate = %cert.origin(), "webhook server listening (HTTPS)");
    tokio::spawn(watch_certificate(cert, "webhook server"));
    let limits = ServerLimits::DEFAULT;
    let listener = tls_listener(tcp, config, "webhook server", limits.connections)
        .map_err(|e| Error::Startup(format!("webhook server: {e}")))?;
    ready.store(true, Ordering::Relaxed);
    let router = router(webhook, limits);
    crate::http::serve(listener, router, limits.header_timeout, "webhook server").await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::SystemTime;

    use rustls::pki_types::CertificateDer;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_rustls::client::TlsStream;

    use super::*;
    use crate::schemas::Schemas;
    use crate::tls::testing::{temp_dir, write_cert};
    use crate::webhook::rules::ManagerUser;

    /// Long enough for anything this machine does; no test waits it out when all is well.
    const DEADLINE: Duration = Duration::from_secs(20);

    /// The timeouts of a server under test, and the time something that must not happen is
    /// given to happen.
    const SHORT: Duration = Duration::from_millis(300);

    /// The webhook server on a free port, within `limits`; its address and certificate.
    async fn start(limits: ServerLimits) -> (SocketAddr, CertificateDer<'static>) {
        let dir = temp_dir("webhook-server");
        let cert = write_cert(&dir, SystemTime::now());
        let (config, _) = server_config(
            &CertFiles::in_dir(&dir),
            WhenMissing::Refuse,
            "VersionTLS12",
        )
        .expect("TLS config");
        // Loaded: the server reads the files no more.
        let _ = std::fs::remove_dir_all(&dir);
        let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = tcp.local_addr().expect("addr");
        let listener = tls_listener(tcp, config, "test", limits.connections).expect("listener");
        // A client that reaches nothing: no request here needs the API server.
        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().expect("uri"),
        ))
        .expect("client");
        let webhook = Arc::new(Webhook {
            client,
            manager: ManagerUser::new(Some("captf-system"), Some("captf-controller-manager")),
            registry: None,
            schemas: Schemas::default(),
        });
        tokio::spawn(crate::http::serve(
            listener,
            router(webhook, limits),
            limits.header_timeout,
            "webhook server",
        ));
        (addr, cert)
    }

    async fn connect(
        addr: SocketAddr,
        cert: &CertificateDer<'static>,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.clone()).expect("root");
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let tcp = TcpStream::connect(addr).await?;
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
    }

    /// What the server sends until it closes the connection (within [`DEADLINE`]).
    async fn until_closed(tls: &mut TlsStream<TcpStream>) -> String {
        let mut got = Vec::new();
        let read = tokio::time::timeout(DEADLINE, tls.read_to_end(&mut got)).await;
        assert!(read.is_ok(), "the server kept the connection open");
        String::from_utf8_lossy(&got).into_owned()
    }

    fn headers(length: Option<usize>) -> String {
        let framing = match length {
            Some(n) => format!("Content-Length: {n}"),
            None => "Transfer-Encoding: chunked".to_owned(),
        };
        format!(
            "POST {} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\n{framing}\r\n\r\n",
            Endpoint::Cluster.path()
        )
    }

    fn limits() -> ServerLimits {
        ServerLimits {
            max_body: 4096,
            ..ServerLimits::DEFAULT
        }
    }

    #[tokio::test]
    async fn a_review_within_the_limits_is_answered() {
        let (addr, cert) = start(limits()).await;
        let body = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u-1", "name": "c", "namespace": "ns", "operation": "DELETE",
                "kind": {"group": "infrastructure.cluster.x-k8s.io", "version": "v1alpha1", "kind": "TerraformCluster"},
                "resource": {"group": "infrastructure.cluster.x-k8s.io", "version": "v1alpha1", "resource": "terraformclusters"},
                "userInfo": {"username": "alice"}
            }
        })
        .to_string();
        let mut tls = connect(addr, &cert).await.expect("connect");
        let request = format!("{}{body}", headers(Some(body.len())));
        tls.write_all(request.as_bytes()).await.expect("write");
        let answer = until_closed(&mut tls).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(r#""uid":"u-1","allowed":true"#), "{answer}");
    }

    #[tokio::test]
    async fn a_body_over_the_cap_is_refused_before_it_is_read_whole() {
        let (addr, cert) = start(limits()).await;
        // Announced too large: refused on the headers alone.
        let mut tls = connect(addr, &cert).await.expect("connect");
        tls.write_all(headers(Some(100 << 20)).as_bytes())
            .await
            .expect("write");
        tls.write_all(b"{\"apiVersion\":").await.expect("write");
        let answer = until_closed(&mut tls).await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(answer.contains("the body is over 4096 bytes"), "{answer}");
        // Chunked: refused once the cap is passed, the rest never sent.
        let mut tls = connect(addr, &cert).await.expect("connect");
        tls.write_all(headers(None).as_bytes())
            .await
            .expect("write");
        for _ in 0..5 {
            tls.write_all(format!("400\r\n{}\r\n", " ".repeat(1024)).as_bytes())
                .await
                .expect("write");
        }
        let answer = until_closed(&mut tls).await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    }

    #[tokio::test]
    async fn a_client_that_stalls_is_disconnected() {
        let (addr, cert) = start(ServerLimits {
            header_timeout: SHORT,
            body_timeout: SHORT,
            ..limits()
        })
        .await;
        // Connected, and nothing sent.
        let mut idle = connect(addr, &cert).await.expect("connect");
        assert_eq!(until_closed(&mut idle).await, "");
        // Half the headers.
        let mut tls = connect(addr, &cert).await.expect("connect");
        let half = headers(Some(100));
        tls.write_all(&half.as_bytes()[..20]).await.expect("write");
        let answer = until_closed(&mut tls).await;
        assert!(!answer.contains("200"), "{answer}");
        // The headers, and part of the body.
        let mut tls = connect(addr, &cert).await.expect("connect");
        tls.write_all(format!("{}{{\"apiVersion\"", headers(Some(100))).as_bytes())
            .await
            .expect("write");
        let answer = until_closed(&mut tls).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    }

    #[tokio::test]
    async fn bodies_past_the_budget_wait_for_it() {
        let (addr, cert) = start(ServerLimits {
            body_timeout: Duration::from_secs(2),
            bodies_in_flight: 4096,
            ..limits()
        })
        .await;
        // The whole budget, announced and never sent.
        let mut hog = connect(addr, &cert).await.expect("connect");
        hog.write_all(headers(Some(4096)).as_bytes())
            .await
            .expect("write");
        hog.write_all(b"{").await.expect("write");
        let body = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#;
        let mut tls = connect(addr, &cert).await.expect("connect");
        tls.write_all(format!("{}{body}", headers(Some(body.len()))).as_bytes())
            .await
            .expect("write");
        let mut byte = [0u8; 1];
        assert!(
            tokio::time::timeout(SHORT, tls.read(&mut byte))
                .await
                .is_err(),
            "answered while the budget was taken"
        );
        // Once the hog's deadline frees its share, the request is read and answered.
        assert!(until_closed(&mut hog).await.starts_with("HTTP/1.1 408"));
        let rest = until_closed(&mut tls).await;
        assert!(rest.starts_with("HTTP/1.1 200"), "{rest}");
    }

    #[tokio::test]
    async fn connections_past_the_cap_wait_for_a_place() {
        let (addr, cert) = start(ServerLimits {
            connections: 2,
            ..limits()
        })
        .await;
        let first = connect(addr, &cert).await.expect("first");
        let _second = connect(addr, &cert).await.expect("second");
        let mut third = tokio::spawn({
            let cert = cert.clone();
            async move { connect(addr, &cert).await }
        });
        // Not accepted while both places are held (the kernel holds it: no handshake yet).
        assert!(
            tokio::time::timeout(SHORT, &mut third).await.is_err(),
            "a third connection got through"
        );
        drop(first);
        let third = tokio::time::timeout(DEADLINE, third)
            .await
            .expect("the third connection gets the first's place")
            .expect("task");
        assert!(third.is_ok(), "{third:?}");
    }
}
