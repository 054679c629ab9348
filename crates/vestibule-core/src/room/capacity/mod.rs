//! Capacity admission: admit by the origin's capacity, `new_users_per_minute` and
//! `total_active_users`, with random or FIFO queueing and honest wait estimates.
//!
//! ## Accounting without per-user server state
//!
//! The signed token carries what the accounting needs: `arr` (when the user first arrived, Unix
//! seconds), `acc` (when they were admitted, Unix milliseconds), `chk` (when they were last
//! counted, Unix seconds) and `ref` (the jittered refresh granted). Tokens written before these
//! were seconds carry minutes there; values below 10⁹ are read as minutes. Counters live in the
//! [`CounterStore`]:
//!
//! - `Active(m)`: admitted users whose last counted minute is `m`. On a user's first request in
//!   a new minute, `Active(now)` goes up and `Active(chk)` down (up first, so a race only ever
//!   over-counts), and the cookie is re-issued with `chk = now`. Active users are the sum over
//!   the last `session_minutes + 1` minutes: a user idle for `session_duration` drops out, and
//!   their allow token expires at the same moment.
//! - `Waiting(t, b)`: users of arrival bucket `b` whose last check-in fell in tick `t` (a tick is
//!   [`TICK_SECS`]), moved to the current tick at every check-in. A user who stops checking in
//!   drops out [`Capacity::live_window`] after their last check-in: their longest jittered
//!   interval (1.2 × `refresh`) plus a browser's latency, rounded up to ticks. No slot is held for
//!   them any longer than that (liveness).
//! - `Admitted(m)`: users let in during minute `m`.
//!
//! An arrival bucket is half a `refresh` long, and fifo lets in only the head of the queue,
//! its two oldest buckets: users let in out of arrival order arrived within one refresh interval
//! of each other. Within a bucket the order is the order of check-ins; finer buckets
//! would not order better (a user is let in at their next check-in, not at once) and would
//! multiply counters. Liveness comes first: the minute's last slots that the head cannot take go
//! to the next users, which can reorder by up to about two refresh intervals (measured with
//! `vestibule simulate`; see the README).
//!
//! ## Never over the limits
//!
//! Free slots = min(`new_users_per_minute` − admitted this minute, `total_active_users` −
//! active users). Admitting reserves: add to `Admitted(now)` and `Active(now)`, read back, and
//! undo if a limit is exceeded. Concurrent admissions can only under-admit, never exceed.
//!
//! ## Who gets the slots
//!
//! - **fifo**: slots are reserved for the oldest live arrival buckets first; a user whose
//!   bucket has a reserved slot gets in at their next check-in.
//! - **random**: every eligible check-in has the same chance `p = free slots left this minute /
//!   check-ins expected in the rest of the minute`, the check-in rate measured with the store's
//!   estimator window, so admissions spread over the minute instead of bursting at its start.
//!   The draw comes from a keyed hash of the token's signature: presenting a token again cannot
//!   re-roll it.
//!
//! Both methods keep `arr` and the per-bucket counts, so switching between them keeps
//! everyone's place. Check-ins are jittered per user (0.8–1.2 × `refresh`, averaging
//! `refresh`, drawn from the token) and enforced by the token's `exp`: checking in early earns
//! no chance. A user who stops checking in and comes back within `rejoin_grace` of their last
//! check-in takes up their place again (a position in the order, never a slot held for them);
//! later they are a new arrival.
//!
//! ## Estimates
//!
//! fifo: the live users ahead (older buckets, new arrivals at the share who come back) plus a
//! share of the user's own bucket; the first `free` of them go this minute, then `rate` a
//! minute (last minute's admissions, or `new_users_per_minute` before there is any history).
//! The wait is the rest of this minute, the whole minutes, where a check-in falls once the
//! minute starts, and one more check-in for each time the next buckets must become the head
//! when the head is smaller than a minute's slots. random: the queue's chance of getting in
//! each minute, thinned as the queue grows by its arrivals ([`random_wait_quantiles`]). Under
//! `queue_all` there is no estimate. Nobody still waiting is told less than the time to their
//! next check-in. Calibration is measured by `vestibule simulate` (see the README).
//!
//! ## Where the code is
//!
//! This file holds the types, the room's settings and its counters' keys. The `impl Capacity`
//! is split by concern: `admit` decides a request (an arrival, a check-in, an admitted user kept
//! active), `queue` moves the counts, `view` reads the queue from them, `slots` shares the free
//! slots between nodes and lanes, `estimate` holds the chances and the wait estimates, and
//! `prequeue` an event's pre-queue.

mod admit;
mod estimate;
mod numbers;
mod prequeue;
mod queue;
mod slots;
mod view;
mod watch;

pub use watch::Watched;

pub use estimate::{random_wait_minutes, random_wait_quantiles};
pub use slots::apportion;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand_chacha::rand_core::RngCore;

use crate::autopilot::pilot::PilotHandle;
use crate::config::{CapacityConfig, QueueOrder};
use crate::controls::PaceHandle;
use crate::identity::Identity;
use crate::keys::KeyRing;
use crate::room::page::Estimates;
use crate::store::{
    Allotment, CounterKey, CounterKind, CounterStore, Mark, MarkKind, WindowCounter, WindowSpec,
};
use crate::time::Timestamp;
use crate::token::{unit_interval, Claims, Dec, Reject, Token};

use super::draw;
use super::event::prequeue_place;
use super::{CookieAction, Decision, Hold, Outcome, Place, Presented};
use crate::config::EventConfig;

/// Length of the check-in rate window.
const CHECKIN_WINDOW: Duration = Duration::from_secs(10);
/// The aggregate view of the queue is recomputed at most this often.
const VIEW_TTL_MS: u64 = 1_000;
/// Waiting users are counted by the tick of their last check-in.
pub(crate) const TICK_SECS: u64 = 5;
/// What a browser may add to a check-in's interval (reload, network, a busy tab).
const CHECKIN_SLACK_SECS: f64 = 3.0;
/// Token times below this are minutes (written by earlier versions), not seconds.
const LEGACY_MINUTES_BELOW: u64 = 1_000_000_000;
/// random: how much more than the even share of the minute's slots a check-in is offered.
const RANDOM_BOOST: f64 = 1.2;
/// In a cluster, from this far into a minute the slots other nodes left unused may be given.
const RECLAIM_FROM_MS: u64 = 50_000;
/// Minutes over which the share of arrivals that come back is measured.
const RETURN_MINUTES: u64 = 3;
/// How long before the end of a minute the lanes' parts of its slots stop holding, seconds.
const LANES_OPEN_SECS: f64 = 10.0;
/// The id of a lane's count of admissions in a minute (the room's own count is id 0).
const LANE_ADMITTED: u64 = 1;

/// A token time field in seconds, whichever unit it was written in.
fn token_secs(v: u64) -> u64 {
    if v < LEGACY_MINUTES_BELOW {
        v.saturating_mul(60)
    } else {
        v
    }
}

/// Free slots now; `None` = no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slots {
    /// In the whole cluster, as this node sees it.
    pub cluster: Option<u64>,
    /// This node's part: what it may give now.
    pub here: Option<u64>,
}

/// Aggregates of a room's counters at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueView {
    pub at_ms: u64,
    pub active: u64,
    /// Arrival bucket → users of that bucket who came back at least once and still check in.
    /// Only these hold places in the order: someone who never came back holds nothing.
    pub waiting: BTreeMap<u64, u64>,
    pub waiting_total: u64,
    /// Arrival bucket → new arrivals not back yet (some have walked away).
    pub arrived: BTreeMap<u64, u64>,
    /// The share of new arrivals that came back for their first check-in, over the last few
    /// minutes (1 before there is any history).
    pub return_rate: f64,
    pub admitted_last_minute: u64,
    /// The lane's share of the slots while every lane that has visitors waiting takes its
    /// weight's share (1 without lanes): its pace before it has any history.
    pub share: f64,
}

impl Default for QueueView {
    fn default() -> Self {
        QueueView {
            at_ms: 0,
            active: 0,
            waiting: BTreeMap::new(),
            waiting_total: 0,
            arrived: BTreeMap::new(),
            return_rate: 1.0,
            admitted_last_minute: 0,
            share: 1.0,
        }
    }
}

impl QueueView {
    /// The moment the view was taken.
    pub(crate) fn at(&self) -> Timestamp {
        Timestamp::from_millis(self.at_ms)
    }

    /// Users waiting (and checking in) in buckets older than `bucket`.
    pub(crate) fn ahead_of(&self, bucket: u64) -> u64 {
        self.waiting.range(..bucket).map(|(_, n)| n).sum()
    }

    /// Users expected ahead of `bucket`: those checking in, and the share of new arrivals that
    /// will come back.
    pub(crate) fn expected_ahead(&self, bucket: u64) -> f64 {
        let new: u64 = self.arrived.range(..bucket).map(|(_, n)| n).sum();
        self.ahead_of(bucket) as f64 + new as f64 * self.return_rate
    }

    /// Users expected in `bucket` itself, counted the same way.
    pub(crate) fn expected_in_bucket(&self, bucket: u64) -> f64 {
        let get = |m: &BTreeMap<u64, u64>| m.get(&bucket).copied().unwrap_or(0) as f64;
        get(&self.waiting) + get(&self.arrived) * self.return_rate
    }

    /// Users expected to be waiting, counted the same way.
    pub(crate) fn expected_waiting(&self) -> f64 {
        let new: u64 = self.arrived.values().sum();
        self.waiting_total as f64 + new as f64 * self.return_rate
    }
}

/// The queue of every lane at one moment (one lane, `public`, in a room without lanes).
#[derive(Clone, Debug, PartialEq)]
pub struct Views {
    pub at_ms: u64,
    /// In the order of [`Capacity`]'s lanes: `public` first.
    pub lanes: Vec<Arc<QueueView>>,
}

impl Views {
    /// Visitors expected to be waiting, in every lane.
    pub(crate) fn expected_waiting(&self) -> f64 {
        self.lanes.iter().map(|v| v.expected_waiting()).sum()
    }

    /// Whether nobody waits, not even a recent arrival who has not come back yet.
    pub fn is_empty(&self) -> bool {
        self.lanes
            .iter()
            .all(|v| v.waiting_total == 0 && v.arrived.is_empty())
    }
}

/// One priority lane of a room. Lane 0 is `public`, counted in the room's own scope,
/// so a room without lanes counts as it always did.
#[derive(Debug)]
struct LaneCounters {
    name: Arc<str>,
    weight: u32,
    /// Where its queue is counted: the room's name, or `room/lane`.
    scope: Arc<str>,
}

/// A lane's figures for `/status` and the metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LaneFigures {
    pub name: Arc<str>,
    pub weight: u32,
    pub waiting: u64,
    pub admitted_last_minute: u64,
}

/// Live figures of a capacity room, for `/status` and metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    pub active: u64,
    pub waiting: u64,
    pub free_slots: Option<u64>,
    pub admitted_last_minute: u64,
    /// The chance (0–1) that an eligible check-in gets in now.
    pub admit_chance: f64,
    /// The estimate for a user joining now.
    pub estimates: Estimates,
    /// Each lane, `public` first (only `public` in a room without lanes).
    pub lanes: Vec<LaneFigures>,
}

pub struct Capacity {
    scope: Arc<str>,
    order: QueueOrder,
    /// 0 = no limit. The configured value: [`Capacity::new_per_minute`] is the one in force.
    new_per_minute: u64,
    /// The autopilot that sets the pace while it runs.
    pilot: PilotHandle,
    /// The operator's pace override, which beats the autopilot while in force.
    operator: PaceHandle,
    /// 0 = no limit.
    total_active: u64,
    session_minutes: u64,
    refresh: Duration,
    /// Arrival bucket length, whole seconds (the refresh).
    bucket_secs: u64,
    /// Ticks a waiting user stays counted after their last check-in.
    live_ticks: u64,
    rejoin_grace: Duration,
    /// New arrivals are turned away once this many wait; 0 = no limit.
    max_waiting: u64,
    queue_all: bool,
    /// Tokens carry the room's name (rooms that ask who may join).
    bound: Option<Arc<str>>,
    store: Arc<dyn CounterStore>,
    /// Check-ins of the last [`CHECKIN_WINDOW`], by lane.
    checkins: Arc<dyn WindowCounter>,
    /// `public` first; more than one when the room has priority lanes.
    lanes: Vec<LaneCounters>,
    views: Mutex<Option<Arc<Views>>>,
    /// `api = true`: arrivals get queue numbers, and admissions move the serving counter.
    numbered: bool,
}

impl std::fmt::Debug for Capacity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capacity")
            .field("scope", &self.scope)
            .field("order", &self.order)
            .finish()
    }
}

fn minutes_ceil(d: Duration) -> u64 {
    d.as_secs().div_ceil(60).max(1)
}

/// The counter id of arrival bucket `bucket` of length `len`: buckets of another length (before
/// a reload changed `refresh`) are other counters, and are left to expire.
fn bucket_id(bucket: u64, len: u64) -> u64 {
    (len << 40) | (bucket & ((1 << 40) - 1))
}

impl Capacity {
    pub fn new(
        room: &str,
        c: &CapacityConfig,
        queue_all: bool,
        store: Arc<dyn CounterStore>,
    ) -> Capacity {
        let mut lanes = vec![LaneCounters {
            name: Arc::from(crate::invite::PUBLIC_LANE),
            weight: 1,
            scope: Arc::from(room),
        }];
        for lane in &c.lanes {
            if &*lane.name == crate::invite::PUBLIC_LANE {
                lanes[0].weight = lane.weight;
            } else {
                lanes.push(LaneCounters {
                    name: lane.name.clone(),
                    weight: lane.weight,
                    scope: Arc::from(format!("{room}/{}", lane.name)),
                });
            }
        }
        let checkins = store.window(&WindowSpec {
            name: format!("room:{room}:checkins"),
            interval_ms: CHECKIN_WINDOW.as_millis() as u64,
            max_keys: lanes.len(),
            shared: None,
        });
        let live_secs = c.refresh.as_secs_f64() * 1.2 + CHECKIN_SLACK_SECS;
        Capacity {
            scope: Arc::from(room),
            order: c.order,
            new_per_minute: u64::from(c.new_users_per_minute),
            pilot: PilotHandle::default(),
            operator: PaceHandle::default(),
            total_active: u64::from(c.total_active_users),
            session_minutes: minutes_ceil(c.session_duration),
            refresh: c.refresh,
            bucket_secs: (c.refresh.as_secs() / 2).max(1),
            live_ticks: (live_secs / TICK_SECS as f64).ceil() as u64,
            rejoin_grace: c.rejoin_grace,
            max_waiting: u64::from(c.max_waiting_users),
            queue_all,
            bound: None,
            store,
            checkins,
            lanes,
            views: Mutex::new(None),
            numbered: false,
        }
    }

    /// Binds the tokens this room issues to `room`.
    pub(crate) fn bind_to(&mut self, room: Arc<str>) {
        self.bound = Some(room);
    }

    /// Admits at the pace `pilot` sets while it runs.
    pub(crate) fn steer_by(&mut self, pilot: PilotHandle) {
        self.pilot = pilot;
    }

    /// Admits at the operator's pace override while one is in force.
    pub(crate) fn paced_by(&mut self, operator: PaceHandle) {
        self.operator = operator;
    }

    /// `new_users_per_minute` in force at `now`: the operator's override while in force, else
    /// the autopilot's while it runs, else the configured one.
    pub(crate) fn new_per_minute(&self, now: Timestamp) -> u64 {
        if let Some(pace) = self.operator.pace(now) {
            return pace as u64;
        }
        match self.pilot.pace() {
            Some(pace) => u64::from(pace),
            None => self.new_per_minute,
        }
    }

    /// `new_users_per_minute` as configured.
    pub(crate) fn configured_new_per_minute(&self) -> u32 {
        self.new_per_minute as u32
    }

    /// The session, whole minutes.
    pub fn session_minutes(&self) -> u64 {
        self.session_minutes
    }

    pub fn order(&self) -> QueueOrder {
        self.order
    }

    /// The refresh, whole seconds.
    pub fn refresh_secs(&self) -> u64 {
        self.refresh.as_secs().max(1)
    }

    /// Whether the session of this allow token was revoked.
    pub(crate) fn is_revoked(&self, claims: &Claims, now: Timestamp) -> bool {
        self.live_session(claims, now).is_none()
    }

    /// The session of this allow token, unless it was revoked (computed once per request: it is
    /// a SHA-256, the same on every node).
    fn live_session(&self, claims: &Claims, now: Timestamp) -> Option<u64> {
        let session = session_of(claims);
        (!self
            .store
            .is_marked(&self.scope, revoked_mark(session), now))
        .then_some(session)
    }

    /// How long a waiting user stays counted after their last check-in.
    pub(crate) fn live_window(&self) -> Duration {
        Duration::from_secs(self.live_ticks * TICK_SECS)
    }

    /// The arrival bucket of a user who arrived at `arrival_secs`.
    fn bucket(&self, arrival_secs: u64) -> u64 {
        arrival_secs / self.bucket_secs
    }

    fn key(&self, kind: CounterKind, slot: u64, id: u64) -> CounterKey {
        self.key_in(&self.scope, kind, slot, id)
    }

    fn key_in(&self, scope: &Arc<str>, kind: CounterKind, slot: u64, id: u64) -> CounterKey {
        CounterKey {
            scope: scope.clone(),
            kind,
            slot,
            id,
        }
    }

    /// The per-minute counters of `scope` and `kind` over `minutes`, each split as
    /// [`CounterStore::split`], read from the store at once.
    fn split_minutes(
        &self,
        scope: &Arc<str>,
        kind: CounterKind,
        minutes: std::ops::RangeInclusive<u64>,
        now: Timestamp,
    ) -> Vec<(i64, i64)> {
        let keys: Vec<CounterKey> = minutes.map(|m| self.key_in(scope, kind, m, 0)).collect();
        self.store.split_each(&keys, now)
    }

    /// Whether the room has priority lanes.
    fn laned(&self) -> bool {
        self.lanes.len() > 1
    }

    /// The lane named `name` (`public` when it is none of the room's).
    fn lane_of(&self, name: Option<&str>) -> usize {
        name.and_then(|n| self.lanes.iter().position(|l| &*l.name == n))
            .unwrap_or(0)
    }

    /// The name a token carries for `lane`: none for `public`.
    fn lane_claim(&self, lane: usize) -> Option<Arc<str>> {
        (lane > 0).then(|| self.lanes[lane].name.clone())
    }

    fn add(&self, kind: CounterKind, slot: u64, id: u64, delta: i64, now: Timestamp) -> i64 {
        self.add_in(&self.scope, kind, slot, id, delta, now)
    }

    /// Adds to a counter of a lane's queue.
    fn add_lane(
        &self,
        lane: usize,
        kind: CounterKind,
        slot: u64,
        id: u64,
        delta: i64,
        now: Timestamp,
    ) -> i64 {
        self.add_in(&self.lanes[lane].scope, kind, slot, id, delta, now)
    }

    fn add_in(
        &self,
        scope: &Arc<str>,
        kind: CounterKind,
        slot: u64,
        id: u64,
        delta: i64,
        now: Timestamp,
    ) -> i64 {
        let expire = match kind {
            CounterKind::Active => (slot + self.session_minutes + 2) * 60,
            CounterKind::Waiting | CounterKind::Arrived => (slot + self.live_ticks + 2) * TICK_SECS,
            CounterKind::Admitted => (slot + 3) * 60,
            CounterKind::Arrivals | CounterKind::Returned => (slot + RETURN_MINUTES + 2) * 60,
            // Not capacity counters.
            CounterKind::Window | CounterKind::Granted | CounterKind::GrantUsed => (slot + 2) * 60,
            // Kept while the account checks in (`keep_account`).
            CounterKind::Account => {
                now.secs() + self.rejoin_grace.as_secs() + self.live_window().as_secs()
            }
            // Counted until the start, and a little after (a view taken at the start).
            CounterKind::PreQueued => slot + 120,
        };
        self.store.add(
            &self.key_in(scope, kind, slot, id),
            delta,
            now,
            Timestamp::from_secs(expire),
        )
    }

    fn first_active_minute(&self, now_minute: u64) -> u64 {
        now_minute.saturating_sub(self.session_minutes)
    }

    fn first_live_tick(&self, now_tick: u64) -> u64 {
        now_tick.saturating_sub(self.live_ticks)
    }
}

/// The session an allow token belongs to: every token of one admission carries the same
/// identity, arrival and admission time, whichever minute it was renewed in.
pub(crate) fn session_of(claims: &Claims) -> u64 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(claims.uid.as_bytes());
    h.update([0]);
    h.update(claims.arr.map_or(u64::MAX, token_secs).to_le_bytes());
    h.update(claims.acc.unwrap_or(u64::MAX).to_le_bytes());
    let digest = h.finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(bytes)
}

fn revoked_mark(session: u64) -> Mark {
    Mark {
        kind: MarkKind::Revoked,
        id: session,
    }
}

/// A uniform draw fixed for an identity arriving in a given second (the jitter of a first
/// check-in): two devices of one identity arriving together get the same token.
fn arrival_draw(uid: &Identity, now: Timestamp) -> f64 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(uid.as_str().as_bytes());
    h.update(now.secs().to_le_bytes());
    let digest = h.finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    unit_interval(u64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests;
