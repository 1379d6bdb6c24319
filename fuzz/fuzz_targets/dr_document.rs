//! The disaster-recovery document: `dr::document::Export::from_json` and the check `captf dr
//! import` and `captf dr unpause` run before anything is created (`document::validate`), then
//! what the import does to each item on its way in (`pause`, `strip`, `rewrite_owners`, the
//! conversion to a `DynamicObject`) and what unpause picks (`to_unpause`, `unpause_patch`).
//!
//! The input is the export document.

#![no_main]

use std::collections::BTreeMap;

use captf_controller::dr::document::{self, Export, OwnerKey};
use captf_controller::dr::kinds::{self, Kind};
use kube::api::DynamicObject;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(export) = Export::from_json(data) else {
        return;
    };
    let _ = document::referenced_identities(&export.objects);
    let _ = document::referenced_variable_sources(&export.objects);
    let written = export.to_json().expect("an export serializes");
    assert_eq!(
        Export::from_json(&written).as_ref().ok(),
        Some(&export),
        "an export survives being written"
    );
    if document::validate(&export).is_err() {
        return;
    }
    // What `import` does to each item, in its order.
    let mut new_uids: BTreeMap<OwnerKey, String> = BTreeMap::new();
    let mut cluster_api = export.cluster_api.clone();
    cluster_api.sort_by_key(kinds::of);
    for mut object in cluster_api {
        if kinds::of(&object) == Some(Kind::CapiCluster) && !document::paused(&object) {
            document::pause(&mut object);
            assert!(document::paused(&object), "a Cluster is restored paused");
        }
        restore(object, &mut new_uids);
    }
    for secret in &export.secrets {
        let mut secret = secret.clone();
        document::strip(&mut secret, false);
        assert!(secret.pointer("/metadata/ownerReferences").is_none());
        restore(secret, &mut new_uids);
    }
    let mut objects = export.objects.clone();
    objects.sort_by_key(kinds::of);
    for mut object in objects {
        if !document::paused(&object) {
            document::pause(&mut object);
            assert!(document::paused(&object), "every object is restored paused");
        }
        restore(object, &mut new_uids);
    }
    // What `unpause` picks: all it paused, or those named and their Clusters.
    let all = document::to_unpause(&export, &[]).expect("no object named, nothing missing");
    for object in &all {
        let _ = document::unpause_patch(object);
    }
    let named: Vec<String> = export
        .objects
        .iter()
        .chain(&export.cluster_api)
        .take(3)
        .map(document::display)
        .collect();
    if let Ok(some) = document::to_unpause(&export, &named) {
        assert!(some.iter().all(|o| all.contains(o)));
    }
});

/// Creating one item: owner references pointed at the restored owners, the status written
/// apart, the item as the API client sends it; its new UID recorded for what it owns.
fn restore(mut object: Value, new_uids: &mut BTreeMap<OwnerKey, String>) {
    let _ = document::display(&object);
    document::rewrite_owners(&mut object, new_uids);
    for reference in object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let uid = reference.get("uid").and_then(Value::as_str);
        assert!(
            uid.is_some_and(|uid| new_uids.values().any(|u| u == uid)),
            "every owner reference kept points at a restored owner"
        );
    }
    if let Some(kind) = kinds::of(&object) {
        let _ = (kind.resource(), kind.has_status_subresource());
    }
    let _ = object.as_object_mut().and_then(|o| o.remove("status"));
    let _ = serde_json::from_value::<DynamicObject>(object.clone());
    let uid = format!("uid-{}", new_uids.len());
    new_uids.insert(document::owner_key(&object), uid);
}
