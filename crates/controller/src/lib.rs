//! The CAPTF manager. Each pass over a workload object observes a snapshot, asks the pure
//! [`decide`] function what to do, and acts on the answer.
#![forbid(unsafe_code)]

pub mod backoff;
pub mod cache;
pub mod capacity;
pub mod capi;
pub mod conditions;
pub mod decide;
pub mod dr;
mod error;
pub mod failpoint;
pub mod http;
pub mod identity;
pub mod inputs;
pub mod job;
pub mod machine;
pub mod manager;
pub mod merge;
pub mod metrics;
pub mod reconcile;
pub mod registry;
pub mod schedule;
pub mod schemas;
pub mod settings;
pub mod slots;
pub mod sweep;
pub mod tls;
pub mod variables;
pub mod wake;
pub mod webhook;

pub use error::{Error, Result, Retry};

/// The commit this binary is built from, or `unknown` (see build.rs).
pub const COMMIT: &str = env!("CAPTF_COMMIT");
/// That commit's date (RFC 3339), or `unknown`.
pub const COMMIT_DATE: &str = env!("CAPTF_DATE");
