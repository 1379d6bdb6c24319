//! Jobs run as an override ServiceAccount only once it opted in with `captf.io/runner=true`:
//! until then nothing starts and the conditions say what to label; afterwards the namespace's
//! `captf-runner` RoleBinding lists it and the Job's pod runs as it.

use captf_api::TerraformCluster;
use captf_e2e::fixture::{
    TIMEOUT, annotate, create_cluster, has, job_names, ready, scene, wait_until,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";
const NOT_OPTED_IN: &str = "ServiceAccountNotOptedIn";

async fn subjects(client: &kube::Client, ns: &str) -> Vec<String> {
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    bindings
        .get_opt("captf-runner")
        .await
        .ok()
        .flatten()
        .and_then(|b| b.subjects)
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.name)
        .collect()
}

#[tokio::test]
async fn jobs_wait_for_the_accounts_consent_then_run_as_it() {
    let scene = scene("runner-sa", &[]).await;
    let (client, ns) = (&scene.client, scene.ns.as_str());
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let deployer: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "deployer"}})).expect("sa");
    sas.create(&PostParams::default(), &deployer)
        .await
        .expect("ServiceAccount");
    // Opted in, but no object runs its Jobs as it: it never gets the namespace's Secrets.
    let bystander: ServiceAccount = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "bystander", "labels": {"captf.io/runner": "true"}}
    }))
    .expect("sa");
    sas.create(&PostParams::default(), &bystander)
        .await
        .expect("ServiceAccount");

    create_cluster(
        client,
        ns,
        "c",
        IMAGE,
        "  jobs: {serviceAccountName: deployer}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    let waiting = wait_until(
        &api,
        "c",
        "the apply to wait for the account's consent",
        &scene.manager,
        |tc| {
            has(tc, "RunnerRBACReady", "False", NOT_OPTED_IN)
                && has(tc, "ApplyJobSucceeded", "False", NOT_OPTED_IN)
        },
    )
    .await;
    let message = captf_e2e::fixture::condition(&waiting, "ApplyJobSucceeded")
        .map(|(_, _, m)| m)
        .unwrap_or_default();
    assert!(
        message.contains(&format!(
            "kubectl label serviceaccount deployer -n {ns} captf.io/runner=true"
        )),
        "{message}"
    );
    assert!(
        job_names(client, ns).await.is_empty(),
        "no Job may start before the consent"
    );
    assert_eq!(subjects(client, ns).await, ["captf-runner"]);

    sas.patch(
        "deployer",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"labels": {"captf.io/runner": "true"}}})),
    )
    .await
    .expect("opt in");
    wait_until(
        &api,
        "c",
        "Ready once the account opted in",
        &scene.manager,
        ready,
    )
    .await;
    assert_eq!(subjects(client, ns).await, ["captf-runner", "deployer"]);
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let runs_as: Vec<Option<String>> = jobs
        .list(&ListParams::default())
        .await
        .expect("Jobs")
        .items
        .into_iter()
        .map(|j| j.spec?.template.spec?.service_account_name)
        .collect();
    assert!(!runs_as.is_empty());
    assert!(
        runs_as.iter().all(|sa| sa.as_deref() == Some("deployer")),
        "{runs_as:?}"
    );

    // Withdrawing the consent takes the account off the RoleBinding at the next pass.
    sas.patch(
        "deployer",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"labels": {"captf.io/runner": null}}})),
    )
    .await
    .expect("opt out");
    annotate(&api, "c", "captf-e2e/poke", Some("1")).await;
    captf_testenv::wait_for("deployer to leave the RoleBinding", TIMEOUT, || async {
        Ok((subjects(client, ns).await == ["captf-runner"]).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", scene.manager.log()));
}
