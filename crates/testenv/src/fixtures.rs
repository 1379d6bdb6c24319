//! Helpers for tests on the local control plane: image folders, Jobs and their results.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

use crate::TestEnv;

/// Creates (or replaces) an image folder: `files` maps paths inside the image to contents;
/// `links` maps paths inside the image to symlink targets on the host.
pub fn write_image(
    env: &TestEnv,
    reference: &str,
    files: &[(&str, &[u8])],
    links: &[(&str, &Path)],
) -> anyhow::Result<PathBuf> {
    let images = crate::node::image::Images::new(env.images().to_owned());
    let folder = images.folder(reference)?;
    let rootfs = folder.join("rootfs");
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&rootfs)?;
    for (path, content) in files {
        let target = rootfs.join(path.trim_start_matches('/'));
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&target, content)?;
    }
    for (path, host) in links {
        let target = rootfs.join(path.trim_start_matches('/'));
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::os::unix::fs::symlink(host, &target).with_context(|| target.display().to_string())?;
    }
    Ok(folder)
}

/// A Job that runs `script` with `/bin/sh -c` in `image`, no retries.
pub fn shell_job(
    name: &str,
    image: &str,
    script: &str,
    env: &[(&str, &str)],
) -> anyhow::Result<Job> {
    let env: Vec<serde_json::Value> = env
        .iter()
        .map(|(k, v)| serde_json::json!({"name": k, "value": v}))
        .collect();
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": name },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "main",
                        "image": image,
                        "command": ["/bin/sh", "-c", script],
                        "env": env,
                    }],
                },
            },
        },
    }))?)
}

/// How a Job ended.
#[derive(Clone, Debug)]
pub struct JobOutcome {
    /// `Complete` or `Failed`.
    pub condition: String,
    pub pod: Pod,
}

impl JobOutcome {
    /// The main container's terminated state: (exit code, message).
    pub fn terminated(&self) -> Option<(i32, Option<String>)> {
        let statuses = self.pod.status.as_ref()?.container_statuses.as_ref()?;
        let t = statuses.first()?.state.as_ref()?.terminated.as_ref()?;
        Some((t.exit_code, t.message.clone()))
    }

    /// The container's log on the node, when the node keeps pod folders (for failure messages).
    pub fn describe(&self) -> String {
        format!("{:#?}", self.pod.status)
    }
}

/// Creates the Job and waits until it is Complete or Failed.
pub async fn run_job(
    client: &kube::Client,
    namespace: &str,
    job: &Job,
    timeout: Duration,
) -> anyhow::Result<JobOutcome> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let name = job.metadata.name.clone().context("job without name")?;
    jobs.create(&PostParams::default(), job)
        .await
        .with_context(|| format!("creating job {name}"))?;
    wait_job(client, namespace, &name, timeout).await
}

/// Waits until the Job is Complete or Failed and returns its newest pod.
pub async fn wait_job(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<JobOutcome> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let condition = crate::wait_for(
        &format!("job {namespace}/{name} to finish"),
        timeout,
        || async {
            let job = jobs.get(name).await?;
            let done = job
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
                .map(|c| c.type_);
            Ok(done)
        },
    )
    .await?;
    let list = pods
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await?;
    let pod = list
        .items
        .into_iter()
        .max_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0))
        .context("job finished without a pod")?;
    Ok(JobOutcome { condition, pod })
}

/// Labels of an object as a map (empty when none).
pub fn labels(meta: &kube::api::ObjectMeta) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

/// Grants the namespace's `default` ServiceAccount what the engines' `kubernetes` backend needs:
/// Secrets (the state) and Leases (the lock).
pub async fn grant_state_access(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let params = PatchParams::apply("captf-testenv-fixtures").force();
    let verbs = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let role = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "state", "namespace": ns},
        "rules": [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": verbs},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": verbs},
        ],
    });
    let binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "state", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "state"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
    });
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), ns)
        .patch("state", &params, &Patch::Apply(&role))
        .await?;
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), ns)
        .patch("state", &params, &Patch::Apply(&binding))
        .await?;
    Ok(())
}
