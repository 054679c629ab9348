//! The per-minute history this node keeps (`[admin] history_dir`): one record per room per
//! minute ([`vestibule_core::history::Minute`]), appended as a JSON line to the file of its
//! UTC day at each minute's end, and for the minute in progress at shutdown. `vestibule
//! report` reads them (`src/report/`).
//!
//! The housekeeping task calls [`Recorder::tick`] once a second: the first tick of a minute
//! closes the one before, from the metrics' counters (the difference since the minute
//! began) and the rooms' figures read then. Nothing here is on a request's path: a history
//! directory that cannot be written costs a log line (at most one a minute) and
//! `vestibule_history_errors_total`, never a request.
//!
//! Files of days older than `history_days`, then the oldest beyond `max_history_bytes`, are
//! removed after each write.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use vestibule_core::history::{self, Minute};

use crate::snapshot::Snapshot;
use crate::time::Timestamp;

/// One room's counters as the history reads them each second: totals since the process
/// started (the history keeps the differences).
#[derive(Clone, Debug, Default)]
pub(crate) struct RoomTotals {
    pub arrivals: u64,
    pub admitted: u64,
    /// Observations of `vestibule_room_wait_seconds`, per bucket (not cumulative), +Inf last.
    pub wait_buckets: Vec<u64>,
    /// Held visitors' pages, JSON answers, API requests, rate-limited requests.
    pub answers: [u64; 4],
    /// Challenges issued, solved.
    pub challenges: [u64; 2],
    /// Invitations accepted, refused.
    pub invitations: [u64; 2],
}

/// The node's origin figures as the history reads them: the response-time histogram's
/// cumulative counts (by [`Counters::upstream_bounds`], +Inf last), and the answers that were
/// errors (5xx, and requests no origin could take).
#[derive(Clone, Debug, Default)]
pub(crate) struct OriginTotals {
    pub cumulative: Vec<u64>,
    pub errors: u64,
}

/// What the history reads its counts from: the metrics (`crate::metrics::Metrics`), seen
/// through this so the history does not depend on them.
pub(crate) trait Counters {
    /// Each room of `snapshot`'s totals now, by room name.
    fn room_totals(&self, snapshot: &Snapshot) -> Vec<(String, RoomTotals)>;
    /// The node's origin totals now.
    fn origin_totals(&self) -> OriginTotals;
    /// The upper bounds (seconds) of the origin's response-time histogram.
    fn upstream_bounds(&self) -> &[f64];
    /// Counts a minute that could not be written (`vestibule_history_errors_total`).
    fn history_error(&self);
}

/// What the minute in progress started from.
struct Open {
    /// The minute (Unix seconds / 60).
    minute: u64,
    /// Whether the process was already running when the minute began.
    whole: bool,
    rooms: HashMap<String, (RoomTotals, u64)>,
    origin: OriginTotals,
}

/// The history writer of one process.
#[derive(Default)]
pub struct Recorder {
    open: Mutex<Option<Open>>,
}

impl Recorder {
    /// Once a second: closes the minute before when a new one has begun, and starts the next.
    /// Each record closed is also a `room.minute` event for `events`.
    pub(crate) fn tick(
        &self,
        snapshot: &Snapshot,
        metrics: &dyn Counters,
        events: &crate::sinks::Events,
        node: &str,
        now: Timestamp,
    ) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let Some(dir) = &snapshot.config.admin.history_dir else {
            *open = None;
            return;
        };
        let minute = now.minute();
        match open.take() {
            Some(o) if o.minute == minute => *open = Some(o),
            Some(o) => {
                let partial = !o.whole;
                let started = o.minute;
                let (next, records) = close(o, snapshot, metrics, node, partial, now);
                events.room_minutes(&records);
                write(dir, started, &records, snapshot, metrics);
                *open = Some(Open {
                    minute,
                    whole: true,
                    ..next
                });
            }
            None => *open = Some(begin(snapshot, metrics, minute, false, now)),
        }
    }

    /// At shutdown: writes the minute in progress (`partial`).
    pub(crate) fn finish(
        &self,
        snapshot: &Snapshot,
        metrics: &dyn Counters,
        events: &crate::sinks::Events,
        node: &str,
        now: Timestamp,
    ) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let (Some(o), Some(dir)) = (open.take(), &snapshot.config.admin.history_dir) else {
            return;
        };
        let started = o.minute;
        let (_, records) = close(o, snapshot, metrics, node, true, now);
        events.room_minutes(&records);
        write(dir, started, &records, snapshot, metrics);
    }
}

/// The readings a minute starts from.
fn begin(
    snapshot: &Snapshot,
    metrics: &dyn Counters,
    minute: u64,
    whole: bool,
    now: Timestamp,
) -> Open {
    let waiting = waiting_now(snapshot, now);
    Open {
        minute,
        whole,
        rooms: metrics
            .room_totals(snapshot)
            .into_iter()
            .map(|(name, totals)| {
                let w = waiting.get(&name).copied().unwrap_or(0);
                (name, (totals, w))
            })
            .collect(),
        origin: metrics.origin_totals(),
    }
}

/// Each room's waiting visitors now (capacity rooms; pre-queue included).
fn waiting_now(snapshot: &Snapshot, now: Timestamp) -> HashMap<String, u64> {
    snapshot
        .rooms
        .iter()
        .map(|r| (r.name().to_owned(), r.figures(now).map_or(0, |f| f.waiting)))
        .collect()
}

/// The records of the minute `o` began, and the readings the next minute starts from.
fn close(
    o: Open,
    snapshot: &Snapshot,
    metrics: &dyn Counters,
    node: &str,
    partial: bool,
    now: Timestamp,
) -> (Open, Vec<Minute>) {
    let next = begin(snapshot, metrics, now.minute(), true, now);
    let start = history::rfc3339(o.minute * 60);
    let origin = origin_minute(metrics.upstream_bounds(), &o.origin, &next.origin);
    let mut records = Vec::new();
    for room in snapshot.rooms.iter() {
        let name = room.name();
        // A room that a reload added this minute is recorded from the next.
        let (Some((before, waiting_before)), Some((after, _))) =
            (o.rooms.get(name), next.rooms.get(name))
        else {
            continue;
        };
        let figures = room.figures(now);
        let lottery = figures.is_none();
        let cap = if lottery {
            Some(room.effective_allow_percentage(now))
        } else {
            room.effective_new_users_per_minute(now).map(|n| n as f64)
        };
        let waits: Vec<u64> = after
            .wait_buckets
            .iter()
            .zip(before.wait_buckets.iter().chain(std::iter::repeat(&0)))
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        let waited: u64 = waits.iter().sum();
        let d = |a: u64, b: u64| a.saturating_sub(b);
        let (waiting, active) = figures.as_ref().map_or((0, 0), |f| (f.waiting, f.active));
        let arrivals = d(after.arrivals, before.arrivals);
        let admitted = d(after.admitted, before.admitted);
        let pilot = room.pilot().status();
        let mut record = Minute {
            start: start.clone(),
            room: name.to_owned(),
            node: node.to_owned(),
            arrivals,
            admitted,
            waited,
            cap,
            waiting,
            active,
            abandoned: if lottery {
                0
            } else {
                history::abandoned(*waiting_before, arrivals, admitted, waited, waiting)
            },
            waits: history::trim_buckets(waits),
            pages: d(after.answers[0], before.answers[0]),
            json: d(after.answers[1], before.answers[1]),
            api: d(after.answers[2], before.answers[2]),
            ratelimited: d(after.answers[3], before.answers[3]),
            challenges: d(after.challenges[0], before.challenges[0]),
            challenges_solved: d(after.challenges[1], before.challenges[1]),
            invitations: d(after.invitations[0], before.invitations[0]),
            invitations_refused: d(after.invitations[1], before.invitations[1]),
            origin_p95_ms: origin.0,
            origin_errors: origin.1,
            origin_target_ms: pilot.map(|a| a.target_latency_ms as f64),
            partial,
            ..Minute::default()
        };
        record.set_percentiles();
        records.push(record);
    }
    (next, records)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The origin's p95 (milliseconds) and its errors between two readings.
fn origin_minute(
    bounds: &[f64],
    before: &OriginTotals,
    after: &OriginTotals,
) -> (Option<f64>, u64) {
    let mut below_before = 0;
    let mut below_after = 0;
    let per_bucket: Vec<u64> = after
        .cumulative
        .iter()
        .zip(before.cumulative.iter().chain(std::iter::repeat(&0)))
        .map(|(a, b)| {
            let c = (a - below_after).saturating_sub(b - below_before);
            below_after = *a;
            below_before = *b;
            c
        })
        .collect();
    let p95 = history::quantile(bounds, &per_bucket, 0.95).map(|s| round2(s * 1000.0));
    (p95, after.errors.saturating_sub(before.errors))
}

/// Appends `records` to the file of their day in `dir`, then removes what is beyond the
/// history's bounds. Failures are logged (this runs once a minute) and counted.
fn write(dir: &Path, minute: u64, records: &[Minute], snapshot: &Snapshot, metrics: &dyn Counters) {
    if records.is_empty() {
        return;
    }
    let path = dir.join(history::day_file(minute * 60));
    let text: String = records.iter().map(Minute::to_line).collect();
    if let Err(e) = append(&path, text.as_bytes()) {
        metrics.history_error();
        log::warn!(
            "history: cannot write {} ({e}); this minute's records are lost, requests are not affected",
            path.display()
        );
        return;
    }
    let admin = &snapshot.config.admin;
    let today = minute * 60 / 86_400;
    if let Err(e) = prune(dir, today, admin.history_days, admin.max_history_bytes) {
        metrics.history_error();
        log::warn!("history: cannot remove old files in {}: {e}", dir.display());
    }
}

fn append(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    // One write: a crash leaves at most the last line torn, which readers skip.
    file.write_all(bytes)?;
    file.flush()
}

/// Appends `records` to the files of their days in `dir` (made if missing), as a node writes
/// them: for history made elsewhere (`vestibule simulate --event --history`).
pub fn write_records(dir: &Path, records: &[Minute]) -> std::io::Result<()> {
    let mut by_day: std::collections::BTreeMap<String, String> = Default::default();
    for r in records {
        let day = history::parse_start(&r.start)
            .map_or_else(|| "undated.jsonl".to_owned(), history::day_file);
        by_day.entry(day).or_default().push_str(&r.to_line());
    }
    for (day, text) in by_day {
        append(&dir.join(day), text.as_bytes())?;
    }
    Ok(())
}

/// Removes the history files beyond the bounds.
fn prune(dir: &Path, today: u64, days: u32, max_bytes: u64) -> std::io::Result<()> {
    let mut files = Vec::new();
    // In a folder nodes share, another node may remove a file first: that is no error.
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    for entry in std::fs::read_dir(dir)? {
        let meta = match entry.and_then(|e| e.metadata().map(|m| (e, m))) {
            Ok(found) => found,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(e),
        };
        let (entry, meta) = meta;
        if meta.is_file() {
            files.push((entry.file_name().to_string_lossy().into_owned(), meta.len()));
        }
    }
    for name in history::prune(&files, today, days, max_bytes) {
        let path: PathBuf = dir.join(&name);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(e),
        }
        log::info!(
            "history: removed {} (beyond the history kept)",
            path.display()
        );
    }
    Ok(())
}

/// Reads every `*.jsonl` file in `dir`: the records, and what was skipped (a file that could
/// not be read, a line that is not a record, such as one torn by a crash), in words.
pub fn read_dir(dir: &Path) -> std::io::Result<(Vec<Minute>, Vec<String>)> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    names.sort();
    let mut records = Vec::new();
    let mut skipped = Vec::new();
    for path in names {
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                skipped.push(format!("{}: not read ({e})", path.display()));
                continue;
            }
        };
        let text = String::from_utf8_lossy(&bytes);
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Minute>(line) {
                Ok(m) if !m.start.is_empty() && !m.room.is_empty() => records.push(m),
                Ok(_) => skipped.push(format!(
                    "{}:{}: not a minute's record (no start or room)",
                    path.display(),
                    i + 1
                )),
                Err(e) => skipped.push(format!(
                    "{}:{}: skipped a line that is not a whole record ({e})",
                    path.display(),
                    i + 1
                )),
            }
        }
    }
    Ok((records, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_lines_and_reads_them_back_skipping_a_torn_one() {
        let dir = tempfile::tempdir().unwrap();
        let m = Minute {
            start: "2026-11-27T20:15:00Z".into(),
            room: "sale".into(),
            node: "a".into(),
            arrivals: 3,
            ..Minute::default()
        };
        let path = dir.path().join("2026-11-27.jsonl");
        append(&path, m.to_line().as_bytes()).unwrap();
        append(&path, m.to_line().as_bytes()).unwrap();
        // A crash in the middle of a write.
        append(&path, &m.to_line().as_bytes()[..20]).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not history").unwrap();
        let (records, skipped) = read_dir(dir.path()).unwrap();
        assert_eq!(records, [m.clone(), m]);
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert!(skipped[0].contains("2026-11-27.jsonl:3"), "{skipped:?}");
    }

    #[test]
    fn an_unwritable_directory_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "x").unwrap();
        assert!(append(&blocker.join("2026-11-27.jsonl"), b"{}\n").is_err());
    }

    #[test]
    fn pruning_removes_old_days() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["2026-10-01.jsonl", "2026-11-26.jsonl", "2026-11-27.jsonl"] {
            std::fs::write(dir.path().join(name), "{}\n").unwrap();
        }
        let today = history::day_of_file("2026-11-27.jsonl").unwrap();
        prune(dir.path(), today, 30, 1 << 30).unwrap();
        assert!(!dir.path().join("2026-10-01.jsonl").exists());
        assert!(dir.path().join("2026-11-26.jsonl").exists());
    }

    #[test]
    fn the_origin_minute_is_the_difference_of_two_readings() {
        let bounds = [0.01, 0.1, 1.0];
        let before = OriginTotals {
            cumulative: vec![5, 5, 5, 5],
            errors: 1,
        };
        // 10 more answers, all in (0.01, 0.1].
        let after = OriginTotals {
            cumulative: vec![5, 15, 15, 15],
            errors: 3,
        };
        let (p95, errors) = origin_minute(&bounds, &before, &after);
        assert_eq!(errors, 2);
        let p95 = p95.unwrap();
        assert!(p95 > 10.0 && p95 <= 100.0, "{p95}");
    }
}
