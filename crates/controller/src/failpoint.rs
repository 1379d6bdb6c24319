//! Crash points for the fault-injection tests. With `CAPTF_TEST_CRASH_AT=<point>` in its
//! environment, the manager aborts the moment a pass reaches `<point>`, as a killed process
//! would: no unwinding, no clean-up, nothing flushed but what was already written. Unset (always,
//! outside those tests), reaching a point does nothing. docs/development.md lists the points.

use std::sync::OnceLock;

/// The variable naming the point to crash at.
pub const VARIABLE: &str = "CAPTF_TEST_CRASH_AT";

/// Aborts the process when `point` is the one the environment names.
pub fn reached(point: &str) {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    let at = AT.get_or_init(|| std::env::var(VARIABLE).ok().filter(|p| !p.is_empty()));
    if at.as_deref() == Some(point) {
        tracing::error!(point, "{VARIABLE}: crash point reached, aborting");
        std::process::abort();
    }
}
