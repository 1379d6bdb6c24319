//! Serving HTTP/1 on the manager's ports (webhooks, metrics, probes) so that no client that
//! reaches a port can hold the server: a request's headers arrive within a deadline or the
//! connection closes, each connection carries one request, and only so many are open at once
//! (the rest wait in the kernel's queue, unread).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::tls::Held;

/// How many connections a plain listener ([`capped`]: the probes, and metrics with
/// `--insecure-diagnostics`) holds open at once. The kubelet opens one per probe.
pub const PLAIN_MAX_CONNECTIONS: usize = 256;

/// How long a client of a plain listener has to send a request's headers: the kubelet and
/// Prometheus send them at once.
pub const PLAIN_HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a client of the HTTPS metrics server has to send a request's headers once the TLS
/// handshake is done.
pub const TLS_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` on the connections `listener` hands out, each closed once it takes longer
/// than `header_timeout` to send its request's headers, and after its one request; `server`
/// names the server in the logs.
pub async fn serve<L>(mut listener: L, router: Router, header_timeout: Duration, server: &str)
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    // One request per connection: hyper's header deadline also closes an idle kept-alive
    // connection, which a client (the API server's keeps them 90 s) may reuse at that instant;
    // the request on it then fails without a retry.
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(false);
    loop {
        let (io, peer) = listener.accept().await;
        let router = router.clone();
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            router.clone().oneshot(request.map(Body::new))
        });
        let connection = http.serve_connection(hyper_util::rt::TokioIo::new(io), service);
        let server = server.to_owned();
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(?peer, %error, "{server}: connection closed");
            }
        });
    }
}

/// Plain TCP connections, at most `max_connections` open at once.
pub struct Capped {
    tcp: TcpListener,
    places: Arc<Semaphore>,
}

/// Accepts on `tcp`, at most `max_connections` at once.
pub fn capped(tcp: TcpListener, max_connections: usize) -> Capped {
    Capped {
        tcp,
        places: Arc::new(Semaphore::new(max_connections)),
    }
}

impl axum::serve::Listener for Capped {
    type Io = Held<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // A place first: past the cap, connections wait in the kernel's queue, unread.
        let Ok(place) = self.places.clone().acquire_owned().await else {
            // The semaphore is never closed.
            return std::future::pending().await;
        };
        loop {
            match self.tcp.accept().await {
                Ok((stream, peer)) => return (Held::new(stream, place), peer),
                Err(error) => {
                    tracing::debug!(%error, "accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Far longer than anything here takes.
    const DEADLINE: Duration = Duration::from_secs(20);
    const SHORT: Duration = Duration::from_millis(300);

    async fn start(max_connections: usize) -> SocketAddr {
        let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = tcp.local_addr().expect("addr");
        let router = Router::new().route("/healthz", get(|| async { "ok" }));
        tokio::spawn(serve(capped(tcp, max_connections), router, SHORT, "test"));
        addr
    }

    /// What the server sends until it closes the connection.
    async fn until_closed(tcp: &mut TcpStream) -> String {
        let mut got = Vec::new();
        let read = tokio::time::timeout(DEADLINE, tcp.read_to_end(&mut got)).await;
        assert!(read.is_ok(), "the server kept the connection open");
        String::from_utf8_lossy(&got).into_owned()
    }

    const GET: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";

    #[tokio::test]
    async fn a_request_is_answered_and_its_connection_closed() {
        let addr = start(4).await;
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        tcp.write_all(GET).await.expect("write");
        let answer = until_closed(&mut tcp).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");
    }

    #[tokio::test]
    async fn a_client_that_sends_no_headers_is_disconnected() {
        let addr = start(4).await;
        let mut idle = TcpStream::connect(addr).await.expect("connect");
        assert!(!until_closed(&mut idle).await.contains("200"));
        let mut half = TcpStream::connect(addr).await.expect("connect");
        half.write_all(&GET[..10]).await.expect("write");
        assert!(!until_closed(&mut half).await.contains("200"));
    }

    #[tokio::test]
    async fn connections_past_the_cap_wait_until_a_place_is_free() {
        let addr = start(1).await;
        // Holds the only place until its header deadline.
        let mut holder = TcpStream::connect(addr).await.expect("connect");
        let mut waiting = TcpStream::connect(addr)
            .await
            .expect("connect (kernel queue)");
        waiting.write_all(GET).await.expect("write");
        let mut got = [0u8; 1];
        let early = tokio::time::timeout(SHORT / 3, waiting.read(&mut got)).await;
        assert!(early.is_err(), "answered while the only place was held");
        // The holder is closed at its deadline; the waiting request is then served.
        until_closed(&mut holder).await;
        let answer = until_closed(&mut waiting).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}
