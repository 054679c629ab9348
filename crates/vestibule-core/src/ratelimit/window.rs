//! The arithmetic of a sliding window: the rate estimate, and how long until a key over the
//! limit would fall back under it.

use std::time::Duration;

use crate::store::WindowSample;

/// Estimated requests per second over the window: `(prev·(1−f) + curr) / window`.
pub fn rate(sample: &WindowSample, window: Duration) -> f64 {
    sample.weighted() / window.as_secs_f64()
}

/// With no further requests, how long until the estimate is back at or under `quota` (requests
/// per window).
///
/// Within the current interval only `prev`'s weight decays; if `curr` alone is over the quota,
/// the wait runs into the next interval, where `curr` becomes the decaying `prev`.
pub(crate) fn time_to_recover(sample: &WindowSample, window: Duration, quota: u64) -> Duration {
    let w = window.as_secs_f64();
    let quota = quota as f64;
    let (prev, curr, f) = (sample.prev as f64, sample.curr as f64, sample.fraction);
    if sample.weighted() <= quota {
        return Duration::ZERO;
    }
    let secs = if curr <= quota {
        // prev·(1 − f − Δ/w) + curr ≤ quota
        w * (1.0 - f - (quota - curr) / prev)
    } else {
        // Into the next interval: curr·(1 − g) ≤ quota.
        let g = 1.0 - quota / curr;
        (1.0 - f) * w + g * w
    };
    Duration::from_secs_f64(secs.max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(prev: u64, curr: u64, fraction: f64) -> WindowSample {
        WindowSample {
            prev,
            curr,
            fraction,
        }
    }

    #[test]
    fn estimate_counts_the_current_interval() {
        let w = Duration::from_secs(10);
        // A burst inside the first interval is caught at once.
        assert_eq!(rate(&s(0, 1001, 0.1), w), 100.1);
        // Half-way through, half of prev still counts.
        assert_eq!(rate(&s(1000, 0, 0.5), w), 50.0);
        assert_eq!(rate(&s(1000, 500, 0.5), w), 100.0);
    }

    #[test]
    fn recovery_time_at_the_boundaries() {
        let w = Duration::from_secs(10);
        // Under the limit: nothing to wait for.
        assert_eq!(time_to_recover(&s(100, 100, 0.5), w, 1000), Duration::ZERO);
        // prev = 2000, curr = 0, f = 0: need 2000·(1−Δ/10) ≤ 1000 → Δ = 5 s.
        assert_eq!(
            time_to_recover(&s(2000, 0, 0.0), w, 1000),
            Duration::from_secs(5)
        );
        // curr alone over the quota: finish this interval (8 s), then curr = 1500 decays to
        // 1000 after a third of the next one.
        let d = time_to_recover(&s(0, 1500, 0.2), w, 1000);
        assert!((d.as_secs_f64() - (8.0 + 10.0 / 3.0)).abs() < 1e-6, "{d:?}");
    }
}
