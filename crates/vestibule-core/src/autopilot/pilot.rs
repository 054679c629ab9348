//! The autopilot in the proxy: per room, what its origin answered, the pace in force,
//! and one step of the law per `autopilot_interval`.
//!
//! A room's [`PilotCell`] lives as long as the process (rooms rebuilt by a reload find the same
//! cell by name, as they find their operator overrides), so a reload that leaves the room's
//! autopilot settings and configured pace alone does not restart the loop. The request path
//! touches it twice, both lock-free: the proxy [`records`](PilotCell::record) each origin answer
//! of an autopilot room into a [`Sketch`] (three relaxed atomic adds), and the room's capacity
//! reads the [`pace`](PilotCell::pace) in force (one atomic load). A background loop
//! (`server.rs`) calls [`PilotCell::tick`] every second with the clock and what the room counts;
//! the step itself is [`Autopilot::step`], pure.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::{Autopilot, Interval, LotteryPilot, Reason, Settings};
use crate::config::AutopilotConfig;
use crate::time::Timestamp;

/// Buckets per doubling of latency: a bucket's middle is within 2.2 % of anything in it.
const PER_OCTAVE: f64 = 16.0;
/// 1 ms to 2¹⁷ ms (131 s), plus one bucket under 1 ms and one at the top for anything over.
const BUCKETS: usize = 17 * PER_OCTAVE as usize + 2;

/// A latency histogram of log-spaced buckets, filled by any thread without a lock and drained
/// once per interval.
pub(crate) struct Sketch {
    buckets: Box<[AtomicU32]>,
    responses: AtomicU64,
    errors: AtomicU64,
}

/// What a sketch held when drained.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Drained {
    pub responses: u64,
    pub errors: u64,
    /// Seconds; `None` without answers.
    pub p95: Option<f64>,
}

impl Default for Sketch {
    fn default() -> Self {
        Sketch {
            buckets: (0..BUCKETS).map(|_| AtomicU32::new(0)).collect(),
            responses: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }
}

fn bucket_of(seconds: f64) -> usize {
    let ms = seconds * 1000.0;
    if ms.is_nan() || ms < 1.0 {
        return 0;
    }
    ((ms.log2() * PER_OCTAVE).floor() as usize)
        .saturating_add(1)
        .min(BUCKETS - 1)
}

/// The middle of bucket `i` (geometric), seconds.
fn middle_of(i: usize) -> f64 {
    if i == 0 {
        return 0.0005;
    }
    2f64.powf((i as f64 - 0.5) / PER_OCTAVE) / 1000.0
}

impl Sketch {
    /// One origin answer: how long it took, and whether it was an error (5xx).
    pub fn record(&self, seconds: f64, error: bool) {
        self.buckets[bucket_of(seconds)].fetch_add(1, Ordering::Relaxed);
        self.responses.fetch_add(1, Ordering::Relaxed);
        if error {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// What was recorded since the last drain; the sketch keeps it.
    pub fn peek(&self) -> Drained {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| u64::from(b.load(Ordering::Relaxed)))
            .collect();
        Drained {
            responses: self.responses.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            p95: p95_of(&counts),
        }
    }

    /// What was recorded since the last drain, and empties the sketch.
    pub fn drain(&self) -> Drained {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| u64::from(b.swap(0, Ordering::Relaxed)))
            .collect();
        Drained {
            responses: self.responses.swap(0, Ordering::Relaxed),
            errors: self.errors.swap(0, Ordering::Relaxed),
            p95: p95_of(&counts),
        }
    }
}

/// The middle of the bucket that holds the 95th percentile of `counts`; `None` when empty.
fn p95_of(counts: &[u64]) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    let rank = (total as f64 * 0.95).ceil() as u64;
    let mut seen = 0;
    counts.iter().enumerate().find_map(|(i, c)| {
        seen += c;
        (total > 0 && seen >= rank.max(1)).then(|| middle_of(i))
    })
}

/// What an autopilot steers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Steered {
    /// A capacity room's `new_users_per_minute`.
    Pace,
    /// A lottery room's `allow_percentage`.
    Percentage,
}

impl Steered {
    pub fn key(self) -> &'static str {
        match self {
            Steered::Pace => "new_users_per_minute",
            Steered::Percentage => "allow_percentage",
        }
    }

    /// A value of this kind in words: a whole pace, a percentage to two decimals.
    fn show(self, v: f64) -> String {
        match self {
            Steered::Pace => format!("{v:.0}"),
            Steered::Percentage => format!("{}", (v * 100.0).round() / 100.0),
        }
    }

    /// A value of this kind in JSON.
    fn json(self, v: f64) -> serde_json::Value {
        match self {
            Steered::Pace => serde_json::json!(v.round() as u64),
            Steered::Percentage => serde_json::json!((v * 100.0).round() / 100.0),
        }
    }
}

/// What the room says at a tick.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RoomNow {
    pub steered: Steered,
    /// The configured value in force (the room's, or a running event's).
    pub configured: f64,
    /// The session in force, minutes.
    pub session_minutes: f64,
    /// Users counted active (capacity rooms; a lottery's autopilot counts its own wins).
    pub active: u64,
    /// Visitors waiting (capacity rooms; for a lottery, whether draws were lost).
    pub waiting: u64,
}

/// What a tick changed, for the log.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Change {
    /// The loop (re)started from the configured value.
    Started { steered: Steered, value: f64 },
    /// A step moved the value.
    Stepped {
        steered: Steered,
        from: f64,
        to: f64,
        reason: Reason,
        interval: Interval,
    },
    /// `autopilot` was turned off: the configured value is back in force.
    Stopped,
}

impl Change {
    /// The change in words, for the log.
    pub fn describe(&self) -> String {
        match self {
            Change::Started { steered, value } => format!(
                "{} {} (starts from the configured value)",
                steered.key(),
                steered.show(*value)
            ),
            Change::Stopped => "off: the configured value is in force again".into(),
            Change::Stepped {
                steered,
                from,
                to,
                reason,
                interval: i,
            } => format!(
                "{} {} -> {} ({}: {} answers, {} errors, p95 {}, {} active, {})",
                steered.key(),
                steered.show(*from),
                steered.show(*to),
                reason.as_str(),
                i.responses,
                i.errors,
                i.p95
                    .map_or("-".into(), |p| format!("{:.0} ms", p * 1000.0)),
                i.active,
                if i.waiting {
                    "visitors waiting"
                } else {
                    "nobody waiting"
                },
            ),
        }
    }
}

/// The law's state, by what it steers.
#[derive(Clone, Copy, Debug)]
enum Law {
    Pace(Autopilot),
    Percentage(LotteryPilot),
}

impl Law {
    fn value(&self) -> f64 {
        match self {
            Law::Pace(a) => f64::from(a.pace),
            Law::Percentage(l) => l.percentage,
        }
    }

    fn reason(&self) -> Reason {
        match self {
            Law::Pace(a) => a.reason,
            Law::Percentage(l) => l.reason,
        }
    }

    fn ceiling(&self) -> Option<f64> {
        match self {
            Law::Pace(a) => Some(a.ceiling),
            Law::Percentage(l) => l.pilot.map(|p| p.ceiling),
        }
    }
}

struct Run {
    config: AutopilotConfig,
    steered: Steered,
    configured: f64,
    session_minutes: f64,
    law: Law,
    changed_at: Timestamp,
    /// The last step that judged: the answers, draws and wins since are gathered.
    last_step: Timestamp,
    next_step: Timestamp,
    last: Option<Interval>,
    /// Lottery rooms: wins by the second they were counted, for the session.
    wins: VecDeque<(u64, u64)>,
    /// Since `last_step`: the intervals, draws and wins gathered, and whether visitors waited.
    spans: u32,
    draws: u64,
    won: u64,
    waited: bool,
}

fn settings(c: &AutopilotConfig, session_minutes: f64) -> Settings {
    Settings {
        target_latency: c.target_latency.as_secs_f64(),
        max_error_rate: c.max_error_rate,
        min: c.min,
        max: c.max,
        session_minutes,
    }
}

/// An atomic's value when no autopilot runs.
const OFF: u32 = u32::MAX;

/// One room's autopilot: its origin's answers, its draws (lottery rooms), and what it sets.
pub struct PilotCell {
    sketch: Sketch,
    /// Capacity rooms: the pace in force.
    pace: AtomicU32,
    /// Lottery rooms: the percentage in force, in hundredths of a percent.
    share: AtomicU32,
    draws: AtomicU64,
    wins: AtomicU64,
    run: Mutex<Option<Run>>,
}

impl Default for PilotCell {
    fn default() -> Self {
        PilotCell {
            sketch: Sketch::default(),
            pace: AtomicU32::new(OFF),
            share: AtomicU32::new(OFF),
            draws: AtomicU64::new(0),
            wins: AtomicU64::new(0),
            run: Mutex::new(None),
        }
    }
}

/// The autopilot in `/status`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PilotStatus {
    /// `new_users_per_minute` or `allow_percentage`.
    pub steers: &'static str,
    /// The value in force.
    pub value: serde_json::Value,
    /// What the config says.
    pub configured: serde_json::Value,
    pub reason: &'static str,
    /// RFC 3339.
    pub changed_at: String,
    /// The active users it aims at (a lottery's: from its first interval with draws).
    pub ceiling: Option<u64>,
    pub min: u32,
    pub max: u32,
    pub target_latency_ms: u64,
    /// What the last interval showed.
    pub last_interval: Option<IntervalStatus>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IntervalStatus {
    pub responses: u64,
    pub errors: u64,
    pub p95_ms: Option<u64>,
    pub active: u64,
    pub waiting: bool,
}

impl PilotCell {
    /// One origin answer to this room's request.
    pub fn record(&self, seconds: f64, error: bool) {
        self.sketch.record(seconds, error);
    }

    /// Lottery rooms: one draw (a waiting visitor's token decided, or a visitor let straight
    /// in), and whether it let the visitor in.
    pub(crate) fn count_draw(&self, win: bool) {
        self.draws.fetch_add(1, Ordering::Relaxed);
        if win {
            self.wins.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Capacity rooms: the pace the autopilot sets, while it runs.
    pub fn pace(&self) -> Option<u32> {
        match self.pace.load(Ordering::Relaxed) {
            OFF => None,
            p => Some(p),
        }
    }

    /// Lottery rooms: the percentage the autopilot sets, while it runs.
    pub fn percentage(&self) -> Option<f64> {
        match self.share.load(Ordering::Relaxed) {
            OFF => None,
            p => Some(f64::from(p) / 100.0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Run>> {
        self.run.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, steered: Steered, value: f64) {
        let (set, clear) = match steered {
            Steered::Pace => (&self.pace, &self.share),
            Steered::Percentage => (&self.share, &self.pace),
        };
        let v = match steered {
            Steered::Pace => value.round(),
            Steered::Percentage => (value * 100.0).round(),
        };
        set.store(v.clamp(0.0, f64::from(OFF - 1)) as u32, Ordering::Relaxed);
        clear.store(OFF, Ordering::Relaxed);
    }

    fn drain(&self) -> (Drained, u64, u64) {
        (
            self.sketch.drain(),
            self.draws.swap(0, Ordering::Relaxed),
            self.wins.swap(0, Ordering::Relaxed),
        )
    }

    /// Where the autopilot stands, while it runs.
    pub fn status(&self) -> Option<PilotStatus> {
        let run = self.lock();
        let r = run.as_ref()?;
        Some(PilotStatus {
            steers: r.steered.key(),
            value: r.steered.json(r.law.value()),
            configured: r.steered.json(r.configured),
            reason: r.law.reason().as_str(),
            changed_at: r.changed_at.rfc3339(),
            ceiling: r.law.ceiling().map(|c| c.round() as u64),
            min: r.config.min,
            max: r.config.max,
            target_latency_ms: r.config.target_latency.as_millis() as u64,
            last_interval: r.last.map(|i| IntervalStatus {
                responses: i.responses,
                errors: i.errors,
                p95_ms: i.p95.map(|p| (p * 1000.0).round() as u64),
                active: i.active,
                waiting: i.waiting,
            }),
        })
    }

    /// `autopilot` is off: the configured value is in force again. `Some(Change::Stopped)` when
    /// it was running.
    pub fn stop(&self) -> Option<Change> {
        let mut run = self.lock();
        self.pace.store(OFF, Ordering::Relaxed);
        self.share.store(OFF, Ordering::Relaxed);
        self.drain();
        run.take().map(|_| Change::Stopped)
    }

    /// Called every second or so while the room's autopilot is on: starts the loop from the
    /// configured value (at first, and whenever the settings or the configured value changed),
    /// and steps once an interval has passed since the last step.
    pub fn tick(&self, config: &AutopilotConfig, room: RoomNow, now: Timestamp) -> Option<Change> {
        let mut run = self.lock();
        let restart = run.as_ref().is_none_or(|r| {
            r.config != *config
                || r.steered != room.steered
                || r.configured != room.configured
                || r.session_minutes != room.session_minutes
        });
        let s = settings(config, room.session_minutes);
        if restart {
            let law = match room.steered {
                Steered::Pace => Law::Pace(Autopilot::start(
                    &s,
                    room.configured.round() as u32,
                    room.active,
                )),
                Steered::Percentage => Law::Percentage(LotteryPilot::start(&s, room.configured)),
            };
            self.drain();
            self.publish(room.steered, law.value());
            *run = Some(Run {
                config: *config,
                steered: room.steered,
                configured: room.configured,
                session_minutes: room.session_minutes,
                law,
                changed_at: now,
                last_step: now,
                next_step: next_step(now, config),
                last: None,
                wins: VecDeque::new(),
                spans: 0,
                draws: 0,
                won: 0,
                waited: false,
            });
            return Some(Change::Started {
                steered: room.steered,
                value: law.value(),
            });
        }
        let r = run.as_mut()?;
        if now < r.next_step {
            return None;
        }
        // An interval with too few answers to judge by leaves them in the sketch: the next
        // interval's join them, for as many intervals as it takes.
        let draws = self.draws.swap(0, Ordering::Relaxed);
        let wins = self.wins.swap(0, Ordering::Relaxed);
        r.spans += 1;
        r.draws += draws;
        r.won += wins;
        r.waited |= room.waiting > 0;
        let gathered = self.sketch.peek();
        let mut interval = Interval {
            responses: gathered.responses,
            errors: gathered.errors,
            p95: gathered.p95,
            waiting: r.waited,
            active: room.active,
            spans: r.spans,
        };
        if interval.judged() {
            let seen = self.sketch.drain();
            (interval.responses, interval.errors) = (seen.responses, seen.errors);
            interval.p95 = seen.p95;
        }
        let from = r.law.value();
        r.law = match r.law {
            Law::Pace(a) => Law::Pace(a.step(&s, &interval)),
            Law::Percentage(l) => {
                // The room keeps no counts: its users are the wins of the last session, and
                // visitors wait when draws were lost.
                let session_secs = (room.session_minutes * 60.0) as u64;
                r.wins.push_back((now.secs(), wins));
                while r
                    .wins
                    .front()
                    .is_some_and(|(at, _)| at + session_secs <= now.secs())
                {
                    r.wins.pop_front();
                }
                interval.active = r.wins.iter().map(|(_, n)| n).sum();
                interval.waiting = r.draws > r.won;
                let secs = now.millis().saturating_sub(r.last_step.millis()) as f64 / 1000.0;
                let per_minute = r.draws as f64 * 60.0 / secs.max(1.0);
                Law::Percentage(l.step(&s, &interval, per_minute))
            }
        };
        if interval.judged() {
            r.last_step = now;
            (r.spans, r.draws, r.won, r.waited) = (0, 0, 0, false);
        }
        r.next_step = next_step(now, config);
        r.last = Some(interval);
        let to = r.law.value();
        let shown = |v: f64| r.steered.show(v);
        if shown(to) == shown(from) {
            return None;
        }
        r.changed_at = now;
        self.publish(r.steered, to);
        Some(Change::Stepped {
            steered: r.steered,
            from,
            to,
            reason: r.law.reason(),
            interval,
        })
    }
}

fn next_step(now: Timestamp, c: &AutopilotConfig) -> Timestamp {
    Timestamp::from_millis(now.millis() + c.interval.as_millis() as u64)
}

/// A room policy's handle on its autopilot. It compares equal whatever it holds: it is not a
/// setting of the policy.
#[derive(Clone, Default)]
pub struct PilotHandle(pub Option<Arc<PilotCell>>);

impl PartialEq for PilotHandle {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for PilotHandle {}

impl std::fmt::Debug for PilotHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "steered" } else { "fixed" })
    }
}

impl PilotHandle {
    /// Capacity rooms: the pace the autopilot sets, while it runs.
    pub fn pace(&self) -> Option<u32> {
        self.0.as_ref().and_then(|p| p.pace())
    }

    /// Lottery rooms: the percentage the autopilot sets, while it runs.
    pub fn percentage(&self) -> Option<f64> {
        self.0.as_ref().and_then(|p| p.percentage())
    }
}

/// Every room's cell, by name, for the life of the process.
#[derive(Default)]
pub struct Pilots {
    cells: Mutex<HashMap<String, Arc<PilotCell>>>,
}

impl Pilots {
    /// The cell of room `name` (the same one for every snapshot).
    pub fn cell(&self, name: &str) -> Arc<PilotCell> {
        let mut cells = self.cells.lock().unwrap_or_else(|p| p.into_inner());
        cells.entry(name.to_owned()).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_sketch_finds_the_95th_percentile_within_its_bucket() {
        let s = Sketch::default();
        assert_eq!(s.drain(), Drained::default());
        // 1..=1000 ms: the 95th percentile is 950 ms.
        for ms in 1..=1000 {
            s.record(f64::from(ms) / 1000.0, ms % 100 == 0);
        }
        let d = s.drain();
        assert_eq!((d.responses, d.errors), (1000, 10));
        let p95 = d.p95.unwrap();
        assert!((p95 - 0.95).abs() < 0.95 * 0.03, "p95 {p95}");
        // Drained: empty again.
        assert_eq!(s.drain(), Drained::default());
        // Odd values land somewhere, never panic.
        for v in [f64::NAN, -1.0, 0.0, f64::INFINITY, 1e12] {
            s.record(v, false);
        }
        let d = s.drain();
        assert_eq!(d.responses, 5);
        assert!(d.p95.unwrap() > 100.0, "the top bucket");
        s.record(0.0002, false);
        assert_eq!(s.drain().p95, Some(0.0005));
    }

    const CONFIG: AutopilotConfig = AutopilotConfig {
        target_latency: Duration::from_millis(500),
        max_error_rate: 0.02,
        min: 10,
        max: 510,
        interval: Duration::from_secs(10),
        session: Duration::from_secs(300),
    };

    fn room(configured: u32, active: u64) -> RoomNow {
        RoomNow {
            steered: Steered::Pace,
            configured: f64::from(configured),
            session_minutes: 5.0,
            active,
            waiting: 100,
        }
    }

    fn started(value: f64) -> Option<Change> {
        Some(Change::Started {
            steered: Steered::Pace,
            value,
        })
    }

    #[test]
    fn the_loop_starts_steps_each_interval_restarts_and_stops() {
        let cell = PilotCell::default();
        let t = |s: u64| Timestamp::from_secs(1_000 + s);
        assert_eq!(cell.pace(), None);
        assert_eq!(cell.status(), None);
        // Started from the configured value.
        assert_eq!(cell.tick(&CONFIG, room(100, 500), t(0)), started(100.0));
        assert_eq!((cell.pace(), cell.percentage()), (Some(100), None));
        // Answers before the interval is up are kept for its step.
        for _ in 0..100 {
            cell.record(2.0, false);
        }
        assert_eq!(cell.tick(&CONFIG, room(100, 500), t(5)), None);
        assert_eq!(cell.pace(), Some(100));
        // The interval's step: slow (p95 2 s against 0.5 s), the ceiling halves, the pace falls.
        let Some(Change::Stepped {
            from, to, reason, ..
        }) = cell.tick(&CONFIG, room(100, 500), t(10))
        else {
            panic!("a step");
        };
        assert_eq!((from, reason), (100.0, Reason::Slow));
        assert!(to < 100.0);
        assert_eq!(cell.pace(), Some(to as u32));
        let status = cell.status().unwrap();
        assert_eq!(status.steers, "new_users_per_minute");
        assert_eq!(status.value, serde_json::json!(to as u32));
        assert_eq!(status.configured, serde_json::json!(100));
        assert_eq!(status.reason, "slow");
        assert_eq!(status.changed_at, t(10).rfc3339());
        let last = status.last_interval.unwrap();
        assert_eq!((last.responses, last.errors), (100, 0));
        assert!(last.p95_ms.unwrap().abs_diff(2000) < 50);
        // An interval of too few answers holds the ceiling: no change to log.
        assert_eq!(cell.tick(&CONFIG, room(100, 500), t(20)), None);
        assert_eq!(cell.status().unwrap().reason, "too_few_responses");
        // A reload that changes the configured value restarts from it.
        assert_eq!(cell.tick(&CONFIG, room(300, 250), t(21)), started(300.0));
        // So does one that changes the bounds (here: the configured value is over the new max).
        let lower = AutopilotConfig { max: 200, ..CONFIG };
        assert_eq!(cell.tick(&lower, room(300, 250), t(22)), started(200.0));
        // Turned off: the configured value is back.
        assert_eq!(cell.stop(), Some(Change::Stopped));
        assert_eq!((cell.pace(), cell.status()), (None, None));
        assert_eq!(cell.stop(), None);
    }

    #[test]
    fn a_lottery_is_steered_by_its_draws_and_wins() {
        let config = AutopilotConfig {
            min: 0,
            max: 100,
            interval: Duration::from_secs(1),
            ..CONFIG
        };
        let lottery = RoomNow {
            steered: Steered::Percentage,
            configured: 100.0,
            session_minutes: 1.0,
            active: 0,
            waiting: 0,
        };
        let cell = PilotCell::default();
        let t = |ms: u64| Timestamp::from_millis(1_000_000 + ms);
        assert_eq!(
            cell.tick(&config, lottery, t(0)),
            Some(Change::Started {
                steered: Steered::Percentage,
                value: 100.0
            })
        );
        assert_eq!((cell.pace(), cell.percentage()), (None, Some(100.0)));
        // 40 let in within the second; the origin fails.
        for _ in 0..40 {
            cell.count_draw(true);
        }
        for _ in 0..30 {
            cell.record(0.01, true);
        }
        let Some(Change::Stepped {
            steered,
            from,
            to,
            reason,
            interval,
        }) = cell.tick(&config, lottery, t(1_000))
        else {
            panic!("a step");
        };
        assert_eq!(steered, Steered::Percentage);
        assert_eq!((from, reason), (100.0, Reason::Errors));
        assert_eq!(interval.active, 40, "the wins of the session");
        assert!(!interval.waiting, "no draw lost");
        // 2,400 draws a minute; the ceiling is half the 40 active, and the pace that drains
        // the surplus is the least: 0 % here.
        assert!(to < 1.0, "{to}");
        assert_eq!(cell.percentage(), Some((to * 100.0).round() / 100.0));
        let status = cell.status().unwrap();
        assert_eq!(status.steers, "allow_percentage");
        assert_eq!(status.configured, serde_json::json!(100.0));
        assert_eq!(status.ceiling, Some(20));
        // No draws in an interval: the percentage holds.
        for _ in 0..30 {
            cell.record(0.01, false);
        }
        assert_eq!(cell.tick(&config, lottery, t(2_000)), None);
        assert_eq!(cell.status().unwrap().reason, "holding");
        // The wins leave the active count a session later.
        for _ in 0..30 {
            cell.record(0.01, false);
        }
        for _ in 0..10 {
            cell.count_draw(false);
        }
        cell.tick(&config, lottery, t(61_000));
        let last = cell.status().unwrap().last_interval.unwrap();
        assert_eq!((last.active, last.waiting), (0, true));
        // Healthy, visitors losing draws, nobody active: the percentage rises.
        assert!(cell.percentage().unwrap() > to, "{:?}", cell.status());
    }

    #[test]
    fn an_interval_of_too_few_answers_is_gathered_into_the_next() {
        let cell = PilotCell::default();
        let t = |s: u64| Timestamp::from_secs(1_000 + s);
        let config = AutopilotConfig {
            interval: Duration::from_secs(2),
            ..CONFIG
        };
        cell.tick(&config, room(100, 500), t(0));
        // 8 fast answers an interval: too few each time, kept.
        for i in 1..=2 {
            for _ in 0..8 {
                cell.record(0.05, false);
            }
            assert_eq!(cell.tick(&config, room(100, 500), t(2 * i)), None);
            let status = cell.status().unwrap();
            assert_eq!(status.reason, "too_few_responses");
            assert_eq!(status.last_interval.unwrap().responses, 8 * i);
        }
        // The third brings 24: judged, healthy, three intervals' steps.
        for _ in 0..8 {
            cell.record(0.05, false);
        }
        let Some(Change::Stepped {
            reason, interval, ..
        }) = cell.tick(&config, room(100, 500), t(6))
        else {
            panic!("a step: {:?}", cell.status());
        };
        assert_eq!(reason, Reason::Raised);
        assert_eq!((interval.responses, interval.spans), (24, 3));
        // Then it starts over.
        cell.record(0.05, false);
        cell.tick(&config, room(100, 500), t(8));
        let last = cell.status().unwrap().last_interval.unwrap();
        assert_eq!(last.responses, 1);
    }

    #[test]
    fn the_registry_keeps_one_cell_per_room() {
        let p = Pilots::default();
        assert!(Arc::ptr_eq(&p.cell("a"), &p.cell("a")));
        assert!(!Arc::ptr_eq(&p.cell("a"), &p.cell("b")));
    }
}
