//! Which changes of a workload object wake a pass over it.
//!
//! Every pass ends with a status patch, and the API server sends that patch back on the watch.
//! Waking for it would run a second pass per pass, each as expensive as the first (the live
//! reads of state, Jobs and owners), for a change the manager made itself: at start-up that
//! doubled the requests of a fleet, and under a burst of spec changes those echo passes held
//! the reconcile slots the changes waited for. So a change wakes a pass only when it touches
//! what a pass acts on: the spec (the generation), the labels and annotations a user sets,
//! the finalizers, the deletion, and the owners. Status, `resourceVersion` and
//! `managedFields` alone never do. The object still passes at its requeue and every
//! `--sync-period`.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use captf_api::{TerraformCluster, annotations};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A digest of what in `meta` wakes a pass: two versions of an object with the same digest
/// are the same to a pass. The shape of [`kube::runtime::Predicate`], so it filters a watch.
pub fn pass_worthy(meta: &ObjectMeta) -> Option<u64> {
    let mut hasher = DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    hash_metadata(meta, &mut hasher);
    Some(hasher.finish())
}

/// What a pass acts on of `meta` besides its generation.
fn hash_metadata(meta: &ObjectMeta, hasher: &mut DefaultHasher) {
    meta.labels.hash(hasher);
    // The manager's own block-move annotation is set and removed around each Job; the Job's
    // own events wake the passes that follow it.
    meta.annotations
        .iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != annotations::BLOCK_MOVE)
        .for_each(|kv| kv.hash(hasher));
    meta.finalizers.hash(hasher);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .hash(hasher);
    for owner in meta.owner_references.iter().flatten() {
        (&owner.api_version, &owner.kind, &owner.name, &owner.uid).hash(hasher);
        owner.controller.hash(hasher);
    }
}

/// A digest of what of a TerraformCluster its machines and pools act on: its metadata as for a
/// pass over the cluster itself, the parts of its spec a member inherits (`defaults`, `drift`,
/// `maxActiveJobs`, the identity and the Job policy), and the status a member reads
/// (provisioned, failure domains, exports and the state serial they come from, the state's
/// Secrets).
///
/// The rest of its spec is not among them: a change of the cluster's module or variables
/// reaches its members through its apply (a new state serial), and waking every member at the
/// change itself ran a pass per member for nothing, doubling the passes of a burst of cluster
/// changes. Nor are its conditions or its running Job: every pass over the cluster rewrites
/// the conditions, and a Job's end shows in the state serial.
pub fn members_worthy(tc: &TerraformCluster) -> Option<u64> {
    let mut hasher = DefaultHasher::new();
    hash_metadata(&tc.metadata, &mut hasher);
    let spec = &tc.spec;
    // Serialized: the spec types carry JSON values, which have no `Hash`.
    let inherited = (
        &spec.defaults,
        &spec.drift,
        &spec.max_active_jobs,
        &spec.workspace.identity_ref,
        &spec.workspace.jobs,
    );
    serde_json::to_vec(&inherited).ok().hash(&mut hasher);
    if let Some(status) = &tc.status {
        let w = &status.workspace;
        // Serialized: the status types carry JSON values, which have no `Hash`.
        let read = (
            &w.initialization,
            &w.observed_state_serial,
            &w.state_secret_suffix,
            &status.failure_domains,
            &status.exports,
        );
        serde_json::to_vec(&read).ok().hash(&mut hasher);
    }
    Some(hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        ManagedFieldsEntry, OwnerReference, Time,
    };
    use std::collections::BTreeMap;

    fn base() -> ObjectMeta {
        ObjectMeta {
            name: Some("c".into()),
            namespace: Some("ns".into()),
            generation: Some(3),
            resource_version: Some("100".into()),
            labels: Some(BTreeMap::from([(
                "cluster.x-k8s.io/cluster-name".into(),
                "c".into(),
            )])),
            annotations: Some(BTreeMap::from([("note".into(), "x".into())])),
            finalizers: Some(vec![
                "terraformcluster.infrastructure.cluster.x-k8s.io".into(),
            ]),
            ..ObjectMeta::default()
        }
    }

    /// A case: what changes, and whether that wakes a pass.
    type Case = (&'static str, fn(&mut ObjectMeta), bool);

    #[test]
    fn only_what_a_pass_acts_on_wakes_it() {
        let table: Vec<Case> = vec![
            ("nothing changed", |_| {}, false),
            (
                "a status patch: a new resourceVersion",
                |m| m.resource_version = Some("101".into()),
                false,
            ),
            (
                "managedFields rewritten",
                |m| m.managed_fields = Some(vec![ManagedFieldsEntry::default()]),
                false,
            ),
            (
                "the manager's block-move annotation set",
                |m| {
                    m.annotations
                        .get_or_insert_default()
                        .insert(annotations::BLOCK_MOVE.into(), String::new());
                },
                false,
            ),
            ("a spec change", |m| m.generation = Some(4), true),
            (
                "an approval annotation",
                |m| {
                    m.annotations.get_or_insert_default().insert(
                        annotations::APPROVE_DESTRUCTIVE_PLAN.into(),
                        "h2:abc".into(),
                    );
                },
                true,
            ),
            (
                "an annotation's value",
                |m| {
                    m.annotations
                        .get_or_insert_default()
                        .insert("note".into(), "y".into());
                },
                true,
            ),
            (
                "a label",
                |m| {
                    m.labels
                        .get_or_insert_default()
                        .insert("team".into(), "a".into());
                },
                true,
            ),
            ("the finalizer removed", |m| m.finalizers = None, true),
            (
                "deletion requested",
                |m| m.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                true,
            ),
            (
                "an owner added",
                |m| {
                    m.owner_references = Some(vec![OwnerReference {
                        api_version: "cluster.x-k8s.io/v1beta2".into(),
                        kind: "Cluster".into(),
                        name: "c".into(),
                        uid: "u".into(),
                        ..OwnerReference::default()
                    }]);
                },
                true,
            ),
        ];
        let before = pass_worthy(&base());
        for (case, change, wakes) in table {
            let mut meta = base();
            change(&mut meta);
            assert_eq!(pass_worthy(&meta) != before, wakes, "{case}");
        }
    }

    /// A change of a TerraformCluster, and whether that wakes its members.
    type ClusterCase = (&'static str, fn(&mut TerraformCluster), bool);

    #[test]
    fn members_wake_for_what_they_read_of_their_cluster() {
        let cluster = || -> TerraformCluster {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
                "kind": "TerraformCluster",
                "metadata": {"name": "c", "namespace": "ns", "generation": 1},
                "spec": {"source": {"image": "m:1"}},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                    "initialization": {"provisioned": true},
                    "observedStateSerial": 2,
                    "exports": {"vpc": "a"},
                    "failureDomains": [{"name": "fd1", "controlPlane": true}],
                },
            }))
            .expect("a TerraformCluster")
        };
        let table: Vec<ClusterCase> = vec![
            ("nothing changed", |_| {}, false),
            (
                "its conditions rewritten by its own pass",
                |tc| {
                    let s = tc.status.as_mut().expect("status");
                    s.conditions.get_or_insert_default()[0].message = "again".into();
                },
                false,
            ),
            (
                "a new resourceVersion",
                |tc| tc.metadata.resource_version = Some("2".into()),
                false,
            ),
            (
                "a spec change members do not inherit (its module)",
                |tc| {
                    tc.metadata.generation = Some(2);
                    tc.spec.workspace.source.image = "m:2".into();
                },
                false,
            ),
            (
                "its defaults for members",
                |tc| {
                    tc.metadata.generation = Some(2);
                    tc.spec.defaults = Some(
                        serde_json::from_value(
                            serde_json::json!({"identityRef": {"name": "other"}}),
                        )
                        .expect("defaults"),
                    );
                },
                true,
            ),
            (
                "its drift settings",
                |tc| tc.spec.drift = Some(Default::default()),
                true,
            ),
            ("its Job cap", |tc| tc.spec.max_active_jobs = Some(3), true),
            (
                "its identity",
                |tc| {
                    tc.spec.workspace.identity_ref = Some(captf_api::IdentityReference {
                        name: "other".into(),
                    });
                },
                true,
            ),
            (
                "its Job policy",
                |tc| tc.spec.workspace.jobs = Some(Default::default()),
                true,
            ),
            (
                "paused by annotation",
                |tc| {
                    tc.metadata
                        .annotations
                        .get_or_insert_default()
                        .insert(annotations::PAUSED.into(), String::new());
                },
                true,
            ),
            (
                "no longer provisioned",
                |tc| {
                    tc.status.as_mut().expect("status").workspace.initialization = None;
                },
                true,
            ),
            (
                "a new state serial (new exports in the state)",
                |tc| {
                    tc.status
                        .as_mut()
                        .expect("status")
                        .workspace
                        .observed_state_serial = Some(3);
                },
                true,
            ),
            (
                "other exports",
                |tc| {
                    tc.status.as_mut().expect("status").exports =
                        Some(serde_json::json!({"vpc": "b"}));
                },
                true,
            ),
            (
                "other failure domains",
                |tc| tc.status.as_mut().expect("status").failure_domains = None,
                true,
            ),
            ("no status at all", |tc| tc.status = None, true),
        ];
        let before = members_worthy(&cluster());
        for (case, change, wakes) in table {
            let mut tc = cluster();
            change(&mut tc);
            assert_eq!(members_worthy(&tc) != before, wakes, "{case}");
        }
    }
}
