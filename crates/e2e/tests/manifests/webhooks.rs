//! The webhook configuration: one entry per kind, as the spec says.

use std::collections::BTreeSet;

use serde_json::json;

use super::*;

/// One entry per kind whose CRD config/crd installs (CREATE and UPDATE), and a DELETE entry for
/// machines and identities; every entry fails closed (seed 001, over the spec's `Ignore` for
/// the DELETE entries) and is otherwise as §6.1 says. The
/// Service and the certificate the API server uses to reach them.
#[test]
fn the_webhook_configuration_covers_every_kind() {
    let install = build(&config("default"));
    let vwc = find(
        &install,
        "ValidatingWebhookConfiguration",
        "captf-validating-webhook-configuration",
    );
    let webhooks = vwc["webhooks"].as_array().expect("webhooks");
    let mut expected = BTreeSet::new();
    for crd in install
        .iter()
        .filter(|o| kind(o) == "CustomResourceDefinition")
    {
        let kind_ = crd["spec"]["names"]["kind"]
            .as_str()
            .expect("kind")
            .to_lowercase();
        let plural = crd["spec"]["names"]["plural"].as_str().expect("plural");
        expected.insert((
            format!("validation.{kind_}.infrastructure.cluster.x-k8s.io"),
            kind_.clone(),
            plural.to_owned(),
            "CREATE,UPDATE",
            "Fail",
        ));
        if matches!(
            kind_.as_str(),
            "terraformmachine" | "terraformclusteridentity"
        ) {
            expected.insert((
                format!("delete.validation.{kind_}.infrastructure.cluster.x-k8s.io"),
                kind_.clone(),
                plural.to_owned(),
                "DELETE",
                "Fail",
            ));
        }
    }
    assert_eq!(expected.len(), 9, "seven kinds, two delete guards");
    let mut got = BTreeSet::new();
    for w in webhooks {
        let rules = w["rules"].as_array().expect("rules");
        assert_eq!(rules.len(), 1, "{w}");
        let rule = &rules[0];
        assert_eq!(
            rule["apiGroups"],
            json!(["infrastructure.cluster.x-k8s.io"])
        );
        assert_eq!(rule["apiVersions"], json!(["v1alpha1"]));
        let resources = rule["resources"].as_array().expect("resources");
        assert_eq!(resources.len(), 1, "{w}");
        let path = w["clientConfig"]["service"]["path"].as_str().expect("path");
        let kind_ = path
            .strip_prefix("/validate-infrastructure-cluster-x-k8s-io-v1alpha1-")
            .expect("path pattern");
        assert_eq!(w["admissionReviewVersions"], json!(["v1"]));
        assert_eq!(w["sideEffects"], "None");
        assert_eq!(w["matchPolicy"], "Equivalent");
        assert_eq!(w["timeoutSeconds"], 10);
        assert!(w["namespaceSelector"].is_null() && w["objectSelector"].is_null());
        assert_eq!(
            w["clientConfig"]["service"]["name"],
            "captf-webhook-service"
        );
        assert_eq!(w["clientConfig"]["service"]["namespace"], NAMESPACE);
        let operations: Vec<&str> = rule["operations"]
            .as_array()
            .expect("operations")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        got.insert((
            w["name"].as_str().expect("name").to_owned(),
            kind_.to_owned(),
            resources[0].as_str().expect("resource").to_owned(),
            match operations.join(",").as_str() {
                "CREATE,UPDATE" => "CREATE,UPDATE",
                "DELETE" => "DELETE",
                other => panic!("operations {other}"),
            },
            match w["failurePolicy"].as_str() {
                Some("Fail") => "Fail",
                Some("Ignore") => "Ignore",
                other => panic!("failurePolicy {other:?}"),
            },
        ));
    }
    assert_eq!(got, expected);
    assert_eq!(webhooks.len(), expected.len());
    assert_eq!(
        vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "captf-system/captf-serving-cert"
    );

    let service = find(&install, "Service", "captf-webhook-service");
    assert_eq!(service["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        service["spec"]["ports"],
        json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 9443}])
    );
    let deployment = find(&install, "Deployment", "captf-controller-manager");
    assert!(selects(
        &service["spec"]["selector"],
        &deployment["spec"]["template"]["metadata"]["labels"]
    ));
    let certificate = find(&install, "Certificate", "captf-serving-cert");
    assert_eq!(
        certificate["spec"],
        json!({
            "dnsNames": ["captf-webhook-service.captf-system.svc",
                         "captf-webhook-service.captf-system.svc.cluster.local"],
            "issuerRef": {"kind": "Issuer", "name": "captf-selfsigned-issuer"},
            "secretName": "captf-webhook-service-cert",
        })
    );
    let issuer = find(&install, "Issuer", "captf-selfsigned-issuer");
    assert_eq!(issuer["spec"], json!({"selfSigned": {}}));
    // Every object is labelled as the provider's, and no name is prefixed twice.
    for object in &install {
        assert_eq!(
            object["metadata"]["labels"]["cluster.x-k8s.io/provider"],
            "infrastructure-terraform",
            "{}",
            describe(object)
        );
        assert!(
            !name(object).starts_with("captf-captf-"),
            "{}",
            describe(object)
        );
    }
}
