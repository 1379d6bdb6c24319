//! The webhook serving certificate is cert-manager's, and a renewal reaches the running
//! manager: the kubelet updates the mounted Secret, the manager serves the new certificate
//! without a restart, and the API server, whose CA bundle cainjector keeps, goes on calling it.

use captf_e2e::install::NAMESPACE;
use captf_e2e::served_certificate_at;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};

use crate::{exclusive, installed, wait};

const SECRET: &str = "captf-webhook-service-cert";

/// The PEM certificate cert-manager wrote, as DER.
fn der(secret: &Secret) -> Vec<u8> {
    let pem = &secret.data.as_ref().expect("data")["tls.crt"].0;
    let text = String::from_utf8_lossy(pem);
    let body: String = text
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE-----"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &body)
        .expect("a PEM certificate")
}

/// Restarts and identities of the manager pods: a renewal must change neither.
async fn pods(client: &kube::Client) -> Vec<(String, i32)> {
    let mut pods: Vec<_> = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default().labels("control-plane=controller-manager"))
        .await
        .expect("pods")
        .items
        .into_iter()
        .map(|p| {
            let restarts = p
                .status
                .and_then(|s| s.container_statuses)
                .into_iter()
                .flatten()
                .map(|c| c.restart_count)
                .sum();
            (p.metadata.uid.unwrap_or_default(), restarts)
        })
        .collect();
    pods.sort();
    pods
}

#[tokio::test]
async fn a_renewed_certificate_reaches_the_running_manager() {
    let (env, client, _) = installed().await;
    // Exclusive: a webhook call may fail in the moment the Secret and the CA bundle move.
    let _alone = exclusive(&client).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let before = der(&secrets.get(SECRET).await.expect("the serving Secret"));
    let service = Api::<Service>::namespaced(client.clone(), NAMESPACE)
        .get("captf-webhook-service")
        .await
        .expect("the webhook Service");
    let cluster_ip: std::net::IpAddr = service
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("a ClusterIP")
        .parse()
        .expect("an address");
    let address = std::net::SocketAddr::new(cluster_ip, 443);
    let served = served_certificate_at(address).expect("the Service serves TLS");
    assert_eq!(
        served, before,
        "the Service serves cert-manager's certificate"
    );
    let pods_before = pods(&client).await;

    // What `cmctl renew` does: the Issuing condition, set on the Certificate's status.
    let certificates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate"),
            "certificates",
        ),
    );
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    certificates
        .patch_status(
            "captf-serving-cert",
            &PatchParams::apply("captf-e2e-renew").force(),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                "metadata": {"name": "captf-serving-cert", "namespace": NAMESPACE},
                "status": {"conditions": [{
                    "type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
                    "message": "renewal requested by the end-to-end test",
                    "lastTransitionTime": now,
                }]},
            })),
        )
        .await
        .expect("renewal requested");

    let renewed = wait(env, "cert-manager to write a new certificate", || async {
        let now = der(&secrets.get(SECRET).await?);
        Ok((now != before).then_some(now))
    })
    .await;
    wait(
        env,
        "the manager to serve the renewed certificate",
        || async {
            let served =
                tokio::task::spawn_blocking(move || served_certificate_at(address)).await?;
            Ok(served.ok().filter(|s| *s == renewed).map(|_| ()))
        },
    )
    .await;
    assert_eq!(pods(&client).await, pods_before, "no manager pod restarted");
}
