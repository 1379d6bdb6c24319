//! The manager's caches: metadata only, of the Jobs and Secrets CAPTF manages.
//!
//! Each kind is watched once (a shared reflector) and every controller subscribes to it. Only
//! `metadata` is held, so memory grows with the number of objects, not with pod templates or
//! state payloads; state and durable inputs are always read live when a pass needs them.

use std::future::ready;
use std::sync::Arc;

use captf_api::{annotations, labels};
use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ReflectHandle, Store};
use kube::runtime::{WatchStreamExt, watcher};

/// Events a slow subscriber may fall behind by before the reflector waits for it.
const SUBSCRIBE_BUFFER: usize = 1024;

pub type JobMeta = PartialObjectMeta<Job>;
pub type SecretMeta = PartialObjectMeta<Secret>;

/// Readers of the shared caches.
#[derive(Clone)]
pub struct Caches {
    pub jobs: Store<JobMeta>,
    pub secrets: Store<SecretMeta>,
}

/// The caches, the streams that keep them filled (poll them), and one subscription per
/// controller that wants change notifications.
pub struct Reflectors {
    pub caches: Caches,
    pub jobs_events: ReflectHandle<JobMeta>,
    pub secrets_events: ReflectHandle<SecretMeta>,
    /// Drives both watches; runs for the life of the controllers.
    pub run: std::pin::Pin<Box<dyn Stream<Item = ()> + Send>>,
}

/// Watches the managed Jobs and Secrets (label `captf.io/managed=true`) in `namespace` (all when
/// empty), metadata only.
pub fn reflectors(client: &kube::Client, namespace: &str) -> Reflectors {
    let selector = format!("{}={}", labels::MANAGED, labels::TRUE);
    let config = watcher::Config::default().labels(&selector).any_semantic();
    let (jobs, jobs_writer) = reflector::store_shared(SUBSCRIBE_BUFFER);
    let (secrets, secrets_writer) = reflector::store_shared(SUBSCRIBE_BUFFER);
    let (Some(jobs_events), Some(secrets_events)) =
        (jobs_writer.subscribe(), secrets_writer.subscribe())
    else {
        unreachable!("shared stores always hand out subscriptions");
    };
    let jobs_api: Api<JobMeta> = scoped(client, namespace);
    let secrets_api: Api<SecretMeta> = scoped(client, namespace);
    let jobs_watch = watcher::watcher(jobs_api, config.clone())
        .default_backoff()
        .reflect_shared(jobs_writer)
        .for_each(|_| ready(()));
    let secrets_watch = watcher::watcher(secrets_api, config)
        .default_backoff()
        .reflect_shared(secrets_writer)
        .for_each(|_| ready(()));
    let run = futures::stream::select(
        futures::stream::once(jobs_watch),
        futures::stream::once(secrets_watch),
    );
    Reflectors {
        caches: Caches { jobs, secrets },
        jobs_events,
        secrets_events,
        run: Box::pin(run),
    }
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
pub fn job_unfinished(job: &JobMeta) -> bool {
    !job.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotations::BOOKKEPT))
}

/// Unfinished Jobs in the cache: all of them, and those of one CAPI Cluster (by namespace and
/// the `cluster.x-k8s.io/cluster-name` label value).
pub fn running_jobs(jobs: &[Arc<JobMeta>], namespace: &str, cluster_label: &str) -> (usize, usize) {
    let mut global = 0;
    let mut cluster = 0;
    for job in jobs.iter().filter(|j| job_unfinished(j)) {
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

    fn job(ns: &str, cluster: &str, bookkept: bool) -> Arc<JobMeta> {
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
        if bookkept {
            meta.metadata.annotations = Some(BTreeMap::from([(
                annotations::BOOKKEPT.to_owned(),
                "true".to_owned(),
            )]));
        }
        Arc::new(meta)
    }

    #[test]
    fn running_jobs_counts_unbookkept_globally_and_per_cluster() {
        let jobs = vec![
            job("a", "one", false),
            job("a", "one", true),
            job("a", "two", false),
            job("b", "one", false),
        ];
        assert_eq!(running_jobs(&jobs, "a", "one"), (3, 1));
        assert_eq!(running_jobs(&jobs, "b", "one"), (3, 1));
        assert_eq!(running_jobs(&jobs, "c", "one"), (3, 0));
        assert_eq!(running_jobs(&[], "a", "one"), (0, 0));
    }
}
