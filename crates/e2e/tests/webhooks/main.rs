//! The admission webhooks through the real API server: `config/webhook`'s
//! ValidatingWebhookConfiguration, pointed at a manager that is not the leader, rejects each bad
//! input with a message naming the field and the fix, lets valid objects through, and keeps
//! working when the serving certificate is rotated on disk; variables are held to the schema the
//! module image publishes in a real registry (variables.rs), and to their size limits; a
//! deleting object's Job policy is held to the rules like a live one's (deleting.rs).

mod deleting;
mod variables;

use captf_e2e::fixture::{TIMEOUT, namespace_with_identity};
use captf_e2e::webhooks::{ROUTE, Registered, configuration, write_certificate};
use captf_e2e::{
    Manager, apply_yaml, manager_kubeconfig, served_certificate, service_account_token,
};
use captf_testenv::{TestEnv, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

const GROUP: &str = "infrastructure.cluster.x-k8s.io";
const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1alpha1", kind), plural)
}

/// The message of a refused request.
fn refusal<T: std::fmt::Debug>(result: kube::Result<T>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(e)) => (e.code, e.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn assert_refused<T: std::fmt::Debug>(result: kube::Result<T>, code: u16, parts: &[&str]) {
    let (got, message) = refusal(result);
    assert_eq!(got, code, "{message}");
    for part in parts {
        assert!(message.contains(part), "{part:?} not in: {message}");
    }
}

async fn create(
    api: &Api<DynamicObject>,
    object: serde_json::Value,
) -> kube::Result<DynamicObject> {
    let object: DynamicObject = serde_json::from_value(object).expect("object");
    api.create(&PostParams::default(), &object).await
}

fn der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("PEM")
        .to_vec()
}

async fn leader(client: &kube::Client, lease: &str) -> String {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "captf-system");
    wait_for("a leader", TIMEOUT, || async {
        Ok(leases
            .get_opt(lease)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty()))
    })
    .await
    .expect("leader")
}

#[tokio::test]
async fn the_api_server_asks_the_standby_and_every_bad_input_is_named() {
    let (env, client, ns) = namespace_with_identity("webhooks").await;
    let kubeconfig = manager_kubeconfig(&env, &client).await.expect("RBAC");

    // Two replicas with election; neither reconciles anything here (the watch filter matches
    // no object), so every effect below is admission's.
    let dir = |n: &str| {
        let d = env.dir.join(format!("webhook-{ns}-{n}"));
        std::fs::create_dir_all(&d).expect("cert dir");
        d
    };
    let lease = format!("captf-e2e-{ns}");
    let names = [format!("{ns}-a"), format!("{ns}-b")];
    let ports = [
        captf_testenv::process::free_port().expect("port"),
        captf_testenv::process::free_port().expect("port"),
    ];
    let dirs = [dir("a"), dir("b")];
    let managers: Vec<Manager> = (0..2)
        .map(|i| {
            let flags = [
                format!("--namespace={ns}"),
                "--watch-filter=none-of-these".to_owned(),
                "--leader-elect".to_owned(),
                format!("--leader-elect-lease-name={lease}"),
                format!("--webhook-port={}", ports[i]),
                format!("--webhook-cert-dir={}", dirs[i].display()),
            ];
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            Manager::start(&env, &kubeconfig, &names[i], &flags).expect("manager")
        })
        .collect();

    // Without a certificate a replica is not ready, and says why.
    let readyz = |i: usize| format!("{}/readyz", managers[i].health);
    let not_ready = wait_for(
        "readyz to name the missing certificate",
        TIMEOUT,
        || async {
            Ok(Manager::get(&readyz(0))
                .ok()
                .filter(|b| b.contains("no certificate")))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", managers[0].log()));
    assert!(not_ready.contains("webhook server"), "{not_ready}");
    let pems = [write_certificate(&dirs[0]), write_certificate(&dirs[1])];
    for (i, manager) in managers.iter().enumerate() {
        wait_for("readyz ok once the certificate exists", TIMEOUT, || async {
            Ok(Manager::get(&readyz(i)).ok().filter(|b| b.trim() == "ok"))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", manager.log()));
    }

    // The API server calls the replica that does not lead.
    let holder = leader(&client, &lease).await;
    let standby = names
        .iter()
        .position(|n| holder != format!("manager-{n}"))
        .expect("a standby");
    let port = ports[standby];
    let vwc_name = format!("captf-e2e-{ns}");
    apply_yaml(
        &client,
        &serde_json::to_string(&configuration(&vwc_name, &ns, port, &pems[standby])).expect("json"),
    )
    .await
    .expect("webhook configuration");
    let _registered = Registered {
        kubeconfig: env.kubeconfig().to_owned(),
        name: vwc_name.clone(),
    };

    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &resource("TerraformCluster", "terraformclusters"),
    );
    let cluster = |name: &str, extra: serde_json::Value| {
        let mut spec =
            json!({"source": {"image": IMAGE}, "identityRef": {"name": format!("noop-{ns}")}});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        json!({
            "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "TerraformCluster",
            "metadata": {"name": name, "namespace": ns}, "spec": spec
        })
    };
    // The configuration takes a moment to reach the API server's admission chain: retry
    // the first bad create until our webhook answers it.
    let bad_jobs = json!({"jobs": {
        "env": [{"name": "TF_LOG", "value": "DEBUG"}],
        "securityContext": {"privileged": true}
    }});
    let (code, message) = wait_for(
        "the webhook to refuse a bad TerraformCluster",
        TIMEOUT,
        || async {
            match create(&clusters, cluster("bad-jobs", bad_jobs.clone())).await {
                Ok(_) => {
                    let _ = clusters.delete("bad-jobs", &DeleteParams::default()).await;
                    Ok(None)
                }
                Err(kube::Error::Api(e)) => Ok(Some((e.code, e.message))),
                Err(e) => Err(e.into()),
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", managers[standby].log()));
    assert_eq!(code, 422, "{message}");
    for part in [
        "spec.jobs.env[0].name",
        "the name is reserved",
        "spec.jobs.securityContext.privileged",
        "the Job container holds cloud credentials and may not run privileged",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }

    let mut long_retry = cluster("long-retry", json!({}));
    long_retry["metadata"]["annotations"] = json!({"captf.io/retry": "x".repeat(64)});
    assert_refused(
        create(&clusters, long_retry).await,
        422,
        &["metadata.annotations[\"captf.io/retry\"]", "at most 63"],
    );
    assert_refused(
        create(
            &clusters,
            cluster("bad-image", json!({"source": {"image": "Not An Image"}})),
        )
        .await,
        422,
        &["spec.source.image", "write [registry/]repository[:tag]"],
    );
    assert_refused(
        create(
            &clusters,
            cluster(
                "bad-variables",
                json!({"variables": {"captf_cluster": "x", "count": 1}}),
            ),
        )
        .await,
        422,
        &[
            "spec.variables[\"captf_cluster\"]",
            "spec.variables[\"count\"]",
            "(value omitted)",
        ],
    );
    // Variables over their limits: named with the limit, measured before they are parsed.
    assert_refused(
        create(
            &clusters,
            cluster(
                "big-variables",
                json!({"variables": {"zones": vec!["a"; 10_000]}}),
            ),
        )
        .await,
        422,
        &[
            "TerraformCluster.infrastructure.cluster.x-k8s.io \"big-variables\" is invalid",
            "spec.variables: Too many: 10001 values, at most 10000",
            "move large values to a ConfigMap or Secret named in spec.variablesFrom",
        ],
    );
    assert_refused(
        create(
            &clusters,
            cluster(
                "bad-timing",
                json!({"jobs": {"activeDeadlineSeconds": 200}}),
            ),
        )
        .await,
        422,
        &[
            "spec.jobs.activeDeadlineSeconds",
            "above the default lock timeout",
        ],
    );
    // A valid cluster passes; its endpoint, once complete, stays.
    create(
        &clusters,
        cluster(
            "good",
            json!({"controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443}}),
        ),
    )
    .await
    .expect("a valid TerraformCluster is admitted");
    assert_refused(
        clusters
            .patch(
                "good",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"controlPlaneEndpoint": {"host": "10.0.0.2"}}})),
            )
            .await,
        422,
        &["spec.controlPlaneEndpoint", "immutable"],
    );

    // Machines: immutable module, providerID set once and only by the manager's own user.
    let machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &resource("TerraformMachine", "terraformmachines"),
    );
    create(&machines, json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "TerraformMachine",
        "metadata": {"name": "tm", "namespace": ns, "labels": {"cluster.x-k8s.io/cluster-name": "c"}},
        "spec": {"source": {"image": IMAGE}, "variables": {"size": "small"}}
    }))
    .await
    .expect("a valid TerraformMachine is admitted");
    assert_refused(
        machines
            .patch(
                "tm",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"variables": {"size": "large"}}})),
            )
            .await,
        422,
        &["spec.variables", "immutable", "roll its MachineDeployment"],
    );
    let set_id = Patch::Merge(json!({"spec": {"providerID": "noop://tm"}}));
    assert_refused(
        machines.patch("tm", &PatchParams::default(), &set_id).await,
        422,
        &[
            "spec.providerID",
            "only the provider's controller (system:serviceaccount:captf-system:captf-controller-manager)",
        ],
    );
    let as_manager = captf_testenv::client_from_kubeconfig(&kubeconfig)
        .await
        .expect("manager client");
    let manager_machines: Api<DynamicObject> = Api::namespaced_with(
        as_manager,
        &ns,
        &resource("TerraformMachine", "terraformmachines"),
    );
    manager_machines
        .patch("tm", &PatchParams::default(), &set_id)
        .await
        .expect("the manager's own user sets providerID");
    assert_refused(
        manager_machines
            .patch(
                "tm",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"providerID": "noop://other"}})),
            )
            .await,
        422,
        &["providerID can only be set once"],
    );
    // Jobs stay mutable.
    machines
        .patch(
            "tm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"jobs": {"activeDeadlineSeconds": 900}}})),
        )
        .await
        .expect("jobs are mutable");

    // The delete guard: a TerraformMachine still named by a Machine goes through the Machine.
    let capi_machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Machine"),
            "machines",
        ),
    );
    create(
        &capi_machines,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m", "namespace": ns},
            "spec": {
                "clusterName": "c",
                "bootstrap": {"dataSecretName": "none"},
                "infrastructureRef": {"apiGroup": GROUP, "kind": "TerraformMachine", "name": "tm"}
            }
        }),
    )
    .await
    .expect("CAPI Machine");
    assert_refused(
        machines.delete("tm", &DeleteParams::default()).await,
        403,
        &["delete the Machine m instead", "skips drain"],
    );
    capi_machines
        .delete("m", &DeleteParams::default())
        .await
        .expect("Machine deleted");
    wait_for("the Machine to go", TIMEOUT, || async {
        Ok(capi_machines.get_opt("m").await?.is_none().then_some(()))
    })
    .await
    .expect("Machine gone");
    machines
        .delete("tm", &DeleteParams::default())
        .await
        .expect("without its Machine the TerraformMachine may go");

    // Templates: frozen, except for ClusterClass topology dry-runs.
    let templates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &resource("TerraformMachineTemplate", "terraformmachinetemplates"),
    );
    create(
        &templates,
        json!({
            "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "TerraformMachineTemplate",
            "metadata": {"name": "tmt", "namespace": ns},
            "spec": {"template": {"spec": {"source": {"image": IMAGE}}}}
        }),
    )
    .await
    .expect("template");
    let newer = json!({"spec": {"template": {"spec": {"source": {"image": "captf.local/modules/noop-machine:v2"}}}}});
    assert_refused(
        templates
            .patch("tmt", &PatchParams::default(), &Patch::Merge(newer.clone()))
            .await,
        422,
        &[
            "spec.template.spec",
            "immutable",
            "create a new TerraformMachineTemplate",
        ],
    );
    assert_refused(
        templates
            .patch(
                "tmt",
                &PatchParams::default().dry_run(),
                &Patch::Merge(newer.clone()),
            )
            .await,
        422,
        &["spec.template.spec"],
    );
    let mut topology = newer.clone();
    topology["metadata"] = json!({"annotations": {"topology.cluster.x-k8s.io/dry-run": ""}});
    let dry = templates
        .patch(
            "tmt",
            &PatchParams::default().dry_run(),
            &Patch::Merge(topology),
        )
        .await
        .expect("a topology dry-run may change the template");
    assert_eq!(
        dry.data["spec"]["template"]["spec"]["source"]["image"],
        "captf.local/modules/noop-machine:v2"
    );
    let stored = templates.get("tmt").await.expect("template");
    assert_eq!(
        stored.data["spec"]["template"]["spec"]["source"]["image"], IMAGE,
        "a dry run stores nothing"
    );

    // Identities: the author must be able to read the Secret; an identity in use stays.
    let identities: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource("TerraformClusterIdentity", "terraformclusteridentities"),
    );
    let identity = |name: &str, allowed: serde_json::Value| {
        json!({
            "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "TerraformClusterIdentity",
            "metadata": {"name": name, "labels": {ROUTE: ns}},
            "spec": {"secretRef": {"name": "noop-credentials", "namespace": "captf-system"}, "allowedNamespaces": allowed}
        })
    };
    assert_refused(
        create(&identities, identity(&format!("ambiguous-{ns}"), json!({}))).await,
        422,
        &["spec.allowedNamespaces", "selector: {}"],
    );
    let author = author_without_secret_access(&env, &client, &ns).await;
    let author_identities: Api<DynamicObject> = Api::all_with(
        author,
        &resource("TerraformClusterIdentity", "terraformclusteridentities"),
    );
    assert_refused(
        create(
            &author_identities,
            identity(&format!("stolen-{ns}"), json!({"list": [ns]})),
        )
        .await,
        422,
        &[
            "spec.secretRef",
            &format!(
                "user \"system:serviceaccount:{ns}:author\" may not get Secret captf-system/noop-credentials"
            ),
        ],
    );
    let used = format!("used-{ns}");
    create(&identities, identity(&used, json!({"list": [ns]})))
        .await
        .expect("an admin may reference a Secret it can read");
    create(&clusters, {
        let mut c = cluster("user", json!({}));
        c["spec"]["identityRef"]["name"] = json!(used);
        c
    })
    .await
    .expect("cluster using the identity");
    assert_refused(
        identities.delete(&used, &DeleteParams::default()).await,
        403,
        &[
            &format!("is in use by TerraformCluster {ns}/user"),
            "delete those objects first",
        ],
    );
    clusters
        .delete("user", &DeleteParams::default())
        .await
        .expect("cluster deleted");
    wait_for("the cluster to go", TIMEOUT, || async {
        Ok(clusters.get_opt("user").await?.is_none().then_some(()))
    })
    .await
    .expect("cluster gone");
    identities
        .delete(&used, &DeleteParams::default())
        .await
        .expect("an unused identity may go");

    // A rotated certificate is served without a restart, and the API server, given the new
    // CA, keeps calling the webhook.
    let old = der(&pems[standby]);
    let rotated = write_certificate(&dirs[standby]);
    let new = der(&rotated);
    assert_ne!(old, new);
    wait_for("the rotated certificate to be served", TIMEOUT, || async {
        Ok(served_certificate(port)
            .ok()
            .filter(|served| *served == new)
            .map(|_| ()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", managers[standby].log()));
    apply_yaml(
        &client,
        &serde_json::to_string(&configuration(&vwc_name, &ns, port, &rotated)).expect("json"),
    )
    .await
    .expect("webhook configuration with the new CA");
    wait_for(
        "the webhook to answer with its new certificate",
        TIMEOUT,
        || async {
            match create(
                &clusters,
                cluster(
                    "after-rotation",
                    json!({"source": {"image": "Still Not An Image"}}),
                ),
            )
            .await
            {
                Err(kube::Error::Api(e))
                    if e.code == 422 && e.message.contains("spec.source.image") =>
                {
                    Ok(Some(()))
                }
                Ok(_) => {
                    let _ = clusters
                        .delete("after-rotation", &DeleteParams::default())
                        .await;
                    Ok(None)
                }
                Err(_) => Ok(None),
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", managers[standby].log()));
}

/// A ServiceAccount `author` that may create identities but not read the credentials Secret.
async fn author_without_secret_access(
    env: &TestEnv,
    client: &kube::Client,
    ns: &str,
) -> kube::Client {
    apply_yaml(
        client,
        &format!(
            r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: author, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: captf-e2e-author-{ns}}}
rules:
- apiGroups: [{GROUP}]
  resources: [terraformclusteridentities]
  verbs: [create, get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: captf-e2e-author-{ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: captf-e2e-author-{ns}}}
subjects:
- {{kind: ServiceAccount, name: author, namespace: {ns}}}
"#
        ),
    )
    .await
    .expect("author RBAC");
    let token = service_account_token(client, ns, "author")
        .await
        .expect("token");
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(env.kubeconfig()).expect("kubeconfig"),
        &Default::default(),
    )
    .await
    .expect("config");
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    kube::Client::try_from(config).expect("author client")
}
