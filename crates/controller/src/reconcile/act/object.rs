//! Writes to the workload object itself: its finalizer, the block-move annotation and the one
//! status patch of a pass. Generic over the kinds.

use captf_api::ActiveJob;
use captf_api::annotations;
use captf_api::names::{ObjectKey, WorkloadKind};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use crate::conditions::Conditions;
use crate::error::{Error, KubeContext, Result};
use crate::reconcile::pass::Workload;

/// `clusterctl.cluster.x-k8s.io/block-move` while a Job runs, so `clusterctl move` waits.
pub async fn set_block_move<K: Workload>(api: &Api<K>, tc: &K, on: bool) -> Result<()> {
    let present = tc.annotations().contains_key(annotations::BLOCK_MOVE);
    if present == on {
        return Ok(());
    }
    let value = if on {
        serde_json::json!("true")
    } else {
        serde_json::Value::Null
    };
    let patch = serde_json::json!({"metadata": {"annotations": {annotations::BLOCK_MOVE: value}}});
    api.patch(
        &tc.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .during(|| "setting block-move".to_owned())?;
    Ok(())
}

/// Adds the kind's finalizer.
pub async fn add_finalizer<K: Workload>(api: &Api<K>, tc: &K, kind: WorkloadKind) -> Result<()> {
    // A JSON patch that appends: no resourceVersion to go stale after this pass's other writes,
    // and other controllers' finalizers stay.
    let finalizer = kind.finalizer();
    let ops = if tc.meta().finalizers.is_some() {
        serde_json::json!([{"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}])
    } else {
        serde_json::json!([{"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}])
    };
    let patch: json_patch::Patch = serde_json::from_value(ops)?;
    api.patch(
        &tc.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await
    .during(|| "adding the finalizer".to_owned())?;
    Ok(())
}

/// Removes the kind's finalizer (and nothing else).
pub async fn remove_finalizer<K: Workload>(api: &Api<K>, tc: &K, kind: WorkloadKind) -> Result<()> {
    // Read live and remove exactly our entry by index, guarded by a test of its value: other
    // controllers' finalizers and concurrent metadata writes are left alone.
    let Some(live) = api
        .get_opt(&tc.name_any())
        .await
        .during(|| "reading the object".to_owned())?
    else {
        return Ok(());
    };
    let Some(index) = live.finalizers().iter().position(|f| f == kind.finalizer()) else {
        return Ok(());
    };
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": kind.finalizer()},
        {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
    ]))?;
    match api
        .patch(
            &tc.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::Kube {
            action: "removing the finalizer".into(),
            source: e,
        }),
    }
}

/// The one status write of a pass, skipped when nothing changed: an object at rest costs
/// no writes.
pub async fn patch_status<K: Workload, S: serde::Serialize>(
    api: &Api<K>,
    key: &ObjectKey,
    before: Option<&S>,
    status: &S,
    conds: Conditions,
    generation: Option<i64>,
    active: Option<ActiveJob>,
) -> Result<()> {
    let mut value = serde_json::to_value(status)?;
    value["conditions"] = serde_json::to_value(conds.into_vec())?;
    value["observedGeneration"] = generation.map_or(serde_json::Value::Null, Into::into);
    value["activeJob"] = active.map_or(Ok(serde_json::Value::Null), serde_json::to_value)?;
    let before = before
        .map(serde_json::to_value)
        .transpose()?
        .unwrap_or_else(|| serde_json::json!({}));
    let Some(change) = crate::merge::diff(&before, &value) else {
        return Ok(());
    };
    let patch = serde_json::json!({"status": change});
    api.patch_status(key.name(), &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .during(|| "patching status".to_owned())?;
    Ok(())
}

/// Writes `after` as the status of `name` with the merge patch from `before`; nothing when
/// they are equal. For the kinds without a workload pass (templates, identities).
pub async fn write_status<K, S>(
    api: &Api<K>,
    name: &str,
    before: Option<&S>,
    after: &S,
) -> Result<()>
where
    K: Workload,
    S: serde::Serialize,
{
    let before = before
        .map(serde_json::to_value)
        .transpose()?
        .unwrap_or_else(|| serde_json::json!({}));
    let Some(change) = crate::merge::diff(&before, &serde_json::to_value(after)?) else {
        return Ok(());
    };
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({ "status": change })),
    )
    .await
    .during(|| format!("patching the status of {} {name}", K::kind(&())))?;
    Ok(())
}
