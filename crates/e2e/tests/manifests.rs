//! The install manifests under config/, built by the real kustomize: config/default (what
//! clusterctl installs) and the optional components. Every object is server-side dry-run
//! against the real API server with strict field validation, after the CRDs they need (ours,
//! cert-manager's and the Prometheus Operator's, from hack/build-tools.sh `manifest-crds`) are
//! installed for real. Every metric an alert names is one a running manager serves, and the
//! alert rules pass Prometheus' own rule checker and unit tests (promtool). The Deployment,
//! the webhook configuration and the references kustomize keeps in step are checked against
//! spec/operations.md §2, §3 and §6.1.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use captf_e2e::fixture::TIMEOUT;
use captf_e2e::{Manager, captf_binary, manager_kubeconfig, workspace};
use captf_testenv::{TestEnv, wait_for};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde_json::{Value, json};

const IMAGE_NAME: &str = "ghcr.io/captf-io/cluster-api-provider-terraform";
const IMAGE: &str = "ghcr.io/captf-io/cluster-api-provider-terraform:dev";
const NAMESPACE: &str = "captf-system";
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

// ------------------------------------------------------------------------------ helpers

/// The cache folder hack/build-tools.sh fills (`$CAPTF_CACHE`, default `~/.cache/captf`).
fn cache() -> PathBuf {
    captf_testenv::tools::cache_dir()
}

/// A binary built by hack/build-tools.sh (`$CAPTF_BIN`, default `<cache>/bin`).
fn tool(name: &str) -> PathBuf {
    let bin = std::env::var_os("CAPTF_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache().join("bin"));
    let path = bin.join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `hack/build-tools.sh {name}`",
        path.display()
    );
    path
}

/// The third-party CRDs (`$CAPTF_MANIFEST_CRDS`, default `<cache>/manifest-crds`).
fn manifest_crds() -> PathBuf {
    let dir = std::env::var_os("CAPTF_MANIFEST_CRDS")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache().join("manifest-crds"));
    assert!(
        dir.is_dir(),
        "{} is missing: run `hack/build-tools.sh manifest-crds`",
        dir.display()
    );
    dir
}

/// Every document of a YAML stream, as JSON values.
fn documents(yaml: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// `kustomize build <dir>`.
fn build(dir: &Path) -> Vec<Value> {
    let out = Command::new(tool("kustomize"))
        .arg("build")
        .arg(dir)
        .output()
        .expect("running kustomize");
    assert!(
        out.status.success(),
        "kustomize build {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    documents(&String::from_utf8(out.stdout).expect("UTF-8"))
}

/// `kustomize build` of a kustomization of our own, written to a fresh temporary folder, as a
/// user would write one. `{config}` in it stands for the relative path to the workspace's
/// config/ (kustomize takes no absolute path to a component or base).
fn build_overlay(kustomization: &str) -> Vec<Value> {
    build_overlay_with(kustomization, &[])
}

/// [`build_overlay`] with more files next to the kustomization.
fn build_overlay_with(kustomization: &str, files: &[(&str, &str)]) -> Vec<Value> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "captf-manifests-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temporary folder");
    let dir = dir.canonicalize().expect("canonical");
    let config = workspace()
        .canonicalize()
        .expect("workspace")
        .join("config");
    let up = "../".repeat(dir.components().count() - 1);
    let relative = format!(
        "{up}{}",
        config
            .strip_prefix("/")
            .expect("absolute")
            .to_str()
            .expect("UTF-8 path")
    );
    std::fs::write(
        dir.join("kustomization.yaml"),
        kustomization.replace("{config}", &relative),
    )
    .expect("kustomization");
    for (file, content) in files {
        std::fs::write(dir.join(file), content).expect("file");
    }
    let objects = build(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    objects
}

fn config(sub: &str) -> PathBuf {
    workspace().join("config").join(sub)
}

fn kind(o: &Value) -> &str {
    o["kind"].as_str().unwrap_or("")
}

fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or("")
}

fn describe(o: &Value) -> String {
    match o["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{} {ns}/{}", kind(o), name(o)),
        None => format!("{} {}", kind(o), name(o)),
    }
}

/// The one object of `kind` named `name`.
fn find<'a>(objects: &'a [Value], kind_: &str, name_: &str) -> &'a Value {
    let found: Vec<_> = objects
        .iter()
        .filter(|o| kind(o) == kind_ && name(o) == name_)
        .collect();
    assert_eq!(found.len(), 1, "{kind_} {name_} in the build");
    found[0]
}

/// The container named `name` of a Deployment.
fn container<'a>(deployment: &'a Value, name_: &str) -> &'a Value {
    deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name_))
        .unwrap_or_else(|| panic!("container {name_}"))
}

/// The entry named `name` of a list of `{name: ...}` objects.
fn named<'a>(list: &'a Value, name_: &str) -> &'a Value {
    list.as_array()
        .and_then(|l| l.iter().find(|e| e["name"] == name_))
        .unwrap_or_else(|| panic!("no entry {name_} in {list}"))
}

/// Whether every label of `selector` is among `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

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

/// The PrometheusRule of config/prometheus/rules.yaml.
fn prometheus_rule() -> Value {
    let text = std::fs::read_to_string(config("prometheus/rules.yaml")).expect("rules.yaml");
    documents(&text).remove(0)
}

// -------------------------------------------------------------------------------- tests

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

/// The families `Metrics::new` registers in crates/controller/src/manager/metrics.rs, with
/// their types: `r.register("<name>", "<help>", m.<field>.clone())` (or a local), the type
/// from the field's declaration (`Family<_, Counter>`, `Family<_, Gauge>`, `Histograms<_>`).
fn registered_families() -> BTreeMap<String, &'static str> {
    let source =
        std::fs::read_to_string(workspace().join("crates/controller/src/manager/metrics.rs"))
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

/// The manager Deployment and its PodDisruptionBudget as spec/operations.md §3 describes
/// them, and the shipped flags are flags the binary has.
#[test]
fn the_deployment_is_the_one_of_the_spec() {
    let install = build(&config("default"));
    let deployment = find(&install, "Deployment", "captf-controller-manager");
    assert_eq!(deployment["metadata"]["namespace"], NAMESPACE);
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 2);
    assert_eq!(
        spec["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})
    );
    let selector = &spec["selector"]["matchLabels"];
    let pod = &spec["template"];
    let labels = &pod["metadata"]["labels"];
    assert_eq!(labels["control-plane"], "controller-manager");
    assert_eq!(
        labels["app.kubernetes.io/name"],
        "cluster-api-provider-terraform"
    );
    assert_eq!(
        labels["cluster.x-k8s.io/provider"],
        "infrastructure-terraform"
    );
    assert!(selects(selector, labels), "{selector} selects {labels}");
    assert_eq!(
        pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"],
        "manager"
    );
    let pod = &pod["spec"];
    assert_eq!(pod["serviceAccountName"], "captf-controller-manager");
    assert_eq!(pod["terminationGracePeriodSeconds"], 30);
    assert_eq!(
        pod["securityContext"],
        json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
               "seccompProfile": {"type": "RuntimeDefault"}})
    );
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(spread["maxSkew"], 1);
    assert_eq!(spread["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(spread["whenUnsatisfiable"], "ScheduleAnyway");
    assert!(selects(&spread["labelSelector"]["matchLabels"], labels));
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}])
    );
    assert!(pod["nodeSelector"].is_null() && pod["affinity"].is_null());

    let manager = container(deployment, "manager");
    assert_eq!(manager["image"], IMAGE);
    assert_eq!(manager["command"], json!(["/manager", "manager"]));
    assert_eq!(
        manager["args"],
        json!([
            "--leader-elect",
            "--diagnostics-address=:8443",
            "--insecure-diagnostics=false",
            "--webhook-port=9443"
        ])
    );
    let env = &manager["env"];
    assert_eq!(named(env, "CAPTF_MANAGER_IMAGE")["value"], IMAGE);
    assert_eq!(
        named(env, "POD_NAMESPACE")["valueFrom"],
        json!({"fieldRef": {"fieldPath": "metadata.namespace"}})
    );
    assert_eq!(
        named(env, "SERVICE_ACCOUNT_NAME")["valueFrom"],
        json!({"fieldRef": {"fieldPath": "spec.serviceAccountName"}})
    );
    let ports = &manager["ports"];
    for (port, number) in [
        ("healthz", 9440),
        ("metrics", 8443),
        ("webhook-server", 9443),
    ] {
        assert_eq!(named(ports, port)["containerPort"], number, "port {port}");
    }
    assert_eq!(
        manager["securityContext"],
        json!({"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
               "privileged": false, "capabilities": {"drop": ["ALL"]}})
    );
    assert_eq!(
        manager["livenessProbe"],
        json!({"httpGet": {"path": "/healthz", "port": "healthz"},
               "initialDelaySeconds": 15, "periodSeconds": 20})
    );
    assert_eq!(
        manager["readinessProbe"],
        json!({"httpGet": {"path": "/readyz", "port": "healthz"},
               "initialDelaySeconds": 5, "periodSeconds": 10})
    );
    assert_eq!(
        manager["resources"],
        json!({"requests": {"cpu": "10m", "memory": "128Mi"},
               "limits": {"cpu": "500m", "memory": "512Mi"}})
    );
    assert_eq!(
        manager["lifecycle"],
        json!({"preStop": {"sleep": {"seconds": 5}}})
    );
    assert_eq!(manager["terminationMessagePolicy"], "FallbackToLogsOnError");
    assert_eq!(
        manager["volumeMounts"],
        json!([{"name": "cert", "mountPath": "/tmp/k8s-webhook-server/serving-certs",
                "readOnly": true}])
    );
    assert_eq!(
        pod["volumes"],
        json!([{"name": "cert", "secret": {"secretName": "captf-webhook-service-cert"}}])
    );

    // The shipped flags parse and pass the manager's start-up validation: with a kubeconfig
    // that does not exist, the manager gets as far as loading it (before it binds any port).
    let missing = std::env::temp_dir().join(format!(
        "captf-manifests-{}-no-such.kubeconfig",
        std::process::id()
    ));
    let mut child = Command::new(captf_binary().expect("captf binary (cargo build -p captf)"))
        .arg("manager")
        .args(
            manager["args"]
                .as_array()
                .expect("args")
                .iter()
                .filter_map(Value::as_str),
        )
        .arg("--runner-image=example.com/captf:test")
        .arg(format!("--kubeconfig={}", missing.display()))
        .env_remove("KUBECONFIG")
        .env("POD_NAMESPACE", NAMESPACE)
        .env("SERVICE_ACCOUNT_NAME", "captf-controller-manager")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("captf manager");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("captf manager with the shipped flags and no kubeconfig did not exit");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let out = child.wait_with_output().expect("output");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !status.success()
            && status.code() != Some(2)
            && said.contains("--kubeconfig")
            && !said.contains("invalid flags"),
        "captf manager refused the shipped flags ({status}):\n{said}"
    );

    let pdb = find(&install, "PodDisruptionBudget", "captf-controller-manager");
    assert_eq!(pdb["metadata"]["namespace"], NAMESPACE);
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert!(pdb["spec"]["minAvailable"].is_null());
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], *selector);
}

/// One entry per kind whose CRD config/crd installs (CREATE and UPDATE, failing closed), and a
/// DELETE entry failing open for machines and identities; every entry as §6.1 says. The
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
                "Ignore",
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

/// config/default with another namespace (what `kustomize edit set namespace` in a copy of
/// it does): the webhook clients, the certificate's names, the CA injection annotation and the
/// binding subjects follow. An overlay's `images:` moves the runner image with the manager's.
#[test]
fn references_follow_the_namespace_and_the_image() {
    let default =
        std::fs::read_to_string(config("default/kustomization.yaml")).expect("config/default");
    assert!(default.contains("\nnamespace: captf-system\n"));
    let patch = std::fs::read_to_string(config("default/manager_webhook_patch.yaml"))
        .expect("the webhook patch");
    let moved = build_overlay_with(
        &default
            .replace("\nnamespace: captf-system\n", "\nnamespace: other-system\n")
            .replace("  - ../", "  - {config}/"),
        &[("manager_webhook_patch.yaml", &patch)],
    );
    let vwc = find(
        &moved,
        "ValidatingWebhookConfiguration",
        "captf-validating-webhook-configuration",
    );
    assert_eq!(
        vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "other-system/captf-serving-cert"
    );
    for w in vwc["webhooks"].as_array().expect("webhooks") {
        assert_eq!(w["clientConfig"]["service"]["namespace"], "other-system");
    }
    let certificate = find(&moved, "Certificate", "captf-serving-cert");
    assert_eq!(
        certificate["spec"]["dnsNames"],
        json!([
            "captf-webhook-service.other-system.svc",
            "captf-webhook-service.other-system.svc.cluster.local"
        ])
    );
    for binding in [
        "captf-manager-rolebinding",
        "captf-leader-election-rolebinding",
    ] {
        let binding = moved.iter().find(|o| name(o) == binding).expect("binding");
        assert_eq!(binding["subjects"][0]["namespace"], "other-system");
    }

    let digest = "registry.example/captf@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let pinned = build_overlay(&format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources:\n  - {{config}}/default\n\
         images:\n  - name: {IMAGE_NAME}\n    newName: registry.example/captf\n    \
         digest: {}\n",
        digest.split_once('@').expect("digest").1
    ));
    let deployment = find(&pinned, "Deployment", "captf-controller-manager");
    let manager = container(deployment, "manager");
    assert_eq!(manager["image"], digest);
    assert_eq!(
        named(&manager["env"], "CAPTF_MANAGER_IMAGE")["value"],
        digest
    );
}

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
