//! The alert rules: every metric they name is one the manager serves, and they pass
//! promtool's checker and unit tests.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use captf_e2e::fixture::TIMEOUT;
use captf_e2e::{Manager, manager_kubeconfig, workspace};
use captf_testenv::{TestEnv, wait_for};
use serde_json::Value;

use super::*;

const ALERTS: [&str; 11] = [
    "CAPTFJobFailing",
    "CAPTFDestroyStuck",
    "CAPTFClusterDrift",
    "CAPTFStateUnreadable",
    "CAPTFForceUnlocks",
    "CAPTFReconcileErrors",
    "CAPTFJobSlow",
    "CAPTFJobQueueSlow",
    "CAPTFStateNearSecretLimit",
    "CAPTFInputsNearLimit",
    "CAPTFNoRecentSuccess",
];

/// The PrometheusRule of config/prometheus/rules.yaml.
fn prometheus_rule() -> Value {
    let text = std::fs::read_to_string(config("prometheus/rules.yaml")).expect("rules.yaml");
    documents(&text).remove(0)
}

/// The families `Metrics::new` registers in crates/controller/src/metrics.rs, with
/// their types: `r.register("<name>", "<help>", m.<field>.clone())` (or a local), the type
/// from the field's declaration (`Family<_, Counter>`, `Family<_, Gauge>`, `Histograms<_>`).
fn registered_families() -> BTreeMap<String, &'static str> {
    let source = std::fs::read_to_string(workspace().join("crates/controller/src/metrics.rs"))
        .expect("metrics.rs");
    let type_of = |declaration: &str| -> Option<&'static str> {
        let d = declaration.trim_end_matches([',', ';', ' ']);
        if d.starts_with("Histograms<") {
            Some("histogram")
        } else if d.contains("Counter>") {
            Some("counter")
        } else if d.contains("Gauge>") {
            Some("gauge")
        } else {
            None
        }
    };
    // `pub <field>: <type>,` in the struct, `let <local> = Family::<_, <Type>>::...` in new().
    let mut types = BTreeMap::new();
    for line in source.lines().map(str::trim) {
        if let Some((field, declaration)) = line
            .strip_prefix("pub ")
            .and_then(|l| l.split_once(": "))
            .filter(|(f, _)| f.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            && let Some(t) = type_of(declaration)
        {
            types.insert(field.to_owned(), t);
        }
        if let Some((local, value)) = line
            .strip_prefix("let ")
            .and_then(|l| l.split_once(" = Family::<"))
            && let Some(t) = type_of(value)
        {
            types.insert(local.trim_start_matches("mut ").to_owned(), t);
        }
    }
    let mut families = BTreeMap::new();
    for call in source.split(".register(").skip(1) {
        let call = &call[..call.find(");").expect("register(...);")];
        let mut literals = call.split('"').skip(1).step_by(2);
        let name = literals.next().expect("a name").to_owned();
        let argument = call
            .rsplit(',')
            .map(str::trim)
            .find(|a| !a.is_empty())
            .expect("the metric argument");
        let variable = argument
            .trim_end_matches(".clone()")
            .trim_start_matches("m.");
        let t = types
            .get(variable)
            .unwrap_or_else(|| panic!("no type for {variable} (registered as {name})"));
        families.insert(name, *t);
    }
    families
}

/// Every metric an alert names is a family the manager serves, of the type the expression
/// uses: `_total` of a counter, `_bucket` of a histogram, a gauge otherwise. The families come
/// from a real manager's /metrics; the text format leaves out a family that has no sample yet
/// (most counters of an idle manager), so those are taken from their registration in
/// metrics.rs, whose types must agree with every family the scrape does show.
#[tokio::test]
async fn the_alerts_name_only_metrics_the_manager_serves() {
    let env = TestEnv::shared();
    let client = env.client().await.expect("client");
    let kubeconfig = manager_kubeconfig(env, &client).await.expect("RBAC");
    let manager = Manager::start(env, &kubeconfig, "manifests", &[]).expect("manager starts");
    let body = wait_for("the manager's /metrics", TIMEOUT, || async {
        Ok(Manager::get(&manager.metrics)
            .ok()
            .filter(|b| b.contains("# TYPE captf_build_info ")))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let scraped: BTreeMap<&str, &str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    let registered = registered_families();
    assert!(
        registered.len() >= 15,
        "metrics.rs registers only {registered:?}"
    );
    for (family, t) in &scraped {
        if let Some(r) = registered.get(*family) {
            assert_eq!(
                r, t,
                "{family}: metrics.rs and /metrics disagree on its type"
            );
        }
    }
    let mut families: BTreeMap<&str, &str> =
        registered.iter().map(|(f, t)| (f.as_str(), *t)).collect();
    families.extend(scraped.iter().map(|(f, t)| (*f, *t)));

    let rule = prometheus_rule();
    let mut named = BTreeSet::new();
    let mut problems = Vec::new();
    for r in rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
    {
        let expr = r["expr"].as_str().expect("expr");
        let tokens = expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'));
        for series in
            tokens.filter(|t| t.starts_with("captf_") || t.starts_with("controller_runtime_"))
        {
            let series = series.to_owned();
            let (family, want) = if let Some(f) = series.strip_suffix("_bucket") {
                (f, "histogram")
            } else if let Some(f) = series.strip_suffix("_total") {
                (f, "counter")
            } else {
                (series.as_str(), "gauge")
            };
            match families.get(family) {
                Some(got) if *got == want => {}
                Some(got) => problems.push(format!(
                    "{}: {series} needs a {want}, the manager serves {family} as a {got}",
                    r["alert"]
                )),
                None => problems.push(format!(
                    "{}: the manager serves no {family} (for {series})",
                    r["alert"]
                )),
            }
            named.insert(series);
        }
    }
    assert!(
        named.len() >= 10,
        "too few metrics found in the expressions: {named:?}"
    );
    assert!(
        problems.is_empty(),
        "{}\nfamilies (scraped: {scraped:?}): {families:#?}",
        problems.join("\n")
    );
}

/// The eleven alerts, in the order JSON patches index them, each with its severity and
/// annotations; `promtool check rules` and `promtool test rules` with
/// config/prometheus/tests/rules_test.yaml, which has a firing case for every alert.
#[test]
fn the_alert_rules_pass_promtool_check_and_unit_tests() {
    let rule = prometheus_rule();
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(name(&rule), "captf-alerts");
    assert_eq!(rule["metadata"]["namespace"], NAMESPACE);
    for label in ["app.kubernetes.io/name", "cluster.x-k8s.io/provider"] {
        assert!(rule["metadata"]["labels"][label].is_string(), "{label}");
    }
    let groups = rule["spec"]["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0]["name"], "captf");
    let rules = groups[0]["rules"].as_array().expect("rules");
    let names: Vec<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    assert_eq!(names, ALERTS);
    for r in rules {
        let alert = r["alert"].as_str().expect("alert");
        assert!(
            matches!(
                r["labels"]["severity"].as_str(),
                Some("info" | "warning" | "critical")
            ),
            "{alert}: severity"
        );
        for annotation in ["summary", "description"] {
            assert!(
                r["annotations"][annotation]
                    .as_str()
                    .is_some_and(|s| s.len() > 20),
                "{alert}: {annotation}"
            );
        }
        assert_eq!(
            r["annotations"]["runbook_url"],
            format!(
                "https://captf.io/docs/operator-guide/observability.html#{}",
                alert.to_lowercase()
            )
        );
    }

    // Every alert has a test case in which it fires.
    let tests = documents(
        &std::fs::read_to_string(config("prometheus/tests/rules_test.yaml"))
            .expect("rules_test.yaml"),
    )
    .remove(0);
    let firing: BTreeSet<&str> = tests["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()))
        .filter_map(|c| {
            ALERTS
                .iter()
                .copied()
                .find(|a| c["alertname"].as_str() == Some(*a))
        })
        .collect();
    assert_eq!(
        firing,
        ALERTS.into_iter().collect(),
        "alerts with a firing case"
    );

    // promtool reads plain rule files: the PrometheusRule's spec, next to the tests.
    let dir = std::env::temp_dir().join(format!("captf-promtool-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary folder");
    std::fs::write(
        dir.join("captf-alerts.rules.yaml"),
        serde_json::to_string_pretty(&rule["spec"]).expect("JSON"),
    )
    .expect("rules file");
    std::fs::copy(
        config("prometheus/tests/rules_test.yaml"),
        dir.join("rules_test.yaml"),
    )
    .expect("tests file");
    for args in [
        ["check", "rules", "captf-alerts.rules.yaml"],
        ["test", "rules", "rules_test.yaml"],
    ] {
        let out = Command::new(tool("promtool"))
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("running promtool");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "promtool {}:\n{text}", args.join(" "));
        if args[0] == "check" {
            assert!(text.contains("SUCCESS: 11 rules found"), "{text}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
