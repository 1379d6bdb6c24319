//! The manager's Prometheus metrics (spec/operations.md §11). Label values are bounded enums;
//! only the per-object gauges carry namespace and name, and those series are removed with the
//! object.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The kinds that run Jobs: every per-kind series exists for each.
const WORKLOAD_KINDS: [&str; 3] = [
    "TerraformCluster",
    "TerraformMachine",
    "TerraformMachinePool",
];
/// The `reason` values of `captf_state_read_errors_total` (operations.md §11.4).
const STATE_READ_ERROR_REASONS: [&str; 6] = [
    "inconsistent",
    "encrypted",
    "corrupt",
    "lost",
    "locked",
    "lineage_mismatch",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindOpResult {
    pub kind: &'static str,
    pub op: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindOp {
    pub kind: &'static str,
    pub op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobError {
    pub kind: &'static str,
    pub op: &'static str,
    pub error_kind: &'static str,
    /// A runner step name (unknown names read `other`), or `none`.
    pub step: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindOpStep {
    pub kind: &'static str,
    pub op: &'static str,
    pub step: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindOpAction {
    pub kind: &'static str,
    pub op: &'static str,
    pub action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindAction {
    pub kind: &'static str,
    pub action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Action {
    pub action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Decision {
    pub kind: &'static str,
    pub op: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Kind {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindResult {
    pub kind: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindReason {
    pub kind: &'static str,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Object {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectOp {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Controller {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildInfo {
    pub version: &'static str,
    pub commit: &'static str,
    pub contract: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every metric, registered once.
pub struct Metrics {
    pub registry: Registry,
    pub jobs_total: Family<KindOpResult, Counter>,
    pub job_duration_seconds: Histograms<KindOpResult>,
    pub job_queue_seconds: Histograms<KindOp>,
    /// Seconds an active Job of the object has waited with no ready pod, past the 20 s grace;
    /// no series once it runs or ends.
    pub job_unstarted_seconds: Family<ObjectOp, Gauge>,
    /// Jobs whose runner could not start, by kind and `reason` (the cause: quota, refused,
    /// unschedulable, container), counted once per Job and cause.
    pub jobs_not_started_total: Family<KindReason, Counter>,
    pub job_errors_total: Family<JobError, Counter>,
    pub job_step_duration_seconds: Histograms<KindOpStep>,
    pub resources_changed_total: Family<KindOpAction, Counter>,
    pub drift_resources_total: Family<KindAction, Counter>,
    pub inputs_hash_changes_total: Family<Kind, Counter>,
    pub outputs_invalid_total: Family<KindReason, Counter>,
    pub remediation_requests_total: Family<Action, Counter>,
    pub jobs_active: Family<KindOp, Gauge>,
    pub decisions_total: Family<Decision, Counter>,
    pub state_read_errors_total: Family<KindReason, Counter>,
    pub state_resources: Family<Object, Gauge>,
    pub state_bytes: Family<Object, Gauge>,
    pub inputs_bytes: Family<Object, Gauge>,
    pub state_backups_total: Family<KindResult, Counter>,
    pub state_restores_total: Family<KindResult, Counter>,
    pub lock_force_unlocks_total: Family<Kind, Counter>,
    pub plan_approvals_total: Family<KindResult, Counter>,
    pub lease_waits_total: Family<KindReason, Counter>,
    /// Identity use refused: `notfound` (no such identity, or none named) or `namespace` (the
    /// identity does not allow the object's namespace).
    pub identity_denied_total: Family<Reason, Counter>,
    pub ready: Family<Object, Gauge>,
    pub drift_detected: Family<Object, Gauge>,
    pub last_success_timestamp_seconds: Family<ObjectOp, Gauge>,
    pub reconcile_errors_total: Family<Controller, Counter>,
    pub image_inspect_errors_total: Family<KindReason, Counter>,
    /// What each object's transition counters last counted, so a pass that starts from a
    /// cached object older than its own last status patch does not count the same thing again.
    pub counted: Counted,
}

/// The last value a transition counter counted, per object and counter.
#[derive(Default)]
pub struct Counted(std::sync::Mutex<std::collections::HashMap<(String, &'static str), String>>);

impl Counted {
    /// Records that `object`'s `counter` now says `value` (`None`: nothing to count any more);
    /// `true` when that is new, so the caller counts it.
    pub fn first(&self, object: &str, counter: &'static str, value: Option<&str>) -> bool {
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (object.to_owned(), counter);
        match value {
            None => {
                seen.remove(&key);
                false
            }
            Some(v) if seen.get(&key).is_some_and(|old| old == v) => false,
            Some(v) => {
                seen.insert(key, v.to_owned());
                true
            }
        }
    }

    /// Drops what was recorded for `object`: it is gone.
    pub fn forget(&self, object: &str) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|(o, _), _| o != object);
    }
}

fn job_duration() -> Histogram {
    Histogram::new([
        15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0,
    ])
}

fn step_duration() -> Histogram {
    Histogram::new([
        1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0,
    ])
}

fn queue() -> Histogram {
    Histogram::new([5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0])
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let build_info = Family::<BuildInfo, Gauge>::default();
        build_info
            .get_or_create(&BuildInfo {
                version: env!("CARGO_PKG_VERSION"),
                commit: crate::COMMIT,
                contract: captf_contract::VERSION,
            })
            .set(1);
        registry.register(
            "captf_build_info",
            "[ALPHA] Build information, constant 1",
            build_info,
        );
        let m = Metrics {
            jobs_total: Family::default(),
            job_duration_seconds: Family::new_with_constructor(job_duration as fn() -> Histogram),
            job_queue_seconds: Family::new_with_constructor(queue as fn() -> Histogram),
            job_unstarted_seconds: Family::default(),
            jobs_not_started_total: Family::default(),
            job_errors_total: Family::default(),
            job_step_duration_seconds: Family::new_with_constructor(
                step_duration as fn() -> Histogram,
            ),
            resources_changed_total: Family::default(),
            drift_resources_total: Family::default(),
            inputs_hash_changes_total: Family::default(),
            outputs_invalid_total: Family::default(),
            remediation_requests_total: Family::default(),
            jobs_active: Family::default(),
            decisions_total: Family::default(),
            state_read_errors_total: Family::default(),
            state_resources: Family::default(),
            state_bytes: Family::default(),
            inputs_bytes: Family::default(),
            state_backups_total: Family::default(),
            state_restores_total: Family::default(),
            lock_force_unlocks_total: Family::default(),
            plan_approvals_total: Family::default(),
            lease_waits_total: Family::default(),
            identity_denied_total: Family::default(),
            ready: Family::default(),
            drift_detected: Family::default(),
            last_success_timestamp_seconds: Family::default(),
            reconcile_errors_total: Family::default(),
            image_inspect_errors_total: Family::default(),
            counted: Counted::default(),
            registry,
        };
        let mut m = m;
        let mut registry = std::mem::take(&mut m.registry);
        register_jobs(&mut registry, &m);
        register_objects(&mut registry, &m);
        m.registry = registry;
        start_alerted_series(&m);
        m
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Sets `captf_jobs_active` from the Job cache (called at scrape): unfinished Jobs by kind
    /// and operation.
    pub fn set_jobs_active(&self, jobs: &[std::sync::Arc<crate::cache::JobMeta>]) {
        self.jobs_active.clear();
        // Every series exists, at 0 when nothing runs, so dashboards and alerts see a value.
        for kind in WORKLOAD_KINDS {
            for op in captf_api::Operation::ALL {
                self.jobs_active
                    .get_or_create(&KindOp {
                        kind,
                        op: op.as_str(),
                    })
                    .set(0);
            }
        }
        // The Job cache holds only Jobs whose result is not recorded yet.
        for job in jobs {
            let labels = job.metadata.labels.clone().unwrap_or_default();
            let kind = match labels
                .get(captf_api::labels::OWNER_KIND)
                .map(String::as_str)
            {
                Some("TerraformCluster") => "TerraformCluster",
                Some("TerraformMachine") => "TerraformMachine",
                Some("TerraformMachinePool") => "TerraformMachinePool",
                _ => continue,
            };
            let Some(op) = labels
                .get(captf_api::labels::OP)
                .and_then(|o| o.parse::<captf_api::Operation>().ok())
            else {
                continue;
            };
            self.jobs_active
                .get_or_create(&KindOp {
                    kind,
                    op: op.as_str(),
                })
                .inc();
        }
    }

    /// Removes the per-object series of a deleted object.
    pub fn forget(&self, kind: &'static str, namespace: &str, name: &str) {
        let object = Object {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        for family in [
            &self.state_resources,
            &self.state_bytes,
            &self.inputs_bytes,
            &self.ready,
            &self.drift_detected,
        ] {
            family.remove(&object);
        }
        for op in captf_api::Operation::ALL {
            let series = ObjectOp {
                kind,
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                op: op.as_str(),
            };
            self.last_success_timestamp_seconds.remove(&series);
            self.job_unstarted_seconds.remove(&series);
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The Job families: counts, durations, errors and what the Jobs changed.
fn register_jobs(r: &mut Registry, m: &Metrics) {
    r.register(
        "captf_jobs",
        "[ALPHA] Jobs completed, by result",
        m.jobs_total.clone(),
    );
    r.register(
        "captf_job_duration_seconds",
        "[ALPHA] Job start to finish",
        m.job_duration_seconds.clone(),
    );
    r.register(
        "captf_job_queue_seconds",
        "[ALPHA] Job creation to container start",
        m.job_queue_seconds.clone(),
    );
    r.register(
        "captf_job_unstarted_seconds",
        "[ALPHA] How long an active Job has waited for its runner to start",
        m.job_unstarted_seconds.clone(),
    );
    r.register(
        "captf_jobs_not_started",
        "[ALPHA] Jobs whose runner could not start, by cause",
        m.jobs_not_started_total.clone(),
    );
    r.register(
        "captf_job_errors",
        "[ALPHA] Jobs that did not succeed",
        m.job_errors_total.clone(),
    );
    r.register(
        "captf_job_step_duration_seconds",
        "[ALPHA] Wall time of each runner step",
        m.job_step_duration_seconds.clone(),
    );
    r.register(
        "captf_resources_changed",
        "[ALPHA] Resources an apply or destroy changed, from the engine's summary line",
        m.resources_changed_total.clone(),
    );
    r.register(
        "captf_drift_resources",
        "[ALPHA] Resources drift checks found to create, update, replace or delete",
        m.drift_resources_total.clone(),
    );
    r.register(
        "captf_inputs_hash_changes",
        "[ALPHA] Applies started because the inputs changed",
        m.inputs_hash_changes_total.clone(),
    );
    r.register(
        "captf_outputs_invalid",
        "[ALPHA] Outputs that turned invalid, by condition reason",
        m.outputs_invalid_total.clone(),
    );
    r.register(
        "captf_remediation_requests",
        "[ALPHA] Machine remediation requests made and withdrawn",
        m.remediation_requests_total.clone(),
    );
    r.register(
        "captf_jobs_active",
        "[ALPHA] Unfinished Jobs",
        m.jobs_active.clone(),
    );
    r.register(
        "captf_reconcile_op_decisions",
        "[ALPHA] Decisions of the reconcile loop",
        m.decisions_total.clone(),
    );
}

/// The per-object and per-kind families: state, inputs, backups, approvals, waits, readiness.
fn register_objects(r: &mut Registry, m: &Metrics) {
    r.register(
        "captf_state_read_errors",
        "[ALPHA] State reads that turned unreadable",
        m.state_read_errors_total.clone(),
    );
    r.register(
        "captf_state_resources",
        "[ALPHA] Managed resources in the state",
        m.state_resources.clone(),
    );
    r.register(
        "captf_state_bytes",
        "[ALPHA] Compressed state size",
        m.state_bytes.clone(),
    );
    r.register(
        "captf_inputs_bytes",
        "[ALPHA] Size of the rendered root module and tfvars",
        m.inputs_bytes.clone(),
    );
    r.register(
        "captf_state_backups",
        "[ALPHA] State backups taken, pruned or skipped",
        m.state_backups_total.clone(),
    );
    r.register(
        "captf_state_restores",
        "[ALPHA] Restores, by result (succeeded, failed, not_found)",
        m.state_restores_total.clone(),
    );
    r.register(
        "captf_lock_force_unlocks",
        "[ALPHA] Stale state locks force-unlocked",
        m.lock_force_unlocks_total.clone(),
    );
    r.register(
        "captf_plan_approvals",
        "[ALPHA] Manual plans by result (created, approved, applied, superseded, failed)",
        m.plan_approvals_total.clone(),
    );
    r.register(
        "captf_lease_waits",
        "[ALPHA] Operations that waited for a lease or a Job slot",
        m.lease_waits_total.clone(),
    );
    r.register(
        "captf_identity_denied",
        "[ALPHA] Identity use refused, by reason (notfound, namespace)",
        m.identity_denied_total.clone(),
    );
    r.register(
        "captf_ready",
        "[ALPHA] Ready: 1 True, 0 False, -1 Unknown",
        m.ready.clone(),
    );
    r.register(
        "captf_drift_detected",
        "[ALPHA] 1 while DriftDetected is True, else 0",
        m.drift_detected.clone(),
    );
    r.register(
        "captf_last_success_timestamp_seconds",
        "[ALPHA] Finish time of the newest successful Job of an operation",
        m.last_success_timestamp_seconds.clone(),
    );
    r.register(
        "controller_runtime_reconcile_errors",
        "Reconcile passes that returned an error",
        m.reconcile_errors_total.clone(),
    );
    r.register(
        "captf_image_inspect_errors",
        "[ALPHA] Machine template image reads that failed, by condition reason",
        m.image_inspect_errors_total.clone(),
    );
}

/// The alerted counters start at 0: `increase()` sees nothing in a series' first sample, so a
/// series born at 1 would hide the first unreadable state, force-unlock, failed Job or failed
/// destroy after a restart (the alert tests start their series the same way).
fn start_alerted_series(m: &Metrics) {
    for kind in WORKLOAD_KINDS {
        for reason in STATE_READ_ERROR_REASONS {
            m.state_read_errors_total
                .get_or_create(&KindReason { kind, reason })
                .inc_by(0);
        }
        m.lock_force_unlocks_total
            .get_or_create(&Kind { kind })
            .inc_by(0);
        for op in captf_api::Operation::ALL.map(captf_api::Operation::as_str) {
            for result in ["failed", "deadline"] {
                m.jobs_total
                    .get_or_create(&KindOpResult { kind, op, result })
                    .inc_by(0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transition_counts_once_until_it_ends() {
        let c = Counted::default();
        let rows = [
            ("uid-a", Some("namespace"), true),
            ("uid-a", Some("namespace"), false),
            ("uid-b", Some("namespace"), true),
            ("uid-a", Some("notfound"), true),
            ("uid-a", None, false),
            ("uid-a", Some("notfound"), true),
        ];
        for (object, value, want) in rows {
            assert_eq!(
                c.first(object, "identity_denied", value),
                want,
                "{object} {value:?}"
            );
        }
        assert!(c.first("uid-a", "jobs_not_started", Some("notfound")));
    }

    #[test]
    fn a_forgotten_object_counts_afresh() {
        let c = Counted::default();
        assert!(c.first("uid-a", "Ready", Some("x")));
        assert!(c.first("uid-b", "Ready", Some("x")));
        c.forget("uid-a");
        assert!(c.first("uid-a", "Ready", Some("x")), "forgotten");
        assert!(
            !c.first("uid-b", "Ready", Some("x")),
            "another object's kept"
        );
    }

    #[test]
    fn every_family_is_exported_under_its_spec_name() {
        let m = Metrics::new();
        m.jobs_total
            .get_or_create(&KindOpResult {
                kind: "TerraformCluster",
                op: "apply",
                result: "succeeded",
            })
            .inc();
        m.ready
            .get_or_create(&Object {
                kind: "TerraformCluster",
                namespace: "n".into(),
                name: "c".into(),
            })
            .set(1);
        let text = m.encode();
        let build = format!(
            "captf_build_info{{version=\"{}\",commit=\"{}\",contract=\"v1alpha1\"}} 1",
            env!("CARGO_PKG_VERSION"),
            crate::COMMIT
        );
        for name in [
            build.as_str(),
            "captf_jobs_total{kind=\"TerraformCluster\",op=\"apply\",result=\"succeeded\"} 1",
            "captf_ready{kind=\"TerraformCluster\",namespace=\"n\",name=\"c\"} 1",
            "captf_state_read_errors_total{kind=\"TerraformMachine\",reason=\"corrupt\"} 0",
            "captf_state_read_errors_total{kind=\"TerraformCluster\",reason=\"lost\"} 0",
            "captf_state_read_errors_total{kind=\"TerraformMachinePool\",reason=\"lineage_mismatch\"} 0",
            "captf_lock_force_unlocks_total{kind=\"TerraformMachinePool\"} 0",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
        m.forget("TerraformCluster", "n", "c");
        assert!(
            !m.encode().contains("captf_ready{"),
            "series of a deleted object remain"
        );
    }
}
