//! The kinds, each only what is its own: the three workload kinds as adapters of
//! [`super::flow`], and the two that run no Job with passes of their own.

pub mod cluster;
pub mod identity;
pub mod machine;
pub mod pool;
pub mod template;
