//! Reading the `spec.variablesFrom` sources for [`crate::variables::merge`]: live, on the pass
//! that renders, never cached (their content is not the manager's to keep), and only once
//! their metadata shows the `captf.io/variables=true` label.

use captf_api::WorkspaceSpec;
use captf_contract::{Role, Variables};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ObjectMeta};

use crate::error::{KubeContext, Result};
use crate::job::policy::PolicyLayers;
use crate::reconcile::Context;
use crate::schemas::Known;
use crate::variables::{self, Fetched, Gate, SourceKind};

/// The variables of `workspace`, or the gate naming the source or key that is wrong, or the
/// variables that do not fit the schema its module image publishes. The image is read with the
/// pull Secrets its Jobs get from `layers`: a member's may come from its TerraformCluster.
pub async fn resolve(
    ctx: &Context,
    namespace: &str,
    role: Role,
    workspace: &WorkspaceSpec,
    layers: PolicyLayers<'_>,
) -> Result<std::result::Result<Variables, Gate>> {
    let mut fetched = Vec::new();
    for (index, source) in workspace.variables_from.iter().flatten().enumerate() {
        let (kind, name) = match variables::target(index, source) {
            Ok(target) => target,
            Err(gate) => return Ok(Err(gate)),
        };
        fetched.push(fetch(ctx, namespace, kind, name).await?);
    }
    let merged = match variables::merge(role, namespace, workspace, &fetched) {
        Ok(merged) => merged,
        Err(gate) => return Ok(Err(gate)),
    };
    let image = workspace.source.image.as_str();
    let pull_secrets = layers.pull_secret_names();
    let names: Vec<&str> = pull_secrets.iter().map(String::as_str).collect();
    let known = ctx
        .schemas
        .lookup(
            ctx.registry.as_ref(),
            &ctx.client,
            namespace,
            image,
            &names,
            layers.pull_secrets_field(),
        )
        .await;
    if let Known::Schema(schema) = known
        && let Err(gate) = variables::fit(&schema, image, &merged)
    {
        return Ok(Err(gate));
    }
    Ok(Ok(merged.variables))
}

fn labelled(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(variables::SOURCE_LABEL))
        .is_some_and(|v| v == "true")
}

async fn fetch(
    ctx: &Context,
    namespace: &str,
    kind: SourceKind,
    name: &str,
) -> Result<Option<Fetched>> {
    let what = || {
        format!(
            "reading the variables source {} {namespace}/{name}",
            kind.as_str()
        )
    };
    let unlabelled = Some(Fetched::default());
    Ok(match kind {
        SourceKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
            match api.get_metadata_opt(name).await.during(what)? {
                None => None,
                Some(meta) if !labelled(&meta.metadata) => unlabelled,
                Some(_) => api.get_opt(name).await.during(what)?.map(|cm| {
                    let mut data: std::collections::BTreeMap<String, Vec<u8>> = cm
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.into_bytes()))
                        .collect();
                    data.extend(
                        cm.binary_data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.0)),
                    );
                    Fetched {
                        labelled: labelled(&cm.metadata),
                        data,
                    }
                }),
            }
        }
        SourceKind::Secret => {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
            match api.get_metadata_opt(name).await.during(what)? {
                None => None,
                Some(meta) if !labelled(&meta.metadata) => unlabelled,
                Some(_) => api.get_opt(name).await.during(what)?.map(|s| Fetched {
                    labelled: labelled(&s.metadata),
                    data: s
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0))
                        .collect(),
                }),
            }
        }
    })
}
