//! A Job after it finished: its result read exactly once ([`bookkeeping`]) and recorded in
//! the object's status ([`status`]).

pub mod bookkeeping;
pub mod status;
