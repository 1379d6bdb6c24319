//! Nothing is applied that nobody approved: `applyPolicy: Manual` plans and waits for
//! `captf.io/approve-plan=<hash>`; under Automatic a plan that deletes or replaces waits for
//! `captf.io/approve-destructive-plan=<plan hash>`, and an approved apply that plans anything
//! else is blocked again. Both approvals are used up by the apply.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

async fn applies(client: &kube::Client, ns: &str) -> Vec<Job> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    jobs.list(&ListParams::default())
        .await
        .expect("Jobs")
        .items
        .into_iter()
        .filter(|j| {
            j.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.contains("-apply-"))
        })
        .collect()
}

fn annotation(tc: &TerraformCluster, key: &str) -> Option<String> {
    tc.metadata.annotations.as_ref()?.get(key).cloned()
}

/// The hash the `DestructivePlanBlocked` message's command approves.
fn approval_command(message: &str) -> String {
    message
        .rsplit("captf.io/approve-destructive-plan=")
        .next()
        .and_then(|command| command.split_whitespace().next())
        .unwrap_or_else(|| panic!("no approval command in {message}"))
        .to_owned()
}

/// Whether the Job mounts the object's plan key (seed 004: only plan Jobs and applies of an
/// approved plan do, since the module can read it).
fn mounts_plan_key(job: &Job) -> bool {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .is_some_and(|p| p.volumes.iter().flatten().any(|v| v.name == "plan-key"))
}

fn observed_serial(tc: &TerraformCluster) -> Option<i64> {
    tc.status
        .as_ref()
        .and_then(|s| s.workspace.observed_state_serial)
}

#[tokio::test]
async fn manual_applies_exactly_the_approved_plan_and_consumes_the_approval() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("manual", &[]).await;
    let name = "manual";
    create_cluster(
        &client,
        &ns,
        name,
        IMAGE,
        "  applyPolicy: Manual\n  variables: {extra_exports: {token: one}}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    // The first apply is not gated.
    wait_until(&api, name, "the first apply", &manager, ready).await;
    let first = applies(&client, &ns).await;
    assert_eq!(first.len(), 1);
    assert!(
        !mounts_plan_key(&first[0]),
        "a guarded apply has no plan key"
    );

    merge_patch(
        &api,
        name,
        serde_json::json!({"spec": {"variables": {"extra_exports": {"token": "two"}}}}),
    )
    .await;
    let waiting = wait_until(&api, name, "a plan awaiting approval", &manager, |t| {
        has(t, "ApplyJobSucceeded", "Unknown", "PlanAwaitingApproval")
    })
    .await;
    let plan = waiting
        .status
        .as_ref()
        .and_then(|s| s.plan.clone())
        .expect("status.plan");
    assert!(plan.plan_hash.starts_with("p2:"), "{plan:?}");
    assert_eq!((plan.add, plan.change, plan.destroy), (0, 0, 0), "{plan:?}");
    assert_eq!(plan.output_changes, Some(1), "{plan:?}");
    let (_, _, message) = condition(&waiting, "ApplyJobSucceeded").expect("condition");
    assert!(
        message.contains(&format!(
            "kubectl annotate terraformcluster {name} -n {ns} captf.io/approve-plan={} --overwrite",
            plan.plan_hash
        )),
        "{message}"
    );
    assert_eq!(applies(&client, &ns).await.len(), 1, "nothing applied");

    // A further change while the plan waits supersedes it with a new plan.
    merge_patch(
        &api,
        name,
        serde_json::json!({"spec": {"variables": {"extra_exports": {"token": "three"}}}}),
    )
    .await;
    let superseded = wait_until(&api, name, "a new plan", &manager, |t| {
        t.status
            .as_ref()
            .and_then(|s| s.plan.as_ref())
            .is_some_and(|p| p.plan_hash != plan.plan_hash)
    })
    .await;
    let plan = superseded.status.and_then(|s| s.plan).expect("status.plan");

    // An approval of another plan does nothing, and the condition says so.
    merge_patch(&api,
        name,
        serde_json::json!({"metadata": {"annotations": {"captf.io/approve-plan": "p2:not-this-one"}}}),
    )
    .await;
    wait_until(
        &api,
        name,
        "the wrong approval to be named",
        &manager,
        |t| {
            condition(t, "ApplyJobSucceeded")
                .is_some_and(|c| c.1 == "PlanAwaitingApproval" && c.2.contains("p2:not-this-one"))
        },
    )
    .await;
    assert_eq!(applies(&client, &ns).await.len(), 1, "nothing applied");

    merge_patch(
        &api,
        name,
        serde_json::json!({"metadata": {"annotations": {"captf.io/approve-plan": plan.plan_hash}}}),
    )
    .await;
    let applied = wait_until(&api, name, "the approved apply", &manager, |t| {
        ready(t) && exports(t).contains("three")
    })
    .await;
    let jobs = applies(&client, &ns).await;
    let approved = jobs
        .iter()
        .find(|j| {
            j.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("captf.io/approved-plan"))
                == Some(&plan.plan_hash)
        })
        .expect("the apply ran with the approved plan");
    assert!(
        mounts_plan_key(approved),
        "the approved apply checks the plan with the key"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let plans: Vec<Job> = jobs
        .list(&ListParams::default().labels("captf.infrastructure.cluster.x-k8s.io/op=plan"))
        .await
        .expect("plan Jobs")
        .items;
    assert!(
        !plans.is_empty() && plans.iter().all(mounts_plan_key),
        "plans use the plan key"
    );
    let consumed = wait_until(&api, name, "the approval consumed", &manager, |t| {
        annotation(t, "captf.io/approve-plan").is_none()
    })
    .await;
    assert!(
        consumed
            .status
            .as_ref()
            .and_then(|s| s.plan.as_ref())
            .is_none(),
        "status.plan cleared"
    );
    assert!(applied.status.is_some());
    let metrics = captf_e2e::Manager::get(&manager.metrics).expect("metrics");
    let approvals = |result: &str| {
        sample(
            &metrics,
            &format!("captf_plan_approvals_total{{kind=\"TerraformCluster\",result=\"{result}\"}}"),
        )
    };
    assert_eq!(
        ["created", "superseded", "approved", "applied", "failed"].map(approvals),
        [Some(2.0), Some(1.0), Some(1.0), Some(1.0), None],
        "{metrics}"
    );
}

#[tokio::test]
async fn a_destructive_change_waits_for_its_approval_which_is_then_used_up() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("guard", &[]).await;
    let name = "guard";
    create_cluster(&client, &ns, name, IMAGE, "").await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let first = wait_until(&api, name, "the first apply", &manager, ready).await;
    let serial = first
        .status
        .as_ref()
        .and_then(|s| s.workspace.observed_state_serial);

    // replace_trigger replaces the "load balancer": the guard holds it.
    merge_patch(
        &api,
        name,
        serde_json::json!({"spec": {"variables": {"replace_trigger": "one"}}}),
    )
    .await;
    let blocked = wait_until(
        &api,
        name,
        "the destructive plan to be held",
        &manager,
        |t| has(t, "ApplyJobSucceeded", "False", "DestructivePlanBlocked"),
    )
    .await;
    let (_, _, message) = condition(&blocked, "ApplyJobSucceeded").expect("condition");
    assert!(
        message.contains("terraform_data.load_balancer"),
        "the message names what would be replaced: {message}"
    );
    assert!(message.contains("nothing was applied"), "{message}");
    let hash = message
        .rsplit("captf.io/approve-destructive-plan=")
        .next()
        .and_then(|command| command.split_whitespace().next())
        .expect("command")
        .to_owned();
    assert!(
        hash.starts_with("p2:"),
        "the approval names the plan: {message}"
    );
    assert_eq!(
        blocked
            .status
            .as_ref()
            .and_then(|s| s.workspace.observed_state_serial),
        serial,
        "the state is untouched"
    );

    merge_patch(&api,
        name,
        serde_json::json!({"metadata": {"annotations": {"captf.io/approve-destructive-plan": hash}}}),
    )
    .await;
    wait_until(&api, name, "the approved apply", &manager, |t| {
        ready(t) && has(t, "ApplyJobSucceeded", "True", "ApplySucceeded")
    })
    .await;
    wait_until(&api, name, "the approval used up", &manager, |t| {
        annotation(t, "captf.io/approve-destructive-plan").is_none()
    })
    .await;

    // New inputs are guarded afresh.
    merge_patch(
        &api,
        name,
        serde_json::json!({"spec": {"variables": {"replace_trigger": "two"}}}),
    )
    .await;
    let again = wait_until(
        &api,
        name,
        "the next destructive plan held",
        &manager,
        |t| {
            has(t, "ApplyJobSucceeded", "False", "DestructivePlanBlocked")
                && condition(t, "ApplyJobSucceeded").is_some_and(|c| !c.2.contains(&hash))
        },
    )
    .await;
    assert!(annotation(&again, "captf.io/approve-destructive-plan").is_none());
}

#[tokio::test]
async fn prevent_destroy_fails_even_an_approved_plan() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("protected", &[]).await;
    let name = "protected";
    create_cluster(
        &client,
        &ns,
        name,
        IMAGE,
        "  variables: {protected_trigger: one}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let first = wait_until(&api, name, "the first apply", &manager, ready).await;
    let serial = first
        .status
        .as_ref()
        .and_then(|s| s.workspace.observed_state_serial);

    // Replacing the protected resource: the engine refuses to plan it.
    merge_patch(
        &api,
        name,
        serde_json::json!({"spec": {"variables": {"protected_trigger": "two"}}}),
    )
    .await;
    let refused = |t: &TerraformCluster| {
        condition(t, "ApplyJobSucceeded").is_some_and(|c| {
            c.0 == "False" && c.1 == "ApplyFailed" && c.2.contains("cannot be destroyed")
        })
    };
    wait_until(&api, name, "the plan refused", &manager, refused).await;
    let failed = applies(&client, &ns).await;
    assert_eq!(failed.len(), 2, "the first apply and the refused one");
    let first_job = first
        .status
        .as_ref()
        .and_then(|s| s.workspace.last_run.as_ref())
        .map(|r| r.job.clone());
    let inputs = failed
        .iter()
        .filter(|j| j.metadata.name != first_job)
        .find_map(|j| j.metadata.annotations.as_ref()?.get("captf.io/inputs-hash"))
        .cloned()
        .expect("the inputs hash of the refused apply");

    // Approving those inputs changes nothing: the retry is refused the same way.
    merge_patch(&api,
        name,
        serde_json::json!({"metadata": {"annotations": {"captf.io/approve-destructive-plan": inputs}}}),
    )
    .await;
    let retried = wait_until(&api, name, "the approved retry refused", &manager, |t| {
        refused(t)
            && t.status
                .as_ref()
                .and_then(|s| s.workspace.last_run.as_ref())
                .is_some_and(|r| {
                    failed
                        .iter()
                        .all(|j| j.metadata.name.as_deref() != Some(r.job.as_str()))
                })
    })
    .await;
    assert_eq!(
        retried
            .status
            .as_ref()
            .and_then(|s| s.workspace.observed_state_serial),
        serial,
        "nothing was destroyed"
    );
    assert_eq!(
        annotation(&retried, "captf.io/approve-destructive-plan").as_deref(),
        Some(inputs.as_str()),
        "a failed apply does not use the approval up"
    );
}

#[tokio::test]
async fn a_destructive_approval_lets_through_only_the_plan_it_names() {
    let Scene {
        env,
        client,
        ns,
        manager,
    } = scene("boundplan", &[]).await;
    // Two versions of one module under one tag: the first also keeps terraform_data.extra,
    // the second has dropped it, so its plans delete it.
    let registry = captf_e2e::registry::TestRegistry::start_for_node(&env, &ns)
        .await
        .expect("registry");
    registry
        .pull_secret(&client, &ns)
        .await
        .expect("pull Secret");
    let noop = captf_e2e::workspace().join("modules/noop/cluster");
    let with_extra = tempfile::tempdir().expect("temp dir");
    for entry in std::fs::read_dir(&noop).expect("module") {
        let path = entry.expect("entry").path();
        std::fs::copy(
            &path,
            with_extra.path().join(path.file_name().expect("name")),
        )
        .expect("copy");
    }
    std::fs::write(
        with_extra.path().join("extra.tf"),
        "resource \"terraform_data\" \"extra\" {\n  input = \"kept\"\n}\n",
    )
    .expect("extra.tf");
    let image = |dir: &std::path::Path, version: &str| {
        let image = captf_e2e::registry::module_image("cluster", dir, version).expect("image");
        registry
            .push_image("modules/guarded:v1", &image)
            .expect("push")
    };
    image(with_extra.path(), "with-extra");
    let tag = format!("{}/modules/guarded:v1", registry.host);
    let name = "bound";
    create_cluster(
        &client,
        &ns,
        name,
        &tag,
        "  jobs: {imagePullSecrets: [{name: registry}]}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait_until(&api, name, "the first apply", &manager, ready).await;
    let always = serde_json::json!({"spec": {"source": {"imagePullPolicy": "Always"}}});
    merge_patch(&api, name, always).await;

    // Replacing the load balancer is blocked; the command approves that plan by its hash.
    let replace = serde_json::json!({"spec": {"variables": {"replace_trigger": "one"}}});
    merge_patch(&api, name, replace).await;
    let blocked =
        |t: &TerraformCluster| has(t, "ApplyJobSucceeded", "False", "DestructivePlanBlocked");
    let first = wait_until(&api, name, "the replace to be blocked", &manager, blocked).await;
    let serial = observed_serial(&first);
    let (_, _, message) = condition(&first, "ApplyJobSucceeded").expect("condition");
    let approved = approval_command(&message);
    assert!(approved.starts_with("p2:"), "{message}");
    assert!(!message.contains("terraform_data.extra"), "{message}");

    // The module changed under the tag since: the approved apply plans to delete more than
    // was approved, and is blocked again, naming both plans. Nothing is applied.
    image(&noop, "without-extra");
    let approve = |hash: &str| serde_json::json!({"metadata": {"annotations": {"captf.io/approve-destructive-plan": hash}}});
    merge_patch(&api, name, approve(&approved)).await;
    let again = wait_until(&api, name, "the larger plan blocked again", &manager, |t| {
        blocked(t)
            && condition(t, "ApplyJobSucceeded")
                .is_some_and(|c| c.2.contains(&format!("not the approved plan {approved}")))
    })
    .await;
    let (_, _, message) = condition(&again, "ApplyJobSucceeded").expect("condition");
    assert!(
        message.contains("terraform_data.extra (delete)"),
        "{message}"
    );
    let larger = approval_command(&message);
    assert_ne!(larger, approved, "{message}");
    assert_eq!(observed_serial(&again), serial, "nothing was applied");
    assert_eq!(
        annotation(&again, "captf.io/approve-destructive-plan").as_deref(),
        Some(approved.as_str()),
        "an approval that let nothing through stays"
    );

    // Approving the plan it shows now applies it, and the approval is used up.
    merge_patch(&api, name, approve(&larger)).await;
    let applied = wait_until(&api, name, "the approved apply", &manager, |t| {
        ready(t)
            && has(t, "ApplyJobSucceeded", "True", "ApplySucceeded")
            && annotation(t, "captf.io/approve-destructive-plan").is_none()
    })
    .await;
    assert_ne!(observed_serial(&applied), serial);
}
