//! OpenTofu and Terraform apply a `terraform_data` module with the `kubernetes` backend from
//! inside a Job pod, authenticating with the pod's ServiceAccount token (in-cluster config).

use std::time::Duration;

use captf_testenv::TestEnv;
use captf_testenv::fixtures::{grant_state_access, run_job, write_image};
use captf_testenv::tools::Tools;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

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

async fn apply_in_a_pod(engine: &str) {
    let env = TestEnv::shared().clone();
    let tools = Tools::locate().expect("hack/build-tools.sh built the engines");
    let binary = if engine == "tofu" {
        tools.tofu
    } else {
        tools.terraform
    };
    let client = env.client().await.expect("client");
    let ns = env.namespace(&client, engine).await.expect("namespace");
    grant_state_access(&client, &ns).await.expect("rbac");
    let image = format!("captf.local/testenv/{engine}-hello:v1");
    write_image(
        &env,
        &image,
        &[("captf/module/main.tf", MODULE.as_bytes())],
        &[("captf/runtime", binary.as_path())],
    )
    .expect("image");
    let suffix = format!("{engine}-test-c");
    let script = format!(
        r#"set -e
cd /captf/module
/captf/runtime init -input=false -no-color -backend-config=secret_suffix={suffix} -backend-config=namespace={ns} -backend-config=in_cluster_config=true
/captf/runtime apply -input=false -no-color -auto-approve
/captf/runtime output -raw hello > /dev/termination-log"#
    );
    let mut job = captf_testenv::fixtures::shell_job(
        "apply",
        &image,
        &script,
        &[("HOME", "/tmp"), ("TF_IN_AUTOMATION", "1")],
    )
    .expect("job");
    if let Some(c) = job
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
        .map(|p| &mut p.containers[0])
    {
        c.termination_message_policy = Some("FallbackToLogsOnError".into());
    }
    let outcome = run_job(&client, &ns, &job, Duration::from_secs(240))
        .await
        .expect("job finishes");
    assert_eq!(
        outcome.condition,
        "Complete",
        "{engine} apply failed: {:?}",
        outcome.terminated()
    );
    assert_eq!(
        outcome.terminated().and_then(|t| t.1).as_deref(),
        Some("hello")
    );

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
    apply_in_a_pod("tofu").await;
}

#[tokio::test]
async fn terraform_applies_with_the_kubernetes_backend_from_a_pod() {
    apply_in_a_pod("terraform").await;
}
