//! Every object of the install and the components, accepted by the real API server.

use std::collections::BTreeSet;

use anyhow::Context;
use captf_testenv::TestEnv;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde_json::{Value, json};

use super::*;

/// Server-side apply of `object`, for real or as a dry run, with strict field validation
/// (an unknown or duplicate field is an error, not a warning).
async fn apply(client: &kube::Client, object: &Value, dry_run: bool) -> anyhow::Result<()> {
    let api_version = object["apiVersion"].as_str().context("apiVersion")?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind(object));
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("{api_version} {} is not served", kind(object)))?;
    let namespace = object["metadata"]["namespace"].as_str();
    let api: Api<DynamicObject> = match (capabilities.scope, namespace) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
        (Scope::Cluster, None) => Api::all_with(client.clone(), &resource),
        (Scope::Namespaced, None) => anyhow::bail!("namespaced, but has no namespace"),
        (Scope::Cluster, Some(ns)) => anyhow::bail!("cluster-scoped, but has namespace {ns}"),
    };
    let mut params = PatchParams::apply("captf-manifests-test").validation_strict();
    if dry_run {
        params = params.dry_run();
    }
    api.patch(name(object), &params, &Patch::Apply(object))
        .await
        .map(|_| ())
        .map_err(anyhow::Error::from)
}

/// config/default and both components, each object accepted by the real API server.
#[tokio::test]
async fn every_object_of_the_install_and_the_components_is_accepted_by_the_api_server() {
    let env = TestEnv::shared();
    let client = env.client().await.expect("client");

    // Every folder builds on its own, as the spec promises (components too).
    for dir in [
        "crd",
        "rbac",
        "manager",
        "webhook",
        "certmanager",
        "samples",
        "prometheus",
        "network-policy",
    ] {
        assert!(!build(&config(dir)).is_empty(), "config/{dir} builds empty");
    }
    let install = build(&config("default"));
    let prometheus = build(&config("prometheus"));
    let network = build(&config("network-policy"));
    let tenant = env
        .namespace(&client, "manifests")
        .await
        .expect("namespace");
    let mut sample = documents(
        &std::fs::read_to_string(config("network-policy/job-egress-sample.yaml"))
            .expect("job-egress-sample.yaml"),
    );
    for object in &mut sample {
        object["metadata"]["namespace"] = json!(tenant);
    }
    let mut samples = build(&config("samples"));
    for object in &mut samples {
        if kind(object) != "TerraformClusterIdentity" {
            object["metadata"]["namespace"] = json!(tenant);
        }
    }
    let everything: Vec<&Value> = install
        .iter()
        .chain(&prometheus)
        .chain(&network)
        .chain(&sample)
        .chain(&samples)
        .collect();

    // The CRDs first, for real: ours from config/crd (through config/default, with the
    // provider label), then the third-party CRDs of every kind the manifests use.
    let ours: Vec<&Value> = install
        .iter()
        .filter(|o| kind(o) == "CustomResourceDefinition")
        .collect();
    assert_eq!(ours.len(), 7, "seven CRDs in config/default");
    let yaml = |objects: &[&Value]| {
        objects
            .iter()
            .map(|o| serde_yaml::to_string(o).expect("YAML"))
            .collect::<Vec<_>>()
            .join("---\n")
    };
    captf_testenv::control_plane::install_crds(&client, &yaml(&ours))
        .await
        .expect("our CRDs");
    let used: BTreeSet<(String, String)> = everything
        .iter()
        .map(|o| {
            let group = o["apiVersion"]
                .as_str()
                .and_then(|v| v.rsplit_once('/'))
                .map(|(g, _)| g.to_owned())
                .unwrap_or_default();
            (group, kind(o).to_owned())
        })
        .collect();
    let mut third_party = Vec::new();
    for vendor in ["cert-manager", "prometheus-operator"] {
        let dir = manifest_crds().join(vendor);
        for entry in std::fs::read_dir(&dir).expect("CRD folder") {
            let text = std::fs::read_to_string(entry.expect("entry").path()).expect("CRD");
            for crd in documents(&text) {
                let key = (
                    crd["spec"]["group"].as_str().unwrap_or("").to_owned(),
                    crd["spec"]["names"]["kind"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                );
                if used.contains(&key) {
                    third_party.push(crd);
                }
            }
        }
    }
    let names: BTreeSet<&str> = third_party.iter().map(name).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "certificates.cert-manager.io",
            "issuers.cert-manager.io",
            "prometheusrules.monitoring.coreos.com",
            "servicemonitors.monitoring.coreos.com",
        ]),
        "the third-party kinds the manifests use"
    );
    let refs: Vec<&Value> = third_party.iter().collect();
    captf_testenv::control_plane::install_crds(&client, &yaml(&refs))
        .await
        .expect("cert-manager and Prometheus Operator CRDs");

    // Namespaces for real (namespaced objects need theirs to exist, even in a dry run), then
    // every other object as a dry run: nothing of the install runs here.
    let mut failures = Vec::new();
    for object in everything.iter().filter(|o| kind(o) == "Namespace") {
        if let Err(e) = apply(&client, object, false).await {
            failures.push(format!("{}: {e:#}", describe(object)));
        }
    }
    let mut checked = 0;
    for object in everything
        .iter()
        .filter(|o| !matches!(kind(o), "Namespace" | "CustomResourceDefinition"))
    {
        checked += 1;
        if let Err(e) = apply(&client, object, true).await {
            failures.push(format!("{}: {e:#}", describe(object)));
        }
    }
    assert!(
        failures.is_empty(),
        "the API server refused:\n{}",
        failures.join("\n")
    );
    assert!(checked >= 25, "only {checked} objects dry-run");
}
