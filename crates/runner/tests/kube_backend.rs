//! End to end on the local control plane (`crates/testenv`): `captf runner run` inside a Job pod
//! of a module image, with the `kubernetes` backend and the pod's ServiceAccount.
//!
//! Needs the control plane tools and engines (`hack/build-tools.sh`) and the `captf` binary
//! (`cargo build -p captf`, same target dir): the pod's command is that binary on the host
//! (containers see the host filesystem outside their image and volumes). Missing tools fail the
//! test with the build hint; nothing is skipped.

mod common;

use std::io::Read;
use std::time::Duration;

use captf_contract::render::{MAIN_TF_FILE, TFVARS_FILE};
use captf_runner::ResultDocument;
use captf_testenv::TestEnv;
use captf_testenv::fixtures::{JobOutcome, push_module_image, run_job, runner_image};
use common::{Engine, Vars};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const JOB_TIMEOUT: Duration = Duration::from_secs(300);

/// What the kubernetes backend needs, for the namespace's `default` ServiceAccount.
async fn grant_state_access(client: &kube::Client, ns: &str) {
    let params = PatchParams::apply("captf-runner-test").force();
    let verbs = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "state", "namespace": ns},
        "rules": [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": verbs},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": verbs},
        ],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "state", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "state"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
    });
    let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(client.clone(), ns);
    roles
        .patch("state", &params, &Patch::Apply(&role))
        .await
        .expect("role");
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(client.clone(), ns);
    bindings
        .patch("state", &params, &Patch::Apply(&binding))
        .await
        .expect("rolebinding");
}

/// The per-run Secret holding the rendered root (module source `../../module`).
async fn config_secret(client: &kube::Client, ns: &str, name: &str, vars: &Vars) {
    let (main, tfvars, _) = common::render(vars, ns, false);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name},
        "stringData": {
            MAIN_TF_FILE: String::from_utf8(main).expect("utf-8"),
            TFVARS_FILE: String::from_utf8(tfvars).expect("utf-8"),
        },
    }))
    .expect("secret");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("config secret");
}

/// A Job shaped like the manager's (one container, the Job's environment and mounts).
fn runner_job(
    name: &str,
    image: &str,
    ns: &str,
    suffix: &str,
    config: &str,
    extra: &[&str],
) -> Job {
    let volume = json!({"name": "config", "secret": {"secretName": config, "defaultMode": 0o440}});
    runner_job_with(name, image, ns, suffix, volume, extra)
}

fn runner_job_with(
    name: &str,
    image: &str,
    ns: &str,
    suffix: &str,
    config_volume: serde_json::Value,
    extra: &[&str],
) -> Job {
    let runner = runner_image(TestEnv::shared()).expect("runner image");
    let mut args = vec![
        "run".to_owned(),
        format!("--op={}", name.split('-').next().unwrap_or(name)),
        "--bin=/captf/runtime".into(),
        format!("--image={image}"),
        "--module=/captf/module".into(),
        "--providers=/captf/providers".into(),
        "--workdir=/captf/work".into(),
        "--config=/captf/config".into(),
        "--lock-timeout=60s".into(),
        "--stop-timeout=20s".into(),
        format!("--backend-config=secret_suffix={suffix}"),
        format!("--backend-config=namespace={ns}"),
        "--backend-config=in_cluster_config=true".into(),
        "--backend-config=labels={\"captf.io/managed\"=\"true\",\"cluster.x-k8s.io/cluster-name\"=\"c1\"}".into(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            // As in the manager's Jobs: the 0440 config files are read through this group by
            // the image's non-root user.
            "securityContext": {"fsGroup": 65532},
            "volumes": [config_volume, {"name": "work", "emptyDir": {}}, {"name": "runner", "emptyDir": {}}],
            // The runner reaches the module image as in the manager's Jobs: copied from the
            // manager image by an init container.
            "initContainers": [{
                "name": "runner",
                "image": runner,
                "command": ["/runner", "copy", "/captf/bin/runner"],
                "volumeMounts": [{"name": "runner", "mountPath": "/captf/bin"}],
            }],
            "containers": [{
                "name": "source",
                "image": image,
                "command": ["/captf/bin/runner"],
                "args": args,
                "env": [
                    {"name": "TF_IN_AUTOMATION", "value": "1"},
                    {"name": "TF_INPUT", "value": "0"},
                    {"name": "HOME", "value": "/captf/work"},
                    {"name": "KUBE_NAMESPACE", "value": ns},
                    {"name": "CHECKPOINT_DISABLE", "value": "1"},
                    {"name": "PATH", "value": "/usr/local/bin:/usr/bin:/bin"},
                    {"name": "TF_WORKSPACE", "value": "must-be-dropped"},
                ],
                "volumeMounts": [
                    {"name": "config", "mountPath": "/captf/config", "readOnly": true},
                    {"name": "work", "mountPath": "/captf/work"},
                    {"name": "runner", "mountPath": "/captf/bin", "readOnly": true},
                ],
            }],
        }}},
    }))
    .expect("job")
}

fn result_of(outcome: &JobOutcome) -> ResultDocument {
    let (code, message) = outcome.terminated().expect("terminated");
    let message = message.expect("termination message");
    let doc: ResultDocument = serde_json::from_str(&message)
        .unwrap_or_else(|e| panic!("termination message is not a result ({e}): {message}"));
    if doc.error.is_none() {
        assert_eq!(code, 0, "{message}");
    }
    doc
}

fn names(doc: &ResultDocument) -> Vec<&str> {
    doc.steps.iter().map(|s| s.name.as_str()).collect()
}

fn decode_state(secret: &Secret) -> serde_json::Value {
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get("tfstate"))
        .expect("tfstate key");
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(data.0.as_slice())
        .read_to_end(&mut json)
        .expect("gzip");
    serde_json::from_slice(&json).expect("state json")
}

async fn lifecycle(engine: Engine) {
    let env = TestEnv::shared().clone();
    let client = env.client().await.expect("client");
    let ns = env.namespace(&client, "runner").await.expect("namespace");
    grant_state_access(&client, &ns).await;
    let module =
        std::env::temp_dir().join(format!("captf-runner-{engine:?}-{}", std::process::id()));
    std::fs::create_dir_all(&module).expect("module dir");
    std::fs::write(module.join("main.tf"), common::MODULE).expect("module");
    let image = push_module_image(
        &env,
        &format!("test/runner-{engine:?}:v1").to_lowercase(),
        "cluster",
        &module,
        match engine {
            Engine::Tofu => captf_testenv::images::Engine::Tofu,
            Engine::Terraform => captf_testenv::images::Engine::Terraform,
        },
        false,
    )
    .expect("image");
    let _ = std::fs::remove_dir_all(&module);
    let suffix = "c1-e2e";
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

    // apply
    config_secret(&client, &ns, "captf-run-apply", &Vars::default()).await;
    let outcome = run_job(
        &client,
        &ns,
        &runner_job("apply", &image, &ns, suffix, "captf-run-apply", &[]),
        JOB_TIMEOUT,
    )
    .await
    .expect("apply job");
    let doc = result_of(&outcome);
    assert_eq!(outcome.condition, "Complete", "{engine:?}: {doc:?}");
    assert_eq!(doc.error, None);
    assert_eq!(names(&doc), ["init", "validate", "apply"]);
    assert_eq!(doc.changes.map(|c| c.add), Some(2));
    assert_eq!(doc.op.as_deref(), Some("apply"));
    assert!(!doc.runtime.expect("runtime").version.is_empty());

    let state = secrets
        .get(&format!("tfstate-default-{suffix}"))
        .await
        .expect("state Secret");
    let labels = state.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("tfstate").map(String::as_str),
        Some("true"),
        "{labels:?}"
    );
    assert_eq!(
        labels.get("captf.io/managed").map(String::as_str),
        Some("true"),
        "{labels:?}"
    );
    assert_eq!(
        labels
            .get("cluster.x-k8s.io/cluster-name")
            .map(String::as_str),
        Some("c1")
    );
    assert_eq!(
        decode_state(&state)["resources"].as_array().map(Vec::len),
        Some(2)
    );
    let lease = leases
        .get(&format!("lock-tfstate-default-{suffix}"))
        .await
        .expect("lock Lease");
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(holder.is_empty(), "lock still held by {holder}");

    // force-unlock of an already released lock counts as success
    let outcome = run_job(
        &client,
        &ns,
        &runner_job(
            "refresh",
            &image,
            &ns,
            suffix,
            "captf-run-apply",
            &["--force-unlock=0b7e1c2d-stale"],
        ),
        JOB_TIMEOUT,
    )
    .await
    .expect("refresh job");
    let doc = result_of(&outcome);
    assert_eq!(outcome.condition, "Complete", "{engine:?}: {doc:?}");
    assert_eq!(names(&doc), ["init", "force-unlock", "apply-refresh-only"]);
    assert_ne!(
        doc.steps[1].exit, 0,
        "the engine reported the released lock"
    );

    let backup = state.data.clone().expect("state data");

    // destroy empties the state
    let outcome = run_job(
        &client,
        &ns,
        &runner_job("destroy", &image, &ns, suffix, "captf-run-apply", &[]),
        JOB_TIMEOUT,
    )
    .await
    .expect("destroy job");
    let doc = result_of(&outcome);
    assert_eq!(outcome.condition, "Complete", "{engine:?}: {doc:?}");
    assert_eq!(names(&doc), ["init", "destroy"]);
    assert_eq!(doc.changes.map(|c| c.destroy), Some(2));
    let state = secrets
        .get(&format!("tfstate-default-{suffix}"))
        .await
        .expect("state Secret");
    assert_eq!(decode_state(&state)["resources"], json!([]));

    // restore pushes the backup chunk back and checks the resource count
    let restore_config: Secret = serde_json::from_value(json!({
        "metadata": {"name": "captf-run-restore"},
        "stringData": {
            MAIN_TF_FILE: String::from_utf8(captf_contract::render_restore_root()).expect("utf-8"),
            TFVARS_FILE: "{}",
        },
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &restore_config)
        .await
        .expect("restore config");
    let chunk = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("backup-chunk".into()),
            ..Default::default()
        },
        data: Some(backup),
        ..Default::default()
    };
    secrets
        .create(&PostParams::default(), &chunk)
        .await
        .expect("backup chunk");
    let volume = json!({"name": "config", "projected": {"defaultMode": 0o440, "sources": [
        {"secret": {"name": "captf-run-restore"}},
        {"secret": {"name": "backup-chunk", "items": [{"key": "tfstate", "path": "restore/0"}]}},
    ]}});
    let job = runner_job_with(
        "restore",
        &image,
        &ns,
        suffix,
        volume,
        &["--restore-chunks=1", "--restore-resources=2"],
    );
    let outcome = run_job(&client, &ns, &job, JOB_TIMEOUT)
        .await
        .expect("restore job");
    let doc = result_of(&outcome);
    assert_eq!(outcome.condition, "Complete", "{engine:?}: {doc:?}");
    // The runner wrote the backup into the state Secret itself: the engine only reads it.
    assert_eq!(names(&doc), ["init", "state-list"]);
    let state = secrets
        .get(&format!("tfstate-default-{suffix}"))
        .await
        .expect("state Secret");
    let restored = decode_state(&state);
    assert_eq!(restored["resources"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        state
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("captf.io/managed"))
            .map(String::as_str),
        Some("true"),
        "the backend's labels"
    );

    // A failing run still reports through the termination message, with exit 1.
    let mut job = runner_job(
        "plan",
        &image,
        &ns,
        suffix,
        "captf-run-apply",
        &["--plan-key-file=/nonexistent/key"],
    );
    job.metadata.name = Some("plan-nokey".into());
    let outcome = run_job(&client, &ns, &job, JOB_TIMEOUT)
        .await
        .expect("plan job");
    assert_eq!(outcome.condition, "Failed");
    assert_eq!(outcome.terminated().map(|t| t.0), Some(1));
    let doc = result_of(&outcome);
    let e = doc.error.expect("error");
    assert_eq!(e.step.as_deref(), Some("prepare"));
    assert!(e.tail.contains("plan key"), "{}", e.tail);

    // A Job started for a state that is gone stops before the engine touches the backend:
    // whatever the operation, nothing is written and no lock is left.
    let expected = format!(
        "--expect-state={}:{}",
        restored["lineage"].as_str().expect("lineage"),
        restored["serial"]
    );
    secrets
        .delete(&format!("tfstate-default-{suffix}"), &Default::default())
        .await
        .expect("delete the state");
    for op in ["apply", "refresh", "drift", "destroy"] {
        let mut job = runner_job(op, &image, &ns, suffix, "captf-run-apply", &[&expected]);
        job.metadata.name = Some(format!("{op}-lost"));
        let outcome = run_job(&client, &ns, &job, JOB_TIMEOUT).await.expect("job");
        assert_eq!(outcome.condition, "Failed", "{engine:?} {op}");
        let doc = result_of(&outcome);
        let e = doc.error.clone().expect("error");
        assert_eq!(
            e.kind.as_str(),
            "state-mismatch",
            "{engine:?} {op}: {doc:?}"
        );
        assert_eq!(e.step.as_deref(), Some("state-check"));
        assert!(e.tail.contains("no state"), "{}", e.tail);
        assert!(names(&doc).is_empty(), "no engine step ran: {doc:?}");
        let left = secrets
            .list(
                &kube::api::ListParams::default()
                    .labels(&format!("tfstate=true,tfstateSecretSuffix={suffix}")),
            )
            .await
            .expect("list")
            .items;
        assert!(left.is_empty(), "{engine:?} {op} wrote a state");
        let holder = leases
            .get_opt(&format!("lock-tfstate-default-{suffix}"))
            .await
            .expect("lease")
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        assert!(
            holder.is_empty(),
            "{engine:?} {op} left the lock to {holder}"
        );
    }

    // A first apply, started for no state, runs: init's own empty state is accepted.
    let mut job = runner_job(
        "apply",
        &image,
        &ns,
        suffix,
        "captf-run-apply",
        &["--expect-state=none"],
    );
    job.metadata.name = Some("apply-first".into());
    let outcome = run_job(&client, &ns, &job, JOB_TIMEOUT)
        .await
        .expect("first apply");
    let doc = result_of(&outcome);
    assert_eq!(outcome.condition, "Complete", "{engine:?}: {doc:?}");
    assert_eq!(names(&doc), ["init", "validate", "apply"]);
}

#[tokio::test]
async fn tofu_applies_unlocks_and_destroys_with_the_kubernetes_backend() {
    lifecycle(Engine::Tofu).await;
}

#[tokio::test]
async fn terraform_applies_unlocks_and_destroys_with_the_kubernetes_backend() {
    lifecycle(Engine::Terraform).await;
}
