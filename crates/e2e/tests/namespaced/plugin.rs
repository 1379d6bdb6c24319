//! `kubectl captf`, run as a user runs it: the `captf` binary with a kubeconfig and `-n`,
//! against the local control plane and a manager. Each command's output and exit code, and
//! what it changed on the object.

use std::process::Command;

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use kube::api::{Api, DeleteParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";
const RETRY: &str = captf_api::annotations::RETRY;
const RETRY_TOKEN: &str = captf_api::annotations::RETRY_TOKEN;
const REPLAN: &str = captf_api::annotations::REPLAN;
const REPLAN_TOKEN: &str = captf_api::annotations::REPLAN_TOKEN;

/// One annotation of the TerraformCluster `name`, as it reads now.
async fn annotation(api: &Api<TerraformCluster>, name: &str, key: &str) -> Option<String> {
    let object = api.get(name).await.expect("cluster");
    object.metadata.annotations?.get(key).cloned()
}

/// The value of `key` on a Job.
fn carried<'j>(job: &'j k8s_openapi::api::batch::v1::Job, key: &str) -> Option<&'j str> {
    job.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn fails(scene: &Scene, args: &[&str], answer: &str, code: i32, says: &str) {
    let ran = captf(scene, args, answer);
    assert_eq!(
        ran.code, code,
        "captf {args:?}\nstdout: {}\nstderr: {}",
        ran.stdout, ran.stderr
    );
    assert!(ran.stderr.contains(says), "captf {args:?}: {}", ran.stderr);
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test]
async fn the_plugin_shows_approves_restores_and_abandons() {
    let scene = scene("plugin", &[]).await;
    let name = "plugged";
    let object = format!("tfc/{name}");
    create_cluster(
        &scene.client,
        &scene.ns,
        name,
        IMAGE,
        "  applyPolicy: Manual\n  variables: {extra_exports: {token: one}}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(scene.client.clone(), &scene.ns);
    let first = wait_until(
        &api,
        name,
        "the first apply, backed up",
        &scene.manager,
        |t| {
            ready(t)
                && t.status.as_ref().is_some_and(|s| {
                    s.workspace
                        .state_backups
                        .as_ref()
                        .is_some_and(|b| !b.is_empty())
                })
        },
    )
    .await;
    let first_serial = first
        .status
        .as_ref()
        .and_then(|s| s.workspace.observed_state_serial)
        .expect("serial");

    // As a kubectl plugin: kubectl finds `kubectl-captf` on the PATH and passes the flags on.
    let plugins = tempfile::tempdir().expect("dir");
    std::os::unix::fs::symlink(
        captf_e2e::captf_binary().expect("captf binary"),
        plugins.path().join("kubectl-captf"),
    )
    .expect("kubectl-captf");
    let path = format!(
        "{}:{}",
        plugins.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let kubectl = Command::new(captf_testenv::tools::cache_dir().join("bin/kubectl"))
        .args(["captf", "status", "--kubeconfig"])
        .arg(scene.env.kubeconfig())
        .args(["-n", &scene.ns])
        .env("PATH", path)
        .output()
        .expect("kubectl runs");
    let said = String::from_utf8_lossy(&kubectl.stdout);
    assert!(
        kubectl.status.success() && said.contains("is Ready"),
        "kubectl captf status: {said}{}",
        String::from_utf8_lossy(&kubectl.stderr)
    );

    // Everything Ready: the table says so; unknown objects and bad names have their own codes.
    let table = captf_ok(&scene, &["status"]);
    assert!(table.contains("is Ready"), "{table}");
    fails(
        &scene,
        &["status", "tfc/nope"],
        "",
        3,
        "TerraformCluster/nope not found",
    );
    fails(&scene, &["status", "nope"], "", 2, "is not KIND/NAME");
    fails(
        &scene,
        &["plan", "show", &object],
        "",
        3,
        "no plan of TerraformCluster/plugged waits",
    );

    // A change waits for approval: every read shows the plan and its hash.
    merge_patch(
        &api,
        name,
        serde_json::json!({"spec": {"variables": {"extra_exports": {"token": "two"}}}}),
    )
    .await;
    let waiting = wait_until(
        &api,
        name,
        "a plan awaiting approval",
        &scene.manager,
        |t| has(t, "ApplyJobSucceeded", "Unknown", "PlanAwaitingApproval"),
    )
    .await;
    let mut hash = waiting
        .status
        .as_ref()
        .and_then(|s| s.plan.as_ref())
        .map(|p| p.plan_hash.clone())
        .expect("plan");
    let table = captf_ok(&scene, &["status"]);
    assert!(
        table.contains(&format!("TerraformCluster/{name}"))
            && table.contains("ApplyJobSucceeded/PlanAwaitingApproval"),
        "{table}"
    );
    let text = captf_ok(&scene, &["status", &object]);
    assert!(
        text.contains("Waiting for approval")
            && text.contains(&hash)
            && text.contains("what to do:"),
        "{text}"
    );
    let report = json(&captf_ok(&scene, &["status", &object, "-o", "json"]));
    assert_eq!(
        report["pendingApprovals"][0]["hash"],
        hash.as_str(),
        "{report}"
    );
    assert_eq!(report["stateSerial"], first_serial, "{report}");
    let yaml: serde_json::Value =
        serde_yaml::from_str(&captf_ok(&scene, &["plan", "show", &object, "-o", "yaml"]))
            .expect("yaml");
    assert_eq!(yaml["hash"], hash.as_str());
    assert_eq!(
        (yaml["add"].as_i64(), yaml["destroy"].as_i64()),
        (Some(0), Some(0))
    );

    // Refused: a "no", and the wrong kind of approval; nothing is written.
    fails(&scene, &["approve", &object], "n\n", 4, "not confirmed");
    fails(
        &scene,
        &["approve", &object, "--destructive", "--yes"],
        "",
        4,
        "without --destructive",
    );
    let unchanged = api.get(name).await.expect("cluster");
    assert!(
        !unchanged
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("captf.io/approve-plan")
    );

    // Planned again on request: one plan Job answers the token, which its booking uses up; the
    // plan it made waits for approval as the first did.
    let plans = jobs_of(&scene.client, &scene.ns, name, "plan").await.len();
    let said = captf_ok(&scene, &["replan", &object]);
    assert!(
        said.contains(&format!("plan {hash}")) && said.contains("made again"),
        "{said}"
    );
    let token = annotation(&api, name, REPLAN).await.expect("replan token");
    let answered = wait_until(
        &api,
        name,
        "the replan answered, used up, and its plan awaiting approval",
        &scene.manager,
        |t| {
            !t.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(REPLAN))
                && has(t, "ApplyJobSucceeded", "Unknown", "PlanAwaitingApproval")
        },
    )
    .await;
    let replans = jobs_of(&scene.client, &scene.ns, name, "plan").await;
    assert_eq!(replans.len(), plans + 1, "one plan Job more");
    assert_eq!(carried(&replans[plans], REPLAN_TOKEN), Some(token.as_str()));
    hash = answered
        .status
        .as_ref()
        .and_then(|s| s.plan.as_ref())
        .map(|p| p.plan_hash.clone())
        .expect("the new plan");

    // Approved after the question: the plan applies.
    let ran = captf(&scene, &["approve", &object], "y\n");
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains(&hash) && ran.stdout.contains("Approve plan"),
        "{}",
        ran.stdout
    );
    let applied = wait_until(
        &api,
        name,
        "the approved plan applied",
        &scene.manager,
        |t| {
            ready(t)
                && exports(t).contains("two")
                && t.status.as_ref().is_some_and(|s| s.plan.is_none())
        },
    )
    .await;
    let serial = applied
        .status
        .as_ref()
        .and_then(|s| s.workspace.observed_state_serial)
        .expect("serial");
    assert!(serial > first_serial);

    // The newest Job pod's log is the approved apply's: the runner's steps and the engine.
    let logs = captf_ok(&scene, &["logs", &object]);
    assert!(
        logs.starts_with("==> pod captf-c-plugged-apply-") && logs.contains("Apply complete"),
        "{logs}"
    );
    let every = captf_ok(&scene, &["logs", &object, "--all"]);
    assert!(
        every.matches("==> pod ").count() >= 3,
        "the first apply, the plan, the approved apply: {every}"
    );
    fails(
        &scene,
        &["logs", "tfm/none"],
        "",
        3,
        "TerraformMachine/none not found",
    );

    // The state, decoded by the manager's reader, and pulled raw (only the user can read it).
    let state = json(&captf_ok(&scene, &["state", "show", &object, "-o", "json"]));
    assert_eq!(state["serial"], serial);
    // The runner's root marks every contract output sensitive: only type and size show.
    let masked = state["outputs"]["exports"].to_string();
    assert!(
        masked.contains("sensitive object") && !masked.contains("two"),
        "{state}"
    );
    let state = json(&captf_ok(
        &scene,
        &["state", "show", &object, "--show-sensitive", "-o", "json"],
    ));
    assert!(
        state["outputs"]["exports"].to_string().contains("two"),
        "{state}"
    );
    let pulled = tempfile::tempdir().expect("dir").keep().join("state.json");
    // A file already there, readable by all, is replaced and made the user's only.
    std::fs::write(&pulled, "an older, longer file than the state is").expect("old file");
    std::fs::set_permissions(&pulled, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("0644");
    captf_ok(
        &scene,
        &[
            "state",
            "pull",
            &object,
            "-f",
            pulled.to_str().expect("path"),
        ],
    );
    let document = json(&std::fs::read_to_string(&pulled).expect("pulled"));
    assert_eq!(document["serial"], serial);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&pulled)
            .expect("file")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );

    // Backups and a restore of the first serial.
    let backups = json(&captf_ok(
        &scene,
        &["backups", "list", &object, "-o", "json"],
    ));
    assert!(
        backups
            .as_array()
            .is_some_and(|b| b.iter().any(|b| b["serial"] == first_serial)),
        "{backups}"
    );
    fails(
        &scene,
        &["restore", &object, "--serial", "99999", "--yes"],
        "",
        3,
        "has no backup of serial 99999",
    );
    let ran = captf(
        &scene,
        &["restore", &object, "--serial", &first_serial.to_string()],
        "yes\n",
    );
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout
            .contains(&format!("the state at serial {serial}")),
        "{}",
        ran.stdout
    );
    wait_until(&api, name, "restored", &scene.manager, |t| {
        has(t, "RestoreJobSucceeded", "True", "StateRestored")
            && t.status
                .as_ref()
                .and_then(|s| s.workspace.last_restored_serial)
                == Some(first_serial)
    })
    .await;

    // Abandon: refused while the object is not being deleted; a deletion the engine refuses
    // (a prevent_destroy resource) is released without a destroy.
    fails(
        &scene,
        &["abandon", &object, "--yes"],
        "",
        4,
        "is not being deleted",
    );
    merge_patch(&api, name, serde_json::json!({"spec": {"applyPolicy": "Automatic", "variables": {"protected_trigger": "keep"}}})).await;
    wait_until(
        &api,
        name,
        "the protected resource applied",
        &scene.manager,
        |t| {
            let workspace = t.status.as_ref().map(|s| &s.workspace);
            ready(t)
                && workspace
                    .and_then(|w| w.last_run.as_ref())
                    .is_some_and(|r| {
                        matches!(r.operation, captf_api::Operation::Apply) && r.error.is_none()
                    })
                && workspace.and_then(|w| w.observed_state_serial) > Some(first_serial)
        },
    )
    .await;
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_until(&api, name, "the destroy refused", &scene.manager, |t| {
        t.metadata.deletion_timestamp.is_some()
            && t.status
                .as_ref()
                .and_then(|s| s.workspace.last_run.as_ref())
                .is_some_and(|r| {
                    matches!(r.operation, captf_api::Operation::Destroy) && r.error.is_some()
                })
    })
    .await;
    let ran = captf(&scene, &["abandon", &object, "--yes"], "");
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains("left running") && ran.stdout.contains("managed resource block"),
        "{}",
        ran.stdout
    );
    captf_testenv::wait_for("the abandoned object gone", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", scene.manager.log()));
}

#[tokio::test]
async fn retry_starts_a_failed_apply_again_without_its_backoff() {
    let scene = scene("plugin-retry", &[]).await;
    let name = "retried";
    let object = format!("tfc/{name}");
    // A plan that fails (no change the destructive guard would hold), one failure kept: the
    // backoff after it is 10 minutes, far past every wait below.
    create_cluster(
        &scene.client,
        &scene.ns,
        name,
        IMAGE,
        "  variables: {fail_plan: true}\n  jobs: {failedJobsHistoryLimit: 1}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(scene.client.clone(), &scene.ns);
    wait_until(&api, name, "the apply to fail", &scene.manager, |t| {
        has(t, "ApplyJobSucceeded", "False", "ApplyFailed")
    })
    .await;
    let failed = jobs_of(&scene.client, &scene.ns, name, "apply").await;
    assert_eq!(failed.len(), 1, "one failed apply, then the backoff");
    assert_eq!(carried(&failed[0], RETRY_TOKEN), None);

    let said = captf_ok(&scene, &["retry", &object]);
    assert!(
        said.contains("retry requested")
            && said.contains(failed[0].metadata.name.as_deref().unwrap_or("?")),
        "{said}"
    );
    let token = annotation(&api, name, RETRY).await.expect("retry token");
    // The next apply starts now, not in 10 minutes, and answers the token; once it is booked
    // the request is used up (it failed again: the object waits out a backoff again).
    let retried = captf_testenv::wait_for("an apply answering the retry", TIMEOUT, || async {
        let applies = jobs_of(&scene.client, &scene.ns, name, "apply").await;
        Ok(applies
            .into_iter()
            .find(|j| carried(j, RETRY_TOKEN) == Some(token.as_str())))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", scene.manager.log()));
    assert_ne!(retried.metadata.name, failed[0].metadata.name);
    wait_until(&api, name, "the retry used up", &scene.manager, |t| {
        !t.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(RETRY))
            && t.status
                .as_ref()
                .and_then(|s| s.workspace.last_run.as_ref())
                .is_some_and(|r| {
                    Some(&r.job) == retried.metadata.name.as_ref() && r.error.is_some()
                })
    })
    .await;

    // Fixed inputs and a retry: Ready. Then nothing failed, so a retry is refused.
    merge_patch(
        &api,
        name,
        serde_json::json!({"spec": {"variables": {"fail_plan": false}}}),
    )
    .await;
    captf_ok(&scene, &["retry", &object]);
    wait_until(&api, name, "the fixed apply", &scene.manager, ready).await;
    fails(
        &scene,
        &["retry", &object],
        "",
        4,
        "did not fail: no retry waits",
    );
}
