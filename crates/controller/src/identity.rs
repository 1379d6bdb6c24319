//! Whether an identity allows a namespace: pure, over the identity and the namespace's labels.

use std::collections::BTreeMap;

use captf_api::TerraformClusterIdentity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// The identity's `allowedNamespaces` admits `namespace` (with `labels`): unset admits none,
/// `selector: {}` admits all, the list and the selector are ORed.
pub fn allows(
    identity: &TerraformClusterIdentity,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    let Some(allowed) = &identity.spec.allowed_namespaces else {
        return false;
    };
    let listed = allowed
        .list
        .as_ref()
        .is_some_and(|l| l.iter().any(|n| n == namespace));
    listed
        || allowed
            .selector
            .as_ref()
            .is_some_and(|s| selector_matches(s, labels))
}

/// A metav1.LabelSelector match.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector
        .match_labels
        .as_ref()
        .is_none_or(|m| m.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let exprs_ok = selector.match_expressions.as_ref().is_none_or(|exprs| {
        exprs.iter().all(|e| {
            let values = e.values.clone().unwrap_or_default();
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
    });
    labels_ok && exprs_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(allowed: serde_json::Value) -> TerraformClusterIdentity {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "id"},
            "spec": {"secretRef": {"name": "s", "namespace": "ns"}, "allowedNamespaces": allowed},
        }))
        .expect("identity")
    }

    #[test]
    fn allowed_namespaces_table() {
        let team: BTreeMap<String, String> = [("team".to_owned(), "a".to_owned())].into();
        let none = BTreeMap::new();
        let cases = [
            (serde_json::Value::Null, "x", &none, false),
            (serde_json::json!({"selector": {}}), "x", &none, true),
            (serde_json::json!({"list": ["a", "b"]}), "b", &none, true),
            (serde_json::json!({"list": ["a"]}), "c", &none, false),
            (
                serde_json::json!({"selector": {"matchLabels": {"team": "a"}}}),
                "x",
                &team,
                true,
            ),
            (
                serde_json::json!({"selector": {"matchLabels": {"team": "b"}}}),
                "x",
                &team,
                false,
            ),
            (
                serde_json::json!({"list": ["x"], "selector": {"matchLabels": {"team": "b"}}}),
                "x",
                &team,
                true,
            ),
            (
                serde_json::json!({"selector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}}),
                "x",
                &team,
                true,
            ),
            (
                serde_json::json!({"selector": {"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}}),
                "x",
                &team,
                false,
            ),
        ];
        for (allowed, ns, labels, want) in cases {
            let id = identity(allowed.clone());
            assert_eq!(allows(&id, ns, labels), want, "{allowed} {ns}");
        }
    }
}
