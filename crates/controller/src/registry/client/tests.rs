//! The registry client against real loopback servers: redirects, realms, bodies kept out of
//! errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use super::*;

/// What a [`serve`]d loopback server answers to one request.
enum Reply {
    Send(String),
    /// Nothing, holding the connection open.
    Stall,
}

/// An HTTP/1.1 response with `headers` and `body`.
fn response(status: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    Reply::Send(out)
}

/// A server on a loopback port that answers each request (several on one connection, as
/// hyper reuses them) with what `reply` says for its path and the server's own
/// `host:port`; that address, and how many requests it was sent.
async fn serve(
    reply: impl Fn(&str, &str) -> Reply + Send + Sync + 'static,
) -> anyhow::Result<(String, Arc<AtomicUsize>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let host = listener.local_addr()?.to_string();
    let hits = Arc::new(AtomicUsize::new(0));
    let (reply, counted, own) = (Arc::new(reply), hits.clone(), host.clone());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (reply, counted, own) = (reply.clone(), counted.clone(), own.clone());
            tokio::spawn(async move {
                let mut socket = tokio::io::BufReader::new(socket);
                loop {
                    let mut request = String::new();
                    if socket.read_line(&mut request).await.unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut header = String::new();
                        if socket.read_line(&mut header).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if header == "\r\n" {
                            break;
                        }
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    let path = request.split(' ').nth(1).unwrap_or_default();
                    match reply(path, &own) {
                        Reply::Send(out) => {
                            if socket.get_mut().write_all(out.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                        Reply::Stall => std::future::pending::<()>().await,
                    }
                }
            });
        }
    });
    Ok((host, hits))
}

fn anonymous() -> anyhow::Result<Keyring> {
    Keyring::parse(br#"{"auths": {}}"#).map_err(anyhow::Error::msg)
}

/// What `get(path)` from a session with the registry at `host` says when it fails.
async fn get_error(host: &str, path: &str) -> anyhow::Result<Option<InspectError>> {
    let registry = Registry::new()?;
    let keyring = anonymous()?;
    let image = captf_api::image::parse(&format!("{host}/m:t")).map_err(anyhow::Error::msg)?;
    let mut session = registry.session(&image, &keyring, CredentialSource::PullSecrets, false);
    Ok(session.get(path, None).await.err())
}

const MARKER: &str = "INTERNAL-SERVICE-MARKER-7f3a";

/// A plain-http registry (a loopback one) is followed only on its own host and port: a
/// redirect elsewhere, over http or https, is refused before anything is sent there, and
/// says where it pointed and what to do.
#[tokio::test]
async fn a_plain_http_registry_cannot_redirect_the_manager_elsewhere() -> anyhow::Result<()> {
    let (internal, internal_hits) =
        serve(|_, _| response("200 OK", &[], &format!("{{\"secret\": \"{MARKER}\"}}"))).await?;
    let elsewhere = format!("http://{internal}/admin?token=x");
    let cases: Vec<(&str, String, Result<&str, &str>)> = vec![
        (
            "same host, absolute path",
            "/storage/blob".into(),
            Ok("blob"),
        ),
        (
            "same host, relative path",
            "storage/blob".into(),
            Ok("blob"),
        ),
        (
            "another port over http",
            elsewhere.clone(),
            Err("own host and port"),
        ),
        (
            "another port, scheme-relative",
            format!("//{internal}/admin"),
            Err("own host and port"),
        ),
        (
            "https elsewhere",
            "https://storage.example.com/blob".into(),
            Err("own host and port"),
        ),
        ("not http", "file:///etc/passwd".into(), Err("")),
    ];
    for (name, location, want) in cases {
        let (registry, _) = serve(move |path, _| {
            if path == "/v2/m/manifests/t" {
                response("307 Temporary Redirect", &[("Location", &location)], "")
            } else {
                response("200 OK", &[], "blob")
            }
        })
        .await?;
        let got = get_error(&registry, "/v2/m/manifests/t").await?;
        match (got, want) {
            (None, Ok(_)) => {}
            (Some(InspectError::Refused(message)), Err(want)) => {
                assert!(
                    message.contains(want) && message.contains("was not followed"),
                    "{name}: {message}"
                );
                assert!(
                    !message.contains("token=x"),
                    "{name}: query shown: {message}"
                );
            }
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
    let refused = get_error(
        &serve(move |_, _| response("302 Found", &[("Location", &elsewhere)], MARKER))
            .await?
            .0,
        "/v2/m/manifests/t",
    )
    .await?
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        refused.contains(&format!(
            "the redirect to http://{internal} was not followed"
        )) && refused.contains("storage.redirect.disable: true"),
        "{refused}"
    );
    assert!(!refused.contains(MARKER), "{refused}");
    assert_eq!(
        internal_hits.load(Ordering::SeqCst),
        0,
        "the internal server was never asked"
    );
    Ok(())
}

/// A token realm is the registry's word too: on a plain-http registry it must be on the
/// registry's own host and port, so the credential and the request go nowhere else.
#[tokio::test]
async fn a_token_realm_elsewhere_is_not_asked() -> anyhow::Result<()> {
    let (internal, internal_hits) =
        serve(|_, _| response("200 OK", &[], &format!("{{\"token\": \"{MARKER}\"}}"))).await?;
    let (registry, _) = serve(move |_, _| {
        let challenge = format!("Bearer realm=\"http://{internal}/token\"");
        response(
            "401 Unauthorized",
            &[("WWW-Authenticate", &challenge)],
            MARKER,
        )
    })
    .await?;
    let got = get_error(&registry, "/v2/m/manifests/t").await?;
    match got {
        Some(InspectError::Refused(message)) => {
            assert!(
                message.contains("token service") && message.contains("own host and port"),
                "{message}"
            );
            assert!(!message.contains(MARKER), "{message}");
        }
        got => panic!("got {got:?}"),
    }
    assert_eq!(internal_hits.load(Ordering::SeqCst), 0);
    Ok(())
}

/// Whatever a server writes in a body reaches no error: not an error status's body, not a
/// token service's, not a manifest's that fails to parse.
#[tokio::test]
async fn no_byte_of_a_body_reaches_an_error() -> anyhow::Result<()> {
    let body = format!("<html>{MARKER} 424242 internal details</html>");
    // (case, the server's host:port, what the error says)
    let mut cases: Vec<(String, String, &str)> = Vec::new();
    let statuses = [
        (
            "500 Internal Server Error",
            "HTTP 500 Internal Server Error",
        ),
        ("502 Bad Gateway", "try again later"),
        (
            "418 I'm a teapot",
            "not an answer of the OCI distribution API",
        ),
        ("404 Not Found", "no such repository"),
        ("403 Forbidden", "no pull Secret"),
    ];
    for (status, want) in statuses {
        let body = body.clone();
        let (host, _) = serve(move |_, _| response(status, &[], &body)).await?;
        cases.push((status.to_owned(), host, want));
    }
    let token_answers = [
        (
            "500 Internal Server Error",
            body.clone(),
            "from the token service",
        ),
        ("200 OK", body.clone(), "is not valid JSON"),
        (
            "200 OK",
            format!("{{\"token\": [\"{MARKER}\"], \"access_token\": 424242}}"),
            "wrong shape",
        ),
    ];
    for (status, token_body, want) in token_answers {
        let (registry, _) = serve(move |path, own| {
            if path.starts_with("/token") {
                response(status, &[], &token_body)
            } else {
                let challenge = format!("Bearer realm=\"http://{own}/token\"");
                response("401 Unauthorized", &[("WWW-Authenticate", &challenge)], "")
            }
        })
        .await?;
        cases.push((format!("token service {status}"), registry, want));
    }
    for (case, host, want) in cases {
        let got = get_error(&host, "/v2/m/manifests/t")
            .await?
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(got.contains(want), "{case}: {got}");
        assert!(
            !got.contains(MARKER) && !got.contains("424242") && !got.contains("html"),
            "{case}: {got}"
        );
    }

    // A manifest whose digest is the server's text.
    let (registry, _) = serve(|_, _| {
        response(
            "200 OK",
            &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")],
            &format!("{{\"config\": {{\"digest\": \"{MARKER}\"}}}}"),
        )
    })
    .await?;
    let image = captf_api::image::parse(&format!("{registry}/m:t")).map_err(anyhow::Error::msg)?;
    let got = Registry::new()?
        .labels(&image, &anonymous()?)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(got.contains("not sha256"), "{got}");
    assert!(!got.contains(MARKER), "{got}");
    Ok(())
}

#[test]
fn refused_hop_table() {
    let cases = [
        (
            "https://r.example/v2/x",
            "https://cdn.example.net/b?sig=1",
            None,
        ),
        ("https://r.example/v2/x", "https://10.0.0.1:8443/b", None),
        (
            "https://r.example/v2/x",
            "http://r.example/b",
            Some("never downgraded"),
        ),
        (
            "https://r.example/v2/x",
            "http://169.254.169.254/",
            Some("never downgraded"),
        ),
        (
            "http://127.0.0.1:5000/v2/x",
            "http://127.0.0.1:5000/b",
            None,
        ),
        ("http://localhost/v2/x", "http://LOCALHOST:80/b", None),
        (
            "http://127.0.0.1:5000/v2/x",
            "http://127.0.0.1:5001/b",
            Some("own host"),
        ),
        (
            "http://127.0.0.1:5000/v2/x",
            "http://10.0.0.5:5000/b",
            Some("own host"),
        ),
        (
            "http://127.0.0.1:5000/v2/x",
            "https://127.0.0.1:5000/b",
            Some("own host"),
        ),
        (
            "http://127.0.0.1:5000/v2/x",
            "https://s3.example.com/b",
            Some("own host"),
        ),
        (
            "https://r.example/v2/x",
            "ftp://r.example/b",
            Some("never downgraded"),
        ),
        ("https://r.example/v2/x", "not a url", Some("not a URL")),
    ];
    for (from, to, want) in cases {
        let got = refused_hop(from, to);
        match (got, want) {
            (None, None) => {}
            (Some(got), Some(want)) => assert!(got.contains(want), "{from} -> {to}: {got}"),
            _ => panic!("{from} -> {to}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn shown_table() {
    let cases = [
        (
            "https://s3.example.com/b/x?X-Amz-Signature=abc#f",
            "https://s3.example.com/b/x",
        ),
        (
            "http://user:pw@127.0.0.1:5000/v2/",
            "http://127.0.0.1:5000/v2/",
        ),
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
    ];
    for (url, want) in cases {
        assert_eq!(shown(url), want, "{url}");
    }
}

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
    let keyring = anonymous()?;
    let partial = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc";
    let cases = [
        (String::new(), "no answer within 30s"),
        (partial.to_owned(), "the body did not arrive within 30s"),
        (
            "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100\r\n\r\n".to_owned(),
            "HTTP 500 Internal Server Error",
        ),
    ];
    for (head, want) in cases {
        let host = stalling(head.clone()).await?;
        let image = captf_api::image::parse(&format!("{host}/m:t")).map_err(anyhow::Error::msg)?;
        let mut session = registry.session(&image, &keyring, CredentialSource::AuthFiles, false);
        let got = session
            .get("/v2/m/manifests/t", None)
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(got.contains(want), "{head:?}: {got}");
    }

    // A token service (on the registry's own host, as a plain-http registry's must be)
    // that never answers.
    let (host, _) = serve(|path, own| {
        if path.starts_with("/token") {
            Reply::Stall
        } else {
            let challenge = format!("Bearer realm=\"http://{own}/token\"");
            response("401 Unauthorized", &[("WWW-Authenticate", &challenge)], "")
        }
    })
    .await?;
    let image = captf_api::image::parse(&format!("{host}/m:t")).map_err(anyhow::Error::msg)?;
    let mut session = registry.session(&image, &keyring, CredentialSource::AuthFiles, false);
    let got = session
        .get("/v2/m/manifests/t", None)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        got.contains(&format!("GET http://{host}/token: no answer within 30s")),
        "{got}"
    );

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
        (
            "https://r.example.com/v2/a/blobs/x",
            "//cdn.example.net/x",
            "https://cdn.example.net/x",
        ),
        // Relative to the current folder, never glued to the host.
        (
            "http://127.0.0.1:5000/v2/a/blobs/x?q=1",
            ".evil.example/x",
            "http://127.0.0.1:5000/v2/a/blobs/.evil.example/x",
        ),
        (
            "http://127.0.0.1:5000/v2/a/blobs/x",
            "/y?next=http://elsewhere/",
            "http://127.0.0.1:5000/y?next=http://elsewhere/",
        ),
    ];
    for (current, location, want) in cases {
        assert_eq!(resolve(current, location), want, "{location}");
    }
}
