//! A TerraformCluster from create to delete: the real `captf manager` process, real Jobs on the
//! test node (kubelet and containerd, real images), the runner and OpenTofu (and Terraform) applying the no-op module through the
//! kubernetes backend.

use captf_api::TerraformCluster;
use captf_e2e::fixture::{
    TIMEOUT, assert_lines_start_with, condition, create_cluster, namespace_with_identity,
    reasons_and_notes, runner_events, wait_for_job,
};
use captf_e2e::{Manager, manager_kubeconfig};
use captf_testenv::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams};

async fn lifecycle(engine_tag: &str, prefix: &str) {
    let (env, client, ns) = namespace_with_identity(prefix).await;
    // The manager runs as its ServiceAccount with exactly the RBAC of config/rbac.
    let kubeconfig = manager_kubeconfig(&env, &client)
        .await
        .expect("manager RBAC");
    let manager = Manager::start(&env, &kubeconfig, prefix, &[&format!("--namespace={ns}")])
        .expect("manager");
    let name = "demo";
    create_cluster(
        &client,
        &ns,
        name,
        &format!("captf.local/modules/noop-cluster:{engine_tag}"),
        "",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let ready = wait_for("the TerraformCluster to be Ready", TIMEOUT, || async {
        let tc = api.get(name).await?;
        Ok(condition(&tc, "Ready")
            .filter(|c| c.0 == "True")
            .map(|_| tc))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let status = ready.status.clone().expect("status");
    assert_eq!(
        status.workspace.initialization.and_then(|i| i.provisioned),
        Some(true)
    );
    assert_eq!(
        condition(&ready, "StateReadable").map(|c| c.1).as_deref(),
        Some("StateRead")
    );
    assert_eq!(
        condition(&ready, "ApplyJobSucceeded")
            .map(|c| c.1)
            .as_deref(),
        Some("ApplySucceeded")
    );
    // The module's endpoint is written back to spec once.
    let endpoint = ready
        .spec
        .control_plane_endpoint
        .clone()
        .expect("endpoint written back");
    assert_eq!(endpoint.port, Some(6443));
    assert!(status.exports.is_some(), "exports published");
    assert!(status.workspace.state_secret_suffix.is_some());

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let state = secrets
        .list(&ListParams::default().labels("tfstate=true"))
        .await
        .expect("list")
        .items;
    assert_eq!(state.len(), 1, "one state Secret");
    let annotations = state[0].metadata.annotations.clone().unwrap_or_default();
    assert!(
        annotations
            .get("captf.io/inputs-hash")
            .is_some_and(|h| h.starts_with("h2:")),
        "state adopted with the inputs hash"
    );
    let durable = secrets
        .get("captf-inputs-c-demo")
        .await
        .expect("durable inputs");
    assert_eq!(
        durable
            .metadata
            .annotations
            .unwrap_or_default()
            .get("captf.io/applied")
            .map(String::as_str),
        Some("true")
    );

    // The runner told the object what it did while it ran, as progress Events related to the
    // apply Job.
    let uid = ready.metadata.uid.clone().expect("uid");
    let job = status
        .workspace
        .last_run
        .as_ref()
        .map(|r| r.job.clone())
        .expect("last run");
    let progress = runner_events(&client, &ns, &uid, "RunFinished").await;
    let lines = reasons_and_notes(&progress);
    assert_lines_start_with(
        &lines,
        &[
            "Normal RunStarted: apply started: image captf.local/modules/noop-cluster",
            "Normal StepStarted: step init started",
            "Normal StepSucceeded: step init succeeded (exit 0)",
            "Normal PlanSummary: plan: 1 to create, 0 to update, 0 to replace, 0 to delete",
            "Normal StepStarted: step apply started",
            "Normal ResourcesChanged: apply changed resources: 1 added, 0 changed, 0 destroyed",
            "Normal RunFinished: apply succeeded in ",
        ],
    );
    assert!(
        lines.first().is_some_and(|l| l.contains("RunStarted"))
            && lines.last().is_some_and(|l| l.contains("RunFinished")),
        "RunStarted comes first and RunFinished last:\n{}",
        lines.join("\n")
    );
    assert!(
        progress
            .iter()
            .all(|e| e.related.as_ref().and_then(|r| r.name.as_deref()) == Some(job.as_str())),
        "every Event names the Job {job}"
    );

    let metrics = Manager::get(&manager.metrics).expect("metrics");
    for family in [
        "captf_build_info",
        "captf_jobs_total{kind=\"TerraformCluster\",op=\"apply\",result=\"succeeded\"}",
        "captf_ready{kind=\"TerraformCluster\"",
    ] {
        assert!(
            metrics.contains(family),
            "{family} not exported:\n{metrics}"
        );
    }

    // Nothing changes: no second apply.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let applies = |list: Vec<Job>| {
        list.into_iter()
            .filter(|j| {
                j.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.contains("-apply-"))
            })
            .count()
    };
    assert_eq!(
        applies(jobs.list(&ListParams::default()).await.expect("jobs").items),
        1
    );

    // Deletion: a destroy Job, then state, inputs and finalizer go. The destroy Job is owned by
    // the object and collected with it, so watch for it while it exists.
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_for_job(&client, &ns, "-destroy-", &manager).await;
    wait_for("the TerraformCluster to be gone", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    assert!(
        secrets
            .list(&ListParams::default().labels("tfstate=true"))
            .await
            .expect("list")
            .items
            .is_empty(),
        "state removed"
    );
    assert!(
        secrets
            .get_opt("captf-inputs-c-demo")
            .await
            .expect("get")
            .is_none(),
        "durable inputs removed"
    );
}

#[tokio::test]
async fn a_terraform_cluster_goes_from_create_to_ready_to_deleted_with_opentofu() {
    lifecycle("e2e", "tofu-life").await;
}

#[tokio::test]
async fn a_terraform_cluster_goes_from_create_to_ready_to_deleted_with_terraform() {
    lifecycle("e2e-terraform", "tf-life").await;
}
