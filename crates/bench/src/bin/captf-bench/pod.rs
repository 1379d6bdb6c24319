//! The bare engine in a plain pod: `tofu init` then `tofu apply -auto-approve` of the root CAPTF
//! renders, in a pod of the same module image on the same node, with no CAPTF in it.
//!
//! A module image has no shell, so the two commands are two containers in order: an init
//! container runs `init`, the pod's container `apply`, both in one `emptyDir` working directory.
//! The rendered root, without its backend block (the state stays in the pod), is mounted there
//! from a ConfigMap, its module source pointing at the image's `/captf/module`; `cli.tfrc` is the
//! runner's provider-mirror configuration when the image ships `/captf/providers`, else empty.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::moments::{Moments, PodMoments};

/// The working directory: a mount point of every module image (api.md §3.1).
const WORK: &str = "/captf/work";
/// The root's module source from [`WORK`]: the image's `/captf/module`.
const MODULE_SOURCE: &str = "../module";
const CLI_CONFIG: &str = "/captf/config/cli.tfrc";

/// The root of one module, ready to mount.
pub struct BareRoot {
    config_map: String,
}

impl BareRoot {
    /// Writes the ConfigMap `bare-<module>`: the rendered root without its backend, and the
    /// CLI configuration.
    pub async fn write(
        client: &kube::Client,
        ns: &str,
        module: &str,
        rendered: &captf_contract::Rendered,
        providers_mirror: bool,
    ) -> anyhow::Result<Self> {
        let mut main = crate::op::root_without_backend(rendered)?;
        let calls = main
            .get_mut("module")
            .and_then(|m| m.as_object_mut())
            .context("the rendered root calls no module")?;
        for call in calls.values_mut() {
            call["source"] = json!(MODULE_SOURCE);
        }
        let cli = if providers_mirror {
            captf_runner::prepare::cli_config(std::path::Path::new("/captf/providers"))
        } else {
            String::new()
        };
        let config_map = format!("bare-{module}");
        let cm: ConfigMap = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": config_map, "namespace": ns},
            "data": {
                captf_contract::render::MAIN_TF_FILE: serde_json::to_string(&main)?,
                captf_contract::render::TFVARS_FILE: String::from_utf8(rendered.tfvars_json.clone())?,
                "cli.tfrc": cli,
            },
        }))?;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let _ = api.delete(&config_map, &DeleteParams::default()).await;
        api.create(&PostParams::default(), &cm).await?;
        Ok(BareRoot { config_map })
    }

    /// The pod `name` on `image`: the init container runs `init`, the container `apply`.
    fn pod(&self, name: &str, image: &str) -> anyhow::Result<Pod> {
        let mounts = json!([
            {"name": "work", "mountPath": WORK},
            {"name": "root", "mountPath": format!("{WORK}/{}", captf_contract::render::MAIN_TF_FILE), "subPath": captf_contract::render::MAIN_TF_FILE},
            {"name": "root", "mountPath": format!("{WORK}/{}", captf_contract::render::TFVARS_FILE), "subPath": captf_contract::render::TFVARS_FILE},
            {"name": "root", "mountPath": CLI_CONFIG, "subPath": "cli.tfrc"},
            {"name": "tmp", "mountPath": "/tmp"},
        ]);
        let env = json!([
            {"name": "TF_CLI_CONFIG_FILE", "value": CLI_CONFIG},
            {"name": "TF_IN_AUTOMATION", "value": "1"},
            {"name": "HOME", "value": WORK},
        ]);
        let container = |name: &str, args: &[&str]| {
            let mut command = vec!["/captf/runtime"];
            command.extend_from_slice(args);
            json!({
                "name": name, "image": image, "imagePullPolicy": "IfNotPresent",
                "command": command, "workingDir": WORK, "env": env, "volumeMounts": mounts,
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            })
        };
        Ok(serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"bench.captf.io/bare": "true"}},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 5,
                "automountServiceAccountToken": false,
                "securityContext": {
                    "runAsNonRoot": true, "runAsUser": captf_testenv::images::NONROOT,
                    "runAsGroup": captf_testenv::images::NONROOT, "fsGroup": captf_testenv::images::NONROOT,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "volumes": [
                    {"name": "work", "emptyDir": {}},
                    {"name": "tmp", "emptyDir": {}},
                    {"name": "root", "configMap": {"name": self.config_map}},
                ],
                "initContainers": [container("init", &["init", "-input=false", "-no-color"])],
                "containers": [container("apply", &["apply", "-auto-approve", "-input=false", "-no-color"])],
            },
        }))?)
    }

    /// Runs pod `name` to its end; its moments and the time from just before its creation.
    pub async fn run(
        &self,
        client: &kube::Client,
        ns: &str,
        moments: &Moments,
        name: &str,
        image: &str,
        timeout: Duration,
    ) -> anyhow::Result<(Instant, PodMoments)> {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let pod = self.pod(name, image)?;
        let started = Instant::now();
        api.create(&PostParams::default(), &pod).await?;
        let seen = crate::wait_until(&format!("the bare pod {name} to finish"), timeout, || {
            moments.pod(name).filter(|p| p.finished.is_some())
        })
        .await;
        let seen = match seen {
            Ok(seen) => seen,
            Err(e) => {
                let status = api.get(name).await.ok().and_then(|p| p.status);
                return Err(e.context(format!("the pod's status: {status:?}")));
            }
        };
        anyhow::ensure!(
            seen.succeeded,
            "the bare pod {name} failed: {:?}",
            api.get(name).await.ok().and_then(|p| p.status)
        );
        api.delete(name, &DeleteParams::default()).await?;
        Ok((started, seen))
    }
}
