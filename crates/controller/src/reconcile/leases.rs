//! CAPTF's own leases. The run lease allows one live Job per object; the cluster write lease
//! gives a cluster's writing operation (apply, destroy, restore) preference over its machines'
//! and pools' ones. The holder is the name of the Job about to be created, so a pass that
//! rebuilds the same deterministic name finds its own lease.

use std::collections::BTreeMap;
use std::time::Duration;

use captf_api::names::{ObjectKey, WorkloadKind};
use captf_api::{Operation, annotations, labels};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};

use crate::decide::launch::writes;
use crate::error::{Error, KubeContext, Result};

/// How long a lease naming a Job that never appeared stays taken (a crash between taking the
/// lease and creating the Job).
const LEASE_GRACE: Duration = Duration::from_secs(60);
/// A lease older than this is free whatever its holder, when it records no duration (the
/// default deadline plus margins).
const LEASE_BACKSTOP_SECONDS: i32 = 4500;

/// The Job a lease is taken for: its name, operation and `activeDeadlineSeconds`.
#[derive(Clone, Copy, Debug)]
pub struct For<'a> {
    pub job: &'a str,
    pub op: Operation,
    pub deadline_seconds: i64,
}

/// The longest deadline `spec.jobs.activeDeadlineSeconds` allows (the CRD's bound).
const MAX_DEADLINE_SECONDS: i64 = 86_400;

/// How long a lease held by a Job with `deadline_seconds` stays taken whatever its holder:
/// the deadline, the pod's 600 s grace after it, and 300 s of margin (concepts, leases), so
/// no Job can outlive its lease however long a deadline `spec.jobs` allows.
pub fn backstop(deadline_seconds: i64) -> i32 {
    i32::try_from(deadline_seconds.max(0).saturating_add(600 + 300)).unwrap_or(i32::MAX)
}

/// What taking a lease came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Taken {
    /// Taken (created, kept or taken over from a holder that is gone).
    Yes,
    /// Taken over from a Job no `Terraform*` object controls: a look-alike, named here.
    FromLookAlike(String),
    /// Another live Job holds it, or another writer won: look again next pass.
    No,
}

impl Taken {
    /// Whether the lease is now the Job's.
    pub fn held(&self) -> bool {
        !matches!(self, Taken::No)
    }
}

/// Takes the object's run lease for `job`: created when missing, taken over when free, kept when
/// `job` already holds it. The lease carries the object's cluster, so the cluster's writer can
/// find its members' leases.
pub async fn take_run_lease(
    client: &kube::Client,
    key: &ObjectKey,
    cluster: &str,
    holder: For<'_>,
) -> Result<Taken> {
    let mut labels_map = BTreeMap::from([
        (labels::LEASE.to_owned(), labels::LEASE_RUN.to_owned()),
        (labels::MANAGED.to_owned(), labels::TRUE.to_owned()),
        (labels::OWNER_KIND.to_owned(), key.kind().kind().to_owned()),
        (labels::OWNER_NAME.to_owned(), key.owner_name_label()),
    ]);
    if !cluster.is_empty() {
        labels_map.insert(
            labels::CLUSTER_NAME.to_owned(),
            captf_api::names::label_value(cluster),
        );
    }
    take(
        client,
        key.namespace(),
        &key.run_lease(),
        labels_map,
        holder,
    )
    .await
}

/// Takes the write lease of `cluster` for the cluster's Job `job`.
pub async fn take_cluster_lease(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    holder: For<'_>,
) -> Result<Taken> {
    let labels_map = BTreeMap::from([
        (labels::LEASE.to_owned(), labels::LEASE_CLUSTER.to_owned()),
        (labels::MANAGED.to_owned(), labels::TRUE.to_owned()),
        (
            labels::CLUSTER_NAME.to_owned(),
            captf_api::names::label_value(cluster),
        ),
    ]);
    let name = captf_api::names::cluster_lease(namespace, cluster);
    take(client, namespace, &name, labels_map, holder).await
}

/// The Job holding the write lease of `cluster`, while it is live.
pub async fn cluster_writer(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<Option<String>> {
    let name = captf_api::names::cluster_lease(namespace, cluster);
    holder_of(client, namespace, &name).await
}

/// The Job holding `key`'s run lease, while it is live: any of its operations may write its
/// state.
pub async fn run_holder(client: &kube::Client, key: &ObjectKey) -> Result<Option<String>> {
    holder_of(client, key.namespace(), &key.run_lease()).await
}

/// The live holder of lease `name`, if it exists.
async fn holder_of(client: &kube::Client, namespace: &str, name: &str) -> Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let Some(lease) = leases
        .get_opt(name)
        .await
        .during(|| format!("reading Lease {namespace}/{name}"))?
    else {
        return Ok(None);
    };
    live_holder(client, namespace, &lease).await
}

/// The Jobs of `cluster`'s machines and pools that hold a live run lease for a writing
/// operation, sorted.
pub async fn member_writers(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<Vec<String>> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let selector = format!(
        "{}={},{}={}",
        labels::LEASE,
        labels::LEASE_RUN,
        labels::CLUSTER_NAME,
        captf_api::names::label_value(cluster)
    );
    let list = leases
        .list(&ListParams::default().labels(&selector))
        .await
        .during(|| format!("listing the run leases of cluster {namespace}/{cluster}"))?;
    let mut writers = Vec::new();
    for lease in list.items {
        let member = lease
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::OWNER_KIND))
            .is_some_and(|k| k != WorkloadKind::Cluster.kind());
        let writing = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::LEASE_OP))
            .and_then(|op| op.parse::<Operation>().ok())
            .is_some_and(writes);
        if member
            && writing
            && let Some(job) = live_holder(client, namespace, &lease).await?
        {
            writers.push(job);
        }
    }
    writers.sort();
    Ok(writers)
}

/// Deletes the lease `name` if `holder` still holds it (a lease taken over meanwhile stays:
/// the delete is conditional on what was read). Failures are only logged.
pub async fn release(client: &kube::Client, namespace: &str, name: &str, holder: &str) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let Ok(Some(lease)) = leases.get_opt(name).await else {
        return;
    };
    if lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        != Some(holder)
    {
        return;
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: lease.metadata.uid.clone(),
            resource_version: lease.metadata.resource_version.clone(),
        }),
        ..Default::default()
    };
    if let Err(error) = leases.delete(name, &params).await {
        tracing::debug!(%error, lease = %name, "lease not released");
    }
}

/// Releases whichever cluster write lease of the namespace `holder` holds.
pub async fn release_cluster_lease_of(client: &kube::Client, namespace: &str, holder: &str) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let selector = format!("{}={}", labels::LEASE, labels::LEASE_CLUSTER);
    let Ok(list) = leases.list(&ListParams::default().labels(&selector)).await else {
        return;
    };
    for lease in list.items {
        let held = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(holder);
        if held && let Some(name) = lease.metadata.name.as_deref() {
            release(client, namespace, name, holder).await;
        }
    }
}

/// The holder of `lease` while it holds it: its Job exists and has not finished (or was about
/// to be created less than a minute ago, or is gone while its pod still runs), and the lease is
/// younger than its backstop.
async fn live_holder(
    client: &kube::Client,
    namespace: &str,
    lease: &Lease,
) -> Result<Option<String>> {
    Ok(match holder(client, namespace, lease).await? {
        Holder::Live(job) => Some(job),
        Holder::Free | Holder::LookAlike(_) => None,
    })
}

/// Who holds a lease.
enum Holder {
    Free,
    Live(String),
    /// A Job no `Terraform*` object controls: it holds nothing.
    LookAlike(String),
}

async fn holder(client: &kube::Client, namespace: &str, lease: &Lease) -> Result<Holder> {
    let spec = lease.spec.as_ref();
    let holder = spec
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default();
    if holder.is_empty() {
        return Ok(Holder::Free);
    }
    let age = spec
        .and_then(|s| s.acquire_time.as_ref())
        .map(|t| Timestamp::now().duration_since(t.0));
    // Whoever wrote the lease, no holder is live past the longest backstop a Job may have.
    let recorded = spec
        .and_then(|s| s.lease_duration_seconds)
        .unwrap_or(LEASE_BACKSTOP_SECONDS);
    let backstop =
        SignedDuration::from_secs(i64::from(recorded.min(backstop(MAX_DEADLINE_SECONDS))));
    if age.is_none_or(|a| a > backstop) {
        return Ok(Holder::Free);
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let live = match jobs
        .get_opt(&holder)
        .await
        .during(|| format!("reading Job {namespace}/{holder}"))?
    {
        // A Job no `Terraform*` object controls is a look-alike: it holds nothing.
        Some(j) if !captf_job(&j) => return Ok(Holder::LookAlike(holder)),
        Some(j) => !j
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True"),
        // About to be created, or deleted with its pod still running (and writing).
        None => {
            age.is_some_and(|a| a <= SignedDuration::try_from(LEASE_GRACE).unwrap_or_default())
                || crate::reconcile::pods::running_pod(client, namespace, &holder)
                    .await?
                    .is_some()
        }
    };
    Ok(if live {
        Holder::Live(holder)
    } else {
        Holder::Free
    })
}

/// Whether a `Terraform*` object controls the Job: anyone else's Job under a lease's holder
/// name holds nothing.
fn captf_job(job: &Job) -> bool {
    crate::job::build::captf_controlled(&job.metadata)
}

/// Takes lease `name` for `job`: created when missing, taken over when free, kept when `job`
/// holds it. A conflict means another writer won: not taken, look again next pass.
async fn take(
    client: &kube::Client,
    ns: &str,
    name: &str,
    labels_map: BTreeMap<String, String>,
    holder: For<'_>,
) -> Result<Taken> {
    let For { job, op, .. } = holder;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let now = Timestamp::now();
    let annotations_map = BTreeMap::from([
        (annotations::LEASE_OP.to_owned(), op.as_str().to_owned()),
        (annotations::LEASE_ACQUIRED_AT.to_owned(), now.to_string()),
    ]);
    let desired = |rv: Option<String>| Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            labels: Some(labels_map.clone()),
            annotations: Some(annotations_map.clone()),
            resource_version: rv,
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(job.to_owned()),
            acquire_time: Some(MicroTime(now)),
            lease_duration_seconds: Some(backstop(holder.deadline_seconds)),
            ..Default::default()
        }),
    };
    // Leases are deleted on release, so the create is what usually happens: try it first, and
    // read the lease only when it is there.
    match leases.create(&PostParams::default(), &desired(None)).await {
        Ok(_) => return Ok(Taken::Yes),
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => {
            return Err(Error::Kube {
                action: format!("creating Lease {ns}/{name}"),
                source: e,
            });
        }
    }
    let Some(existing) = leases
        .get_opt(name)
        .await
        .during(|| format!("reading Lease {ns}/{name}"))?
    else {
        // Released between the two calls: another writer may be taking it; look again next
        // pass, as after any conflict.
        return Ok(Taken::No);
    };
    let current = existing
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref());
    let mut taken = Taken::Yes;
    if current != Some(job) {
        match self::holder(client, ns, &existing).await? {
            Holder::Live(_) => return Ok(Taken::No),
            Holder::LookAlike(other) => taken = Taken::FromLookAlike(other),
            Holder::Free => {}
        }
    }
    match leases
        .replace(
            name,
            &PostParams::default(),
            &desired(existing.metadata.resource_version.clone()),
        )
        .await
    {
        Ok(_) => Ok(taken),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Taken::No),
        Err(e) => Err(Error::Kube {
            action: format!("taking Lease {ns}/{name}"),
            source: e,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backstop_outlasts_every_deadline_a_job_may_have() {
        let rows = [
            ("the default deadline", 3600, 4500),
            ("the longest deadline spec.jobs allows", 86_400, 87_300),
            ("no deadline at all", 0, 900),
            ("a nonsense negative one", -5, 900),
            ("past what a lease can say", i64::MAX, i32::MAX),
        ];
        for (what, deadline, want) in rows {
            assert_eq!(backstop(deadline), want, "{what}");
        }
        assert_eq!(backstop(3600), LEASE_BACKSTOP_SECONDS, "the old default");
    }

    #[test]
    fn only_a_job_a_terraform_object_controls_holds_a_lease() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let job = |api_version: &str, controller: Option<bool>| {
            let mut job = Job::default();
            job.metadata.owner_references = Some(vec![OwnerReference {
                api_version: api_version.into(),
                controller,
                ..Default::default()
            }]);
            job
        };
        let rows = [
            (
                "the manager's",
                job(captf_api::API_VERSION, Some(true)),
                true,
            ),
            ("a CronJob's", job("batch/v1", Some(true)), false),
            (
                "a reference that is no controller's",
                job(captf_api::API_VERSION, None),
                false,
            ),
            ("nobody's", Job::default(), false),
        ];
        for (what, job, holds) in rows {
            assert_eq!(captf_job(&job), holds, "{what}");
        }
    }
}
