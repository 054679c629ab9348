//! How a room admits people: the one interface a room's policy answers, implemented by lottery
//! rooms ([`Lottery`]) and capacity rooms ([`Capacity`]).
//!
//! A [`Room`](super::Room) does everything that is the same for both: routing, invitations,
//! proof-of-work, the operator's pause, sold-out and notice, the event in force. It then asks
//! the policy in force (a running event's, else the room's own) through this trait.

use std::sync::Arc;

use crate::autopilot::pilot::{PilotHandle, RoomNow, Steered};
use crate::config::{AutopilotConfig, EventConfig};
use crate::controls::PaceHandle;
use crate::identity::Identity;
use crate::keys::KeyRing;
use crate::time::Timestamp;
use crate::token::{Claims, Token};

use super::capacity::{Capacity, Figures};
use super::lottery::Lottery;
use super::{Hold, Outcome, Place, Presented};

/// A room's admission policy. Every method is called on the request path or by the admin's
/// figures, and answers from memory (the counter store's counts, for capacity rooms).
pub(crate) trait Admission: std::fmt::Debug + Send + Sync {
    /// A visitor's request while no pre-queue is open. `presented` is their checked cookie,
    /// `hold` what holds the room now (the operator's pause, an event running, their lane).
    /// Returns what to answer and which cookie to set; it may count the arrival, the
    /// admission or the check-in.
    fn decide_held(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        presented: &Presented,
        hold: &Hold,
        now: Timestamp,
    ) -> Outcome;

    /// A visitor's request while `event`'s pre-queue is open: admitted users keep access, and
    /// everyone else gets, or keeps, a place that comes due after the start, in pre-queue
    /// order. `lane` is their invitation's lane, if any.
    fn prequeue(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        presented: &Presented,
        event: &EventConfig,
        lane: Option<&str>,
        now: Timestamp,
    ) -> Outcome;

    /// Signs `room` into every token issued from now on.
    fn bind_to(&mut self, room: Arc<str>);

    /// Admits at what the autopilot sets, while it runs.
    fn steer_by(&mut self, pilot: PilotHandle);

    /// Admits at the operator's pace override while one is in force: it beats the configured
    /// value, an event's and the autopilot's.
    fn paced_by(&mut self, operator: PaceHandle);

    /// How often a closed or sold-out page checks again, in seconds.
    fn closed_refresh(&self) -> u64;

    /// How long a held visitor should wait before asking again, in seconds.
    fn retry_after(&self) -> u64;

    /// The chance, in percent, that an eligible waiting visitor gets in now.
    fn admit_chance(&self, now: Timestamp) -> f64;

    /// What the autopilot steers from now, under `autopilot`.
    fn pilot_now(&self, autopilot: &AutopilotConfig, now: Timestamp) -> RoomNow;

    /// The `new_users_per_minute` in force at `now`; `None` for policies without one.
    fn new_users_per_minute(&self, _now: Timestamp) -> Option<u64> {
        None
    }

    /// Live counts; `None` for policies that keep none.
    fn figures(&self, _now: Timestamp) -> Option<Figures> {
        None
    }

    /// How many visitors hold a place in `event`'s pre-queue; 0 for policies that count none.
    fn prequeued(&self, _event: &EventConfig, _now: Timestamp) -> u64 {
        0
    }

    /// Whether the session of an allow token was ended (revoked, or its place freed).
    fn is_revoked(&self, _claims: &Claims, _now: Timestamp) -> bool {
        false
    }

    /// Ends the session at `place`, once.
    fn revoke(&self, _place: Place, _now: Timestamp) {}

    /// Until when a winning `token` may be presented again and win again, counted as one
    /// admission: `Some` for a lottery's wait tokens, which win by being drawn; `None` where
    /// the policy counts its admissions itself.
    fn wins_until(&self, _token: &Token) -> Option<Timestamp> {
        None
    }

    /// Whether the autopilot counts this policy's draws (won and lost) to steer it.
    fn draws(&self) -> bool {
        false
    }

    /// Gives arrivals queue numbers (`api = true`); only capacity rooms count them.
    fn number_arrivals(&mut self) {}

    /// The capacity room this policy is, if it is one (its queue numbers and counters).
    fn capacity(&self) -> Option<&Capacity> {
        None
    }
}

impl Admission for Lottery {
    fn decide_held(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        presented: &Presented,
        hold: &Hold,
        now: Timestamp,
    ) -> Outcome {
        Lottery::decide_held(self, ring, uid, presented, hold, now)
    }

    fn prequeue(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        presented: &Presented,
        event: &EventConfig,
        _lane: Option<&str>,
        now: Timestamp,
    ) -> Outcome {
        Lottery::prequeue(self, ring, uid, presented, event, now)
    }

    fn bind_to(&mut self, room: Arc<str>) {
        self.bound = Some(room);
    }

    fn steer_by(&mut self, pilot: PilotHandle) {
        self.pilot = pilot;
    }

    fn paced_by(&mut self, operator: PaceHandle) {
        self.operator = operator;
    }

    fn closed_refresh(&self) -> u64 {
        self.closed_refresh
    }

    fn retry_after(&self) -> u64 {
        if self.allow_percentage == 0 {
            self.closed_refresh
        } else {
            self.wait_period
        }
    }

    fn admit_chance(&self, now: Timestamp) -> f64 {
        if self.queue_all {
            0.0
        } else {
            self.percentage(now)
        }
    }

    /// The autopilot counts a lottery's draws and wins itself.
    fn pilot_now(&self, autopilot: &AutopilotConfig, _now: Timestamp) -> RoomNow {
        RoomNow {
            steered: Steered::Percentage,
            configured: f64::from(self.allow_percentage),
            session_minutes: autopilot.session.as_secs().div_ceil(60).max(1) as f64,
            active: 0,
            waiting: 0,
        }
    }

    fn wins_until(&self, token: &Token) -> Option<Timestamp> {
        Some(Timestamp::from_secs(
            token.claims.exp.saturating_add(self.wait_period),
        ))
    }

    fn draws(&self) -> bool {
        true
    }
}

impl Admission for Capacity {
    fn decide_held(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        presented: &Presented,
        hold: &Hold,
        now: Timestamp,
    ) -> Outcome {
        Capacity::decide_held(self, ring, uid, presented, hold, now)
    }

    fn prequeue(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        presented: &Presented,
        event: &EventConfig,
        lane: Option<&str>,
        now: Timestamp,
    ) -> Outcome {
        Capacity::prequeue(self, ring, uid, presented, (event, lane), now)
    }

    fn bind_to(&mut self, room: Arc<str>) {
        Capacity::bind_to(self, room);
    }

    fn steer_by(&mut self, pilot: PilotHandle) {
        Capacity::steer_by(self, pilot);
    }

    fn paced_by(&mut self, operator: PaceHandle) {
        Capacity::paced_by(self, operator);
    }

    fn closed_refresh(&self) -> u64 {
        self.refresh_secs()
    }

    fn retry_after(&self) -> u64 {
        self.refresh_secs()
    }

    fn admit_chance(&self, now: Timestamp) -> f64 {
        100.0 * Capacity::figures(self, now).admit_chance
    }

    fn pilot_now(&self, _autopilot: &AutopilotConfig, now: Timestamp) -> RoomNow {
        let figures = Capacity::figures(self, now);
        RoomNow {
            steered: Steered::Pace,
            configured: f64::from(self.configured_new_per_minute()),
            session_minutes: self.session_minutes() as f64,
            active: figures.active,
            waiting: figures.waiting,
        }
    }

    fn new_users_per_minute(&self, now: Timestamp) -> Option<u64> {
        Some(self.new_per_minute(now))
    }

    fn figures(&self, now: Timestamp) -> Option<Figures> {
        Some(Capacity::figures(self, now))
    }

    fn prequeued(&self, event: &EventConfig, now: Timestamp) -> u64 {
        Capacity::prequeued(self, event, now)
    }

    fn is_revoked(&self, claims: &Claims, now: Timestamp) -> bool {
        Capacity::is_revoked(self, claims, now)
    }

    fn revoke(&self, place: Place, now: Timestamp) {
        Capacity::revoke(self, place, now);
    }

    fn number_arrivals(&mut self) {
        Capacity::number_arrivals(self);
    }

    fn capacity(&self) -> Option<&Capacity> {
        Some(self)
    }
}
