//! The demo: on a running local control plane (`captf-testenv up`), installs what CAPTF needs,
//! starts `captf manager`, creates an identity, a CAPI Cluster and a TerraformCluster on the
//! no-op module, waits until it is Ready and shows what was made. `down` stops the manager.
//! `hack/demo.sh` wraps both with the control plane's start and stop.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use captf_e2e::{
    apply_file, apply_yaml, captf_binary, manager_kubeconfig, workspace, write_images,
};
use captf_testenv::{TestEnv, wait_for};
use kube::api::Api;

const NAMESPACE: &str = "default";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = std::env::var_os("CAPTF_TESTENV_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| captf_testenv::tools::cache_dir().join("testenv"));
    match std::env::args().nth(1).as_deref() {
        Some("up") => up(&dir).await,
        Some("down") => down(&dir),
        _ => anyhow::bail!(
            "usage: captf-demo up|down (start the control plane first: captf-testenv up)"
        ),
    }
}

async fn up(dir: &std::path::Path) -> anyhow::Result<()> {
    let env = TestEnv::attach(dir)?;
    let client = env.client().await?;
    println!(
        "== images: the manager/runner and the no-op modules, built here and pushed to the node's registry ({})",
        env.registry()
    );
    let images = write_images(&env)?;
    println!("   runner: {}", images.runner);
    println!("== the runner ClusterRole (config/rbac/runner_clusterrole.yaml)");
    apply_file(
        &client,
        &workspace().join("config/rbac/runner_clusterrole.yaml"),
    )
    .await?;
    println!("== the manager's ServiceAccount and RBAC (config/rbac)");
    let kubeconfig = manager_kubeconfig(&env, &client).await?;
    start_manager(&kubeconfig, dir, &images.runner)?;
    println!("== an identity, a Cluster and a TerraformCluster on the no-op module");
    apply_yaml(&client, DEMO).await?;
    let clusters: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &cluster_resource());
    let uid = clusters
        .get("demo")
        .await?
        .metadata
        .uid
        .context("Cluster without uid")?;
    // CAPI's core controller would set this owner reference; the demo runs without it.
    apply_yaml(&client, &TERRAFORM_CLUSTER.replace("CLUSTER_UID", &uid)).await?;
    println!("== waiting until TerraformCluster demo is Ready");
    let api: Api<captf_api::TerraformCluster> = Api::namespaced(client.clone(), NAMESPACE);
    wait_for(
        "TerraformCluster demo to be Ready",
        Duration::from_secs(300),
        || async {
            let tc = api.get("demo").await?;
            let ready = tc
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .map(|c| c.status == "True");
            Ok(ready.filter(|r| *r))
        },
    )
    .await
    .with_context(|| {
        format!(
            "see the manager's log: {}",
            dir.join("demo-manager.log").display()
        )
    })?;
    println!("Ready.\n");
    let kubectl = captf_testenv::tools::cache_dir().join("bin/kubectl");
    let kubeconfig = env.kubeconfig().display().to_string();
    if kubectl.exists() {
        for args in [
            vec![
                "get",
                "terraformclusters,clusters.cluster.x-k8s.io",
                "-n",
                NAMESPACE,
                "-o",
                "wide",
            ],
            vec![
                "get",
                "jobs,secrets,leases",
                "-n",
                NAMESPACE,
                "-l",
                "captf.io/managed=true",
            ],
        ] {
            println!("$ kubectl {}", args.join(" "));
            let status = Command::new(&kubectl)
                .args(&args)
                .env("KUBECONFIG", &kubeconfig)
                .status()?;
            anyhow::ensure!(status.success(), "kubectl failed");
            println!();
        }
    }
    println!("Look further:");
    println!(
        "  export KUBECONFIG={kubeconfig} PATH={}:$PATH",
        kubectl
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    println!("  kubectl get terraformcluster demo -o yaml        # status, conditions, lastRun");
    println!("  kubectl get secret -l tfstate=true                # the state the engine wrote");
    println!("  kubectl get events --field-selector involvedObject.name=demo");
    println!(
        "  less {}                # the manager's log",
        dir.join("demo-manager.log").display()
    );
    println!("Tear down: hack/demo.sh down");
    Ok(())
}

fn start_manager(
    kubeconfig: &std::path::Path,
    dir: &std::path::Path,
    runner_image: &str,
) -> anyhow::Result<()> {
    let pid_file = dir.join("demo-manager.pid");
    if let Some(pid) = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
        && captf_testenv::process::alive(pid)
    {
        println!("== captf manager already running (pid {pid})");
        return Ok(());
    }
    let log_path = dir.join("demo-manager.log");
    let log = std::fs::File::create(&log_path)?;
    let mut child = std::os::unix::process::CommandExt::process_group(
        Command::new(captf_binary()?)
            .arg("manager")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--runner-image={runner_image}"))
            .arg("--diagnostics-address=127.0.0.1:0")
            .arg("--health-addr=127.0.0.1:0")
            .arg("--insecure-diagnostics")
            // A local manager has no webhook configuration pointing at it.
            .arg("--webhook-port=0")
            .env("POD_NAMESPACE", "captf-system")
            .env("SERVICE_ACCOUNT_NAME", "captf-controller-manager")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log),
        0,
    )
    .spawn()
    .context("starting captf manager")?;
    std::fs::write(&pid_file, child.id().to_string())?;
    let [metrics] = captf_testenv::process::served(&mut child, &log_path, &["metrics"])?;
    println!(
        "== captf manager started (pid {}), metrics on http://{metrics}/metrics",
        child.id()
    );
    Ok(())
}

fn down(dir: &std::path::Path) -> anyhow::Result<()> {
    let pid_file = dir.join("demo-manager.pid");
    if let Some(pid) = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
    {
        captf_testenv::process::stop_group(pid, Duration::from_secs(10), || {
            !captf_testenv::process::alive(pid)
        });
        println!("captf manager stopped");
    }
    let _ = std::fs::remove_file(pid_file);
    Ok(())
}

fn cluster_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
        "clusters",
    )
}

const DEMO: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: captf-system}
---
apiVersion: v1
kind: Secret
metadata: {name: noop-credentials, namespace: captf-system}
stringData: {NOOP_TOKEN: not-a-real-credential}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformClusterIdentity
metadata: {name: noop}
spec:
  secretRef: {name: noop-credentials, namespace: captf-system}
  allowedNamespaces: {selector: {}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: demo, namespace: default}
spec:
  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: TerraformCluster, name: demo}
"#;

const TERRAFORM_CLUSTER: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformCluster
metadata:
  name: demo
  namespace: default
  labels: {cluster.x-k8s.io/cluster-name: demo}
  ownerReferences:
  - {apiVersion: cluster.x-k8s.io/v1beta2, kind: Cluster, name: demo, uid: CLUSTER_UID}
spec:
  source: {image: "captf.local/modules/noop-cluster:e2e"}
  identityRef: {name: noop}
"#;
