//! The environment the seeds require comes from the manifest (`POD_NAMESPACE`,
//! `SERVICE_ACCOUNT_NAME`: the manager's own user). Without it the manager starts with a
//! warning, and the webhook refuses the manager's own providerID write, so no machine finishes
//! provisioning (seed 001, "Required environment"); with it back, the machine provisions.

use captf_api::{TerraformCluster, TerraformMachine};
use captf_e2e::fixture::{CLUSTER_IMAGE, create_cluster, create_machine, ready, write_bootstrap};
use captf_e2e::install::{self, DEPLOYMENT, NAMESPACE, available};
use kube::api::Api;

use crate::{Restore, exclusive, installed, namespace, wait};

const MACHINE_IMAGE: &str = "captf.local/modules/noop-machine:e2e";
const WARNING: &str = "POD_NAMESPACE or SERVICE_ACCOUNT_NAME is not set";
const REFUSAL: &str = "this manager does not know its own user";

/// The two variables as config/manager sets them, as a strategic-merge patch.
static MANIFEST_ENVIRONMENT: std::sync::LazyLock<serde_json::Value> = std::sync::LazyLock::new(
    || {
        serde_json::json!({"spec": {"template": {"spec": {"containers": [{
            "name": "manager",
            "env": [
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "SERVICE_ACCOUNT_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            ],
        }]}}}})
    },
);

/// The manager pods' whole logs.
fn manager_log(env: &captf_testenv::TestEnv) -> anyhow::Result<String> {
    install::kubectl(
        env,
        &[
            "logs",
            "-n",
            NAMESPACE,
            "-l",
            "control-plane=controller-manager",
            "--tail=-1",
        ],
    )
}

#[tokio::test]
async fn without_its_user_the_manager_warns_and_its_provider_id_write_is_refused() {
    let (env, client, _) = installed().await;
    let _alone = exclusive(&client).await;
    let restore = Restore(
        [
            "patch",
            "-n",
            NAMESPACE,
            &format!("deployment/{DEPLOYMENT}"),
            "--type=strategic",
            "-p",
            &MANIFEST_ENVIRONMENT.to_string(),
        ]
        .map(str::to_owned)
        .to_vec(),
    );

    install::kubectl(
        env,
        &[
            "set",
            "env",
            "-n",
            NAMESPACE,
            &format!("deployment/{DEPLOYMENT}"),
            "POD_NAMESPACE-",
            "SERVICE_ACCOUNT_NAME-",
        ],
    )
    .expect("the variables removed");
    available(&client, NAMESPACE, DEPLOYMENT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", crate::logs(env)));
    wait(env, "the start-up warning", || async {
        Ok(manager_log(env)?.contains(WARNING).then_some(()))
    })
    .await;

    let ns = namespace(env, &client, "own-user").await;
    create_cluster(&client, &ns, "own-user", CLUSTER_IMAGE, "").await;
    let clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait(env, "the cluster Ready", || async {
        Ok(ready(&clusters.get("own-user").await?).then_some(()))
    })
    .await;
    write_bootstrap(&client, &ns, "worker").await;
    create_machine(&client, &ns, "own-user", "worker", MACHINE_IMAGE, "", "").await;
    wait(env, "the providerID write refused", || async {
        let log = manager_log(env)?;
        Ok(log
            .lines()
            .any(|l| l.contains(REFUSAL) && l.contains(&ns))
            .then_some(()))
    })
    .await;
    let machines: Api<TerraformMachine> = Api::namespaced(client.clone(), &ns);
    let machine = machines.get("worker").await.expect("the TerraformMachine");
    assert_eq!(machine.spec.provider_id, None);
    assert!(!ready(&machine));

    // The manifest's environment back: the machine provisions.
    drop(restore);
    available(&client, NAMESPACE, DEPLOYMENT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", crate::logs(env)));
    wait(env, "the machine's providerID and Ready", || async {
        let m = machines.get("worker").await?;
        Ok((m.spec.provider_id.is_some() && ready(&m)).then_some(()))
    })
    .await;
}
