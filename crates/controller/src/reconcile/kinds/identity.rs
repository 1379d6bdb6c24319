//! The TerraformClusterIdentity pass (status only): `Ready` says whether the credentials
//! Secret it names exists, and `status.namespaces` lists the namespaces holding its mirror
//! `captf-creds-<identity>` (from the managed Secrets cache). Nothing is written when nothing
//! changed; the Secret itself is not watched, so it is looked at again every few minutes.

use std::sync::Arc;
use std::time::Duration;

use captf_api::conditions::{Status, reasons, types};
use captf_api::{TerraformClusterIdentity, TerraformClusterIdentityStatus, annotations};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use crate::cache::Caches;
use crate::conditions::Conditions;
use crate::error::{KubeContext, Result};
use crate::reconcile::Context;
use crate::reconcile::act::events::publish;

/// How often the credentials Secret is looked at (it is not watched).
const RECHECK: Duration = Duration::from_secs(300);
/// A missing Secret is looked for sooner.
const RECHECK_MISSING: Duration = Duration::from_secs(30);

pub async fn reconcile(
    identity: Arc<TerraformClusterIdentity>,
    ctx: Arc<Context>,
) -> Result<Action> {
    let name = identity.name_any();
    let source = &identity.spec.secret_ref;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &source.namespace);
    let found = secrets
        .get_metadata_opt(&source.name)
        .await
        .during(|| format!("reading Secret {}/{}", source.namespace, source.name))?
        .is_some();
    let (status, reason, message) = if found {
        (Status::True, reasons::SECRET_FOUND, String::new())
    } else {
        (
            Status::False,
            reasons::SECRET_NOT_FOUND,
            format!(
                "the credentials Secret {}/{} does not exist: create it or fix spec.secretRef",
                source.namespace, source.name
            ),
        )
    };
    let previous = identity.status.as_ref();
    let mut conds = Conditions::from(previous.and_then(|s| s.conditions.as_ref()));
    let before = conds.get(types::READY).map(|c| c.reason.clone());
    conds.set(
        types::READY,
        status,
        reason,
        &message,
        identity.meta().generation,
        Timestamp::now(),
    );
    let namespaces = mirrored_in(&ctx.caches, &name);
    let next = TerraformClusterIdentityStatus {
        conditions: Some(conds.into_vec()),
        namespaces: (!namespaces.is_empty()).then_some(namespaces),
    };
    let api: Api<TerraformClusterIdentity> = Api::all(ctx.client.clone());
    crate::reconcile::act::object::write_status(&api, &name, previous, &next).await?;
    // One event per transition; a first reading that finds the Secret says nothing.
    match (before.as_deref(), reason) {
        (Some(r), reasons::SECRET_FOUND) if r != reasons::SECRET_FOUND => {
            let note = format!("Secret {}/{} exists", source.namespace, source.name);
            let reason = captf_api::events::IDENTITY_SECRET_FOUND;
            publish(
                &ctx,
                identity.as_ref(),
                EventType::Normal,
                reason,
                &note,
                None,
            )
            .await;
        }
        (previous, reasons::SECRET_NOT_FOUND) if previous != Some(reasons::SECRET_NOT_FOUND) => {
            let reason = captf_api::events::IDENTITY_SECRET_NOT_FOUND;
            publish(
                &ctx,
                identity.as_ref(),
                EventType::Warning,
                reason,
                &message,
                None,
            )
            .await;
        }
        _ => {}
    }
    Ok(Action::requeue(if found {
        RECHECK
    } else {
        RECHECK_MISSING
    }))
}

/// The namespaces holding a mirror of `identity`, sorted.
pub fn mirrored_in(caches: &Caches, identity: &str) -> Vec<String> {
    let mut namespaces: Vec<String> = caches
        .secrets
        .mirrors()
        .iter()
        .filter(|s| {
            s.annotations()
                .get(annotations::IDENTITY)
                .map(String::as_str)
                == Some(identity)
        })
        .filter_map(|s| s.namespace())
        .collect();
    namespaces.sort();
    namespaces.dedup();
    namespaces
}
