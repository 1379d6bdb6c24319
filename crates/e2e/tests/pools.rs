//! TerraformMachinePool through the real control plane, with a MachinePool made by hand as
//! CAPI would make it: the pool applies its MachinePool's replicas and reports its members,
//! re-applies when the replicas or the cluster's exports change (the latter guarded), writes
//! the module's count back while the autoscaler's annotations are set, and is destroyed on
//! delete.

use captf_api::{TerraformCluster, TerraformMachinePool};
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};

const POOL_IMAGE: &str = "captf.local/modules/noop-machinepool:e2e";

fn members(pool: &TerraformMachinePool) -> usize {
    pool.spec.provider_id_list.as_ref().map_or(0, Vec::len)
}

fn replicas(pool: &TerraformMachinePool) -> Option<i32> {
    pool.status.as_ref().and_then(|s| s.replicas)
}

#[tokio::test]
async fn a_pool_follows_its_machinepool_and_the_cluster_exports() {
    let (scene, cluster) = ready_cluster("pool").await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    let name = "workers";
    write_bootstrap(client, ns, name).await;
    create_machine_pool(client, ns, &cluster, name, POOL_IMAGE, 2, "").await;
    let api: Api<TerraformMachinePool> = Api::namespaced(client.clone(), ns);
    let pool = wait_until(
        &api,
        name,
        "the pool Ready with two members",
        manager,
        |p| ready(p) && members(p) == 2,
    )
    .await;
    let status = pool.status.clone().expect("status");
    assert_eq!(status.replicas, Some(2));
    assert_eq!(
        status.ready,
        Some(true),
        "status.ready is what CAPI's MachinePool reads"
    );
    assert_eq!(
        status.workspace.initialization.and_then(|i| i.provisioned),
        Some(true)
    );
    assert_eq!(
        pool.spec.provider_id_list,
        Some(vec![
            format!("noop:///{ns}/{name}/0"),
            format!("noop:///{ns}/{name}/1")
        ])
    );
    assert_eq!(status.instances.map(|i| i.len()), Some(2));
    assert!(has(
        &pool,
        "AutoscalingActive",
        "False",
        "AutoscalingDisabled"
    ));

    // Fixed mode: the MachinePool's replicas are applied.
    let machine_pools: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &capi_machine_pool_resource());
    machine_pools
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("scale the MachinePool");
    wait_until(&api, name, "three members", manager, |p| {
        members(p) == 3 && replicas(p) == Some(3)
    })
    .await;

    // A change of the cluster's exports re-applies the pool, guarded against deletes (this
    // one only updates the group in place, so the guard lets it through).
    let clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    merge_patch(
        &clusters,
        &cluster,
        serde_json::json!({"spec": {"variables": {"extra_exports": {"tier": "gold"}}}}),
    )
    .await;
    let prefix = format!("captf-mp-{name}-apply-");
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), ns);
    let guarded = wait_for(
        "a guarded pool apply for the new exports",
        TIMEOUT,
        || async {
            let list = jobs.list(&Default::default()).await?.items;
            Ok(list.into_iter().find(|j| {
                j.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(&prefix))
                    && j.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key("captf.io/approval-hash"))
            }))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    assert!(
        guarded
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("captf.io/cluster-outputs-hash")
    );
    wait_until(&api, name, "Ready after the exports change", manager, |p| {
        ready(p) && has(p, "ApplyJobSucceeded", "True", "ApplySucceeded")
    })
    .await;

    // Autoscaling: the module's count is written back to the MachinePool.
    machine_pools
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"metadata": {"annotations": {
                "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "1",
                "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "5",
            }}})),
        )
        .await
        .expect("annotate the MachinePool");
    // The cloud scales the group out of band; the module reports four members.
    merge_patch_pool(
        &api,
        name,
        serde_json::json!({"spec": {"variables": {"observed_replicas": 4}}}),
    )
    .await;
    wait_until(
        &api,
        name,
        "AutoscalingActive with four members",
        manager,
        |p| {
            has(p, "AutoscalingActive", "True", "ReplicasManagedByModule") && replicas(p) == Some(4)
        },
    )
    .await;
    wait_for(
        "MachinePool spec.replicas written back",
        TIMEOUT,
        || async {
            let mp = machine_pools.get(name).await?;
            let claimed = mp
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("cluster.x-k8s.io/replicas-managed-by"))
                .is_some_and(|v| v == "captf");
            Ok((claimed && mp.data["spec"]["replicas"] == 4).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));

    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete the TerraformMachinePool");
    wait_for("the TerraformMachinePool gone", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let metrics = captf_e2e::Manager::get(&manager.metrics).expect("metrics");
    let destroyed =
        "captf_jobs_total{kind=\"TerraformMachinePool\",op=\"destroy\",result=\"succeeded\"}";
    assert_eq!(
        sample(&metrics, destroyed),
        Some(1.0),
        "destroyed:\n{metrics}"
    );
}

async fn merge_patch_pool(api: &Api<TerraformMachinePool>, name: &str, patch: serde_json::Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch the TerraformMachinePool");
}

/// A pool's apply Job deleted while it runs is noticed as for a cluster: recorded on the
/// durable inputs and run again under a new name, marked as following the lost one.
#[tokio::test]
async fn a_pool_apply_deleted_mid_run_runs_again() {
    let (scene, cluster) = ready_cluster("pool-lost").await;
    let Scene {
        client,
        ns,
        manager,
        ..
    } = &scene;
    let name = "slow";
    write_bootstrap(client, ns, name).await;
    create_machine_pool(
        client,
        ns,
        &cluster,
        name,
        POOL_IMAGE,
        1,
        "  variables: {sleep_seconds: 120}",
    )
    .await;
    let api: Api<TerraformMachinePool> = Api::namespaced(client.clone(), ns);
    delete_apply_mid_run(&api, client, name, manager, |p| {
        p.status.as_ref().map(|s| &s.workspace)
    })
    .await;
    event(client, ns, "JobFailed").await;
}
