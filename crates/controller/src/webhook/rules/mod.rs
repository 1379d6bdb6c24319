//! The admission rules as pure functions over one request: the object, the stored object on an
//! update, who asks, and whether it is a dry run. Each returns every violation at once.

mod identity;
mod jobs;
mod meta;
mod templates;
pub mod variables_schema;
mod workloads;
mod workspace;

#[cfg(test)]
mod tests;

pub use identity::{IdentityVerdict, identity};
pub use meta::is_qualified_name;
pub use templates::{TOPOLOGY_DRY_RUN, cluster_template, machine_pool_template, machine_template};
pub use workloads::{cluster, machine, machine_pool};

/// A create (`old` unset) or an update.
#[derive(Clone, Copy, Debug)]
pub struct Change<'a, K> {
    pub new: &'a K,
    pub old: Option<&'a K>,
    /// The requesting user's name.
    pub user: &'a str,
    pub dry_run: bool,
}

impl<K: kube::Resource> Change<'_, K> {
    /// The object is being deleted (an update that removes a finalizer, say).
    pub fn deleting(&self) -> bool {
        self.new.meta().deletion_timestamp.is_some()
    }
}

/// The manager's own user, `system:serviceaccount:<POD_NAMESPACE>:<SERVICE_ACCOUNT_NAME>`: the
/// only user that may set a machine's providerID. Unknown when either variable is unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManagerUser(Option<String>);

impl ManagerUser {
    pub fn new(pod_namespace: Option<&str>, service_account: Option<&str>) -> Self {
        match (pod_namespace, service_account) {
            (Some(ns), Some(sa)) if !ns.is_empty() && !sa.is_empty() => {
                ManagerUser(Some(format!("system:serviceaccount:{ns}:{sa}")))
            }
            _ => ManagerUser(None),
        }
    }

    pub fn name(&self) -> Option<&str> {
        self.0.as_deref()
    }
}
