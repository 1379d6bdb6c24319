//! What a pass reads before it decides: the owner and what the object belongs to, its
//! variables and credentials, its Jobs, its state and whose it is, the engine's lock, its
//! outputs, and the snapshot [`crate::decide`] reads.

pub mod image_pull;
pub mod jobs;
pub mod lineage;
pub mod locks;
pub mod member;
pub mod outputs;
pub mod owner;
pub mod preamble;
pub mod snapshot;
pub mod state;
pub mod unstarted;
pub mod variables;
