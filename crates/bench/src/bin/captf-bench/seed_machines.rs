//! Seeding the fleet's TerraformMachines up to date, by cloning one that the manager really
//! applied next to the template cluster (the template machine): for each, the CAPI Machine and
//! the bootstrap data Secret as CAPI and its bootstrap provider would leave them, the
//! TerraformMachine as the template is after its apply, and clones of the template machine's
//! Secrets and finished Jobs with the inputs hash of that clone.
//!
//! A machine's inputs are rendered only until it is provisioned (`status.initialization`), and
//! a clone has no status: the manager's first pass over it renders them, from its Machine, its
//! bootstrap data and its cluster's exports (read from the cluster's state, itself a clone of
//! the template cluster's), and compares their hash with the one the state records. The hash is
//! rendered here with the manager's own functions (`captf_controller::inputs::machine_inputs`,
//! `captf_controller::variables::merge`, `captf_contract::render`) from the objects as the API
//! server stored them; the template's own hash is rendered the same way first, as a check.
//!
//! The state is the template's, so its `provider_id` output is the template machine's: every
//! clone keeps the template's `spec.providerID`, which the manager checks against that output.

use std::collections::BTreeMap;

use anyhow::Context as _;
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_api::{TerraformMachine, annotations, labels};
use captf_contract::{Role, RoleInputs};
use captf_controller::capi;
use captf_controller::inputs::{Bootstrap, machine_inputs};
use captf_controller::reconcile::observe::state::{self, StateRead};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, PostParams};
use kube::{Resource, ResourceExt};

use crate::seed::{FLEET_LABEL, Owned};

/// The no-op machine module's image (written by `captf_e2e::write_images`).
pub const MACHINE_IMAGE: &str = "captf.local/modules/noop-machine:e2e";

/// The name of machine `j` of cluster `cluster` (the Machine, its TerraformMachine, and
/// `<name>-bootstrap` for its bootstrap data).
pub fn machine_name(cluster: &str, j: usize) -> String {
    format!("{cluster}-m{j}")
}

fn bootstrap_secret(machine: &str) -> String {
    format!("{machine}-bootstrap")
}

/// The template machine: a TerraformMachine the manager applied, and what it and its Machine
/// hold.
pub struct MachineTemplate {
    pub tm: TerraformMachine,
    /// Its own Secrets and the inputs hash its state records.
    pub own: Owned,
    /// The template cluster's name (the value of its `cluster.x-k8s.io/cluster-name` labels).
    pub cluster: String,
    /// The data of its bootstrap Secret.
    pub bootstrap: BTreeMap<String, ByteString>,
    /// The template cluster's `exports` output, from its state: a clone's cluster state is a
    /// clone of that one, so every machine clone renders these.
    pub exports: serde_json::Value,
}

/// Creates, as CAPI would for one Machine of the template cluster `cluster`: the Machine, the
/// bootstrap data its bootstrap provider would write, and the TerraformMachine it owns on the
/// no-op machine module (no identity: it runs with its cluster's).
pub async fn create_template(
    client: &kube::Client,
    ns: &str,
    cluster: &str,
    name: &str,
) -> anyhow::Result<()> {
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &captf_e2e::fixture::capi_cluster_resource(),
    );
    let cluster_uid = clusters
        .get(cluster)
        .await?
        .metadata
        .uid
        .context("Cluster uid")?;
    let data = BTreeMap::from([
        (
            "value".to_owned(),
            ByteString(captf_e2e::fixture::BOOTSTRAP_DATA.as_bytes().to_vec()),
        ),
        ("format".to_owned(), ByteString(b"cloud-config".to_vec())),
    ]);
    let machine = create_machine(client, ns, cluster, &cluster_uid, name, &data).await?;
    let tm: TerraformMachine = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "TerraformMachine",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {labels::CLUSTER_NAME: cluster},
            "ownerReferences": [machine_owner(&machine)?],
        },
        "spec": {"source": {"image": MACHINE_IMAGE}},
    }))?;
    let tms: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);
    tms.create(&PostParams::default(), &tm).await?;
    Ok(())
}

impl MachineTemplate {
    /// Reads what the manager left for machine `name` in `ns` (the manager must be stopped),
    /// and checks that its inputs hash renders here as the manager rendered it.
    pub async fn read(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<Self> {
        let tms: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);
        let tm = tms.get(name).await?;
        let uid = tm.uid().context("template machine uid")?;
        let cluster = tm
            .labels()
            .get(labels::CLUSTER_NAME)
            .cloned()
            .context("the template machine has no cluster-name label")?;
        let key = ObjectKey::new(ns, WorkloadKind::Machine, name)?;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        let all = secrets.list(&ListParams::default()).await?.items;
        let jobs = crate::seed_jobs::history_of(client, ns, &uid).await?;
        let own = Owned::find(key, &uid, &all, jobs)?;
        let bootstrap = all
            .iter()
            .find(|s| s.name_any() == bootstrap_secret(name))
            .and_then(|s| s.data.clone())
            .context("the template machine has no bootstrap Secret")?;
        let cluster_key = ObjectKey::new(ns, WorkloadKind::Cluster, &cluster)?;
        let gate = tokio::sync::Semaphore::new(1);
        let read = state::read_gated(client, &gate, &cluster_key).await?;
        let StateRead::Found(cluster_state, _) = read else {
            anyhow::bail!("the template cluster's state cannot be read");
        };
        let exports = cluster_state
            .outputs
            .get("exports")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}));
        let template = MachineTemplate {
            tm,
            own,
            cluster,
            bootstrap,
            exports,
        };
        let machine = read_machine(client, ns, name).await?;
        let rendered = template.render(&template.tm, &machine)?;
        anyhow::ensure!(
            rendered.inputs_hash == template.own.inputs_hash,
            "the template machine's inputs render to {} here, but its state records {}: the seeding would not be up to date",
            rendered.inputs_hash,
            template.own.inputs_hash
        );
        Ok(template)
    }

    /// The inputs of machine `tm` owned by `machine`, rendered as the manager renders them in a
    /// pass before the machine is provisioned.
    fn render(
        &self,
        tm: &TerraformMachine,
        machine: &capi::Machine,
    ) -> anyhow::Result<captf_contract::Rendered> {
        let ns = tm.namespace().unwrap_or_default();
        let bootstrap = Bootstrap {
            value: self
                .bootstrap
                .get("value")
                .map(|b| b.0.clone())
                .unwrap_or_default(),
            format: self
                .bootstrap
                .get("format")
                .map(|f| String::from_utf8_lossy(&f.0).into_owned()),
        };
        let variables =
            captf_controller::variables::merge(Role::Machine, &ns, &tm.spec.workspace, &[])
                .map_err(|gate| anyhow::anyhow!("variables: {gate:?}"))?
                .variables;
        let inputs = machine_inputs(tm, machine, &bootstrap, self.exports.clone());
        Ok(captf_contract::render(
            Role::Machine,
            &tm.spec.workspace.source.image,
            &RoleInputs::Machine(inputs),
            &variables,
        )?)
    }
}

/// A CAPI Machine `name` of cluster `cluster` (its owner, as CAPI sets it for a Machine of no
/// MachineSet), naming the bootstrap Secret it also creates with `bootstrap` (owned by the
/// Machine) and the TerraformMachine of the same name.
async fn create_machine(
    client: &kube::Client,
    ns: &str,
    cluster: &str,
    cluster_uid: &str,
    name: &str,
    bootstrap: &BTreeMap<String, ByteString>,
) -> anyhow::Result<DynamicObject> {
    let machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &captf_e2e::fixture::capi_machine_resource(),
    );
    let machine: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {labels::CLUSTER_NAME: cluster},
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": cluster, "uid": cluster_uid}],
        },
        "spec": {
            "clusterName": cluster,
            "bootstrap": {"dataSecretName": bootstrap_secret(name)},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformMachine", "name": name},
        },
    }))?;
    let machine = machines.create(&PostParams::default(), &machine).await?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(bootstrap_secret(name)),
            namespace: Some(ns.into()),
            labels: Some([(labels::CLUSTER_NAME.to_owned(), cluster.to_owned())].into()),
            owner_references: Some(vec![machine_owner(&machine)?]),
            ..Default::default()
        },
        data: Some(bootstrap.clone()),
        type_: Some("cluster.x-k8s.io/secret".into()),
        ..Default::default()
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets.create(&PostParams::default(), &secret).await?;
    Ok(machine)
}

fn machine_owner(machine: &DynamicObject) -> anyhow::Result<OwnerReference> {
    Ok(OwnerReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: "Machine".into(),
        name: machine.name_any(),
        uid: machine.uid().context("Machine uid")?,
        ..Default::default()
    })
}

async fn read_machine(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<capi::Machine> {
    let machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &captf_e2e::fixture::capi_machine_resource(),
    );
    Ok(serde_json::from_value(serde_json::to_value(
        machines.get(name).await?,
    )?)?)
}

/// Seeds machine `name` of the seeded cluster `cluster` (whose CAPI Cluster has `cluster_uid`)
/// as a clone of the template machine; returns the plain owner reference the namespace's
/// credential mirror lists for it.
pub async fn seed_machine(
    client: &kube::Client,
    template: &MachineTemplate,
    ns: &str,
    cluster: &str,
    cluster_uid: &str,
    name: &str,
) -> anyhow::Result<OwnerReference> {
    let machine =
        create_machine(client, ns, cluster, cluster_uid, name, &template.bootstrap).await?;

    // The TerraformMachine, as the template is after its apply: finalizer, spec.providerID
    // written back from the module's output, no status (the manager's first pass writes it).
    let t = &template.tm;
    let mut annotations_of = t.annotations().clone();
    annotations_of.remove(annotations::BLOCK_MOVE);
    annotations_of.remove("kubectl.kubernetes.io/last-applied-configuration");
    let mut labels_of = t.labels().clone();
    labels_of.insert(labels::CLUSTER_NAME.into(), cluster.into());
    labels_of.insert(FLEET_LABEL.into(), "true".into());
    let tm = TerraformMachine {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(labels_of),
            annotations: Some(annotations_of),
            finalizers: t.metadata.finalizers.clone(),
            owner_references: Some(vec![machine_owner(&machine)?]),
            ..Default::default()
        },
        spec: t.spec.clone(),
        status: None,
    };
    let tms: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);
    let tm = tms.create(&PostParams::default(), &tm).await?;
    let owner = tm
        .controller_owner_ref(&())
        .context("TerraformMachine without uid")?;

    // Its inputs, rendered as the manager renders them.
    let machine: capi::Machine = serde_json::from_value(serde_json::to_value(&machine)?)?;
    let rendered = template.render(&tm, &machine)?;
    let key = ObjectKey::new(ns, WorkloadKind::Machine, name)?;
    let renames = [(template.cluster.as_str(), cluster)];
    template
        .own
        .clone_for(client, &key, &owner, &rendered, &renames)
        .await?;
    Ok(OwnerReference {
        controller: None,
        block_owner_deletion: None,
        ..owner
    })
}
