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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand_chacha::rand_core::RngCore;

use crate::autopilot::pilot::PilotHandle;
use crate::config::{CapacityConfig, QueueOrder};
use crate::identity::Identity;
use crate::keys::KeyRing;
use crate::pages::Estimates;
use crate::store::{
    Allotment, CounterKey, CounterKind, CounterStore, Mark, MarkKind, WindowCounter, WindowSpec,
};
use crate::time::Timestamp;
use crate::token::{unit_interval, Claims, Dec, Reject, Token};

use super::event::prequeue_place;
use super::{CookieAction, Decision, Hold, Outcome, Place, Presented};
use crate::config::EventConfig;

/// Length of the check-in rate window.
const CHECKIN_WINDOW: Duration = Duration::from_secs(10);
/// The aggregate view of the queue is recomputed at most this often.
const VIEW_TTL_MS: u64 = 1_000;
/// Waiting users are counted by the tick of their last check-in.
pub const TICK_SECS: u64 = 5;
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
    /// Users waiting (and checking in) in buckets older than `bucket`.
    pub fn ahead_of(&self, bucket: u64) -> u64 {
        self.waiting.range(..bucket).map(|(_, n)| n).sum()
    }

    /// Users expected ahead of `bucket`: those checking in, and the share of new arrivals that
    /// will come back.
    pub fn expected_ahead(&self, bucket: u64) -> f64 {
        let new: u64 = self.arrived.range(..bucket).map(|(_, n)| n).sum();
        self.ahead_of(bucket) as f64 + new as f64 * self.return_rate
    }

    /// Users expected in `bucket` itself, counted the same way.
    pub fn expected_in_bucket(&self, bucket: u64) -> f64 {
        let get = |m: &BTreeMap<u64, u64>| m.get(&bucket).copied().unwrap_or(0) as f64;
        get(&self.waiting) + get(&self.arrived) * self.return_rate
    }

    /// Users expected to be waiting, counted the same way.
    pub fn expected_waiting(&self) -> f64 {
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
    pub fn expected_waiting(&self) -> f64 {
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
        }
    }

    /// Binds the tokens this room issues to `room`.
    pub fn bind_to(&mut self, room: Arc<str>) {
        self.bound = Some(room);
    }

    /// Admits at the pace `pilot` sets while it runs.
    pub fn steer_by(&mut self, pilot: PilotHandle) {
        self.pilot = pilot;
    }

    /// `new_users_per_minute` in force: the autopilot's while it runs, else the configured one.
    pub fn new_per_minute(&self) -> u64 {
        match self.pilot.pace() {
            Some(pace) => u64::from(pace),
            None => self.new_per_minute,
        }
    }

    /// `new_users_per_minute` as configured.
    pub fn configured_new_per_minute(&self) -> u32 {
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
    pub fn is_revoked(&self, claims: &Claims, now: Timestamp) -> bool {
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
    pub fn live_window(&self) -> Duration {
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

    /// The queue of `lane` now; the room's active users with lane 0's.
    fn compute_view(&self, lane: usize, now: Timestamp) -> QueueView {
        let scope = &self.lanes[lane].scope;
        let minute = now.minute();
        let first_active = self.first_active_minute(minute);
        let active: i64 = if lane == 0 {
            self.store
                .scan(&self.scope, CounterKind::Active, now)
                .iter()
                .filter(|(m, _, _)| (first_active..=minute).contains(m))
                .map(|(_, _, v)| v)
                .sum()
        } else {
            0
        };
        let tick = now.secs() / TICK_SECS;
        let first_live = self.first_live_tick(tick);
        let len_tag = self.bucket_secs << 40;
        let by_bucket = |kind| {
            let mut out = BTreeMap::new();
            for (t, id, v) in self.store.scan(scope, kind, now) {
                if (first_live..=tick).contains(&t) && id & !((1 << 40) - 1) == len_tag {
                    *out.entry(id & ((1 << 40) - 1)).or_insert(0i64) += v;
                }
            }
            out.into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(b, n)| (b, n as u64))
                .collect::<BTreeMap<u64, u64>>()
        };
        let waiting = by_bucket(CounterKind::Waiting);
        let arrived = by_bucket(CounterKind::Arrived);
        // Arrivals of the last minutes against first check-ins of the same minutes (a first
        // check-in comes a refresh after its arrival, so the newest minute is left out).
        let sum = |kind, from: u64, to: u64| -> i64 {
            self.split_minutes(scope, kind, from..=to, now)
                .into_iter()
                .map(|(synced, pending)| (synced + pending).max(0))
                .sum()
        };
        let first = minute.saturating_sub(RETURN_MINUTES);
        let arrivals = sum(CounterKind::Arrivals, first, minute.saturating_sub(1));
        let returned = sum(CounterKind::Returned, first, minute);
        let return_rate = if arrivals < 10 {
            1.0
        } else {
            (returned as f64 / arrivals as f64).clamp(0.05, 1.0)
        };
        let admitted_last_minute = self.admitted(lane, minute.saturating_sub(1), now);
        QueueView {
            at_ms: now.millis(),
            active: active.max(0) as u64,
            waiting_total: waiting.values().sum(),
            waiting,
            arrived,
            return_rate,
            admitted_last_minute,
            share: 1.0,
        }
    }

    /// Visitors let in during `minute`: from `lane` in a room with lanes, else all of them.
    fn admitted(&self, lane: usize, minute: u64, now: Timestamp) -> u64 {
        self.store.get(&self.admitted_key(lane, minute), now).max(0) as u64
    }

    /// Where `lane`'s admissions in `minute` are counted (the room's own without lanes).
    fn admitted_key(&self, lane: usize, minute: u64) -> CounterKey {
        if self.laned() {
            self.key_in(
                &self.lanes[lane].scope,
                CounterKind::Admitted,
                minute,
                LANE_ADMITTED,
            )
        } else {
            self.key(CounterKind::Admitted, minute, 0)
        }
    }

    /// Every lane's queue as of at most a second ago (recomputed in a new minute straight
    /// away), each with its share of the slots.
    pub fn views(&self, now: Timestamp) -> Arc<Views> {
        let mut cached = self.views.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = cached.as_ref() {
            let fresh = now.millis().saturating_sub(v.at_ms) < VIEW_TTL_MS
                && v.at_ms / 60_000 == now.minute()
                && v.at_ms <= now.millis();
            if fresh {
                return v.clone();
            }
        }
        let mut lanes: Vec<QueueView> = (0..self.lanes.len())
            .map(|lane| self.compute_view(lane, now))
            .collect();
        if self.laned() {
            // A lane's share among the lanes with visitors waiting, itself included.
            let busy: u64 = lanes
                .iter()
                .zip(&self.lanes)
                .filter(|(v, _)| v.expected_waiting() > 0.0)
                .map(|(_, l)| u64::from(l.weight))
                .sum();
            for (view, lane) in lanes.iter_mut().zip(&self.lanes) {
                let others = if view.expected_waiting() > 0.0 {
                    busy - u64::from(lane.weight)
                } else {
                    busy
                };
                view.share = f64::from(lane.weight) / (others + u64::from(lane.weight)) as f64;
            }
        }
        let v = Arc::new(Views {
            at_ms: now.millis(),
            lanes: lanes.into_iter().map(Arc::new).collect(),
        });
        *cached = Some(v.clone());
        v
    }

    /// The `public` lane's queue (the whole queue in a room without lanes), as [`Capacity::views`].
    pub fn view(&self, now: Timestamp) -> Arc<QueueView> {
        self.views(now).lanes[0].clone()
    }

    /// Forgets the cached views (after an admission or a departure changes the counts).
    fn invalidate(&self) {
        *self.views.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The free slots: the cluster's (for the order of the queue and the estimates) and this
    /// node's part of them (what it may give now). With a store of one process they are the
    /// same: min(`new_users_per_minute` − admitted this minute, `total_active_users` − active
    /// users). In a cluster, this node's part is its allotment of the slots free at
    /// the last sync, less what it admitted since; `None` = no limit.
    pub fn slots(&self, now: Timestamp) -> Slots {
        let (cluster, here) = self.headroom(now);
        Slots {
            cluster: cluster.map(|c| c.max(0) as u64),
            here: here.map(|h| h.max(0) as u64),
        }
    }

    /// The free slots `lane` may take now. With lanes, the minute's slots (those
    /// given so far and those free) are split by weight among the lanes with visitors waiting,
    /// none given more than it let in plus those waiting in it (what it leaves goes to the
    /// others, so a lane nobody waits in gives its share away); a lane takes what is left of its
    /// part. In the minute's last [`LANES_OPEN_SECS`] (or its last check-in interval, if
    /// shorter) the parts no longer hold: liveness first, the slots nobody took go to whoever
    /// checks in.
    fn lane_slots(&self, views: &Views, lane: usize, slots: Slots, now: Timestamp) -> Slots {
        let Some(free) = slots.cluster.filter(|_| self.laned()) else {
            return slots;
        };
        let second = (now.millis() % 60_000) as f64 / 1000.0;
        if second >= 60.0 - (1.2 * self.refresh.as_secs_f64()).min(LANES_OPEN_SECS) {
            return slots;
        }
        let minute = now.minute();
        let given: Vec<u64> = (0..self.lanes.len())
            .map(|l| self.admitted(l, minute, now))
            .collect();
        let total = given.iter().sum::<u64>() + free;
        let asks: Vec<(f64, f64)> = self
            .lanes
            .iter()
            .zip(&views.lanes)
            .zip(&given)
            .map(|((l, v), g)| (f64::from(l.weight), *g as f64 + v.expected_waiting()))
            .collect();
        let parts = apportion(total as f64, &asks);
        let left = (parts[lane] - given[lane] as f64).max(0.0).ceil() as u64;
        // In a cluster a node gives at most its part of the lane's part, less what it gave in
        // the lane itself, as it does with the room's slots: nodes that have not yet seen each
        // other's admissions cannot each give a lane its whole part.
        let mut here = slots.here.map(|h| h.min(left));
        if let (Some(h), Some(mine)) = (
            here,
            self.store
                .allotment(&self.scope)
                .of(parts[lane].ceil() as u64),
        ) {
            let own = self.store.own(&self.admitted_key(lane, minute), now).max(0) as u64;
            here = Some(h.min(mine.saturating_sub(own)));
        }
        Slots {
            cluster: Some(free.min(left)),
            here,
        }
    }

    /// Signed headroom (cluster, here): negative when over a limit.
    fn headroom(&self, now: Timestamp) -> (Option<i64>, Option<i64>) {
        let allotment = self.store.allotment(&self.scope);
        let minute = now.minute();
        let mut cluster: Option<i64> = None;
        let mut here: Option<i64> = None;
        let mut limit = |cap: u64, (synced, pending): (i64, i64)| {
            let cap = cap as i64;
            let c = cap - (synced + pending).max(0);
            let free_at_sync = (cap - synced.max(0)).max(0) as u64;
            let h = allotment.of(free_at_sync).map(|part| part as i64 - pending);
            cluster = Some(cluster.map_or(c, |x| x.min(c)));
            here = match (here, h) {
                (_, None) => None,
                (None, Some(h)) => Some(h),
                (Some(x), Some(h)) => Some(x.min(h)),
            };
        };
        let admitted_key = self.key(CounterKind::Admitted, minute, 0);
        let new_per_minute = self.new_per_minute();
        if new_per_minute > 0 {
            limit(new_per_minute, self.store.split(&admitted_key, now));
        }
        if self.total_active > 0 {
            let minutes = self.first_active_minute(minute)..=minute;
            let split = self
                .split_minutes(&self.scope, CounterKind::Active, minutes, now)
                .into_iter()
                .fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
            limit(self.total_active, split);
        }
        // Until the minute's last part, a node gives at most its part of the whole minute's
        // slots: parts apportioned from the same weights add up to the cap, so nodes that have
        // not seen each other's latest admissions cannot give the same slot twice. In the last
        // part, slots left unused anywhere go to whoever has users checking in.
        if new_per_minute > 0 && now.millis() % 60_000 < RECLAIM_FROM_MS {
            if let (Some(h), Some(part)) = (here, allotment.of(new_per_minute)) {
                let mine = self.store.own(&admitted_key, now);
                here = Some(h.min(part as i64 - mine));
            }
        }
        if allotment == Allotment::Open {
            here = None;
        }
        (cluster, here)
    }

    /// Reserves a slot for one admission from `lane` now; false (and nothing changed) when a
    /// limit would be exceeded, in the cluster as this node last saw it or in this node's part.
    fn try_admit(&self, lane: usize, now: Timestamp) -> bool {
        let minute = now.minute();
        self.add(CounterKind::Admitted, minute, 0, 1, now);
        self.add(CounterKind::Active, minute, 0, 1, now);
        let (cluster, here) = self.headroom(now);
        let open = self.store.allotment(&self.scope) == Allotment::Open;
        if here.is_some_and(|h| h < 0) || (!open && cluster.is_some_and(|c| c < 0)) {
            self.add(CounterKind::Active, minute, 0, -1, now);
            self.add(CounterKind::Admitted, minute, 0, -1, now);
            return false;
        }
        self.count_lane_admission(lane, now);
        true
    }

    /// Counts an admission from `lane` (in a room with lanes, for the split of the slots).
    fn count_lane_admission(&self, lane: usize, now: Timestamp) {
        if self.laned() {
            let minute = now.minute();
            self.add_lane(lane, CounterKind::Admitted, minute, LANE_ADMITTED, 1, now);
        }
        self.invalidate();
    }

    /// Moves an active user's count to this minute (`counted`: the minute they were counted in).
    fn touch_active(&self, counted: Option<u64>, now: Timestamp) {
        let minute = now.minute();
        self.add(CounterKind::Active, minute, 0, 1, now);
        if let Some(c) = counted.filter(|c| *c < minute && *c >= self.first_active_minute(minute)) {
            self.add(CounterKind::Active, c, 0, -1, now);
        }
    }

    /// Counts a waiting user of `bucket` at this tick; `counted` is the tick they were counted
    /// at before (their count moves).
    fn touch_waiting(&self, lane: usize, bucket: u64, counted: Option<u64>, now: Timestamp) {
        let tick = now.secs() / TICK_SECS;
        if counted == Some(tick) {
            return;
        }
        let id = bucket_id(bucket, self.bucket_secs);
        self.add_lane(lane, CounterKind::Waiting, tick, id, 1, now);
        if let Some(c) = counted.filter(|c| *c < tick && *c >= self.first_live_tick(tick)) {
            self.add_lane(lane, CounterKind::Waiting, c, id, -1, now);
        }
    }

    /// A waiting user leaves the queue (admitted).
    fn leave_queue(&self, lane: usize, bucket: u64, counted: Option<u64>, now: Timestamp) {
        let tick = now.secs() / TICK_SECS;
        if let Some(c) = counted.filter(|c| *c >= self.first_live_tick(tick)) {
            let id = bucket_id(bucket, self.bucket_secs);
            self.add_lane(lane, CounterKind::Waiting, c, id, -1, now);
        }
    }

    /// A new arrival joins the queue: counted apart until they come back.
    fn join(&self, lane: usize, bucket: u64, now: Timestamp) {
        let id = bucket_id(bucket, self.bucket_secs);
        self.add_lane(
            lane,
            CounterKind::Arrived,
            now.secs() / TICK_SECS,
            id,
            1,
            now,
        );
        self.add_lane(lane, CounterKind::Arrivals, now.minute(), 0, 1, now);
    }

    /// A new arrival's first check-in: no longer counted apart (`arrived`: the tick they
    /// arrived at). They then hold a place (`touch_waiting`), or leave with a slot.
    fn came_back(&self, lane: usize, bucket: u64, arrived: u64, now: Timestamp) {
        let tick = now.secs() / TICK_SECS;
        if arrived >= self.first_live_tick(tick) {
            let id = bucket_id(bucket, self.bucket_secs);
            self.add_lane(lane, CounterKind::Arrived, arrived, id, -1, now);
        }
        self.add_lane(lane, CounterKind::Returned, now.minute(), 0, 1, now);
    }

    /// Ends an admitted user's session (origin said `Vestibule-Command: revoke`). The place is
    /// given back once: the session is remembered as revoked until every token of it has
    /// expired, so a replayed copy of its cookie is a new arrival and a replayed revoke frees
    /// nothing.
    pub fn revoke(&self, place: Place, now: Timestamp) {
        let until = Timestamp::from_secs((now.minute() + self.session_minutes + 2) * 60);
        if !self
            .store
            .mark(&self.scope, revoked_mark(place.session), until, now)
        {
            return;
        }
        if place.minute >= self.first_active_minute(now.minute()) {
            self.add(CounterKind::Active, place.minute, 0, -1, now);
            self.invalidate();
        }
    }

    /// The chance that an eligible check-in of `lane` gets in now (random queueing), `free`
    /// being the slots the lane may take.
    fn random_chance(&self, lane: usize, free: Option<u64>, now: Timestamp) -> f64 {
        let Some(free) = free else { return 1.0 };
        if free == 0 {
            return 0.0;
        }
        let per_sec =
            self.checkins.peek(lane as u64, now).weighted() / CHECKIN_WINDOW.as_secs_f64();
        let secs_left = (60 - now.secs() % 60) as f64;
        // A little more than the even share: the rate is an estimate, a check-in that finds no
        // slot left just waits, and slots not given this minute are lost.
        let expected = per_sec * secs_left / RANDOM_BOOST;
        if expected <= free as f64 {
            1.0
        } else {
            free as f64 / expected
        }
    }

    /// Whether a user who arrived at `arrival` may be let in now (fifo queueing): fewer users
    /// who came back are waiting in older buckets than there are free slots, and their bucket
    /// is at the head of the queue: the oldest bucket of users who came back, or the next one.
    ///
    /// Free slots alone would make a whole minute's worth of buckets eligible at once and let
    /// them in in check-in order; the head keeps users let in out of arrival order within two
    /// buckets, one refresh interval, of each other. The head is taken among users who came back
    /// (new arrivals who walked away must not hold the queue), and only holds while there is a
    /// queue: with nobody waiting, new arrivals get in at their first check-in.
    ///
    /// Liveness comes first, though: when the head holds too few users to take a minute's slots
    /// (thin buckets: arrivals sparse, or most walked away), the slots left in the minute's last
    /// check-in interval go to the first [`Capacity::front`] users whatever their bucket, rather
    /// than being lost. Only those late slots can reorder more than one refresh interval.
    fn fifo_reserved(
        &self,
        view: &QueueView,
        arrival: u64,
        free: Option<u64>,
        now: Timestamp,
    ) -> bool {
        let Some(free) = free else { return true };
        let bucket = self.bucket(arrival);
        let ahead = view.ahead_of(bucket);
        if ahead >= free {
            return false;
        }
        let head = view.waiting.keys().next().copied();
        if head.is_none_or(|head| bucket <= head + 1) {
            return true;
        }
        // Behind the head: only for the minute's last slots, and only those the head cannot
        // take.
        let second = (now.millis() % 60_000) as f64 / 1000.0;
        let last_interval = second >= 60.0 - 1.2 * self.refresh.as_secs_f64();
        let in_head: u64 = head.map_or(0, |h| view.waiting.range(h..=h + 1).map(|(_, n)| n).sum());
        last_interval && in_head < free && ahead < self.front(view)
    }

    /// The users one check-in interval (1.2 × refresh) takes at the admission pace.
    fn front(&self, view: &QueueView) -> u64 {
        let pace = self
            .admission_rate(view)
            .max(self.new_per_minute() as f64 * view.share);
        (pace * 1.2 * self.refresh.as_secs_f64() / 60.0).ceil() as u64
    }

    /// Users expected ahead of someone who arrived at `arrival` (Unix seconds): the older
    /// buckets, and the share of their own bucket that arrived before them (arrivals spread
    /// evenly over a bucket, as far as anyone can tell).
    fn position(&self, view: &QueueView, arrival: u64) -> f64 {
        let bucket = self.bucket(arrival);
        let into = (arrival - bucket * self.bucket_secs) as f64 / self.bucket_secs as f64;
        let mates = (view.expected_in_bucket(bucket) - 1.0).max(0.0);
        view.expected_ahead(bucket) + into * mates
    }

    /// Chance (0–1) that an eligible waiting user gets in at a check-in now.
    fn admit_chance(&self, view: &QueueView, slots: Slots, now: Timestamp) -> f64 {
        if self.queue_all {
            return 0.0;
        }
        match self.order {
            QueueOrder::Random => self.random_chance(0, slots.here, now),
            QueueOrder::Fifo => match slots.cluster {
                None => 1.0,
                Some(_) if view.waiting_total == 0 => 1.0,
                Some(f) => (f as f64 / view.waiting_total as f64).min(1.0),
            },
        }
    }

    /// Admissions per minute to expect (from a lane, with lanes): last minute's, or before
    /// there is any history, the configured pace (the lane's share of it).
    fn admission_rate(&self, view: &QueueView) -> f64 {
        if view.admitted_last_minute > 0 {
            view.admitted_last_minute as f64
        } else {
            self.new_per_minute() as f64 * view.share
        }
    }

    /// The wait until a check-in, at quantile `q` of the jitter (0.8–1.2 × refresh), minutes.
    fn check_in_minutes(&self, q: f64) -> f64 {
        self.refresh.as_secs_f64() * (0.8 + 0.4 * q) / 60.0
    }

    /// Users ahead (fifo) and the wait estimates, in minutes, for a user who arrived at
    /// `arrival` and is waiting now. Nobody still waiting is told less than the time to their
    /// next check-in.
    pub fn estimates(
        &self,
        view: &QueueView,
        arrival: u64,
        free: Option<u64>,
        now: Timestamp,
    ) -> (Option<u64>, Estimates) {
        let rate = self.admission_rate(view);
        if self.queue_all {
            // Nobody is let in until the operator says so: no time to promise.
            let none = Estimates {
                p25: None,
                p50: None,
                p75: None,
            };
            let ahead = (self.order == QueueOrder::Fifo)
                .then(|| self.position(view, arrival).round() as u64);
            return (ahead, none);
        }
        let quartiles = |f: &dyn Fn(f64) -> Option<f64>| Estimates {
            p25: f(0.25),
            p50: f(0.5),
            p75: f(0.75),
        };
        match self.order {
            QueueOrder::Fifo => {
                let bucket = self.bucket(arrival);
                let ahead = view.expected_ahead(bucket);
                // Within a bucket the order is the order of check-ins: anywhere in it.
                let own = view.expected_in_bucket(bucket).max(1.0);
                // A head's worth of users: two buckets (see `eligible`), at the queue's mean
                // bucket size (the oldest bucket alone is often half taken).
                let buckets = view.waiting.keys().chain(view.arrived.keys());
                let buckets = buckets.collect::<std::collections::BTreeSet<_>>().len();
                let head = 2.0 * view.expected_waiting() / buckets.max(1) as f64;
                // What is left of this minute goes first, then `rate` at each minute, each
                // slot taken at a check-in.
                let to_next_minute = (60 - now.secs() % 60) as f64 / 60.0;
                let free_now = free.map_or(f64::INFINITY, |f| f as f64);
                let at = |q: f64| -> Option<f64> {
                    let position = ahead + q * own;
                    if position < free_now {
                        return Some(self.check_in_minutes(q));
                    }
                    (rate > 0.0).then(|| {
                        // The minute's slots go at check-ins after it starts, to the head's
                        // users as they check in; when the head holds fewer users than the
                        // minute lets in, the rest go one check-in later each time the next
                        // buckets become the head, so a place late in the minute waits longer.
                        let slot = (position - free_now) / rate;
                        let passes = (rate / head.max(1.0))
                            .clamp(1.0, (60.0 / self.refresh.as_secs_f64()).max(1.0));
                        let late = 1.2 * q + slot.fract() * (passes - 1.0);
                        let wait = to_next_minute
                            + slot.floor()
                            + late * self.refresh.as_secs_f64() / 60.0;
                        wait.max(self.check_in_minutes(q))
                    })
                };
                (
                    Some(self.position(view, arrival).round() as u64),
                    quartiles(&at),
                )
            }
            QueueOrder::Random => {
                let waiting = view.expected_waiting().max(1.0);
                // Joining per minute: the arrivals of the last minute that are expected to
                // stay. A queue that grows thins everyone's chance as they wait.
                let recent = self.bucket(now.secs().saturating_sub(60));
                let buckets: std::collections::BTreeSet<u64> = view
                    .waiting
                    .range(recent..)
                    .chain(view.arrived.range(recent..))
                    .map(|(b, _)| *b)
                    .collect();
                let joined: f64 = buckets.iter().map(|b| view.expected_in_bucket(*b)).sum();
                let span_minutes =
                    now.secs().saturating_sub(recent * self.bucket_secs).max(1) as f64 / 60.0;
                let joining = joined / span_minutes;
                let waits = random_wait_quantiles(waiting, joining, rate);
                let at = |p: f64| -> Option<f64> {
                    let floor = self.check_in_minutes(p);
                    let i = [0.25, 0.5, 0.75].iter().position(|q| *q == p)?;
                    waits[i].map(|m| m.max(floor))
                };
                (None, quartiles(&at))
            }
        }
    }

    /// The room's figures; the chance and the estimate are the `public` lane's.
    pub fn figures(&self, now: Timestamp) -> Figures {
        let views = self.views(now);
        let view = &views.lanes[0];
        let slots = self.slots(now);
        let public = self.lane_slots(&views, 0, slots, now);
        let lanes = self
            .lanes
            .iter()
            .zip(&views.lanes)
            .map(|(l, v)| LaneFigures {
                name: l.name.clone(),
                weight: l.weight,
                waiting: v.expected_waiting().round() as u64,
                admitted_last_minute: v.admitted_last_minute,
            })
            .collect();
        let last_minute = now.minute().saturating_sub(1);
        Figures {
            active: view.active,
            waiting: views.expected_waiting().round() as u64,
            free_slots: slots.cluster,
            admitted_last_minute: self
                .store
                .get(&self.key(CounterKind::Admitted, last_minute, 0), now)
                .max(0) as u64,
            admit_chance: self.admit_chance(view, public, now),
            estimates: self.estimates(view, now.secs(), public.cluster, now).1,
            lanes,
        }
    }

    /// 0.8–1.2 × refresh, from a uniform draw.
    fn interval(&self, u: f64) -> u64 {
        (self.refresh.as_secs_f64() * (0.8 + 0.4 * u))
            .round()
            .max(1.0) as u64
    }

    fn wait_token(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        (lane, arrival_secs): (usize, u64),
        interval: u64,
        now: Timestamp,
    ) -> Arc<str> {
        let key = ring.active();
        let mut claims = Claims::new(Dec::Wait, now.secs() + interval, uid, key.id())
            .in_room(self.bound.as_ref());
        claims.lane = self.lane_claim(lane);
        claims.arr = Some(arrival_secs);
        claims.chk = Some(now.secs());
        claims.refresh = Some(interval as u32);
        claims.sign(key).into()
    }

    fn allow_claims(
        &self,
        uid: &Identity,
        kid: &str,
        arrival_secs: Option<u64>,
        accepted_ms: u64,
        now: Timestamp,
    ) -> Claims {
        let minute = now.minute();
        let mut claims = Claims::new(
            Dec::Allow,
            (minute + self.session_minutes + 1) * 60,
            uid,
            kid,
        )
        .in_room(self.bound.as_ref());
        claims.arr = arrival_secs;
        claims.acc = Some(accepted_ms);
        claims.chk = Some(now.secs());
        claims
    }

    fn waiting_outcome(
        &self,
        decision: Decision,
        cookie: CookieAction,
        views: &Views,
        (lane, arrival): (usize, u64),
        refresh_secs: u64,
        now: Timestamp,
    ) -> Outcome {
        let mut outcome = Outcome::new(decision, cookie);
        outcome.refresh_secs = refresh_secs.max(1);
        let free = self.lane_slots(views, lane, self.slots(now), now).cluster;
        let (ahead, estimates) = self.estimates(&views.lanes[lane], arrival, free, now);
        outcome.users_ahead = ahead;
        outcome.estimates = estimates;
        outcome
    }

    fn admit(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        arrival_secs: Option<u64>,
        now: Timestamp,
    ) -> Outcome {
        let key = ring.active();
        let claims = self.allow_claims(uid, key.id(), arrival_secs, now.millis(), now);
        let place = Place {
            session: session_of(&claims),
            minute: now.minute(),
        };
        let mut outcome = Outcome::new(Decision::Allow, CookieAction::Set(claims.sign(key).into()));
        outcome.admitted = true;
        outcome.place = Some(place);
        outcome
    }

    pub fn decide(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        presented: &Presented,
        now: Timestamp,
    ) -> Outcome {
        self.decide_held(ring, uid, presented, &Hold::NONE, now)
    }

    /// Decides under what holds the room beyond its settings (operator actions).
    pub fn decide_held(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        presented: &Presented,
        hold: &Hold,
        now: Timestamp,
    ) -> Outcome {
        let valid = presented.valid.as_ref();

        // Admitted users keep access, whatever else holds the room, until their session is
        // revoked: then they are a new arrival.
        if let Some(token) = valid.filter(|t| t.claims.dec == Dec::Allow) {
            if let Some(session) = self.live_session(&token.claims, now) {
                return self.keep_active(ring, uid, token, session, now);
            }
            let mut outcome = self.arrive(ring, uid, hold, now);
            outcome.rejected = Some(Reject::Revoked);
            return outcome;
        }

        // A waiting user (a capacity token; a lottery wait token starts over), unless they were
        // gone longer than `rejoin_grace`: then they are a new arrival.
        if let Some(token) = valid.filter(|t| t.claims.dec == Dec::Wait && t.claims.arr.is_some()) {
            // A pre-queue token (no check-in yet) of the running event: in line since the start.
            let since = match (token.claims.chk, hold.event) {
                (None, Some(event)) => event.start,
                _ => 0,
            };
            if self.within_grace(&token.claims, since, now) {
                return self.check_in(ring, uid, token, hold, now);
            }
            let mut outcome = self.arrive(ring, uid, hold, now);
            outcome.rejected = Some(Reject::Expired);
            return outcome;
        }
        self.arrive(ring, uid, hold, now)
    }

    /// A new arrival: straight in while there are free slots and nobody waits (in any lane),
    /// else the queue of their lane (`hold.lane`: an invitation's).
    fn arrive(&self, ring: &KeyRing, uid: &Identity, hold: &Hold, now: Timestamp) -> Outcome {
        self.store.demand(&self.scope, 1, now);
        let lane = self.lane_of(hold.lane);
        let views = self.views(now);
        // Nobody waiting, not even a recent arrival who has not come back yet: straight in.
        if !self.queue_all
            && !hold.held
            && !self.prequeue_first(hold.event, &views, now)
            && views.is_empty()
            && self.slots(now).here != Some(0)
            && self.try_admit(lane, now)
        {
            return self.admit(ring, uid, Some(now.secs()), now);
        }
        // The line is full: no place in it, and those in it keep theirs.
        if self.max_waiting > 0 && views.expected_waiting() >= self.max_waiting as f64 {
            let mut outcome = Outcome::new(Decision::QueueFull, CookieAction::Keep);
            outcome.refresh_secs = self.refresh_secs();
            return outcome;
        }
        let bucket = self.bucket(now.secs());
        let interval = self.interval(arrival_draw(uid, now));
        self.join(lane, bucket, now);
        self.invalidate();
        let place = (lane, now.secs());
        let cookie = CookieAction::Set(self.wait_token(ring, uid, place, interval, now));
        // The estimate counts this user in their bucket.
        let views = self.views(now);
        self.waiting_outcome(Decision::Anon, cookie, &views, place, interval, now)
    }

    fn keep_active(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        token: &Token,
        session: u64,
        now: Timestamp,
    ) -> Outcome {
        let minute = now.minute();
        let c = &token.claims;
        let counted = c.chk.map(|v| token_secs(v) / 60);
        let key = ring.active();
        let mut outcome = Outcome::new(Decision::Allow, CookieAction::Keep);
        outcome.place = Some(Place { session, minute });
        if counted == Some(minute) && c.kid == key.id() {
            return outcome;
        }
        if counted != Some(minute) {
            self.touch_active(counted, now);
        }
        let accepted = c.acc.unwrap_or(now.millis());
        let claims = self.allow_claims(uid, key.id(), c.arr.map(token_secs), accepted, now);
        outcome.cookie = CookieAction::Set(claims.sign(key).into());
        outcome
    }

    /// Whether a waiting user was last seen (their last check-in, else their arrival; `since`
    /// if later) within `rejoin_grace`: then they keep their place.
    fn within_grace(&self, claims: &Claims, since: u64, now: Timestamp) -> bool {
        let last = token_secs(claims.chk.or(claims.arr).unwrap_or(0)).max(since);
        now.secs().saturating_sub(last) <= self.rejoin_grace.as_secs()
    }

    /// An event's pre-queue: nobody new is let in, admitted users keep access, and
    /// everyone else gets, or keeps, a pre-queue token: their arrival (kept from an earlier wait
    /// token, else now; before the start's arrival bucket either way, so the pre-queue is ahead
    /// of later arrivals), no check-in yet (`chk` absent: counted from their first check-in
    /// in the event), due in the event's first refresh interval at the moment of their place in
    /// the pre-queue ([`prequeue_place`]), so pre-queued visitors come back in that order, and
    /// not all in the same second.
    pub fn prequeue(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        presented: &Presented,
        (event, lane): (&EventConfig, Option<&str>),
        now: Timestamp,
    ) -> Outcome {
        let valid = presented.valid.as_ref();
        if let Some(token) = valid.filter(|t| t.claims.dec == Dec::Allow) {
            if let Some(session) = self.live_session(&token.claims, now) {
                return self.keep_active(ring, uid, token, session, now);
            }
        }
        let waiting = valid.filter(|t| t.claims.dec == Dec::Wait && t.claims.arr.is_some());
        let first_interval = event.start..event.start + self.refresh_secs();
        let in_line = waiting
            .filter(|t| t.claims.chk.is_none() && first_interval.contains(&t.claims.exp))
            .map(|t| t.claims.exp);
        let (cookie, due) = match in_line {
            Some(exp) => (CookieAction::Keep, exp),
            None => {
                // Someone already waiting keeps their arrival, unless they were gone too long.
                let kept = waiting
                    .filter(|t| self.within_grace(&t.claims, 0, now))
                    .map(|t| token_secs(t.claims.arr.unwrap_or(0)));
                let head_of_start = self.bucket(event.start) * self.bucket_secs;
                let arrival = kept
                    .unwrap_or(now.secs())
                    .min(head_of_start.saturating_sub(1));
                let place = prequeue_place(ring.active(), event, uid, arrival);
                let due = event.start + (place * self.refresh_secs() as f64) as u64;
                let key = ring.active();
                let mut claims =
                    Claims::new(Dec::Wait, due, uid, key.id()).in_room(self.bound.as_ref());
                // The lane of the token they hold, else the invitation's they bring.
                let lane = waiting.map_or(lane, |t| t.claims.lane.as_deref());
                claims.lane = self.lane_claim(self.lane_of(lane));
                claims.arr = Some(arrival);
                claims.refresh = Some(u32::try_from(due - now.secs().min(due)).unwrap_or(u32::MAX));
                (CookieAction::Set(claims.sign(key).into()), due)
            }
        };
        Outcome::prequeued(cookie, due, now)
    }

    /// Where a pre-queued visitor who arrived at `arrival` stands once `event` has started:
    /// with `shuffle_at_start`, an arrival drawn for their identity within the pre-queue's
    /// buckets (those before the start's), so the order among them is the draw; else their
    /// arrival. Visitors who arrived before the pre-queue opened keep their place ahead of it.
    fn prequeued_place(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        event: &EventConfig,
        arrival: u64,
    ) -> u64 {
        let Some(opens) = event.prequeue_start else {
            return arrival;
        };
        if !event.shuffle_at_start || !(opens..event.start).contains(&arrival) {
            return arrival;
        }
        let head_of_start = self.bucket(event.start) * self.bucket_secs;
        let span = head_of_start.saturating_sub(opens).max(1);
        let place = prequeue_place(ring.active(), event, uid, arrival);
        (opens + (place * span as f64) as u64).min(head_of_start.saturating_sub(1))
    }

    /// Whether every pre-queued visitor of the running `event` can have made their first
    /// check-in, and so be counted in the bucket of their place: each is due within a refresh
    /// interval of the start, give or take what a browser adds.
    fn prequeue_counted(&self, event: &EventConfig, now: Timestamp) -> bool {
        now.secs() >= event.start + self.refresh_secs() + CHECKIN_SLACK_SECS.ceil() as u64
    }

    /// Whether the pre-queued visitors of the running `event` still go first: until all of
    /// them can have checked in (their first check-in falls within a refresh interval of the
    /// start, then the liveness window), and while any of them waits.
    fn prequeue_first(&self, event: Option<&EventConfig>, views: &Views, now: Timestamp) -> bool {
        let Some(event) = event.filter(|e| e.prequeue_start.is_some()) else {
            return false;
        };
        let settle = event.start + self.refresh_secs() + self.live_window().as_secs();
        let head_of_start = self.bucket(event.start);
        now.secs() < settle
            || views
                .lanes
                .iter()
                .any(|v| v.waiting.range(..head_of_start).next().is_some())
    }

    fn check_in(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        token: &Token,
        hold: &Hold,
        now: Timestamp,
    ) -> Outcome {
        let c = &token.claims;
        let mut arrival = c.arr.map_or(now.secs(), token_secs);
        // A pre-queue token's first check-in in the event: its place in the pre-queue.
        if let (Some(event), None) = (hold.event, c.chk) {
            arrival = self.prequeued_place(ring, uid, event, arrival);
        }
        let bucket = self.bucket(arrival);
        // Their lane is the one their token names (`public` if the room has no such lane now).
        let lane = self.lane_of(c.lane.as_deref());
        let views = self.views(now);
        let view = &views.lanes[lane];
        // Arrived after the start of an event whose pre-queued visitors still go first.
        let behind = hold.event.is_some_and(|e| arrival >= e.start)
            && self.prequeue_first(hold.event, &views, now);
        // Pre-queued: let in in the pre-queue's order (drawn, or of arrival), whatever the method.
        let prequeued = hold
            .event
            .is_some_and(|e| e.prequeue_start.is_some() && arrival < e.start);
        // The token of an arrival: counted apart, and back now for the first time.
        let first = c.chk.is_some() && c.chk == c.arr;
        let counted = c.chk.map(|v| token_secs(v) / TICK_SECS);
        // Too early: no chance, nothing counted, the cookie stands.
        if now.secs() < c.exp {
            return self.waiting_outcome(
                Decision::Wait,
                CookieAction::Keep,
                &views,
                (lane, arrival),
                c.exp - now.secs(),
                now,
            );
        }
        self.checkins.observe(lane as u64, 1, now);
        self.store.demand(&self.scope, 1, now);
        let Some(mut rng) = token.rng(ring) else {
            // Its key left the ring since it was checked: not trusted.
            return self.arrive(ring, uid, hold, now);
        };
        let draw = unit_interval(rng.next_u64());
        let jitter = unit_interval(rng.next_u64());
        let leave = || match (first, counted) {
            (true, Some(arrived)) => self.came_back(lane, bucket, arrived, now),
            _ => self.leave_queue(lane, bucket, counted, now),
        };
        if !self.queue_all && !hold.held && !behind {
            let slots = self.lane_slots(&views, lane, self.slots(now), now);
            let eligible = match self.order {
                // The pre-queue's order was settled at the start and everyone in it is
                // waiting: the first in it that a check-in interval takes may go, rather than
                // only the two head buckets (sparse in a long pre-queue), so its slots are not
                // lost while people are still checking in. But only once all of them can have
                // checked in: before that, those not counted yet are ahead of nobody, and the
                // slots would go in the order of check-ins, which is arrival order when a
                // crowd reloads at once.
                _ if prequeued => {
                    let ahead = view.ahead_of(bucket);
                    hold.event.is_some_and(|e| self.prequeue_counted(e, now))
                        && slots.cluster.is_none_or(|f| ahead < f)
                        && ahead < self.front(view)
                }
                QueueOrder::Fifo => self.fifo_reserved(view, arrival, slots.cluster, now),
                QueueOrder::Random => draw < self.random_chance(lane, slots.here, now),
            };
            if eligible && slots.here != Some(0) && self.try_admit(lane, now) {
                leave();
                return self.admit(ring, uid, Some(arrival), now);
            }
        }
        // An operator's `admit`, beyond the limits: fifo gives it to the head of the queue (the
        // oldest two buckets), random to whoever checks in first (check-ins come in a random
        // order).
        let at_head = !behind
            && match self.order {
                _ if prequeued => view
                    .waiting
                    .keys()
                    .next()
                    .is_none_or(|&head| bucket <= head + 1),
                QueueOrder::Fifo => view
                    .waiting
                    .keys()
                    .next()
                    .is_none_or(|&head| bucket <= head + 1),
                QueueOrder::Random => true,
            };
        if at_head && (hold.grant)() {
            self.add(CounterKind::Active, now.minute(), 0, 1, now);
            self.count_lane_admission(lane, now);
            leave();
            return self.admit(ring, uid, Some(arrival), now);
        }
        match (first, counted) {
            (true, Some(arrived)) => {
                self.came_back(lane, bucket, arrived, now);
                self.touch_waiting(lane, bucket, None, now);
            }
            _ => self.touch_waiting(lane, bucket, counted, now),
        }
        let interval = self.interval(jitter);
        let place = (lane, arrival);
        let cookie = CookieAction::Set(self.wait_token(ring, uid, place, interval, now));
        self.waiting_outcome(Decision::Wait, cookie, &views, place, interval, now)
    }
}

/// Splits `total` by weight among parties asking for at most so much each (`(weight, asks)`):
/// a party whose share would be more than it asks gets what it asks, and what it leaves goes
/// to the others by their weights. A party asking nothing gets nothing. The parts never add
/// up to more than `total`.
pub fn apportion(total: f64, parties: &[(f64, f64)]) -> Vec<f64> {
    let mut out = vec![0.0; parties.len()];
    let mut open: Vec<usize> = (0..parties.len())
        .filter(|&i| parties[i].0 > 0.0 && parties[i].1 > 0.0)
        .collect();
    let mut left = total.max(0.0);
    while !open.is_empty() && left > 0.0 {
        let weights: f64 = open.iter().map(|&i| parties[i].0).sum();
        let sated: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&i| parties[i].1 <= left * parties[i].0 / weights)
            .collect();
        if sated.is_empty() {
            for &i in &open {
                out[i] = left * parties[i].0 / weights;
            }
            break;
        }
        for &i in &sated {
            out[i] = parties[i].1;
            left -= parties[i].1;
        }
        open.retain(|i| !sated.contains(i));
    }
    out
}

/// `n = ln(1 − p) / ln(1 − P)`: the minutes within which a share `p` of waiting users get in,
/// when each gets in within a minute with probability `per_minute`.
pub fn random_wait_minutes(p: f64, per_minute: f64) -> f64 {
    (1.0 - p).ln() / (1.0 - per_minute).ln()
}

/// The 25th, 50th and 75th percentile of the wait, in minutes, of a user who joins a random
/// queue of `waiting` users, which `joining` more join each minute and `rate` leave admitted:
/// each minute they get in with chance `P = rate / waiting then`, so
/// `1 − Π(1 − P)` over the minutes waited reaches the percentile. With a queue that does not
/// grow this is the capacity design's `n = ln(1−p) / ln(1−P)`; with one that does, the later minutes'
/// smaller chances are counted. `None` past a day, or when nobody is let in.
pub fn random_wait_quantiles(waiting: f64, joining: f64, rate: f64) -> [Option<f64>; 3] {
    const QUANTILES: [f64; 3] = [0.25, 0.5, 0.75];
    let mut out = [None; 3];
    if rate <= 0.0 {
        return out;
    }
    let mut queue = waiting.max(1.0);
    let mut still_waiting = 1.0_f64;
    for minute in 0..(24 * 60) {
        let chance = (rate / queue).min(1.0);
        if chance >= 1.0 {
            // Everyone left is let in within this minute.
            for slot in out.iter_mut().filter(|o| o.is_none()) {
                *slot = Some(minute as f64);
            }
            return out;
        }
        let next = still_waiting * (1.0 - chance);
        for (slot, q) in out.iter_mut().zip(QUANTILES) {
            if slot.is_none() && 1.0 - next >= q {
                // Within the minute, as the constant-chance formula would place it.
                let into = ((1.0 - q) / still_waiting).ln() / (1.0 - chance).ln();
                *slot = Some(minute as f64 + into.clamp(0.0, 1.0));
            }
        }
        if out[2].is_some() {
            return out;
        }
        still_waiting = next;
        queue = (queue + joining - rate).max(rate);
    }
    out
}

/// The session an allow token belongs to: every token of one admission carries the same
/// identity, arrival and admission time, whichever minute it was renewed in.
pub fn session_of(claims: &Claims) -> u64 {
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
