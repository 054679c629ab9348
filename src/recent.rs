//! The console's last half hour: admissions per room and rate-limit denials per rule, per
//! minute, read from the metrics' counters once a second by the housekeeping task
//! ([`room_key`] and [`rule_key`] name the series).
//!
//! Each series keeps the counter's value when it was first read in each minute; a minute's count
//! is the next recorded minute's first value less its own (the minute now: the value now less
//! its first). Minutes the process did not run show as 0. Series of rooms or rules removed by a
//! reload are dropped at the next sample.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::time::Timestamp;

/// The name of a room's admissions.
pub(crate) fn room_key(name: &str) -> String {
    format!("room:{name}")
}

/// The name of a rule's denials.
pub(crate) fn rule_key(name: &str) -> String {
    format!("rule:{name}")
}

/// Minutes shown.
pub(crate) const MINUTES: u64 = 30;

#[derive(Default)]
struct Series {
    /// Minute → the counter's value when first read in it.
    firsts: BTreeMap<u64, u64>,
    /// The value last read.
    last: u64,
}

/// Per-minute counts of counters, by name.
#[derive(Default)]
pub(crate) struct History {
    series: Mutex<HashMap<String, Series>>,
}

impl History {
    /// Reads every counter in `values` (name, value now) at `now`; names not among them are
    /// forgotten.
    pub fn sample(&self, values: impl IntoIterator<Item = (String, u64)>, now: Timestamp) {
        let minute = now.minute();
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let mut seen = Vec::new();
        for (name, value) in values {
            let s = series.entry(name.clone()).or_default();
            s.firsts.entry(minute).or_insert(value);
            s.last = value;
            while s.firsts.len() as u64 > MINUTES + 1 {
                s.firsts.pop_first();
            }
            seen.push(name);
        }
        series.retain(|name, _| seen.contains(name));
    }

    /// The counts of `name` over the last [`MINUTES`] minutes, oldest first, the minute now
    /// (so far) last. Empty for a name never read.
    pub fn minutes(&self, name: &str, now: Timestamp) -> Vec<u64> {
        let series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let Some(s) = series.get(name) else {
            return Vec::new();
        };
        let now_minute = now.minute();
        (now_minute + 1 - MINUTES..=now_minute)
            .map(|m| {
                let Some(first) = s.firsts.get(&m) else {
                    return 0;
                };
                let next = s
                    .firsts
                    .range(m + 1..)
                    .next()
                    .map(|(_, v)| *v)
                    .unwrap_or(s.last);
                next.saturating_sub(*first)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_minute_come_from_the_first_reading_of_each_minute() {
        let h = History::default();
        let at = |m: u64, s: u64| Timestamp::from_secs(m * 60 + s);
        h.sample([("a".to_owned(), 10)], at(100, 5));
        h.sample([("a".to_owned(), 15)], at(100, 50));
        h.sample([("a".to_owned(), 22)], at(101, 1));
        h.sample([("a".to_owned(), 30)], at(103, 0));
        h.sample([("a".to_owned(), 31)], at(103, 30));
        let m = h.minutes("a", at(103, 40));
        assert_eq!(m.len(), MINUTES as usize);
        // 100: 22 - 10; 101: 30 - 22 (102 was not read: its count is in 101's); 102: 0; 103: 1.
        assert_eq!(&m[m.len() - 4..], &[12, 8, 0, 1]);
        assert!(m[..m.len() - 4].iter().all(|c| *c == 0));
        assert!(h.minutes("b", at(103, 40)).is_empty());
        h.sample([("b".to_owned(), 1)], at(104, 0));
        assert!(
            h.minutes("a", at(104, 0)).is_empty(),
            "a series not read is dropped"
        );
    }

    #[test]
    fn at_most_half_an_hour_is_kept() {
        let h = History::default();
        for m in 0..100u64 {
            h.sample([("a".to_owned(), m * 2)], Timestamp::from_secs(m * 60));
        }
        let series = h.series.lock().unwrap();
        assert_eq!(series["a"].firsts.len() as u64, MINUTES + 1);
    }
}
