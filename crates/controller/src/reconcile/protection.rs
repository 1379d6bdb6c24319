//! The state protection finalizer ([`finalizers::STATE_PROTECTION`]) on the Secrets that are
//! the last record of what a module created: the state's base chunk, every backup chunk and the
//! durable inputs. The garbage collector, a namespace deletion or a `kubectl delete` can then
//! only mark them Terminating; they stay readable until the manager releases them, which it
//! does only where the state stops describing infrastructure or someone said to let it go: the
//! cleanup after a destroy or an abandon, and the pruning of old backups.
//!
//! The engine's other chunks (`-part-N`) are never protected: the engine deletes the surplus
//! ones when a state shrinks and creates them again when it grows, and a part held Terminating
//! would refuse that create. A state of several chunks is covered by its backups.

use captf_api::finalizers;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};

use crate::cache::Caches;
use crate::error::{Error, KubeContext, Result};

/// The Secrets among `names` the cache holds without the finalizer (a missing one is not
/// ours to protect).
pub fn to_protect(caches: &Caches, namespace: &str, names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|name| caches.secrets.protected(namespace, name) == Some(false))
        .cloned()
        .collect()
}

/// Adds the finalizer to each of `names`: a strategic merge keeps any finalizer of someone
/// else. Returns those protected; a failure is logged and left for the next pass, as an
/// owner repair is.
pub async fn protect(client: &kube::Client, namespace: &str, names: &[String]) -> Vec<String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({"metadata": {"finalizers": [finalizers::STATE_PROTECTION]}});
    let mut protected = Vec::new();
    for name in names {
        match secrets
            .patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            Ok(_) => protected.push(name.clone()),
            Err(error) => tracing::warn!(
                namespace,
                secret = %name,
                %error,
                "state protection not added; the next pass tries again"
            ),
        }
    }
    protected
}

/// Removes the finalizer from `name`, leaving any other; a Secret already gone is released.
/// Called before the manager deletes a protected Secret, and on the backups it leaves to the
/// garbage collector.
pub async fn release(api: &Api<Secret>, namespace: &str, name: &str) -> Result<()> {
    let patch = serde_json::json!({
        "metadata": {"$deleteFromPrimitiveList/finalizers": [finalizers::STATE_PROTECTION]}
    });
    match api
        .patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => {
            Err(e).during(|| format!("releasing the state protection of Secret {namespace}/{name}"))
        }
    }
}

/// Releases then deletes `name` (background propagation); a Secret already gone counts as
/// deleted.
pub async fn delete(api: &Api<Secret>, namespace: &str, name: &str) -> Result<()> {
    release(api, namespace, name).await?;
    match api
        .delete(name, &kube::api::DeleteParams::background())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::Kube {
            action: format!("deleting Secret {namespace}/{name}"),
            source: e,
        }),
    }
}
