//! The autopilot: a capacity room's `new_users_per_minute` steered by its origin's
//! health.
//!
//! Every `autopilot_interval` the caller hands in what it saw of the room's origin answers in
//! that interval (how many, their 95th percentile latency, how many were errors), how many users
//! the room counts active now, and whether visitors were left waiting; it gets back the pace to
//! admit at. Nothing here reads a clock or a socket: the law is a function of its inputs and its
//! state, proven on `vestibule simulate --autopilot`'s clock against a model origin.
//!
//! ## Why it steers a ceiling of active users
//!
//! An admitted user loads the origin for their whole visit, so a change of pace shows in the
//! origin's latency only as the users of the old pace leave: minutes later. A law that moves the
//! pace on the latency alone (additive increase, multiplicative decrease of the pace) overshoots
//! every time; on the model origin it swung between its bounds with a 20-minute period. The load
//! itself, though, answers at once: it is the active users, which the room counts. So the law
//! keeps a *ceiling* of active users, which it moves on the latency (AIMD, where the plant has
//! no delay), and sets the pace that brings the active users to the ceiling and holds them
//! there: `pace = ceiling / session + (ceiling − active) / `[`FILL_MINUTES`], the users leaving a
//! minute plus the gap closed over that many minutes.
//!
//! ## The law (per interval)
//!
//! | what the interval showed | ceiling |
//! | --- | --- |
//! | fewer than [`MIN_RESPONSES`] answers | holds; the answers are kept for the next interval |
//! | errors over `max_error_rate` | active × [`ERROR_FACTOR`]: the origin failed at this load |
//! | p95 over the target | active × `target / p95`, at least × [`SLOW_FACTOR_FLOOR`] |
//! | p95 between [`DEADBAND`] × target and the target | the active users: no more load |
//! | p95 under [`DEADBAND`] × target, visitors waiting, the ceiling reached | at least the active users, + `step` |
//! | p95 under [`DEADBAND`] × target otherwise | at least the active users (no wind-up past what it carries) |
//!
//! `step` is the range of paces over [`STEPS`], as users (× the session), once for each
//! interval the answers were gathered over. The pace is always within `min..=max`.
//!
//! The ceiling never stays under a load that has just proved healthy. After a slowdown the
//! ceiling sits under the active users (the law cut it there), and a room held at `min` may
//! still let in more than that ceiling allows, so the pace the law computes is under `min`.
//! When the origin is fast again, the ceiling goes up to the active users at once and steps
//! on from there, rather than creeping up from below by one step an interval while `min`
//! lets in more than it steps.
//!
//! ## How it fails
//!
//! - An origin slow for reasons unrelated to load (a slow database, a cold cache) is read as
//!   overloaded: the ceiling falls to what is active, and the pace to `min` while it stays slow.
//!   `min` is the floor an operator chooses with that in mind.
//! - Too little traffic (fewer than [`MIN_RESPONSES`] answers an interval) is not judged at
//!   once: the answers are gathered over as many intervals as it takes to have that many,
//!   and the ceiling holds meanwhile. A quiet room is never raised on no evidence, nor lowered
//!   on one slow answer, and a room held at `min` that lets in too few to judge in one
//!   interval is judged less often, never not at all. A room with no answers holds.
//! - It sees only this room's answers: other traffic that loads the same origin shows up as this
//!   room's latency, and the room backs off for it.
//!
//! The proxy runs the law (the edge's `autopilot::pilot`): what each room's origin answered, the
//! pace in force, and one step per interval.

pub mod pilot;

/// Answers an interval must have before they say anything.
pub(crate) const MIN_RESPONSES: u64 = 20;
/// Below this share of the target latency the origin has room to spare.
pub(crate) const DEADBAND: f64 = 0.8;
/// An interval with errors over the limit sets the ceiling to half the active users.
pub(crate) const ERROR_FACTOR: f64 = 0.5;
/// A slow interval sets the ceiling to the active users × `target / p95`, but not below this.
pub(crate) const SLOW_FACTOR_FLOOR: f64 = 0.5;
/// The ceiling's additive step is the range of paces over this many steps.
pub(crate) const STEPS: u32 = 200;
/// The pace closes the gap between the active users and the ceiling over this many minutes.
pub(crate) const FILL_MINUTES: f64 = 3.0;
/// A ceiling reached: the active users are at least this share of it.
pub(crate) const REACHED: f64 = 0.9;
/// Below this share of the target latency the origin is far from its limit...
pub(crate) const FAR: f64 = 0.25;
/// ...and a ceiling counts as reached from this share of it: the ceiling may run ahead of the
/// active users, who fill it a session later, by up to twice.
pub(crate) const FAR_REACHED: f64 = 0.5;
/// Lottery rooms: the ceiling's step, as a share of itself.
pub(crate) const LOTTERY_STEP: f64 = 0.02;

/// What the autopilot steers toward and within.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// The origin's p95 latency to stay under, seconds.
    pub target_latency: f64,
    /// The share of answers that may be errors (5xx, 502, 504).
    pub max_error_rate: f64,
    /// Bounds of the pace (`new_users_per_minute`).
    pub min: u32,
    pub max: u32,
    /// The room's session, minutes: how long an admitted user counts as active.
    pub session_minutes: f64,
}

impl Settings {
    /// The ceiling's additive step, users.
    pub fn step(&self) -> f64 {
        (f64::from(self.max.saturating_sub(self.min)) * self.session_minutes / f64::from(STEPS))
            .max(1.0)
    }

    /// The ceiling for which the law's pace is `pace` with `active` users: solves
    /// `pace = ceiling / session + (ceiling − active) / FILL_MINUTES` for the ceiling.
    pub(crate) fn ceiling_for(&self, pace: u32, active: f64) -> f64 {
        let session = self.session_minutes.max(1.0);
        (f64::from(pace) * FILL_MINUTES + active) * session / (FILL_MINUTES + session)
    }

    /// The pace that brings `active` users to `ceiling` and holds them there, within bounds.
    pub fn pace(&self, ceiling: f64, active: f64) -> u32 {
        let pace = ceiling / self.session_minutes.max(1.0) + (ceiling - active) / FILL_MINUTES;
        pace.round().clamp(f64::from(self.min), f64::from(self.max)) as u32
    }
}

/// What one interval showed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Interval {
    /// Origin answers to this room's requests.
    pub responses: u64,
    /// Of them, errors: 5xx, and the 502/504 of an unreachable or timed-out origin.
    pub errors: u64,
    /// The 95th percentile latency of the answers, seconds (`None` without answers).
    pub p95: Option<f64>,
    /// Visitors were held in the interval: demand above admissions.
    pub waiting: bool,
    /// Users the room counts active now.
    pub active: u64,
    /// How many autopilot intervals the answers were gathered over: 1, or more when the
    /// intervals before had too few answers to judge and their answers were kept (0 reads
    /// as 1).
    pub spans: u32,
}

impl Interval {
    /// Whether the interval holds enough answers to judge by. When it does not, the caller
    /// keeps its answers and adds the next interval's, for as many intervals as it takes.
    pub fn judged(&self) -> bool {
        self.responses >= MIN_RESPONSES
    }

    pub fn error_rate(&self) -> f64 {
        if self.responses == 0 {
            0.0
        } else {
            self.errors as f64 / self.responses as f64
        }
    }
}

/// Why the pace is what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The configured value, as loaded or reloaded.
    Start,
    TooFewResponses,
    Errors,
    Slow,
    NearTarget,
    Raised,
    Holding,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Start => "start",
            Reason::TooFewResponses => "too_few_responses",
            Reason::Errors => "errors",
            Reason::Slow => "slow",
            Reason::NearTarget => "near_target",
            Reason::Raised => "healthy_and_waiting",
            Reason::Holding => "holding",
        }
    }
}

/// The autopilot of one room: its ceiling, and the pace it sets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Autopilot {
    /// Active users to aim at.
    pub ceiling: f64,
    pub pace: u32,
    pub reason: Reason,
}

impl Autopilot {
    /// Starts from the configured pace with `active` users counted: the ceiling is the one for
    /// which the law's pace is the configured one now.
    pub fn start(s: &Settings, configured: u32, active: u64) -> Autopilot {
        let pace = configured.clamp(s.min, s.max);
        let ceiling = s.ceiling_for(pace, active as f64);
        Autopilot {
            ceiling: ceiling.max(1.0),
            pace,
            reason: Reason::Start,
        }
    }

    /// The state after an interval.
    pub fn step(&self, s: &Settings, i: &Interval) -> Autopilot {
        self.step_by(s, i, s.step())
    }

    /// The state after an interval, raising the ceiling by `step` users when it raises.
    pub fn step_by(&self, s: &Settings, i: &Interval, step: f64) -> Autopilot {
        let active = i.active as f64;
        let most = f64::from(s.max) * s.session_minutes;
        let (ceiling, reason) = if !i.judged() {
            (self.ceiling, Reason::TooFewResponses)
        } else if i.error_rate() > s.max_error_rate {
            (active * ERROR_FACTOR, Reason::Errors)
        } else if let Some(p95) = i.p95.filter(|p| *p > s.target_latency) {
            let factor = (s.target_latency / p95).max(SLOW_FACTOR_FLOOR);
            (self.ceiling.min(active * factor), Reason::Slow)
        } else if i.p95.unwrap_or(0.0) > DEADBAND * s.target_latency {
            (self.ceiling.min(active.max(1.0)), Reason::NearTarget)
        } else {
            // Well under the target: the load it carried is proven, and so is the pace it
            // let in. The ceiling is never below the active users (else the pace would drain
            // a load that was fine), nor, when `min` is what the room lets in, below the
            // ceiling whose pace is `min` (else the step would chase from below a room that
            // lets in more than it asks). Then a step for each interval the answers span, so
            // gathering does not slow the raise.
            let proven = self.ceiling.max(active);
            let at_min = s.pace(proven, active) <= s.min;
            let proven = if at_min {
                proven.max(s.ceiling_for(s.min, active))
            } else {
                proven
            };
            let far = i.p95.unwrap_or(0.0) < FAR * s.target_latency;
            let reached = if far { FAR_REACHED } else { REACHED };
            if i.waiting && (active >= reached * proven || at_min) {
                (proven + step * f64::from(i.spans.max(1)), Reason::Raised)
            } else {
                (proven, Reason::Holding)
            }
        };
        let ceiling = ceiling.clamp(1.0, most.max(1.0));
        Autopilot {
            ceiling,
            pace: s.pace(ceiling, active),
            reason,
        }
    }
}

/// A lottery room's autopilot. A lottery lets in a share of the tokens it draws, not a number
/// a minute, so the law above steers the same way, in users a minute, and the percentage is
/// that pace over the draws of the interval: `allow_percentage = 100 × pace / draws a minute`,
/// within `min..=max` percent. An interval without draws says nothing about the share, and the
/// percentage holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LotteryPilot {
    /// The law's state, from the first interval with draws.
    pub pilot: Option<Autopilot>,
    /// The `allow_percentage` in force (fractional: 0.5 % is a share too).
    pub percentage: f64,
    pub reason: Reason,
}

impl LotteryPilot {
    /// Starts from the configured percentage, within `min..=max` percent.
    pub fn start(s: &Settings, configured: f64) -> LotteryPilot {
        LotteryPilot {
            pilot: None,
            percentage: configured.clamp(f64::from(s.min), f64::from(s.max)),
            reason: Reason::Start,
        }
    }

    /// The law's bounds in users a minute at `draws` a minute (`s.min`, `s.max` are percent).
    fn pace_settings(s: &Settings, draws: f64) -> Settings {
        Settings {
            min: (draws * f64::from(s.min) / 100.0).floor() as u32,
            max: ((draws * f64::from(s.max) / 100.0).ceil() as u32).max(1),
            ..*s
        }
    }

    /// The state after an interval in which `draws_per_minute` tokens a minute were drawn.
    pub fn step(&self, s: &Settings, i: &Interval, draws_per_minute: f64) -> LotteryPilot {
        if draws_per_minute < 1.0 {
            return LotteryPilot {
                reason: Reason::Holding,
                ..*self
            };
        }
        let ps = Self::pace_settings(s, draws_per_minute);
        let pilot = self.pilot.unwrap_or_else(|| {
            let pace = (draws_per_minute * self.percentage / 100.0).round() as u32;
            Autopilot::start(&ps, pace, i.active)
        });
        // The pace's range here is every draw, which grows with the crowd: a step of a share
        // of it would grow with the crowd too. The ceiling grows by a share of itself instead.
        let next = pilot.step_by(&ps, i, (pilot.ceiling * LOTTERY_STEP).max(1.0));
        LotteryPilot {
            pilot: Some(next),
            percentage: (100.0 * f64::from(next.pace) / draws_per_minute)
                .clamp(f64::from(s.min), f64::from(s.max)),
            reason: next.reason,
        }
    }
}

/// The 95th percentile of `samples` (sorted in place); `None` when empty.
pub fn p95(samples: &mut [f64]) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_by(f64::total_cmp);
    let rank = ((samples.len() as f64) * 0.95).ceil() as usize;
    Some(samples[rank.clamp(1, samples.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Settings = Settings {
        target_latency: 0.5,
        max_error_rate: 0.02,
        min: 10,
        max: 510,
        session_minutes: 5.0,
    };

    fn interval(responses: u64, errors: u64, p95: f64, waiting: bool, active: u64) -> Interval {
        Interval {
            responses,
            errors,
            p95: Some(p95),
            waiting,
            active,
            spans: 1,
        }
    }

    #[test]
    fn the_law() {
        // Started with 500 users active: the ceiling that makes the pace the configured 100.
        let a = Autopilot::start(&S, 100, 500);
        assert_eq!((a.ceiling, a.pace, a.reason), (500.0, 100, Reason::Start));
        // An empty room: a smaller ceiling, the same pace.
        let empty = Autopilot::start(&S, 100, 0);
        assert_eq!((empty.ceiling, empty.pace), (187.5, 100));
        assert_eq!(S.step(), 12.5);
        // Healthy, visitors waiting, the ceiling reached: up by a step; the pace fills the gap
        // over three minutes.
        let b = a.step(&S, &interval(100, 0, 0.2, true, 480));
        assert_eq!((b.ceiling, b.reason), (512.5, Reason::Raised));
        assert_eq!(b.pace, 113, "102.5 leaving a minute, 32.5 to fill over 3");
        // Not reached yet: the ceiling holds; the pace still fills towards it.
        let c = a.step(&S, &interval(100, 0, 0.2, true, 300));
        assert_eq!((c.ceiling, c.pace, c.reason), (500.0, 167, Reason::Holding));
        // Nobody waiting: holds.
        assert_eq!(
            a.step(&S, &interval(100, 0, 0.2, false, 500)).reason,
            Reason::Holding
        );
        // Near the target: no more load than now.
        let d = a.step(&S, &interval(100, 0, 0.45, true, 400));
        assert_eq!(
            (d.ceiling, d.pace, d.reason),
            (400.0, 80, Reason::NearTarget)
        );
        // Slow: the ceiling under the load, in proportion; the pace falls to let it drain.
        let e = a.step(&S, &interval(100, 0, 0.625, true, 500));
        assert_eq!((e.ceiling, e.pace, e.reason), (400.0, 47, Reason::Slow));
        assert_eq!(a.step(&S, &interval(100, 0, 9.0, true, 500)).ceiling, 250.0);
        let drained = a.step(&S, &interval(100, 0, 9.0, true, 900));
        assert_eq!(drained.pace, 10, "far over: the least");
        // Errors: half the load.
        let f = a.step(&S, &interval(100, 3, 0.1, true, 600));
        assert_eq!((f.ceiling, f.reason), (300.0, Reason::Errors));
        // Too few answers: nothing changes but the fill.
        let g = a.step(&S, &interval(19, 19, 9.0, true, 500));
        assert_eq!(
            (g.ceiling, g.pace, g.reason),
            (500.0, 100, Reason::TooFewResponses)
        );
        // Bounds: the pace never leaves them; the ceiling never passes what the most pace holds.
        let top = Autopilot::start(&S, 900, 2550);
        assert_eq!((top.ceiling, top.pace), (2550.0, 510));
        let h = top.step(&S, &interval(100, 0, 0.1, true, 2550));
        assert_eq!((h.ceiling, h.pace), (2550.0, 510));
    }

    #[test]
    fn a_load_that_proved_healthy_is_never_above_the_ceiling() {
        // Cut by a slowdown to 100 users while 300 are active (the floor keeps letting them
        // in): the origin is fast again.
        let cut = Autopilot {
            ceiling: 100.0,
            pace: 10,
            reason: Reason::Slow,
        };
        let healthy = interval(100, 0, 0.3, true, 300);
        let a = cut.step(&S, &healthy);
        assert_eq!((a.ceiling, a.reason), (312.5, Reason::Raised));
        assert!(a.pace > S.min, "off the floor: {}", a.pace);
        // Nobody waiting: up to the load it carried, no further.
        let b = cut.step(&S, &interval(100, 0, 0.3, false, 300));
        assert_eq!((b.ceiling, b.reason), (300.0, Reason::Holding));
        // The floor lets in more than the ceiling's pace: the ceiling is lifted to the one
        // whose pace is the floor, and steps on from there (here `min` is 100 a minute).
        let floor = Settings { min: 100, ..S };
        let c = cut.step(&floor, &healthy);
        assert_eq!(floor.ceiling_for(100, 300.0), 375.0);
        assert_eq!((c.ceiling, c.pace, c.reason), (385.25, 105, Reason::Raised));
        // Answers gathered over three intervals: three steps.
        let gathered = Interval {
            spans: 3,
            ..healthy
        };
        assert_eq!(cut.step(&S, &gathered).ceiling, 300.0 + 3.0 * S.step());
        // Far under the target the ceiling may run up to twice the active users; near it,
        // only to active / REACHED.
        let ahead = Autopilot {
            ceiling: 500.0,
            pace: 100,
            reason: Reason::Raised,
        };
        let far = interval(100, 0, 0.1, true, 300);
        assert_eq!(ahead.step(&S, &far).reason, Reason::Raised);
        let near = interval(100, 0, 0.3, true, 300);
        assert_eq!(ahead.step(&S, &near).reason, Reason::Holding);
        // Too few answers to judge: the caller gathers, the ceiling holds.
        assert!(!interval(19, 0, 0.1, true, 300).judged());
        assert_eq!(
            cut.step(&S, &interval(19, 0, 0.1, true, 300)).ceiling,
            100.0
        );
    }

    #[test]
    fn percentile() {
        assert_eq!(p95(&mut []), None);
        assert_eq!(p95(&mut [3.0]), Some(3.0));
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(p95(&mut v), Some(95.0));
    }
}
