//! CAPTF's own run lease: one live Job per object. The holder is the name of the Job about to be
//! created, so a pass that rebuilds the same deterministic name finds its own lease.

use std::collections::BTreeMap;
use std::time::Duration;

use captf_api::names::ObjectKey;
use captf_api::{Operation, annotations, labels};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use crate::error::{Error, KubeContext, Result};

/// How long a lease naming a Job that never appeared stays taken (a crash between taking the
/// lease and creating the Job).
const LEASE_GRACE: Duration = Duration::from_secs(60);

/// Takes the object's run lease for `job`: created when missing, taken over when free, kept when
/// `job` already holds it. `false` when another live Job holds it.
pub async fn take_run_lease(
    client: &kube::Client,
    key: &ObjectKey,
    job: &str,
    op: Operation,
) -> Result<bool> {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    let ns = key.namespace();
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let name = key.run_lease();
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Timestamp::now());
    let labels_map = BTreeMap::from([
        (labels::LEASE.to_owned(), labels::LEASE_RUN.to_owned()),
        (labels::MANAGED.to_owned(), labels::TRUE.to_owned()),
        (labels::OWNER_KIND.to_owned(), key.kind().kind().to_owned()),
        (labels::OWNER_NAME.to_owned(), key.owner_name_label()),
    ]);
    let annotations_map = BTreeMap::from([
        (annotations::LEASE_OP.to_owned(), op.as_str().to_owned()),
        (
            annotations::LEASE_ACQUIRED_AT.to_owned(),
            Timestamp::now().to_string(),
        ),
    ]);
    let desired = |rv: Option<String>| Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.to_owned()),
            labels: Some(labels_map.clone()),
            annotations: Some(annotations_map.clone()),
            resource_version: rv,
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(job.to_owned()),
            acquire_time: Some(now.clone()),
            lease_duration_seconds: Some(4500),
            ..Default::default()
        }),
    };
    let Some(existing) = leases
        .get_opt(&name)
        .await
        .during(|| format!("reading Lease {ns}/{name}"))?
    else {
        return match leases.create(&PostParams::default(), &desired(None)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(Error::Kube {
                action: format!("creating Lease {ns}/{name}"),
                source: e,
            }),
        };
    };
    let holder = existing
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default();
    let free = if holder.is_empty() || holder == job {
        true
    } else {
        let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
        match jobs
            .get_opt(&holder)
            .await
            .during(|| format!("reading Job {ns}/{holder}"))?
        {
            Some(j) => j
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True"),
            None => {
                let acquired = existing
                    .spec
                    .as_ref()
                    .and_then(|s| s.acquire_time.as_ref())
                    .map(|t| t.0);
                acquired.is_none_or(|a| {
                    Timestamp::now().duration_since(a)
                        > k8s_openapi::jiff::SignedDuration::try_from(LEASE_GRACE)
                            .unwrap_or_default()
                })
            }
        }
    };
    if !free {
        return Ok(false);
    }
    match leases
        .replace(
            &name,
            &PostParams::default(),
            &desired(existing.metadata.resource_version.clone()),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(Error::Kube {
            action: format!("taking Lease {ns}/{name}"),
            source: e,
        }),
    }
}
