//! `clusterctl move` of the demo's Cluster (a TerraformCluster, a MachineDeployment of two
//! TerraformMachines and a MachinePool, all Ready) from one management cluster to a fresh one
//! with CAPTF installed (docs/runbooks/move.md): the state, its backups and the durable inputs
//! arrive owned by the new objects, which are Ready again without an apply; the source side's
//! deletion destroys nothing. The identity's credentials and a `variablesFrom` source move
//! because they carry `clusterctl.cluster.x-k8s.io/move`.

use std::collections::BTreeMap;

use captf_api::{TerraformCluster, TerraformMachine, TerraformMachinePool};
use captf_e2e::fixture::{capi_machine_resource, ready};
use captf_e2e::install::{self, Installed, NAMESPACE};
use captf_e2e::{apply_yaml, demo, stand_in};
use captf_testenv::TestEnv;
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use tokio::sync::Mutex;

use crate::{installed, shared, target, wait};

/// `clusterctl move` takes every Secret labelled to move in the provider's namespace, whatever
/// the namespace moved: two moves at once would take each other's.
static MOVES: Mutex<()> = Mutex::const_new(());

const OP: &str = "captf.infrastructure.cluster.x-k8s.io/op";

/// The demo's Ready objects in `ns`: the cluster, the machines and the pool.
struct Provisioned {
    cluster: TerraformCluster,
    machines: Vec<TerraformMachine>,
    pool: TerraformMachinePool,
}

impl Provisioned {
    /// Each object's kind, name and UID: what the Secrets must be owned by.
    fn owners(&self) -> BTreeMap<(String, String), String> {
        let mut owners = BTreeMap::new();
        let mut add = |kind: &str, meta: &kube::api::ObjectMeta| {
            owners.insert(
                (kind.to_owned(), meta.name.clone().unwrap_or_default()),
                meta.uid.clone().unwrap_or_default(),
            );
        };
        add("TerraformCluster", &self.cluster.metadata);
        for m in &self.machines {
            add("TerraformMachine", &m.metadata);
        }
        add("TerraformMachinePool", &self.pool.metadata);
        owners
    }

    /// The providerIDs of the machines and the pool's members.
    fn provider_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .machines
            .iter()
            .filter_map(|m| m.spec.provider_id.clone())
            .collect();
        ids.extend(self.pool.spec.provider_id_list.iter().flatten().cloned());
        ids
    }
}

/// Waits until the demo's objects in `ns` on `env` are all Ready.
async fn provisioned(env: &TestEnv, client: &kube::Client, ns: &str) -> Provisioned {
    let clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    let machines: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);
    let pools: Api<TerraformMachinePool> = Api::namespaced(client.clone(), ns);
    let what = "the cluster, two machines and the pool Ready";
    let found = captf_testenv::wait_for(what, crate::LONG, || async {
        let Some(cluster) = clusters.get_opt(demo::CLUSTER).await?.filter(ready) else {
            return Ok(None);
        };
        let Some(pool) = pools.get_opt(demo::POOL).await?.filter(ready) else {
            return Ok(None);
        };
        let machines = machines.list(&ListParams::default()).await?.items;
        let all = machines.len() == demo::REPLICAS && machines.iter().all(ready);
        Ok(all.then_some(Provisioned {
            cluster,
            machines,
            pool,
        }))
    })
    .await;
    found.unwrap_or_else(|e| panic!("{e:#}\n{}\n{}", conditions(env, ns), crate::logs(env)))
}

/// Every CAPTF object's conditions in `ns`, for a failure.
fn conditions(env: &TestEnv, ns: &str) -> String {
    install::kubectl(
        env,
        &[
            "get",
            "terraformclusters,terraformmachines,terraformmachinepools",
            "-n",
            ns,
            "-o",
            r#"jsonpath={range .items[*]}{.kind}/{.metadata.name}:{range .status.conditions[*]} {.type}={.status}({.reason}: {.message}){end}{"\n"}{end}"#,
        ],
    )
    .unwrap_or_else(|e| format!("{e:#}"))
}

/// Waits until every Machine in `ns` has its `status.nodeRef`: what `clusterctl move` requires
/// before it moves anything.
async fn nodes_referenced(env: &TestEnv, client: &kube::Client, ns: &str) {
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &capi_machine_resource());
    wait(env, "every Machine's nodeRef", || async {
        let items = machines.list(&ListParams::default()).await?.items;
        let all = items.len() == demo::REPLICAS
            && items
                .iter()
                .all(|m| m.data["status"]["nodeRef"]["name"].is_string());
        Ok(all.then_some(()))
    })
    .await;
}

/// The Secrets CAPTF keeps for the objects in `ns`, by name: state, backups, durable inputs.
async fn kept_secrets(client: &kube::Client, ns: &str) -> BTreeMap<String, Secret> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("Secrets")
        .items
        .into_iter()
        .filter(|s| {
            let labels = s.labels();
            labels.contains_key("tfstate")
                || labels.contains_key("captf.io/state-backup")
                || s.name_any().starts_with("captf-inputs-")
        })
        .map(|s| (s.name_any(), s))
        .collect()
}

fn data(secret: &Secret) -> BTreeMap<String, ByteString> {
    secret.data.clone().unwrap_or_default()
}

/// The names of the Jobs that ran in `ns`, with their operation.
async fn jobs(client: &kube::Client, ns: &str) -> Vec<(String, String)> {
    Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("Jobs")
        .items
        .into_iter()
        .map(|j| {
            let op = j.labels().get(OP).cloned().unwrap_or_default();
            (j.name_any(), op)
        })
        .collect()
}

/// A namespace on `env` with the demo's objects Ready and their Machines linked to Nodes, on
/// an identity of its own whose credentials, like the TerraformCluster's `variablesFrom`
/// source, carry clusterctl's move label; `tweak` changes the demo's objects first.
async fn moving_scene(
    env: &TestEnv,
    client: &kube::Client,
    target_client: &kube::Client,
    prefix: &str,
    tweak: impl Fn(&mut serde_json::Value),
) -> (String, String, Provisioned) {
    let ns = env.namespace(client, prefix).await.expect("namespace");
    let identity = format!("move-{ns}");
    apply_yaml(
        client,
        &format!(
            r#"
apiVersion: v1
kind: Secret
metadata:
  name: {identity}
  namespace: {NAMESPACE}
  labels: {{clusterctl.cluster.x-k8s.io/move: ""}}
stringData: {{NOOP_TOKEN: not-a-real-credential}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformClusterIdentity
metadata: {{name: {identity}}}
spec:
  secretRef: {{name: {identity}, namespace: {NAMESPACE}}}
  allowedNamespaces: {{list: [{ns}]}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: knobs
  namespace: {ns}
  labels: {{captf.io/variables: "true", clusterctl.cluster.x-k8s.io/move: ""}}
data: {{health_message: moved with its cluster}}
"#
        ),
    )
    .await
    .expect("the identity and the variables");
    for c in [client, target_client] {
        stand_in::install(c).await.expect("stand-in kinds");
    }
    let mut objects = demo::cluster_in(&ns, &identity).expect("the demo's objects");
    for o in &mut objects {
        if o["kind"] == "TerraformCluster" {
            o["spec"]["variablesFrom"] = serde_json::json!([{"configMapRef": {"name": "knobs"}}]);
        }
        tweak(o);
    }
    let manifest = demo::yaml(&objects);
    wait(env, "the demo's objects applied", || async {
        Ok(apply_yaml(client, &manifest).await.ok())
    })
    .await;
    stand_in::initialize_control_plane(client, &ns, demo::CLUSTER, env)
        .await
        .expect("the control plane initialized");
    let provisioned = provisioned(env, client, &ns).await;
    stand_in::join_nodes(client, &provisioned.provider_ids())
        .await
        .expect("nodes");
    nodes_referenced(env, client, &ns).await;
    (ns, identity, provisioned)
}

/// `clusterctl move -n ns` from `env` to `target`.
fn clusterctl_move(env: &TestEnv, installed: &Installed, ns: &str, target: &TestEnv) -> String {
    let to = target.kubeconfig().display().to_string();
    install::clusterctl(env, installed, &["move", "-n", ns, "--to-kubeconfig", &to])
        .unwrap_or_else(|e| panic!("{e:#}\n{}", crate::logs(env)))
}

#[tokio::test]
async fn clusterctl_move_carries_the_state_and_runs_nothing_on_either_side() {
    let (env, client, installed) = installed().await;
    let _shared = shared(&client).await;
    let (target_env, target_client, _) = target().await;
    let _alone = MOVES.lock().await;
    let (ns, identity, before) = moving_scene(env, &client, &target_client, "move", |_| {}).await;
    let secrets_before = kept_secrets(&client, &ns).await;
    assert!(
        secrets_before.len() >= 8,
        "state, backups and inputs of four objects: {:?}",
        secrets_before.keys()
    );
    let jobs_before = jobs(&client, &ns).await;

    let moved = clusterctl_move(env, installed, &ns, target_env);
    // As they arrived: a pool's membership refresh on the target soon writes a newer state.
    let secrets_after = kept_secrets(&target_client, &ns).await;

    // The target: the stand-in control plane's provider reports it up again (status does not
    // move), and the objects come back Ready from their moved state.
    stand_in::initialize_control_plane(&target_client, &ns, demo::CLUSTER, env)
        .await
        .expect("the control plane initialized on the target");
    let after = provisioned(target_env, &target_client, &ns).await;
    nodes_referenced(target_env, &target_client, &ns).await;
    let target_jobs = jobs(&target_client, &ns).await;
    assert!(
        target_jobs.iter().all(|(_, op)| op != "apply"),
        "an apply ran on the target: {target_jobs:?}\n{moved}"
    );
    let owners = after.owners();
    assert_ne!(owners, before.owners(), "new objects, new UIDs");
    let secrets_now = kept_secrets(&target_client, &ns).await;
    for (name, secret) in &secrets_before {
        let moved = secrets_after
            .get(name)
            .unwrap_or_else(|| panic!("Secret {name} did not move: {:?}", secrets_after.keys()));
        assert_eq!(data(moved), data(secret), "Secret {name} changed");
        let now = secrets_now.get(name).unwrap_or(moved);
        let refs = now.owner_references();
        assert!(
            !refs.is_empty()
                && refs
                    .iter()
                    .all(|r| { owners.get(&(r.kind.clone(), r.name.clone())) == Some(&r.uid) }),
            "Secret {name} is owned by {refs:?}, not by the moved objects {owners:?}"
        );
    }
    for (kind, name) in owners.keys() {
        let object = match kind.as_str() {
            "TerraformCluster" => Api::<TerraformCluster>::namespaced(target_client.clone(), &ns)
                .get(name)
                .await
                .map(|o| o.meta().clone()),
            "TerraformMachine" => Api::<TerraformMachine>::namespaced(target_client.clone(), &ns)
                .get(name)
                .await
                .map(|o| o.meta().clone()),
            _ => Api::<TerraformMachinePool>::namespaced(target_client.clone(), &ns)
                .get(name)
                .await
                .map(|o| o.meta().clone()),
        }
        .expect("the moved object");
        assert!(
            object
                .annotations
                .iter()
                .flatten()
                .all(|(k, _)| k != BLOCK_MOVE),
            "{kind}/{name} still blocks a move"
        );
    }
    // What the labels moved: the credentials, out of the source's provider namespace, and the
    // variables source.
    Api::<Secret>::namespaced(target_client.clone(), NAMESPACE)
        .get(&identity)
        .await
        .expect("the identity's credentials moved");
    assert!(
        Api::<Secret>::namespaced(client.clone(), NAMESPACE)
            .get_opt(&identity)
            .await
            .expect("get")
            .is_none(),
        "clusterctl deletes what it moved from the source"
    );
    Api::<ConfigMap>::namespaced(target_client.clone(), &ns)
        .get("knobs")
        .await
        .expect("the variables source moved");

    // The source: the objects are gone and nothing was destroyed on the way.
    let source_clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait(env, "the source objects deleted", || async {
        Ok(source_clusters
            .list(&ListParams::default())
            .await?
            .items
            .is_empty()
            .then_some(()))
    })
    .await;
    let events = Api::<Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("events")
        .items;
    let destroys: Vec<String> = events
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some("Destroyed")
                || e.involved_object
                    .name
                    .as_deref()
                    .unwrap_or_default()
                    .contains("-destroy-")
        })
        .map(|e| format!("{:?}: {:?}", e.reason, e.message))
        .collect();
    assert!(destroys.is_empty(), "a destroy on the source: {destroys:?}");
    let jobs_after: Vec<_> = jobs(&client, &ns)
        .await
        .into_iter()
        .filter(|j| !jobs_before.contains(j))
        .collect();
    assert!(jobs_after.is_empty(), "Jobs on the source: {jobs_after:?}");
}

/// A pool held at a destructive change of its cluster's exports (docs/pools.md) keeps holding
/// it on the target: the pending change and the record of the applied exports move with the
/// durable inputs, so the pool renders its held exports there too and nothing is replaced; the
/// blocked plan is not run again, and the change still waits for its approval.
#[tokio::test]
async fn a_pool_holding_a_blocked_exports_change_still_holds_it_after_the_move() {
    let (env, client, installed) = installed().await;
    let _shared = shared(&client).await;
    let (target_env, target_client, _) = target().await;
    let _alone = MOVES.lock().await;
    let (ns, _, before) = moving_scene(env, &client, &target_client, "move-held", |o| {
        if o["kind"] == "TerraformMachinePool" {
            o["spec"]["variables"] = serde_json::json!({"replace_on_exports": true});
        }
    })
    .await;
    let inputs = |c: &kube::Client| {
        let secrets: Api<Secret> = Api::namespaced(c.clone(), &ns);
        async move {
            secrets
                .get(&format!("captf-inputs-mp-{}", demo::POOL))
                .await
                .expect("the pool's durable inputs")
        }
    };
    wait(env, "the applied exports recorded", || async {
        Ok(inputs(&client)
            .await
            .annotations()
            .get(APPLIED_EXPORTS)
            .map(|_| ()))
    })
    .await;
    // The cluster's exports change in a way that would replace the pool's instances.
    let clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    clusters
        .patch(
            demo::CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"spec": {"variables": {"extra_exports": {"tier": "gold"}}}}),
            ),
        )
        .await
        .expect("change the exports");
    let pools: Api<TerraformMachinePool> = Api::namespaced(client.clone(), &ns);
    wait(env, "the change held, nothing running", || async {
        let pool = pools.get(demo::POOL).await?;
        let settled = !pool.annotations().contains_key(BLOCK_MOVE)
            && !clusters
                .get(demo::CLUSTER)
                .await?
                .annotations()
                .contains_key(BLOCK_MOVE);
        Ok((held(&pool) && settled).then_some(()))
    })
    .await;
    let recorded = inputs(&client).await;
    let applied = recorded.annotations().get(APPLIED_EXPORTS).cloned();
    let pending = recorded.annotations().get(PENDING_EXPORTS).cloned();
    assert!(
        pending.is_some(),
        "a pending change: {:?}",
        recorded.annotations()
    );

    let moved = clusterctl_move(env, installed, &ns, target_env);
    stand_in::initialize_control_plane(&target_client, &ns, demo::CLUSTER, env)
        .await
        .expect("the control plane initialized on the target");
    let target_pools: Api<TerraformMachinePool> = Api::namespaced(target_client.clone(), &ns);
    let pool = wait(target_env, "the change held on the target", || async {
        let pool = target_pools.get(demo::POOL).await?;
        let settled = !pool.annotations().contains_key(BLOCK_MOVE);
        Ok((held(&pool) && settled).then_some(pool))
    })
    .await;
    assert_eq!(
        pool.spec.provider_id_list, before.pool.spec.provider_id_list,
        "the members were not replaced"
    );
    let now = inputs(&target_client).await;
    assert_eq!(now.annotations().get(APPLIED_EXPORTS).cloned(), applied);
    assert_eq!(now.annotations().get(PENDING_EXPORTS).cloned(), pending);
    let target_jobs = jobs(&target_client, &ns).await;
    assert!(
        target_jobs.iter().all(|(_, op)| op != "apply"),
        "the blocked plan ran again: {target_jobs:?}\n{moved}\n{}",
        conditions(target_env, &ns)
    );
}

const APPLIED_EXPORTS: &str = "captf.io/applied-cluster-outputs-hash";
const PENDING_EXPORTS: &str = "captf.io/pending-cluster-outputs";
const BLOCK_MOVE: &str = "clusterctl.cluster.x-k8s.io/block-move";

/// The pool reports its exports change blocked and held.
fn held(pool: &TerraformMachinePool) -> bool {
    captf_e2e::fixture::condition(pool, "ApplyJobSucceeded").is_some_and(|(s, r, m)| {
        s == "False" && r == "DestructivePlanBlocked" && m.contains("the change is held")
    })
}
