//! The webhooks fail closed, for real (seed 001): with the manager scaled to zero, every create
//! and update of a `Terraform*` object, and every delete the guards check, is refused with a
//! message naming the webhook, Cluster API's own writes included; scaled back up, they pass and
//! what waited lands.

use captf_api::{TerraformCluster, TerraformClusterIdentity, TerraformMachine};
use captf_e2e::apply_yaml;
use captf_e2e::fixture::CLUSTER_IMAGE;
use captf_e2e::install::{self, DEPLOYMENT, NAMESPACE, available};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

use crate::{Restore, exclusive, installed, namespace, wait};

const WEBHOOK: &str = "validation.terraformcluster.infrastructure.cluster.x-k8s.io";
const MACHINE_DELETE: &str = "delete.validation.terraformmachine.infrastructure.cluster.x-k8s.io";
const IDENTITY_DELETE: &str =
    "delete.validation.terraformclusteridentity.infrastructure.cluster.x-k8s.io";

fn scale(env: &captf_testenv::TestEnv, replicas: u32) {
    install::kubectl(
        env,
        &[
            "scale",
            "-n",
            NAMESPACE,
            &format!("deployment/{DEPLOYMENT}"),
            &format!("--replicas={replicas}"),
        ],
    )
    .expect("kubectl scale");
}

fn cluster(ns: &str, name: &str) -> String {
    format!(
        r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformCluster
metadata: {{name: {name}, namespace: {ns}}}
spec:
  source: {{image: "{CLUSTER_IMAGE}"}}
  identityRef: {{name: noop-{ns}}}
"#
    )
}

#[tokio::test]
async fn with_the_manager_scaled_to_zero_every_write_is_refused_naming_the_webhook() {
    let (env, client, _) = installed().await;
    let _alone = exclusive(&client).await;
    let ns = namespace(env, &client, "closed").await;
    // Before: an object Cluster API has not adopted yet.
    apply_yaml(&client, &cluster(&ns, "before"))
        .await
        .expect("a TerraformCluster while the manager runs");
    // And a TerraformMachine no Machine owns: nothing guards its delete but the webhook's
    // answer.
    apply_yaml(
        &client,
        &format!(
            "apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: TerraformMachine\nmetadata: {{name: alone, namespace: {ns}}}\nspec:\n  source: {{image: \"{CLUSTER_IMAGE}\"}}\n"
        ),
    )
    .await
    .expect("a TerraformMachine while the manager runs");
    let machines: Api<TerraformMachine> = Api::namespaced(client.clone(), &ns);
    let identities: Api<TerraformClusterIdentity> = Api::all(client.clone());

    scale(env, 0);
    let restore = Restore(
        [
            "scale",
            "-n",
            NAMESPACE,
            &format!("deployment/{DEPLOYMENT}"),
            "--replicas=2",
        ]
        .map(str::to_owned)
        .to_vec(),
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    wait(env, "no manager pod and no webhook endpoint", || async {
        let left = pods
            .list(&ListParams::default().labels("control-plane=controller-manager"))
            .await?
            .items
            .len();
        let addresses: usize = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=captf-webhook-service"))
            .await?
            .items
            .iter()
            .map(|s| s.endpoints.len())
            .sum();
        Ok((left == 0 && addresses == 0).then_some(()))
    })
    .await;

    // A create and an update by a user are refused, naming the webhook.
    for (what, result) in [
        ("create", apply_yaml(&client, &cluster(&ns, "during")).await),
        (
            "update",
            apply_yaml(
                &client,
                &format!(
                    "{}  variables: {{output_token: changed}}\n",
                    cluster(&ns, "before")
                ),
            )
            .await,
        ),
    ] {
        let message = format!("{:#}", result.expect_err(what));
        assert!(
            message.contains(WEBHOOK) && message.contains("failed calling webhook"),
            "{what}: {message}"
        );
    }

    // Deletes the guards check are refused too, naming their webhook; both objects stay.
    let machine = machines.delete("alone", &DeleteParams::default()).await;
    let identity = identities
        .delete(&format!("noop-{ns}"), &DeleteParams::default())
        .await;
    for (what, webhook, result) in [
        ("the TerraformMachine", MACHINE_DELETE, machine.map(|_| ())),
        ("the identity", IDENTITY_DELETE, identity.map(|_| ())),
    ] {
        let message = format!("{:#}", result.expect_err(what));
        assert!(
            message.contains(webhook) && message.contains("failed calling webhook"),
            "deleting {what}: {message}"
        );
    }
    machines.get("alone").await.expect("the machine is kept");
    identities
        .get(&format!("noop-{ns}"))
        .await
        .expect("the identity is kept");

    // Cluster API's own write: adopting "before" into a new Cluster (its owner reference) is
    // refused as well; its controller says so.
    apply_yaml(
        &client,
        &format!(
            r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {{name: before, namespace: {ns}}}
spec:
  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: TerraformCluster, name: before}}
"#
        ),
    )
    .await
    .expect("a Cluster (not ours: no webhook of ours)");
    wait(
        env,
        "the Cluster API controller refused by our webhook",
        || async {
            let log = install::kubectl(
                env,
                &[
                    "logs",
                    "-n",
                    "capi-system",
                    "-l",
                    "cluster.x-k8s.io/provider=cluster-api",
                    "--tail=-1",
                ],
            )?;
            Ok(log
                .lines()
                .any(|l| l.contains(WEBHOOK) && l.contains(&ns))
                .then_some(()))
        },
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let owners = api
        .get("before")
        .await
        .expect("before")
        .metadata
        .owner_references;
    assert!(
        owners.unwrap_or_default().is_empty(),
        "adopted while no webhook answered"
    );

    // Back up: the writes pass, and Cluster API's adoption lands.
    drop(restore);
    available(&client, NAMESPACE, DEPLOYMENT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", crate::logs(env)));
    wait(env, "a create accepted again", || async {
        Ok(apply_yaml(&client, &cluster(&ns, "after")).await.ok())
    })
    .await;
    api.patch(
        "before",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"labels": {"updated": "yes"}}})),
    )
    .await
    .expect("an update accepted again");
    machines
        .delete("alone", &DeleteParams::default())
        .await
        .expect("a delete accepted again");
    wait(
        env,
        "Cluster API's owner reference on the TerraformCluster",
        || async {
            let owners = api.get("before").await?.metadata.owner_references;
            Ok(owners
                .unwrap_or_default()
                .iter()
                .any(|o| o.kind == "Cluster" && o.name == "before")
                .then_some(()))
        },
    )
    .await;
}
