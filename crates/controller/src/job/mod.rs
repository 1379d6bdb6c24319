//! The runner Job: merging the Job policy ([`policy`]), the pod's security contexts and
//! resources ([`security`]) and building the Job, its per-run Secret and the state backend's
//! labels ([`build`]). Pure functions, no I/O.
//!
//! The act step resolves an [`EffectivePolicy`] (and [validates](EffectivePolicy::validate) it
//! before apply, plan, refresh and drift), fills a [`JobSpec`], writes the [`per_run_secret`],
//! creates [`build_job`]'s Job, and hands the Secret to the Job ([`job_owner`]). See
//! `docs/reference/job.md`.

pub mod build;
pub mod policy;
pub mod security;

pub use build::{
    JobSpec, RestoreSource, backend_labels, build_job, hcl_map, job_labels, job_owner, main_env,
    owner_reference, per_run_secret, runner_args,
};
pub use policy::{
    EffectivePolicy, PolicyError, PolicyLayers, PolicySource, is_reserved_env, merge_job_policy,
};

#[cfg(test)]
mod tests;
