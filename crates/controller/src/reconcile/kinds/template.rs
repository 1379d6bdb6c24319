//! The TerraformMachineTemplate pass: `status.capacity`, `status.nodeInfo` and
//! `status.capacitySource` for autoscaler scale-from-zero, from `spec.capacity` and the module
//! image's labels. The image is read from its registry (manifest and config only) when it
//! changes or its last read failed, with the template's image pull Secrets; a template never
//! runs a Job and has no finalizer.

use std::sync::Arc;
use std::time::Duration;

use captf_api::conditions::{Status, reasons, types};
use captf_api::templates::{TerraformMachineTemplate, TerraformMachineTemplateStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use crate::capacity::{self, Read, Resolved};
use crate::conditions::Conditions;
use crate::error::{Error, KubeContext, Result};
use crate::metrics::KindReason;
use crate::reconcile::Context;
use crate::reconcile::act::events::publish;
use crate::registry::{self, KeyringError};

const KIND: &str = "TerraformMachineTemplate";
/// A failed read is tried again after this long (and on any change of the template).
const RETRY: Duration = Duration::from_secs(60);

pub async fn reconcile(
    template: Arc<TerraformMachineTemplate>,
    ctx: Arc<Context>,
) -> Result<Action> {
    let namespace = template.namespace().ok_or_else(|| {
        Error::InvalidObject(format!("{KIND} {} has no namespace", template.name_any()))
    })?;
    let name = template.name_any();
    let image = template.spec.template.spec.workspace.source.image.as_str();
    let spec_capacity = template.spec.capacity.as_ref();
    let previous = template.status.as_ref();

    let read = if capacity::needs_read(image, spec_capacity, previous) {
        read(&ctx, &namespace, &template).await?
    } else {
        Read::Cached
    };
    let resolved = capacity::resolve(image, spec_capacity, previous, &read);
    if read != Read::Cached && resolved.status == Status::False {
        count_failure(&ctx, resolved.reason);
    }
    let status = status(&template, &resolved);
    if previous != Some(&status) {
        let api: Api<TerraformMachineTemplate> = Api::namespaced(ctx.client.clone(), &namespace);
        crate::reconcile::act::object::write_status(&api, &name, previous, &status).await?;
        announce(&ctx, &template, previous, &resolved).await;
    }
    Ok(if resolved.reason == reasons::IMAGE_INSPECT_FAILED {
        Action::requeue(RETRY)
    } else {
        Action::await_change()
    })
}

/// The image's labels, or why they could not be read. An image pull Secret that is missing
/// or malformed is a failed read too: the condition names it.
async fn read(ctx: &Context, namespace: &str, template: &TerraformMachineTemplate) -> Result<Read> {
    let spec = &template.spec.template.spec.workspace;
    let reference = match captf_api::image::parse(&spec.source.image) {
        Ok(r) => r,
        Err(e) => {
            return Ok(Read::Failed(format!(
                "spec.template.spec.source.image: {e}"
            )));
        }
    };
    let Some(registry) = ctx.registry.as_ref() else {
        return Ok(Read::Failed(
            "the manager has no trusted root certificates to reach registries with".into(),
        ));
    };
    let pull_secrets = spec.image_pull_secret_names();
    let keyring = match registry::keyring(
        &ctx.client,
        namespace,
        &pull_secrets,
        "spec.template.spec.jobs.imagePullSecrets",
    )
    .await
    {
        Ok(keyring) => keyring,
        Err(KeyringError::Unusable(problem)) => return Ok(Read::Failed(problem)),
        Err(KeyringError::Read { secret, source }) => {
            return Err(source).during(|| format!("reading the image pull Secret {secret}"));
        }
    };
    Ok(match registry.labels(&reference, &keyring).await {
        Ok(labels) => Read::Labels(labels),
        Err(e) => Read::Failed(e.to_string()),
    })
}

fn status(
    template: &TerraformMachineTemplate,
    resolved: &Resolved,
) -> TerraformMachineTemplateStatus {
    let previous = template.status.as_ref();
    let mut conditions = Conditions::from(previous.and_then(|s| s.conditions.as_ref()));
    conditions.set(
        types::CAPACITY_RESOLVED,
        resolved.status,
        resolved.reason,
        &resolved.message,
        template.meta().generation,
        Timestamp::now(),
    );
    TerraformMachineTemplateStatus {
        conditions: Some(conditions.into_vec()),
        capacity: resolved.capacity.clone(),
        node_info: resolved.node_info.clone(),
        capacity_source: resolved.source.clone(),
    }
}

fn count_failure(ctx: &Context, reason: &'static str) {
    ctx.metrics
        .image_inspect_errors_total
        .get_or_create(&KindReason { kind: KIND, reason })
        .inc();
}

/// One event per new outcome (not per pass): a resolution for a new image or capacity, or a
/// new failure.
async fn announce(
    ctx: &Context,
    template: &TerraformMachineTemplate,
    previous: Option<&TerraformMachineTemplateStatus>,
    resolved: &Resolved,
) {
    let before = previous.and_then(|s| {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == types::CAPACITY_RESOLVED)
            .map(|c| (c.reason.to_string(), c.message.to_string()))
    });
    if before == Some((resolved.reason.to_owned(), resolved.message.clone())) {
        return;
    }
    let (type_, reason) = match resolved.status {
        Status::True => (EventType::Normal, captf_api::events::CAPACITY_RESOLVED),
        _ => (EventType::Warning, captf_api::events::IMAGE_INSPECT_FAILED),
    };
    publish(ctx, template, type_, reason, &resolved.message, None).await;
}
