//! The manager Deployment as the spec describes it, and the references kustomize keeps in
//! step when an overlay moves the namespace or the image.

use std::process::Command;

use captf_e2e::captf_binary;
use serde_json::json;

use super::*;

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
