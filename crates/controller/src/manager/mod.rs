//! `captf manager`: wiring of the controllers, the health and metrics endpoints and leader
//! election. The reconcile logic lives in [`crate::reconcile`]; the settings it is started with
//! ([`crate::settings`]), the metrics ([`crate::metrics`]) and the serving certificates
//! ([`crate::tls`]) are modules of their own, which the reconcile and the webhook use too.

pub mod diagnostics;
pub mod election;
pub mod fence;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::routing::get;
use futures::StreamExt;
use kube::ResourceExt;
use kube::runtime::controller::{self, Controller};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::Error;
use crate::cache::Caches;
use crate::metrics::Metrics;
use crate::reconcile::{self, Context};
use crate::settings::ManagerArgs;

/// Runs the manager until SIGTERM/SIGINT.
pub async fn run(args: ManagerArgs) -> Result<(), Error> {
    args.validate().map_err(Error::Startup)?;
    for ignored in args.ignored() {
        tracing::warn!("ignored: {ignored}");
    }
    let pod_namespace = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty());
    let service_account = std::env::var("SERVICE_ACCOUNT_NAME")
        .ok()
        .filter(|s| !s.is_empty());
    if pod_namespace.is_none() || service_account.is_none() {
        tracing::warn!(
            "POD_NAMESPACE or SERVICE_ACCOUNT_NAME is not set: the manager's own user is unknown, so the webhook will refuse \
             every providerID the manager writes; set both from the downward API (config/manager does)"
        );
    }
    let config = config(args.kubeconfig.as_deref()).await?;
    let client =
        Client::try_from(config.clone()).map_err(|e| Error::Startup(format!("client: {e}")))?;
    ensure_crds(&client).await?;
    // With leader election, the controllers write through the leader's fence; the election,
    // the webhooks and the metrics server's reviews do not.
    let fence = args.leader_elect.then(fence::Fence::default);
    let controllers_client = match &fence {
        Some(fence) => kube::client::ClientBuilder::try_from(config)
            .map_err(|e| Error::Startup(format!("client: {e}")))?
            .with_layer(&fence::FenceLayer(fence.clone()))
            .build(),
        None => client.clone(),
    };
    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    let webhook_ready = Arc::new(AtomicBool::new(false));
    // The caches are filled by the leader only: their change notifications must be consumed
    // as they come, and only a leader's controllers consume them.
    let caches: Arc<OnceLock<Caches>> = Arc::new(OnceLock::new());

    let health = serve(
        "health",
        &args.health_addr,
        health_router(ready.clone(), webhook_ready.clone()),
    );
    // Every replica admits, leader or not: the webhooks fail closed, so the standby keeps the
    // API writable while the leader restarts.
    // One cache of module images' variables schemas: what a webhook read serves the passes.
    let schemas = crate::schemas::Schemas::default();
    let webhook = Arc::new(crate::webhook::Webhook {
        client: client.clone(),
        manager: crate::webhook::rules::ManagerUser::new(
            pod_namespace.as_deref(),
            service_account.as_deref(),
        ),
        registry: crate::registry::Registry::new()
            .inspect_err(|error| {
                tracing::error!(%error, "no root certificates: the webhooks cannot read module images' variables schemas");
            })
            .ok(),
        schemas: schemas.clone(),
    });
    let webhooks = crate::webhook::serve(args.webhook_server(), webhook, webhook_ready);
    let metrics_router = metrics_router(metrics.clone(), caches.clone());
    let metrics_server = async {
        if args.insecure_diagnostics {
            serve("metrics", &args.diagnostics_address, metrics_router).await
        } else {
            let (address, tls) = (&args.diagnostics_address, &args.tls_min_version);
            diagnostics::serve(address, tls, client.clone(), metrics_router).await
        }
    };
    let start = Start {
        client: controllers_client,
        args: args.clone(),
        metrics: metrics.clone(),
        caches,
        schemas,
    };
    let stop: Stop = futures::FutureExt::shared(futures::FutureExt::boxed(shutdown()));
    let controllers = async {
        ready.store(true, Ordering::Relaxed);
        if args.leader_elect {
            let fence = fence.clone().unwrap_or_default();
            lead(
                &client,
                &args,
                pod_namespace.as_deref(),
                start,
                stop.clone(),
                fence,
            )
            .await
        } else {
            drain(run_controllers(start, stop.clone()), stop.clone()).await;
            Ok(())
        }
    };
    // The controllers' branch ends on a signal, once the running passes are done (and, with
    // leader election, the Lease released); the servers stop with the process.
    let result = tokio::select! {
        result = health => result,
        result = metrics_server => result,
        result = webhooks => result,
        result = controllers => result,
    };
    tracing::info!("stopped");
    result
}

/// A client from `--kubeconfig`, else $KUBECONFIG, `~/.kube/config` or the in-cluster config.
pub async fn connect(kubeconfig: Option<&std::path::Path>) -> Result<Client, Error> {
    let config = config(kubeconfig).await?;
    Client::try_from(config).map_err(|e| Error::Startup(format!("client: {e}")))
}

/// The configuration from `--kubeconfig`, else $KUBECONFIG, `~/.kube/config` or the in-cluster
/// config.
async fn config(kubeconfig: Option<&std::path::Path>) -> Result<kube::Config, Error> {
    Ok(match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| Error::Startup(format!("--kubeconfig: {e}")))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| Error::Startup(format!("--kubeconfig: {e}")))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| Error::Startup(format!("no Kubernetes configuration: {e}")))?,
    })
}

/// Refuses to start without the CRDs, with an install hint.
async fn ensure_crds(client: &Client) -> Result<(), Error> {
    let api: Api<captf_api::TerraformCluster> = Api::all(client.clone());
    api.list(&kube::api::ListParams::default().limit(1)).await.map_err(|e| {
        Error::Startup(format!(
            "cannot list TerraformClusters ({e}); install the CRDs first: `captf crds | kubectl apply --server-side -f -`"
        ))
    })?;
    Ok(())
}

/// Runs the controllers while this replica leads; gives them up when leadership is lost, and
/// hands the Lease over when `stop` fires.
async fn lead(
    client: &Client,
    args: &ManagerArgs,
    namespace: Option<&str>,
    start: Start,
    stop: Stop,
    fence: fence::Fence,
) -> Result<(), Error> {
    // Without POD_NAMESPACE: the namespace the client was configured with, which in a pod is
    // the ServiceAccount's (its token's namespace file), as controller-runtime does. The
    // shipped Role lets the manager write the Lease there; "default" it could not.
    let namespace = namespace.unwrap_or(client.default_namespace());
    let identity = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("captf-{}", std::process::id()));
    let election = election::Election::new(client.clone(), args, namespace, identity);
    let identity = election.identity();
    tracing::info!(lease = %args.leader_elect_lease_name, %namespace, %identity, "waiting for leadership");
    let Some(mut leadership) = election.campaign(stop.clone()).await else {
        return Ok(());
    };
    // The controllers write only while a read of the Lease confirms this replica holds it:
    // once before they start, then every retry period.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), namespace);
    let lease = args.leader_elect_lease_name.clone();
    let (asked, wall) = (std::time::Instant::now(), std::time::SystemTime::now());
    if let Ok(Some(held)) = leases.get_opt(&lease).await {
        fence.confirm(&held, identity, asked, wall);
    }
    let confirming = tokio::spawn(fence.keep(
        leases,
        lease,
        identity.to_owned(),
        args.leader_elect_retry_period,
    ));
    let _confirming = AbortOnDrop(confirming);
    tracing::info!(%identity, "became leader; starting controllers");
    let mut controllers = tokio::spawn(run_controllers(start, stop.clone()));
    let stopped = loop {
        tokio::select! {
            // First: controllers that end after the signal ended because of it.
            biased;
            () = stop.clone() => break true,
            changed = leadership.leading.changed() => if changed.is_err() || !*leadership.leading.borrow() {
                break false;
            },
            // Controllers that end while this replica leads (their caches stopped) end the
            // manager too: otherwise it would keep the lease and do nothing. A pass's panic is
            // caught in the pass (`reconcile::guarded`); one anywhere else ends up here.
            ended = &mut controllers => {
                hand_over(leadership, identity).await;
                return match ended {
                    Err(e) if e.is_panic() => Err(Error::Startup(format!("the controllers panicked: {e}"))),
                    _ => Ok(()),
                };
            }
        }
    };
    if !stopped {
        tracing::warn!(%identity, "lost leadership; stopping controllers");
        controllers.abort();
        // A replica that lost its lease must not keep writing: exit and let the Deployment
        // restart it as a candidate (what controller-runtime does too).
        return Err(Error::Startup("leadership lost".into()));
    }
    // The controllers saw the signal too: they start no pass and end once the running ones have.
    let drained = tokio::select! {
        ended = tokio::time::timeout(election::GRACEFUL_SHUTDOWN, &mut controllers) => ended.is_ok(),
        _ = leadership.leading.wait_for(|leading| !leading) => false,
    };
    if !drained {
        tracing::warn!(%identity, "stopping with passes still running");
        controllers.abort();
    }
    hand_over(leadership, identity).await;
    Ok(())
}

/// Aborts a task when dropped: the Lease confirmations end with the leadership they confirm.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn hand_over(leadership: election::Leadership, identity: &str) {
    if leadership.release().await {
        tracing::info!(%identity, "released the leader-election Lease");
    } else {
        tracing::warn!(%identity, "could not release the leader-election Lease: the standby takes over once it runs out");
    }
}

/// Fires once on SIGTERM or SIGINT; every part of the manager that must stop holds a clone.
type Stop = futures::future::Shared<futures::future::BoxFuture<'static, ()>>;

/// Runs `work` (the controllers) until it ends; after `stop`, gives it at most
/// [`election::GRACEFUL_SHUTDOWN`] to finish its running passes.
async fn drain(work: impl std::future::Future<Output = ()>, stop: Stop) {
    tokio::pin!(work);
    tokio::select! {
        () = &mut work => return,
        () = stop => {}
    }
    if tokio::time::timeout(election::GRACEFUL_SHUTDOWN, work)
        .await
        .is_err()
    {
        tracing::warn!("stopping with passes still running");
    }
}

/// What the controllers are started from.
struct Start {
    client: Client,
    args: ManagerArgs,
    metrics: Arc<Metrics>,
    /// Set once the caches exist (for `/metrics`).
    caches: Arc<OnceLock<Caches>>,
    schemas: crate::schemas::Schemas,
}

/// The machine templates. They run no Job: only their own changes (and a retry after a
/// failed read) wake them.
async fn run_templates(
    ctx: &Arc<Context>,
    args: &ManagerArgs,
    filtered: watcher::Config,
    stop: Stop,
) {
    let client = &ctx.client;
    Controller::new(
        crate::cache::scoped::<captf_api::TerraformMachineTemplate>(client, &args.namespace),
        filtered,
    )
    .with_config(
        controller::Config::default().concurrency(args.terraformmachinetemplate_concurrency),
    )
    .graceful_shutdown_on(stop)
    .run(
        reconcile::guarded(reconcile::kinds::template::reconcile),
        reconcile::error_policy,
        ctx.clone(),
    )
    .for_each(report)
    .await;
}

/// The identities (status only), woken by their mirrors appearing and going. Only a manager
/// that sees every namespace knows where all the mirrors are.
async fn run_identities<S>(ctx: &Arc<Context>, namespace: &str, mirrors: S, stop: Stop)
where
    S: futures::Stream<Item = Arc<crate::cache::SecretMeta>> + Send + 'static,
{
    if !namespace.is_empty() {
        tracing::info!(
            "--namespace is set: TerraformClusterIdentity status is left to a manager that watches every namespace"
        );
        return;
    }
    Controller::new(
        Api::<captf_api::TerraformClusterIdentity>::all(ctx.client.clone()),
        watcher::Config::default().any_semantic(),
    )
    .watches_shared_stream(mirrors, |mirror| {
        mirror
            .annotations()
            .get(captf_api::annotations::IDENTITY)
            .map(|identity| kube::runtime::reflector::ObjectRef::new(identity))
    })
    .graceful_shutdown_on(stop)
    .run(
        reconcile::guarded(reconcile::kinds::identity::reconcile),
        reconcile::error_policy,
        ctx.clone(),
    )
    .for_each(report)
    .await;
}

async fn run_controllers(start: Start, stop: Stop) {
    let crate::cache::Reflectors {
        caches,
        jobs_events,
        secrets_events,
        run,
    } = crate::cache::reflectors(&start.client, &start.args.namespace);
    let _ = start.caches.set(caches.clone());
    tokio::spawn(run.for_each(|()| async {}));
    // One subscription per consumer, taken now: every one handed out must be read.
    let machine_events = (jobs_events.subscribe(), secrets_events.subscribe());
    let pool_events = (jobs_events.subscribe(), secrets_events.subscribe());
    let identity_mirrors = secrets_events.subscribe();
    let cluster_events = (
        jobs_events.into_subscription(),
        secrets_events.into_subscription(),
    );
    let ctx = Arc::new(Context::new(
        start.client.clone(),
        start.args.pass(),
        start.metrics.clone(),
        caches,
        start.schemas.clone(),
    ));
    let client = ctx.client.clone();
    let args = &start.args;
    // Passes count Jobs from the cache (the caps); start only once it holds the whole list.
    let filled = tokio::select! {
        filled = ctx.caches.wait_until_ready() => filled,
        () = stop.clone() => return,
    };
    if !filled {
        tracing::error!("the caches stopped before they were filled");
        return;
    }
    let mut filtered = watcher::Config::default().any_semantic();
    if !args.watch_filter.is_empty() {
        filtered = filtered.labels(&format!(
            "cluster.x-k8s.io/watch-filter={}",
            args.watch_filter
        ));
    }
    let capi = |resource: &kube::core::ApiResource| -> Api<kube::api::DynamicObject> {
        match args.namespace.as_str() {
            "" => Api::all_with(client.clone(), resource),
            ns => Api::namespaced_with(client.clone(), ns, resource),
        }
    };

    // Jobs and Secrets wake the object they are owned by (state chunks and backups included).
    let clusters = workload_controller::<captf_api::TerraformCluster>(
        &client,
        &args.namespace,
        filtered.clone(),
    )
    .owns_shared_stream(cluster_events.0)
    .owns_shared_stream(cluster_events.1)
    .watches_with(
        capi(&crate::capi::cluster_resource()),
        crate::capi::cluster_resource(),
        watcher::Config::default(),
        |cluster| crate::capi::infrastructure_ref_of(&cluster),
    );
    let clusters = variables_sources(clusters, &client, &args.namespace)
        .with_config(controller::Config::default().concurrency(args.terraformcluster_concurrency))
        .graceful_shutdown_on(stop.clone())
        .run(
            reconcile::guarded(reconcile::flow::run::<captf_api::TerraformCluster>),
            reconcile::error_policy,
            ctx.clone(),
        )
        .for_each(report);

    let machines = run_members::<captf_api::TerraformMachine, _, _, _, _>(
        &ctx,
        crate::capi::machine_resource(),
        filtered.clone(),
        machine_events,
        (&args.namespace, args.terraformmachine_concurrency),
        reconcile::flow::run::<captf_api::TerraformMachine>,
        stop.clone(),
    );
    let pools = run_members::<captf_api::TerraformMachinePool, _, _, _, _>(
        &ctx,
        crate::capi::machine_pool_resource(),
        filtered.clone(),
        pool_events,
        (&args.namespace, args.terraformmachinepool_concurrency),
        reconcile::flow::run::<captf_api::TerraformMachinePool>,
        stop.clone(),
    );
    let templates = run_templates(&ctx, args, filtered, stop.clone());
    let identities = run_identities(&ctx, &args.namespace, identity_mirrors, stop.clone());
    // A round cut short by the signal is only a round: the next leader sweeps again.
    let sweep = async {
        tokio::select! {
            () = crate::sweep::run(client.clone(), args.namespace.clone(), args.sync_period) => {}
            () = stop.clone() => {}
        }
    };
    futures::join!(clusters, machines, pools, templates, identities, sweep);
}

/// A workload kind a controller runs for.
trait Watched:
    kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + crate::variables::Workspaced
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + crate::variables::Workspaced
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// The controller of a workload kind over its own objects, held without what no pass reads
/// ([`crate::cache::workload_trimmed`]) and woken only by the changes a pass acts on
/// ([`crate::wake`]), not by its own status patches.
fn workload_controller<K: Watched>(
    client: &Client,
    namespace: &str,
    config: watcher::Config,
) -> Controller<K> {
    let (reader, writer) = kube::runtime::reflector::store();
    let changes = watcher::watcher(crate::cache::scoped::<K>(client, namespace), config)
        .default_backoff()
        .modify(|object: &mut K| crate::cache::workload_trimmed(object.meta_mut()))
        .reflect(writer)
        .applied_objects()
        .predicate_filter(
            |object: &K| crate::wake::pass_worthy(object.meta()),
            kube::runtime::PredicateConfig::default(),
        );
    Controller::for_stream(changes, reader)
}

/// The controller of a cluster's members (machines, pools). Besides their Jobs and Secrets they
/// wake for their CAPI owner (`owner`: bootstrap data, replicas, deletion), and for their
/// Cluster and TerraformCluster (pause, provisioning, exports, inherited policy): every member
/// of that cluster, found in the controller's own cache by the cluster-name label.
async fn run_members<K, F, Fut, J, S>(
    ctx: &Arc<Context>,
    owner: kube::core::ApiResource,
    config: watcher::Config,
    (jobs, secrets): (J, S),
    (namespace, concurrency): (&str, u16),
    reconcile: F,
    stop: Stop,
) where
    K: Watched,
    F: FnMut(Arc<K>, Arc<Context>) -> Fut,
    Fut: std::future::Future<Output = Result<kube::runtime::controller::Action, crate::Error>>
        + Send
        + 'static,
    J: futures::Stream<Item = Arc<crate::cache::JobMeta>> + Send + 'static,
    S: futures::Stream<Item = Arc<crate::cache::SecretMeta>> + Send + 'static,
{
    let client = &ctx.client;
    let capi = |resource: &kube::core::ApiResource| -> Api<kube::api::DynamicObject> {
        match namespace {
            "" => Api::all_with(client.clone(), resource),
            ns => Api::namespaced_with(client.clone(), ns, resource),
        }
    };
    let controller = workload_controller::<K>(client, namespace, config);
    let controller = variables_sources(controller, client, namespace);
    let members = |store: kube::runtime::reflector::Store<K>| {
        move |namespace: Option<String>, cluster: Option<String>| {
            store
                .state()
                .into_iter()
                .filter(|m| {
                    m.meta().namespace == namespace
                        && cluster.is_some()
                        && m.labels().get(captf_api::labels::CLUSTER_NAME) == cluster.as_ref()
                })
                .map(|m| kube::runtime::reflector::ObjectRef::from_obj(m.as_ref()))
                .collect::<Vec<_>>()
        }
    };
    let capi_meta = |resource: &kube::core::ApiResource| -> Api<
        kube::core::PartialObjectMeta<kube::api::DynamicObject>,
    > {
        match namespace {
            "" => Api::all_with(client.clone(), resource),
            ns => Api::namespaced_with(client.clone(), ns, resource),
        }
    };
    let cluster_resource = crate::capi::cluster_resource();
    let by_cluster = members(controller.store());
    let by_infra = members(controller.store());
    controller
        .owns_shared_stream(jobs)
        .owns_shared_stream(secrets)
        .watches_with(
            capi(&owner),
            owner.clone(),
            watcher::Config::default(),
            |object| crate::capi::infrastructure_ref_of(&object),
        )
        // Metadata only: a Cluster is mapped by its name, and a metadata watch still sees
        // every change of it (`spec.paused` included) without receiving the whole object.
        .watches_stream_with(
            watcher::watcher(capi_meta(&cluster_resource), watcher::Config::default())
                .default_backoff()
                .touched_objects(),
            move |cluster| {
                by_cluster(
                    cluster.metadata.namespace.clone(),
                    cluster.metadata.name.clone(),
                )
            },
            cluster_resource.clone(),
        )
        // Whole objects, passed through and not kept: only what a member reads of its
        // cluster wakes it, not each rewrite of the cluster's conditions.
        .watches_stream(
            watcher::watcher(
                crate::cache::scoped::<captf_api::TerraformCluster>(client, namespace),
                watcher::Config::default(),
            )
            .default_backoff()
            .touched_objects()
            .predicate_filter(
                crate::wake::members_worthy,
                kube::runtime::PredicateConfig::default(),
            ),
            move |tc| {
                by_infra(
                    tc.metadata.namespace.clone(),
                    tc.labels().get(captf_api::labels::CLUSTER_NAME).cloned(),
                )
            },
        )
        .with_config(controller::Config::default().concurrency(concurrency))
        .graceful_shutdown_on(stop.clone())
        .run(
            reconcile::guarded(reconcile),
            reconcile::error_policy,
            ctx.clone(),
        )
        .for_each(report)
        .await;
}

/// Wakes the objects that take variables from a labelled ConfigMap or Secret when it changes.
/// Metadata only: the manager never keeps their content.
fn variables_sources<K>(
    controller: Controller<K>,
    client: &Client,
    namespace: &str,
) -> Controller<K>
where
    K: Watched,
{
    use crate::variables::{SOURCE_LABEL, SourceKind, references};
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::core::PartialObjectMeta;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::reflector::{ObjectRef, Store};

    let config = watcher::Config::default().labels(&format!("{SOURCE_LABEL}=true"));
    let referencing = |store: Store<K>, kind: SourceKind| {
        move |namespace: Option<String>, name: String| {
            store
                .state()
                .into_iter()
                .filter(|o| {
                    o.meta().namespace == namespace && references(o.workspace(), kind, &name)
                })
                .map(|o| ObjectRef::from_obj(o.as_ref()))
                .collect::<Vec<_>>()
        }
    };
    let by_config_map = referencing(controller.store(), SourceKind::ConfigMap);
    let by_secret = referencing(controller.store(), SourceKind::Secret);
    let config_maps = watcher::watcher(
        crate::cache::scoped::<PartialObjectMeta<ConfigMap>>(client, namespace),
        config.clone(),
    )
    .default_backoff()
    .touched_objects();
    let secrets = watcher::watcher(
        crate::cache::scoped::<PartialObjectMeta<Secret>>(client, namespace),
        config,
    )
    .default_backoff()
    .touched_objects();
    controller
        .watches_stream(config_maps, move |m| {
            by_config_map(m.metadata.namespace.clone(), m.name_any())
        })
        .watches_stream(secrets, move |m| {
            by_secret(m.metadata.namespace.clone(), m.name_any())
        })
}

async fn report<T, E: std::fmt::Display>(result: Result<T, E>) {
    if let Err(error) = result {
        tracing::debug!(%error, "reconcile stream");
    }
}

/// `/readyz` fails until the controllers started and the webhook server listens (a replica
/// whose certificate does not load drops out of the webhook Service's endpoints).
fn health_router(ready: Arc<AtomicBool>, webhook_ready: Arc<AtomicBool>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let (ready, webhook_ready) = (ready.clone(), webhook_ready.clone());
                async move {
                    if !ready.load(Ordering::Relaxed) {
                        (axum::http::StatusCode::SERVICE_UNAVAILABLE, "starting")
                    } else if !webhook_ready.load(Ordering::Relaxed) {
                        (
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            "webhook server: no certificate loaded yet",
                        )
                    } else {
                        (axum::http::StatusCode::OK, "ok")
                    }
                }
            }),
        )
}

fn metrics_router(metrics: Arc<Metrics>, caches: Arc<OnceLock<Caches>>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            let jobs = caches.get().map(|c| c.jobs.state());
            async move {
                if let Some(jobs) = jobs {
                    metrics.set_jobs_active(&jobs);
                }
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    metrics.encode(),
                )
            }
        }),
    )
}

async fn serve(what: &str, address: &str, router: Router) -> Result<(), Error> {
    let addr = crate::settings::bind_address(address).map_err(Error::Startup)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Startup(format!("{what} server on {addr}: {e}")))?;
    // The bound address, not the asked one: with port 0 the log is where the port is found.
    let addr = listener.local_addr().unwrap_or(addr);
    tracing::info!(%addr, "{what} server listening");
    let listener = crate::http::capped(listener, crate::http::PLAIN_MAX_CONNECTIONS);
    let timeout = crate::http::PLAIN_HEADER_TIMEOUT;
    crate::http::serve(listener, router, timeout, &format!("{what} server")).await;
    Ok(())
}

async fn shutdown() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
    // Running Jobs keep running; the next leader finds them by their deterministic names.
    tracing::info!("shutting down: no new passes; waiting for the running ones");
}
