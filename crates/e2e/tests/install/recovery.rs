//! The recovery drill of docs/runbooks/disaster-recovery.md (seed 002), with CAPTF installed by
//! clusterctl on both sides: an identity, a TerraformCluster and a TerraformMachine Ready; a
//! copy taken twice, with `captf dr export` and with the runbook's kubectl + jq commands; the
//! namespace lost; the `captf dr` copy restored on the second management cluster and the
//! kubectl copy on the first, each object back to `StateReadable=True` and `Ready=True` with no
//! apply, and a drift check that finds no drift.

use std::path::{Path, PathBuf};

use captf_api::{TerraformCluster, TerraformMachine};
use captf_e2e::apply_yaml;
use captf_e2e::fixture::{CLUSTER_IMAGE, Conditioned, has, ready};
use captf_testenv::TestEnv;
use captf_testenv::tools::bin_dir;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::{installed, namespace, shared, target, wait};

const MACHINE_IMAGE: &str = "captf.local/modules/noop-machine:e2e";
const OP: &str = "captf.infrastructure.cluster.x-k8s.io/op";
const CLUSTER: &str = "drill";
const MACHINE: &str = "drill-0";

/// The drill's objects: a Cluster on a TerraformCluster (drift checked every 20 s, reported)
/// and a Machine on a TerraformMachine, its bootstrap data in a Secret.
fn objects(ns: &str) -> String {
    format!(
        r##"
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformCluster
metadata: {{name: {CLUSTER}, namespace: {ns}}}
spec:
  source: {{image: "{CLUSTER_IMAGE}"}}
  identityRef: {{name: noop-{ns}}}
  drift: {{intervalSeconds: 20, action: Report}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {{name: {CLUSTER}, namespace: {ns}}}
spec:
  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: TerraformCluster, name: {CLUSTER}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: {MACHINE}-bootstrap, namespace: {ns}}}
stringData: {{value: "#cloud-config\n", format: cloud-config}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformMachine
metadata: {{name: {MACHINE}, namespace: {ns}}}
spec:
  source: {{image: "{MACHINE_IMAGE}"}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata: {{name: {MACHINE}, namespace: {ns}}}
spec:
  clusterName: {CLUSTER}
  bootstrap: {{dataSecretName: {MACHINE}-bootstrap}}
  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: TerraformMachine, name: {MACHINE}}}
"##
    )
}

/// Runs `script` with bash, kubectl of the test tools and jq, against `env`.
fn sh(env: &TestEnv, dir: &Path, script: &str) -> String {
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .env("KUBECONFIG", env.kubeconfig())
        .env("PATH", path)
        .output()
        .expect("bash");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script}\nfailed: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `captf dr <args>` against `env`; what it printed on stderr.
fn dr(env: &TestEnv, args: &[&str]) -> String {
    let out = std::process::Command::new(captf_e2e::captf_binary().expect("captf binary"))
        .arg("dr")
        .args(args)
        .env("KUBECONFIG", env.kubeconfig())
        .output()
        .expect("run captf dr");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "captf dr {args:?} failed:\n{stderr}");
    stderr
}

/// `captf dr export` of `ns` into `file`, checked: readable by its owner only (a file left
/// readable by others is narrowed), and holding the state, the backups and the durable inputs
/// without owner references or server fields, the identity and its Secret, the Cluster API
/// objects and CAPTF's.
fn export(env: &TestEnv, ns: &str, file: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(file, b"old").expect("an old file");
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    dr(env, &["export", "--namespace", ns, "--output", file]);
    let mode = std::fs::metadata(file)
        .expect("export")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "the export is readable by its owner only"
    );
    let export: serde_json::Value =
        serde_json::from_slice(&std::fs::read(file).expect("export")).expect("JSON");
    let names = |group: &str| -> Vec<String> {
        let mut names: Vec<String> = export[group]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    };
    let secrets = names("secrets");
    for prefix in [
        "tfstate-default-",
        "captf-state-backup-",
        "captf-inputs-c-",
        "captf-inputs-m-",
    ] {
        assert!(
            secrets.iter().any(|s| s.starts_with(prefix)),
            "{prefix}: {secrets:?}"
        );
    }
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
    assert_eq!(names("identities"), [format!("noop-{ns}")]);
    assert_eq!(names("identitySecrets"), ["noop-credentials"]);
    assert_eq!(names("clusterApi"), [CLUSTER, MACHINE]);
    assert_eq!(names("objects"), [CLUSTER, MACHINE]);
}

/// The copy with kubectl and jq of docs/runbooks/disaster-recovery.md ("Without captf"): the
/// seed's commands, with one fix (its file name `backup-$sel.json` holds the selector's `/`, so
/// the second selector's file cannot be written), and what the seed leaves to "Do the same": the
/// durable inputs, the bootstrap data and the objects themselves, paused.
fn kubectl_backup(env: &TestEnv, ns: &str, dir: &Path) {
    sh(
        env,
        dir,
        &format!(
            r#"
ns={ns}
for sel in tfstate=true captf.io/state-backup=true; do
  kubectl get secret -n "$ns" -l "$sel" -o json \
    | jq 'del(.items[].metadata.ownerReferences,
              .items[].metadata.uid,
              .items[].metadata.resourceVersion,
              .items[].metadata.creationTimestamp,
              .items[].metadata.managedFields)' > "backup-${{sel//\//-}}.json"
done
for s in $(kubectl get secret -n "$ns" -o name | grep /captf-inputs-); do
  kubectl get -n "$ns" "$s" -o json \
    | jq 'del(.metadata.ownerReferences, .metadata.uid, .metadata.resourceVersion,
              .metadata.creationTimestamp, .metadata.managedFields)' > "backup-${{s#secret/}}.json"
done
kubectl get -n "$ns" secret {MACHINE}-bootstrap -o json \
  | jq 'del(.metadata.ownerReferences, .metadata.uid, .metadata.resourceVersion,
            .metadata.creationTimestamp, .metadata.managedFields)' > backup-bootstrap.json
kubectl get -n "$ns" clusters.cluster.x-k8s.io,machines.cluster.x-k8s.io,terraformclusters,terraformmachines -o json \
  | jq '.items[].metadata |= (del(.ownerReferences, .uid, .resourceVersion, .creationTimestamp,
                                   .managedFields, .generation, .finalizers)
                              | .annotations["cluster.x-k8s.io/paused"] = "")
        | del(.items[].status)' > objects.json
"#
        ),
    );
}

/// Loses `ns` on `env` as a lost management cluster would: nothing is destroyed (every Cluster
/// is paused first, and the finalizers dropped, which nothing there will ever run), and nothing
/// is kept (the state protection of the Secrets is dropped too: a lost cluster holds nothing).
async fn lose(env: &TestEnv, client: &kube::Client, ns: &str) {
    let clusters: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &captf_e2e::fixture::capi_cluster_resource(),
    );
    for c in clusters
        .list(&ListParams::default())
        .await
        .expect("Clusters")
    {
        clusters
            .patch(
                &c.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"paused": true}})),
            )
            .await
            .expect("pause");
    }
    let tcs: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    let tms: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);
    wait(env, "the objects paused", || async {
        let tcs = tcs.list(&ListParams::default()).await?.items;
        let tms = tms.list(&ListParams::default()).await?.items;
        let all = tcs.iter().all(|t| has(t, "Paused", "True", "Paused"))
            && tms.iter().all(|t| has(t, "Paused", "True", "Paused"));
        Ok(all.then_some(()))
    })
    .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(ns, &DeleteParams::default())
        .await
        .expect("delete the namespace");
    let drop_finalizers = format!(
        r#"for o in $(kubectl get -n {ns} -o name clusters.cluster.x-k8s.io,machines.cluster.x-k8s.io,terraformclusters,terraformmachines,secrets); do
  kubectl patch -n {ns} "$o" --type=merge -p '{{"metadata":{{"finalizers":null}}}}' || true
done"#
    );
    wait(env, "the namespace gone", || async {
        sh(env, &std::env::temp_dir(), &drop_finalizers);
        Ok(namespaces.get_opt(ns).await?.is_none().then_some(()))
    })
    .await;
}

/// Unpaused, its state read, Ready.
fn back<K: Conditioned>(t: &K) -> bool {
    has(t, "Paused", "False", "NotPaused")
        && has(t, "StateReadable", "True", "StateRead")
        && ready(t)
}

/// Step 5 of the drill on `env`: both objects `StateReadable=True` and `Ready=True`, their state
/// owned by the new objects, a drift check that found no drift, and no apply Job.
async fn verify(env: &TestEnv, client: &kube::Client, ns: &str, uids: (&str, &str)) {
    let tcs: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    let tms: Api<TerraformMachine> = Api::namespaced(client.clone(), ns);
    let (tc, tm) = wait(env, "StateReadable and Ready again", || async {
        let tc = tcs.get(CLUSTER).await?;
        let tm = tms.get(MACHINE).await?;
        Ok((back(&tc) && back(&tm)).then_some((tc, tm)))
    })
    .await;
    for (uid, old) in [(tc.uid(), uids.0), (tm.uid(), uids.1)] {
        assert_ne!(uid.as_deref(), Some(old), "a new object");
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let new_uids = [tc.uid().unwrap_or_default(), tm.uid().unwrap_or_default()];
    wait(env, "the state re-owned by the new objects", || async {
        let states = secrets
            .list(&ListParams::default().labels("tfstate=true"))
            .await?
            .items;
        let owned = states.len() >= 2
            && states.iter().all(|s| {
                s.owner_references()
                    .iter()
                    .any(|r| new_uids.contains(&r.uid))
            });
        Ok(owned.then_some(()))
    })
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    wait(env, "a drift check that found no drift", || async {
        let checked = jobs
            .list(&ListParams::default().labels(&format!("{OP}=drift")))
            .await?
            .items
            .iter()
            .any(|j| j.status.as_ref().and_then(|s| s.succeeded) == Some(1));
        let tc = tcs.get(CLUSTER).await?;
        Ok((checked && has(&tc, "DriftDetected", "False", "NoDrift")).then_some(()))
    })
    .await;
    let applies: Vec<String> = jobs
        .list(&ListParams::default().labels(&format!("{OP}=apply")))
        .await
        .expect("Jobs")
        .items
        .iter()
        .map(|j| j.name_any())
        .collect();
    assert!(
        applies.is_empty(),
        "an apply ran after the restore: {applies:?}"
    );
}

#[tokio::test]
async fn the_recovery_drill_restores_both_copies_without_an_apply() {
    let (env, client, _) = installed().await;
    let _shared = shared(&client).await;
    let (target_env, target_client, _) = target().await;
    let ns = namespace(env, &client, "drill").await;
    apply_yaml(&client, &objects(&ns)).await.expect("objects");
    let tcs: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    let tms: Api<TerraformMachine> = Api::namespaced(client.clone(), &ns);
    let (tc, tm) = wait(env, "the cluster and the machine Ready", || async {
        let tc = tcs.get(CLUSTER).await?;
        let tm = tms.get(MACHINE).await?;
        Ok((ready(&tc) && ready(&tm)).then_some((tc, tm)))
    })
    .await;
    let uids = (tc.uid().unwrap_or_default(), tm.uid().unwrap_or_default());

    // Step 2: the two copies.
    let dir: PathBuf = std::env::temp_dir().join(format!("captf-drill-{ns}"));
    std::fs::create_dir_all(&dir).expect("backup folder");
    let file = dir.join("dr.json");
    let file = file.to_str().expect("path");
    export(env, &ns, file);
    kubectl_backup(env, &ns, &dir);

    // Step 3: the namespace goes.
    lose(env, &client, &ns).await;

    // Step 4, one: the `captf dr` copy on the second management cluster.
    let report = dr(target_env, &["import", "--file", file]);
    assert!(
        report.contains(&format!("paused TerraformCluster/{CLUSTER}")),
        "{report}"
    );
    // Importing twice never writes over what the first import restored.
    let again = std::process::Command::new(captf_e2e::captf_binary().expect("captf"))
        .args(["dr", "import", "--file", file])
        .env("KUBECONFIG", target_env.kubeconfig())
        .output()
        .expect("run");
    let again_err = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success(), "a second import must refuse");
    assert!(
        again_err.contains("Secret/tfstate-default-") && again_err.contains("never writes over"),
        "{again_err}"
    );
    dr(target_env, &["unpause", "--file", file]);
    verify(target_env, &target_client, &ns, (&uids.0, &uids.1)).await;

    // Step 4, two: the kubectl copy back on the first, in the runbook's order: the identity
    // survived (cluster-scoped); the Secrets without owner references; the objects paused.
    sh(
        env,
        &dir,
        &format!(
            r#"
kubectl create namespace {ns}
for f in backup-*.json; do kubectl create -f "$f"; done
kubectl create -f objects.json
kubectl get -n {ns} secret -l tfstate=true -o name
"#
        ),
    );
    // Paused, and not yet owned (Cluster API adds owner references only once unpaused): the
    // objects wait for their owners, and nothing runs.
    let tcs: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    wait(env, "a first pass of the restored cluster", || async {
        let tc = tcs.get(CLUSTER).await?;
        Ok(captf_e2e::fixture::condition(&tc, "DependenciesReady").map(|_| ()))
    })
    .await;
    let ran = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("Jobs")
        .items;
    assert!(ran.is_empty(), "a Job ran before the unpause: {ran:?}");
    sh(
        env,
        &dir,
        &format!(
            "kubectl annotate -n {ns} clusters.cluster.x-k8s.io/{CLUSTER} machines.cluster.x-k8s.io/{MACHINE} terraformclusters/{CLUSTER} terraformmachines/{MACHINE} cluster.x-k8s.io/paused-"
        ),
    );
    verify(env, &client, &ns, (&uids.0, &uids.1)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The drill's step 6, on the second management cluster with CAPTF running: Secrets restored
/// with their original owner references are collected; objects restored without their state
/// are held where any sign of an earlier apply survived (the durable inputs, or the status the
/// import writes back) and apply a second time where none did.
#[tokio::test]
async fn breaking_the_restore_on_purpose_fails_safely() {
    let (env, client, _) = installed().await;
    let _shared = shared(&client).await;
    let (target_env, target_client, _) = target().await;
    let ns = namespace(env, &client, "drill-break").await;
    // owners: restored with the original owner references; inputs: no state but the durable
    // inputs; bare: nothing but the object, without its status, as `kubectl apply` would;
    // status: nothing but the object, with the status `captf dr import` restores.
    let cases = ["owners", "inputs", "bare", "status"];
    for name in cases {
        captf_e2e::fixture::create_cluster(&client, &ns, name, CLUSTER_IMAGE, "").await;
    }
    let tcs: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);
    for name in cases {
        wait(env, "the clusters Ready", || async {
            Ok(ready(&tcs.get(name).await?).then_some(()))
        })
        .await;
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("captf-drill-{ns}"));
    std::fs::create_dir_all(&dir).expect("backup folder");
    let file = dir.join("dr.json");
    dr(
        env,
        &[
            "export",
            "--namespace",
            &ns,
            "--output",
            file.to_str().expect("path"),
        ],
    );
    let export: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).expect("export")).expect("JSON");
    // What a copy that keeps owner references (a plain `kubectl get -o json`) holds.
    let owners_key = |n: &str| {
        let key = captf_api::names::ObjectKey::new(
            &ns,
            captf_api::names::WorkloadKind::Cluster,
            "owners",
        )
        .expect("key");
        n.starts_with(&key.state_secret())
            || n.starts_with(&format!("captf-state-backup-{}-", key.state_suffix()))
            || n == key.durable_inputs_secret()
    };
    let raw: Vec<Secret> = Api::<Secret>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("Secrets")
        .items
        .into_iter()
        .filter(|s| owners_key(&s.name_any()))
        .collect();
    assert!(raw.len() >= 3, "state, backup and inputs of `owners`");
    lose(env, &client, &ns).await;

    // One import per case, each with its object and only the Secrets the case keeps; all
    // paused until the collector has had its go at the `owners` Secrets.
    let mut parts = Vec::new();
    for name in cases {
        let keep = |items: &serde_json::Value, f: &dyn Fn(&str) -> bool| {
            serde_json::Value::Array(
                items
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|i| f(i["metadata"]["name"].as_str().unwrap_or_default()))
                    .cloned()
                    .collect(),
            )
        };
        let mut part = export.clone();
        part["clusterApi"] = keep(&export["clusterApi"], &|n| n == name);
        part["objects"] = keep(&export["objects"], &|n| n == name);
        let inputs = format!("captf-inputs-c-{name}");
        part["secrets"] = keep(&export["secrets"], &|n| name == "inputs" && n == inputs);
        if name == "bare"
            && let Some(o) = part["objects"][0].as_object_mut()
        {
            o.remove("status");
        }
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_vec(&part).expect("JSON")).expect("write");
        dr(
            target_env,
            &["import", "--file", path.to_str().expect("path")],
        );
        parts.push(path);
    }
    let secrets: Api<Secret> = Api::namespaced(target_client.clone(), &ns);
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
            .create(&Default::default(), &secret)
            .await
            .expect("restore a Secret as it was");
    }
    // The collector reaches the Secrets whose owner's UID is gone; the state protection keeps
    // the base state Secret, the backups and the inputs, Terminating and readable.
    let protected = |s: &Secret| {
        s.finalizers()
            .iter()
            .any(|f| f == captf_api::finalizers::STATE_PROTECTION)
    };
    wait(
        target_env,
        "the Secrets with old owner references kept Terminating or collected",
        || async {
            let mut settled = true;
            for s in &raw {
                let now = secrets.get_opt(&s.name_any()).await?;
                settled &= match now {
                    Some(kept) => protected(&kept) && kept.metadata.deletion_timestamp.is_some(),
                    None => !protected(s),
                };
            }
            Ok(settled.then_some(()))
        },
    )
    .await;
    for path in &parts {
        dr(
            target_env,
            &["unpause", "--file", path.to_str().expect("path")],
        );
    }

    // Without state: held where any sign of an earlier apply survived, a second apply where
    // none did; `owners` takes up the state the protection kept, as its own, and applies
    // nothing.
    let tcs: Api<TerraformCluster> = Api::namespaced(target_client.clone(), &ns);
    for name in ["inputs", "status"] {
        wait(target_env, &format!("{name} StateLost"), || async {
            let t = tcs.get(name).await?;
            Ok((has(&t, "Paused", "False", "NotPaused")
                && has(&t, "StateReadable", "False", "StateLost"))
            .then_some(()))
        })
        .await;
    }
    wait(target_env, "owners reads its kept state", || async {
        let t = tcs.get("owners").await?;
        Ok((has(&t, "Paused", "False", "NotPaused")
            && has(&t, "StateReadable", "True", "StateRead")
            && ready(&t))
        .then_some(()))
    })
    .await;
    wait(
        target_env,
        "bare applied a second time, to Ready",
        || async {
            let t = tcs.get("bare").await?;
            Ok((has(&t, "Paused", "False", "NotPaused") && ready(&t)).then_some(()))
        },
    )
    .await;
    // A StateLost object runs nothing at all, not even a drift check; `owners` needs no apply.
    let ran: Vec<(String, String)> = Api::<Job>::namespaced(target_client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("Jobs")
        .items
        .iter()
        .filter_map(|j| {
            let label = |k: &str| j.labels().get(k).cloned();
            Some((
                label("captf.infrastructure.cluster.x-k8s.io/owner-name")?,
                label(captf_api::labels::OP)?,
            ))
        })
        .collect();
    assert!(
        ran.iter().any(|(o, op)| o == "bare" && op == "apply")
            && ran
                .iter()
                .all(|(o, op)| o == "bare" || (o == "owners" && op != "apply")),
        "only `bare` applies again, and nothing runs for a StateLost object: {ran:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
