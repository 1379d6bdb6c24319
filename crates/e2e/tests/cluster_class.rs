//! A ClusterClass on CAPTF's templates under the real Cluster API topology controller, with
//! CAPTF's admission webhooks in the loop. The control plane and the bootstrap configs are
//! stand-in kinds this test defines and answers for (no control-plane or bootstrap provider is
//! built for the test control plane): the topology controller only clones them and reads their
//! status.
//!
//! The topology controller clones the TerraformCluster from its template with the identity a
//! class patch supplies, and CAPTF applies it. Once the control plane reports its version, the
//! class's workers follow: a MachineDeployment whose TerraformMachines come from a clone of the
//! worker TerraformMachineTemplate, and a MachinePool on a TerraformMachinePool cloned from the
//! TerraformMachinePoolTemplate; CAPTF provisions both. A rebase of the class re-applies the
//! cluster with the new template and rotates the control plane's TerraformMachineTemplate,
//! whose server-side-apply dry run the webhook lets through.

use captf_api::{
    TerraformCluster, TerraformMachine, TerraformMachinePool, TerraformMachineTemplate,
};
use captf_e2e::capi::CapiManager;
use captf_e2e::fixture::*;
use captf_e2e::manager_kubeconfig;
use captf_e2e::webhooks::manager_with_webhooks;
use captf_testenv::wait_for;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

const INFRA: &str = "infrastructure.cluster.x-k8s.io";
const MACHINE_IMAGE: &str = "captf.local/modules/noop-machine:e2e";
const POOL_IMAGE: &str = "captf.local/modules/noop-machinepool:e2e";
const CLONED_FROM: &str = "cluster.x-k8s.io/cloned-from-name";
/// Applies run one after the other through the test node.
const LONG: std::time::Duration = std::time::Duration::from_secs(420);

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

async fn apply(
    api: &Api<DynamicObject>,
    name: &str,
    object: serde_json::Value,
) -> kube::Result<()> {
    let params = PatchParams::apply("captf-e2e").force();
    api.patch(name, &params, &Patch::Apply(&object))
        .await
        .map(|_| ())
}

fn cluster_template(ns: &str, name: &str, flavour: &str) -> serde_json::Value {
    // No identityRef: the class patch supplies it per Cluster.
    json!({
        "apiVersion": format!("{INFRA}/v1alpha1"), "kind": "TerraformClusterTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"template": {"spec": {
            "source": {"image": CLUSTER_IMAGE},
            "variables": {"extra_exports": {"flavour": flavour}}
        }}}
    })
}

fn machine_template(ns: &str, name: &str, size: u32) -> serde_json::Value {
    json!({
        "apiVersion": format!("{INFRA}/v1alpha1"), "kind": "TerraformMachineTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"template": {"spec": {
            "source": {"image": MACHINE_IMAGE},
            "variables": {"size": size}
        }}}
    })
}

fn pool_template(ns: &str) -> serde_json::Value {
    json!({
        "apiVersion": format!("{INFRA}/v1alpha1"), "kind": "TerraformMachinePoolTemplate",
        "metadata": {"name": "pool", "namespace": ns},
        "spec": {"template": {"spec": {"source": {"image": POOL_IMAGE}}}}
    })
}

/// Answers for the stand-in bootstrap provider while it lives: every TestConfig gets the
/// bootstrap Secret as its data.
struct BootstrapProvider(tokio::task::JoinHandle<()>);

impl BootstrapProvider {
    fn start(configs: Api<DynamicObject>) -> Self {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        BootstrapProvider(tokio::spawn(async move {
            let ready = json!({"status": {
                "initialization": {"dataSecretCreated": true},
                "dataSecretName": "worker-bootstrap"
            }});
            let mut configs_seen = std::pin::pin!(
                watcher(configs.clone(), watcher::Config::default()).applied_objects()
            );
            while let Some(seen) = configs_seen.next().await {
                if let Ok(config) = seen
                    && config.data["status"]["dataSecretName"].is_null()
                {
                    let _ = configs
                        .patch_status(
                            &config.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(&ready),
                        )
                        .await;
                }
            }
        }))
    }
}

impl Drop for BootstrapProvider {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn class(ns: &str, infrastructure: &str, control_plane_machines: &str) -> serde_json::Value {
    let template_ref = |api_version: &str, kind: &str, name: &str| json!({"templateRef": {"apiVersion": api_version, "kind": kind, "name": name}});
    let infra = format!("{INFRA}/v1alpha1");
    let mut control_plane = template_ref(
        "controlplane.e2e.captf.io/v1alpha1",
        "TestControlPlaneTemplate",
        "control-plane",
    );
    control_plane["machineInfrastructure"] =
        template_ref(&infra, "TerraformMachineTemplate", control_plane_machines);
    let bootstrap = template_ref(
        "bootstrap.e2e.captf.io/v1alpha1",
        "TestConfigTemplate",
        "worker",
    );
    let workers = json!({
        "machineDeployments": [{
            "class": "default-worker",
            "bootstrap": bootstrap,
            "infrastructure": template_ref(&infra, "TerraformMachineTemplate", "worker")
        }],
        "machinePools": [{
            "class": "default-pool",
            "bootstrap": bootstrap,
            "infrastructure": template_ref(&infra, "TerraformMachinePoolTemplate", "pool")
        }]
    });
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
        "metadata": {"name": "noop", "namespace": ns},
        "spec": {
            "infrastructure": template_ref(&infra, "TerraformClusterTemplate", infrastructure),
            "controlPlane": control_plane,
            "workers": workers,
            "variables": [{
                "name": "identity", "required": true,
                "schema": {"openAPIV3Schema": {"type": "string", "minLength": 1}}
            }],
            "patches": [{
                "name": "identity",
                "definitions": [{
                    "selector": {
                        "apiVersion": infra, "kind": "TerraformClusterTemplate",
                        "matchResources": {"infrastructureCluster": true}
                    },
                    "jsonPatches": [{
                        "op": "add", "path": "/spec/template/spec/identityRef",
                        "valueFrom": {"template": "name: {{ .identity }}"}
                    }]
                }]
            }]
        }
    })
}

#[tokio::test]
async fn a_cluster_class_clones_applies_and_rebases_captf_templates() {
    let (env, client, ns) = namespace_with_identity("class").await;
    let kubeconfig = manager_kubeconfig(&env, &client).await.expect("RBAC");
    let (manager, _registered) = manager_with_webhooks(&env, &client, &kubeconfig, &ns, &[]).await;
    captf_e2e::stand_in::install(&client)
        .await
        .expect("the stand-in CRDs");
    let capi = CapiManager::start_with(
        &env,
        &client,
        &ns,
        &["--feature-gates=ClusterTopology=true"],
    )
    .await
    .expect("capi-manager");
    let logs = || {
        format!(
            "manager log:\n{}\ncapi-manager log:\n{}",
            manager.log(),
            capi.log()
        )
    };

    let api = |group: &str, version: &str, kind: &str, plural: &str| -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), &ns, &resource(group, version, kind, plural))
    };
    let infra = |kind: &str, plural: &str| api(INFRA, "v1alpha1", kind, plural);
    let cluster_templates = infra("TerraformClusterTemplate", "terraformclustertemplates");
    let machine_templates = infra("TerraformMachineTemplate", "terraformmachinetemplates");
    let cp_templates = api(
        "controlplane.e2e.captf.io",
        "v1alpha1",
        "TestControlPlaneTemplate",
        "testcontrolplanetemplates",
    );
    let control_planes = api(
        "controlplane.e2e.captf.io",
        "v1alpha1",
        "TestControlPlane",
        "testcontrolplanes",
    );
    let pool_templates = infra(
        "TerraformMachinePoolTemplate",
        "terraformmachinepooltemplates",
    );
    let config_templates = api(
        "bootstrap.e2e.captf.io",
        "v1alpha1",
        "TestConfigTemplate",
        "testconfigtemplates",
    );
    let classes = api(
        "cluster.x-k8s.io",
        "v1beta2",
        "ClusterClass",
        "clusterclasses",
    );
    let clusters = api("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters");

    // The stand-in CRDs take a moment to be served.
    wait_for("the stand-in control-plane template", TIMEOUT, || async {
        let template = json!({
            "apiVersion": "controlplane.e2e.captf.io/v1alpha1", "kind": "TestControlPlaneTemplate",
            "metadata": {"name": "control-plane", "namespace": ns},
            "spec": {"template": {"spec": {}}}
        });
        Ok(apply(&cp_templates, "control-plane", template).await.ok())
    })
    .await
    .expect("stand-in template");
    for (name, template) in [
        ("a", cluster_template(&ns, "a", "a")),
        ("b", cluster_template(&ns, "b", "b")),
    ] {
        apply(&cluster_templates, name, template)
            .await
            .expect("TerraformClusterTemplate");
    }
    for (name, size) in [("cp-a", 1), ("cp-b", 2)] {
        apply(&machine_templates, name, machine_template(&ns, name, size))
            .await
            .expect("TerraformMachineTemplate");
    }
    apply(
        &machine_templates,
        "worker",
        json!({
            "apiVersion": format!("{INFRA}/v1alpha1"), "kind": "TerraformMachineTemplate",
            "metadata": {"name": "worker", "namespace": ns},
            "spec": {"template": {"spec": {"source": {"image": MACHINE_IMAGE}}}}
        }),
    )
    .await
    .expect("worker TerraformMachineTemplate");
    apply(&pool_templates, "pool", pool_template(&ns))
        .await
        .expect("TerraformMachinePoolTemplate");
    wait_for("the stand-in bootstrap template", TIMEOUT, || async {
        let template = json!({
            "apiVersion": "bootstrap.e2e.captf.io/v1alpha1", "kind": "TestConfigTemplate",
            "metadata": {"name": "worker", "namespace": ns},
            "spec": {"template": {"spec": {}}}
        });
        Ok(apply(&config_templates, "worker", template).await.ok())
    })
    .await
    .expect("stand-in bootstrap template");
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "worker-bootstrap", "namespace": ns},
        "stringData": {"value": "#cloud-config\n", "format": "cloud-config"}
    });
    captf_e2e::apply_yaml(&client, &secret.to_string())
        .await
        .expect("bootstrap Secret");
    let _bootstrap = BootstrapProvider::start(api(
        "bootstrap.e2e.captf.io",
        "v1alpha1",
        "TestConfig",
        "testconfigs",
    ));
    apply(&classes, "noop", class(&ns, "a", "cp-a"))
        .await
        .expect("ClusterClass");

    // CAPI's Cluster webhook refuses a topology until the class's variables are reconciled.
    let cluster = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "topo", "namespace": ns},
        "spec": {"topology": {
            "classRef": {"name": "noop"},
            "version": "v1.34.4",
            "variables": [{"name": "identity", "value": format!("noop-{ns}")}],
            "workers": {
                "machineDeployments": [{"class": "default-worker", "name": "md", "replicas": 1}],
                "machinePools": [{"class": "default-pool", "name": "mp", "replicas": 1}]
            }
        }}
    });
    wait_for("CAPI to admit the topology Cluster", TIMEOUT, || async {
        Ok(apply(&clusters, "topo", cluster.clone()).await.ok())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));

    // The topology controller clones the TerraformCluster, with the patched identity; CAPTF
    // applies it and CAPI sees the infrastructure provisioned.
    let tcs: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let owned = ListParams::default().labels("cluster.x-k8s.io/cluster-name=topo");
    let exported = |flavour: &'static str| {
        let (tcs, owned) = (tcs.clone(), owned.clone());
        move || {
            let (tcs, owned) = (tcs.clone(), owned.clone());
            async move {
                let list = tcs.list(&owned).await?.items;
                Ok(list.into_iter().find(|tc| {
                    let exports = serde_json::to_value(tc.status.as_ref().map(|s| &s.exports))
                        .unwrap_or_default();
                    ready(tc) && exports["flavour"] == flavour
                }))
            }
        }
    };
    let tc = wait_for(
        "the cloned TerraformCluster applied from template a",
        LONG,
        exported("a"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    assert_eq!(
        tc.annotations().get(CLONED_FROM).map(String::as_str),
        Some("a")
    );
    assert_eq!(
        tc.spec
            .workspace
            .identity_ref
            .as_ref()
            .map(|i| i.name.as_str()),
        Some(format!("noop-{ns}").as_str()),
        "the class patch supplied the identity"
    );
    wait_for("the Cluster's infrastructure provisioned", LONG, || async {
        let c = clusters.get("topo").await?;
        Ok((c.data["status"]["initialization"]["infrastructureProvisioned"] == true).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));

    // Acting as the control-plane provider: the control plane is at the topology's version,
    // so the topology controller creates the workers.
    let control_plane = wait_for("the stand-in control plane", TIMEOUT, || async {
        Ok(control_planes
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .next())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    control_planes
        .patch_status(
            &control_plane.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "version": "v1.34.4",
                "initialization": {"controlPlaneInitialized": true}
            }})),
        )
        .await
        .expect("the control plane's status");

    // The MachineDeployment's TerraformMachine, cloned from the topology's clone of the worker
    // template, provisioned, and its Machine given the providerID.
    let tms: Api<TerraformMachine> = Api::namespaced(client.clone(), &ns);
    let tm = wait_for("a worker TerraformMachine provisioned", LONG, || async {
        Ok(tms
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|tm| ready(tm) && tm.spec.provider_id.is_some()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    let worker_template = tm
        .annotations()
        .get(CLONED_FROM)
        .cloned()
        .unwrap_or_default();
    let worker_clone: TerraformMachineTemplate = Api::namespaced(client.clone(), &ns)
        .get(&worker_template)
        .await
        .expect("the MachineDeployment's template clone");
    assert_eq!(
        worker_clone
            .annotations()
            .get(CLONED_FROM)
            .map(String::as_str),
        Some("worker"),
        "the topology cloned the class's worker template"
    );
    let machines = api("cluster.x-k8s.io", "v1beta2", "Machine", "machines");
    wait_for("the worker Machine's providerID", TIMEOUT, || async {
        Ok(machines
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .any(|m| m.data["spec"]["providerID"].as_str() == tm.spec.provider_id.as_deref())
            .then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));

    // The MachinePool's TerraformMachinePool, cloned from the TerraformMachinePoolTemplate.
    let pools: Api<TerraformMachinePool> = Api::namespaced(client.clone(), &ns);
    let pool = wait_for("the TerraformMachinePool provisioned", LONG, || async {
        Ok(pools
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(ready))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    assert_eq!(
        pool.annotations().get(CLONED_FROM).map(String::as_str),
        Some("pool")
    );
    let machine_pools = api("cluster.x-k8s.io", "v1beta2", "MachinePool", "machinepools");
    wait_for(
        "the MachinePool's infrastructure provisioned",
        TIMEOUT,
        || async {
            Ok(machine_pools
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .any(|mp| mp.data["status"]["initialization"]["infrastructureProvisioned"] == true)
                .then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));

    // The control plane's machines get their own clone of cp-a.
    let machine_clones = |from: &'static str| {
        let machine_templates: Api<TerraformMachineTemplate> = Api::namespaced(client.clone(), &ns);
        move || {
            let machine_templates = machine_templates.clone();
            async move {
                let list = machine_templates.list(&ListParams::default()).await?.items;
                Ok(list
                    .into_iter()
                    .find(|t| t.annotations().get(CLONED_FROM).map(String::as_str) == Some(from))
                    .map(|t| t.name_any()))
            }
        }
    };
    let first = wait_for("a clone of cp-a", TIMEOUT, machine_clones("cp-a"))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", logs()));

    // Rebase the class: the TerraformCluster is patched in place and re-applied; the machine
    // template is compared by a dry run the webhook lets through, and rotated.
    apply(&classes, "noop", class(&ns, "b", "cp-b"))
        .await
        .expect("rebase the ClusterClass");
    let tc = wait_for(
        "the TerraformCluster re-applied from template b",
        LONG,
        exported("b"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    assert_eq!(
        tc.annotations().get(CLONED_FROM).map(String::as_str),
        Some("b")
    );
    let second = wait_for("a clone of cp-b", TIMEOUT, machine_clones("cp-b"))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    assert_ne!(first, second, "a new template, not an edit of the old one");
    wait_for(
        "the control plane pointed at the new clone",
        TIMEOUT,
        || async {
            let list = control_planes.list(&ListParams::default()).await?.items;
            Ok(list
                .iter()
                .any(|cp| cp.data["spec"].to_string().contains(&second))
                .then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
}
