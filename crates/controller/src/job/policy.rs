//! The Job policy: merging `spec.jobs` over inherited defaults (api.md §1.2.2) and filling the
//! built-in defaults into an [`EffectivePolicy`].
//!
//! Precedence for a TerraformMachine or TerraformMachinePool: the object's own `spec.jobs`, then
//! its TerraformCluster's `spec.defaults.jobs`, then that cluster's own `spec.jobs`, then the
//! built-in default. A TerraformCluster uses only its own `spec.jobs` (its `spec.defaults.jobs`
//! is for its machines and pools). Scalars come from the first layer that sets them (an explicit
//! zero wins; `activeDeadlineSeconds: 0` and an empty ServiceAccount name count as unset),
//! `env` merges by name, `imagePullSecrets` is the de-duplicated union (nearer layer first), and
//! `resources`, `securityContext` and `podSecurityContext` are replaced as a whole. The result is
//! computed at reconcile and never written back.

use std::fmt;

use captf_api::{JobPolicy, TerraformCluster};
use k8s_openapi::api::core::v1::{
    EnvVar, LocalObjectReference, PodSecurityContext, ResourceRequirements, SecurityContext,
};

use super::security;

/// Default `successfulJobsHistoryLimit` and `failedJobsHistoryLimit`.
pub const DEFAULT_HISTORY_LIMIT: u32 = 3;
/// Default `activeDeadlineSeconds` (also used for 0).
pub const DEFAULT_ACTIVE_DEADLINE_SECONDS: i64 = 3600;
/// Default `lockTimeoutSeconds`.
pub const DEFAULT_LOCK_TIMEOUT_SECONDS: u32 = 300;
/// The ServiceAccount Jobs run as unless `serviceAccountName` names another.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "captf-runner";

/// Where a merged value came from; named in [`PolicyError`] so the user knows what to edit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicySource {
    /// The object's own `spec.jobs`.
    Own,
    /// The TerraformCluster's `spec.defaults.jobs` (machines and pools only).
    ClusterDefaults,
    /// The TerraformCluster's own `spec.jobs` (inherited by machines and pools).
    Cluster,
    /// CAPTF's built-in default.
    BuiltIn,
}

impl fmt::Display for PolicySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PolicySource::Own => "the object's spec.jobs",
            PolicySource::ClusterDefaults => "the TerraformCluster's spec.defaults.jobs",
            PolicySource::Cluster => "the TerraformCluster's spec.jobs",
            PolicySource::BuiltIn => "the built-in default",
        })
    }
}

/// The policy layers of one object, nearest first.
#[derive(Clone, Copy, Debug, Default)]
pub struct PolicyLayers<'a> {
    /// The object's own `spec.jobs`.
    pub own: Option<&'a JobPolicy>,
    /// The cluster's `spec.defaults.jobs` (always `None` for a TerraformCluster).
    pub cluster_defaults: Option<&'a JobPolicy>,
    /// The cluster's own `spec.jobs` (always `None` for a TerraformCluster: it is `own`).
    pub cluster: Option<&'a JobPolicy>,
}

impl<'a> PolicyLayers<'a> {
    /// The layers of a TerraformCluster: its own `spec.jobs` only.
    pub fn for_cluster(cluster: &'a TerraformCluster) -> Self {
        PolicyLayers {
            own: cluster.spec.workspace.jobs.as_deref(),
            cluster_defaults: None,
            cluster: None,
        }
    }

    /// The layers of a TerraformMachine or TerraformMachinePool whose own policy is `own`,
    /// belonging to `cluster` (`None` while the cluster is unknown).
    pub fn for_member(own: Option<&'a JobPolicy>, cluster: Option<&'a TerraformCluster>) -> Self {
        PolicyLayers {
            own,
            cluster_defaults: cluster
                .and_then(|c| c.spec.defaults.as_ref())
                .and_then(|d| d.jobs.as_deref()),
            cluster: cluster.and_then(|c| c.spec.workspace.jobs.as_deref()),
        }
    }

    /// The names of the merged `imagePullSecrets`: what the Jobs pull the module image with.
    pub fn pull_secret_names(&self) -> Vec<String> {
        self.merged()
            .image_pull_secrets
            .into_iter()
            .flatten()
            .map(|r| r.name)
            .collect()
    }

    /// Where the merged `imagePullSecrets` come from, for a message about one of them.
    pub fn pull_secrets_field(&self) -> &'static str {
        if self.cluster_defaults.is_none() && self.cluster.is_none() {
            "spec.jobs.imagePullSecrets"
        } else {
            "spec.jobs.imagePullSecrets, or the TerraformCluster's spec.defaults.jobs or spec.jobs"
        }
    }

    fn iter(&self) -> impl Iterator<Item = (PolicySource, &'a JobPolicy)> {
        [
            (PolicySource::Own, self.own),
            (PolicySource::ClusterDefaults, self.cluster_defaults),
            (PolicySource::Cluster, self.cluster),
        ]
        .into_iter()
        .filter_map(|(source, p)| p.map(|p| (source, p)))
    }

    /// The merged policy (no built-in defaults filled in).
    pub fn merged(&self) -> JobPolicy {
        let merged = merge_job_policy(self.cluster_defaults, self.cluster);
        merge_job_policy(self.own, Some(&merged))
    }
}

/// Merges `own` over `defaults` field by field: a field `own` sets wins (even an explicit zero),
/// else the defaults' value. `activeDeadlineSeconds: 0` and an empty `serviceAccountName` count
/// as unset. `env` merges by name (own's entries first, own's value winning on a shared name,
/// then the defaults' remaining entries); `imagePullSecrets` is the union without duplicates or
/// empty names (own's first); `resources`, `securityContext` and `podSecurityContext` are
/// replaced as a whole.
pub fn merge_job_policy(own: Option<&JobPolicy>, defaults: Option<&JobPolicy>) -> JobPolicy {
    let empty = JobPolicy::default();
    let o = own.unwrap_or(&empty);
    let d = defaults.unwrap_or(&empty);
    JobPolicy {
        successful_jobs_history_limit: o
            .successful_jobs_history_limit
            .or(d.successful_jobs_history_limit),
        failed_jobs_history_limit: o.failed_jobs_history_limit.or(d.failed_jobs_history_limit),
        active_deadline_seconds: set_deadline(o.active_deadline_seconds)
            .or(set_deadline(d.active_deadline_seconds)),
        service_account_name: set_name(o.service_account_name.as_ref())
            .or(set_name(d.service_account_name.as_ref()))
            .cloned(),
        lock_timeout_seconds: o.lock_timeout_seconds.or(d.lock_timeout_seconds),
        image_pull_secrets: non_empty(union_pull_secrets(
            o.image_pull_secrets.iter().flatten(),
            d.image_pull_secrets.iter().flatten(),
        )),
        resources: o.resources.clone().or_else(|| d.resources.clone()),
        env: non_empty(merge_env(o.env.iter().flatten(), d.env.iter().flatten())),
        security_context: o
            .security_context
            .clone()
            .or_else(|| d.security_context.clone()),
        pod_security_context: o
            .pod_security_context
            .clone()
            .or_else(|| d.pod_security_context.clone()),
    }
}

fn set_deadline(v: Option<i64>) -> Option<i64> {
    v.filter(|s| *s > 0)
}

fn set_name(v: Option<&String>) -> Option<&String> {
    v.filter(|s| !s.is_empty())
}

fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    if v.is_empty() { None } else { Some(v) }
}

/// `first` then `second`, in order, without empty names or duplicates.
pub(crate) fn union_pull_secrets<'a>(
    first: impl Iterator<Item = &'a LocalObjectReference>,
    second: impl Iterator<Item = &'a LocalObjectReference>,
) -> Vec<LocalObjectReference> {
    let mut out: Vec<LocalObjectReference> = Vec::new();
    for r in first.chain(second) {
        if !r.name.is_empty() && !out.iter().any(|o| o.name == r.name) {
            out.push(r.clone());
        }
    }
    out
}

/// `first`'s entries then `second`'s whose name `first` does not use; the first entry of a name
/// wins.
fn merge_env<'a>(
    first: impl Iterator<Item = &'a EnvVar>,
    second: impl Iterator<Item = &'a EnvVar>,
) -> Vec<EnvVar> {
    let mut out: Vec<EnvVar> = Vec::new();
    for e in first.chain(second) {
        if !out.iter().any(|o| o.name == e.name) {
            out.push(e.clone());
        }
    }
    out
}

/// The Job policy of one object with every built-in default filled in: what the Job builder
/// uses. Build it with [`EffectivePolicy::resolve`]; [`EffectivePolicy::default`] is the
/// built-in policy.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectivePolicy {
    /// Succeeded Jobs kept per object and operation.
    pub successful_jobs_history_limit: u32,
    /// Failed Jobs kept per object and operation.
    pub failed_jobs_history_limit: u32,
    /// The Job's `activeDeadlineSeconds`.
    pub active_deadline_seconds: i64,
    /// Where [`Self::active_deadline_seconds`] came from.
    pub active_deadline_from: PolicySource,
    /// The runner's `--lock-timeout`, in seconds.
    pub lock_timeout_seconds: u32,
    /// Where [`Self::lock_timeout_seconds`] came from.
    pub lock_timeout_from: PolicySource,
    /// The pod's ServiceAccount.
    pub service_account_name: String,
    /// The pod's pull secrets (module image and runner init image).
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// The main container's resources (the default unless a layer set them).
    pub resources: ResourceRequirements,
    /// Extra main-container environment, merged by name, reserved names already dropped.
    pub env: Vec<EnvVar>,
    /// Names of `env` entries dropped because the runner owns them (see [`is_reserved_env`]).
    pub dropped_env: Vec<String>,
    /// The main container's security context: defaults overlaid with the user's, hardened.
    pub security_context: SecurityContext,
    /// The pod's security context: defaults overlaid with the user's, hardened.
    pub pod_security_context: PodSecurityContext,
}

impl Default for EffectivePolicy {
    fn default() -> Self {
        EffectivePolicy::resolve(&PolicyLayers::default())
    }
}

impl EffectivePolicy {
    /// Merges `layers` and fills the built-in defaults.
    pub fn resolve(layers: &PolicyLayers<'_>) -> Self {
        let merged = layers.merged();
        let first_set = |pick: &dyn Fn(&JobPolicy) -> bool| {
            layers
                .iter()
                .find(|(_, p)| pick(p))
                .map_or(PolicySource::BuiltIn, |(s, _)| s)
        };
        let (active_deadline_seconds, active_deadline_from) =
            match set_deadline(merged.active_deadline_seconds) {
                Some(d) => (
                    d,
                    first_set(&|p| set_deadline(p.active_deadline_seconds).is_some()),
                ),
                None => (DEFAULT_ACTIVE_DEADLINE_SECONDS, PolicySource::BuiltIn),
            };
        let (lock_timeout_seconds, lock_timeout_from) = match merged.lock_timeout_seconds {
            Some(l) => (
                u32::try_from(l).unwrap_or(0),
                first_set(&|p| p.lock_timeout_seconds.is_some()),
            ),
            None => (DEFAULT_LOCK_TIMEOUT_SECONDS, PolicySource::BuiltIn),
        };
        let limit =
            |v: Option<i32>| v.map_or(DEFAULT_HISTORY_LIMIT, |v| u32::try_from(v).unwrap_or(0));
        let (env, dropped_env): (Vec<EnvVar>, Vec<EnvVar>) = merged
            .env
            .unwrap_or_default()
            .into_iter()
            .partition(|e| !is_reserved_env(&e.name));
        EffectivePolicy {
            successful_jobs_history_limit: limit(merged.successful_jobs_history_limit),
            failed_jobs_history_limit: limit(merged.failed_jobs_history_limit),
            active_deadline_seconds,
            active_deadline_from,
            lock_timeout_seconds,
            lock_timeout_from,
            service_account_name: merged
                .service_account_name
                .unwrap_or_else(|| DEFAULT_SERVICE_ACCOUNT.to_owned()),
            image_pull_secrets: merged.image_pull_secrets.unwrap_or_default(),
            resources: merged.resources.unwrap_or_else(security::default_resources),
            env,
            dropped_env: dropped_env.into_iter().map(|e| e.name).collect(),
            security_context: security::main_security_context(merged.security_context.as_ref()),
            pod_security_context: security::pod_security_context(
                merged.pod_security_context.as_ref(),
            ),
        }
    }

    /// Whether the Jobs run as the manager's own `captf-runner` ServiceAccount (otherwise the
    /// named one must exist and carry `captf.io/runner=true`).
    pub fn uses_default_service_account(&self) -> bool {
        self.service_account_name == DEFAULT_SERVICE_ACCOUNT
    }

    /// The merged-policy check made at reconcile before an apply, plan, refresh or drift Job
    /// (destroy and restore skip it): the lock timeout must be below the deadline, or a held lock
    /// would use up the whole run. An error is `ApplyJobSucceeded=False/JobPolicyInvalid`.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if i64::from(self.lock_timeout_seconds) >= self.active_deadline_seconds {
            return Err(PolicyError::LockTimeoutNotBelowDeadline {
                lock_timeout_seconds: self.lock_timeout_seconds,
                lock_timeout_from: self.lock_timeout_from,
                active_deadline_seconds: self.active_deadline_seconds,
                active_deadline_from: self.active_deadline_from,
            });
        }
        Ok(())
    }
}

/// A merged Job policy CAPTF cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// `lockTimeoutSeconds` is not below `activeDeadlineSeconds` after merging.
    #[error(
        "the merged Job policy is invalid: lockTimeoutSeconds {lock_timeout_seconds} (from {lock_timeout_from}) must be below activeDeadlineSeconds {active_deadline_seconds} (from {active_deadline_from}); raise activeDeadlineSeconds above {lock_timeout_seconds} or lower lockTimeoutSeconds below {active_deadline_seconds}"
    )]
    LockTimeoutNotBelowDeadline {
        lock_timeout_seconds: u32,
        lock_timeout_from: PolicySource,
        active_deadline_seconds: i64,
        active_deadline_from: PolicySource,
    },
}

impl PolicyError {
    /// The condition reason (`ApplyJobSucceeded=False/JobPolicyInvalid`).
    pub fn reason(&self) -> &'static str {
        captf_api::conditions::reasons::JOB_POLICY_INVALID
    }
}

/// Whether an environment variable name belongs to the runner (spec README rule 7): `TF_*`,
/// `KUBE_*` and `KUBERNETES_*` (the in-cluster client's `KUBERNETES_SERVICE_HOST`/`_PORT`), and
/// `HOME`, `TMPDIR` and `CHECKPOINT_DISABLE`, which the Job sets itself. Such `spec.jobs.env`
/// entries are rejected at admission and dropped by the Job builder.
pub fn is_reserved_env(name: &str) -> bool {
    matches!(name, "HOME" | "TMPDIR" | "CHECKPOINT_DISABLE")
        || name.starts_with("TF_")
        || name.starts_with("KUBE_")
        || name.starts_with("KUBERNETES_")
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
