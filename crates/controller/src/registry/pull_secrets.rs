//! The credentials of an object's image pull Secrets, as the kubelet would use them.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use super::Keyring;

/// Why the pull Secrets give no keyring.
#[derive(Debug, thiserror::Error)]
pub enum KeyringError {
    /// The API server could not be asked.
    #[error("reading the image pull Secret {secret}: {source}")]
    Read {
        secret: String,
        #[source]
        source: kube::Error,
    },
    /// A Secret is missing or is not a Docker config; the message says what to do.
    #[error("{0}")]
    Unusable(String),
}

/// The merged credentials of the Secrets `names` in `namespace`, named at `field` in messages
/// (`spec.jobs.imagePullSecrets`).
pub async fn keyring(
    client: &kube::Client,
    namespace: &str,
    names: &[&str],
    field: &str,
) -> Result<Keyring, KeyringError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut keyring = Keyring::default();
    for name in names.iter().copied() {
        let secret = secrets
            .get_opt(name)
            .await
            .map_err(|source| KeyringError::Read {
                secret: format!("{namespace}/{name}"),
                source,
            })?
            .ok_or_else(|| {
                KeyringError::Unusable(format!(
                    "the image pull Secret {namespace}/{name} ({field}) does not exist: create it or remove it from the list"
                ))
            })?;
        let data = secret.data.unwrap_or_default();
        let config = data
            .get(".dockerconfigjson")
            .or_else(|| data.get(".dockercfg"))
            .ok_or_else(|| {
                KeyringError::Unusable(format!(
                    "the image pull Secret {namespace}/{name} has neither .dockerconfigjson nor .dockercfg: make it a kubernetes.io/dockerconfigjson Secret"
                ))
            })?;
        let entries = Keyring::parse(&config.0).map_err(|e| {
            KeyringError::Unusable(format!(
                "the image pull Secret {namespace}/{name} is not a Docker config: {e}"
            ))
        })?;
        keyring.extend(entries);
    }
    Ok(keyring)
}
