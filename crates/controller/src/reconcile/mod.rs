//! The reconcile of the workload kinds, one flow ([`flow`]) with a kind adapter each
//! ([`cluster`], [`machine`], [`pool`]): observe a snapshot, [`crate::decide`], act, and write
//! status once per pass. The identity and the machine template have passes of their own (no
//! Jobs).

pub mod act;
pub mod approvals;
pub mod backups;
pub mod bookkeeping;
pub mod cluster;
pub mod credentials;
pub mod dependents;
pub mod flow;
pub mod identity;
pub mod image_pull;
pub mod jobs;
pub mod launch;
pub mod leases;
pub mod lineage;
pub mod locks;
pub mod machine;
pub mod member;
pub mod object;
pub mod outputs;
pub mod owners;
pub mod pass;
pub mod pool;
pub mod pool_exports;
mod pool_guard;
pub mod record;
pub mod secrets;
pub mod snapshot;
pub mod state;
pub mod template;
pub mod variables;
pub mod verify_owner;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};

use crate::Error;
use crate::cache::Caches;
use crate::metrics::Metrics;
use crate::settings::ManagerArgs;

/// What every pass shares, built once by `captf manager`.
pub struct Context {
    pub client: kube::Client,
    pub args: ManagerArgs,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// Metadata of the managed Jobs and Secrets.
    pub caches: Caches,
    /// Reads module image labels (machine template capacity); `None` when the system has no
    /// root certificates to trust.
    pub registry: Option<crate::registry::Registry>,
    /// Module images' variables schemas, shared with the webhooks.
    pub schemas: crate::schemas::Schemas,
}

impl Context {
    pub fn new(
        client: kube::Client,
        args: ManagerArgs,
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
            args,
            metrics,
            recorder,
            caches,
            registry,
            schemas,
        }
    }
}

/// A pass that panics fails like one that returns an error: [`error_policy`] logs and counts
/// it and retries it later, and every other object's passes go on. Unguarded, the panic would
/// unwind through the controller and end all of its passes, while the manager kept its
/// leadership and did nothing (controller-runtime recovers a panicking reconcile the same way).
pub fn guarded<K, C, F, Fut>(
    mut reconcile: F,
) -> impl FnMut(Arc<K>, Arc<C>) -> futures::future::BoxFuture<'static, Result<Action, Error>>
where
    F: FnMut(Arc<K>, Arc<C>) -> Fut,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    move |object, ctx| {
        // Calling an async fn runs none of its body: every panic happens inside `pass`.
        let pass = std::panic::AssertUnwindSafe(reconcile(object, ctx));
        pass.catch_unwind()
            .map(|result| {
                result.unwrap_or_else(|panic| Err(Error::Panicked(panic_message(panic.as_ref()))))
            })
            .boxed()
    }
}

/// What a panic said: `panic!` with a literal carries a `&str`, with arguments a `String`.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned())
}

/// Requeue after an error: transient API trouble retries soon, a bad object waits for a change.
pub fn error_policy<K: kube::Resource<DynamicType = ()>>(
    _object: Arc<K>,
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
    if let Error::Panicked(_) = error {
        tracing::error!(error = %error, category = error.category(), "reconcile panicked");
    } else {
        tracing::warn!(error = %error, category = error.category(), "reconcile failed");
    }
    match error {
        Error::InvalidObject(_) => Action::await_change(),
        _ => Action::requeue(Duration::from_secs(15)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pass that ends as `case` says: its own result, or a panic with a literal or a
    /// formatted message.
    async fn pass(case: Arc<String>, _ctx: Arc<()>) -> Result<Action, Error> {
        match case.as_str() {
            "ok" => Ok(Action::await_change()),
            "error" => Err(Error::InvalidObject("bad spec".into())),
            "panic literal" => panic!("index out of bounds"),
            other => panic!("{other} with arguments"),
        }
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
            let got = run(Arc::new(case.to_owned()), Arc::new(()))
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
