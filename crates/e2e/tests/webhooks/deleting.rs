//! A deleting object's Job policy is held to the rules like a live one's: after `kubectl
//! delete` the destroy Jobs of a cluster and of its machines run with it.

use captf_e2e::fixture::{TIMEOUT, namespace_with_identity};
use captf_e2e::manager_kubeconfig;
use captf_e2e::webhooks::manager_with_webhooks;
use captf_testenv::wait_for;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::json;

use super::{GROUP, IMAGE, assert_refused, create, resource};

/// A finalizer of the test's own: the manager here reconciles nothing (`--watch-filter`), so
/// this alone holds each object in its deleting state.
const HOLD: &str = "captf-e2e.example.com/hold";

/// Each workload kind, deleted and held by a finalizer: an update that weakens its Job policy
/// (`spec.jobs`, and a cluster's `spec.defaults.jobs`, which its machines' destroy Jobs
/// inherit) is refused naming every field and the fix; a policy change that weakens nothing
/// and the finalizer's removal go through.
#[tokio::test]
async fn a_deleting_objects_job_policy_cannot_be_weakened() {
    let (env, client, ns) = namespace_with_identity("deleting-policy").await;
    let kubeconfig = manager_kubeconfig(&env, &client).await.expect("RBAC");
    let (manager, _registered) = manager_with_webhooks(
        &env,
        &client,
        &kubeconfig,
        &ns,
        &["--watch-filter=none-of-these"],
    )
    .await;
    let object = |kind: &str, name: &str, spec: serde_json::Value| {
        json!({
            "apiVersion": format!("{GROUP}/v1alpha1"), "kind": kind,
            "metadata": {"name": name, "namespace": ns, "finalizers": [HOLD]},
            "spec": spec
        })
    };
    let kinds = [
        (
            "TerraformCluster",
            "terraformclusters",
            json!({"source": {"image": IMAGE}, "identityRef": {"name": format!("noop-{ns}")}}),
        ),
        (
            "TerraformMachine",
            "terraformmachines",
            json!({"source": {"image": IMAGE}}),
        ),
        (
            "TerraformMachinePool",
            "terraformmachinepools",
            json!({"source": {"image": IMAGE}}),
        ),
    ];
    let apis: Vec<(&str, Api<DynamicObject>, serde_json::Value)> = kinds
        .into_iter()
        .map(|(kind, plural, spec)| {
            (
                kind,
                Api::namespaced_with(client.clone(), &ns, &resource(kind, plural)),
                spec,
            )
        })
        .collect();

    // The configuration takes a moment to reach the API server's admission chain: retry a
    // bad create until the webhook answers it.
    let (_, clusters, cluster_spec) = &apis[0];
    let mut bad = cluster_spec.clone();
    bad["jobs"] = json!({"securityContext": {"runAsUser": 0}});
    wait_for("the webhook to refuse runAsUser 0", TIMEOUT, || async {
        match create(clusters, object("TerraformCluster", "probe", bad.clone())).await {
            Ok(_) => {
                let _ = clusters
                    .patch(
                        "probe",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
                let _ = clusters.delete("probe", &DeleteParams::default()).await;
                Ok(None)
            }
            Err(kube::Error::Api(e)) if e.code == 422 => Ok(Some(())),
            Err(e) => Err(e.into()),
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", manager.log()));

    let weakened = json!({
        "securityContext": {
            "runAsUser": 0,
            "privileged": true,
            "seLinuxOptions": {"type": "spc_t"}
        },
        "podSecurityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}
    });
    let refused_fields = |at: &str| -> Vec<String> {
        [
            "securityContext.privileged",
            "securityContext.runAsUser",
            "securityContext.seLinuxOptions.type",
            "podSecurityContext.sysctls[0].name",
        ]
        .iter()
        .map(|f| format!("{at}.{f}"))
        .collect()
    };
    for (kind, api, spec) in &apis {
        let name = "held";
        create(api, object(kind, name, spec.clone()))
            .await
            .unwrap_or_else(|e| panic!("create the {kind}: {e}"));
        api.delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete the {kind}: {e}"));
        let deleting = api.get(name).await.expect("the held object");
        assert!(
            deleting.metadata.deletion_timestamp.is_some(),
            "{kind}: held by {HOLD}, so deleting"
        );

        let mut paths = vec!["spec.jobs"];
        if *kind == "TerraformCluster" {
            paths.push("spec.defaults.jobs");
        }
        for at in paths {
            let patch = match at {
                "spec.jobs" => json!({"spec": {"jobs": weakened}}),
                _ => json!({"spec": {"defaults": {"jobs": weakened}}}),
            };
            let fields = refused_fields(at);
            let mut parts: Vec<&str> = fields.iter().map(String::as_str).collect();
            parts.extend([
                "may not run privileged; remove the field or set it to false",
                "use a non-zero uid such as 65532",
                "may only use the container SELinux types",
                "may only set the baseline's safe sysctls",
            ]);
            assert_refused(
                api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await,
                422,
                &parts,
            );
        }

        // A change that weakens nothing is still allowed while deleting.
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"jobs": {"activeDeadlineSeconds": 900}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{kind}: a harmless policy change: {e}"));
        let stored = api.get(name).await.expect("the held object");
        assert_eq!(
            stored.data["spec"]["jobs"],
            json!({"activeDeadlineSeconds": 900}),
            "{kind}: nothing weakened was stored"
        );

        // And the finalizer's removal, which changes no policy, lets it go.
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{kind}: removing the finalizer: {e}"));
        wait_for(&format!("the {kind} to go"), TIMEOUT, || async {
            Ok(api.get_opt(name).await?.is_none().then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", manager.log()));
    }
}
