//! Variables held to the schema the module image publishes in a real registry.

use captf_e2e::fixture::{TIMEOUT, namespace_with_identity};
use captf_e2e::registry::TestRegistry;
use captf_e2e::webhooks::manager_with_webhooks;
use captf_e2e::{apply_yaml, manager_kubeconfig};
use captf_testenv::wait_for;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{GROUP, assert_refused, create, resource};

/// Inline variables against the `io.captf.variables-schema` label of the module image, read
/// from a real registry through the object's image pull Secrets (a machine's include its
/// cluster's): refused with every problem named and no value echoed when the image publishes
/// a schema; let through, checked by name only, when the label is absent or broken, when the
/// registry refuses the webhook, or when it is down.
#[tokio::test]
async fn variables_must_fit_the_schema_the_image_publishes() {
    let (env, client, ns) = namespace_with_identity("varschema").await;
    let kubeconfig = manager_kubeconfig(&env, &client).await.expect("RBAC");
    let registry = TestRegistry::start(&env, &ns).await.expect("registry");
    let schema = json!({
        "type": "object", "additionalProperties": false, "required": ["region"],
        "properties": {
            "region": {"type": "string"},
            "size": {"type": "number"},
            "zones": {"type": "array", "items": {"type": "string"}}
        }
    })
    .to_string();
    let push = |tag: &str, labels: &[(&str, &str)]| {
        registry
            .push(&format!("modules/cluster:{tag}"), labels)
            .unwrap_or_else(|e| panic!("push {tag}: {e}"))
    };
    let with_schema = push("schema", &[("io.captf.variables-schema", &schema)]);
    // Read once per namespace and image, whoever asks: this one is only ever asked for
    // without credentials, which the registry refuses.
    let private = push("private", &[("io.captf.variables-schema", &schema)]);
    let without = push("plain", &[]);
    let broken = push(
        "broken",
        &[("io.captf.variables-schema", r#"{"type":"list"}"#)],
    );
    let down = format!(
        "127.0.0.1:{}/modules/cluster:gone",
        captf_testenv::process::free_port().expect("port")
    );
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    let pull_secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": registry.docker_config()},
    }))
    .expect("Secret");
    secrets
        .create(&PostParams::default(), &pull_secret)
        .await
        .expect("pull Secret");

    let (manager, _registered) = manager_with_webhooks(
        &env,
        &client,
        &kubeconfig,
        &ns,
        &["--watch-filter=none-of-these"],
    )
    .await;

    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &resource("TerraformCluster", "terraformclusters"),
    );
    let cluster = |name: &str, image: &str, pull: bool, variables: serde_json::Value| {
        let mut spec = json!({
            "source": {"image": image},
            "identityRef": {"name": format!("noop-{ns}")},
            "variables": variables,
        });
        if pull {
            spec["jobs"] = json!({"imagePullSecrets": [{"name": "registry"}]});
        }
        json!({
            "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "TerraformCluster",
            "metadata": {"name": name, "namespace": ns}, "spec": spec
        })
    };
    const SECRET_VALUE: &str = "s3cr3t-looking-size";
    let bad = json!({"size": SECRET_VALUE, "instnce_type": "m5", "zones": ["a", 1, ["b"]]});
    // The configuration takes a moment to reach the API server's admission chain.
    let message = wait_for(
        "the webhook to refuse variables the schema does not take",
        TIMEOUT,
        || async {
            match create(&clusters, cluster("bad", &with_schema, true, bad.clone())).await {
                Ok(_) => {
                    let _ = clusters.delete("bad", &DeleteParams::default()).await;
                    Ok(None)
                }
                Err(kube::Error::Api(e)) if e.code == 422 => Ok(Some(e.message)),
                Err(e) => Err(e.into()),
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", manager.log()));
    for part in [
        "spec.variables: Invalid value: variable \"instnce_type\" is not declared by the module",
        "variable \"size\" must be a number, got a string",
        "variable \"zones\"[2] must be a string, got an array",
        &format!("by the io.captf.variables-schema label of {with_schema}"),
        "point spec.source.image at a module that takes it",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    assert!(!message.contains(SECRET_VALUE), "{message}");

    // Variables that fit pass; `region` is required but may come from a variablesFrom source,
    // which the webhook does not read.
    let good = json!({"size": "3", "zones": ["a"]});
    create(&clusters, cluster("good", &with_schema, true, good))
        .await
        .expect("variables that fit the schema are admitted");
    assert_refused(
        clusters
            .patch(
                "good",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"variables": {"size": [3]}}})),
            )
            .await,
        422,
        &[
            "spec.variables",
            "variable \"size\" must be a number, got an array",
        ],
    );
    // An update that leaves variables and image alone does not consult the schema.
    clusters
        .patch(
            "good",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .expect("an unrelated update is admitted");

    // A template is held to the same schema, at its own path.
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &resource("TerraformMachineTemplate", "terraformmachinetemplates"),
    );
    assert_refused(
        create(
            &templates,
            json!({
                "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "TerraformMachineTemplate",
                "metadata": {"name": "bad", "namespace": ns},
                "spec": {"template": {"spec": {
                    "source": {"image": with_schema},
                    "jobs": {"imagePullSecrets": [{"name": "registry"}]},
                    "variables": {"disk": 1}
                }}}
            }),
        )
        .await,
        422,
        &[
            "TerraformMachineTemplate",
            "spec.template.spec.variables",
            "variable \"disk\" is not declared by the module",
            "point spec.template.spec.source.image at",
        ],
    );

    // No schema to be had: the variables are checked by name only, and the write goes through.
    for (name, image, pull) in [
        ("anonymous", &private, false),
        ("plain", &without, true),
        ("broken", &broken, true),
        ("down", &down, true),
    ] {
        create(&clusters, cluster(name, image, pull, bad.clone()))
            .await
            .unwrap_or_else(|e| panic!("{name}: no schema refuses nothing: {e}"));
    }
    // A machine that names no pull Secret of its own reads the schema with those its cluster
    // passes down (`good` names one in spec.jobs), found through its cluster-name label and the
    // CAPI Cluster; the failed anonymous read of the same image does not answer for them.
    apply_yaml(
        &client,
        &format!(
            r#"
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {{name: good, namespace: {ns}}}
spec:
  infrastructureRef: {{apiGroup: {GROUP}, kind: TerraformCluster, name: good}}
"#
        ),
    )
    .await
    .expect("Cluster");
    let machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &resource("TerraformMachine", "terraformmachines"),
    );
    let machine = |name: &str, cluster: Option<&str>| {
        let labels = match cluster {
            Some(cluster) => json!({"cluster.x-k8s.io/cluster-name": cluster}),
            None => json!({}),
        };
        json!({
            "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "TerraformMachine",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"source": {"image": private}, "variables": {"disk": 1}}
        })
    };
    // No cluster to inherit from, or one that does not exist yet: the machine's own Secrets,
    // none, cannot read the image (the anonymous read above is remembered), and the write goes
    // through.
    for (name, cluster) in [("alone", None), ("early", Some("later"))] {
        create(&machines, machine(name, cluster))
            .await
            .unwrap_or_else(|e| panic!("{name}: no schema refuses nothing: {e}"));
    }
    assert_refused(
        create(&machines, machine("inherits", Some("good"))).await,
        422,
        &[
            "TerraformMachine",
            "spec.variables",
            "variable \"disk\" is not declared by the module",
            &format!("by the io.captf.variables-schema label of {private}"),
        ],
    );

    let log = manager.whole_log();
    for part in [
        "variables schema not checkable",
        "io.captf.variables-schema is not a variables schema",
        "captf lint schema",
    ] {
        assert!(
            log.contains(part),
            "{part:?} not in the manager's log:\n{log}"
        );
    }
    assert!(
        !log.contains(SECRET_VALUE),
        "a variable's value reached the log"
    );
}
