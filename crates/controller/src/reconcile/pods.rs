//! The pods of CAPTF's Jobs, as the leases and the preamble ask about them.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::error::{KubeContext, Result};

/// A pod of Job `job` that has not ended (neither `Succeeded` nor `Failed`), by name. It may
/// still run the engine, and so write the state, after its Job is gone: a deleted Job's pod
/// stops within its grace period (600 s), and one orphaned by `--cascade=orphan` runs on.
pub async fn running_pod(
    client: &kube::Client,
    namespace: &str,
    job: &str,
) -> Result<Option<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .during(|| format!("listing the pods of Job {namespace}/{job}"))?;
    Ok(list
        .items
        .into_iter()
        .find(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .and_then(|p| p.metadata.name))
}
