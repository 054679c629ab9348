//! Time: the core's [`Timestamp`] (re-exported), and the one place the edge reads the clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use vestibule_core::time::*;

/// The system clock, read once. Times before the epoch read as the epoch.
pub fn now() -> Timestamp {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    Timestamp::from_millis(since.as_millis() as u64)
}
