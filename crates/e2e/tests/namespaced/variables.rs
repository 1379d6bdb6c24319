//! Module variables from `spec.variablesFrom`: a labelled ConfigMap (JSON format) and Secret
//! (String format) reach the module, Secret values declared sensitive; an unlabelled or
//! missing source holds the object with `VariablesSourceNotFound`, a bad key with
//! `VariablesInvalid`; and a change of a source (even of its label) wakes the object. The merged
//! variables are held to the schema the module image publishes, read with the pull Secrets the
//! object's Jobs get (a machine's from its cluster).

use captf_api::names::WorkloadKind;
use captf_api::{TerraformCluster, TerraformMachine};
use captf_e2e::fixture::*;
use captf_e2e::registry::TestRegistry;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

fn merge(value: serde_json::Value) -> Patch<serde_json::Value> {
    Patch::Merge(value)
}

/// Waits until the object is held with `DependenciesReady=False/VariablesInvalid`; the message.
async fn variables_invalid<K>(api: &Api<K>, name: &str, manager: &captf_e2e::Manager) -> String
where
    K: Conditioned + kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let held = wait_until(api, name, "VariablesInvalid", manager, |o| {
        has(o, "DependenciesReady", "False", "VariablesInvalid")
    })
    .await;
    condition(&held, "DependenciesReady").expect("condition").2
}

#[tokio::test]
async fn variables_come_from_labelled_config_maps_and_secrets() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("variables", &[]).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    // Not labelled yet: it is not read.
    config_maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "knobs"},
                "data": {"extra_exports": r#"{"region":"eu"}"#},
            }))
            .expect("ConfigMap"),
        )
        .await
        .expect("create the ConfigMap");
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "triggers", "labels": {"captf.io/variables": "true"}},
                "stringData": {"replace_trigger": "one"},
            }))
            .expect("Secret"),
        )
        .await
        .expect("create the Secret");
    let name = "variables";
    create_cluster(
        &client,
        &ns,
        name,
        IMAGE,
        "  variablesFrom:\n  - {configMapRef: {name: knobs}, format: JSON}\n  - {secretRef: {name: triggers}}\n  - {configMapRef: {name: absent}, optional: true}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let not_found =
        |t: &TerraformCluster| has(t, "DependenciesReady", "False", "VariablesSourceNotFound");
    let tc = wait_until(&api, name, "VariablesSourceNotFound", &manager, not_found).await;
    let message = condition(&tc, "DependenciesReady").expect("condition").2;
    assert!(
        message.contains(&format!("ConfigMap {ns}/knobs"))
            && message.contains("not labelled captf.io/variables=true"),
        "{message}"
    );
    assert!(
        job_names(&client, &ns).await.is_empty(),
        "nothing runs meanwhile"
    );

    // Labelled: the watch wakes the cluster, and both sources reach the module.
    config_maps
        .patch(
            "knobs",
            &PatchParams::default(),
            &merge(serde_json::json!({"metadata": {"labels": {"captf.io/variables": "true"}}})),
        )
        .await
        .expect("label the ConfigMap");
    let tc = wait_until(&api, name, "Ready", &manager, ready).await;
    assert!(
        exports(&tc).contains(r#""region":"eu""#),
        "{}",
        exports(&tc)
    );
    let (tfvars, root) = durable_inputs(&client, &ns, WorkloadKind::Cluster, name).await;
    assert_eq!(tfvars["extra_exports"], serde_json::json!({"region": "eu"}));
    assert_eq!(tfvars["replace_trigger"], "one");
    assert_eq!(
        root["variable"]["replace_trigger"]["sensitive"], true,
        "a value from a Secret is sensitive: {root}"
    );
    assert_ne!(root["variable"]["extra_exports"]["sensitive"], true);

    // A change of the ConfigMap re-applies.
    config_maps
        .patch(
            "knobs",
            &PatchParams::default(),
            &merge(serde_json::json!({"data": {"extra_exports": r#"{"region":"us"}"#}})),
        )
        .await
        .expect("change the ConfigMap");
    wait_until(&api, name, "the new exports", &manager, |t| {
        exports(t).contains(r#""region":"us""#) && ready(t)
    })
    .await;

    // Taking the Secret's label away holds the cluster, and says which source.
    secrets
        .patch(
            "triggers",
            &PatchParams::default(),
            &merge(serde_json::json!({"metadata": {"labels": {"captf.io/variables": null}}})),
        )
        .await
        .expect("unlabel the Secret");
    let tc = wait_until(
        &api,
        name,
        "VariablesSourceNotFound again",
        &manager,
        not_found,
    )
    .await;
    let message = condition(&tc, "DependenciesReady").expect("condition").2;
    assert!(
        message.contains(&format!("Secret {ns}/triggers")),
        "{message}"
    );

    // A key that is no variable name is named, never its value.
    secrets
        .patch(
            "triggers",
            &PatchParams::default(),
            &merge(serde_json::json!({
                "metadata": {"labels": {"captf.io/variables": "true"}},
                "stringData": {"app.conf": "hunter2"},
            })),
        )
        .await
        .expect("a bad key");
    let message = variables_invalid(&api, name, &manager).await;
    assert!(
        message.contains("\"app.conf\"") && !message.contains("hunter2"),
        "{message}"
    );
}

/// The merged variables, the variablesFrom sources' included, against the schema the module
/// image publishes in a real registry (the label `captf lint schema` prints for the module):
/// the pass holds the cluster with `VariablesInvalid` naming every problem and no value, and
/// no Job starts; once the source is corrected, the watch wakes the cluster and it applies.
#[tokio::test]
async fn merged_variables_must_fit_the_schema_the_image_publishes() {
    let Scene {
        env,
        client,
        ns,
        manager,
    } = scene("varschema", &[]).await;
    let registry = TestRegistry::start_for_node(&env, &ns)
        .await
        .expect("registry");
    // The no-op modules, built as the standard images are, with the schema `captf lint schema`
    // prints as a label: the manager reads the label, the kubelet pulls the image with the
    // Job's pull Secret.
    let tools = captf_testenv::tools::Tools::locate().expect("tools");
    let tofu = captf_testenv::images::tofu_engine(&tools.tofu).expect("tofu layer");
    let push = |role: &str| {
        let lint = std::process::Command::new(captf_e2e::captf_binary().expect("captf"))
            .args(["lint", "schema"])
            .arg(captf_e2e::workspace().join("modules/noop").join(role))
            .output()
            .expect("captf lint schema");
        assert!(
            lint.status.success(),
            "{}",
            String::from_utf8_lossy(&lint.stderr)
        );
        let schema = String::from_utf8(lint.stdout).expect("UTF-8");
        let module = captf_e2e::workspace().join("modules/noop").join(role);
        let mut image = captf_testenv::images::module_image(captf_testenv::images::ModuleImage {
            role,
            module: captf_testenv::images::module_layer(role, &module).expect("module layer"),
            engine: &tofu,
            providers: None,
            version: "schema",
            revision: "test",
        })
        .expect("module image");
        image.config.labels.insert(
            "io.captf.variables-schema".to_owned(),
            schema.trim().to_owned(),
        );
        registry
            .push_image(&format!("modules/{role}:schema"), &image)
            .expect("push")
    };
    let image = push("cluster");
    let machine_image = push("machine");

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "registry"},
                "type": "kubernetes.io/dockerconfigjson",
                "stringData": {".dockerconfigjson": registry.docker_config()},
            }))
            .expect("Secret"),
        )
        .await
        .expect("pull Secret");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    config_maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "knobs", "labels": {"captf.io/variables": "true"}},
                "data": {
                    "health_reasons": "[\"NotAList\"]",
                    "sleep_seconds": "soon-ish",
                    "instnce_type": "m5.secretish",
                },
            }))
            .expect("ConfigMap"),
        )
        .await
        .expect("create the ConfigMap");
    let name = "fit";
    create_cluster(
        &client,
        &ns,
        name,
        &image,
        "  jobs: {imagePullSecrets: [{name: registry}]}\n  variablesFrom:\n  - {configMapRef: {name: knobs}}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let message = variables_invalid(&api, name, &manager).await;
    for part in [
        &format!("the variables do not fit the io.captf.variables-schema label of {image}"),
        "variable \"health_reasons\" must be an array, but its source has the string format",
        "variable \"instnce_type\" is not declared by the module",
        "variable \"sleep_seconds\" must be a number, got a string",
        "correct spec.variables or the variablesFrom sources",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    for value in ["NotAList", "soon-ish", "secretish"] {
        assert!(!message.contains(value), "a value leaked: {message}");
    }
    assert!(
        job_names(&client, &ns).await.is_empty(),
        "nothing runs meanwhile"
    );

    // Values Terraform converts: the source change wakes the cluster and it applies.
    config_maps
        .patch(
            "knobs",
            &PatchParams::default(),
            &merge(serde_json::json!({"data": {
                "health_reasons": null,
                "instnce_type": null,
                "sleep_seconds": "0",
            }})),
        )
        .await
        .expect("correct the ConfigMap");
    wait_until(&api, name, "Ready", &manager, ready).await;

    // A machine names no pull Secret of its own: its Jobs, and so its schema read, use the
    // cluster's.
    let machine = "fit-0";
    write_bootstrap(&client, &ns, machine).await;
    create_machine(
        &client,
        &ns,
        name,
        machine,
        &machine_image,
        "",
        "  variables: {healthy: maybe}",
    )
    .await;
    let machines: Api<TerraformMachine> = Api::namespaced(client.clone(), &ns);
    let message = variables_invalid(&machines, machine, &manager).await;
    assert!(
        message.contains("variable \"healthy\" must be a bool"),
        "{message}"
    );
    let healthy = serde_json::json!({"spec": {"variables": {"healthy": true}}});
    merge_patch(&machines, machine, healthy).await;
    wait_until(&machines, machine, "the machine Ready", &manager, ready).await;
}
