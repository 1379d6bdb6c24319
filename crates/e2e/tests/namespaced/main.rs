//! The suites whose tests each run in a namespace of their own, with a manager scoped to it
//! (`captf_e2e::fixture::scene`): one test binary, so they share one control plane and node,
//! started once, and run two at a time whatever their file. Suites that change something
//! cluster-wide (webhook configurations, the CAPI controllers, leader election, the orphan
//! sweep, a second control plane) keep a binary, and so an environment, of their own.

mod approvals;
mod backstop;
mod bounds;
mod cluster_changes;
mod cluster_deletion;
mod cluster_lifecycle;
mod crash_points;
mod digest_pinning;
mod drift;
mod earlier_apply;
mod events;
mod hostile_state;
mod job_not_started;
mod locks;
mod look_alikes;
mod lost_identity;
mod lost_plan_key;
mod machines;
mod metrics_auth;
mod module_kit;
mod owner_mismatch;
mod owners;
mod plugin;
mod pod_security;
mod pools;
mod repair_waits;
mod restore;
mod runner_accounts;
mod runner_faults;
mod sensitive_exports;
mod state_identity;
mod state_protection;
mod stopping_pods;
mod templates;
mod variables;
