//! A TerraformCluster after its first apply: spec changes re-apply and are backed up, a failed
//! apply backs off and retries, a Job deleted mid-apply is noticed and its apply runs again,
//! and the Job caps hold. The real manager process, real Jobs, OpenTofu and the no-op module.

use captf_api::TerraformCluster;
use captf_e2e::Manager;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

async fn set_variables(api: &Api<TerraformCluster>, name: &str, variables: serde_json::Value) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"spec": {"variables": variables}})),
    )
    .await
    .expect("patch variables");
}

fn created(job: &Job) -> Timestamp {
    job.metadata.creation_timestamp.clone().expect("created").0
}

fn finished(job: &Job) -> Option<Timestamp> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .and_then(|c| c.last_transition_time.clone())
        .map(|t| t.0)
}

fn last_run_job(tc: &TerraformCluster) -> Option<String> {
    tc.status
        .as_ref()?
        .workspace
        .last_run
        .as_ref()
        .map(|r| r.job.clone())
}

fn serial(tc: &TerraformCluster) -> i64 {
    tc.status
        .as_ref()
        .and_then(|s| s.workspace.observed_state_serial)
        .unwrap_or(0)
}

#[tokio::test]
async fn a_spec_change_reapplies_backs_up_the_state_and_prunes_history() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("changes", &["--state-backups=2"]).await;
    let name = "changes";
    create_cluster(
        &client,
        &ns,
        name,
        IMAGE,
        "  variables: {extra_exports: {token: one}}\n  jobs: {successfulJobsHistoryLimit: 1}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let mut tc = wait_until(&api, name, "the first apply", &manager, ready).await;
    let suffix = tc
        .status
        .as_ref()
        .and_then(|s| s.workspace.state_secret_suffix.clone())
        .expect("suffix");

    // Each change of the inputs applies again and writes a new serial.
    let mut serials = vec![serial(&tc)];
    for token in ["two", "three"] {
        let before = last_run_job(&tc);
        set_variables(
            &api,
            name,
            serde_json::json!({"extra_exports": {"token": token}}),
        )
        .await;
        tc = wait_until(
            &api,
            name,
            &format!("the apply of {token}"),
            &manager,
            |t| last_run_job(t) != before && ready(t) && serial(t) > *serials.last().expect("one"),
        )
        .await;
        assert!(
            has(&tc, "ApplyJobSucceeded", "True", "ApplySucceeded"),
            "{:?}",
            condition(&tc, "ApplyJobSucceeded")
        );
        serials.push(serial(&tc));
    }
    let exports = tc.status.as_ref().and_then(|s| s.exports.clone());
    assert!(
        serde_json::to_string(&exports)
            .expect("json")
            .contains("three"),
        "exports follow the new inputs: {exports:?}"
    );

    // A backup per serial, rotated to --state-backups=2, newest first in status.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let backups = wait_for("backups rotated to two", TIMEOUT, || async {
        let list = secrets
            .list(&ListParams::default().labels(&format!("captf.io/state-backup-suffix={suffix}")))
            .await?
            .items;
        Ok((list.len() == 2).then_some(list))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let mut kept: Vec<i64> = backups
        .iter()
        .map(|b| {
            let labels = b.metadata.labels.clone().unwrap_or_default();
            assert!(
                !labels.keys().any(|k| k.starts_with("tfstate")),
                "a backup never looks like live state: {labels:?}"
            );
            assert_eq!(
                labels.get("captf.io/state-backup").map(String::as_str),
                Some("true")
            );
            let owner = &b.metadata.owner_references.clone().unwrap_or_default()[0];
            assert_eq!(owner.kind, "TerraformCluster");
            assert_ne!(
                owner.controller,
                Some(true),
                "backups are not controller-owned"
            );
            b.metadata.annotations.clone().unwrap_or_default()["captf.io/state-backup-serial"]
                .parse()
                .expect("serial")
        })
        .collect();
    kept.sort_unstable();
    assert_eq!(
        kept,
        serials[1..].to_vec(),
        "the two newest serials are kept"
    );
    let listed: Vec<i64> = tc
        .status
        .as_ref()
        .and_then(|s| s.workspace.state_backups.clone())
        .unwrap_or_default()
        .iter()
        .map(|b| b.serial)
        .collect();
    assert_eq!(listed, vec![serials[2], serials[1]], "status.stateBackups");

    // successfulJobsHistoryLimit: 1 keeps only the newest apply Job.
    wait_for("apply history pruned to one Job", TIMEOUT, || async {
        Ok((jobs_of(&client, &ns, name, "apply").await.len() == 1).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));

    let metrics = Manager::get(&manager.metrics).expect("metrics");
    let series = |s: &str| sample(&metrics, s).unwrap_or_else(|| panic!("{s} missing:\n{metrics}"));
    let object = format!("kind=\"TerraformCluster\",namespace=\"{ns}\",name=\"{name}\"");
    assert_eq!(
        series("captf_state_backups_total{kind=\"TerraformCluster\",result=\"taken\"}"),
        3.0
    );
    assert_eq!(
        series("captf_jobs_total{kind=\"TerraformCluster\",op=\"apply\",result=\"succeeded\"}"),
        3.0
    );
    assert_eq!(
        series(
            "captf_job_duration_seconds_count{kind=\"TerraformCluster\",op=\"apply\",result=\"succeeded\"}"
        ),
        3.0
    );
    assert_eq!(
        series("captf_job_queue_seconds_count{kind=\"TerraformCluster\",op=\"apply\"}"),
        3.0
    );
    assert_eq!(
        series(
            "captf_job_step_duration_seconds_count{kind=\"TerraformCluster\",op=\"apply\",step=\"init\"}"
        ),
        3.0,
        "every apply's init step is timed"
    );
    assert!(
        series(
            "captf_resources_changed_total{kind=\"TerraformCluster\",op=\"apply\",action=\"create\"}"
        ) >= 1.0,
        "the first apply created the module's resources"
    );
    assert_eq!(series(&format!("captf_ready{{{object}}}")), 1.0);
    assert!(series(&format!("captf_state_bytes{{{object}}}")) > 0.0);
    assert!(series(&format!("captf_inputs_bytes{{{object}}}")) > 0.0);
    assert!(series(&format!("captf_state_resources{{{object}}}")) >= 1.0);
    assert!(
        series(&format!(
            "captf_last_success_timestamp_seconds{{{object},op=\"apply\"}}"
        )) > 1.7e9
    );
    assert_eq!(
        series("captf_jobs_active{kind=\"TerraformCluster\",op=\"apply\"}"),
        0.0,
        "nothing runs at rest"
    );
}

#[tokio::test]
async fn a_failed_apply_backs_off_and_the_fixed_inputs_apply_after_the_delay() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("backoff", &[]).await;
    let name = "backoff";
    create_cluster(&client, &ns, name, IMAGE, "  variables: {fail_plan: true}").await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let failed = wait_until(&api, name, "the apply to fail", &manager, |t| {
        has(t, "ApplyJobSucceeded", "False", "ApplyFailed")
    })
    .await;
    let (_, _, message) = condition(&failed, "ApplyJobSucceeded").expect("condition");
    assert!(
        message.contains("step plan") && message.contains("precondition"),
        "the failure says where and why: {message}"
    );
    let first = jobs_of(&client, &ns, name, "apply").await;
    assert_eq!(first.len(), 1);
    let failed_at = finished(&first[0]).expect("the failed Job finished");
    // The runner's Events say the same while the object waits.
    let uid = failed.metadata.uid.clone().expect("uid");
    let lines = reasons_and_notes(&runner_events(&client, &ns, &uid, "RunFinished").await);
    assert_lines_start_with(
        &lines,
        &[
            "Warning StepFailed: step plan failed (exit 1) after ",
            "Warning RunFinished: apply failed in step plan after ",
        ],
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("StepFailed") && l.contains("precondition")),
        "StepFailed carries the failure summary:\n{}",
        lines.join("\n")
    );

    // The fix is an input change, but the apply still waits out the first retry delay (1 min
    // plus up to a tenth of jitter).
    set_variables(&api, name, serde_json::json!({"fail_plan": false})).await;
    wait_until(&api, name, "the fixed apply", &manager, ready).await;
    let applies = jobs_of(&client, &ns, name, "apply").await;
    assert_eq!(applies.len(), 2, "one retry");
    let waited = created(&applies[1]).duration_since(failed_at);
    assert!(
        waited.as_secs() >= 60,
        "the retry started {waited:?} after the failure, before the 1 minute backoff"
    );
    assert!(
        waited.as_secs() < 60 + 6 + 30,
        "the retry started {waited:?} after the failure: long after its backoff"
    );
    let metrics = Manager::get(&manager.metrics).expect("metrics");
    // The failed plan left an empty state behind, so the apply is due as
    // StateWithoutInputsHash; while it waits, the decision says Backoff.
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("captf_reconcile_op_decisions_total")
                && l.contains("op=\"none\"")
                && l.contains("Backoff\"}")),
        "the wait is visible as a decision:\n{metrics}"
    );
    assert!(
        metrics.contains(
            "captf_job_errors_total{kind=\"TerraformCluster\",op=\"apply\",error_kind=\"step\",step=\"plan\"}"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_job_deleted_mid_apply_is_noticed_and_the_apply_runs_again() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("lostjob", &[]).await;
    let name = "lostjob";
    create_cluster(
        &client,
        &ns,
        name,
        IMAGE,
        "  variables: {sleep_seconds: 120}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let (running, lost) = active_job(&api, name, &manager).await;
    let status = running.status.clone().expect("status");
    let suffix = status
        .workspace
        .state_secret_suffix
        .clone()
        .expect("suffix");

    // Delete the Job once the engine is applying (its state lock says so): the sleep provisioner
    // is cut short, as a drain or a hasty operator would.
    wait_for_apply_lock(&client, &ns, &suffix, &manager).await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    jobs.delete(&lost, &DeleteParams::background())
        .await
        .expect("delete the Job");

    let noticed = wait_until(&api, name, "the lost apply to be noticed", &manager, |t| {
        condition(t, "ApplyJobSucceeded")
            .is_some_and(|c| c.1 == "ApplyFailed" && c.2.contains("disappeared"))
            || jobs_retried(t, &lost)
    })
    .await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let durable = secrets
        .get(&format!("captf-inputs-c-{name}"))
        .await
        .expect("durable inputs");
    let recorded = durable.metadata.annotations.clone().unwrap_or_default();
    assert!(
        recorded.get("captf.io/interrupted-apply") == Some(&lost) || jobs_retried(&noticed, &lost),
        "the interruption is recorded on the durable inputs: {recorded:?}"
    );

    // The apply runs again, marked as following the lost one. The cut-short provisioner left
    // its resource tainted, so the guarded re-apply may be held for approval first.
    let retry = wait_for("a second apply Job", TIMEOUT, || async {
        let applies = jobs_of(&client, &ns, name, "apply").await;
        Ok(applies
            .into_iter()
            .find(|j| j.metadata.name.as_deref() != Some(lost.as_str())))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    assert_eq!(
        retry
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .get("captf.io/after-interrupted-apply"),
        Some(&lost)
    );
    let settled = wait_until(&api, name, "the re-apply to finish", &manager, |t| {
        ready(t) || has(t, "ApplyJobSucceeded", "False", "DestructivePlanBlocked")
    })
    .await;
    if !ready(&settled) {
        let (_, _, message) = condition(&settled, "ApplyJobSucceeded").expect("condition");
        let hash = message
            .rsplit("captf.io/approve-destructive-plan=")
            .next()
            .and_then(|command| command.split_whitespace().next())
            .expect("the message names the approval")
            .to_owned();
        assert!(hash.starts_with("p2:"), "{message}");
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"metadata": {"annotations": {
                "captf.io/approve-destructive-plan": hash}}})),
        )
        .await
        .expect("approve");
        wait_until(&api, name, "the approved re-apply", &manager, ready).await;
    }
    wait_for("the interruption record cleared", TIMEOUT, || async {
        let durable = secrets.get(&format!("captf-inputs-c-{name}")).await?;
        Ok((!durable
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("captf.io/interrupted-apply"))
        .then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
}

/// The lost Job was followed by another apply already (the notice may be overwritten by it).
fn jobs_retried(tc: &TerraformCluster, lost: &str) -> bool {
    tc.status
        .as_ref()
        .and_then(|s| s.workspace.active_job.as_ref())
        .is_some_and(|a| a.name != lost)
}

#[tokio::test]
async fn the_job_cap_holds_and_the_waiting_apply_says_so() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("caps", &["--max-active-jobs=1"]).await;
    // The caps are soft (counted from the manager's cache): the second object comes once the
    // first one's Job exists, as it would in any fleet that is not created in one instant.
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let slow = "  variables: {sleep_seconds: 15}";
    create_cluster(&client, &ns, "first", IMAGE, slow).await;
    wait_until(&api, "first", "the first apply Job", &manager, |t| {
        t.status
            .as_ref()
            .is_some_and(|s| s.workspace.active_job.is_some())
    })
    .await;
    create_cluster(&client, &ns, "second", IMAGE, slow).await;
    let waiting = wait_for("one apply to wait for a Job slot", TIMEOUT, || async {
        for name in ["first", "second"] {
            let tc = api.get(name).await?;
            if has(&tc, "ApplyJobSucceeded", "Unknown", "WaitingForJobSlot") {
                return Ok(Some(tc));
            }
        }
        Ok(None)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let (_, _, message) = condition(&waiting, "ApplyJobSucceeded").expect("condition");
    assert!(
        message.contains("1 Jobs run against a manager limit of 1")
            && message.contains("--max-active-jobs"),
        "{message}"
    );
    let metrics = Manager::get(&manager.metrics).expect("metrics");
    assert_eq!(
        sample(
            &metrics,
            "captf_jobs_active{kind=\"TerraformCluster\",op=\"apply\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    assert!(
        sample(
            &metrics,
            "captf_lease_waits_total{kind=\"TerraformCluster\",reason=\"job_slot\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
    // Never two at once; both get there in turn.
    for name in ["first", "second"] {
        wait_until(&api, name, &format!("{name} Ready"), &manager, ready).await;
    }
    let mut spans: Vec<(Timestamp, Timestamp)> = Vec::new();
    for name in ["first", "second"] {
        for job in jobs_of(&client, &ns, name, "apply").await {
            spans.push((created(&job), finished(&job).expect("finished")));
        }
    }
    spans.sort();
    assert_eq!(spans.len(), 2);
    assert!(
        spans[1].0 >= spans[0].1,
        "the second Job was created before the first finished: {spans:?}"
    );
}

#[tokio::test]
async fn an_image_that_cannot_be_pulled_is_named_before_and_at_the_deadline() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("pullfail", &[]).await;
    let name = "pullfail";
    // No such image on the node: the Job's pod waits in ErrImagePull until its deadline.
    create_cluster(
        &client,
        &ns,
        name,
        "captf.local/modules/no-such-module:e2e",
        "  jobs: {activeDeadlineSeconds: 90, lockTimeoutSeconds: 10}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let said = |t: &TerraformCluster, part: &str| {
        condition(t, "ApplyJobSucceeded").is_some_and(|(status, reason, message)| {
            status == "False"
                && reason == "ImagePullFailed"
                && message.contains("cannot pull captf.local/modules/no-such-module:e2e")
                && message.contains(part)
        })
    };
    let running = wait_until(
        &api,
        name,
        "ImagePullFailed while the Job runs",
        &manager,
        |t| said(t, "fails at its deadline"),
    )
    .await;
    let (_, _, message) = condition(&running, "ApplyJobSucceeded").expect("condition");
    assert!(
        message.contains("ErrImagePull") || message.contains("ImagePullBackOff"),
        "{message}"
    );
    assert!(
        running
            .status
            .as_ref()
            .and_then(|s| s.workspace.active_job.as_ref())
            .is_some(),
        "the Job still runs"
    );

    // At the deadline the failure keeps its cause rather than reading JobDeadlineExceeded.
    wait_until(
        &api,
        name,
        "ImagePullFailed at the deadline",
        &manager,
        |t| said(t, "reached its deadline without it"),
    )
    .await;
}
