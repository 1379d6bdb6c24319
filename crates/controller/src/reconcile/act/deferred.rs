//! The writes observe finds due, deferred to the act (`Effect::Write`): observe only reads.

use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;

use crate::error::{KubeContext, Result};
use crate::reconcile::act::object::Workload;
use crate::reconcile::pass::Pass;

/// A write observe found due, carried out after the decision ([`crate::decide::Effect::Write`]):
/// observe only reads.
#[derive(Clone, Debug)]
pub enum Write {
    /// An event about the object.
    Note {
        type_: EventType,
        reason: &'static str,
        text: String,
    },
    /// A merge patch of the object itself (what its outputs set in its spec); `what` names it
    /// in an error.
    Own {
        patch: serde_json::Value,
        what: &'static str,
    },
    /// A merge patch of the CAPI object `name` in the object's namespace.
    Capi {
        resource: kube::core::ApiResource,
        name: String,
        patch: serde_json::Value,
        what: String,
    },
    /// A pool's exports mark on its durable inputs (`None`: removed).
    ExportsMark {
        annotation: &'static str,
        value: Option<String>,
    },
    /// A pool's record of the exports last applied, on its durable inputs (`None`: removed).
    AppliedExports(Option<Vec<u8>>),
    /// An approval annotation used up, if it still holds `value`.
    Consume {
        annotation: &'static str,
        value: String,
    },
}

impl<K> Pass<'_, K>
where
    K: Workload + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// Carries out the writes observe found due, in the order they were found, and stops at
    /// the first that fails (the next pass finds them due again).
    pub async fn write_deferred(&self, writes: Vec<Write>) -> Result<()> {
        let (client, key, ns) = (&self.ctx.client, self.key, self.key.namespace());
        for write in &writes {
            match write {
                Write::Note {
                    type_,
                    reason,
                    text,
                } => self.publish(*type_, reason, text).await,
                Write::Own { patch, what } => {
                    let api: Api<K> = Api::namespaced(client.clone(), ns);
                    api.patch(key.name(), &PatchParams::default(), &Patch::Merge(patch))
                        .await
                        .during(|| format!("writing {what}"))?;
                }
                Write::Capi {
                    resource,
                    name,
                    patch,
                    what,
                } => {
                    let api: Api<kube::api::DynamicObject> =
                        Api::namespaced_with(client.clone(), ns, resource);
                    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
                        .await
                        .during(|| what.clone())?;
                }
                Write::ExportsMark { annotation, value } => {
                    let value = value.as_deref();
                    crate::reconcile::act::secrets::set_pool_exports_mark(
                        client, key, annotation, value,
                    )
                    .await?;
                }
                Write::AppliedExports(record) => {
                    let record = record.as_deref();
                    crate::reconcile::act::secrets::write_applied_exports(client, key, record)
                        .await?;
                }
                Write::Consume { annotation, value } => {
                    let api: Api<K> = Api::namespaced(client.clone(), ns);
                    crate::reconcile::act::approvals::consume(&api, key.name(), annotation, value)
                        .await?;
                }
            }
        }
        Ok(())
    }
}
