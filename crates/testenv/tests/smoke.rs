//! End-to-end smoke tests of the local control plane: real etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler, with Job pods run as real containers by the
//! node's kubelet and containerd, from a busybox image in the node's registry.

use std::time::{Duration, Instant};

use captf_testenv::fixtures::{run_job, shell_image, shell_job};
use captf_testenv::{TestEnv, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

async fn setup(prefix: &str) -> (&'static str, kube::Client, String) {
    let env = TestEnv::shared();
    let client = env.client().await.expect("client");
    let ns = env.namespace(&client, prefix).await.expect("namespace");
    let shell = shell_image(env).expect("shell image");
    (shell, client, ns)
}

#[tokio::test]
async fn a_succeeding_job_reads_complete_with_the_image_digest() {
    let (shell, client, ns) = setup("complete").await;
    let job = shell_job(
        "ok",
        shell,
        "echo hello from $HOSTNAME > /dev/termination-log",
        &[],
    )
    .expect("job");
    let outcome = run_job(&client, &ns, &job, JOB_TIMEOUT)
        .await
        .expect("job finishes");
    assert_eq!(outcome.condition, "Complete", "{}", outcome.describe());
    let (code, message) = outcome.terminated().expect("terminated state");
    assert_eq!(code, 0);
    let pod_name = outcome.pod.metadata.name.clone().expect("pod name");
    // The runtime sets HOSTNAME to the pod's name.
    assert_eq!(
        message.as_deref().map(str::trim),
        Some(format!("hello from {pod_name}").as_str())
    );
    let status = outcome.pod.status.expect("status");
    assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    let image_id = status.container_statuses.expect("statuses")[0]
        .image_id
        .clone();
    assert!(
        image_id.starts_with("captf.local/testenv/shell@sha256:") && image_id.len() == 33 + 64,
        "{image_id}"
    );
}

#[tokio::test]
async fn a_failing_job_reads_failed_with_exit_code_and_message() {
    let (shell, client, ns) = setup("failed").await;
    let job = shell_job(
        "fails",
        shell,
        "printf 'it broke' > /dev/termination-log; exit 3",
        &[],
    )
    .expect("job");
    let outcome = run_job(&client, &ns, &job, JOB_TIMEOUT)
        .await
        .expect("job finishes");
    assert_eq!(outcome.condition, "Failed", "{}", outcome.describe());
    assert_eq!(outcome.terminated(), Some((3, Some("it broke".to_owned()))));
}

#[tokio::test]
async fn env_envfrom_and_volumes_appear_as_a_kubelet_lays_them_out() {
    let (shell, client, ns) = setup("volumes").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "creds"},
        "stringData": {"TOKEN": "s3cret", "other": "x"},
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    let script = r#"set -ex
test "$CREDS_TOKEN" = s3cret
test "$FROM_KEY" = s3cret
test "$POD_NS" = "$EXPECT_NS"
test "$(cat /secret/token)" = s3cret
test "$(stat -L -c %a /secret/token)" = 440
test -s /var/run/secrets/kubernetes.io/serviceaccount/token
test -s /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
test "$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)" = "$EXPECT_NS"
echo scratch > /scratch/file
test "$KUBERNETES_SERVICE_HOST" = "$EXPECT_SERVICE_HOST"
test "$(id -u)" = 65532
test "$(stat -L -c %g /secret/token)" = 65532
echo ok > /dev/termination-log
"#;
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "layout"},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532},
            "volumes": [
                {"name": "creds", "secret": {"secretName": "creds", "items": [{"key": "TOKEN", "path": "token", "mode": 0o440}]}},
                {"name": "scratch", "emptyDir": {}},
            ],
            "containers": [{
                "name": "main", "image": shell, "command": ["/bin/sh", "-c", script],
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "envFrom": [{"prefix": "CREDS_", "secretRef": {"name": "creds"}}],
                "env": [
                    {"name": "FROM_KEY", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "TOKEN"}}},
                    {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "EXPECT_NS", "value": ns},
                    {"name": "EXPECT_SERVICE_HOST", "value": TestEnv::shared().state.network.kubernetes_service_ip().to_string()},
                ],
                "volumeMounts": [
                    {"name": "creds", "mountPath": "/secret", "readOnly": true},
                    {"name": "scratch", "mountPath": "/scratch"},
                ],
            }],
        }}},
    }))
    .expect("job");
    let outcome = run_job(&client, &ns, &job, JOB_TIMEOUT)
        .await
        .expect("job finishes");
    assert_eq!(outcome.condition, "Complete", "{}", outcome.describe());
    assert_eq!(
        outcome
            .terminated()
            .and_then(|t| t.1)
            .as_deref()
            .map(str::trim),
        Some("ok")
    );
}

#[tokio::test]
async fn a_deleted_pod_gets_sigterm_then_sigkill_after_its_grace_period() {
    use futures::AsyncBufReadExt;
    let (shell, client, ns) = setup("sigterm").await;
    // The trap records SIGTERM on stdout and keeps running: only SIGKILL after the grace
    // period ends it. The test follows the container's log through the API, as kubectl does.
    let script = r#"trap 'echo term' TERM
echo started
while true; do sleep 0.1; done"#;
    let mut job = shell_job("slow", shell, script, &[]).expect("job");
    if let Some(spec) = job.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.termination_grace_period_seconds = Some(2);
    }
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create job");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let name = wait_for("the container to run", JOB_TIMEOUT, || async {
        let list = pods
            .list(&ListParams::default().labels("job-name=slow"))
            .await?;
        Ok(list.items.into_iter().find_map(|p| {
            let running = p
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .first()?
                .state
                .as_ref()?
                .running
                .is_some();
            running.then(|| p.metadata.name.clone()).flatten()
        }))
    })
    .await
    .expect("running");
    let mut lines = pods
        .log_stream(
            &name,
            &LogParams {
                follow: true,
                ..LogParams::default()
            },
        )
        .await
        .expect("follow the log")
        .lines();
    let mut next_line = async || -> String {
        use futures::StreamExt;
        tokio::time::timeout(Duration::from_secs(30), lines.next())
            .await
            .expect("a log line within 30s")
            .expect("the log goes on")
            .expect("a readable line")
    };
    assert_eq!(next_line().await, "started");
    let deleted_at = Instant::now();
    pods.delete(&name, &DeleteParams::default())
        .await
        .expect("delete pod");
    assert_eq!(next_line().await, "term", "the container got SIGTERM");
    wait_for("the pod to go away", Duration::from_secs(30), || async {
        let pod = pods.get_opt(&name).await?;
        // The Job controller's tracking finalizer may keep the object a moment; a terminal
        // phase shows the process is gone.
        Ok(match pod {
            None => Some(()),
            Some(p) => p
                .status
                .and_then(|s| s.phase)
                .filter(|ph| ph == "Failed")
                .map(|_| ()),
        })
    })
    .await
    .expect("pod stopped");
    assert!(
        deleted_at.elapsed() >= Duration::from_secs(2),
        "killed before the grace period ended"
    );
}

#[tokio::test]
async fn an_owned_secret_is_garbage_collected_after_its_owner() {
    let (_env, client, ns) = setup("gc").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let owner = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "owner"}}))
                .expect("cm"),
        )
        .await
        .expect("owner");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let owned: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "owned", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid,
        }]},
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &owned)
        .await
        .expect("owned secret");
    cms.delete("owner", &DeleteParams::default())
        .await
        .expect("delete owner");
    wait_for("the garbage collector", Duration::from_secs(60), || async {
        Ok(secrets.get_opt("owned").await?.is_none().then_some(()))
    })
    .await
    .expect("owned secret collected");
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_secrets_and_leases() {
    let (_env, client, ns) = setup("nsdelete").await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "s"}}))
                .expect("secret"),
        )
        .await
        .expect("secret");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    leases
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "l"}})).expect("lease"),
        )
        .await
        .expect("lease");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("delete namespace");
    wait_for(
        "the namespace controller",
        Duration::from_secs(90),
        || async { Ok(namespaces.get_opt(&ns).await?.is_none().then_some(())) },
    )
    .await
    .expect("namespace gone");
    assert!(
        secrets
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );
    assert!(
        leases
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty()
    );
}
