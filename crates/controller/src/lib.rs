//! The CAPTF manager. Each pass over a workload object observes a snapshot, asks the pure
//! [`decide`] function what to do, and acts on the answer.
#![forbid(unsafe_code)]

pub mod decide;
pub mod schedule;
