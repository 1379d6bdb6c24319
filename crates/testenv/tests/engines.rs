//! OpenTofu and Terraform apply a `terraform_data` module with the `kubernetes` backend from
//! inside a Job pod of a real module image (no shell, non-root), authenticating with the pod's
//! projected ServiceAccount token through the `kubernetes` Service (in-cluster config).

use std::time::Duration;

use captf_testenv::TestEnv;
use captf_testenv::fixtures::{grant_state_access, push_module_image, run_job};
use captf_testenv::images::Engine;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, LogParams};

const MODULE: &str = r#"
terraform {
  backend "kubernetes" {}
}
resource "terraform_data" "hello" {
  input = "hello"
}
output "hello" {
  value = terraform_data.hello.output
}
"#;

async fn apply_in_a_pod(engine: Engine) {
    let env = TestEnv::shared().clone();
    let client = env.client().await.expect("client");
    let ns = env
        .namespace(&client, engine.name())
        .await
        .expect("namespace");
    grant_state_access(&client, &ns).await.expect("rbac");
    let module = std::env::temp_dir().join(format!(
        "captf-engines-{}-{}",
        engine.name(),
        std::process::id()
    ));
    std::fs::create_dir_all(&module).expect("module dir");
    std::fs::write(module.join("main.tf"), MODULE).expect("module");
    let image = push_module_image(
        &env,
        &format!("testenv/{}-hello:v1", engine.name()),
        "cluster",
        &module,
        engine,
        false,
    )
    .expect("image");
    let _ = std::fs::remove_dir_all(&module);
    let suffix = format!("{}-test-c", engine.name());
    // The image has no shell: each engine command is a container of its own, in order (init
    // containers run one after the other), sharing the data folder on an emptyDir.
    let step = |name: &str, args: &[&str]| {
        let mut command = vec![
            "/captf/runtime".to_owned(),
            "-chdir=/captf/module".to_owned(),
        ];
        command.extend(args.iter().map(|a| (*a).to_owned()));
        serde_json::json!({
            "name": name,
            "image": image,
            "command": command,
            "env": [
                {"name": "HOME", "value": "/tmp"},
                {"name": "TF_DATA_DIR", "value": "/tmp/data"},
                {"name": "TF_IN_AUTOMATION", "value": "1"},
            ],
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            "terminationMessagePolicy": "FallbackToLogsOnError",
        })
    };
    let backend = [
        format!("-backend-config=secret_suffix={suffix}"),
        format!("-backend-config=namespace={ns}"),
        "-backend-config=in_cluster_config=true".to_owned(),
    ];
    let mut init_args = vec!["init", "-input=false", "-no-color"];
    init_args.extend(backend.iter().map(String::as_str));
    let job: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "apply"},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "tmp", "emptyDir": {}}],
            "initContainers": [
                step("init", &init_args),
                step("apply", &["apply", "-input=false", "-no-color", "-auto-approve"]),
            ],
            "containers": [step("output", &["output", "-raw", "hello"])],
        }}},
    }))
    .expect("job");
    let outcome = run_job(&client, &ns, &job, Duration::from_secs(240))
        .await
        .expect("job finishes");
    assert_eq!(
        outcome.condition,
        "Complete",
        "{} apply failed: {}",
        engine.name(),
        outcome.describe()
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = outcome.pod.metadata.name.clone().expect("pod name");
    let output = pods
        .logs(
            &pod,
            &LogParams {
                container: Some("output".into()),
                ..LogParams::default()
            },
        )
        .await
        .expect("the output container's log");
    assert_eq!(output, "hello");

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let state = secrets
        .get(&format!("tfstate-default-{suffix}"))
        .await
        .expect("state Secret");
    let labels = state.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("tfstate").map(String::as_str),
        Some("true"),
        "{labels:?}"
    );
    assert_eq!(
        labels.get("tfstateSecretSuffix").map(String::as_str),
        Some(suffix.as_str())
    );
    assert!(state.data.unwrap_or_default().contains_key("tfstate"));
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let lease = leases
        .get(&format!("lock-tfstate-default-{suffix}"))
        .await
        .expect("lock Lease");
    // Released after the apply: no holder left.
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(holder.is_empty(), "lock still held by {holder}");
    let all = secrets
        .list(&ListParams::default().labels("tfstate=true"))
        .await
        .expect("list");
    assert_eq!(all.items.len(), 1);
}

#[tokio::test]
async fn opentofu_applies_with_the_kubernetes_backend_from_a_pod() {
    apply_in_a_pod(Engine::Tofu).await;
}

#[tokio::test]
async fn terraform_applies_with_the_kubernetes_backend_from_a_pod() {
    apply_in_a_pod(Engine::Terraform).await;
}
