//! The engine's state lock (`lock-tfstate-default-<suffix>`), looked at while no Job of the
//! object runs: a lock left by a dead runner of this object is released by the next Job; anyone
//! else's lock is reported and never touched.

use captf_api::annotations;
use captf_api::names::ObjectKey;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

use crate::conditions::Conditions;
use crate::decide::status;
use crate::decide::{Counter, Effect, Note};
use crate::error::{KubeContext, Result};
use crate::reconcile::observe::state::StateRead;
use crate::reconcile::pass::{Pass, Workload};
use captf_api::conditions::{reasons, types};
use kube::Resource;

/// What holds the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lock {
    Free,
    /// Left by a runner pod of this object that is gone: the next Job force-unlocks `id`.
    Stale {
        id: String,
        pod: String,
    },
    /// A runner pod of this object that still runs (it will release it).
    Running {
        pod: String,
    },
    /// Someone else (a workstation, another tool): reported, never forced.
    Foreign(Holder),
}

/// The lock info the engine wrote, as far as it parses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holder {
    pub id: String,
    pub who: String,
    pub operation: String,
    pub created: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let or = |s: &str| {
            if s.is_empty() {
                "?".to_owned()
            } else {
                s.to_owned()
            }
        };
        write!(
            f,
            "held by {} for {} since {} (lock ID {})",
            or(&self.who),
            or(&self.operation),
            or(&self.created),
            or(&self.id)
        )
    }
}

/// The holder of a lock Lease, if it is held (pure): the lock info annotation, with the
/// Lease's `holderIdentity` as the ID when the info has none.
pub fn holder(lease: &Lease) -> Option<Holder> {
    let identity = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty());
    let info = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::LOCK_INFO))
        .and_then(|i| serde_json::from_str::<serde_json::Value>(i).ok());
    if identity.is_none() && info.is_none() {
        return None;
    }
    let field = |name: &str| {
        info.as_ref()
            .and_then(|i| i.get(name))
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let id = Some(field("ID"))
        .filter(|i| !i.is_empty())
        .or(identity)
        .unwrap_or_default();
    Some(Holder {
        id,
        who: field("Who"),
        operation: field("Operation"),
        created: field("Created"),
    })
}

/// Whose lock it is (pure): `alive` says whether a pod still runs (`None`: not asked).
pub fn classify(key: &ObjectKey, holder: Option<Holder>, alive: Option<bool>) -> Lock {
    let Some(holder) = holder else {
        return Lock::Free;
    };
    // `Who` is `<user>@<hostname>`; a runner's hostname is its pod name.
    let pod = holder.who.rsplit('@').next().unwrap_or_default().to_owned();
    if holder.id.is_empty() || !key.owns_pod_name(&pod) {
        return Lock::Foreign(holder);
    }
    match alive {
        Some(false) => Lock::Stale { id: holder.id, pod },
        _ => Lock::Running { pod },
    }
}

/// Reads the lock Lease and, for a lock of this object's runner, whether its pod still runs
/// (gone, or `Succeeded`/`Failed`, is dead; a terminating pod counts as alive).
pub async fn inspect(client: &kube::Client, key: &ObjectKey) -> Result<Lock> {
    let ns = key.namespace();
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let name = key.lock_lease();
    let lease = leases
        .get_opt(&name)
        .await
        .during(|| format!("reading Lease {ns}/{name}"))?;
    let holder = lease.as_ref().and_then(holder);
    let lock = classify(key, holder.clone(), None);
    let Lock::Running { pod } = &lock else {
        return Ok(lock);
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let alive = pods
        .get_opt(pod)
        .await
        .during(|| format!("reading Pod {ns}/{pod}"))?
        .is_some_and(|p| {
            let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
            phase != "Succeeded" && phase != "Failed"
        });
    Ok(classify(key, holder, Some(alive)))
}

impl<K> Pass<'_, K>
where
    K: Workload + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// The engine's lock, while no Job runs: a dead runner's is handed to the next Job to
    /// release (`(Some((lock id, pod)), None)`), anyone else's on a readable state is reported
    /// as StateLocked and never forced (`(None, Some(locked))`). `previous` are the
    /// conditions the pass started from: a lock new to them is counted, and its warning queued
    /// in `writes` (posted after the decision).
    pub fn inspect_lock(
        &self,
        state: &StateRead,
        lock: &crate::reconcile::observe::locks::Lock,
        previous: &Conditions,
        writes: &mut Vec<Effect>,
    ) -> (Option<(String, String)>, Option<status::Locked>) {
        use crate::reconcile::observe::locks::Lock;
        match lock {
            Lock::Stale { id, pod } => (Some((id.clone(), pod.clone())), None),
            Lock::Foreign(holder) if matches!(state, StateRead::Found(..)) => {
                let locked = status::Locked {
                    holder: holder.to_string(),
                    id: holder.id.clone(),
                };
                let was_locked = previous
                    .get(types::STATE_READABLE)
                    .is_some_and(|c| c.reason == reasons::STATE_LOCKED);
                if !was_locked {
                    let readable = status::Readable::Read;
                    let said = status::state_readable(&readable, Some(&locked), self.key);
                    writes.push(Effect::Count(Counter::StateReadError("locked")));
                    let reason = captf_api::events::STATE_LOCKED;
                    writes.push(Effect::Event(Note::warning(reason, said.message)));
                }
                (None, Some(locked))
            }
            _ => (None, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use captf_api::Operation;
    use captf_api::names::WorkloadKind;
    use std::collections::BTreeMap;

    fn lease(holder: Option<&str>, info: Option<&str>) -> Lease {
        let mut l = Lease::default();
        if let Some(info) = info {
            l.metadata.annotations = Some(BTreeMap::from([(
                annotations::LOCK_INFO.to_owned(),
                info.to_owned(),
            )]));
        }
        l.spec = Some(k8s_openapi::api::coordination::v1::LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            ..Default::default()
        });
        l
    }

    #[test]
    fn classify_table() {
        let key = ObjectKey::new("ns", WorkloadKind::Cluster, "demo").expect("key");
        let ours = format!("{}-6r66d", key.job_name(Operation::Apply, 2, "h2:x", ""));
        let info = |who: &str| {
            format!(
                r#"{{"ID":"lock-1","Operation":"OperationTypeApply","Who":"root@{who}","Created":"2026-11-29T08:38:12Z"}}"#
            )
        };
        let stale = Lock::Stale {
            id: "lock-1".into(),
            pod: ours.clone(),
        };
        let rows: Vec<(&str, Lease, Option<bool>, Lock)> = vec![
            ("no holder", lease(None, None), None, Lock::Free),
            ("empty holder", lease(Some(""), None), None, Lock::Free),
            (
                "our dead runner",
                lease(Some("lock-1"), Some(&info(&ours))),
                Some(false),
                stale,
            ),
            (
                "our live runner",
                lease(Some("lock-1"), Some(&info(&ours))),
                Some(true),
                Lock::Running { pod: ours.clone() },
            ),
            (
                "a workstation",
                lease(Some("lock-1"), Some(&info("laptop"))),
                Some(false),
                Lock::Foreign(Holder {
                    id: "lock-1".into(),
                    who: "root@laptop".into(),
                    operation: "OperationTypeApply".into(),
                    created: "2026-11-29T08:38:12Z".into(),
                }),
            ),
            (
                "holder without lock info is nobody we know",
                lease(Some("lock-2"), None),
                Some(false),
                Lock::Foreign(Holder {
                    id: "lock-2".into(),
                    ..Holder::default()
                }),
            ),
            (
                "unparsable info: the holder identity is the ID",
                lease(Some("lock-3"), Some("not json")),
                Some(false),
                Lock::Foreign(Holder {
                    id: "lock-3".into(),
                    ..Holder::default()
                }),
            ),
        ];
        for (name, l, alive, want) in rows {
            assert_eq!(classify(&key, holder(&l), alive), want, "{name}");
        }
    }

    #[test]
    fn a_foreign_holder_is_described_for_the_condition() {
        let h = Holder {
            id: "lock-1".into(),
            who: "alice@laptop".into(),
            operation: "OperationTypeApply".into(),
            created: "2026-11-29T08:38:12Z".into(),
        };
        assert_eq!(
            h.to_string(),
            "held by alice@laptop for OperationTypeApply since 2026-11-29T08:38:12Z (lock ID lock-1)"
        );
    }
}
