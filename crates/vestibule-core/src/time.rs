//! Wall-clock time as the decision core sees it.
//!
//! The core never reads a clock: every decision takes a [`Timestamp`] argument, so tests and the
//! simulator drive it with any clock they like. The edge reads the system clock
//! (`vestibule::time::now`) and hands the time in.

use std::time::{Duration, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    pub const fn from_secs(secs: u64) -> Self {
        Timestamp(secs.saturating_mul(1000))
    }

    pub const fn millis(self) -> u64 {
        self.0
    }

    /// Whole seconds since the epoch (rounded down).
    pub const fn secs(self) -> u64 {
        self.0 / 1000
    }

    /// Whole minutes since the epoch (rounded down): the arrival and activity bucket of capacity
    /// rooms.
    pub const fn minute(self) -> u64 {
        self.0 / 60_000
    }

    pub fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(d.as_millis() as u64))
    }

    /// Time from `earlier` to `self`, zero when `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// RFC 3339 form, second precision, for humans (`/status`, logs).
    pub fn rfc3339(self) -> String {
        humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(self.0)).to_string()
    }
}

/// Whole seconds in `d`, rounded up: what a `Retry-After` or `Refresh` header promises.
pub fn ceil_secs(d: Duration) -> u64 {
    let ms = d.as_millis() as u64;
    ms.div_ceil(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        let t = Timestamp::from_millis(125_999);
        assert_eq!(t.secs(), 125);
        assert_eq!(t.minute(), 2);
        assert_eq!(Timestamp::from_secs(3).millis(), 3000);
        assert_eq!(t.saturating_add(Duration::from_millis(1)).millis(), 126_000);
        assert_eq!(
            Timestamp::from_secs(1).since(Timestamp::from_secs(5)),
            Duration::ZERO
        );
        assert_eq!(Timestamp::from_secs(0).rfc3339(), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn ceil() {
        assert_eq!(ceil_secs(Duration::from_millis(0)), 0);
        assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1000)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
    }
}
