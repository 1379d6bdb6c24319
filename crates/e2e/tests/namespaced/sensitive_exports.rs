//! Exports a module marks sensitive never reach `status.exports`, which anyone who may view the
//! object reads: the generated root records `issensitive()` of the module's `exports` next to
//! the sensitive re-export, and the manager publishes only exports it knows are not sensitive.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use captf_e2e::registry::TestRegistry;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};

/// A value no status or event may show.
const SECRET: &str = "s3cr3t-export-7f1c";

/// The no-op cluster module with its `exports` output declared sensitive, on Terraform when
/// `terraform`, else OpenTofu.
fn sensitive_noop_cluster(dir: &std::path::Path, terraform: bool) -> captf_testenv::oci::Image {
    let module = captf_e2e::workspace().join("modules/noop/cluster");
    for entry in std::fs::read_dir(&module).expect("module") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), dir.join(entry.file_name())).expect("copy");
    }
    let outputs = dir.join("outputs.tf");
    let text = std::fs::read_to_string(&outputs).expect("outputs.tf");
    let marked = text.replacen(
        "output \"exports\" {\n",
        "output \"exports\" {\n  sensitive = true\n",
        1,
    );
    assert_ne!(marked, text, "the exports output is marked");
    std::fs::write(&outputs, marked).expect("outputs.tf");
    captf_e2e::registry::engine_module_image("cluster", dir, "sensitive", terraform)
        .expect("module image")
}

#[tokio::test]
async fn sensitive_exports_are_never_published_in_status_with_opentofu() {
    never_published("sensitive-tofu", false).await;
}

#[tokio::test]
async fn sensitive_exports_are_never_published_in_status_with_terraform() {
    never_published("sensitive-tf", true).await;
}

async fn never_published(prefix: &str, terraform: bool) {
    let Scene {
        env,
        client,
        ns,
        manager,
    } = scene(prefix, &[]).await;
    let registry = TestRegistry::start_for_node(&env, &ns)
        .await
        .expect("registry");
    let dir = tempfile::tempdir().expect("module folder");
    registry
        .push_image(
            "modules/sensitive:v1",
            &sensitive_noop_cluster(dir.path(), terraform),
        )
        .expect("push");
    registry
        .pull_secret(&client, &ns)
        .await
        .expect("pull Secret");
    let name = "sensitive";
    create_cluster(
        &client,
        &ns,
        name,
        &format!("{}/modules/sensitive:v1", registry.host),
        &format!(
            "  jobs: {{imagePullSecrets: [{{name: registry}}]}}\n  variables: {{extra_exports: {{token: {SECRET}}}}}"
        ),
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let tc = wait_until(&api, name, "Ready", &manager, ready).await;
    let status = tc.status.as_ref().expect("status");
    assert!(status.exports.is_none(), "{:?}", status.exports);
    // The user wrote the value into spec.variables; what the manager writes must not show it.
    let written = serde_json::to_string(status).expect("JSON");
    assert!(
        !written.contains(SECRET),
        "status shows the export: {written}"
    );

    let withheld = event(&client, &ns, "ExportsNotPublished").await;
    let note = withheld.note.unwrap_or_default();
    assert!(note.contains("sensitive"), "{note}");
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    for e in events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
    {
        let note = e.note.unwrap_or_default();
        assert!(!note.contains(SECRET), "an event shows the export: {note}");
    }
}
