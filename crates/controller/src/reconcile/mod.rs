//! The reconcile of the workload kinds, one flow ([`flow`]) with a kind adapter each
//! ([`kinds::cluster`], [`kinds::machine`], [`kinds::pool`]): observe a snapshot,
//! [`crate::decide`], act, and write status once per pass. The identity and the machine
//! template have passes of their own (no Jobs).

pub mod act;
pub mod adapter;
pub mod backups;
pub mod finished;
pub mod flow;
pub mod interpret;
pub mod kinds;
pub mod layers;
pub mod leases;
pub mod observe;
pub mod pass;
pub mod pods;
pub mod protection;

use std::future::Future;
use std::sync::Arc;

use futures::FutureExt;
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};

use crate::Error;
use crate::cache::Caches;
use crate::metrics::Metrics;
use crate::settings::PassSettings;

/// What every pass shares, built once by `captf manager`.
pub struct Context {
    pub client: kube::Client,
    /// The flags a pass reads.
    pub settings: PassSettings,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// Metadata of the managed Jobs and Secrets.
    pub caches: Caches,
    /// Reads module image labels (machine template capacity); `None` when the system has no
    /// root certificates to trust.
    pub registry: Option<crate::registry::Registry>,
    /// Module images' variables schemas, shared with the webhooks.
    pub schemas: crate::schemas::Schemas,
    /// Failed passes in a row, per object, for [`error_policy`].
    pub backoff: crate::backoff::Backoff,
    /// The state reads that may fetch and decode at once
    /// ([`observe::state::CONCURRENT_READS`]).
    pub state_reads: Arc<tokio::sync::Semaphore>,
}

impl crate::backoff::Retries for Context {
    fn backoff(&self) -> &crate::backoff::Backoff {
        &self.backoff
    }
}

impl Context {
    pub fn new(
        client: kube::Client,
        settings: PassSettings,
        metrics: Arc<Metrics>,
        caches: Caches,
        schemas: crate::schemas::Schemas,
    ) -> Self {
        let reporter = Reporter {
            controller: "captf-manager".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let recorder = Recorder::new(client.clone(), reporter);
        let registry = crate::registry::Registry::new()
            .inspect_err(|error| {
                tracing::error!(%error, "no root certificates: machine template images cannot be read");
            })
            .ok();
        Context {
            client,
            settings,
            metrics,
            recorder,
            caches,
            registry,
            schemas,
            backoff: Default::default(),
            state_reads: Arc::new(tokio::sync::Semaphore::new(
                observe::state::CONCURRENT_READS,
            )),
        }
    }
}

/// A pass that panics fails like one that returns an error: [`error_policy`] logs and counts
/// it and retries it later, and every other object's passes go on. Unguarded, the panic would
/// unwind through the controller and end all of its passes, while the manager kept its
/// leadership and did nothing (controller-runtime recovers a panicking reconcile the same way).
/// A pass that succeeds resets the object's backoff.
pub fn guarded<K, C, F, Fut>(
    mut reconcile: F,
) -> impl FnMut(Arc<K>, Arc<C>) -> futures::future::BoxFuture<'static, Result<Action, Error>>
where
    K: kube::Resource<DynamicType = ()>,
    C: crate::backoff::Retries + Send + Sync + 'static,
    F: FnMut(Arc<K>, Arc<C>) -> Fut,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    move |object, ctx| {
        let id = object_id(object.as_ref());
        // Calling an async fn runs none of its body: every panic happens inside `pass`.
        let pass = std::panic::AssertUnwindSafe(reconcile(object, ctx.clone()));
        pass.catch_unwind()
            .map(move |result| {
                let result = result
                    .unwrap_or_else(|panic| Err(Error::Panicked(panic_message(panic.as_ref()))));
                if result.is_ok() {
                    ctx.backoff().succeeded(&id);
                }
                result
            })
            .boxed()
    }
}

/// The backoff's key of an object.
fn object_id<K: kube::Resource<DynamicType = ()>>(object: &K) -> String {
    let meta = object.meta();
    format!(
        "{}/{}/{}",
        K::kind(&()),
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// What a panic said: `panic!` with a literal carries a `&str`, with arguments a `String`.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned())
}

/// Requeue after an error by what a retry can do ([`Error::retry`]), later the more often the
/// object failed in a row ([`crate::backoff::delay`]); a bad object waits for a change.
pub fn error_policy<K: kube::Resource<DynamicType = ()>>(
    object: Arc<K>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let controller = match K::kind(&()).as_ref() {
        "TerraformMachine" => "terraformmachine",
        "TerraformMachinePool" => "terraformmachinepool",
        "TerraformMachineTemplate" => "terraformmachinetemplate",
        "TerraformClusterIdentity" => "terraformclusteridentity",
        _ => "terraformcluster",
    };
    ctx.metrics
        .reconcile_errors_total
        .get_or_create(&crate::metrics::Controller { controller })
        .inc();
    let retry = error.retry();
    let failures = ctx.backoff.failed(&object_id(object.as_ref()));
    let delay = crate::backoff::delay(retry, failures);
    let (category, again) = (error.category(), delay.map(|d| d.as_secs()));
    if let Error::Panicked(_) = error {
        tracing::error!(%error, category, failures, retry_in_seconds = again, "reconcile panicked");
    } else {
        tracing::warn!(%error, category, failures, retry_in_seconds = again, retry = ?retry, "reconcile failed");
    }
    delay.map_or_else(Action::await_change, Action::requeue)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pass context with only what [`guarded`] needs.
    #[derive(Default)]
    struct Counts(crate::backoff::Backoff);

    impl crate::backoff::Retries for Counts {
        fn backoff(&self) -> &crate::backoff::Backoff {
            &self.0
        }
    }

    fn object(case: &str) -> Arc<k8s_openapi::api::core::v1::ConfigMap> {
        let mut object = k8s_openapi::api::core::v1::ConfigMap::default();
        object.metadata.name = Some(case.to_owned());
        Arc::new(object)
    }

    /// A pass that ends as the object's name says: its own result, or a panic with a literal
    /// or a formatted message.
    async fn pass(
        case: Arc<k8s_openapi::api::core::v1::ConfigMap>,
        _ctx: Arc<Counts>,
    ) -> Result<Action, Error> {
        match case.metadata.name.as_deref().unwrap_or_default() {
            "ok" => Ok(Action::await_change()),
            "error" => Err(Error::InvalidObject("bad spec".into())),
            "panic literal" => panic!("index out of bounds"),
            other => panic!("{other} with arguments"),
        }
    }

    #[tokio::test]
    async fn a_success_resets_the_backoff() {
        let ctx = Arc::new(Counts::default());
        let mut run = guarded(pass);
        let id = object_id(object("ok").as_ref());
        assert_eq!(ctx.0.failed(&id), 1);
        assert_eq!(ctx.0.failed(&id), 2);
        run(object("ok"), ctx.clone()).await.expect("ok");
        assert_eq!(ctx.0.failed(&id), 1, "reset by the success");
    }

    #[tokio::test]
    async fn a_panicking_pass_fails_like_one_that_errs() -> anyhow::Result<()> {
        let mut run = guarded(pass);
        for (case, want) in [
            ("ok", None),
            ("error", Some("invalid_object: bad spec")),
            (
                "panic literal",
                Some("panic: the pass panicked: index out of bounds"),
            ),
            (
                "panic",
                Some("panic: the pass panicked: panic with arguments"),
            ),
        ] {
            let got = run(object(case), Arc::new(Counts::default()))
                .await
                .err()
                .map(|e| format!("{}: {e}", e.category()));
            let got = got
                .as_deref()
                .map(|g| g.split(" (a bug").next().unwrap_or(g));
            anyhow::ensure!(got == want, "{case}: got {got:?}, want {want:?}");
        }
        Ok(())
    }
}
