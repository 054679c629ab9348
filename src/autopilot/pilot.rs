//! The autopilot in the proxy (SPEC §10): per room, what its origin answered, the pace in force,
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::{Autopilot, Interval, Reason, Settings};
use crate::config::AutopilotConfig;
use crate::time::Timestamp;

/// Buckets per doubling of latency: a bucket's middle is within 2.2 % of anything in it.
const PER_OCTAVE: f64 = 16.0;
/// 1 ms to 2¹⁷ ms (131 s), plus one bucket under 1 ms and one at the top for anything over.
const BUCKETS: usize = 17 * PER_OCTAVE as usize + 2;

/// A latency histogram of log-spaced buckets, filled by any thread without a lock and drained
/// once per interval.
pub struct Sketch {
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

    /// What was recorded since the last drain, and empties the sketch.
    pub fn drain(&self) -> Drained {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| u64::from(b.swap(0, Ordering::Relaxed)))
            .collect();
        let total: u64 = counts.iter().sum();
        let rank = (total as f64 * 0.95).ceil() as u64;
        let mut seen = 0;
        let p95 = counts.iter().enumerate().find_map(|(i, c)| {
            seen += c;
            (total > 0 && seen >= rank.max(1)).then(|| middle_of(i))
        });
        Drained {
            responses: self.responses.swap(0, Ordering::Relaxed),
            errors: self.errors.swap(0, Ordering::Relaxed),
            p95,
        }
    }
}

/// What the room says at a tick.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RoomNow {
    /// The configured `new_users_per_minute` in force (the room's, or a running event's).
    pub configured: u32,
    /// The session in force, minutes.
    pub session_minutes: f64,
    /// Users counted active.
    pub active: u64,
    /// Visitors waiting.
    pub waiting: u64,
}

/// What a tick changed, for the log.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Change {
    /// The loop (re)started from the configured value.
    Started { pace: u32 },
    /// A step moved the pace.
    Stepped {
        from: u32,
        to: u32,
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
            Change::Started { pace } => {
                format!("new_users_per_minute {pace} (starts from the configured value)")
            }
            Change::Stopped => "off: new_users_per_minute is the configured value again".into(),
            Change::Stepped {
                from,
                to,
                reason,
                interval: i,
            } => format!(
                "new_users_per_minute {from} -> {to} ({}: {} answers, {} errors, p95 {}, {} active, {})",
                reason.as_str(),
                i.responses,
                i.errors,
                i.p95
                    .map_or("-".into(), |p| format!("{:.0} ms", p * 1000.0)),
                i.active,
                if i.waiting { "visitors waiting" } else { "nobody waiting" },
            ),
        }
    }
}

struct Run {
    config: AutopilotConfig,
    configured: u32,
    session_minutes: f64,
    pilot: Autopilot,
    changed_at: Timestamp,
    next_step: Timestamp,
    last: Option<Interval>,
}

impl Run {
    fn settings(&self) -> Settings {
        settings(&self.config, self.session_minutes)
    }
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

/// The pace in force when no autopilot runs.
const OFF: u32 = u32::MAX;

/// One room's autopilot: its origin's answers, and the pace it sets.
pub struct PilotCell {
    sketch: Sketch,
    pace: AtomicU32,
    run: Mutex<Option<Run>>,
}

impl Default for PilotCell {
    fn default() -> Self {
        PilotCell {
            sketch: Sketch::default(),
            pace: AtomicU32::new(OFF),
            run: Mutex::new(None),
        }
    }
}

/// The autopilot in `/status`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PilotStatus {
    /// The `new_users_per_minute` in force.
    pub value: u32,
    /// What the config says.
    pub configured: u32,
    pub reason: &'static str,
    /// RFC 3339.
    pub changed_at: String,
    /// The active users it aims at.
    pub ceiling: u64,
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

    /// The pace the autopilot sets, while it runs.
    pub fn pace(&self) -> Option<u32> {
        match self.pace.load(Ordering::Relaxed) {
            OFF => None,
            p => Some(p),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Run>> {
        self.run.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where the autopilot stands, while it runs.
    pub fn status(&self) -> Option<PilotStatus> {
        let run = self.lock();
        let r = run.as_ref()?;
        Some(PilotStatus {
            value: r.pilot.pace,
            configured: r.configured,
            reason: r.pilot.reason.as_str(),
            changed_at: r.changed_at.rfc3339(),
            ceiling: r.pilot.ceiling.round() as u64,
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
        self.sketch.drain();
        run.take().map(|_| Change::Stopped)
    }

    /// Called every second or so while the room's autopilot is on: starts the loop from the
    /// configured value (at first, and whenever the settings or the configured value changed),
    /// and steps once an interval has passed since the last step.
    pub fn tick(&self, config: &AutopilotConfig, room: RoomNow, now: Timestamp) -> Option<Change> {
        let mut run = self.lock();
        let restart = run.as_ref().is_none_or(|r| {
            r.config != *config
                || r.configured != room.configured
                || r.session_minutes != room.session_minutes
        });
        if restart {
            let pilot = Autopilot::start(
                &settings(config, room.session_minutes),
                room.configured,
                room.active,
            );
            self.sketch.drain();
            self.pace.store(pilot.pace, Ordering::Relaxed);
            *run = Some(Run {
                config: *config,
                configured: room.configured,
                session_minutes: room.session_minutes,
                pilot,
                changed_at: now,
                next_step: next_step(now, config),
                last: None,
            });
            return Some(Change::Started { pace: pilot.pace });
        }
        let r = run.as_mut()?;
        if now < r.next_step {
            return None;
        }
        r.next_step = next_step(now, config);
        let seen = self.sketch.drain();
        let interval = Interval {
            responses: seen.responses,
            errors: seen.errors,
            p95: seen.p95,
            waiting: room.waiting > 0,
            active: room.active,
        };
        let next = r.pilot.step(&r.settings(), &interval);
        let from = r.pilot.pace;
        r.pilot = next;
        r.last = Some(interval);
        if next.pace == from {
            return None;
        }
        r.changed_at = now;
        self.pace.store(next.pace, Ordering::Relaxed);
        Some(Change::Stepped {
            from,
            to: next.pace,
            reason: next.reason,
            interval,
        })
    }
}

fn next_step(now: Timestamp, c: &AutopilotConfig) -> Timestamp {
    Timestamp::from_millis(now.millis() + c.interval.as_millis() as u64)
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
    };

    fn room(configured: u32, active: u64) -> RoomNow {
        RoomNow {
            configured,
            session_minutes: 5.0,
            active,
            waiting: 100,
        }
    }

    #[test]
    fn the_loop_starts_steps_each_interval_restarts_and_stops() {
        let cell = PilotCell::default();
        let t = |s: u64| Timestamp::from_secs(1_000 + s);
        assert_eq!(cell.pace(), None);
        assert_eq!(cell.status(), None);
        // Started from the configured value.
        assert_eq!(
            cell.tick(&CONFIG, room(100, 500), t(0)),
            Some(Change::Started { pace: 100 })
        );
        assert_eq!(cell.pace(), Some(100));
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
        assert_eq!((from, reason), (100, Reason::Slow));
        assert!(to < 100);
        assert_eq!(cell.pace(), Some(to));
        let status = cell.status().unwrap();
        assert_eq!((status.value, status.configured), (to, 100));
        assert_eq!(status.reason, "slow");
        assert_eq!(status.changed_at, t(10).rfc3339());
        let last = status.last_interval.unwrap();
        assert_eq!((last.responses, last.errors), (100, 0));
        assert!(last.p95_ms.unwrap().abs_diff(2000) < 50);
        // An interval of too few answers holds the ceiling: no change to log.
        assert_eq!(cell.tick(&CONFIG, room(100, 500), t(20)), None);
        assert_eq!(cell.status().unwrap().reason, "too_few_responses");
        // A reload that changes the configured value restarts from it.
        assert_eq!(
            cell.tick(&CONFIG, room(300, 250), t(21)),
            Some(Change::Started { pace: 300 })
        );
        // So does one that changes the bounds (here: the configured value is over the new max).
        let lower = AutopilotConfig { max: 200, ..CONFIG };
        assert_eq!(
            cell.tick(&lower, room(300, 250), t(22)),
            Some(Change::Started { pace: 200 })
        );
        // Turned off: the configured value is back.
        assert_eq!(cell.stop(), Some(Change::Stopped));
        assert_eq!((cell.pace(), cell.status()), (None, None));
        assert_eq!(cell.stop(), None);
    }

    #[test]
    fn the_registry_keeps_one_cell_per_room() {
        let p = Pilots::default();
        assert!(Arc::ptr_eq(&p.cell("a"), &p.cell("a")));
        assert!(!Arc::ptr_eq(&p.cell("a"), &p.cell("b")));
    }
}
