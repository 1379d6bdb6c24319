//! A destroy runs the module the apply ran: the digest the kubelet reported for the apply's pod
//! is pinned on the durable inputs (`DigestPinned`), and once the tag names another module, the
//! destroy still runs the pinned digest, pulled again from the registry.

use captf_api::TerraformCluster;
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_e2e::fixture::*;
use captf_e2e::registry::TestRegistry;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams};

/// The no-op cluster module, told apart by its version label.
fn noop_cluster(version: &str) -> captf_testenv::oci::Image {
    let module = captf_e2e::workspace().join("modules/noop/cluster");
    captf_e2e::registry::module_image("cluster", &module, version).expect("module image")
}

#[tokio::test]
async fn a_destroy_runs_the_digest_the_apply_ran_after_its_tag_moved() {
    let Scene {
        env,
        client,
        ns,
        manager,
    } = scene("pinning", &[]).await;
    let registry = TestRegistry::start_for_node(&env, &ns)
        .await
        .expect("registry");
    let tag = format!("{}/modules/pinned:v1", registry.host);
    let first = registry
        .push_image("modules/pinned:v1", &noop_cluster("one"))
        .expect("push");
    registry
        .pull_secret(&client, &ns)
        .await
        .expect("pull Secret");
    let name = "pinned";
    create_cluster(
        &client,
        &ns,
        name,
        &tag,
        "  jobs: {imagePullSecrets: [{name: registry}]}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait_until(&api, name, "Ready", &manager, ready).await;

    // The apply ran the tag; what it resolved to is pinned where a lost status cannot take it.
    let key = ObjectKey::new(&ns, WorkloadKind::Cluster, name).expect("key");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let durable = secrets
        .get(&key.durable_inputs_secret())
        .await
        .expect("durable inputs");
    let annotations = durable.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("captf.io/image-digest"),
        Some(&first),
        "{annotations:?}"
    );
    assert_eq!(annotations.get("captf.io/image"), Some(&tag));
    let pinned = event(&client, &ns, "DigestPinned").await;
    let note = pinned.note.unwrap_or_default();
    assert!(note.contains(&first), "{note}");

    // The tag moves to another module, and the kubelet would pull it again for the spec's
    // reference: only the pin keeps the destroy on the module that made the resources.
    let second = registry
        .push_image("modules/pinned:v1", &noop_cluster("two"))
        .expect("push again");
    assert_ne!(first, second, "the two modules differ");
    let always = serde_json::json!({"spec": {"source": {"imagePullPolicy": "Always"}}});
    merge_patch(&api, name, always).await;
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_for_job(&client, &ns, "-destroy-", &manager).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let destroy = jobs
        .list(&ListParams::default())
        .await
        .expect("Jobs")
        .items
        .into_iter()
        .find(|j| {
            j.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.contains("-destroy-"))
        })
        .expect("the destroy Job");
    let pod = destroy
        .spec
        .and_then(|s| s.template.spec)
        .expect("pod spec");
    let source = pod
        .containers
        .iter()
        .find(|c| c.name == "source")
        .expect("source container");
    assert_eq!(source.image.as_deref(), Some(first.as_str()));
    assert_eq!(source.image_pull_policy.as_deref(), Some("Always"));

    // It ran: the pinned manifest was pulled by digest and the object is gone.
    captf_testenv::wait_for("the cluster to be destroyed", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    let unknown = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("DigestUnknown"))
        .count();
    assert_eq!(unknown, 0, "every Job ran a known image");
}
