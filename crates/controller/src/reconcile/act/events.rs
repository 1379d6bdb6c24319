//! Events about the object: published best effort (a lost event never fails the pass), each
//! Job's under the Job as its related object, and the condition changes a status patch
//! announces.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType};

use crate::conditions::Conditions;
use crate::decide;
use crate::reconcile::Context;
use crate::reconcile::pass::{Pass, Workload};

impl<K> Pass<'_, K>
where
    K: Workload + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// The events the conditions announce by changing from `before` to `after`
    /// ([`decide::transitions`]), just before the status that holds them is written.
    pub async fn announce_transitions(&self, before: &[captf_api::Condition], after: &Conditions) {
        let uid = self.object.meta().uid.as_deref().unwrap_or_default();
        let of = |c: Option<&captf_api::Condition>| {
            c.map_or(String::new(), |c| format!("{}/{}", c.status, c.reason))
        };
        for a in decide::transitions::transitions(before, after) {
            // A pass that starts from a cached object older than its own last status patch
            // sees the same change again: announced once.
            let was = of(before.iter().find(|c| c.type_ == a.condition));
            let change = format!("{} {was} -> {}", a.reason, of(after.get(a.condition)));
            if !self
                .ctx
                .metrics
                .counted
                .first(uid, a.condition, Some(&change))
            {
                continue;
            }
            let type_ = if a.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            self.publish(type_, a.reason, &a.note).await;
        }
    }

    /// An event about the object.
    pub async fn publish(&self, type_: EventType, reason: &str, note: &str) {
        publish(self.ctx, self.object, type_, reason, note, None).await;
    }

    /// An event about the object and its Job `job` (the related object): each Job's event is
    /// a series of its own, not folded into the first one of that reason.
    pub async fn publish_about(&self, type_: EventType, reason: &str, note: &str, job: &str) {
        let related = self.related("batch/v1", "Job", job);
        publish(self.ctx, self.object, type_, reason, note, Some(related)).await;
    }

    /// An object in the object's namespace, as an event's related object.
    pub fn related(&self, api_version: &str, kind: &str, name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some(api_version.to_owned()),
            kind: Some(kind.to_owned()),
            name: Some(name.to_owned()),
            namespace: Some(self.key.namespace().to_owned()),
            ..Default::default()
        }
    }

    /// An event about the object and `related`.
    pub async fn publish_related(
        &self,
        type_: EventType,
        reason: &str,
        note: &str,
        related: ObjectReference,
    ) {
        publish(self.ctx, self.object, type_, reason, note, Some(related)).await;
    }
}

/// An event about `object` (best effort: a lost event never fails the pass).
pub async fn publish<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    object: &K,
    type_: EventType,
    reason: &str,
    note: &str,
    related: Option<ObjectReference>,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1024).collect()),
        action: reason.into(),
        secondary: related,
    };
    if let Err(error) = ctx.recorder.publish(&event, &object.object_ref(&())).await {
        tracing::debug!(%error, "event not published");
    }
}
