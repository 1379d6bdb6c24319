//! A tenant at the limits of `spec.variables`: twenty TerraformClusters whose variables sit just
//! under every limit (bytes, depth, values), rewritten by twenty clients at once. The manager
//! keeps them at a small cost and never restarts; an object at the limits renders and applies,
//! and a change of it made during the storm applies too; one over them (stored here, where no
//! webhook runs) is held with `VariablesInvalid` naming the limit; and a cluster of another
//! namespace, served by its own manager on the same control plane, keeps applying its changes.

use std::time::Duration;

use captf_api::TerraformCluster;
use captf_contract::bounds::{SPEC_VARIABLES, measure_variables};
use captf_e2e::fixture::*;
use captf_e2e::workspace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Objects rewritten, and as many clients rewriting them.
const TENANT_OBJECTS: usize = 20;
/// Rewrites per client.
const ROUNDS: usize = 5;
/// The whole storm, bounded.
const STORM: Duration = Duration::from_secs(300);

/// The memory limit of the shipped Deployment (`config/manager/manager.yaml`), in bytes.
fn shipped_memory_limit() -> u64 {
    let manifest = std::fs::read_to_string(workspace().join("config/manager/manager.yaml"))
        .expect("manager.yaml");
    let limits = manifest.split("limits:").nth(1).expect("resource limits");
    let mib = limits
        .lines()
        .find_map(|l| l.trim().strip_prefix("memory:"))
        .and_then(|m| m.trim().strip_suffix("Mi"))
        .and_then(|m| m.parse::<u64>().ok())
        .expect("a memory limit in Mi");
    mib << 20
}

/// `depth` arrays around a number.
fn nested(depth: usize) -> Value {
    (0..depth).fold(json!(0), |inner, _| json!([inner]))
}

/// Variables just under every limit of `spec.variables`, all in `extra_exports` (which the
/// no-op module takes as `any` and passes to its outputs): nested one short of the deepest,
/// one value short of the most, a hundred bytes short of the largest. `round` tells one
/// rewrite from the next.
fn at_the_limits(round: u64) -> Value {
    let limits = SPEC_VARIABLES;
    // The variables object, `extra_exports` and `deep`'s arrays: one level short.
    let deep = nested(limits.depth - 3);
    // Everything but `wide`'s members: extra_exports, deep (its arrays and number), wide
    // itself and round.
    let fixed = 1 + (limits.depth - 2) + 1 + 1;
    let members = limits.values - 1 - fixed;
    let build = |pad: usize| {
        let wide: serde_json::Map<String, Value> = (0..members)
            .map(|i| {
                let filler = if i == 0 { pad } else { 12 };
                (format!("k{i:04}"), json!("x".repeat(filler)))
            })
            .collect();
        json!({"extra_exports": {"deep": deep, "wide": wide, "round": round}})
    };
    let size = |v: &Value| measure_variables(v.as_object().expect("object"), &limits);
    let base = size(&build(12));
    let target = limits.bytes - 100;
    let variables = build(12 + target - base.bytes);
    let measured = size(&variables);
    assert_eq!(
        (measured.depth, measured.values),
        (limits.depth - 1, limits.values - 1),
        "{measured:?}"
    );
    assert!(
        (target..limits.bytes).contains(&measured.bytes),
        "{measured:?}"
    );
    assert!(limits.exceeded(&measured).is_empty());
    variables
}

/// A TerraformCluster without a CAPI owner: the manager keeps it and its passes wait for the
/// owner, so it runs no Job.
fn ownerless(ns: &str, name: &str, variables: Value) -> TerraformCluster {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "TerraformCluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "source": {"image": CLUSTER_IMAGE},
            "identityRef": {"name": format!("noop-{ns}")},
            "variables": variables
        }
    }))
    .expect("TerraformCluster")
}

fn last_job(tc: &TerraformCluster) -> Option<String> {
    tc.status
        .as_ref()?
        .workspace
        .last_run
        .as_ref()
        .map(|r| r.job.clone())
}

#[tokio::test]
async fn variables_at_their_limits_from_twenty_clients_cost_the_manager_little() {
    let s = scene("bounds", &[]).await;
    let other = scene("bounds-other", &[]).await;
    let api: Api<TerraformCluster> = Api::namespaced(s.client.clone(), &s.ns);
    let other_api: Api<TerraformCluster> = Api::namespaced(other.client.clone(), &other.ns);

    // In the tenant's namespace: one object at the limits that applies, one over them.
    let spec = |v: &Value| format!("  variables: {v}");
    create_cluster(
        &s.client,
        &s.ns,
        "at-limits",
        CLUSTER_IMAGE,
        &spec(&at_the_limits(0)),
    )
    .await;
    // extra_exports, the array and its numbers: one value over.
    let over = json!({"extra_exports": {"values": vec![0; SPEC_VARIABLES.values - 1]}});
    create_cluster(&s.client, &s.ns, "over", CLUSTER_IMAGE, &spec(&over)).await;
    for i in 0..TENANT_OBJECTS {
        api.create(
            &PostParams::default(),
            &ownerless(&s.ns, &format!("tenant-{i}"), at_the_limits(0)),
        )
        .await
        .expect("tenant object");
    }
    create_cluster(&other.client, &other.ns, "other", CLUSTER_IMAGE, "").await;

    let held = wait_until(&api, "over", "VariablesInvalid", &s.manager, |t| {
        has(t, "DependenciesReady", "False", "VariablesInvalid")
    })
    .await;
    let (_, _, message) = condition(&held, "DependenciesReady").expect("condition");
    assert!(
        message.contains("spec.variables: 10001 values, at most 10000; move large values to a ConfigMap or Secret named in spec.variablesFrom"),
        "{message}"
    );
    let at_limits = wait_until(&api, "at-limits", "Ready at the limits", &s.manager, ready).await;
    let other_ready = wait_until(&other_api, "other", "Ready", &other.manager, ready).await;

    // Twenty clients at once, each rewriting the tenant's objects in turn.
    let storm = tokio::spawn({
        let api = api.clone();
        futures::future::join_all((0..TENANT_OBJECTS).map(move |client| {
            let api = api.clone();
            async move {
                for round in 0..ROUNDS {
                    let name = format!("tenant-{}", (client + round) % TENANT_OBJECTS);
                    let variables = at_the_limits((client * ROUNDS + round + 1) as u64);
                    api.patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"variables": variables}})),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("rewrite {name}: {e}"));
                }
            }
        }))
    });
    // Meanwhile the object at the limits, and a cluster of another namespace (its own
    // manager, the same control plane), take a change each.
    merge_patch(
        &api,
        "at-limits",
        json!({"spec": {"variables": at_the_limits(1_000)}}),
    )
    .await;
    merge_patch(
        &other_api,
        "other",
        json!({"spec": {"variables": {"extra_exports": {"token": "two"}}}}),
    )
    .await;
    tokio::time::timeout(STORM, storm)
        .await
        .expect("the rewrites end within their time")
        .expect("every rewrite went through");
    let before = last_job(&at_limits);
    wait_until(&api, "at-limits", "its change applied", &s.manager, |t| {
        ready(t) && last_job(t).is_some_and(|j| Some(j) != before)
    })
    .await;
    let before = last_job(&other_ready);
    wait_until(
        &other_api,
        "other",
        "its change applied",
        &other.manager,
        |t| {
            ready(t) && last_job(t).is_some_and(|j| Some(j) != before) && exports(t).contains("two")
        },
    )
    .await;

    let mut manager = s.manager;
    assert!(manager.running(), "the manager is up:\n{}", manager.log());
    assert!(
        !manager.whole_log().contains("panicked"),
        "the manager panicked:\n{}",
        manager.log()
    );
    let peak = manager.peak_resident_bytes().expect("VmHWM");
    let limit = shipped_memory_limit();
    println!(
        "manager peak resident set: {} MiB (shipped limit {} MiB)",
        peak >> 20,
        limit >> 20
    );
    assert!(peak < limit / 2, "the manager peaked at {} MiB", peak >> 20);
}

#[test]
fn the_variables_sit_just_under_every_limit() {
    // `at_the_limits` checks itself; the over-limit object is one value over.
    for round in [0, 1_000, u64::MAX] {
        at_the_limits(round);
    }
}
