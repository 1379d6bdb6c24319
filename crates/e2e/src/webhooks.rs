//! CAPTF's own admission webhooks registered with the test control plane: a serving
//! certificate for loopback, and `config/webhook/manifests.yaml` pointed at one manager and one
//! namespace, removed again when the test ends.

use kube::api::{Api, DeleteParams, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::workspace;

/// The label that routes a test's identities to its webhook (identities are cluster-scoped,
/// so a namespace selector cannot): its value is the test's namespace.
pub const ROUTE: &str = "captf-e2e/webhooks";

pub fn vwc_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
        ),
        "validatingwebhookconfigurations",
    )
}

/// A self-signed serving certificate for 127.0.0.1 written to `dir`; its PEM.
pub fn write_certificate(dir: &std::path::Path) -> String {
    let certified =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("certificate");
    let pem = certified.cert.pem();
    // The key first: the manager reads a pair once both files changed.
    std::fs::write(dir.join("tls.key"), certified.signing_key.serialize_pem()).expect("key");
    std::fs::write(dir.join("tls.crt"), &pem).expect("cert");
    pem
}

/// `config/webhook/manifests.yaml` as this test registers it: every entry calls `port` on
/// loopback trusting `ca`, and only for this namespace's objects and this test's identities.
pub fn configuration(name: &str, ns: &str, port: u16, ca: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(workspace().join("config/webhook/manifests.yaml"))
        .expect("config/webhook/manifests.yaml");
    let mut config: serde_json::Value = serde_yaml::from_str(&text).expect("YAML");
    assert_eq!(config["kind"], "ValidatingWebhookConfiguration");
    config["metadata"] = json!({ "name": name });
    let ca = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca);
    for hook in config["webhooks"].as_array_mut().expect("webhooks") {
        let path = hook["clientConfig"]["service"]["path"]
            .as_str()
            .expect("path")
            .to_owned();
        hook["clientConfig"] =
            json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca});
        if hook["rules"][0]["resources"][0] == "terraformclusteridentities" {
            hook["objectSelector"] = json!({"matchLabels": {ROUTE: ns}});
        } else {
            hook["namespaceSelector"] = json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
        }
    }
    config
}

/// Removes the test's webhook configuration when the test ends, however it ends.
pub struct Registered {
    pub kubeconfig: std::path::PathBuf,
    pub name: String,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let (kubeconfig, name) = (self.kubeconfig.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                if let Ok(client) = captf_testenv::client_from_kubeconfig(&kubeconfig).await {
                    let api: Api<DynamicObject> = Api::all_with(client, &vwc_resource());
                    let _ = api.delete(&name, &DeleteParams::default()).await;
                }
            });
        })
        .join();
    }
}

/// A manager for `ns` (with `extra` flags) serving the webhooks on a free port with a fresh
/// certificate, and `config/webhook` registered to call it for `ns` until the guard drops.
pub async fn manager_with_webhooks(
    env: &captf_testenv::TestEnv,
    client: &kube::Client,
    kubeconfig: &std::path::Path,
    ns: &str,
    extra: &[&str],
) -> (crate::Manager, Registered) {
    let cert_dir = env.dir.join(format!("webhook-{ns}"));
    std::fs::create_dir_all(&cert_dir).expect("cert dir");
    let pem = write_certificate(&cert_dir);
    let port = captf_testenv::process::free_port().expect("port");
    let mut flags = vec![
        format!("--namespace={ns}"),
        format!("--webhook-port={port}"),
        format!("--webhook-cert-dir={}", cert_dir.display()),
    ];
    flags.extend(extra.iter().map(|f| (*f).to_owned()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let manager = crate::Manager::start(env, kubeconfig, ns, &flags).expect("manager");
    let name = format!("captf-e2e-{ns}");
    crate::apply_yaml(
        client,
        &serde_json::to_string(&configuration(&name, ns, port, &pem)).expect("json"),
    )
    .await
    .expect("CAPTF's webhook configuration");
    let registered = Registered {
        kubeconfig: env.kubeconfig().to_owned(),
        name,
    };
    (manager, registered)
}
