//! Disaster recovery as commands: `captf dr export` takes one namespace's copy (what the
//! disaster-recovery runbook says to back up), `captf dr import` restores it in the runbook's
//! order with everything paused, and `captf dr unpause` lets the objects reconcile again.
//!
//! The copy carries the Secrets without owner references, because a restored Secret that
//! names its owner's old UID is deleted by the garbage collector; the controller re-owns them
//! on each object's first unpaused reconcile.

pub mod document;
mod export;
mod import;
pub mod kinds;

pub use document::Export;
pub use export::{Notes, export};
pub use import::{import, unpause};

/// The time an export is taken, RFC 3339.
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}
