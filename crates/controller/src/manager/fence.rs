//! A leader writes only while its Lease is confirmed. A leader stalled past its Lease (a long
//! GC pause, SIGSTOP, a frozen VM) wakes up with passes half-way and watch events queued, and
//! would write before the election notices the Lease is gone; by then the standby leads and a
//! second writer could start a second Job. So the controllers' client goes through a fence:
//! each confirmation that this replica holds the Lease opens it until the Lease's end as that
//! read saw it (less a margin), and a request that writes is refused once that time has
//! passed, with no I/O. Reads pass whatever the fence says.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use futures::future::{BoxFuture, FutureExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

/// Taken off the Lease's end: the requests in flight when it runs out, and the clock's error.
const MARGIN: Duration = Duration::from_secs(2);

/// When writes stop, shared by the client's layer and the task that confirms the Lease.
#[derive(Clone, Debug)]
pub struct Fence {
    base: Instant,
    /// Milliseconds after `base` until which writes pass; 0 is closed.
    until: Arc<AtomicU64>,
}

impl Default for Fence {
    fn default() -> Self {
        Fence {
            base: Instant::now(),
            until: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Fence {
    /// Writes pass until `deadline` (never moved back by a late confirmation of an older read).
    pub fn open_until(&self, deadline: Instant) {
        let millis = deadline.saturating_duration_since(self.base).as_millis();
        let millis = u64::try_from(millis).unwrap_or(u64::MAX);
        self.until.fetch_max(millis, Ordering::SeqCst);
    }

    /// Whether a write may go out at `now`.
    pub fn open_at(&self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.base).as_millis();
        u64::try_from(elapsed).unwrap_or(u64::MAX) < self.until.load(Ordering::SeqCst)
    }

    /// Confirms the Lease once: when `identity` holds it, opens the fence until its end as
    /// seen at `asked` (the read's start, so the read's own time is never counted twice)
    /// less [`MARGIN`]. Whether it was confirmed.
    pub fn confirm(&self, lease: &Lease, identity: &str, asked: Instant, wall: SystemTime) -> bool {
        let Some(spec) = lease.spec.as_ref() else {
            return false;
        };
        if spec.holder_identity.as_deref() != Some(identity) {
            return false;
        }
        let (Some(renewed), Some(seconds)) = (&spec.renew_time, spec.lease_duration_seconds) else {
            return false;
        };
        let ends: SystemTime = renewed.0.into();
        let ends = ends + Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
        let Ok(left) = ends.duration_since(wall) else {
            return false;
        };
        let Some(left) = left.checked_sub(MARGIN) else {
            return false;
        };
        self.open_until(asked + left);
        true
    }

    /// Reads the Lease every `every` and confirms it, until the task is dropped.
    pub async fn keep(self, leases: Api<Lease>, name: String, identity: String, every: Duration) {
        loop {
            let (asked, wall) = (Instant::now(), SystemTime::now());
            match leases.get_opt(&name).await {
                Ok(Some(lease)) => {
                    self.confirm(&lease, &identity, asked, wall);
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::debug!(%error, lease = %name, "the Lease could not be read to confirm leadership")
                }
            }
            tokio::time::sleep(every).await;
        }
    }
}

/// Whether the request changes something.
fn writes(method: &http::Method) -> bool {
    !matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

/// The layer that puts a [`Fence`] in front of a client's requests.
#[derive(Clone, Debug)]
pub struct FenceLayer(pub Fence);

impl<S> tower::Layer<S> for FenceLayer {
    type Service = Fenced<S>;
    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            fence: self.0.clone(),
        }
    }
}

/// A service whose writes pass only while its fence is open.
#[derive(Clone, Debug)]
pub struct Fenced<S> {
    inner: S,
    fence: Fence,
}

/// What a refused write returns.
#[derive(Debug, thiserror::Error)]
#[error(
    "{method} {path} refused: this replica's leadership is not confirmed (its Lease may have run out while it was stalled), so it writes nothing"
)]
pub struct NotLeading {
    method: http::Method,
    path: String,
}

impl<S, B> tower::Service<http::Request<B>> for Fenced<S>
where
    S: tower::Service<http::Request<B>>,
    S::Error: Into<tower::BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = tower::BoxError;
    type Future = BoxFuture<'static, Result<S::Response, tower::BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if writes(request.method()) && !self.fence.open_at(Instant::now()) {
            let refused = NotLeading {
                method: request.method().clone(),
                path: request.uri().path().to_owned(),
            };
            tracing::warn!(%refused, "write refused");
            return futures::future::ready(Err(refused.into())).boxed();
        }
        let call = self.inner.call(request);
        async move { call.await.map_err(Into::into) }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use tower::{Layer, Service, ServiceExt};

    use super::*;

    fn lease(holder: &str, renewed_ago: u64, seconds: i32, wall: SystemTime) -> Lease {
        let renewed = wall - Duration::from_secs(renewed_ago);
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.to_owned()),
                renew_time: Some(MicroTime(
                    k8s_openapi::jiff::Timestamp::try_from(renewed).expect("time"),
                )),
                lease_duration_seconds: Some(seconds),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_confirmation_opens_the_fence_until_the_lease_ends_less_the_margin() {
        let wall = SystemTime::now();
        let asked = Instant::now();
        type Row = (&'static str, Lease, Option<u64>);
        let rows: Vec<Row> = vec![
            (
                "held, renewed 3 s ago, 15 s",
                lease("me", 3, 15, wall),
                Some(10),
            ),
            ("held, renewed just now", lease("me", 0, 15, wall), Some(13)),
            ("held, about to run out", lease("me", 14, 15, wall), None),
            ("held, run out", lease("me", 20, 15, wall), None),
            ("held by another", lease("other", 0, 15, wall), None),
            ("no spec", Lease::default(), None),
        ];
        for (what, lease, open_for) in rows {
            let fence = Fence::default();
            assert_eq!(
                fence.confirm(&lease, "me", asked, wall),
                open_for.is_some(),
                "{what}"
            );
            match open_for {
                Some(s) => {
                    assert!(
                        fence.open_at(asked + Duration::from_secs(s) - Duration::from_millis(50)),
                        "{what}"
                    );
                    assert!(
                        !fence.open_at(asked + Duration::from_secs(s) + Duration::from_millis(50)),
                        "{what}"
                    );
                }
                None => assert!(!fence.open_at(asked), "{what}"),
            }
        }
    }

    #[test]
    fn a_later_confirmation_of_an_older_read_never_closes_the_fence_sooner() {
        let fence = Fence::default();
        let now = Instant::now();
        fence.open_until(now + Duration::from_secs(10));
        fence.open_until(now + Duration::from_secs(5));
        assert!(fence.open_at(now + Duration::from_secs(9)));
    }

    #[tokio::test]
    async fn a_closed_fence_refuses_writes_and_lets_reads_through() -> anyhow::Result<()> {
        let fence = Fence::default();
        let inner = tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>("sent")
        });
        let mut fenced = FenceLayer(fence.clone()).layer(inner);
        let request = |method: http::Method| {
            http::Request::builder()
                .method(method)
                .uri("/api/v1/namespaces/team-a/secrets")
                .body(())
        };
        for method in [
            http::Method::POST,
            http::Method::PUT,
            http::Method::PATCH,
            http::Method::DELETE,
        ] {
            let refused = fenced
                .ready()
                .await
                .map_err(anyhow::Error::from_boxed)?
                .call(request(method.clone())?)
                .await;
            let error = refused.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                error.contains("leadership is not confirmed"),
                "{method}: {error}"
            );
        }
        let read = fenced
            .ready()
            .await
            .map_err(anyhow::Error::from_boxed)?
            .call(request(http::Method::GET)?)
            .await;
        assert_eq!(read.map_err(anyhow::Error::from_boxed)?, "sent");
        fence.open_until(Instant::now() + Duration::from_secs(60));
        let write = fenced
            .ready()
            .await
            .map_err(anyhow::Error::from_boxed)?
            .call(request(http::Method::POST)?)
            .await;
        assert_eq!(write.map_err(anyhow::Error::from_boxed)?, "sent");
        Ok(())
    }
}
