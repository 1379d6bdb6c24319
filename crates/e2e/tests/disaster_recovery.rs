//! The disaster-recovery runbook's drill with `captf dr`: a namespace exported from one
//! control plane and imported into a fresh one comes back without an apply, and the runbook's
//! "break it on purpose" cases fail the way it says.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use captf_api::TerraformCluster;
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_e2e::fixture::*;
use captf_e2e::{Manager, captf_binary, manager_kubeconfig};
use captf_testenv::{TestEnv, wait_for};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";
const OP: &str = "captf.infrastructure.cluster.x-k8s.io/op";
const OWNER_NAME: &str = "captf.infrastructure.cluster.x-k8s.io/owner-name";

/// The rebuilt management cluster: a second control plane of this test binary.
fn fresh() -> &'static TestEnv {
    static FRESH: OnceLock<Result<TestEnv, String>> = OnceLock::new();
    let env = FRESH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("captf-testenv-{}-fresh", std::process::id()));
        let cleanup = std::env::var_os("CAPTF_TESTENV_KEEP").is_none();
        TestEnv::start(&dir, Some(std::process::id()), cleanup).map_err(|e| format!("{e:#}"))
    });
    env.as_ref()
        .unwrap_or_else(|e| panic!("the fresh control plane did not start: {e}"))
}

/// Runs `captf dr <args>` against `env`; returns what it printed on stderr.
fn dr(env: &TestEnv, args: &[&str]) -> String {
    let out = std::process::Command::new(captf_binary().expect("captf binary"))
        .arg("dr")
        .args(args)
        .env("KUBECONFIG", env.kubeconfig())
        .output()
        .expect("run captf dr");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "captf dr {args:?} failed:\n{stderr}");
    stderr
}

/// `captf dr export` of `ns` into a file: the file and what it holds.
fn export(env: &TestEnv, ns: &str) -> (PathBuf, Value) {
    use std::os::unix::fs::PermissionsExt;
    let file = export_file(ns);
    // A file left readable by others is narrowed: the copy holds the state and credentials.
    std::fs::write(&file, b"old").expect("an old file");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let path = file.to_str().expect("path");
    dr(env, &["export", "--namespace", ns, "--output", path]);
    let mode = std::fs::metadata(&file)
        .expect("export file")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "the export is readable by its owner only"
    );
    let export = read_export(&file);
    (file, export)
}

fn export_file(ns: &str) -> PathBuf {
    std::env::temp_dir().join(format!("captf-dr-{ns}.json"))
}

fn read_export(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("export file")).expect("export JSON")
}

fn write_export(path: &Path, export: &Value) {
    std::fs::write(path, serde_json::to_vec(export).expect("JSON")).expect("write export");
}

fn names(items: &Value) -> Vec<String> {
    items
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i.pointer("/metadata/name").and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

/// The objects that Jobs in `ns` belong to (of one operation, or all).
async fn jobs_of(client: &kube::Client, ns: &str, op: Option<&str>) -> Vec<String> {
    let params = match op {
        Some(op) => ListParams::default().labels(&format!("{OP}={op}")),
        None => ListParams::default(),
    };
    Api::<Job>::namespaced(client.clone(), ns)
        .list(&params)
        .await
        .expect("Jobs")
        .items
        .into_iter()
        .filter_map(|j| j.metadata.labels?.get(OWNER_NAME).cloned())
        .collect()
}

/// A manager for `ns` on the fresh control plane, with the RBAC of config/rbac.
async fn fresh_manager(client: &kube::Client, ns: &str) -> Manager {
    let env = fresh();
    let kubeconfig = manager_kubeconfig(env, client).await.expect("manager RBAC");
    Manager::start(
        env,
        &kubeconfig,
        &format!("fresh-{ns}"),
        &[&format!("--namespace={ns}")],
    )
    .expect("manager")
}

/// The Secrets of one TerraformCluster, by name: state chunks, backups, durable inputs.
fn secret_of(ns: &str, name: &str, secret: &str) -> bool {
    let key = ObjectKey::new(ns, WorkloadKind::Cluster, name).expect("key");
    secret.starts_with(&key.state_secret())
        || secret.starts_with(&format!("captf-state-backup-{}-", key.state_suffix()))
        || secret == key.durable_inputs_secret()
}

#[tokio::test]
async fn recovery_drill_restores_without_an_apply() {
    let Scene {
        env,
        client,
        ns,
        manager,
    } = scene("dr-drill", &[]).await;
    let name = "prod";
    create_cluster(
        &client,
        &ns,
        name,
        IMAGE,
        "  drift: {intervalSeconds: 20, action: Report}",
    )
    .await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let before = wait_until(&api, name, "Ready", &manager, ready).await;
    let suffix = before
        .status
        .as_ref()
        .and_then(|s| s.workspace.state_secret_suffix.clone())
        .expect("suffix");

    // Back up.
    let (file, export) = export(&env, &ns);
    let secrets = names(&export["secrets"]);
    let state = format!("tfstate-default-{suffix}");
    assert!(secrets.contains(&state), "{secrets:?}");
    assert!(
        secrets.contains(&format!("captf-inputs-c-{name}")),
        "{secrets:?}"
    );
    assert!(
        secrets.iter().any(|s| s.starts_with("captf-state-backup-")),
        "{secrets:?}"
    );
    for secret in export["secrets"].as_array().expect("secrets") {
        for field in [
            "ownerReferences",
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
        ] {
            assert!(
                secret["metadata"].get(field).is_none(),
                "{field} exported: {}",
                secret["metadata"]
            );
        }
    }
    assert_eq!(names(&export["identities"]), [format!("noop-{ns}")]);
    assert_eq!(names(&export["identitySecrets"]), ["noop-credentials"]);
    assert_eq!(names(&export["clusterApi"]), [name]);
    assert_eq!(names(&export["objects"]), [name]);

    // Lose the management cluster: its manager stops, the namespace goes.
    drop(manager);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("drop the finalizer nobody will run");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("delete the namespace");
    wait_for("the namespace gone", TIMEOUT, || async {
        Ok(namespaces.get_opt(&ns).await?.is_none().then_some(()))
    })
    .await
    .expect("namespace deleted");

    // Restore into a fresh control plane.
    let fresh_env = fresh();
    let client = fresh_env.client().await.expect("fresh client");
    let report = dr(
        fresh_env,
        &["import", "--file", file.to_str().expect("path")],
    );
    assert!(
        report.contains(&format!("paused TerraformCluster/{name}")),
        "{report}"
    );
    // Importing twice never writes over what the first import restored.
    let again = std::process::Command::new(captf_binary().expect("captf"))
        .args(["dr", "import", "--file", file.to_str().expect("path")])
        .env("KUBECONFIG", fresh_env.kubeconfig())
        .output()
        .expect("run");
    let again_err = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success(), "a second import must refuse");
    assert!(
        again_err.contains(&format!("Secret/{state}")) && again_err.contains("never writes over"),
        "{again_err}"
    );

    let manager = fresh_manager(&client, &ns).await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait_until(&api, name, "a paused pass", &manager, |t| {
        has(t, "Paused", "True", "Paused")
    })
    .await;
    let secrets_api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let owned: Vec<String> = secrets_api
        .list(&ListParams::default())
        .await
        .expect("Secrets")
        .items
        .into_iter()
        .filter(|s| s.metadata.owner_references.is_some())
        .filter_map(|s| s.metadata.name)
        .filter(|n| secret_of(&ns, name, n))
        .collect();
    assert!(owned.is_empty(), "re-owned while paused: {owned:?}");
    assert!(
        job_names(&client, &ns).await.is_empty(),
        "a Job ran while paused"
    );

    // Unpause.
    dr(
        fresh_env,
        &["unpause", "--file", file.to_str().expect("path")],
    );
    let after = wait_until(
        &api,
        name,
        "unpaused, StateReadable and Ready",
        &manager,
        |t| {
            has(t, "Paused", "False", "NotPaused")
                && has(t, "StateReadable", "True", "StateRead")
                && ready(t)
        },
    )
    .await;
    let uid = after.metadata.uid.clone().expect("uid");
    assert_ne!(Some(uid.clone()), before.metadata.uid, "a new object");
    wait_for("the state re-owned", TIMEOUT, || async {
        let refs = secrets_api.get(&state).await?.metadata.owner_references;
        Ok(refs
            .unwrap_or_default()
            .iter()
            .any(|r| r.uid == uid)
            .then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    event(&client, &ns, "OwnerReferencesRepaired").await;

    // A drift check on the fresh control plane, and still no apply.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    wait_for("a drift check that found no drift", TIMEOUT, || async {
        let drift_done = jobs
            .list(&ListParams::default().labels(&format!("{OP}=drift")))
            .await?
            .items
            .iter()
            .any(|j| j.status.as_ref().and_then(|s| s.succeeded) == Some(1));
        let tc = api.get(name).await?;
        Ok((drift_done && has(&tc, "DriftDetected", "False", "NoDrift")).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    assert!(
        jobs_of(&client, &ns, Some("apply")).await.is_empty(),
        "an apply ran after the restore"
    );
    let _ = std::fs::remove_file(&file);
}

#[tokio::test]
async fn breaking_the_restore_on_purpose_fails_safely() {
    let Scene {
        env,
        client,
        ns,
        manager,
    } = scene("dr-break", &[]).await;
    // owners: restored with the original owner references; inputs: no state but the durable
    // inputs; bare: nothing but the object, restored without its status as `kubectl apply`
    // would; status: nothing but the object, with the status `captf dr import` restores.
    let clusters = ["owners", "inputs", "bare", "status"];
    for name in clusters {
        create_cluster(&client, &ns, name, IMAGE, "").await;
    }
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    for name in clusters {
        wait_until(&api, name, "Ready", &manager, ready).await;
    }
    let (file, export) = export(&env, &ns);
    // What a backup that keeps owner references (a plain `kubectl get -o json`) holds.
    let raw: Vec<Secret> = Api::<Secret>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("Secrets")
        .items
        .into_iter()
        .filter(|s| {
            secret_of(
                &ns,
                "owners",
                s.metadata.name.as_deref().unwrap_or_default(),
            )
        })
        .collect();
    assert!(raw.len() >= 3, "state, backup and inputs of `owners`");
    drop(manager);

    let fresh_env = fresh();
    let fresh_client = fresh_env.client().await.expect("fresh client");
    // One import per case, each with its object and only the Secrets the case keeps.
    for name in clusters {
        let mut part = export.clone();
        let keep = |items: &Value, f: &dyn Fn(&str) -> bool| -> Value {
            Value::Array(
                items
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|i| f(i["metadata"]["name"].as_str().unwrap_or_default()))
                    .cloned()
                    .collect(),
            )
        };
        part["clusterApi"] = keep(&export["clusterApi"], &|n| n == name);
        part["objects"] = keep(&export["objects"], &|n| n == name);
        let inputs = ObjectKey::new(&ns, WorkloadKind::Cluster, name)
            .expect("key")
            .durable_inputs_secret();
        part["secrets"] = keep(&export["secrets"], &|n| name == "inputs" && n == inputs);
        if name == "bare" {
            part["objects"][0]
                .as_object_mut()
                .expect("object")
                .remove("status");
        }
        let path = export_file(&format!("{ns}-{name}"));
        write_export(&path, &part);
        dr(
            fresh_env,
            &["import", "--file", path.to_str().expect("path")],
        );
        dr(
            fresh_env,
            &["unpause", "--file", path.to_str().expect("path")],
        );
        let _ = std::fs::remove_file(&path);
    }
    let secrets: Api<Secret> = Api::namespaced(fresh_client.clone(), &ns);
    for mut secret in raw.clone() {
        let meta = &mut secret.metadata;
        (
            meta.uid,
            meta.resource_version,
            meta.creation_timestamp,
            meta.managed_fields,
        ) = (None, None, None, None);
        assert!(
            meta.owner_references.is_some(),
            "the original owner reference"
        );
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("restore a Secret as it was");
    }
    // The garbage collector deletes what names an owner UID that no longer exists (before
    // any manager runs here, which would re-own what it finds first).
    wait_for(
        "the Secrets with old owner references collected",
        TIMEOUT,
        || async {
            let mut left = Vec::new();
            for s in &raw {
                let name = s.metadata.name.clone().unwrap_or_default();
                if secrets.get_opt(&name).await?.is_some() {
                    left.push(name);
                }
            }
            Ok(left.is_empty().then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let manager = fresh_manager(&fresh_client, &ns).await;
    let api: Api<TerraformCluster> = Api::namespaced(fresh_client.clone(), &ns);

    // Without state: held where any sign of an earlier apply survived, a second apply where
    // none did.
    for name in ["inputs", "status"] {
        wait_until(&api, name, "StateLost", &manager, |t| {
            has(t, "Paused", "False", "NotPaused") && has(t, "StateReadable", "False", "StateLost")
        })
        .await;
    }
    wait_until(&api, "bare", "a second apply to Ready", &manager, |t| {
        has(t, "Paused", "False", "NotPaused") && ready(t)
    })
    .await;
    // A StateLost object runs nothing at all, not even a drift check.
    let ran = jobs_of(&fresh_client, &ns, None).await;
    assert!(
        ran.iter().all(|o| o == "bare") && !ran.is_empty(),
        "only `bare` runs (and applies again): {ran:?}"
    );
    let _ = std::fs::remove_file(&file);
}
