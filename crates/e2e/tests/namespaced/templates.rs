//! TerraformMachineTemplate capacity for autoscaler scale-from-zero, read from the module
//! image's labels in a real registry (distribution's, with htpasswd authentication) through
//! the template's image pull Secrets; `spec.capacity` replacing the image's; labels that are
//! missing or malformed; a missing pull Secret, retried until it exists.

use captf_api::TerraformMachineTemplate;
use captf_e2e::Manager;
use captf_e2e::fixture::*;
use captf_e2e::registry::TestRegistry;
use captf_testenv::wait_for;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};

const CAPACITY: &str = "io.captf.capacity";
const NODE_INFO: &str = "io.captf.node-info";

async fn create_template(
    api: &Api<TerraformMachineTemplate>,
    name: &str,
    image: &str,
    pull_secret: Option<&str>,
    capacity: Option<serde_json::Value>,
) {
    let mut spec = serde_json::json!({"source": {"image": image}});
    if let Some(secret) = pull_secret {
        spec["jobs"] = serde_json::json!({"imagePullSecrets": [{"name": secret}]});
    }
    let mut object = serde_json::json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "TerraformMachineTemplate",
        "metadata": {"name": name},
        "spec": {"template": {"spec": spec}},
    });
    if let Some(capacity) = capacity {
        object["spec"]["capacity"] = capacity;
    }
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).expect("template"),
    )
    .await
    .expect("create the TerraformMachineTemplate");
}

fn capacity_of(t: &TerraformMachineTemplate) -> serde_json::Value {
    serde_json::to_value(t.status.as_ref().map(|s| &s.capacity)).expect("json")
}

fn node_info_of(t: &TerraformMachineTemplate) -> serde_json::Value {
    serde_json::to_value(t.status.as_ref().map(|s| &s.node_info)).expect("json")
}

fn source_of(t: &TerraformMachineTemplate) -> serde_json::Value {
    serde_json::to_value(t.status.as_ref().map(|s| &s.capacity_source)).expect("json")
}

#[tokio::test]
async fn machine_template_capacity_comes_from_the_image() {
    let Scene {
        env,
        client,
        ns,
        manager,
    } = scene("templates", &[]).await;
    let registry = TestRegistry::start(&env, &ns).await.expect("registry");
    let push = |tag: &str, labels: &[(&str, &str)]| {
        registry
            .push(&format!("modules/machine:{tag}"), labels)
            .unwrap_or_else(|e| panic!("push {tag}: {e}"))
    };
    let role = ("io.captf.role", "machine");
    let labelled = push(
        "labelled",
        &[
            role,
            (CAPACITY, r#"{"cpu":"4","memory":"16Gi"}"#),
            (
                NODE_INFO,
                r#"{"architecture":"arm64","operatingSystem":"linux"}"#,
            ),
        ],
    );
    let plain = push("plain", &[role]);
    let broken = push("broken", &[role, (CAPACITY, r#"{"cpu":4}"#)]);

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let pull_secret = |name: &str| -> Secret {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": registry.docker_config()},
        }))
        .expect("Secret")
    };
    secrets
        .create(&PostParams::default(), &pull_secret("registry"))
        .await
        .expect("pull Secret");

    let api: Api<TerraformMachineTemplate> = Api::namespaced(client.clone(), &ns);
    let pull = Some("registry");
    create_template(&api, "labelled", &labelled, pull, None).await;
    create_template(&api, "anonymous", &labelled, None, None).await;
    create_template(&api, "plain", &plain, pull, None).await;
    create_template(&api, "broken", &broken, pull, None).await;
    create_template(
        &api,
        "overridden",
        &labelled,
        pull,
        Some(serde_json::json!({"cpu": "8"})),
    )
    .await;
    create_template(&api, "late", &labelled, Some("late"), None).await;
    let resolved = |reason: &'static str| {
        move |t: &TerraformMachineTemplate| has(t, "CapacityResolved", "True", reason)
    };
    let failed = |reason: &'static str| {
        move |t: &TerraformMachineTemplate| has(t, "CapacityResolved", "False", reason)
    };

    // Both labels, read with the pull Secret.
    let t = wait_until(
        &api,
        "labelled",
        "capacity from the image",
        &manager,
        resolved("CapacityResolved"),
    )
    .await;
    assert_eq!(
        capacity_of(&t),
        serde_json::json!({"cpu": "4", "memory": "16Gi"})
    );
    assert_eq!(
        node_info_of(&t),
        serde_json::json!({"architecture": "arm64", "operatingSystem": "linux"})
    );
    assert_eq!(
        source_of(&t),
        serde_json::json!({"source": "Image", "image": labelled})
    );

    // The registry wants credentials: without a pull Secret the read fails, and says so.
    let t = wait_until(
        &api,
        "anonymous",
        "ImageInspectFailed",
        &manager,
        failed("ImageInspectFailed"),
    )
    .await;
    let message = condition(&t, "CapacityResolved").expect("condition").2;
    assert!(
        message.contains("401") && message.contains("no pull Secret"),
        "{message}"
    );
    assert_eq!(capacity_of(&t), serde_json::Value::Null);

    // Neither label: resolved, with nothing to report.
    let t = wait_until(
        &api,
        "plain",
        "CapacityNotDeclared",
        &manager,
        resolved("CapacityNotDeclared"),
    )
    .await;
    assert_eq!(capacity_of(&t), serde_json::Value::Null);
    assert_eq!(
        source_of(&t),
        serde_json::json!({"image": plain}),
        "the image was read, nothing came from it"
    );

    // A malformed label names itself and the fix.
    let t = wait_until(
        &api,
        "broken",
        "CapacityLabelInvalid",
        &manager,
        failed("CapacityLabelInvalid"),
    )
    .await;
    let message = condition(&t, "CapacityResolved").expect("condition").2;
    assert!(
        message.contains("io.captf.capacity") && message.contains("quantity string"),
        "{message}"
    );

    // spec.capacity replaces the image's as a whole; node facts still come from the image.
    let t = wait_until(
        &api,
        "overridden",
        "capacity from the spec",
        &manager,
        resolved("CapacityResolved"),
    )
    .await;
    assert_eq!(capacity_of(&t), serde_json::json!({"cpu": "8"}));
    assert_eq!(
        source_of(&t),
        serde_json::json!({"source": "Spec", "image": labelled})
    );
    assert_eq!(node_info_of(&t)["architecture"], "arm64");
    // Removing it brings the image's back (spec.capacity is mutable).
    api.patch(
        "overridden",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"spec": {"capacity": null}})),
    )
    .await
    .expect("remove spec.capacity");
    let t = wait_until(
        &api,
        "overridden",
        "the image's capacity again",
        &manager,
        |t| source_of(t)["source"] == "Image",
    )
    .await;
    assert_eq!(
        capacity_of(&t),
        serde_json::json!({"cpu": "4", "memory": "16Gi"})
    );

    // A pull Secret that does not exist yet: named, then read once it exists (a failed read
    // is retried every minute).
    let t = wait_until(
        &api,
        "late",
        "the missing pull Secret named",
        &manager,
        failed("ImageInspectFailed"),
    )
    .await;
    let message = condition(&t, "CapacityResolved").expect("condition").2;
    assert!(message.contains(&format!("{ns}/late")), "{message}");
    secrets
        .create(&PostParams::default(), &pull_secret("late"))
        .await
        .expect("the late pull Secret");
    wait_until(
        &api,
        "late",
        "resolved on the retry",
        &manager,
        resolved("CapacityResolved"),
    )
    .await;

    // Counted and announced.
    let metrics = Manager::get(&manager.metrics).expect("metrics");
    for reason in ["ImageInspectFailed", "CapacityLabelInvalid"] {
        let series = format!(
            "captf_image_inspect_errors_total{{kind=\"TerraformMachineTemplate\",reason=\"{reason}\"}}"
        );
        assert!(
            sample(&metrics, &series).is_some_and(|v| v >= 1.0),
            "{series}:\n{metrics}"
        );
    }
    event(&client, &ns, "CapacityResolved").await;
    event(&client, &ns, "ImageInspectFailed").await;

    // At rest: no further writes (the resourceVersion stays).
    let before = api
        .get("labelled")
        .await
        .expect("template")
        .metadata
        .resource_version;
    api.patch(
        "labelled",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"metadata": {"annotations": {"example.com/poke": "1"}}})),
    )
    .await
    .expect("poke");
    let poked = api
        .get("labelled")
        .await
        .expect("template")
        .metadata
        .resource_version;
    assert_ne!(before, poked);
    // A pass runs for the poke; give the manager a few of its own polls to (not) write.
    let quiet = wait_for(
        "a quiet template",
        std::time::Duration::from_secs(5),
        || async {
            let now = api.get("labelled").await?.metadata.resource_version;
            Ok((now != poked).then_some(()))
        },
    )
    .await;
    assert!(quiet.is_err(), "a pass at rest wrote the template");
}

/// What the servers below answer, which must reach nothing the tenant reads.
const MARKER: &str = "INTERNAL-SERVICE-MARKER-5e1b";

/// A loopback server that answers every request with `head` and `body`; its `host:port`, and
/// how many requests it was sent.
async fn loopback_server(
    head: String,
    body: String,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let host = listener.local_addr().expect("address").to_string();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (head, body) = (head.clone(), body.clone());
            tokio::spawn(async move {
                let mut request = [0u8; 8192];
                let _ = socket.read(&mut request).await;
                let response = format!(
                    "HTTP/1.1 {head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (host, hits)
}

/// What a registry answers never reaches the tenant, and a registry cannot send the manager
/// elsewhere: an image whose (plain-http, loopback) registry redirects to another loopback
/// port, an "internal" service, is refused before the manager connects there, and the
/// condition and the event say so; a registry whose error carries a body shows only its
/// status. No byte of either server's answer appears in any condition or event of the
/// templates.
#[tokio::test]
async fn a_registry_cannot_send_the_manager_elsewhere_nor_show_its_body() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("registry-redirect", &[]).await;
    let (internal, internal_hits) =
        loopback_server("200 OK".into(), format!("{{\"secret\": \"{MARKER}\"}}")).await;
    let (redirector, _) = loopback_server(
        format!("307 Temporary Redirect\r\nLocation: http://{internal}/latest/meta-data"),
        MARKER.into(),
    )
    .await;
    let (failing, _) = loopback_server(
        "500 Internal Server Error".into(),
        format!("<html>{MARKER}</html>"),
    )
    .await;

    let api: Api<TerraformMachineTemplate> = Api::namespaced(client.clone(), &ns);
    let redirected = format!("{redirector}/modules/machine:v1");
    let erroring = format!("{failing}/modules/machine:v1");
    create_template(&api, "redirected", &redirected, None, None).await;
    create_template(&api, "erroring", &erroring, None, None).await;
    let failed =
        |t: &TerraformMachineTemplate| has(t, "CapacityResolved", "False", "ImageInspectFailed");

    let t = wait_until(&api, "redirected", "the redirect refused", &manager, failed).await;
    let message = condition(&t, "CapacityResolved").expect("condition").2;
    assert!(
        message.contains(&format!(
            "the redirect to http://{internal} was not followed"
        )) && message.contains("own host and port"),
        "{message}"
    );
    let t = wait_until(&api, "erroring", "the error named", &manager, failed).await;
    let message = condition(&t, "CapacityResolved").expect("condition").2;
    assert!(
        message.contains("HTTP 500 Internal Server Error"),
        "{message}"
    );

    // Both failures are announced; then nothing of either answer is anywhere the tenant reads.
    event(&client, &ns, "ImageInspectFailed").await;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    let announced = |name: &'static str| {
        let events = events.clone();
        async move {
            wait_for(
                &format!("the ImageInspectFailed event of {name}"),
                std::time::Duration::from_secs(60),
                || async {
                    let list = events.list(&Default::default()).await?.items;
                    let of_it: Vec<_> = list
                        .into_iter()
                        .filter(|e| {
                            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                        })
                        .collect();
                    Ok(of_it
                        .iter()
                        .any(|e| e.reason.as_deref() == Some("ImageInspectFailed"))
                        .then_some(of_it))
                },
            )
            .await
            .expect("event")
        }
    };
    for name in ["redirected", "erroring"] {
        for e in announced(name).await {
            let note = e.note.unwrap_or_default();
            assert!(!note.contains(MARKER), "{name}: event {note}");
        }
        let t = api.get(name).await.expect("template");
        let status = serde_json::to_string(&t.status).expect("json");
        assert!(!status.contains(MARKER), "{name}: status {status}");
    }
    assert_eq!(
        internal_hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the manager connected to the internal service"
    );
}
