//! The optional components composed with the install, and clusterctl's metadata.

use std::collections::BTreeSet;

use serde_json::json;

use super::*;

/// The components on top of the install, as an operator composes them: the metrics Service
/// selects the manager pods, the ServiceMonitor the metrics Service, the binding the
/// metrics reader, the NetworkPolicy the manager pods and their three ports.
#[test]
fn the_components_compose_with_the_install() {
    let all = build_overlay(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources:\n  - {config}/default\n\
         components:\n  - {config}/prometheus\n  - {config}/network-policy\n",
    );
    let pods = &find(&all, "Deployment", "captf-controller-manager")["spec"]["template"]["metadata"]
        ["labels"];
    let service = find(&all, "Service", "captf-controller-manager-metrics");
    assert_eq!(service["metadata"]["namespace"], NAMESPACE);
    assert!(selects(&service["spec"]["selector"], pods));
    assert_eq!(
        service["spec"]["ports"],
        json!([{"name": "metrics", "port": 8443, "protocol": "TCP", "targetPort": "metrics"}])
    );
    let monitor = find(&all, "ServiceMonitor", "captf-controller-manager");
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"], "metrics",
        "{monitor}"
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["scheme"], "https");
    let binding = find(&all, "ClusterRoleBinding", "captf-metrics-reader");
    assert_eq!(binding["roleRef"]["name"], "captf-metrics-reader");
    find(&all, "ClusterRole", "captf-metrics-reader");
    find(&all, "PrometheusRule", "captf-alerts");
    let policy = find(&all, "NetworkPolicy", "captf-controller-manager");
    assert!(selects(&policy["spec"]["podSelector"]["matchLabels"], pods));
    let ports: BTreeSet<i64> = policy["spec"]["ingress"][0]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["port"].as_i64())
        .collect();
    assert_eq!(ports, BTreeSet::from([8443, 9440, 9443]));
}

/// metadata.yaml's newest series implements the contract every CRD is labelled with.
#[test]
fn clusterctl_metadata_names_the_contract_of_the_crds() {
    let metadata = documents(
        &std::fs::read_to_string(workspace().join("metadata.yaml")).expect("metadata.yaml"),
    )
    .remove(0);
    assert_eq!(
        metadata["apiVersion"],
        "clusterctl.cluster.x-k8s.io/v1alpha3"
    );
    assert_eq!(metadata["kind"], "Metadata");
    let series = metadata["releaseSeries"].as_array().expect("releaseSeries");
    let newest = series
        .iter()
        .max_by_key(|s| (s["major"].as_i64(), s["minor"].as_i64()))
        .expect("a series");
    let contract = newest["contract"].as_str().expect("contract");
    assert_eq!(contract, "v1beta2");
    for crd in build(&config("crd")) {
        assert!(
            crd["metadata"]["labels"][format!("cluster.x-k8s.io/{contract}")].is_string(),
            "{} lacks the contract label",
            name(&crd)
        );
    }
}
