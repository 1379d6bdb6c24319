//! TerraformClusterIdentity status, from a manager that watches every namespace (a manager
//! scoped with `--namespace` leaves it alone): `Ready` follows the credentials Secret, events
//! mark its transitions, and `status.namespaces` lists where the credentials are mirrored.

use captf_api::{TerraformCluster, TerraformClusterIdentity};
use captf_e2e::fixture::*;
use captf_e2e::{Manager, apply_yaml, manager_kubeconfig};
use captf_testenv::wait_for;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

fn namespaces(identity: &TerraformClusterIdentity) -> Vec<String> {
    identity
        .status
        .as_ref()
        .and_then(|s| s.namespaces.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn identity_status_follows_its_secret_and_its_mirrors() {
    let (env, client, ns) = namespace_with_identity("identity").await;
    let kubeconfig = manager_kubeconfig(&env, &client)
        .await
        .expect("manager RBAC");
    // No --namespace: this test binary's control plane is this test's alone.
    let manager = Manager::start(&env, &kubeconfig, "identities", &[]).expect("manager");
    let identities: Api<TerraformClusterIdentity> = Api::all(client.clone());
    let identity = format!("noop-{ns}");

    let found = wait_until(&identities, &identity, "Ready", &manager, |i| {
        has(i, "Ready", "True", "SecretFound")
    })
    .await;
    assert!(namespaces(&found).is_empty(), "no mirror before a user");

    // A cluster that uses it gets the mirror, and the identity lists the namespace.
    create_cluster(&client, &ns, "user", IMAGE, "").await;
    let clusters: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait_until(&clusters, "user", "Ready", &manager, ready).await;
    wait_until(
        &identities,
        &identity,
        "the namespace listed",
        &manager,
        |i| namespaces(i) == [ns.clone()],
    )
    .await;

    // Revoked: the identity stops allowing the namespace. The user's next pass (an annotation
    // wakes it now rather than at --sync-period) deletes the mirror and says why, and the
    // identity stops listing the namespace.
    let mirror = captf_api::names::credential_mirror(&identity);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    assert!(
        secrets.get_opt(&mirror).await.expect("read").is_some(),
        "the mirror before the revocation"
    );
    apply_yaml(
        &client,
        &format!(
            "apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: TerraformClusterIdentity\nmetadata: {{name: {identity}}}\nspec:\n  secretRef: {{name: noop-credentials, namespace: captf-system}}\n  allowedNamespaces: {{list: [elsewhere]}}\n"
        ),
    )
    .await
    .expect("identity narrowed");
    clusters
        .patch(
            "user",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"metadata": {"annotations": {"e2e.captf.io/wake": "revoked"}}}),
            ),
        )
        .await
        .expect("annotate");
    let blocked = wait_until(&clusters, "user", "NamespaceNotAllowed", &manager, |c| {
        has(c, "IdentityAllowed", "False", "NamespaceNotAllowed")
    })
    .await;
    wait_for("the mirror deleted", TIMEOUT, || async {
        Ok(secrets.get_opt(&mirror).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{blocked:?}\nmanager log:\n{}", manager.log()));
    // Counted for the refusal, not for every pass it holds: a pass decides each time.
    let denied =
        |metrics: &str| sample(metrics, "captf_identity_denied_total{reason=\"namespace\"}");
    let passes = |metrics: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("captf_reconcile_op_decisions_total{kind=\"TerraformCluster\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    // Once, though a pass may start from a cached object that does not show the refusal yet;
    // the passes after it, never.
    let metrics = Manager::get(&manager.metrics).expect("metrics");
    let refused = denied(&metrics);
    assert_eq!(refused, Some(1.0), "{metrics}");
    let before = passes(&metrics);
    clusters
        .patch(
            "user",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"metadata": {"annotations": {"e2e.captf.io/wake": "again"}}}),
            ),
        )
        .await
        .expect("annotate");
    let metrics = wait_for("another pass of the refused cluster", TIMEOUT, || async {
        let metrics = Manager::get(&manager.metrics)?;
        Ok((passes(&metrics) > before).then_some(metrics))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    assert_eq!(denied(&metrics), refused, "{metrics}");
    let removed = event(&client, &ns, "MirrorRemoved").await;
    let note = removed.note.unwrap_or_default();
    assert!(
        note.contains(&mirror) && note.contains("no longer allows"),
        "{note}"
    );
    wait_until(
        &identities,
        &identity,
        "no namespace listed",
        &manager,
        |i| namespaces(i).is_empty(),
    )
    .await;

    // An identity whose Secret does not exist yet: not Ready, with a Warning; then found.
    let late = format!("late-{ns}");
    apply_yaml(
        &client,
        &format!(
            "apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1\nkind: TerraformClusterIdentity\nmetadata: {{name: {late}}}\nspec:\n  secretRef: {{name: {late}, namespace: captf-system}}\n"
        ),
    )
    .await
    .expect("identity");
    let missing = wait_until(&identities, &late, "SecretNotFound", &manager, |i| {
        has(i, "Ready", "False", "SecretNotFound")
    })
    .await;
    let (_, _, message) = condition(&missing, "Ready").expect("condition");
    assert!(
        message.contains(&format!("captf-system/{late}")),
        "{message}"
    );
    event(&client, "default", "IdentitySecretNotFound").await;
    apply_yaml(
        &client,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {late}, namespace: captf-system}}\nstringData: {{TOKEN: x}}\n"
        ),
    )
    .await
    .expect("Secret");
    wait_until(&identities, &late, "SecretFound", &manager, |i| {
        has(i, "Ready", "True", "SecretFound")
    })
    .await;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    wait_for("an IdentitySecretFound event", TIMEOUT, || async {
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("IdentitySecretFound")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(late.as_str())
            }))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
}
