//! What `clusterctl init` leaves running: the manager as the Deployment of `config/default`,
//! from the image the project builds, with the environment the seeds require; its webhooks
//! called by the API server through their Service with cert-manager's CA; and a Cluster on
//! CAPTF provisioned by it, its Job running the runner from the manager's own image.

use captf_api::TerraformCluster;
use captf_e2e::apply_yaml;
use captf_e2e::fixture::{CLUSTER_IMAGE, ready};
use captf_e2e::install::{DEPLOYMENT, NAMESPACE, VERSION};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};

use crate::{installed, namespace, shared, wait};

#[tokio::test]
async fn clusterctl_init_runs_the_manager_deployment_from_the_project_image() {
    let (env, client, installed) = installed().await;
    let _shared = shared(&client).await;

    // clusterctl's inventory: the core provider and CAPTF at the repository's versions.
    let providers: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("clusterctl.cluster.x-k8s.io", "v1alpha3", "Provider"),
            "providers",
        ),
    );
    let inventory: Vec<(String, String, String)> = providers
        .list(&ListParams::default())
        .await
        .expect("providers")
        .items
        .into_iter()
        .map(|p| {
            (
                p.metadata.namespace.clone().unwrap_or_default(),
                p.data["providerName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                p.data["version"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert!(
        inventory.contains(&(
            NAMESPACE.to_owned(),
            "terraform".to_owned(),
            VERSION.to_owned()
        )),
        "{inventory:?}"
    );
    assert!(
        inventory
            .iter()
            .any(|(ns, name, _)| ns == "capi-system" && name == "cluster-api"),
        "{inventory:?}"
    );
    // The release's cluster template, as a user lists what it asks for.
    let variables = captf_e2e::install::clusterctl(
        env,
        installed,
        &[
            "generate",
            "cluster",
            "demo",
            "--infrastructure",
            &format!("terraform:{VERSION}"),
            "--list-variables",
        ],
    )
    .expect("clusterctl generate cluster --list-variables");
    for variable in [
        "CAPTF_CLUSTER_MODULE_IMAGE",
        "CAPTF_IDENTITY",
        "CAPTF_MACHINE_MODULE_IMAGE",
        "KUBERNETES_VERSION",
    ] {
        assert!(variables.contains(variable), "{variable}: {variables}");
    }
    // The topology flavor (its ClusterClass is generated from clusterclass-terraform.yaml).
    let topology = captf_e2e::install::clusterctl(
        env,
        installed,
        &[
            "generate",
            "cluster",
            "demo",
            "--infrastructure",
            &format!("terraform:{VERSION}"),
            "--flavor",
            "topology",
            "--list-variables",
        ],
    )
    .expect("clusterctl generate cluster --flavor topology --list-variables");
    for variable in [
        "CAPTF_IDENTITY",
        "KUBERNETES_VERSION",
        "CAPTF_MACHINE_POOL_REPLICAS",
    ] {
        assert!(topology.contains(variable), "{variable}: {topology}");
    }

    // The Deployment runs its two replicas from the pinned image, which is also the runner's.
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .get(DEPLOYMENT)
        .await
        .expect("Deployment");
    let container = &deployment
        .spec
        .expect("spec")
        .template
        .spec
        .expect("pod spec")
        .containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some(installed.images.runner.as_str())
    );
    // The flags clusterctl filled in: the variable the repository's clusterctl.yaml sets, and
    // the defaults of those it does not.
    let args = container.args.clone().unwrap_or_default();
    for flag in [
        "--feature-gates=MachinePool=true",
        "--v=2",
        "--state-backups=5",
        "--max-active-jobs=200",
        "--drift-default-interval=30m",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
    }
    assert!(!args.iter().any(|a| a.contains("${")), "{args:?}");
    let env_var = |name: &str| {
        container
            .env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} is not in the manifest"))
    };
    assert_eq!(
        env_var("CAPTF_MANAGER_IMAGE").value.as_deref(),
        Some(installed.images.runner.as_str())
    );
    for (name, field) in [
        ("POD_NAMESPACE", "metadata.namespace"),
        ("SERVICE_ACCOUNT_NAME", "spec.serviceAccountName"),
    ] {
        let from = env_var(name).value_from.and_then(|v| v.field_ref);
        assert_eq!(from.map(|f| f.field_path).as_deref(), Some(field), "{name}");
    }
    let pods = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default().labels("control-plane=controller-manager"))
        .await
        .expect("pods");
    let digest = installed.images.runner.split_once('@').expect("pinned").1;
    let running: Vec<_> = pods
        .items
        .iter()
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|cs| cs.iter().all(|c| c.ready && c.image_id.ends_with(digest)))
        })
        .collect();
    assert_eq!(running.len(), 2, "{:#?}\n{}", pods.items, crate::logs(env));
}

#[tokio::test]
async fn the_api_server_calls_the_webhooks_through_their_service_with_cert_managers_ca() {
    let (env, client, _) = installed().await;
    let _shared = shared(&client).await;

    // cert-manager issued the serving certificate and cainjector put its CA in the configuration.
    let secret = Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .get("captf-webhook-service-cert")
        .await
        .expect("the serving certificate's Secret");
    let ca = secret.data.expect("data")["ca.crt"].0.clone();
    let configurations: Api<DynamicObject> =
        Api::all_with(client.clone(), &captf_e2e::webhooks::vwc_resource());
    let configuration = configurations
        .get("captf-validating-webhook-configuration")
        .await
        .expect("the webhook configuration");
    for hook in configuration.data["webhooks"].as_array().expect("webhooks") {
        let service = &hook["clientConfig"]["service"];
        assert_eq!(service["name"], "captf-webhook-service", "{hook}");
        assert_eq!(service["namespace"], NAMESPACE, "{hook}");
        let bundle = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            hook["clientConfig"]["caBundle"].as_str().expect("caBundle"),
        )
        .expect("base64");
        // cainjector's bundle holds the current CA (and, after a renewal, the one before).
        let (bundle, ca) = (
            String::from_utf8_lossy(&bundle),
            String::from_utf8_lossy(&ca),
        );
        assert!(
            bundle.contains(ca.trim()),
            "{}: {ca} not in {bundle}",
            hook["name"]
        );
    }

    // A TerraformCluster the webhook refuses: the refusal comes back through the Service.
    let ns = namespace(env, &client, "webhook").await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let invalid: TerraformCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "TerraformCluster",
        "metadata": {"name": "invalid"},
        "spec": {"source": {"image": "captf.local/modules/noop-cluster:e2e"},
                 "identityRef": {"name": format!("noop-{ns}")},
                 "jobs": {"env": [{"name": "TF_LOG", "value": "DEBUG"}]}},
    }))
    .expect("object");
    let refused = api
        .create(&PostParams::default(), &invalid)
        .await
        .expect_err("the webhook refuses a reserved variable");
    let message = refused.to_string();
    for part in [
        "validation.terraformcluster.infrastructure.cluster.x-k8s.io",
        "spec.jobs.env[0].name",
        "the name is reserved",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
}

#[tokio::test]
async fn a_cluster_on_captf_becomes_ready_under_the_installed_manager() {
    let (env, client, installed) = installed().await;
    let _shared = shared(&client).await;
    let ns = namespace(env, &client, "provision").await;
    apply_yaml(
        &client,
        &format!(
            r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformCluster
metadata: {{name: demo, namespace: {ns}}}
spec:
  source: {{image: "{CLUSTER_IMAGE}"}}
  identityRef: {{name: noop-{ns}}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {{name: demo, namespace: {ns}}}
spec:
  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: TerraformCluster, name: demo}}
"#
        ),
    )
    .await
    .expect("objects");
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait(env, "the TerraformCluster Ready", || async {
        let tc = api.get("demo").await?;
        Ok(ready(&tc).then_some(()))
    })
    .await;
    // The apply ran the runner copied from the manager's own image.
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    let job = jobs
        .list(&ListParams::default())
        .await
        .expect("jobs")
        .items
        .into_iter()
        .next()
        .expect("an apply Job");
    let init = job
        .spec
        .expect("spec")
        .template
        .spec
        .expect("pod spec")
        .init_containers;
    assert!(
        init.iter()
            .flatten()
            .any(|c| c.image.as_deref() == Some(installed.images.runner.as_str())),
        "{init:?}"
    );
}
