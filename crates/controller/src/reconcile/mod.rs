//! The reconcile flow shared by the workload kinds: observe a snapshot, [`crate::decide`], act,
//! and write status once per pass.

pub mod act;
pub mod approvals;
pub mod backups;
pub mod bookkeeping;
pub mod cluster;
pub mod credentials;
pub mod identity;
pub mod jobs;
pub mod launch;
pub mod leases;
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

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};

use crate::Error;
use crate::cache::Caches;
use crate::manager::{ManagerArgs, Metrics};

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
}

impl Context {
    pub fn new(
        client: kube::Client,
        args: ManagerArgs,
        metrics: Arc<Metrics>,
        caches: Caches,
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
        }
    }
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
        .get_or_create(&crate::manager::metrics::Controller { controller })
        .inc();
    tracing::warn!(error = %error, category = error.category(), "reconcile failed");
    match error {
        Error::InvalidObject(_) => Action::await_change(),
        _ => Action::requeue(Duration::from_secs(15)),
    }
}
