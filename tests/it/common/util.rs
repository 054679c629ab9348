//! Small helpers: polling until something holds, the time, and reporting a missing tool.

use std::time::{Duration, Instant};

/// Polls `f` until it returns true or `timeout` passes.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// Seconds since the epoch, with their fraction.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A tool a test needs is missing: under `CI=true` that fails the test (`.ci/run` installs every
/// tool), elsewhere the test says loudly what it skipped.
pub fn missing_tool(what: &str, why: impl std::fmt::Display) {
    let message = format!("{what} cannot run ({why})");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{message}: .ci/run installs it, and under CI=true a missing tool fails");
    }
    eprintln!("!! SKIPPED: {message}");
}
