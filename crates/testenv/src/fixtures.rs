//! Helpers for tests on the local control plane: image folders, Jobs and their results.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

use crate::TestEnv;
use crate::oci::{Entry, Image, Layer};

/// The shell image of the tests: a static busybox as `/bin/sh` and every other applet,
/// pushed once per test binary (its one environment) as `captf.local/testenv/shell:v1`;
/// returns that reference.
pub fn shell_image(env: &TestEnv) -> anyhow::Result<&'static str> {
    static PUSHED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    const REFERENCE: &str = "captf.local/testenv/shell:v1";
    PUSHED
        .get_or_init(|| push_shell(env).map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)?;
    Ok(REFERENCE)
}

fn push_shell(env: &TestEnv) -> anyhow::Result<()> {
    let mut tmp = Layer::new("tmp");
    tmp.push(Entry::dir("/tmp").mode(0o1777))?;
    let image = Image {
        layers: vec![busybox_layer()?, tmp],
        config: crate::oci::Config {
            env: vec!["PATH=/bin".to_owned()],
            ..Default::default()
        },
    };
    push(env, &image, "testenv/shell:v1")?;
    Ok(())
}

/// A static busybox as `/bin/busybox`, `/bin/sh` and every other applet: the shell test
/// images carry (Debian's busybox-static).
pub fn busybox_layer() -> anyhow::Result<Layer> {
    let busybox = Path::new("/bin/busybox");
    anyhow::ensure!(
        busybox.exists(),
        "/bin/busybox is missing: install Debian's busybox-static (hack/node-packages.sh)"
    );
    let applets = std::process::Command::new(busybox).arg("--list").output()?;
    let mut layer = Layer::new("busybox");
    layer.push(Entry::host_file("/bin/busybox", busybox).mode(0o755))?;
    for applet in String::from_utf8_lossy(&applets.stdout).lines() {
        if applet != "busybox" {
            layer.push(Entry::symlink(&format!("/bin/{applet}"), "busybox"))?;
        }
    }
    Ok(layer)
}

/// Pushes `image` to the node's registry as `name` (`repository:tag`); returns
/// `captf.local/<repository>@sha256:...`, what a pod pulls.
pub fn push(env: &TestEnv, image: &Image, name: &str) -> anyhow::Result<String> {
    let tools = crate::tools::Tools::locate()?;
    let store = crate::images::store()?;
    let crane = crate::oci::Crane::new(&tools.crane);
    let written = crate::oci::push(&store, &crane, image, &format!("{}/{name}", env.registry()))?;
    let repository = name.rsplit_once(':').map_or(name, |(r, _)| r);
    Ok(format!(
        "{}/{repository}@{}",
        crate::node::IMAGE_REGISTRY,
        written.digest()
    ))
}

/// The manager image (the static `captf` binary as `/manager` and `/runner`, the recipe of
/// [`crate::images::manager_image`]) in the node's registry, pushed once per test binary;
/// returns `captf.local/captf@sha256:...`. A Job's init container runs `/runner copy
/// /captf/bin/runner` from it, as the manager's Jobs do. Fails with the build command when the
/// static binary is missing.
pub fn runner_image(env: &TestEnv) -> anyhow::Result<String> {
    static PUSHED: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    PUSHED
        .get_or_init(|| push_runner(env).map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn push_runner(env: &TestEnv) -> anyhow::Result<String> {
    let captf = crate::images::require_captf_static()?;
    push(env, &crate::images::manager_image(&captf)?, "captf:test")
}

/// Pushes a module image of `role` with the module in `module_dir` and `engine` as its
/// runtime (the standard recipe of [`crate::images::module_image`]) to the node's registry as
/// `name` (`repository:tag`); returns `captf.local/<repository>@sha256:...`, what a pod pulls.
/// With `shell`, the image also carries [`busybox_layer`] (for Jobs that run scripts).
pub fn push_module_image(
    env: &TestEnv,
    name: &str,
    role: &str,
    module_dir: &Path,
    engine: crate::images::Engine,
    shell: bool,
) -> anyhow::Result<String> {
    use crate::images;
    let tools = crate::tools::Tools::locate()?;
    let engine_layer = match engine {
        images::Engine::Tofu => images::tofu_engine(&tools.tofu)?,
        images::Engine::Terraform => images::terraform_engine(&tools.terraform)?,
    };
    let mut image = images::module_image(images::ModuleImage {
        role,
        module: images::module_layer(name, module_dir)?,
        engine: &engine_layer,
        providers: None,
        version: name.rsplit_once(':').map_or("latest", |(_, tag)| tag),
        revision: &images::revision(),
    })?;
    if shell {
        image.layers.insert(2, busybox_layer()?);
    }
    push(env, &image, name)
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
