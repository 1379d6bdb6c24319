//! The manager's secure metrics server against the real API server: HTTPS with the self-signed
//! certificate made at start, each scrape's bearer token checked by TokenReview and its user's
//! permission by SubjectAccessReview, with the manager holding only config/rbac's role.

use captf_e2e::fixture::{TIMEOUT, namespace_with_identity};
use captf_e2e::{
    Manager, apply_file, apply_yaml, manager_kubeconfig, service_account_token, workspace,
};
use captf_testenv::wait_for;

#[tokio::test]
async fn metrics_need_a_token_whose_user_may_get_them() {
    let (env, client, ns) = namespace_with_identity("metrics-auth").await;
    let kubeconfig = manager_kubeconfig(&env, &client).await.expect("RBAC");
    apply_file(
        &client,
        &workspace().join("config/rbac/metrics_reader_role.yaml"),
    )
    .await
    .expect("the metrics reader ClusterRole");
    // `scraper` is bound to captf-metrics-reader; `stranger` may do nothing.
    apply_yaml(
        &client,
        &format!(
            r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: scraper, namespace: {ns}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: stranger, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: captf-metrics-reader-{ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: captf-metrics-reader}}
subjects:
- {{kind: ServiceAccount, name: scraper, namespace: {ns}}}
"#
        ),
    )
    .await
    .expect("ServiceAccounts and binding");
    let scraper = service_account_token(&client, &ns, "scraper")
        .await
        .expect("scraper token");
    let stranger = service_account_token(&client, &ns, "stranger")
        .await
        .expect("stranger token");

    let namespace = format!("--namespace={ns}");
    let manager =
        Manager::start_secure(&env, &kubeconfig, &ns, &[&namespace]).expect("manager starts");
    let url = manager.metrics.clone();
    assert!(url.starts_with("https://"), "{url}");
    let fail = |e: anyhow::Error| -> ! { panic!("{e}\nmanager log:\n{}", manager.log()) };

    // (1) No token: 401, as soon as the server answers at all.
    let (status, body) = wait_for("the metrics server to answer", TIMEOUT, || async {
        Ok(Manager::get_https(&url, None).ok())
    })
    .await
    .unwrap_or_else(|e| fail(e));
    assert_eq!(status, 401, "no token: {body}");
    let (status, body) = Manager::get_https(&url, Some("not-a-token")).unwrap_or_else(|e| fail(e));
    assert_eq!(status, 401, "a token the API server does not know: {body}");

    // (2) An authenticated user without the permission: 403, and no metrics.
    let (status, body) = Manager::get_https(&url, Some(&stranger)).unwrap_or_else(|e| fail(e));
    assert_eq!(status, 403, "stranger: {body}\n{}", manager.log());
    assert!(!body.contains("captf_build_info"), "{body}");

    // (3) A user bound to captf-metrics-reader: the metrics. (Polled: the binding reaches the
    // API server's authorizer through a watch.)
    let body = wait_for("the scraper to get the metrics", TIMEOUT, || async {
        let (status, body) = Manager::get_https(&url, Some(&scraper))?;
        Ok((status == 200).then_some(body))
    })
    .await
    .unwrap_or_else(|e| fail(e));
    assert!(body.contains("captf_build_info"), "{body}");

    // Plain HTTP is not served on the diagnostics address.
    let plain = Manager::get(&url.replacen("https://", "http://", 1)).unwrap_or_default();
    assert!(
        !plain.contains("captf_build_info"),
        "served over HTTP: {plain}"
    );
    // Tokens never reach the log.
    let log = manager.whole_log();
    assert!(
        !log.contains(&scraper) && !log.contains(&stranger),
        "a token was logged:\n{log}"
    );
}
