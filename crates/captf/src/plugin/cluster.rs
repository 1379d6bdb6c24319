//! Reaching the cluster as kubectl does, and the reads and writes every command shares.

use captf_api::names::{ObjectKey, WorkloadKind};
use captf_api::{TerraformCluster, TerraformMachine, TerraformMachinePool};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};

use super::status::LeaseView;
use super::workload::{self, Workload};
use super::{Connection, Failure, Result, exit};

/// The client and namespace, resolved as kubectl resolves them.
pub async fn connect(c: &Connection) -> Result<(kube::Client, String)> {
    let options = kube::config::KubeConfigOptions {
        context: c.context.clone(),
        ..Default::default()
    };
    let unusable = |e: &dyn std::fmt::Display| {
        Failure::new(
            exit::USAGE,
            format!("no usable Kubernetes configuration: {e}"),
        )
    };
    let config = match &c.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                Failure::new(exit::USAGE, format!("--kubeconfig {}: {e}", path.display()))
            })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| unusable(&e))?
        }
        None if c.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| unusable(&e))?,
        None => kube::Config::infer().await.map_err(|e| unusable(&e))?,
    };
    let namespace = c
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config)
        .map_err(|e| Failure::new(exit::ERROR, format!("client: {e}")))?;
    Ok((client, namespace))
}

pub struct Ctx {
    pub client: kube::Client,
    pub namespace: String,
}

impl Ctx {
    pub async fn get(&self, arg: &str) -> Result<Workload> {
        let (kind, name) =
            workload::parse_reference(arg).map_err(|e| Failure::new(exit::USAGE, e))?;
        let found: Option<Workload> = match kind {
            WorkloadKind::Cluster => {
                Api::<TerraformCluster>::namespaced(self.client.clone(), &self.namespace)
                    .get_opt(&name)
                    .await?
                    .map(Into::into)
            }
            WorkloadKind::Machine => {
                Api::<TerraformMachine>::namespaced(self.client.clone(), &self.namespace)
                    .get_opt(&name)
                    .await?
                    .map(Into::into)
            }
            WorkloadKind::MachinePool => {
                Api::<TerraformMachinePool>::namespaced(self.client.clone(), &self.namespace)
                    .get_opt(&name)
                    .await?
                    .map(Into::into)
            }
        };
        found.ok_or_else(|| {
            Failure::new(
                exit::NOT_FOUND,
                format!(
                    "{}/{name} not found in namespace {} (another namespace? use -n)",
                    kind.kind(),
                    self.namespace
                ),
            )
        })
    }

    pub async fn list(&self) -> Result<Vec<Workload>> {
        let mut all = self.list_of::<TerraformCluster>().await?;
        all.extend(self.list_of::<TerraformMachine>().await?);
        all.extend(self.list_of::<TerraformMachinePool>().await?);
        Ok(all)
    }

    async fn list_of<K>(&self) -> Result<Vec<Workload>>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Into<Workload>,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.namespace);
        Ok(api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(Into::into)
            .collect())
    }

    pub fn key(&self, w: &Workload) -> Result<ObjectKey> {
        ObjectKey::new(&w.namespace, w.kind(), &w.name)
            .map_err(|e| Failure::new(exit::ERROR, e.to_string()))
    }

    /// The run lease, the engine's state lock and (for a cluster) its write gate.
    pub async fn leases(&self, w: &Workload) -> Result<Vec<LeaseView>> {
        let key = self.key(w)?;
        let mut names = vec![(key.run_lease(), "run"), (key.lock_lease(), "state lock")];
        if w.kind() == WorkloadKind::Cluster {
            names.push((
                captf_api::names::cluster_lease(&w.namespace, &w.name),
                "cluster",
            ));
        }
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut views = Vec::new();
        for (name, purpose) in names {
            if let Some(lease) = api.get_opt(&name).await? {
                let annotations = lease.metadata.annotations.unwrap_or_default();
                let spec = lease.spec.unwrap_or_default();
                views.push(LeaseView {
                    name,
                    purpose,
                    holder: spec.holder_identity.filter(|h| !h.is_empty()),
                    operation: annotations.get(captf_api::annotations::LEASE_OP).cloned(),
                    acquired_at: spec.acquire_time.map(|t| t.0.to_string()),
                });
            }
        }
        Ok(views)
    }

    /// The pods of the object's Jobs, oldest first.
    pub async fn job_pods(&self, w: &Workload) -> Result<Vec<Pod>> {
        let selector = format!(
            "{}={},{}={}",
            captf_api::labels::OWNER_KIND,
            w.kind().kind(),
            captf_api::labels::OWNER_NAME,
            captf_api::names::label_value(&w.name)
        );
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut pods = api
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
        pods.sort_by(|a, b| {
            let key = |p: &Pod| {
                (
                    p.metadata.creation_timestamp.clone().map(|t| t.0),
                    p.metadata.name.clone(),
                )
            };
            key(a).cmp(&key(b))
        });
        Ok(pods)
    }

    /// Sets one annotation (`None`: removes it), only on the version of the object that was
    /// read when `resource_version` is given (a changed object refuses).
    pub async fn annotate(
        &self,
        w: &Workload,
        key: &str,
        value: Option<&str>,
        resource_version: Option<&str>,
    ) -> Result<()> {
        let mut metadata = serde_json::json!({"annotations": {key: value}});
        if let Some(rv) = resource_version {
            metadata["resourceVersion"] = rv.into();
        }
        let patch = serde_json::json!({"metadata": metadata});
        let pp = PatchParams::default();
        let result = match w.kind() {
            WorkloadKind::Cluster => {
                Api::<TerraformCluster>::namespaced(self.client.clone(), &self.namespace)
                    .patch_metadata(&w.name, &pp, &Patch::Merge(&patch))
                    .await
                    .map(drop)
            }
            WorkloadKind::Machine => {
                Api::<TerraformMachine>::namespaced(self.client.clone(), &self.namespace)
                    .patch_metadata(&w.name, &pp, &Patch::Merge(&patch))
                    .await
                    .map(drop)
            }
            WorkloadKind::MachinePool => {
                Api::<TerraformMachinePool>::namespaced(self.client.clone(), &self.namespace)
                    .patch_metadata(&w.name, &pp, &Patch::Merge(&patch))
                    .await
                    .map(drop)
            }
        };
        match result {
            Err(kube::Error::Api(e)) if e.code == 409 => Err(Failure::new(
                exit::REFUSED,
                format!(
                    "{} changed while the plan was shown: nothing was approved; look again with `kubectl captf plan show {}`",
                    w.reference(),
                    w.arg()
                ),
            )),
            other => other.map_err(Failure::from),
        }
    }
}
