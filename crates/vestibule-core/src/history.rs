//! The per-minute history of a room, as each node keeps it and `vestibule report` reads it:
//! the record of one room's minute on one node ([`Minute`]), its file layout (one JSON line per
//! record, one file per UTC day: [`day_file`]), how the records of a cluster's nodes merge
//! ([`merge`]), the wait percentiles drawn from histogram buckets ([`quantile`]), and which old
//! files go ([`prune`]).
//!
//! Pure: the edge reads the counters and writes the files (`src/history/` in the binary), the
//! report reads them; this module only says what a record holds and how records combine.
//!
//! **Merging a cluster.** Each node writes its own records (`node` names it). Records of the
//! same room and minute from several nodes become one: counts (arrivals, admissions, answers,
//! denials, …) are summed; figures read at the minute's end that are already cluster-wide or
//! are a level rather than a count (the cap, waiting, active, the origin's p95) take the largest
//! node's value. The wait percentiles are read again from the summed bucket counts (`waits`),
//! so they are those of every node's admissions together.
//! Abandonment, which a node derives from the cluster-wide waiting figure, is worked out again
//! from the merged minutes ([`abandoned`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Upper bounds (seconds) of `vestibule_room_wait_seconds`' buckets, which the history's wait
/// percentiles are read from: fine where a wait is seconds, coarser up to two hours.
pub const WAIT_BUCKETS: [f64; 24] = [
    1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 240.0, 300.0, 420.0,
    600.0, 900.0, 1200.0, 1800.0, 2400.0, 3600.0, 4800.0, 6000.0, 7200.0,
];

/// One room's minute on one node. Counts are of the minute; levels (`cap`, `waiting`,
/// `active`) as read at its end (or at shutdown, for a last `partial` minute).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Minute {
    /// The minute's start, RFC 3339 UTC (`2026-11-27T20:15:00Z`).
    pub start: String,
    pub room: String,
    /// The node that wrote it (`cluster.node_id`, else the host name).
    pub node: String,
    /// Visitors new to the room: a first place in line (or the pre-queue), or straight in.
    pub arrivals: u64,
    /// Admissions (`vestibule_room_admitted_total`): from the line, and straight in.
    pub admitted: u64,
    /// Of `admitted`, those from the line (`vestibule_room_wait_seconds`' count).
    pub waited: u64,
    /// The pace in force: `new_users_per_minute` (capacity rooms; 0 = no limit) or the allow
    /// percentage (lottery rooms).
    pub cap: Option<f64>,
    /// Visitors waiting and still checking in, pre-queue included (capacity rooms).
    pub waiting: u64,
    /// Admitted visitors active within their session (capacity rooms).
    pub active: u64,
    /// Visitors who left the line without being admitted ([`abandoned`]).
    pub abandoned: u64,
    /// Time to admission of those admitted from the line this minute, seconds.
    pub wait_p50: Option<f64>,
    pub wait_p90: Option<f64>,
    pub wait_p99: Option<f64>,
    /// The admissions from the line per bucket of [`WAIT_BUCKETS`] (then above the last),
    /// trailing empty buckets left out: what the percentiles are read from, so that merged
    /// minutes and whole events have exact percentiles too.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<u64>,
    /// The room's answers to held visitors: HTML pages and JSON; and its API requests.
    pub pages: u64,
    pub json: u64,
    pub api: u64,
    /// `pow` rooms: challenges issued and solved.
    pub challenges: u64,
    pub challenges_solved: u64,
    /// Invitations presented: accepted and refused.
    pub invitations: u64,
    pub invitations_refused: u64,
    /// Requests to the room refused by a rate-limit rule.
    pub ratelimited: u64,
    /// The origin's p95 this minute (this node's answers, every room), milliseconds; its 5xx
    /// answers and the requests no origin could take.
    pub origin_p95_ms: Option<f64>,
    pub origin_errors: u64,
    /// The autopilot's latency target, when the room has one.
    pub origin_target_ms: Option<f64>,
    /// Written at shutdown before the minute was over.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

impl Minute {
    /// The record as one line of its file, newline included.
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self).unwrap_or_default();
        line.push('\n');
        line
    }

    /// Adds `other` (the same room and minute, another node) into `self` as [`merge`] says.
    fn absorb(&mut self, other: &Minute) {
        self.arrivals += other.arrivals;
        self.admitted += other.admitted;
        self.waited += other.waited;
        self.abandoned += other.abandoned;
        self.pages += other.pages;
        self.json += other.json;
        self.api += other.api;
        self.challenges += other.challenges;
        self.challenges_solved += other.challenges_solved;
        self.invitations += other.invitations;
        self.invitations_refused += other.invitations_refused;
        self.ratelimited += other.ratelimited;
        self.origin_errors += other.origin_errors;
        self.waiting = self.waiting.max(other.waiting);
        self.active = self.active.max(other.active);
        self.cap = max_of(self.cap, other.cap);
        add_buckets(&mut self.waits, &other.waits);
        self.set_percentiles();
        self.origin_p95_ms = max_of(self.origin_p95_ms, other.origin_p95_ms);
        self.origin_target_ms = max_of(self.origin_target_ms, other.origin_target_ms);
        self.partial |= other.partial;
        if !self.node.split(',').any(|n| n == other.node) {
            self.node = format!("{},{}", self.node, other.node);
        }
    }
}

impl Minute {
    /// Reads `wait_p50`/`p90`/`p99` from `waits` (none without admissions from the line).
    pub fn set_percentiles(&mut self) {
        let q =
            |p: f64| quantile(&WAIT_BUCKETS, &self.waits, p).map(|x| (x * 100.0).round() / 100.0);
        (self.wait_p50, self.wait_p90, self.wait_p99) = (q(0.5), q(0.9), q(0.99));
    }
}

/// Adds bucket counts `b` into `a`, element by element.
pub fn add_buckets(a: &mut Vec<u64>, b: &[u64]) {
    if a.len() < b.len() {
        a.resize(b.len(), 0);
    }
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// Bucket counts without their trailing empty buckets, as a record keeps them.
pub fn trim_buckets(mut counts: Vec<u64>) -> Vec<u64> {
    while counts.last() == Some(&0) {
        counts.pop();
    }
    counts
}

fn max_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Merges the records of a cluster's nodes (and a node's records of the same minute written
/// twice, by a restart within it): one per room and minute, in order of room then minute.
/// Minutes with records of more than one node have their abandonment worked out again from
/// the merged figures and the merged minute just before (when there is one).
pub fn merge(records: impl IntoIterator<Item = Minute>) -> Vec<Minute> {
    let mut by_key: BTreeMap<(String, String), (Minute, usize)> = BTreeMap::new();
    for r in records {
        match by_key.get_mut(&(r.room.clone(), r.start.clone())) {
            Some((m, n)) => {
                m.absorb(&r);
                *n += 1;
            }
            None => {
                by_key.insert((r.room.clone(), r.start.clone()), (r, 1));
            }
        }
    }
    let mut out: Vec<Minute> = Vec::with_capacity(by_key.len());
    for ((room, _), (mut m, n)) in by_key {
        if n > 1 {
            // Only from the minute just before: across a gap the waiting figure is stale.
            let just_before = |p: &&Minute| {
                p.room == room
                    && parse_start(&p.start)
                        .zip(parse_start(&m.start))
                        .is_some_and(|(a, b)| a + 60 == b)
            };
            // A room that keeps no line (a lottery: nobody waits, nobody waited, nobody left)
            // has no abandonment to work out.
            let keeps_a_line = |p: &Minute| p.waiting > 0 || p.waited > 0 || p.abandoned > 0;
            if let Some(prev) = out.last().filter(just_before) {
                if keeps_a_line(&m) || keeps_a_line(prev) {
                    m.abandoned =
                        abandoned(prev.waiting, m.arrivals, m.admitted, m.waited, m.waiting);
                }
            }
        }
        out.push(m);
    }
    out
}

/// Visitors who left the line in a minute without being let in: those waiting at its start,
/// plus those who joined it (arrivals not let straight in: `arrivals - (admitted - waited)`),
/// less those admitted from it and those still waiting at its end. A visitor counts as gone
/// once they have stopped checking in for the room's liveness window, so abandonment shows a
/// little after they leave; it is never below zero.
pub fn abandoned(
    waiting_before: u64,
    arrivals: u64,
    admitted: u64,
    waited: u64,
    waiting: u64,
) -> u64 {
    let straight_in = admitted.saturating_sub(waited);
    let joined = arrivals.saturating_sub(straight_in);
    (waiting_before + joined).saturating_sub(waited + waiting)
}

/// The `q` quantile (0 to 1) of observations counted per bucket: `counts[i]` observations at
/// most `bounds[i]` and above the bound before it, `counts[bounds.len()]` (if given) above the
/// last. Interpolated linearly within the bucket, as Prometheus' `histogram_quantile` does; an
/// observation above the last bound counts as the last bound. `None` without observations.
pub fn quantile(bounds: &[f64], counts: &[u64], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut below = 0u64;
    for (i, &c) in counts.iter().enumerate() {
        if c > 0 && (below + c) as f64 >= rank {
            let Some(&hi) = bounds.get(i) else {
                return bounds.last().copied();
            };
            let lo = if i == 0 { 0.0 } else { bounds[i - 1] };
            let into = (rank - below as f64).max(0.0) / c as f64;
            return Some(lo + (hi - lo) * into);
        }
        below += c;
    }
    bounds.last().copied()
}

/// The Unix second a minute's RFC 3339 start names (`None` if it is not one).
pub fn parse_start(start: &str) -> Option<u64> {
    let t =
        time::OffsetDateTime::parse(start, &time::format_description::well_known::Rfc3339).ok()?;
    u64::try_from(t.unix_timestamp()).ok()
}

/// RFC 3339 UTC of a Unix second, to the second (`2026-11-27T20:15:00Z`).
pub fn rfc3339(secs: u64) -> String {
    let (y, mo, d) = civil(secs / 86_400);
    let s = secs % 86_400;
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s % 3600 / 60,
        s % 60
    )
}

/// The file holding the records of the UTC day of `secs`: `2026-11-27.jsonl`.
pub fn day_file(secs: u64) -> String {
    let (y, m, d) = civil(secs / 86_400);
    format!("{y:04}-{m:02}-{d:02}.jsonl")
}

/// The day number (days since 1970-01-01) a history file's name stands for, if it is one.
pub fn day_of_file(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".jsonl")?;
    let mut parts = stem.splitn(3, '-');
    let mut next = |len: usize| {
        parts
            .next()
            .filter(|p| p.len() == len && p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<i64>().ok())
    };
    let (y, m, d) = (next(4)?, next(2)?, next(2)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let days = u64::try_from(days).ok()?;
    // A date that does not exist (30 February) is no day's file.
    (day_file(days * 86_400) == name).then_some(days)
}

/// Year, month, day of a day number (days since 1970-01-01), proleptic Gregorian.
fn civil(days: u64) -> (i64, u32, u32) {
    // Howard Hinnant's days_from_civil, inverted.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Which history files to delete, given every file as (name, bytes), today's day number, the
/// days kept and the bytes allowed: files of days older than `days` (today counts as one), then
/// the oldest until the rest fit in `max_bytes`. Today's file is never deleted, whatever its
/// size. Names that are not a day's file are left alone.
pub fn prune(files: &[(String, u64)], today: u64, days: u32, max_bytes: u64) -> Vec<String> {
    let mut dated: Vec<(u64, &str, u64)> = files
        .iter()
        .filter_map(|(name, bytes)| Some((day_of_file(name)?, name.as_str(), *bytes)))
        .collect();
    dated.sort();
    let oldest_kept = today.saturating_sub(u64::from(days.max(1)) - 1);
    let mut total: u64 = dated.iter().map(|f| f.2).sum();
    let mut out = Vec::new();
    for (day, name, bytes) in dated {
        if day < oldest_kept || (total > max_bytes && day < today) {
            out.push(name.to_owned());
            total -= bytes;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minute(room: &str, start: &str, node: &str) -> Minute {
        Minute {
            start: start.into(),
            room: room.into(),
            node: node.into(),
            ..Minute::default()
        }
    }

    #[test]
    fn a_lottery_room_keeps_no_line_and_a_merge_invents_no_abandonment() {
        let minute = |start: &str, arrivals: u64, admitted: u64| {
            let mut m = Minute {
                room: "draw".into(),
                start: start.into(),
                ..Minute::default()
            };
            (m.arrivals, m.admitted) = (arrivals, admitted);
            m
        };
        let merged = merge([
            minute("2026-11-27T10:00:00Z", 10, 4),
            minute("2026-11-27T10:01:00Z", 10, 4),
            minute("2026-11-27T10:01:00Z", 6, 2),
        ]);
        assert_eq!(merged.len(), 2);
        assert_eq!((merged[1].arrivals, merged[1].abandoned), (16, 0));
    }

    #[test]
    fn a_record_is_one_json_line_and_reads_back() {
        let mut m = minute("sale", "2026-11-27T20:15:00Z", "a");
        m.arrivals = 12;
        m.wait_p50 = Some(42.5);
        let line = m.to_line();
        assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
        let back: Minute = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(back, m);
        assert!(!line.contains("partial"), "written only when true");
        // Fields a later version adds or drops do not stop a reader.
        let old: Minute = serde_json::from_str(r#"{"start":"x","room":"r","new":1}"#).unwrap();
        assert_eq!(old.arrivals, 0);
    }

    #[test]
    fn merging_sums_counts_and_takes_the_largest_levels() {
        let at = "2026-11-27T20:15:00Z";
        let mut a = minute("sale", at, "a");
        a.arrivals = 10;
        a.admitted = 4;
        a.waited = 3;
        a.waiting = 50;
        a.cap = Some(100.0);
        a.waits = vec![0, 0, 0, 0, 0, 0, 3];
        let mut b = minute("sale", at, "b");
        b.arrivals = 7;
        b.admitted = 5;
        b.waited = 5;
        b.waiting = 48;
        b.cap = Some(100.0);
        b.waits = vec![0, 0, 0, 0, 0, 0, 0, 5];
        let other = minute("other", at, "a");
        let merged = merge([a, other, b]);
        assert_eq!(merged.len(), 2);
        let m = merged.iter().find(|m| m.room == "sale").unwrap();
        assert_eq!((m.arrivals, m.admitted, m.waited), (17, 9, 8));
        assert_eq!((m.waiting, m.cap), (50, Some(100.0)));
        // 3 waits in (20, 30] and 5 in (30, 45]: the percentiles of the 8 together.
        assert_eq!(m.waits, [0, 0, 0, 0, 0, 0, 3, 5]);
        assert_eq!(m.wait_p50, Some(33.0));
        assert!(m.wait_p99.unwrap() > 44.0 && m.wait_p99.unwrap() <= 45.0);
        assert_eq!(m.node, "a,b");
    }

    #[test]
    fn merged_minutes_work_out_abandonment_again() {
        let mut first = minute("sale", "2026-11-27T20:15:00Z", "a");
        first.waiting = 100;
        let mut a = minute("sale", "2026-11-27T20:16:00Z", "a");
        let mut b = minute("sale", "2026-11-27T20:16:00Z", "b");
        // 20 joined the line (on two nodes), 30 were let in from it, 80 still wait: 10 left.
        (a.arrivals, a.admitted, a.waited, a.waiting, a.abandoned) = (12, 15, 15, 80, 99);
        (b.arrivals, b.admitted, b.waited, b.waiting, b.abandoned) = (8, 15, 15, 80, 99);
        let merged = merge([first, a, b]);
        assert_eq!(merged[1].abandoned, 10);
        assert_eq!(
            abandoned(10, 5, 5, 0, 0),
            10,
            "all straight in: only the 10 waiting left"
        );
        assert_eq!(abandoned(0, 5, 0, 0, 9), 0, "never below zero");
    }

    #[test]
    fn quantiles_interpolate_within_buckets() {
        let bounds = [1.0, 10.0, 100.0];
        assert_eq!(quantile(&bounds, &[0, 0, 0], 0.5), None);
        // 10 observations in (1, 10]: the median is half way.
        assert_eq!(quantile(&bounds, &[0, 10, 0], 0.5), Some(5.5));
        assert_eq!(quantile(&bounds, &[10, 0, 0], 0.99), Some(0.99));
        // Above the last bound: the last bound.
        assert_eq!(quantile(&bounds, &[0, 0, 0, 4], 0.5), Some(100.0));
        let q = quantile(&bounds, &[5, 4, 1], 0.9).unwrap();
        assert!((q - 10.0).abs() < 1e-9, "{q}");
    }

    #[test]
    fn days_and_times_are_utc() {
        // 2026-11-27T20:15:00Z
        let t = 1_795_810_500;
        assert_eq!(rfc3339(t), "2026-11-27T20:15:00Z");
        assert_eq!(day_file(t), "2026-11-27.jsonl");
        assert_eq!(parse_start("2026-11-27T20:15:00Z"), Some(t));
        assert_eq!(day_of_file("2026-11-27.jsonl"), Some(t / 86_400));
        assert_eq!(day_of_file("notes.txt"), None);
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn pruning_drops_old_days_then_the_oldest_beyond_the_size() {
        let today = day_of_file("2026-11-27.jsonl").unwrap();
        let files: Vec<(String, u64)> = [
            ("2026-10-01.jsonl", 10),
            ("2026-11-25.jsonl", 100),
            ("2026-11-26.jsonl", 100),
            ("2026-11-27.jsonl", 500),
            ("README", 1),
        ]
        .iter()
        .map(|(n, b)| (n.to_string(), *b))
        .collect();
        assert_eq!(prune(&files, today, 30, 10_000), ["2026-10-01.jsonl"]);
        assert_eq!(
            prune(&files, today, 30, 650),
            ["2026-10-01.jsonl", "2026-11-25.jsonl"]
        );
        // Today's file stays even alone over the bound.
        assert_eq!(prune(&files, today, 1, 10).len(), 3);
    }
}
