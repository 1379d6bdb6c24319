//! What a machine or pool takes from its cluster and its CAPI owner: the Cluster and the
//! TerraformCluster it names, the cluster's exports (read from the cluster's state) and the
//! bootstrap data. Each either is there or says, as a gate, what it waits for.

use captf_api::conditions::{Status, reasons};
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_api::{TerraformCluster, annotations};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};

use crate::capi;
use crate::error::{Error, KubeContext, Result};
use crate::inputs::Bootstrap;
use crate::reconcile::Context;
use crate::reconcile::leases;
use crate::reconcile::observe::owner::{Gate, Hold};
use crate::reconcile::observe::state::{self, StateRead};

/// The CAPI Cluster of a member and the TerraformCluster it names.
pub struct ClusterOf {
    /// Its `spec.paused` pauses the member.
    pub cluster: capi::Cluster,
    pub infra: TerraformCluster,
}

/// What the cluster hands over to its members, read from its state.
pub struct Handoff {
    /// The `exports` output (`{}` for a cluster managed elsewhere).
    pub exports: serde_json::Value,
    /// The names of the `failure_domains` output.
    pub failure_domains: Vec<String>,
}

fn waiting<T>(reason: &'static str, message: String) -> Result<std::result::Result<T, Gate>> {
    Ok(Err((Status::Unknown, reason, message)))
}

fn held<T>(reason: &'static str, message: String) -> Result<std::result::Result<T, Hold>> {
    Ok(Err(Hold::Gate((Status::Unknown, reason, message))))
}

/// Cluster `name` and its TerraformCluster. `WaitingForOwner` while the Cluster is missing,
/// `ClusterNotTerraform` for another provider's cluster (nothing of the member runs),
/// `WaitingForClusterInfrastructure` while the TerraformCluster is missing.
pub async fn cluster_of(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<std::result::Result<ClusterOf, Gate>> {
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &capi::cluster_resource());
    let Some(object) = clusters
        .get_opt(name)
        .await
        .during(|| format!("reading Cluster {namespace}/{name}"))?
    else {
        return waiting(
            reasons::WAITING_FOR_OWNER,
            format!("the Cluster {name} does not exist yet"),
        );
    };
    let cluster: capi::Cluster = serde_json::from_value(serde_json::to_value(&object)?)?;
    let reference = cluster.spec.infrastructure_ref.clone().unwrap_or_default();
    if reference.kind != "TerraformCluster" {
        return Ok(Err((
            Status::False,
            reasons::CLUSTER_NOT_TERRAFORM,
            format!(
                "Cluster {name} spec.infrastructureRef names a {}, not a TerraformCluster: nothing is rendered or run",
                if reference.kind.is_empty() {
                    "nothing"
                } else {
                    reference.kind.as_str()
                }
            ),
        )));
    }
    let infras: Api<TerraformCluster> = Api::namespaced(client.clone(), namespace);
    let Some(infra) = infras
        .get_opt(&reference.name)
        .await
        .during(|| format!("reading TerraformCluster {namespace}/{}", reference.name))?
    else {
        return waiting(
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            format!(
                "Cluster {name} names TerraformCluster {}, which does not exist",
                reference.name
            ),
        );
    };
    Ok(Ok(ClusterOf { cluster, infra }))
}

/// The cluster's handoff, read from the TerraformCluster's state, or the gate saying why it
/// cannot be handed over yet (not provisioned, state unreadable, exports not canonical). While
/// a Job of the cluster may be writing that state, nothing is read: [`Hold::ClusterBusy`].
pub async fn handoff(
    ctx: &Context,
    namespace: &str,
    tc: &TerraformCluster,
) -> Result<std::result::Result<Handoff, Hold>> {
    let published = || {
        tc.status
            .as_ref()
            .and_then(|s| s.failure_domains.as_ref())
            .map(|d| d.iter().map(|f| f.name.clone()).collect())
            .unwrap_or_default()
    };
    if tc.annotations().contains_key(annotations::MANAGED_BY) {
        return Ok(Ok(Handoff {
            exports: serde_json::json!({}),
            failure_domains: published(),
        }));
    }
    let provisioned = tc
        .status
        .as_ref()
        .and_then(|s| s.workspace.initialization.as_ref())
        .and_then(|i| i.provisioned)
        .unwrap_or(false);
    if !provisioned {
        return held(
            reasons::WAITING_FOR_CLUSTER_INFRASTRUCTURE,
            format!("TerraformCluster {} is not provisioned yet", tc.name_any()),
        );
    }
    let key = ObjectKey::new(namespace, WorkloadKind::Cluster, tc.name_any())
        .map_err(|e| Error::InvalidObject(e.to_string()))?;
    if let Some(job) = leases::run_holder(&ctx.client, &key).await? {
        return Ok(Err(Hold::ClusterBusy {
            cluster: tc.name_any(),
            job,
        }));
    }
    let StateRead::Found(state, _) = state::read(ctx, &key).await? else {
        return held(
            reasons::WAITING_FOR_CLUSTER_EXPORTS,
            format!(
                "the state of TerraformCluster {} cannot be read (see its StateReadable)",
                tc.name_any()
            ),
        );
    };
    // Exports come only from the cluster's own state, never from one of another lineage.
    if let Some(own) = tc
        .status
        .as_ref()
        .and_then(|s| s.workspace.state_lineage.as_deref())
        .filter(|own| *own != state.lineage)
    {
        return held(
            reasons::WAITING_FOR_CLUSTER_EXPORTS,
            format!(
                "the state of TerraformCluster {} is of lineage {}, not its own {own} (see its StateReadable)",
                tc.name_any(),
                state.lineage
            ),
        );
    }
    let exports = state
        .outputs
        .get("exports")
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    if let Err(e) = captf_contract::canonicalize_exports(&exports) {
        return held(
            reasons::WAITING_FOR_CLUSTER_EXPORTS,
            format!(
                "the exports output of TerraformCluster {} cannot be handed over: {e}",
                tc.name_any()
            ),
        );
    }
    let failure_domains = state
        .outputs
        .get("failure_domains")
        .and_then(|d| d.as_array())
        .map(|d| {
            d.iter()
                .filter_map(|f| f.get("name").and_then(|n| n.as_str()).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok(Ok(Handoff {
        exports,
        failure_domains,
    }))
}

/// The bootstrap data in Secret `secret` (named by `owner`'s `dataSecretName`), or
/// `WaitingForBootstrapData`.
pub async fn bootstrap(
    ctx: &Context,
    namespace: &str,
    secret: Option<&str>,
    owner: &str,
) -> Result<std::result::Result<Bootstrap, Gate>> {
    let Some(secret) = secret else {
        return waiting(
            reasons::WAITING_FOR_BOOTSTRAP_DATA,
            format!(
                "{owner} has no bootstrap dataSecretName yet (the bootstrap provider writes it)"
            ),
        );
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let data = secrets
        .get_opt(secret)
        .await
        .during(|| format!("reading the bootstrap Secret {namespace}/{secret}"))?
        .and_then(|s| s.data)
        .unwrap_or_default();
    let Some(value) = data.get("value") else {
        return waiting(
            reasons::WAITING_FOR_BOOTSTRAP_DATA,
            format!("the bootstrap Secret {secret} does not exist or has no value key yet"),
        );
    };
    // The default format is the inputs' business (`Bootstrap::format_or_default`).
    Ok(Ok(Bootstrap {
        value: value.0.clone(),
        format: data
            .get("format")
            .map(|f| String::from_utf8_lossy(&f.0).into_owned()),
    }))
}

/// The hash of the exports a member renders, for the pool's exports guard.
pub fn exports_hash(exports: &serde_json::Value) -> String {
    use sha2::Digest;
    let canonical = captf_contract::canonicalize_exports(exports).unwrap_or_default();
    format!("sha256:{:x}", sha2::Sha256::digest(&canonical))
}
