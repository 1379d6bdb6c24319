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

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::header;
use axum::routing::post;

pub use review::Webhook;

use crate::Error;
use crate::settings::WebhookServer;
use crate::tls::{
    CERT_CHECK_INTERVAL, CertFiles, WhenMissing, server_config, tls_listener, watch_certificate,
};

/// The largest review accepted: an object and its old version, each up to the API server's
/// 1.5 MiB request limit, with room to spare.
const MAX_BODY: usize = 8 << 20;

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

/// Every webhook path.
pub fn router(webhook: Arc<Webhook>) -> Router {
    let mut router = Router::new();
    for endpoint in Endpoint::ALL {
        let webhook = webhook.clone();
        router = router.route(
            &endpoint.path(),
            post(move |body: axum::body::Bytes| async move {
                let answer = review::review(&webhook, endpoint, &body).await;
                let body = serde_json::to_vec(&answer).unwrap_or_default();
                ([(header::CONTENT_TYPE, "application/json")], body)
            }),
        );
    }
    router.layer(DefaultBodyLimit::max(MAX_BODY))
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
    let listener = tls_listener(tcp, config, "webhook server")
        .map_err(|e| Error::Startup(format!("webhook server: {e}")))?;
    ready.store(true, Ordering::Relaxed);
    axum::serve(listener, router(webhook))
        .await
        .map_err(|e| Error::Startup(format!("webhook server: {e}")))
}
