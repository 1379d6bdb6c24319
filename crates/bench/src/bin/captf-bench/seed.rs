//! Seeding a fleet of TerraformClusters that are up to date, by cloning one that the manager
//! really applied (the template): its state Secrets, durable inputs, state backups, finished
//! Jobs (`seed_jobs`), the namespace's credential mirror and runner RBAC, with names, labels,
//! owner references and the inputs hash of each clone. The inputs hash is rendered by the manager's own functions
//! (`captf_controller::inputs::cluster_inputs`, `captf_controller::variables::merge`,
//! `captf_contract::render`) from the clone as the API server stored it. Each cluster gets its
//! machines from `seed_machines`.

use std::collections::BTreeMap;

use anyhow::Context as _;
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_api::{TerraformCluster, TerraformClusterStatus, WorkspaceStatus, annotations, labels};
use captf_contract::{Role, RoleInputs};
use captf_controller::capi;
use captf_controller::inputs::{ClusterHistory, cluster_inputs};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};

use crate::seed_jobs;
use crate::seed_machines::{MachineTemplate, machine_name, seed_machine};

/// The label every seeded object (and the template) carries, their namespaces included: the
/// identity allows those by selector (a list holds at most 100 namespaces).
pub const FLEET_LABEL: &str = "captf-bench/fleet";

/// The template: a TerraformCluster the manager applied, and what it left.
pub struct Template {
    pub tc: TerraformCluster,
    /// Its own Secrets and the inputs hash its state records.
    pub own: Owned,
    /// The namespace's credential mirror.
    pub mirror: Secret,
    /// `control_plane_initialized` as last rendered (from the durable inputs).
    pub control_plane_initialized: bool,
}

/// What the manager left for one template object: its key and UID, its own Secrets (state
/// chunks, durable inputs, backups, and a plan key if any), the inputs hash its state records,
/// and its finished Jobs.
pub struct Owned {
    pub key: ObjectKey,
    pub uid: String,
    pub inputs_hash: String,
    pub secrets: Vec<Secret>,
    pub jobs: Vec<Job>,
}

impl Owned {
    /// The Secrets of the object `key` with `uid` among `all` (its namespace's), credential
    /// mirrors left out, and its Job history `jobs`.
    pub fn find(
        key: ObjectKey,
        uid: &str,
        all: &[Secret],
        jobs: Vec<Job>,
    ) -> anyhow::Result<Owned> {
        let secrets: Vec<Secret> = all
            .iter()
            .filter(|s| {
                s.owner_references().iter().any(|o| o.uid == uid)
                    && !s.labels().contains_key(labels::MIRRORED)
            })
            .cloned()
            .collect();
        let base = secrets
            .iter()
            .find(|s| s.name_any() == key.state_secret())
            .with_context(|| format!("{} has no state Secret", key.name()))?;
        let inputs_hash = base
            .annotations()
            .get(annotations::INPUTS_HASH)
            .cloned()
            .with_context(|| format!("the state of {} has no inputs hash", key.name()))?;
        Ok(Owned {
            key,
            uid: uid.to_owned(),
            inputs_hash,
            secrets,
            jobs,
        })
    }

    /// The names of its Secrets and Jobs, for the log.
    pub fn names(&self) -> String {
        let secrets = self.secrets.iter().map(|s| s.name_any());
        let jobs = self.jobs.iter().map(|j| format!("Job {}", j.name_any()));
        secrets.chain(jobs).collect::<Vec<_>>().join(", ")
    }

    /// Creates its Secrets and finished Jobs for the clone `key` owned by `owner`, whose inputs
    /// render to `rendered`; `renames` as [`Cloning::renames`].
    pub async fn clone_for(
        &self,
        client: &kube::Client,
        key: &ObjectKey,
        owner: &OwnerReference,
        rendered: &captf_contract::Rendered,
        renames: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        let to = Cloning {
            from: self,
            key,
            owner,
            inputs_hash: &rendered.inputs_hash,
            renames,
        };
        let secrets: Api<Secret> = Api::namespaced(client.clone(), key.namespace());
        for s in &self.secrets {
            let clone = clone_secret(s, &to, rendered);
            secrets.create(&PostParams::default(), &clone).await?;
        }
        for job in &self.jobs {
            let clone = seed_jobs::clone_job(job, &to)?;
            seed_jobs::create_finished(client, &clone, job).await?;
        }
        Ok(())
    }
}

impl Template {
    /// Reads what the manager left for `name` in `ns` (the manager must be stopped).
    pub async fn read(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<Template> {
        let tcs: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
        let tc = tcs.get(name).await?;
        let uid = tc.uid().context("template uid")?;
        let key = ObjectKey::new(ns, WorkloadKind::Cluster, name)?;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        let all = secrets.list(&ListParams::default()).await?.items;
        let mirror = all
            .iter()
            .find(|s| {
                s.labels()
                    .get(labels::MIRRORED)
                    .is_some_and(|v| v == labels::TRUE)
            })
            .cloned()
            .context("no credential mirror next to the template")?;
        let jobs = seed_jobs::history_of(client, ns, &uid).await?;
        let own = Owned::find(key.clone(), &uid, &all, jobs)?;
        let control_plane_initialized = own
            .secrets
            .iter()
            .find(|s| s.name_any() == key.durable_inputs_secret())
            .and_then(|s| s.data.as_ref()?.get(captf_contract::render::TFVARS_FILE))
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b.0).ok())
            .and_then(|v| v.get("control_plane_initialized")?.as_bool())
            .unwrap_or(false);
        Ok(Template {
            tc,
            own,
            mirror,
            control_plane_initialized,
        })
    }
}

/// The namespaces of a fleet of `objects` with `per_namespace` each.
pub fn namespaces(objects: usize, per_namespace: usize) -> Vec<String> {
    let count = objects.div_ceil(per_namespace.max(1));
    (0..count).map(|i| format!("fleet-{i:04}")).collect()
}

/// The object `i` of the fleet: `(namespace, name)`.
pub fn object(i: usize, per_namespace: usize) -> (String, String) {
    let per = per_namespace.max(1);
    (format!("fleet-{:04}", i / per), format!("c{i:05}"))
}

/// Creates the namespaces with their runner RBAC (as the manager would create it).
pub async fn create_namespaces(client: &kube::Client, names: &[String]) -> anyhow::Result<()> {
    futures::stream::iter(names.iter().map(|ns| {
        let client = client.clone();
        async move {
            let api: Api<Namespace> = Api::all(client.clone());
            let namespace = Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.clone()),
                    labels: Some([(FLEET_LABEL.to_owned(), "true".to_owned())].into()),
                    ..Default::default()
                },
                ..Default::default()
            };
            api.create(&PostParams::default(), &namespace).await?;
            let runner = captf_controller::reconcile::act::credentials::RUNNER;
            let managed = BTreeMap::from([(labels::MANAGED.to_owned(), labels::TRUE.to_owned())]);
            let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
            let sa = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(runner.into()),
                    labels: Some(managed.clone()),
                    ..Default::default()
                },
                ..Default::default()
            };
            sas.create(&PostParams::default(), &sa).await?;
            let binding: RoleBinding = serde_json::from_value(serde_json::json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": runner, "namespace": ns, "labels": managed},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": runner},
                "subjects": [{"kind": "ServiceAccount", "name": runner, "namespace": ns}],
            }))?;
            let rbs: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
            rbs.create(&PostParams::default(), &binding).await?;
            anyhow::Ok(())
        }
    }))
    .buffer_unordered(8)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

/// A cluster seeded: the plain owner reference the namespace's credential mirror lists for its
/// TerraformCluster, and its CAPI Cluster's UID (its machines' owner).
pub struct Seeded {
    pub owner: OwnerReference,
    pub cluster_uid: String,
}

/// Seeds object `(ns, name)` as a clone of the template.
pub async fn seed_object(
    client: &kube::Client,
    template: &Template,
    ns: &str,
    name: &str,
) -> anyhow::Result<Seeded> {
    // The CAPI Cluster, as CAPI would create it.
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &captf_e2e::fixture::capi_cluster_resource(),
    );
    let cluster: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformCluster", "name": name}},
    }))?;
    let cluster = clusters.create(&PostParams::default(), &cluster).await?;
    let cluster: capi::Cluster = serde_json::from_value(serde_json::to_value(&cluster)?)?;
    let cluster_uid = cluster.metadata.uid.clone().context("Cluster uid")?;

    // The TerraformCluster, as the template is after its apply: finalizer, endpoint written
    // back from the module's output, and of its status only what its members read of it (the
    // manager's first pass writes the rest).
    let t = &template.tc;
    let mut annotations_of = t.annotations().clone();
    annotations_of.remove(annotations::BLOCK_MOVE);
    annotations_of.remove("kubectl.kubernetes.io/last-applied-configuration");
    let mut labels_of = t.labels().clone();
    labels_of.insert(labels::CLUSTER_NAME.into(), name.into());
    labels_of.insert(FLEET_LABEL.into(), "true".into());
    let mut spec = t.spec.clone();
    if let Some(endpoint) = spec.control_plane_endpoint.as_mut()
        && endpoint.host.is_some()
    {
        endpoint.host = Some(format!("{name}.noop.invalid"));
    }
    let tc = TerraformCluster {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(labels_of),
            annotations: Some(annotations_of),
            finalizers: t.metadata.finalizers.clone(),
            owner_references: Some(vec![OwnerReference {
                api_version: "cluster.x-k8s.io/v1beta2".into(),
                kind: "Cluster".into(),
                name: name.into(),
                uid: cluster_uid.clone(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec,
        status: None,
    };
    let tcs: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    tcs.create(&PostParams::default(), &tc).await?;
    // What the cluster's machines read of its status (`captf_controller::wake::members_worthy`),
    // as a manager restarting over a provisioned fleet finds it: without the `provisioned`
    // latch a machine whose pass came before its cluster's would wait for the cluster
    // (`WaitingForClusterInfrastructure`, a status write); without the rest, the cluster's
    // first status write would wake its machines for a second pass.
    let key = ObjectKey::new(ns, WorkloadKind::Cluster, name)?;
    let read = t.status.clone().unwrap_or_default();
    let latch = TerraformClusterStatus {
        workspace: WorkspaceStatus {
            initialization: read.workspace.initialization,
            observed_state_serial: read.workspace.observed_state_serial,
            state_secret_suffix: Some(key.state_suffix()),
            ..Default::default()
        },
        failure_domains: read.failure_domains,
        exports: read.exports,
        ..Default::default()
    };
    let tc = tcs
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": latch })),
        )
        .await?;
    let owner = tc
        .controller_owner_ref(&())
        .context("TerraformCluster without uid")?;

    // Its inputs, rendered as the manager renders them.
    let history = ClusterHistory {
        control_plane_initialized: template.control_plane_initialized,
        endpoint_from_module: tc
            .annotations()
            .get(annotations::ENDPOINT_SOURCE)
            .is_some_and(|v| v == annotations::ENDPOINT_SOURCE_MODULE),
    };
    let variables = captf_controller::variables::merge(Role::Cluster, ns, &tc.spec.workspace, &[])
        .map_err(|gate| anyhow::anyhow!("variables: {gate:?}"))?
        .variables;
    let inputs = RoleInputs::Cluster(cluster_inputs(&tc, &cluster, &history));
    let rendered = captf_contract::render(
        Role::Cluster,
        &tc.spec.workspace.source.image,
        &inputs,
        &variables,
    )?;

    template
        .own
        .clone_for(client, &key, &owner, &rendered, &[])
        .await?;
    Ok(Seeded {
        owner: OwnerReference {
            controller: None,
            block_owner_deletion: None,
            ..owner
        },
        cluster_uid,
    })
}

/// What makes one of the template object's Secrets or Jobs the clone's.
pub struct Cloning<'a> {
    /// The template object.
    pub from: &'a Owned,
    /// The clone.
    pub key: &'a ObjectKey,
    /// The clone's owner reference, in place of the template object's.
    pub owner: &'a OwnerReference,
    /// The clone's inputs hash, in place of the template's.
    pub inputs_hash: &'a str,
    /// Further label and annotation values to replace whole (a machine's cluster name).
    pub renames: &'a [(&'a str, &'a str)],
}

impl Cloning<'_> {
    /// A label or annotation value of the template object's, made the clone's: its inputs
    /// hash, name or name label, a value of `renames`, or a value holding its state's suffix.
    pub fn value(&self, v: &str) -> String {
        let from_key = &self.from.key;
        if v == self.from.inputs_hash {
            self.inputs_hash.to_owned()
        } else if v == from_key.name() {
            self.key.name().to_owned()
        } else if v == from_key.owner_name_label() {
            self.key.owner_name_label()
        } else if let Some((_, to)) = self.renames.iter().find(|(f, _)| *f == v) {
            (*to).to_owned()
        } else {
            v.replace(&from_key.state_suffix(), &self.key.state_suffix())
        }
    }

    /// `meta` of one of the template object's Secrets or Jobs as the clone's `name` carries
    /// it: the clone's namespace, labels and annotations made the clone's, and the clone as
    /// owner where the template object was. Nothing the API server sets.
    pub fn meta(&self, meta: &ObjectMeta, name: String) -> ObjectMeta {
        let values = |m: &Option<BTreeMap<String, String>>| {
            m.iter()
                .flatten()
                .map(|(k, v)| (k.clone(), self.value(v)))
                .collect()
        };
        let owners = meta
            .owner_references
            .iter()
            .flatten()
            .map(|o| {
                if o.uid == self.from.uid {
                    OwnerReference {
                        controller: o.controller,
                        block_owner_deletion: o.block_owner_deletion,
                        ..self.owner.clone()
                    }
                } else {
                    o.clone()
                }
            })
            .collect();
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.key.namespace().into()),
            labels: Some(values(&meta.labels)),
            annotations: Some(values(&meta.annotations)),
            owner_references: Some(owners),
            ..Default::default()
        }
    }
}

/// The template's Secret `s` (one of `to.from`'s) for the clone `to`, its durable inputs those
/// of `rendered`.
pub fn clone_secret(s: &Secret, to: &Cloning, rendered: &captf_contract::Rendered) -> Secret {
    let (from_key, key) = (&to.from.key, to.key);
    let old_name = s.name_any();
    let durable = old_name == from_key.durable_inputs_secret();
    let name = if durable {
        key.durable_inputs_secret()
    } else if old_name == from_key.plan_key_secret() {
        key.plan_key_secret()
    } else {
        old_name.replace(&from_key.state_suffix(), &key.state_suffix())
    };
    let mut data = s.data.clone().unwrap_or_default();
    if durable {
        data.insert(
            captf_contract::render::TFVARS_FILE.into(),
            ByteString(rendered.tfvars_json.clone()),
        );
        data.insert(
            captf_contract::render::MAIN_TF_FILE.into(),
            ByteString(rendered.main_tf_json.clone()),
        );
    }
    Secret {
        metadata: to.meta(&s.metadata, name),
        data: Some(data),
        type_: s.type_.clone(),
        ..Default::default()
    }
}

/// The namespace's credential mirror, listing every object of the namespace as a user, its
/// clusters and their machines (as the manager leaves it once each object passed once).
pub async fn create_mirror(
    client: &kube::Client,
    template: &Template,
    ns: &str,
    owners: Vec<OwnerReference>,
) -> anyhow::Result<()> {
    let m = &template.mirror;
    let mirror = Secret {
        metadata: ObjectMeta {
            name: Some(m.name_any()),
            namespace: Some(ns.into()),
            labels: m.metadata.labels.clone(),
            annotations: m.metadata.annotations.clone(),
            owner_references: Some(owners),
            ..Default::default()
        },
        data: m.data.clone(),
        type_: m.type_.clone(),
        ..Default::default()
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &mirror).await?;
    Ok(())
}

/// Seeds `objects` clones over `per_namespace`-sized namespaces, `parallel` at a time, each
/// with `machines.1` clones of the template machine `machines.0` (none without one).
pub async fn seed_fleet(
    client: &kube::Client,
    template: &Template,
    machines: Option<(&MachineTemplate, usize)>,
    objects: usize,
    per_namespace: usize,
    parallel: usize,
) -> anyhow::Result<()> {
    let namespaces = namespaces(objects, per_namespace);
    create_namespaces(client, &namespaces).await?;
    let owners: Vec<(String, Vec<OwnerReference>)> = futures::stream::iter((0..objects).map(|i| {
        let (ns, name) = object(i, per_namespace);
        async move {
            let seeded = seed_object(client, template, &ns, &name)
                .await
                .with_context(|| format!("seeding {ns}/{name}"))?;
            let mut owners = vec![seeded.owner];
            if let Some((machine, count)) = machines {
                for j in 0..count {
                    let m = machine_name(&name, j);
                    let owner = seed_machine(client, machine, &ns, &name, &seeded.cluster_uid, &m)
                        .await
                        .with_context(|| format!("seeding machine {ns}/{m}"))?;
                    owners.push(owner);
                }
            }
            anyhow::Ok((ns, owners))
        }
    }))
    .buffered(parallel.max(1))
    .try_collect()
    .await?;
    let mut by_ns: BTreeMap<String, Vec<OwnerReference>> = BTreeMap::new();
    for (ns, owners) in owners {
        by_ns.entry(ns).or_default().extend(owners);
    }
    for (ns, owners) in by_ns {
        create_mirror(client, template, &ns, owners).await?;
    }
    Ok(())
}

/// The label selector of the fleet's objects.
pub fn fleet_selector() -> String {
    format!("{FLEET_LABEL}=true")
}
