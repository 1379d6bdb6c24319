//! The RBAC that config/rbac and the config/prometheus component install: no wildcard
//! anywhere, and every grant listed in full, so a change to them is a reviewed change to this
//! test.

use std::collections::BTreeSet;
use std::path::PathBuf;

use captf_e2e::workspace;

/// Every YAML file that holds roles: config/rbac and the Prometheus component's RBAC.
fn role_files() -> Vec<PathBuf> {
    let dir = workspace().join("config/rbac");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("config/rbac")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.file_name().is_some_and(|n| n != "kustomization.yaml"))
        .collect();
    files.sort();
    files.push(workspace().join("config/prometheus/rbac.yaml"));
    files
}

/// Every document of `path`.
fn documents(path: &std::path::Path) -> Vec<serde_yaml::Value> {
    let text = std::fs::read_to_string(path).expect("readable");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("YAML"))
        .filter(|v: &serde_yaml::Value| !v.is_null())
        .collect()
}

fn name(value: &serde_yaml::Value) -> String {
    format!(
        "{} {}",
        value["kind"].as_str().unwrap_or(""),
        value["metadata"]["name"].as_str().unwrap_or("")
    )
}

/// `(role, rule)` for every rule of every Role and ClusterRole.
fn rules() -> Vec<(String, serde_yaml::Value)> {
    let mut out = Vec::new();
    for path in role_files() {
        for value in documents(&path) {
            if let Some(rules) = value["rules"].as_sequence() {
                for rule in rules {
                    out.push((name(&value), rule.clone()));
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

/// Every grant, as `<role>: <group>/<resource>[<names>]: <verbs>` or `<role>: url <path>: <verbs>`.
const EXPECTED: &[&str] = &[
    "ClusterRole captf-editor-role: infrastructure.cluster.x-k8s.io/terraformclusters: create,update,patch,delete",
    "ClusterRole captf-editor-role: infrastructure.cluster.x-k8s.io/terraformclustertemplates: create,update,patch,delete",
    "ClusterRole captf-editor-role: infrastructure.cluster.x-k8s.io/terraformmachinepools: create,update,patch,delete",
    "ClusterRole captf-editor-role: infrastructure.cluster.x-k8s.io/terraformmachinepooltemplates: create,update,patch,delete",
    "ClusterRole captf-editor-role: infrastructure.cluster.x-k8s.io/terraformmachines: create,update,patch,delete",
    "ClusterRole captf-editor-role: infrastructure.cluster.x-k8s.io/terraformmachinetemplates: create,update,patch,delete",
    "ClusterRole captf-manager-role: /configmaps: get,list,watch",
    "ClusterRole captf-manager-role: /events: list",
    "ClusterRole captf-manager-role: /namespaces: get,list,watch",
    "ClusterRole captf-manager-role: /pods: get,list",
    "ClusterRole captf-manager-role: /secrets: create,delete,get,list,patch,update,watch",
    "ClusterRole captf-manager-role: /serviceaccounts: create,delete,get,list,watch",
    "ClusterRole captf-manager-role: authentication.k8s.io/tokenreviews: create",
    "ClusterRole captf-manager-role: authorization.k8s.io/subjectaccessreviews: create",
    "ClusterRole captf-manager-role: batch/jobs/finalizers: update",
    "ClusterRole captf-manager-role: batch/jobs: create,delete,get,list,patch,watch",
    "ClusterRole captf-manager-role: cluster.x-k8s.io/clusters/status: get,list,watch",
    "ClusterRole captf-manager-role: cluster.x-k8s.io/clusters: get,list,watch",
    "ClusterRole captf-manager-role: cluster.x-k8s.io/machinepools/status: get,list,watch",
    "ClusterRole captf-manager-role: cluster.x-k8s.io/machinepools: get,list,patch,watch",
    "ClusterRole captf-manager-role: cluster.x-k8s.io/machines/status: get,list,watch",
    "ClusterRole captf-manager-role: cluster.x-k8s.io/machines: get,list,patch,watch",
    "ClusterRole captf-manager-role: coordination.k8s.io/leases: create,delete,get,list,update,watch",
    "ClusterRole captf-manager-role: events.k8s.io/events: create,patch",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformclusteridentities/status: get,patch,update",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformclusteridentities: create,delete,get,list,patch,update,watch",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformclusters/finalizers: update",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformclusters/status: get,patch,update",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformclusters: create,delete,get,list,patch,update,watch",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformclustertemplates: create,delete,get,list,patch,update,watch",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformmachinepools/finalizers: update",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformmachinepools/status: get,patch,update",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformmachinepools: create,delete,get,list,patch,update,watch",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformmachinepooltemplates: create,delete,get,list,patch,update,watch",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformmachines/finalizers: update",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformmachines/status: get,patch,update",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformmachines: create,delete,get,list,patch,update,watch",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformmachinetemplates/status: get,patch,update",
    "ClusterRole captf-manager-role: infrastructure.cluster.x-k8s.io/terraformmachinetemplates: create,delete,get,list,patch,update,watch",
    "ClusterRole captf-manager-role: rbac.authorization.k8s.io/clusterroles[captf-runner]: bind",
    "ClusterRole captf-manager-role: rbac.authorization.k8s.io/rolebindings: create,delete,get,list,update,watch",
    "ClusterRole captf-metrics-reader: url /metrics: get",
    "ClusterRole captf-plan-approver-role: infrastructure.cluster.x-k8s.io/terraformclusters: get,list,watch,patch",
    "ClusterRole captf-plan-approver-role: infrastructure.cluster.x-k8s.io/terraformmachinepools: get,list,watch,patch",
    "ClusterRole captf-runner: /secrets: get,list,create,update,delete",
    "ClusterRole captf-runner: coordination.k8s.io/leases: get,create,update",
    "ClusterRole captf-runner: events.k8s.io/events: create",
    "ClusterRole captf-viewer-role: infrastructure.cluster.x-k8s.io/terraformclusteridentities/status: get",
    "ClusterRole captf-viewer-role: infrastructure.cluster.x-k8s.io/terraformclusteridentities: get,list,watch",
    "ClusterRole captf-viewer-role: infrastructure.cluster.x-k8s.io/terraformclusters/status: get",
    "ClusterRole captf-viewer-role: infrastructure.cluster.x-k8s.io/terraformclusters: get,list,watch",
    "ClusterRole captf-viewer-role: infrastructure.cluster.x-k8s.io/terraformclustertemplates: get,list,watch",
    "ClusterRole captf-viewer-role: infrastructure.cluster.x-k8s.io/terraformmachinepools/status: get",
    "ClusterRole captf-viewer-role: infrastructure.cluster.x-k8s.io/terraformmachinepools: get,list,watch",
    "ClusterRole captf-viewer-role: infrastructure.cluster.x-k8s.io/terraformmachinepooltemplates: get,list,watch",
    "ClusterRole captf-viewer-role: infrastructure.cluster.x-k8s.io/terraformmachines/status: get",
    "ClusterRole captf-viewer-role: infrastructure.cluster.x-k8s.io/terraformmachines: get,list,watch",
    "ClusterRole captf-viewer-role: infrastructure.cluster.x-k8s.io/terraformmachinetemplates/status: get",
    "ClusterRole captf-viewer-role: infrastructure.cluster.x-k8s.io/terraformmachinetemplates: get,list,watch",
    "Role captf-leader-election-role: /events: create,patch",
    "Role captf-leader-election-role: coordination.k8s.io/leases: get,list,watch,create,update,patch,delete",
];

#[test]
fn no_wildcards_and_every_grant_is_listed() {
    let mut grants = BTreeSet::new();
    for (role, rule) in rules() {
        for field in [
            "apiGroups",
            "resources",
            "verbs",
            "resourceNames",
            "nonResourceURLs",
        ] {
            assert!(
                !strings(&rule[field]).iter().any(|s| s.contains('*')),
                "{role} grants a wildcard in {field}: {rule:?}"
            );
        }
        let verbs = strings(&rule["verbs"]).join(",");
        for url in strings(&rule["nonResourceURLs"]) {
            grants.insert(format!("{role}: url {url}: {verbs}"));
        }
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                let names = strings(&rule["resourceNames"]);
                let scope = if names.is_empty() {
                    String::new()
                } else {
                    format!("[{}]", names.join(","))
                };
                grants.insert(format!("{role}: {group}/{resource}{scope}: {verbs}"));
            }
        }
    }
    let expected: BTreeSet<String> = EXPECTED.iter().map(|s| (*s).to_owned()).collect();
    let added: Vec<_> = grants.difference(&expected).collect();
    let removed: Vec<_> = expected.difference(&grants).collect();
    assert!(
        added.is_empty() && removed.is_empty(),
        "the grants changed: review them, then update EXPECTED\nnew: {added:#?}\ngone: {removed:#?}"
    );
    assert!(
        grants.iter().all(|g| !g.contains("pods/log")),
        "no role may read pod logs"
    );
    assert!(
        grants.iter().all(|g| !g.contains("deletecollection")),
        "deletecollection is never granted"
    );
    assert!(
        grants
            .iter()
            .filter(|g| g.starts_with("ClusterRole captf-editor-role"))
            .all(|g| !g.contains("terraformclusteridentities")),
        "editors never write identities"
    );
}

/// config/rbac/metrics_reader_role.yaml (applied on its own by the metrics test) and the
/// Prometheus component's copy are the same ClusterRole.
#[test]
fn the_metrics_reader_role_has_one_definition() {
    let find = |path: PathBuf| {
        documents(&path)
            .into_iter()
            .find(|v| name(v) == "ClusterRole captf-metrics-reader")
            .unwrap_or_else(|| panic!("{} holds no captf-metrics-reader", path.display()))
    };
    assert_eq!(
        find(workspace().join("config/rbac/metrics_reader_role.yaml")),
        find(workspace().join("config/prometheus/rbac.yaml"))
    );
}

/// The kustomization installs every role file but the metrics reader (a Prometheus component
/// object), and every binding names a role defined here.
#[test]
fn the_kustomization_lists_every_role_file_and_bindings_resolve() {
    let kustomization = &documents(&workspace().join("config/rbac/kustomization.yaml"))[0];
    let listed: BTreeSet<String> = strings(&kustomization["resources"]).into_iter().collect();
    let files: BTreeSet<String> = role_files()
        .iter()
        .filter(|p| p.starts_with(workspace().join("config/rbac")))
        .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
        .filter(|n| n != "metrics_reader_role.yaml")
        .collect();
    assert_eq!(listed, files);
    let all: Vec<_> = role_files().iter().flat_map(|p| documents(p)).collect();
    let roles: BTreeSet<String> = all
        .iter()
        .filter(|v| v["rules"].is_sequence())
        .map(name)
        .collect();
    for binding in all.iter().filter(|v| !v["roleRef"].is_null()) {
        let role = format!(
            "{} {}",
            binding["roleRef"]["kind"].as_str().unwrap_or(""),
            binding["roleRef"]["name"].as_str().unwrap_or("")
        );
        assert!(
            roles.contains(&role),
            "{} binds {role}, which is not defined",
            name(binding)
        );
    }
}
