//! The orphan sweep (operations.md §8.5): what the manager made in a namespace for its objects'
//! Jobs (the runner's ServiceAccount and RoleBinding, the run, cluster and state-lock Leases,
//! all labelled `captf.io/managed=true`) is deleted once the namespace holds no
//! TerraformCluster, TerraformMachine or TerraformMachinePool: at the leader's start, then
//! every `--sync-period`. Typically that is what `clusterctl move` leaves in the source
//! namespace, or what stays after the last object of a namespace was deleted.
//!
//! The same sweep of one namespace also runs right after a pass removed a finalizer (concepts.md
//! §15.9), so that deleting a namespace's last object takes its runner accounts along.
//!
//! Everything is read live, never from a cache, and `--watch-filter` is ignored: another
//! manager's objects keep a namespace too. An object keeps its namespace until CAPTF is done
//! with it (it is not being deleted, or it still carries CAPTF's finalizer), and so does a
//! managed Job until it has finished, so that a runner in its last run keeps its lock and its
//! RBAC. Nothing here writes events; what was removed is logged.

use std::collections::BTreeSet;
use std::time::Duration;

use captf_api::{TerraformCluster, TerraformMachine, TerraformMachinePool, finalizers, labels};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, ObjectList};
use kube::core::NamespaceResourceScope;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::cache::scoped;
use crate::error::{KubeContext, Result};

/// Sweeps at once, then every `period` (plus up to a tenth of it), for as long as it is polled.
/// `namespace` scopes it like `--namespace` (empty: every namespace).
pub async fn run(client: kube::Client, namespace: String, period: Duration) {
    for round in 0u64.. {
        match once(&client, &namespace).await {
            Ok(Round { held, swept }) => {
                for (ns, removed) in &swept {
                    log_swept(ns, removed);
                }
                tracing::info!(
                    namespaces = held,
                    swept = swept.len(),
                    "orphan sweep finished"
                );
            }
            // Tried again next round.
            Err(error) => tracing::warn!(%error, "orphan sweep failed"),
        }
        let pause = period + crate::schedule::jitter(&format!("orphan-sweep/{round}"), period);
        tokio::time::sleep(pause).await;
    }
}

/// Sweeps `ns` after a pass removed a finalizer there, if that was the last object CAPTF had
/// work for. A failure is only logged: the periodic sweep tries again.
pub async fn after_release(client: &kube::Client, ns: &str) {
    let managed = ListParams::default().labels(&format!("{}={}", labels::MANAGED, labels::TRUE));
    match sweep(client, ns, &managed).await {
        Ok(removed) if removed.is_empty() => {}
        Ok(removed) => log_swept(ns, &removed),
        Err(error) => tracing::warn!(namespace = %ns, %error, "orphan sweep failed"),
    }
}

fn log_swept(ns: &str, removed: &[String]) {
    tracing::info!(namespace = %ns, removed = %removed.join(", "), "orphan sweep: no TerraformCluster, TerraformMachine or TerraformMachinePool left; removed what CAPTF made for their Jobs");
}

/// What one round found and did.
struct Round {
    /// Namespaces holding something managed of the swept kinds.
    held: usize,
    /// Each namespace swept, with what was removed from it (`kind/name`).
    swept: Vec<(String, Vec<String>)>,
}

async fn once(client: &kube::Client, namespace: &str) -> Result<Round> {
    let managed = ListParams::default().labels(&format!("{}={}", labels::MANAGED, labels::TRUE));
    let mut held = BTreeSet::new();
    held.extend(namespaces_of::<ServiceAccount>(client, namespace, &managed).await?);
    held.extend(namespaces_of::<RoleBinding>(client, namespace, &managed).await?);
    held.extend(namespaces_of::<Lease>(client, namespace, &managed).await?);
    let mut swept = Vec::new();
    for ns in &held {
        // One namespace's failure leaves the others to be swept; it is tried again next round.
        match sweep(client, ns, &managed).await {
            Ok(removed) if removed.is_empty() => {}
            Ok(removed) => swept.push((ns.clone(), removed)),
            Err(error) => tracing::warn!(namespace = %ns, %error, "orphan sweep failed"),
        }
    }
    Ok(Round {
        held: held.len(),
        swept,
    })
}

/// Sweeps `ns` unless it is occupied; returns what it removed (`kind/name`).
async fn sweep(client: &kube::Client, ns: &str, managed: &ListParams) -> Result<Vec<String>> {
    if occupied(client, ns, managed).await? {
        return Ok(Vec::new());
    }
    let mut removed = Vec::new();
    removed.extend(clear::<ServiceAccount>(client, ns, managed).await?);
    removed.extend(clear::<RoleBinding>(client, ns, managed).await?);
    removed.extend(clear::<Lease>(client, ns, managed).await?);
    Ok(removed)
}

/// The namespaces holding a managed `K`.
async fn namespaces_of<K>(
    client: &kube::Client,
    namespace: &str,
    managed: &ListParams,
) -> Result<BTreeSet<String>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + DeserializeOwned,
    K: std::fmt::Debug,
{
    let api: Api<K> = scoped(client, namespace);
    let list = api
        .list_metadata(managed)
        .await
        .during(|| format!("listing managed {}s", K::kind(&())))?;
    Ok(list.items.iter().filter_map(|o| o.namespace()).collect())
}

/// Whether `ns` still holds a workload object CAPTF has work for (of any manager: no watch
/// filter) or a running managed Job (its runner may still hold the lock and need its RBAC).
async fn occupied(client: &kube::Client, ns: &str, managed: &ListParams) -> Result<bool> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let jobs = &jobs;
    let running_job = any_listed(
        managed.clone().limit(PAGE),
        |page| async move { jobs.list(&page).await },
        running,
    );
    Ok(
        holds::<TerraformCluster>(client, ns, finalizers::TERRAFORM_CLUSTER).await?
            || holds::<TerraformMachine>(client, ns, finalizers::TERRAFORM_MACHINE).await?
            || holds::<TerraformMachinePool>(client, ns, finalizers::TERRAFORM_MACHINE_POOL)
                .await?
            || running_job
                .await
                .during(|| format!("listing managed Jobs in {ns}"))?,
    )
}

/// Whether `ns` holds a `K` that CAPTF, through `finalizer`, still has work for.
async fn holds<K>(client: &kube::Client, ns: &str, finalizer: &str) -> Result<bool>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + DeserializeOwned,
    K: std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let api = &api;
    any_listed(
        ListParams::default().limit(PAGE),
        |page| async move { api.list_metadata(&page).await },
        |object| in_use(&object.metadata, finalizer),
    )
    .await
    .during(|| format!("listing {}s in {ns}", K::kind(&())))
}

/// Whether a listed object satisfies `keeps`, reading page by page until one does.
async fn any_listed<T, F, Fut>(
    mut params: ListParams,
    list: F,
    keeps: impl Fn(&T) -> bool,
) -> std::result::Result<bool, kube::Error>
where
    T: Clone,
    F: Fn(ListParams) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<ObjectList<T>, kube::Error>>,
{
    loop {
        let page = list(params.clone()).await?;
        if page.items.iter().any(&keeps) {
            return Ok(true);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => params.continue_token = Some(next),
            None => return Ok(false),
        }
    }
}

/// Objects read per request while looking for one that keeps a namespace: the first page of an
/// occupied namespace almost always has one.
const PAGE: u32 = 20;

/// Whether CAPTF still has work for a workload object: it is not being deleted, or its
/// deletion still waits for CAPTF's `finalizer`. One whose finalizer CAPTF removed runs no
/// more Jobs, however long other finalizers keep it.
fn in_use(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.deletion_timestamp.is_none()
        || meta
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == finalizer))
}

/// Whether a Job may still have a pod using the runner's account and lock: it has not
/// finished. The Job controller sets `Complete` or `Failed` only once its pods are done.
fn running(job: &Job) -> bool {
    !job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

/// Deletes every managed `K` of `ns`; returns what it deleted (`kind/name`).
async fn clear<K>(client: &kube::Client, ns: &str, managed: &ListParams) -> Result<Vec<String>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + DeserializeOwned,
    K: std::fmt::Debug,
{
    let kind = K::kind(&());
    let objects: Api<K> = Api::namespaced(client.clone(), ns);
    let list = objects
        .list_metadata(managed)
        .await
        .during(|| format!("listing managed {kind}s in {ns}"))?;
    let mut removed = Vec::new();
    for name in list.items.iter().map(ResourceExt::name_any) {
        match objects.delete(&name, &DeleteParams::default()).await {
            Ok(_) => removed.push(format!("{kind}/{name}")),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(crate::Error::Kube {
                    action: format!("deleting {kind} {ns}/{name}"),
                    source,
                });
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    #[test]
    fn an_object_keeps_its_namespace_until_captf_let_go_of_it() {
        let ours = finalizers::TERRAFORM_CLUSTER;
        let meta = |deleting: bool, finalizers: &[&str]| ObjectMeta {
            deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
            finalizers: Some(finalizers.iter().map(|f| (*f).to_owned()).collect()),
            ..ObjectMeta::default()
        };
        let cases = [
            ("live", meta(false, &[]), true),
            ("live, with CAPTF's finalizer", meta(false, &[ours]), true),
            (
                "being deleted, CAPTF's finalizer still on",
                meta(true, &[ours, "other.io/x"]),
                true,
            ),
            (
                "being deleted, released by CAPTF, held by another finalizer",
                meta(true, &["other.io/x"]),
                false,
            ),
            ("being deleted, no finalizer left", meta(true, &[]), false),
            (
                "being deleted, only another kind's CAPTF finalizer",
                meta(true, &[finalizers::TERRAFORM_MACHINE]),
                false,
            ),
        ];
        for (case, meta, want) in cases {
            assert_eq!(in_use(&meta, ours), want, "{case}");
        }
    }

    #[test]
    fn a_job_keeps_its_namespace_until_it_finished() {
        let job = |conditions: &[(&str, &str)]| Job {
            status: Some(JobStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(type_, status)| JobCondition {
                            type_: (*type_).to_owned(),
                            status: (*status).to_owned(),
                            ..JobCondition::default()
                        })
                        .collect(),
                ),
                ..JobStatus::default()
            }),
            ..Job::default()
        };
        let cases = [
            ("no status yet", Job::default(), true),
            ("running", job(&[]), true),
            (
                "about to fail, pods still ending",
                job(&[("FailureTarget", "True")]),
                true,
            ),
            (
                "about to succeed, pods still ending",
                job(&[("SuccessCriteriaMet", "True")]),
                true,
            ),
            (
                "complete",
                job(&[("SuccessCriteriaMet", "True"), ("Complete", "True")]),
                false,
            ),
            (
                "failed",
                job(&[("FailureTarget", "True"), ("Failed", "True")]),
                false,
            ),
            ("a condition not true", job(&[("Complete", "False")]), true),
        ];
        for (case, job, want) in cases {
            assert_eq!(running(&job), want, "{case}");
        }
    }
}
