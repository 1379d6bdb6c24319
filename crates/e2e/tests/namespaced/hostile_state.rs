//! A tenant, or a module, doing its worst to the state reader: Secrets planted under a state's
//! labels and a state with a huge output. Each object concerned reads `StateCorrupt` naming the
//! limit it hit, the manager stays up well under its shipped memory limit, and the other
//! objects keep reconciling.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};

/// What the shipped Deployment allows the manager (`config/manager`).
const SHIPPED_MEMORY_LIMIT: u64 = 512 * 1024 * 1024;

/// 0.7 MB that does not compress: what a Secret holds as it is, in etcd and in a list.
fn noise(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..700_000)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect()
}

fn suffix(tc: &TerraformCluster) -> String {
    tc.status
        .as_ref()
        .and_then(|s| s.workspace.state_secret_suffix.clone())
        .expect("suffix")
}

fn corrupt_saying(tc: &TerraformCluster, says: &str) -> bool {
    has(tc, "StateReadable", "False", "StateCorrupt")
        && condition(tc, "StateReadable").is_some_and(|(_, _, m)| m.contains(says))
}

#[tokio::test]
async fn planted_secrets_and_a_huge_output_are_refused_by_their_limits() {
    let s = scene("hostile", &[]).await;
    let api: Api<TerraformCluster> = Api::namespaced(s.client.clone(), &s.ns);
    for name in ["planted", "huge", "bystander"] {
        create_cluster(&s.client, &s.ns, name, CLUSTER_IMAGE, "").await;
    }
    let mut ready_ones = Vec::new();
    for name in ["planted", "huge", "bystander"] {
        ready_ones.push(wait_until(&api, name, "Ready", &s.manager, ready).await);
    }
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.ns);

    // Forty Secrets of 0.7 MB under the first object's state labels, as a tenant may create.
    let base = secrets
        .get(&format!("tfstate-default-{}", suffix(&ready_ones[0])))
        .await
        .expect("base Secret");
    for i in 0..40u64 {
        let planted = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("planted-{i}")),
                labels: base.metadata.labels.clone(),
                ..Default::default()
            },
            data: Some([("tfstate".to_owned(), ByteString(noise(i)))].into()),
            ..Default::default()
        };
        secrets
            .create(&PostParams::default(), &planted)
            .await
            .expect("planted Secret");
    }

    // The second object's state gains a 2 MiB output, as a module may write one.
    let name = format!("tfstate-default-{}", suffix(&ready_ones[1]));
    let mut doc = state_document(&secrets.get(&name).await.expect("base Secret"));
    doc["outputs"]["blob"] = serde_json::json!({"value": "x".repeat(2 << 20), "type": "string"});
    let data = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, gzip_state(&doc));
    secrets
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"data": {"tfstate": data}})),
        )
        .await
        .expect("huge output");

    // A pass of each: a change of their inputs.
    for name in ["planted", "huge", "bystander"] {
        merge_patch(
            &api,
            name,
            serde_json::json!({"spec": {"variables": {"extra_exports": {"token": "two"}}}}),
        )
        .await;
    }
    wait_until(
        &api,
        "planted",
        "StateCorrupt over the chunk cap",
        &s.manager,
        |t| corrupt_saying(t, "more than 32 Secrets carry the state's labels"),
    )
    .await;
    wait_until(
        &api,
        "huge",
        "StateCorrupt over the output limit",
        &s.manager,
        |t| {
            corrupt_saying(
                t,
                "output \"blob\" is 2097154 bytes of JSON; the limit is 1048576 bytes per output",
            )
        },
    )
    .await;
    // The bystander applies its change: nothing above held it up.
    let before = ready_ones[2]
        .status
        .as_ref()
        .and_then(|s| s.workspace.last_run.as_ref())
        .map(|r| r.job.clone());
    wait_until(&api, "bystander", "its change applied", &s.manager, |t| {
        let job = t
            .status
            .as_ref()
            .and_then(|s| s.workspace.last_run.as_ref())
            .map(|r| r.job.clone());
        ready(t) && job.is_some() && job != before && exports(t).contains("two")
    })
    .await;
    let mut manager = s.manager;
    assert!(manager.running(), "the manager is up:\n{}", manager.log());
    let peak = manager.peak_resident_bytes().expect("VmHWM");
    println!("manager peak resident set: {} MiB", peak >> 20);
    assert!(
        peak < SHIPPED_MEMORY_LIMIT / 2,
        "the manager peaked at {} MiB",
        peak >> 20
    );
}
