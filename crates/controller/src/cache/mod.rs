//! The manager's caches: metadata only, of the Jobs and Secrets CAPTF manages, and the few
//! small objects every pass consults (identities, namespaces' labels, the runner RBAC).
//!
//! Each kind is watched once (a shared reflector, or for the Secrets an index of their owners,
//! `cache/secrets.rs`) and every controller subscribes to it. Only `metadata` is held where
//! that is all a pass reads, so memory grows with the number of objects, not with pod
//! templates or state payloads; state and durable inputs are always read live when a pass
//! needs them. A cache may lag a write by a moment: what a pass reads from
//! one either only saves a live read that would find the same (and falls back to it when the
//! cache lacks the object), or is checked live before anything is written.

use std::future::ready;
use std::sync::Arc;

use captf_api::{TerraformClusterIdentity, annotations, labels};
use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ReflectHandle, Store};
use kube::runtime::{WatchStreamExt, watcher};

mod secrets;
pub use secrets::{SecretChanges, Secrets};

/// Events a slow subscriber may fall behind by before the reflector waits for it.
const SUBSCRIBE_BUFFER: usize = 1024;

pub type JobMeta = PartialObjectMeta<Job>;
pub type SecretMeta = PartialObjectMeta<Secret>;
pub type NamespaceMeta = PartialObjectMeta<Namespace>;
pub type ServiceAccountMeta = PartialObjectMeta<ServiceAccount>;

/// Readers of the shared caches.
#[derive(Clone)]
pub struct Caches {
    pub jobs: Store<JobMeta>,
    /// The managed Secrets' owners, and the credential mirrors.
    pub secrets: Secrets,
    /// Every TerraformClusterIdentity (cluster-scoped, few).
    pub identities: Store<TerraformClusterIdentity>,
    /// The namespaces' labels, for `allowedNamespaces.selector`.
    pub namespaces: Store<NamespaceMeta>,
    /// ServiceAccounts labelled `captf.io/managed=true` (the runner's own).
    pub managed_accounts: Store<ServiceAccountMeta>,
    /// ServiceAccounts labelled `captf.io/runner=true` (opted in to run Jobs).
    pub runner_accounts: Store<ServiceAccountMeta>,
    /// RoleBindings labelled `captf.io/managed=true` (the runner's).
    pub role_bindings: Store<RoleBinding>,
}

impl Caches {
    /// Every cache holds its first full list.
    pub async fn wait_until_ready(&self) -> bool {
        let (secrets, a, b, c, d, e, f) = futures::join!(
            self.secrets.wait_until_ready(),
            self.jobs.wait_until_ready(),
            self.identities.wait_until_ready(),
            self.namespaces.wait_until_ready(),
            self.managed_accounts.wait_until_ready(),
            self.runner_accounts.wait_until_ready(),
            self.role_bindings.wait_until_ready(),
        );
        secrets && [a, b, c, d, e, f].iter().all(Result::is_ok)
    }
}

/// The caches, the streams that keep them filled (poll them), and the change notifications a
/// controller subscribes to.
pub struct Reflectors {
    pub caches: Caches,
    pub jobs_events: Changes<JobMeta>,
    pub secrets_events: SecretChanges,
    /// Drives every watch; runs for the life of the controllers.
    pub run: std::pin::Pin<Box<dyn Stream<Item = ()> + Send>>,
}

/// Watches the managed Jobs and Secrets (label `captf.io/managed=true`) in `namespace` (all when
/// empty), metadata only.
pub fn reflectors(client: &kube::Client, namespace: &str) -> Reflectors {
    let selector = format!("{}={}", labels::MANAGED, labels::TRUE);
    let config = watcher::Config::default().labels(&selector).any_semantic();
    let (jobs, jobs_events, jobs_watch) =
        shared(scoped::<JobMeta>(client, namespace), config.clone(), JOBS);
    let (secrets, secrets_events, secrets_watch) = secrets::index(
        watcher::watcher(scoped::<SecretMeta>(client, namespace), config).default_backoff(),
    );
    let runner = format!("{}={}", labels::RUNNER, labels::TRUE);
    let (identities, identities_watch) = cached(
        Api::all(client.clone()),
        watcher::Config::default().any_semantic(),
    );
    // A manager scoped to one namespace reads only that one's labels.
    let (namespaces, namespaces_watch) = cached(Api::<NamespaceMeta>::all(client.clone()), {
        let config = watcher::Config::default().any_semantic();
        if namespace.is_empty() {
            config
        } else {
            config.fields(&format!("metadata.name={namespace}"))
        }
    });
    let (managed_accounts, managed_accounts_watch) = cached(
        scoped::<ServiceAccountMeta>(client, namespace),
        watcher::Config::default().labels(&selector).any_semantic(),
    );
    let (runner_accounts, runner_accounts_watch) = cached(
        scoped::<ServiceAccountMeta>(client, namespace),
        watcher::Config::default().labels(&runner).any_semantic(),
    );
    let (role_bindings, role_bindings_watch) = cached(
        scoped::<RoleBinding>(client, namespace),
        watcher::Config::default().labels(&selector).any_semantic(),
    );
    let run = futures::stream::select_all([
        jobs_watch,
        secrets_watch,
        identities_watch,
        namespaces_watch,
        managed_accounts_watch,
        runner_accounts_watch,
        role_bindings_watch,
    ]);
    Reflectors {
        caches: Caches {
            jobs,
            secrets,
            identities,
            namespaces,
            managed_accounts,
            runner_accounts,
            role_bindings,
        },
        jobs_events,
        secrets_events,
        run: Box::pin(run),
    }
}

/// What a controller subscribes to: every object of a shared cache that is written or deleted.
///
/// A shared reflector tells its subscribers only of objects written; the deletions come from
/// the same watch through a channel of their own, so that a Job deleted by hand still wakes its
/// owner's pass at once. A deletion missed while the watch reconnects is
/// found by the owner's next periodic pass.
pub struct Changes<K: kube::Resource<DynamicType = ()> + Clone + 'static> {
    written: ReflectHandle<K>,
    deleted: tokio::sync::broadcast::Sender<Arc<K>>,
}

impl<K> Changes<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    /// A new subscription: the objects written and deleted from now on.
    pub fn subscribe(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        futures::stream::select(self.written.clone(), deletions(self.deleted.subscribe()))
    }

    /// The last subscription. The cache waits for every subscription it handed out to take
    /// each change (it holds at most `SUBSCRIBE_BUFFER` untaken), so the one it started with
    /// must be consumed too, not kept unread.
    pub fn into_subscription(self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let deleted = deletions(self.deleted.subscribe());
        futures::stream::select(self.written, deleted)
    }
}

/// The deletions `rx` receives, as a stream.
fn deletions<K: Send + Sync + 'static>(
    rx: tokio::sync::broadcast::Receiver<Arc<K>>,
) -> impl Stream<Item = Arc<K>> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            match rx.recv().await {
                Ok(object) => return Some((object, rx)),
                // The deletions a subscriber this far behind missed are found at their owners'
                // next periodic pass.
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return None,
            }
        }
    })
}

/// A shared cache, its subscriptions, and the stream that fills it (poll it).
type Shared<K> = (
    Store<K>,
    Changes<K>,
    std::pin::Pin<Box<dyn Stream<Item = ()> + Send>>,
);

/// Which objects of a watch a shared cache holds, and what of each.
struct Holding<K> {
    /// Whether the cache holds the object. One it does not is forgotten as if deleted, without
    /// waking anyone: its owner's pass made the change that let it go.
    held: fn(&K) -> bool,
    /// What of a held object is kept.
    trim: fn(&mut K),
}

/// A shared cache of `api` holding the objects and parts of them `holding` says, its
/// subscriptions, and the stream that fills it.
fn shared<K>(api: Api<K>, config: watcher::Config, holding: Holding<K>) -> Shared<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    shared_from(watcher::watcher(api, config).default_backoff(), holding)
}

/// A shared cache as [`shared`] makes it, filled from `events` rather than a watch of its own,
/// so that a test can drive the real reflector and its subscriptions without an API server.
fn shared_from<K, S>(events: S, Holding { held, trim }: Holding<K>) -> Shared<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let (store, writer) = reflector::store_shared(SUBSCRIBE_BUFFER);
    let Some(written) = writer.subscribe() else {
        unreachable!("shared stores always hand out subscriptions");
    };
    let (deleted, _) = tokio::sync::broadcast::channel(SUBSCRIBE_BUFFER);
    let on_delete = deleted.clone();
    let watch = events
        .inspect(move |event| {
            if let Ok(watcher::Event::Delete(object)) = event {
                let mut object = object.clone();
                trim(&mut object);
                // No subscriber yet is no error: nobody is waiting to be woken.
                let _ = on_delete.send(Arc::new(object));
            }
        })
        .filter_map(move |event| {
            ready(match event {
                Ok(watcher::Event::InitApply(object)) if !held(&object) => None,
                Ok(watcher::Event::Apply(object)) if !held(&object) => {
                    Some(Ok(watcher::Event::Delete(object)))
                }
                event => Some(event),
            })
        })
        .modify(trim)
        .reflect_shared(writer)
        .for_each(|_| ready(()));
    (
        store,
        Changes { written, deleted },
        futures::stream::once(watch).boxed(),
    )
}

/// A cache nobody subscribes to, and the stream that fills it.
fn cached<K>(
    api: Api<K>,
    config: watcher::Config,
) -> (Store<K>, futures::stream::BoxStream<'static, ()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let watch = watcher::watcher(api, config)
        .default_backoff()
        .modify(without_managed_fields)
        .reflect(writer)
        .for_each(|_| ready(()));
    (store, futures::stream::once(watch).boxed())
}

/// No pass reads `managedFields`, and they are often the largest part of an object's metadata.
fn without_managed_fields<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// `kubectl apply`'s record of the last configuration it applied: a copy of the whole object
/// that no pass reads.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A workload object as its controller keeps it: without its `managedFields` and the copy of
/// itself `kubectl apply` leaves in an annotation, often together larger than the rest. Every
/// write of these objects is a merge patch, so what is dropped here is never written back.
pub fn workload_trimmed(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = &mut meta.annotations {
        annotations.remove(LAST_APPLIED);
    }
}

/// The Jobs the cache holds: only those whose result is not recorded yet. Nothing reads a
/// recorded Job from the cache (passes list an object's Jobs live); the Job caps and
/// `captf_jobs_active` count the others. An object keeps up to three succeeded and three failed
/// Jobs per operation, so the recorded ones would be most of the cache. A recorded Job deleted
/// still wakes its owner ([`Changes`]).
const JOBS: Holding<JobMeta> = Holding {
    held: job_unfinished,
    trim: job_trimmed,
};

/// What the caps and `/metrics` read of a cached Job: its owner references (to wake its owner)
/// and the labels naming its cluster, kind and operation. Nor is its `PartialObjectMetadata`
/// type kept: every object of the cache is a Job.
fn job_trimmed(job: &mut JobMeta) {
    job.types = None;
    let meta = &mut job.metadata;
    meta.managed_fields = None;
    meta.annotations = None;
    retain(
        &mut meta.labels,
        &[labels::CLUSTER_NAME, labels::OWNER_KIND, labels::OP],
    );
    without_identity(meta);
}

/// Only `keys` of `map`, and none when none of them is there.
fn retain(map: &mut Option<std::collections::BTreeMap<String, String>>, keys: &[&str]) {
    if let Some(m) = map {
        m.retain(|k, _| keys.contains(&k.as_str()));
    }
    if map.as_ref().is_some_and(|m| m.is_empty()) {
        *map = None;
    }
}

/// The object's UID and resourceVersion, which no reader of these caches uses: the cache finds
/// objects by namespace and name, the watch keeps its place by the events' own versions, and a
/// write is always made against a live read.
fn without_identity(meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
    meta.uid = None;
    meta.resource_version = None;
}

/// An `Api` over `namespace`, or over all namespaces when it is empty (`--namespace`).
pub fn scoped<K>(client: &kube::Client, namespace: &str) -> Api<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    if namespace.is_empty() {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), namespace)
    }
}

/// A Job counts as running until its result is recorded (`captf.io/bookkept`): metadata does
/// not carry the Job's status, and a finished Job is bookkept on the next pass of its object.
/// Only a Job a `Terraform*` object controls counts at all: a look-alike under the managed
/// labels, which anyone who may create Jobs in a namespace can make, holds no slot of the
/// manager's cap.
fn job_unfinished(job: &JobMeta) -> bool {
    let controlled = crate::job::build::captf_controlled(&job.metadata);
    let recorded = job
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotations::BOOKKEPT));
    controlled && !recorded
}

/// Unfinished Jobs (the cache holds no others): all of them, and those of one CAPI Cluster
/// (by namespace and the `cluster.x-k8s.io/cluster-name` label value).
pub fn running_jobs(jobs: &[Arc<JobMeta>], namespace: &str, cluster_label: &str) -> (usize, usize) {
    let mut global = 0;
    let mut cluster = 0;
    for job in jobs {
        global += 1;
        let same_cluster = job.metadata.namespace.as_deref() == Some(namespace)
            && job
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::CLUSTER_NAME))
                .is_some_and(|v| v == cluster_label);
        if same_cluster {
            cluster += 1;
        }
    }
    (global, cluster)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::time::Duration;

    /// Three buffers' worth of objects: a subscription nobody reads stops the cache a third of
    /// the way through.
    const N: usize = 3 * SUBSCRIBE_BUFFER;

    /// Far longer than any of these runs takes. Time is paused in these tests and only moves
    /// on when no task can make progress, so running out of it means the cache stalled, never
    /// that the machine was slow.
    const STALLED: Duration = Duration::from_secs(600);

    fn job_meta(i: usize) -> JobMeta {
        let mut s = JobMeta {
            types: None,
            metadata: Default::default(),
            _phantom: Default::default(),
        };
        s.metadata.name = Some(format!("job-{i}"));
        s.metadata.namespace = Some("ns".into());
        s.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: captf_api::API_VERSION.into(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        s
    }

    /// A watch of `N` running Jobs: the first `listed` in its first list, the rest written one by
    /// one after it, then, if `delete`, job-0 deleted (marked with a deletion timestamp, as
    /// nothing the cache holds is, to tell the deletion from the object written).
    fn watch(
        listed: usize,
        delete: bool,
    ) -> impl Stream<Item = Result<watcher::Event<JobMeta>, watcher::Error>> + Send + 'static {
        let mut events = vec![watcher::Event::Init];
        events.extend((0..listed).map(|i| watcher::Event::InitApply(job_meta(i))));
        events.push(watcher::Event::InitDone);
        events.extend((listed..N).map(|i| watcher::Event::Apply(job_meta(i))));
        if delete {
            let mut gone = job_meta(0);
            gone.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
            events.push(watcher::Event::Delete(gone));
        }
        futures::stream::iter(events.into_iter().map(Ok))
    }

    /// What each subscription took, read beside the watch `run` until all end (a consumer's
    /// stream ends once the watch has ended and it has taken all); `None` if one stalled.
    pub(crate) async fn drained<T: Send + Sync + 'static>(
        subscriptions: Vec<futures::stream::BoxStream<'static, Arc<T>>>,
        run: impl Stream<Item = ()>,
    ) -> Option<Vec<Vec<Arc<T>>>> {
        let taken = futures::future::join_all(subscriptions.into_iter().map(|c| c.collect()));
        let both = futures::future::join(run.count(), taken);
        tokio::time::timeout(STALLED, both)
            .await
            .ok()
            .map(|(_, t)| t)
    }

    fn names<'a>(objects: impl Iterator<Item = &'a Arc<JobMeta>>) -> Vec<String> {
        let mut names: Vec<_> = objects
            .map(|o| o.metadata.name.clone().unwrap_or_default())
            .collect();
        names.sort();
        names
    }

    #[tokio::test(start_paused = true)]
    async fn every_subscription_takes_every_change_of_a_busy_cache() {
        // Where job-0 is deleted it is among the first `N - SUBSCRIBE_BUFFER` objects
        // dispatched, which the cache waits for every subscription to take before it goes on
        // to the deletion. One that had not taken it yet would skip it (a subscription reads
        // each object from the cache) and see only its deletion.
        // (what, Jobs in the first list, subscriptions before the last, job-0 deleted)
        let rows = [
            ("written one by one after an empty list", 0, 1, true),
            ("all in the first list", N, 1, false),
            (
                "a list then writes, to as many consumers as the manager's Jobs have",
                SUBSCRIBE_BUFFER,
                3,
                true,
            ),
            ("the last subscription alone", SUBSCRIBE_BUFFER, 0, true),
        ];
        for (what, listed, subscribed, delete) in rows {
            let (store, changes, run) = shared_from(watch(listed, delete), JOBS);
            // As the manager takes them: the last consumer gets the cache's first subscription.
            let mut consumers: Vec<_> = (0..subscribed)
                .map(|_| changes.subscribe().boxed())
                .collect();
            consumers.push(changes.into_subscription().boxed());
            let Some(taken) = drained(consumers, run).await else {
                panic!(
                    "{what}: stalled, the watch or a consumer never ended (the cache holds {} \
                     of {N} objects)",
                    store.state().len()
                );
            };

            let mut all: Vec<_> = (0..N).map(|i| format!("job-{i}")).collect();
            all.sort();
            let stored: Vec<_> = all
                .iter()
                .filter(|n| !(delete && *n == "job-0"))
                .cloned()
                .collect();
            assert_eq!(names(store.state().iter()), stored, "{what}: the cache");
            assert_eq!(taken.len(), subscribed + 1, "{what}: consumers");
            for (i, objects) in taken.iter().enumerate() {
                let (deleted, written): (Vec<_>, Vec<_>) = objects
                    .iter()
                    .partition(|o| o.metadata.deletion_timestamp.is_some());
                assert_eq!(
                    names(written.into_iter()),
                    all,
                    "{what}: consumer {i} takes each object written, once"
                );
                let expected: &[&str] = if delete { &["job-0"] } else { &[] };
                assert_eq!(
                    names(deleted.into_iter()),
                    expected,
                    "{what}: consumer {i}'s deletions"
                );
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscription_left_unread_stops_the_cache_at_its_buffer() {
        // What `into_subscription` avoids: the consumers subscribe, and the `Changes` holding
        // the cache's first subscription is kept, never read.
        // (what, the Changes kept after subscribing, objects stored when the watch stops)
        let rows = [
            (
                "its first subscription kept unread",
                true,
                SUBSCRIBE_BUFFER + 1,
            ),
            ("its first subscription dropped", false, N),
        ];
        for (what, keep, stored) in rows {
            let (store, changes, run) = shared_from(watch(0, false), JOBS);
            let read = changes.subscribe();
            let kept = if keep {
                Some(changes)
            } else {
                drop(changes);
                None
            };
            tokio::spawn(read.for_each(|_| ready(())));
            let ended = tokio::time::timeout(STALLED, run.count()).await.is_ok();
            assert_eq!(ended, !keep, "{what}: the watch ran to its end");
            // Each object is stored before it is dispatched; the first one the buffer has no
            // room for waits there.
            assert_eq!(store.state().len(), stored, "{what}: objects stored");
            drop(kept);
        }
    }

    fn job(ns: &str, cluster: &str) -> Arc<JobMeta> {
        let mut meta = JobMeta {
            types: None,
            metadata: Default::default(),
            _phantom: Default::default(),
        };
        meta.metadata.namespace = Some(ns.into());
        meta.metadata.labels = Some(BTreeMap::from([(
            labels::CLUSTER_NAME.to_owned(),
            cluster.to_owned(),
        )]));
        Arc::new(meta)
    }

    #[test]
    fn running_jobs_counts_globally_and_per_cluster() {
        let jobs = vec![
            job("a", "one"),
            job("a", "one"),
            job("a", "two"),
            job("b", "one"),
        ];
        assert_eq!(running_jobs(&jobs, "a", "one"), (4, 2));
        assert_eq!(running_jobs(&jobs, "b", "one"), (4, 1));
        assert_eq!(running_jobs(&jobs, "c", "one"), (4, 0));
        assert_eq!(running_jobs(&[], "a", "one"), (0, 0));
    }

    /// A Job of `owner`, its result recorded or not.
    fn job_of(name: &str, owner: &str, recorded: bool) -> JobMeta {
        let mut job = JobMeta {
            types: None,
            metadata: Default::default(),
            _phantom: Default::default(),
        };
        let m = &mut job.metadata;
        m.name = Some(name.into());
        m.namespace = Some("ns".into());
        m.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: captf_api::API_VERSION.into(),
                name: owner.into(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        if recorded {
            m.annotations = Some(BTreeMap::from([(
                annotations::BOOKKEPT.to_owned(),
                "true".to_owned(),
            )]));
        }
        job
    }

    #[tokio::test(start_paused = true)]
    async fn the_job_cache_holds_only_jobs_whose_result_is_not_recorded() -> anyhow::Result<()> {
        use kube::ResourceExt;
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let (events, watch) = futures::channel::mpsc::unbounded();
        let (store, changes, run) = shared_from(watch.map(Ok), JOBS);
        let run = tokio::spawn(run.count());
        let mut woken = changes.into_subscription().boxed();
        let mut next_woken = async || {
            let job = tokio::time::timeout(STALLED, woken.next()).await?;
            anyhow::Ok(job.map(|j| (j.name_any(), j.metadata.deletion_timestamp.is_some())))
        };
        let held = || {
            let mut names: Vec<_> = store.state().iter().map(|j| j.name_any()).collect();
            names.sort();
            names
        };

        // Under the managed labels, but controlled by nothing of CAPTF's.
        let mut lookalike = job_of("lookalike", "a", false);
        lookalike.metadata.owner_references = None;
        for event in [
            Init,
            InitApply(job_of("running", "a", false)),
            InitApply(job_of("old", "a", true)),
            InitApply(lookalike),
            InitDone,
        ] {
            events.unbounded_send(event)?;
        }
        assert_eq!(next_woken().await?, Some(("running".into(), false)));
        assert_eq!(
            held(),
            ["running"],
            "neither a recorded Job listed nor a look-alike is held"
        );

        events.unbounded_send(Apply(job_of("new", "b", false)))?;
        assert_eq!(next_woken().await?, Some(("new".into(), false)));

        // Its pass records the result, then a recorded Job is pruned or deleted by hand.
        events.unbounded_send(Apply(job_of("running", "a", true)))?;
        let mut old = job_of("old", "a", true);
        old.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        events.unbounded_send(Delete(old))?;
        assert_eq!(
            next_woken().await?,
            Some(("old".into(), true)),
            "recording a result wakes no one; deleting a recorded Job wakes its owner"
        );
        drop(events);
        tokio::time::timeout(STALLED, run).await??;
        assert_eq!(next_woken().await?, None);
        assert_eq!(
            held(),
            ["new"],
            "a Job leaves the cache once its result is recorded"
        );
        Ok(())
    }

    #[test]
    fn job_trimmed_keeps_what_the_caps_and_metrics_read() {
        let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            uid: "u".into(),
            ..Default::default()
        };
        let map = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty()).then(|| {
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>()
            })
        };
        let read = [
            (labels::CLUSTER_NAME, "c"),
            (labels::OWNER_KIND, "TerraformCluster"),
            (labels::OP, "apply"),
        ];
        let other = (labels::MANAGED, labels::TRUE);
        let unread = (annotations::IDENTITY, "id");
        // (what, labels, annotations, labels kept)
        type Pairs<'a> = &'a [(&'a str, &'a str)];
        let rows: [(&str, Pairs, Pairs, Pairs); 2] = [
            (
                "a running Job",
                &[read[0], read[1], read[2], other],
                &[unread],
                &read,
            ),
            ("a Job with nothing read", &[other], &[], &[]),
        ];
        for (what, labels, annotations, labels_kept) in rows {
            let mut job = JobMeta {
                types: Some(kube::core::TypeMeta {
                    api_version: "meta.k8s.io/v1".into(),
                    kind: "PartialObjectMetadata".into(),
                }),
                metadata: Default::default(),
                _phantom: Default::default(),
            };
            let m = &mut job.metadata;
            m.name = Some("j".into());
            m.namespace = Some("ns".into());
            m.labels = map(labels);
            m.annotations = map(annotations);
            m.owner_references = Some(vec![owner.clone()]);
            m.managed_fields = Some(vec![Default::default()]);
            m.uid = Some("job-uid".into());
            m.resource_version = Some("7".into());
            job_trimmed(&mut job);
            let m = &job.metadata;
            assert_eq!(m.labels, map(labels_kept), "{what}: labels");
            assert_eq!(m.annotations, None, "{what}: annotations");
            assert_eq!(m.name.as_deref(), Some("j"), "{what}: name");
            assert_eq!(m.namespace.as_deref(), Some("ns"), "{what}: namespace");
            assert_eq!(
                m.owner_references.as_deref(),
                Some(&[owner.clone()][..]),
                "{what}"
            );
            assert!(m.managed_fields.is_none(), "{what}: managedFields");
            assert!(m.uid.is_none() && m.resource_version.is_none(), "{what}");
            assert!(job.types.is_none(), "{what}: type");
        }
    }
}
