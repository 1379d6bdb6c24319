//! The state is the object's own: a state that is deleted or replaced under a Job, or between
//! two passes, never becomes a second set of resources. Every scenario runs with OpenTofu and
//! with Terraform.
//!
//! A state deleted while a Job starts is caught by the runner (`state-mismatch`, nothing runs
//! against it) or, should the deletion land after the runner's last check, by the manager's
//! own read of the new lineage; either way the object is held and no apply follows.

use captf_api::{TerraformCluster, TerraformMachine};
use captf_e2e::Manager;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

/// The no-op images of one engine.
#[derive(Clone, Copy)]
struct Engine {
    tag: &'static str,
}

const OPENTOFU: Engine = Engine { tag: "e2e" };
const TERRAFORM: Engine = Engine {
    tag: "e2e-terraform",
};

impl Engine {
    fn image(self, role: &str) -> String {
        format!("captf.local/modules/noop-{role}:{}", self.tag)
    }
}

fn suffix<K: Workspace>(object: &K) -> String {
    object
        .workspace()
        .state_secret_suffix
        .clone()
        .expect("suffix")
}

fn lineage<K: Workspace>(object: &K) -> Option<String> {
    object.workspace().state_lineage.clone()
}

fn serial<K: Workspace>(object: &K) -> Option<i64> {
    object.workspace().observed_state_serial
}

trait Workspace {
    fn workspace(&self) -> &captf_api::WorkspaceStatus;
}

impl Workspace for TerraformCluster {
    fn workspace(&self) -> &captf_api::WorkspaceStatus {
        &self.status.as_ref().expect("status").workspace
    }
}

impl Workspace for TerraformMachine {
    fn workspace(&self) -> &captf_api::WorkspaceStatus {
        &self.status.as_ref().expect("status").workspace
    }
}

fn state_selector(suffix: &str) -> String {
    format!("tfstate=true,tfstateSecretSuffix={suffix}")
}

async fn state_secrets(client: &kube::Client, ns: &str, suffix: &str) -> Vec<Secret> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .list(&ListParams::default().labels(&state_selector(suffix)))
        .await
        .expect("state Secrets")
        .items
}

/// Deletes every chunk of the state for good, as `kubectl delete secret` would after the
/// state protection was removed (without, the base chunk stays, Terminating and readable).
async fn delete_state(client: &kube::Client, ns: &str, suffix: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    for s in state_secrets(client, ns, suffix).await {
        delete_for_good(&secrets, &s.metadata.name.expect("name")).await;
    }
}

/// The decompressed state document of a single-chunk state.
/// Replaces the state with one of a new lineage and no inputs hash, as a `state push` from a
/// workstation, or an engine that found no state, would leave it. Returns the new lineage.
async fn replace_with_foreign_lineage(client: &kube::Client, ns: &str, suffix: &str) -> String {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let base = format!("tfstate-default-{suffix}");
    let old = secrets.get(&base).await.expect("base Secret");
    let mut doc = state_document(&old);
    let foreign = "5e1f0c1e-0000-4000-8000-0000000f0e19".to_owned();
    doc["lineage"] = foreign.clone().into();
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(base.clone()),
            labels: old.metadata.labels.clone(),
            annotations: Some([("encoding".to_owned(), "gzip".to_owned())].into()),
            ..Default::default()
        },
        data: Some([("tfstate".to_owned(), ByteString(gzip_state(&doc)))].into()),
        ..Default::default()
    };
    delete_for_good(&secrets, &base).await;
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create");
    foreign
}

/// Makes a pass come: a spec change (the decision then wants an apply, which must not run).
async fn change_inputs(api: &Api<TerraformCluster>, name: &str, token: &str) {
    merge_patch(
        api,
        name,
        serde_json::json!({"spec": {"variables": {"extra_exports": {"token": token}}}}),
    )
    .await;
}

fn count(names: &[String], prefix: &str) -> usize {
    names.iter().filter(|n| n.starts_with(prefix)).count()
}

fn held<K: Conditioned>(object: &K) -> bool {
    has(object, "StateReadable", "False", "StateLost")
        || has(object, "StateReadable", "False", "StateLineageMismatch")
}

fn annotation<K: kube::ResourceExt>(object: &K, key: &str) -> Option<String> {
    object.annotations().get(key).cloned()
}

/// A Ready cluster on `engine`, its lineage recorded.
async fn ready(s: &Scene, engine: Engine, name: &str, spec_extra: &str) -> TerraformCluster {
    create_cluster(&s.client, &s.ns, name, &engine.image("cluster"), spec_extra).await;
    let api: Api<TerraformCluster> = Api::namespaced(s.client.clone(), &s.ns);
    wait_until(
        &api,
        name,
        "Ready with its lineage recorded",
        &s.manager,
        |t| has(t, "Ready", "True", "Ready") && lineage(t).is_some(),
    )
    .await
}

/// The state deleted the moment a drift Job appears: held, and no apply follows.
async fn deleted_under_a_drift_job(s: &Scene, engine: Engine) {
    let name = "drift";
    let first = ready(
        s,
        engine,
        name,
        "  drift: {intervalSeconds: 20, action: Report}",
    )
    .await;
    wait_for_job(
        &s.client,
        &s.ns,
        &format!("captf-c-{name}-drift-"),
        &s.manager,
    )
    .await;
    delete_state(&s.client, &s.ns, &suffix(&first)).await;
    let api: Api<TerraformCluster> = Api::namespaced(s.client.clone(), &s.ns);
    let tc = wait_until(&api, name, "held after the drift Job", &s.manager, held).await;
    let names = job_names(&s.client, &s.ns).await;
    assert_eq!(
        count(&names, &format!("captf-c-{name}-apply-")),
        1,
        "{names:?}"
    );
    assert_eq!(
        lineage(&tc),
        lineage(&first),
        "the object's lineage is kept"
    );
}

/// The state deleted the moment an apply of new inputs appears: held, never applied again.
async fn deleted_under_an_apply_job(s: &Scene, engine: Engine) {
    let name = "apply";
    let first = ready(s, engine, name, "").await;
    let api: Api<TerraformCluster> = Api::namespaced(s.client.clone(), &s.ns);
    let applies = count(
        &job_names(&s.client, &s.ns).await,
        &format!("captf-c-{name}-apply-"),
    );
    change_inputs(&api, name, "two").await;
    let next = format!("captf-c-{name}-apply-a{}-", applies + 1);
    wait_for_job(&s.client, &s.ns, &next, &s.manager).await;
    delete_state(&s.client, &s.ns, &suffix(&first)).await;
    let tc = wait_until(&api, name, "held after the apply Job", &s.manager, held).await;
    let names = job_names(&s.client, &s.ns).await;
    assert_eq!(
        count(&names, &format!("captf-c-{name}-apply-")),
        applies + 1,
        "{names:?}"
    );
    assert_eq!(lineage(&tc), lineage(&first));
    if has(&tc, "StateReadable", "False", "StateLost") {
        // The runner caught it: the engine never ran, so it wrote no state.
        assert!(
            state_secrets(&s.client, &s.ns, &suffix(&first))
                .await
                .is_empty()
        );
        assert!(
            has(&tc, "ApplyJobSucceeded", "False", "StateMismatch"),
            "{tc:?}"
        );
    }
}

/// The state deleted the moment the destroy Job appears: the deletion is held, not released.
async fn deleted_under_a_destroy_job(s: &Scene, engine: Engine) {
    let name = "destroy";
    let first = ready(s, engine, name, "").await;
    let api: Api<TerraformCluster> = Api::namespaced(s.client.clone(), &s.ns);
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_for_job(
        &s.client,
        &s.ns,
        &format!("captf-c-{name}-destroy-"),
        &s.manager,
    )
    .await;
    delete_state(&s.client, &s.ns, &suffix(&first)).await;
    let tc = wait_until(&api, name, "the deletion held", &s.manager, |t| {
        held(t) && condition(t, "Deleting").is_some_and(|c| c.2.contains("deletion is held"))
    })
    .await;
    assert!(
        tc.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| !f.is_empty()),
        "the finalizer stays"
    );
    // The documented way out: abandon, naming the object's UID.
    let uid = tc.metadata.uid.clone().expect("uid");
    annotate(&api, name, "captf.io/abandon-infrastructure", Some(&uid)).await;
    wait_for("the abandoned object gone", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", s.manager.log()));
}

/// The machine's state deleted the moment a refresh Job appears: held, never applied again.
async fn deleted_under_a_refresh_job(s: &Scene, engine: Engine) {
    ready(s, engine, "base", "").await;
    let name = "refresh";
    write_bootstrap(&s.client, &s.ns, name).await;
    create_machine(
        &s.client,
        &s.ns,
        "base",
        name,
        &engine.image("machine"),
        "",
        "  variables: {pending_until: \"2100-01-01T00:00:00Z\"}",
    )
    .await;
    let api: Api<TerraformMachine> = Api::namespaced(s.client.clone(), &s.ns);
    let pending = wait_until(&api, name, "applied, health pending", &s.manager, |m| {
        has(m, "InfrastructureHealthy", "False", "InstancePending") && lineage(m).is_some()
    })
    .await;
    wait_for_job(
        &s.client,
        &s.ns,
        &format!("captf-m-{name}-refresh-"),
        &s.manager,
    )
    .await;
    delete_state(&s.client, &s.ns, &suffix(&pending)).await;
    let tm = wait_until(&api, name, "held after the refresh Job", &s.manager, held).await;
    let names = job_names(&s.client, &s.ns).await;
    assert_eq!(
        count(&names, &format!("captf-m-{name}-apply-")),
        1,
        "{names:?}"
    );
    assert_eq!(lineage(&tm), lineage(&pending));
}

async fn lost_under_every_job(prefix: &str, engine: Engine) {
    let s = scene(prefix, &[]).await;
    tokio::join!(
        deleted_under_a_drift_job(&s, engine),
        deleted_under_an_apply_job(&s, engine),
        deleted_under_a_destroy_job(&s, engine),
        deleted_under_a_refresh_job(&s, engine),
    );
}

#[tokio::test]
async fn a_state_lost_under_any_job_is_held_with_opentofu() {
    lost_under_every_job("lost-tofu", OPENTOFU).await;
}

#[tokio::test]
async fn a_state_lost_under_any_job_is_held_with_terraform() {
    lost_under_every_job("lost-tf", TERRAFORM).await;
}

/// Restores the first serial's backup and waits until it is back, exactly.
async fn restore_first(
    s: &Scene,
    name: &str,
    first: &TerraformCluster,
    damaged: &str,
) -> TerraformCluster {
    let api: Api<TerraformCluster> = Api::namespaced(s.client.clone(), &s.ns);
    let serial = serial(first).expect("serial");
    annotate(
        &api,
        name,
        "captf.io/restore-state",
        Some(&serial.to_string()),
    )
    .await;
    let restored = wait_until(
        &api,
        name,
        &format!("restored over {damaged}"),
        &s.manager,
        |t| {
            has(t, "RestoreJobSucceeded", "True", "StateRestored")
                && has(t, "StateReadable", "True", "StateRead")
                && annotation(t, "captf.io/restore-state").is_none()
                && t.status
                    .as_ref()
                    .and_then(|s| s.workspace.last_restored_serial)
                    == Some(serial)
        },
    )
    .await;
    assert_eq!(lineage(&restored), lineage(first), "the backup's lineage");
    restored
}

/// Makes the base chunk of the cluster's state not gzip.
async fn corrupt_base_chunk(s: &Scene, suffix: &str) {
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.ns);
    secrets
        .patch(
            &format!("tfstate-default-{suffix}"),
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"data": {"tfstate": "bm90IGd6aXA="}})),
        )
        .await
        .expect("corrupt");
}

/// Waits until `n` restore Jobs of the cluster `name` succeeded and the object reads the
/// restored state again, with the request used up.
async fn restored_times(s: &Scene, name: &str, n: usize, what: &str) -> TerraformCluster {
    wait_for(what, TIMEOUT, || async {
        let jobs = jobs_of(&s.client, &s.ns, name, "restore").await;
        let done = jobs
            .iter()
            .filter(|j| j.status.as_ref().and_then(|s| s.succeeded) == Some(1))
            .count();
        assert!(
            jobs.len() <= n,
            "more restore Jobs than requests: {}",
            jobs.len()
        );
        Ok((done == n).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", s.manager.log()));
    let api: Api<TerraformCluster> = Api::namespaced(s.client.clone(), &s.ns);
    wait_until(&api, name, what, &s.manager, |t| {
        has(t, "RestoreJobSucceeded", "True", "StateRestored")
            && has(t, "StateReadable", "True", "StateRead")
            && annotation(t, "captf.io/restore-state").is_none()
    })
    .await
}

/// A corrupt chunk: the restore replaces it without loading it, at the backup's serial. A
/// restore writes no new serial, so the backup restored last is often the one wanted next:
/// the same serial is restored again on request, and again with `kubectl captf restore` over
/// a state corrupted since.
async fn restore_over_a_corrupt_chunk(s: &Scene, engine: Engine) {
    let name = "corrupt";
    let first = ready(s, engine, name, "").await;
    let sfx = suffix(&first);
    let backup = serial(&first).expect("serial");
    corrupt_base_chunk(s, &sfx).await;
    let restored = restore_first(s, name, &first, "a corrupt chunk").await;
    assert_eq!(serial(&restored), serial(&first), "the backup's serial");

    let api: Api<TerraformCluster> = Api::namespaced(s.client.clone(), &s.ns);
    annotate(
        &api,
        name,
        "captf.io/restore-state",
        Some(&backup.to_string()),
    )
    .await;
    let again = restored_times(s, name, 2, "the same serial restored a second time").await;
    assert_eq!(serial(&again), Some(backup));

    corrupt_base_chunk(s, &sfx).await;
    wait_until(&api, name, "the state corrupt again", &s.manager, |t| {
        has(t, "StateReadable", "False", "StateCorrupt")
    })
    .await;
    let said = captf_ok(
        s,
        &[
            "restore",
            &format!("tfc/{name}"),
            "--serial",
            &backup.to_string(),
            "--yes",
        ],
    );
    assert!(
        said.contains(&format!("Restore of serial {backup} requested")),
        "{said}"
    );
    let third = restored_times(s, name, 3, "the same serial restored by the plugin").await;
    assert_eq!(serial(&third), Some(backup));
    assert_eq!(lineage(&third), lineage(&first), "the backup's lineage");
    assert_eq!(
        count(
            &job_names(&s.client, &s.ns).await,
            &format!("captf-c-{name}-apply-")
        ),
        1,
        "a restore of the inputs applied last starts no apply"
    );
}

/// A missing chunk (a `-part-2` without `-part-1`): the restore writes the backup's chunks and
/// deletes the surplus one.
async fn restore_over_a_missing_chunk(s: &Scene, engine: Engine) {
    let name = "gap";
    let first = ready(s, engine, name, "").await;
    let sfx = suffix(&first);
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.ns);
    let base = secrets
        .get(&format!("tfstate-default-{sfx}"))
        .await
        .expect("base");
    let part = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("tfstate-default-{sfx}-part-2")),
            labels: base.metadata.labels.clone(),
            ..Default::default()
        },
        data: Some([("tfstate".to_owned(), ByteString(b"tail".to_vec()))].into()),
        ..Default::default()
    };
    secrets
        .create(&PostParams::default(), &part)
        .await
        .expect("part-2");
    let restored = restore_first(s, name, &first, "a missing chunk").await;
    assert_eq!(serial(&restored), serial(&first), "the backup's serial");
    let names: Vec<String> = state_secrets(&s.client, &s.ns, &sfx)
        .await
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    assert!(
        !names.iter().any(|n| n.ends_with("-part-2")),
        "the surplus chunk is gone: {names:?}"
    );
}

/// Another lineage between two passes: held with both lineages named, new inputs do not
/// apply; a restore brings the object's own state back and the inputs then apply on it.
async fn foreign_then_restored(s: &Scene, engine: Engine) {
    let name = "foreign";
    let first = ready(s, engine, name, "").await;
    let own = lineage(&first).expect("lineage");
    let foreign = replace_with_foreign_lineage(&s.client, &s.ns, &suffix(&first)).await;
    let api: Api<TerraformCluster> = Api::namespaced(s.client.clone(), &s.ns);
    change_inputs(&api, name, "two").await;
    let tc = wait_until(&api, name, "StateLineageMismatch", &s.manager, |t| {
        has(t, "StateReadable", "False", "StateLineageMismatch")
    })
    .await;
    let (_, _, message) = condition(&tc, "StateReadable").expect("condition");
    assert!(
        message.contains(&own) && message.contains(&foreign),
        "{message}"
    );
    assert!(message.contains("captf.io/adopt-state"), "{message}");
    assert_eq!(lineage(&tc), Some(own.clone()));
    let names = job_names(&s.client, &s.ns).await;
    assert_eq!(
        count(&names, &format!("captf-c-{name}-apply-")),
        1,
        "{names:?}"
    );
    restore_first(s, name, &first, "a foreign lineage").await;
    wait_until(&api, name, "the new inputs applied", &s.manager, |t| {
        has(t, "Ready", "True", "Ready") && exports(t).contains("two")
    })
    .await;
}

/// Another lineage adopted on purpose: recorded as the object's, applied, annotation used up.
async fn foreign_then_adopted(s: &Scene, engine: Engine) {
    let name = "adopted";
    let first = ready(s, engine, name, "").await;
    let foreign = replace_with_foreign_lineage(&s.client, &s.ns, &suffix(&first)).await;
    let api: Api<TerraformCluster> = Api::namespaced(s.client.clone(), &s.ns);
    change_inputs(&api, name, "two").await;
    wait_until(&api, name, "StateLineageMismatch", &s.manager, |t| {
        has(t, "StateReadable", "False", "StateLineageMismatch")
    })
    .await;
    annotate(&api, name, "captf.io/adopt-state", Some(&foreign)).await;
    let tc = wait_until(&api, name, "adopted and applied", &s.manager, |t| {
        has(t, "Ready", "True", "Ready")
            && exports(t).contains("two")
            && annotation(t, "captf.io/adopt-state").is_none()
    })
    .await;
    assert_eq!(lineage(&tc), Some(foreign));
    event(&s.client, &s.ns, "StateAdopted").await;
}

/// An applied object's state without inputs hash never applies by itself; adopting its own
/// lineage lets the guarded apply run.
async fn without_inputs_hash_then_adopted(s: &Scene, engine: Engine) {
    let name = "nohash";
    let first = ready(s, engine, name, "").await;
    let own = lineage(&first).expect("lineage");
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.ns);
    secrets
        .patch(
            &format!("tfstate-default-{}", suffix(&first)),
            &PatchParams::default(),
            &Patch::Merge(
                &serde_json::json!({"metadata": {"annotations": {"captf.io/inputs-hash": null}}}),
            ),
        )
        .await
        .expect("drop the inputs hash");
    let api: Api<TerraformCluster> = Api::namespaced(s.client.clone(), &s.ns);
    change_inputs(&api, name, "two").await;
    let tc = wait_until(&api, name, "StateWithoutInputsHash", &s.manager, |t| {
        has(t, "StateReadable", "False", "StateWithoutInputsHash")
    })
    .await;
    let (_, _, message) = condition(&tc, "StateReadable").expect("condition");
    assert!(
        message.contains(&format!("captf.io/adopt-state={own}")),
        "{message}"
    );
    let names = job_names(&s.client, &s.ns).await;
    assert_eq!(
        count(&names, &format!("captf-c-{name}-apply-")),
        1,
        "{names:?}"
    );
    annotate(&api, name, "captf.io/adopt-state", Some(&own)).await;
    wait_until(&api, name, "adopted and applied", &s.manager, |t| {
        has(t, "Ready", "True", "Ready")
            && exports(t).contains("two")
            && annotation(t, "captf.io/adopt-state").is_none()
    })
    .await;
}

async fn damaged_and_replaced(prefix: &str, engine: Engine) {
    let s = scene(prefix, &[]).await;
    tokio::join!(
        restore_over_a_corrupt_chunk(&s, engine),
        restore_over_a_missing_chunk(&s, engine),
        foreign_then_restored(&s, engine),
        foreign_then_adopted(&s, engine),
        without_inputs_hash_then_adopted(&s, engine),
    );
    let metrics = Manager::get(&s.manager.metrics).expect("metrics");
    assert!(
        sample(
            &metrics,
            "captf_state_read_errors_total{kind=\"TerraformCluster\",reason=\"lineage_mismatch\"}"
        )
        .is_some_and(|n| n >= 2.0),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_damaged_or_foreign_state_is_restored_or_adopted_with_opentofu() {
    damaged_and_replaced("replaced-tofu", OPENTOFU).await;
}

#[tokio::test]
async fn a_damaged_or_foreign_state_is_restored_or_adopted_with_terraform() {
    damaged_and_replaced("replaced-tf", TERRAFORM).await;
}

/// The `lost` series of TerraformClusters, as the manager exports it now.
fn lost_count(s: &Scene) -> f64 {
    let metrics = Manager::get(&s.manager.metrics).expect("metrics");
    sample(
        &metrics,
        "captf_state_read_errors_total{kind=\"TerraformCluster\",reason=\"lost\"}",
    )
    .unwrap_or_else(|| panic!("no lost series:\n{metrics}"))
}

/// A state deleted between two passes of an object that applied: `StateLost`, counted when it
/// is found gone and not again however often the object is looked at, and CAPTFStateUnreadable
/// fires on the series as the manager exported it (promtool over the shipped rules).
#[tokio::test]
async fn a_lost_state_is_counted_once_and_fires_the_unreadable_alert() {
    let s = scene("lost-alert", &[]).await;
    let before = lost_count(&s);
    assert_eq!(before, 0.0, "the series starts at 0");
    let name = "lost";
    let first = ready(&s, OPENTOFU, name, "").await;
    delete_state(&s.client, &s.ns, &suffix(&first)).await;
    let api: Api<TerraformCluster> = Api::namespaced(s.client.clone(), &s.ns);
    change_inputs(&api, name, "two").await;
    wait_until(&api, name, "StateLost", &s.manager, |t| {
        has(t, "StateReadable", "False", "StateLost")
    })
    .await;
    let found = lost_count(&s);
    assert!(found >= 1.0, "the loss is counted");
    // Two more passes that find it lost still (each answers a spec change) count nothing.
    for token in ["three", "four"] {
        change_inputs(&api, name, token).await;
        wait_until(
            &api,
            name,
            "a pass of the new generation",
            &s.manager,
            |t| {
                let generation = t.metadata.generation;
                t.status
                    .as_ref()
                    .and_then(|st| st.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| &*c.type_ == "StateReadable"))
                    .is_some_and(|c| {
                        c.observed_generation == generation && &*c.reason == "StateLost"
                    })
            },
        )
        .await;
    }
    let after = lost_count(&s);
    assert_eq!(
        after,
        found,
        "counted when the state was found gone, not once per pass\nmanager log:\n{}",
        s.manager.log()
    );
    let scraped = captf_e2e::alerts::Scraped {
        series: "captf_state_read_errors_total{kind=\"TerraformCluster\",reason=\"lost\"}".into(),
        values: vec![before, before, after, after, after, after],
    };
    captf_e2e::alerts::fires(
        &[scraped],
        "CAPTFStateUnreadable",
        &[("kind", "TerraformCluster"), ("reason", "lost")],
        4,
    )
    .expect("the alert fires on the manager's series");
    let names = job_names(&s.client, &s.ns).await;
    assert_eq!(
        count(&names, &format!("captf-c-{name}-apply-")),
        1,
        "nothing applies over a lost state: {names:?}"
    );
    // The loss has its own event (StateLost), so no ConditionChanged says it again.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(s.client.clone(), &s.ns);
    let changed: Vec<_> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ConditionChanged"))
        .collect();
    assert!(
        !changed.iter().any(|e| e
            .note
            .as_deref()
            .is_some_and(|n| n.starts_with("StateReadable"))),
        "a change announced by a reason of its own is not announced again: {changed:?}"
    );
}

/// Replaces the state's one chunk with `doc` (gzip, as the backend stores it).
async fn replace_state_document(s: &Scene, suffix: &str, doc: &serde_json::Value) {
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.ns);
    let data = k8s_openapi::ByteString(gzip_state(doc));
    secrets
        .patch(
            &format!("tfstate-default-{suffix}"),
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"data": {"tfstate": data}})),
        )
        .await
        .expect("replace the state");
}

/// A state the manager cannot read at a newer serial (OpenTofu's state encryption, or a state
/// format version it does not know): held with its reason, nothing applies over it, and no
/// backup is taken of it, so the last good backup stays the newest.
async fn held_and_not_backed_up(
    s: &Scene,
    name: &str,
    reason: &str,
    doc: impl Fn(&serde_json::Value) -> serde_json::Value,
) {
    let first = ready(s, OPENTOFU, name, "").await;
    let sfx = suffix(&first);
    let good = serial(&first).expect("serial");
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.ns);
    let base = secrets
        .get(&format!("tfstate-default-{sfx}"))
        .await
        .expect("state");
    replace_state_document(s, &sfx, &doc(&state_document(&base))).await;
    let api: Api<TerraformCluster> = Api::namespaced(s.client.clone(), &s.ns);
    change_inputs(&api, name, "two").await;
    let held = wait_until(&api, name, reason, &s.manager, |t| {
        has(t, "StateReadable", "False", reason)
    })
    .await;
    let newer = good + 1;
    let backups = held
        .status
        .as_ref()
        .and_then(|st| st.workspace.state_backups.clone())
        .unwrap_or_default();
    assert!(
        backups.iter().all(|b| b.serial <= good),
        "no backup of the unreadable serial {newer}: {backups:?}"
    );
    assert!(
        secrets
            .get_opt(&format!("captf-state-backup-{sfx}-{newer}"))
            .await
            .expect("get")
            .is_none(),
        "no backup Secret of serial {newer}"
    );
    let names = job_names(&s.client, &s.ns).await;
    assert_eq!(
        count(&names, &format!("captf-c-{name}-apply-")),
        1,
        "nothing applies over it: {names:?}"
    );
}

#[tokio::test]
async fn an_encrypted_or_unknown_version_state_is_held_and_never_backed_up() {
    let s = scene("unreadable", &[]).await;
    tokio::join!(
        held_and_not_backed_up(&s, "encrypted", "StateEncrypted", |doc| {
            serde_json::json!({
                "serial": doc["serial"].as_u64().unwrap_or(1) + 1,
                "lineage": doc["lineage"],
                "meta": {"key_provider.pbkdf2.k": "eyJ9"},
                "encrypted_data": "AAAA",
                "encryption_version": "v0",
            })
        }),
        held_and_not_backed_up(&s, "unknown-version", "StateCorrupt", |doc| {
            let mut doc = doc.clone();
            doc["version"] = 5.into();
            doc["serial"] = (doc["serial"].as_u64().unwrap_or(1) + 1).into();
            doc
        }),
    );
    let metrics = Manager::get(&s.manager.metrics).expect("metrics");
    for reason in ["encrypted", "corrupt"] {
        assert!(
            sample(
                &metrics,
                &format!(
                    "captf_state_read_errors_total{{kind=\"TerraformCluster\",reason=\"{reason}\"}}"
                )
            )
            .is_some_and(|n| n >= 1.0),
            "{reason}: {metrics}"
        );
    }
}
