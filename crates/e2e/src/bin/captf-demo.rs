//! The demo: on a running local control plane and node (`captf-testenv up`), installs CAPTF as a
//! Cluster API user does (cert-manager, then `clusterctl init` from a local repository:
//! `captf_e2e::install`), applies `hack/demo/cluster.yaml` (a Cluster with a MachineDeployment
//! of two TerraformMachines and a MachinePool, on the no-op modules), waits until CAPTF has
//! provisioned all of it and shows it the way a Cluster API user looks: `clusterctl describe
//! cluster` and `kubectl get`. `hack/demo.sh` wraps it with the control plane's start and stop.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use captf_api::{TerraformCluster, TerraformMachine, TerraformMachinePool};
use captf_e2e::fixture::ready;
use captf_e2e::install::{self, Installed};
use captf_e2e::{apply_yaml, stand_in, workspace};
use captf_testenv::{TestEnv, wait_for};
use kube::api::{Api, DynamicObject, ListParams};

const NAMESPACE: &str = "default";
const MANIFEST: &str = "hack/demo/cluster.yaml";
/// The first run pulls every image; applies run through the node one after the other.
const TIMEOUT: Duration = Duration::from_secs(600);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = std::env::var_os("CAPTF_TESTENV_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| captf_testenv::tools::cache_dir().join("testenv"));
    match std::env::args().nth(1).as_deref() {
        Some("up") => up(&dir).await,
        _ => {
            anyhow::bail!("usage: captf-demo up (start the control plane first: captf-testenv up)")
        }
    }
}

async fn up(dir: &Path) -> anyhow::Result<()> {
    let env = TestEnv::attach(dir)?;
    let client = env.client().await?;
    println!(
        "== cert-manager, then clusterctl init --infrastructure terraform (images built here, in the node's registry {})",
        env.registry()
    );
    let installed = install::install(&env, &client).await?;
    println!("   manager image: {}", installed.images.runner);
    print_command(
        &env,
        &installed,
        &[
            "kubectl",
            "get",
            "providers.clusterctl.cluster.x-k8s.io",
            "-A",
        ],
    )?;

    println!("== the stand-in control-plane kind (no machine runs kubeadm here)");
    stand_in::install(&client).await?;
    println!("$ kubectl apply -f {MANIFEST}");
    let manifest = std::fs::read_to_string(workspace().join(MANIFEST))?;
    wait_for(
        "the stand-in kinds to be served",
        Duration::from_secs(30),
        || async { Ok(apply_yaml(&client, &manifest).await.ok()) },
    )
    .await?;
    // What a control-plane provider does once its control plane is up: reports it initialized
    // and writes the workload cluster's kubeconfig (the workload cluster is this control plane).
    stand_in::initialize_control_plane(&client, NAMESPACE, "demo", &env).await?;

    println!("== waiting until CAPTF has provisioned the cluster, two machines and the pool");
    let clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), NAMESPACE);
    let machines: Api<TerraformMachine> = Api::namespaced(client.clone(), NAMESPACE);
    let pools: Api<TerraformMachinePool> = Api::namespaced(client.clone(), NAMESPACE);
    wait_for("the demo to be Ready", TIMEOUT, || async {
        let cluster = clusters.get_opt("demo").await?.is_some_and(|c| ready(&c));
        let machines = machines.list(&ListParams::default()).await?.items;
        let pool = pools.get_opt("demo-pool").await?.is_some_and(|p| ready(&p));
        Ok((cluster && pool && machines.len() == 2 && machines.iter().all(ready)).then_some(()))
    })
    .await
    .with_context(|| {
        format!(
            "see: kubectl -n {} logs deployment/{} (KUBECONFIG={})",
            install::NAMESPACE,
            install::DEPLOYMENT,
            env.kubeconfig().display()
        )
    })?;
    // What the machines do once they boot: join the workload cluster as Nodes with their
    // providerIDs, so Cluster API links each Machine to its Node.
    let mut provider_ids: Vec<String> = machines
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|m| m.spec.provider_id)
        .collect();
    provider_ids.extend(
        pools
            .get("demo-pool")
            .await?
            .spec
            .provider_id_list
            .into_iter()
            .flatten(),
    );
    stand_in::join_nodes(&client, &provider_ids).await?;
    let capi_machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &captf_e2e::fixture::capi_machine_resource(),
    );
    wait_for("the Machines linked to their Nodes", TIMEOUT, || async {
        let items = capi_machines.list(&ListParams::default()).await?.items;
        Ok(items
            .iter()
            .all(|m| m.data["status"]["nodeRef"]["name"].is_string())
            .then_some(()))
    })
    .await?;
    println!("Ready.\n");
    print_command(
        &env,
        &installed,
        &["clusterctl", "describe", "cluster", "demo", "-n", NAMESPACE],
    )?;
    print_command(
        &env,
        &installed,
        &[
            "kubectl",
            "get",
            "clusters,machinedeployments,machines,machinepools",
            "-n",
            NAMESPACE,
        ],
    )?;
    print_command(
        &env,
        &installed,
        &[
            "kubectl",
            "get",
            "terraformclusters,terraformmachines,terraformmachinepools",
            "-n",
            NAMESPACE,
            "-o",
            "wide",
        ],
    )?;
    print_command(
        &env,
        &installed,
        &[
            "kubectl",
            "get",
            "jobs,secrets,leases",
            "-n",
            NAMESPACE,
            "-l",
            "captf.io/managed=true",
        ],
    )?;

    let bin = captf_testenv::tools::bin_dir();
    // The kubectl plugin (docs/reference/cli.md): the manager image's own binary, as
    // `kubectl-captf` in a folder of the demo's.
    let plugins = env.dir.join("plugins");
    std::fs::create_dir_all(&plugins)?;
    let plugin = plugins.join("kubectl-captf");
    let _ = std::fs::remove_file(&plugin);
    std::os::unix::fs::symlink(captf_testenv::images::require_captf_static()?, &plugin)?;
    println!("Look further:");
    println!(
        "  export KUBECONFIG={} PATH={}:{}:$PATH",
        env.kubeconfig().display(),
        plugins.display(),
        bin.display()
    );
    println!(
        "  kubectl captf status tfc/demo                                  # what holds it, its Jobs, state, backups, leases"
    );
    println!(
        "  kubectl get terraformcluster demo -o yaml                      # status, conditions, lastRun"
    );
    println!(
        "  kubectl get secrets -l tfstate=true                            # the state the engine wrote"
    );
    println!(
        "  kubectl -n {} logs deployment/{}   # the manager",
        install::NAMESPACE,
        install::DEPLOYMENT
    );
    println!(
        "  kubectl scale machinedeployment demo-workers --replicas=3      # CAPTF provisions a third"
    );
    println!("Tear down: hack/demo.sh down");
    Ok(())
}

/// Prints and runs `clusterctl ...` or `kubectl ...` against the demo's control plane.
fn print_command(env: &TestEnv, installed: &Installed, command: &[&str]) -> anyhow::Result<()> {
    println!("$ {}", command.join(" "));
    let output = match command {
        ["clusterctl", args @ ..] => install::clusterctl(env, installed, args)?,
        ["kubectl", args @ ..] => install::kubectl(env, args)?,
        _ => anyhow::bail!("not a command of the demo: {command:?}"),
    };
    println!("{output}");
    Ok(())
}
