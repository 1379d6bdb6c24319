//! The orphan sweep (operations.md §8.5): what the manager made in a namespace for its objects'
//! Jobs (the runner's ServiceAccount and RoleBinding, the run, cluster and state-lock Leases,
//! all labelled `captf.io/managed=true`) is deleted once the namespace holds no
//! TerraformCluster, TerraformMachine or TerraformMachinePool: at the leader's start, then
//! every `--sync-period`. Typically that is what `clusterctl move` leaves in the source
//! namespace, or what stays after the last object of a namespace was deleted.
//!
//! Everything is read live, never from a cache, and `--watch-filter` is ignored: another
//! manager's objects keep a namespace too. A namespace where a managed Job still exists is
//! left for a later round, so that a runner finishing its last run keeps its lock and its
//! RBAC. Nothing here writes events; what was removed is logged.

use std::collections::BTreeSet;
use std::time::Duration;

use captf_api::{TerraformCluster, TerraformMachine, TerraformMachinePool, labels};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, ListParams};
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
                    tracing::info!(namespace = %ns, removed = %removed.join(", "), "orphan sweep: no TerraformCluster, TerraformMachine or TerraformMachinePool left; removed what CAPTF made for their Jobs");
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

/// Whether `ns` still holds a workload object (of any manager: no watch filter) or a managed
/// Job (its runner may still hold the lock and need its RBAC).
async fn occupied(client: &kube::Client, ns: &str, managed: &ListParams) -> Result<bool> {
    let one = ListParams::default().limit(1);
    Ok(any::<TerraformCluster>(client, ns, &one).await?
        || any::<TerraformMachine>(client, ns, &one).await?
        || any::<TerraformMachinePool>(client, ns, &one).await?
        || any::<Job>(client, ns, &managed.clone().limit(1)).await?)
}

async fn any<K>(client: &kube::Client, ns: &str, params: &ListParams) -> Result<bool>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + Clone + DeserializeOwned,
    K: std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let list = api
        .list_metadata(params)
        .await
        .during(|| format!("listing {}s in {ns}", K::kind(&())))?;
    Ok(!list.items.is_empty())
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
