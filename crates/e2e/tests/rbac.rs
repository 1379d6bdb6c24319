//! The RBAC that config/rbac installs: no wildcard anywhere, and the grants listed in full so a
//! change to them is a reviewed change to this test.

use captf_e2e::workspace;

fn rules() -> Vec<(String, serde_yaml::Value)> {
    let mut out = Vec::new();
    let dir = workspace().join("config/rbac");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("config/rbac")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("readable");
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value: serde_yaml::Value = serde::Deserialize::deserialize(doc).expect("YAML");
            let name = format!(
                "{} {}",
                value["kind"].as_str().unwrap_or(""),
                value["metadata"]["name"].as_str().unwrap_or("")
            );
            if let Some(rules) = value["rules"].as_sequence() {
                for rule in rules {
                    out.push((name.clone(), rule.clone()));
                }
            }
        }
    }
    out
}

fn strings(v: &serde_yaml::Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| {
            s.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn no_wildcards_and_every_grant_is_listed() {
    let mut grants = Vec::new();
    for (role, rule) in rules() {
        for field in ["apiGroups", "resources", "verbs", "resourceNames"] {
            assert!(
                !strings(&rule[field]).iter().any(|s| s.contains('*')),
                "{role} grants a wildcard in {field}: {rule:?}"
            );
        }
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                let names = strings(&rule["resourceNames"]);
                let scope = if names.is_empty() {
                    String::new()
                } else {
                    format!("[{}]", names.join(","))
                };
                grants.push(format!(
                    "{role}: {group}/{resource}{scope}: {}",
                    strings(&rule["verbs"]).join(",")
                ));
            }
        }
    }
    let joined = grants.join("\n");
    for must in [
        "ClusterRole captf-manager-role: /secrets: create,delete,get,list,patch,update,watch",
        "ClusterRole captf-manager-role: rbac.authorization.k8s.io/clusterroles[captf-runner]: bind",
        "ClusterRole captf-runner: /secrets: get,list,create,update,delete",
        "ClusterRole captf-runner: coordination.k8s.io/leases: get,create,update",
    ] {
        assert!(
            joined.contains(must),
            "missing grant {must}\nall grants:\n{joined}"
        );
    }
    assert!(!joined.contains("pods/log"), "no role may read pod logs");
    assert!(
        grants.iter().all(|g| !g.contains("deletecollection")),
        "deletecollection is never granted"
    );
}
