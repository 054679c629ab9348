//! Capacity admission: admit by the origin's capacity, `new_users_per_minute` and
//! `total_active_users`, with random or FIFO queueing and honest wait estimates.
//!
//! ## Accounting without per-user server state
//!
//! The signed token carries what the accounting needs: `arr` (the minute of first arrival),
//! `acc` (when the user was admitted), `chk` (the minute the user was last counted) and `ref`
//! (the jittered refresh granted). Counters live in the [`CounterStore`], per minute:
//!
//! - `Active(m)`: admitted users whose last counted minute is `m`. On a user's first request in
//!   a new minute, `Active(now)` goes up and `Active(chk)` down (up first, so a race only ever
//!   over-counts), and the cookie is re-issued with `chk = now`. Active users are the sum over
//!   the last `session_minutes + 1` minutes: a user idle for `session_duration` drops out, and
//!   their allow token expires at the same moment.
//! - `Waiting(m, b)`: users of arrival bucket `b` whose last counted check-in is minute `m`,
//!   moved the same way at each check-in. A user who stops checking in drops out after the
//!   grace period (`grace_minutes`, about twice the refresh).
//! - `Admitted(m)`: users let in during minute `m`.
//!
//! ## Never over the limits
//!
//! Free slots = min(`new_users_per_minute` − admitted this minute, `total_active_users` −
//! active users). Admitting reserves: add to `Admitted(now)` and `Active(now)`, read back, and
//! undo if a limit is exceeded. Concurrent admissions can only under-admit, never exceed.
//!
//! ## Who gets the slots
//!
//! - **fifo**: slots are reserved for the oldest arrival buckets first; a user whose bucket has
//!   a reserved slot gets in at their next check-in.
//! - **random**: every eligible check-in has the same chance `p = free slots left this minute /
//!   check-ins expected in the rest of the minute`, the check-in rate measured with the store's
//!   estimator window, so admissions spread over the minute instead of bursting at its start.
//!   The draw comes from the token's signature: presenting a token again cannot re-roll it.
//!
//! Both methods keep `arr` and the per-bucket counts, so switching between them keeps
//! everyone's place. Check-ins are jittered per user (0.8–1.2 × `refresh`, averaging
//! `refresh`, drawn from the token) and enforced by the token's `exp`: checking in early earns
//! no chance.
//!
//! ## Estimates
//!
//! fifo: users ahead (waiting in older buckets) divided by last minute's admissions (or by
//! `new_users_per_minute` before there is any history). random:
//! with `P` the chance of getting in within a minute (admissions per minute / waiting users),
//! the wait within which a share `p` of users get in is `ln(1−p) / ln(1−P)` minutes, reported at
//! p = 0.25, 0.5, 0.75.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand_chacha::rand_core::RngCore;

use crate::config::{CapacityConfig, QueueOrder};
use crate::identity::Identity;
use crate::keys::KeyRing;
use crate::pages::Estimates;
use crate::store::{
    CounterKey, CounterKind, CounterStore, Mark, MarkKind, WindowCounter, WindowSpec,
};
use crate::time::Timestamp;
use crate::token::{unit_interval, Claims, Dec, Reject, Token};

use super::{CookieAction, Decision, Outcome, Place, Presented};

/// Length of the check-in rate window.
const CHECKIN_WINDOW: Duration = Duration::from_secs(10);
/// The aggregate view of the queue is recomputed at most this often.
const VIEW_TTL_MS: u64 = 1_000;

/// Aggregates of a room's counters at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueView {
    pub at_ms: u64,
    pub active: u64,
    /// Arrival minute → users of that bucket still waiting.
    pub waiting: BTreeMap<u64, u64>,
    pub waiting_total: u64,
    pub admitted_last_minute: u64,
}

impl QueueView {
    /// Users waiting in buckets older than `arrival`.
    pub fn ahead_of(&self, arrival: u64) -> u64 {
        self.waiting.range(..arrival).map(|(_, n)| n).sum()
    }
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
}

pub struct Capacity {
    scope: Arc<str>,
    order: QueueOrder,
    /// 0 = no limit.
    new_per_minute: u64,
    /// 0 = no limit.
    total_active: u64,
    session_minutes: u64,
    refresh: Duration,
    grace_minutes: u64,
    queue_all: bool,
    store: Arc<dyn CounterStore>,
    checkins: Arc<dyn WindowCounter>,
    view: Mutex<Option<Arc<QueueView>>>,
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

impl Capacity {
    pub fn new(
        room: &str,
        c: &CapacityConfig,
        queue_all: bool,
        store: Arc<dyn CounterStore>,
    ) -> Capacity {
        let checkins = store.window(&WindowSpec {
            name: format!("room:{room}:checkins"),
            interval_ms: CHECKIN_WINDOW.as_millis() as u64,
            max_keys: 1,
        });
        Capacity {
            scope: Arc::from(room),
            order: c.order,
            new_per_minute: u64::from(c.new_users_per_minute),
            total_active: u64::from(c.total_active_users),
            session_minutes: minutes_ceil(c.session_duration),
            refresh: c.refresh,
            // A check-in may come 1.2 × refresh after the last; counted per minute.
            grace_minutes: minutes_ceil(c.refresh.mul_f64(1.2)) + 1,
            queue_all,
            store,
            checkins,
            view: Mutex::new(None),
        }
    }

    pub fn order(&self) -> QueueOrder {
        self.order
    }

    fn key(&self, kind: CounterKind, slot: u64, id: u64) -> CounterKey {
        CounterKey {
            scope: self.scope.clone(),
            kind,
            slot,
            id,
        }
    }

    fn add(&self, kind: CounterKind, slot: u64, id: u64, delta: i64, now: Timestamp) -> i64 {
        let keep_minutes = match kind {
            CounterKind::Active => self.session_minutes + 2,
            CounterKind::Waiting => self.grace_minutes + 2,
            CounterKind::Admitted => 3,
        };
        let expire = Timestamp::from_secs((slot + keep_minutes) * 60);
        self.store
            .add(&self.key(kind, slot, id), delta, now, expire)
    }

    fn first_active_minute(&self, now_minute: u64) -> u64 {
        now_minute.saturating_sub(self.session_minutes)
    }

    fn first_waiting_minute(&self, now_minute: u64) -> u64 {
        now_minute.saturating_sub(self.grace_minutes)
    }

    fn compute_view(&self, now: Timestamp) -> QueueView {
        let minute = now.minute();
        let first_active = self.first_active_minute(minute);
        let active: i64 = self
            .store
            .scan(&self.scope, CounterKind::Active, now)
            .iter()
            .filter(|(m, _, _)| (first_active..=minute).contains(m))
            .map(|(_, _, v)| v)
            .sum();
        let first_waiting = self.first_waiting_minute(minute);
        let mut waiting = BTreeMap::new();
        for (m, bucket, v) in self.store.scan(&self.scope, CounterKind::Waiting, now) {
            if (first_waiting..=minute).contains(&m) {
                *waiting.entry(bucket).or_insert(0i64) += v;
            }
        }
        let waiting: BTreeMap<u64, u64> = waiting
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(b, n)| (b, n as u64))
            .collect();
        let admitted_last_minute = self
            .store
            .get(
                &self.key(CounterKind::Admitted, minute.saturating_sub(1), 0),
                now,
            )
            .max(0) as u64;
        QueueView {
            at_ms: now.millis(),
            active: active.max(0) as u64,
            waiting_total: waiting.values().sum(),
            waiting,
            admitted_last_minute,
        }
    }

    /// The queue as of at most a second ago (recomputed in a new minute straight away).
    pub fn view(&self, now: Timestamp) -> Arc<QueueView> {
        let mut cached = self.view.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = cached.as_ref() {
            let fresh = now.millis().saturating_sub(v.at_ms) < VIEW_TTL_MS
                && v.at_ms / 60_000 == now.minute()
                && v.at_ms <= now.millis();
            if fresh {
                return v.clone();
            }
        }
        let v = Arc::new(self.compute_view(now));
        *cached = Some(v.clone());
        v
    }

    /// Forgets the cached view (after an admission or a departure changes the counts).
    fn invalidate(&self) {
        *self.view.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn admitted_this_minute(&self, now: Timestamp) -> u64 {
        self.store
            .get(&self.key(CounterKind::Admitted, now.minute(), 0), now)
            .max(0) as u64
    }

    /// min(new per minute − admitted this minute, total active − active); `None` = unlimited.
    pub fn free_slots(&self, view: &QueueView, admitted_now: u64) -> Option<u64> {
        let by_new =
            (self.new_per_minute > 0).then(|| self.new_per_minute.saturating_sub(admitted_now));
        let by_total =
            (self.total_active > 0).then(|| self.total_active.saturating_sub(view.active));
        match (by_new, by_total) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Sum of `Active` over the session window, read live.
    fn active_now(&self, now: Timestamp) -> u64 {
        let minute = now.minute();
        (self.first_active_minute(minute)..=minute)
            .map(|m| self.store.get(&self.key(CounterKind::Active, m, 0), now))
            .sum::<i64>()
            .max(0) as u64
    }

    /// Reserves a slot for one admission now; false (and nothing changed) when a limit would
    /// be exceeded.
    fn try_admit(&self, now: Timestamp) -> bool {
        let minute = now.minute();
        let admitted = self.add(CounterKind::Admitted, minute, 0, 1, now);
        if self.new_per_minute > 0 && admitted as u64 > self.new_per_minute {
            self.add(CounterKind::Admitted, minute, 0, -1, now);
            return false;
        }
        self.add(CounterKind::Active, minute, 0, 1, now);
        if self.total_active > 0 && self.active_now(now) > self.total_active {
            self.add(CounterKind::Active, minute, 0, -1, now);
            self.add(CounterKind::Admitted, minute, 0, -1, now);
            return false;
        }
        self.invalidate();
        true
    }

    /// Moves an active user's count to this minute.
    fn touch_active(&self, counted: Option<u64>, now: Timestamp) {
        let minute = now.minute();
        self.add(CounterKind::Active, minute, 0, 1, now);
        if let Some(c) = counted.filter(|c| *c < minute && *c >= self.first_active_minute(minute)) {
            self.add(CounterKind::Active, c, 0, -1, now);
        }
    }

    /// Moves a waiting user's count to this minute.
    fn touch_waiting(&self, arrival: u64, counted: Option<u64>, now: Timestamp) {
        let minute = now.minute();
        if counted == Some(minute) {
            return;
        }
        self.add(CounterKind::Waiting, minute, arrival, 1, now);
        if let Some(c) = counted.filter(|c| *c < minute && *c >= self.first_waiting_minute(minute))
        {
            self.add(CounterKind::Waiting, c, arrival, -1, now);
        }
    }

    /// A waiting user leaves the queue (admitted).
    fn leave_queue(&self, arrival: u64, counted: Option<u64>, now: Timestamp) {
        if let Some(c) = counted.filter(|c| *c >= self.first_waiting_minute(now.minute())) {
            self.add(CounterKind::Waiting, c, arrival, -1, now);
        }
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

    /// The chance that an eligible check-in gets in now (random queueing).
    fn random_chance(&self, free: Option<u64>, now: Timestamp) -> f64 {
        let Some(free) = free else { return 1.0 };
        if free == 0 {
            return 0.0;
        }
        let per_sec = self.checkins.peek(0, now).weighted() / CHECKIN_WINDOW.as_secs_f64();
        let secs_left = (60 - now.secs() % 60) as f64;
        let expected = per_sec * secs_left;
        if expected <= free as f64 {
            1.0
        } else {
            free as f64 / expected
        }
    }

    /// Whether a user of bucket `arrival` holds a reserved slot (fifo queueing).
    fn fifo_reserved(&self, view: &QueueView, arrival: u64, free: Option<u64>) -> bool {
        match free {
            None => true,
            Some(free) => view.ahead_of(arrival) < free,
        }
    }

    /// Chance (0–1) that an eligible waiting user gets in at a check-in now.
    fn admit_chance(&self, view: &QueueView, free: Option<u64>, now: Timestamp) -> f64 {
        if self.queue_all {
            return 0.0;
        }
        match self.order {
            QueueOrder::Random => self.random_chance(free, now),
            QueueOrder::Fifo => match free {
                None => 1.0,
                Some(_) if view.waiting_total == 0 => 1.0,
                Some(f) => (f as f64 / view.waiting_total as f64).min(1.0),
            },
        }
    }

    /// Admissions per minute to expect: last minute's, or before there is any history, the
    /// configured pace.
    fn admission_rate(&self, view: &QueueView) -> f64 {
        if view.admitted_last_minute > 0 {
            view.admitted_last_minute as f64
        } else {
            self.new_per_minute as f64
        }
    }

    /// Users ahead (fifo) and the wait estimates for a user of bucket `arrival`.
    pub fn estimates(&self, view: &QueueView, arrival: u64) -> (Option<u64>, Estimates) {
        let rate = self.admission_rate(view);
        match self.order {
            QueueOrder::Fifo => {
                let ahead = view.ahead_of(arrival);
                let p50 = if ahead == 0 {
                    Some(0.0)
                } else {
                    (rate > 0.0).then(|| ahead as f64 / rate)
                };
                (
                    Some(ahead),
                    Estimates {
                        p25: None,
                        p50,
                        p75: None,
                    },
                )
            }
            QueueOrder::Random => {
                let waiting = view.waiting_total.max(1) as f64;
                let per_minute = (rate / waiting).min(1.0);
                let at = |p: f64| -> Option<f64> {
                    if per_minute >= 1.0 {
                        Some(0.0)
                    } else if per_minute <= 0.0 {
                        None
                    } else {
                        Some(random_wait_minutes(p, per_minute))
                    }
                };
                (
                    None,
                    Estimates {
                        p25: at(0.25),
                        p50: at(0.5),
                        p75: at(0.75),
                    },
                )
            }
        }
    }

    pub fn figures(&self, now: Timestamp) -> Figures {
        let view = self.view(now);
        let free = self.free_slots(&view, self.admitted_this_minute(now));
        Figures {
            active: view.active,
            waiting: view.waiting_total,
            free_slots: free,
            admitted_last_minute: view.admitted_last_minute,
            admit_chance: self.admit_chance(&view, free, now),
            estimates: self.estimates(&view, now.minute()).1,
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
        arrival: u64,
        interval: u64,
        now: Timestamp,
    ) -> Arc<str> {
        let key = ring.active();
        let mut claims = Claims::new(Dec::Wait, now.secs() + interval, uid, key.id());
        claims.arr = Some(arrival);
        claims.chk = Some(now.minute());
        claims.refresh = Some(interval as u32);
        claims.sign(key).into()
    }

    fn allow_claims(
        &self,
        uid: &Identity,
        kid: &str,
        arrival: Option<u64>,
        accepted: u64,
        now: Timestamp,
    ) -> Claims {
        let minute = now.minute();
        let mut claims = Claims::new(
            Dec::Allow,
            (minute + self.session_minutes + 1) * 60,
            uid,
            kid,
        );
        claims.arr = arrival;
        claims.acc = Some(accepted);
        claims.chk = Some(minute);
        claims
    }

    fn waiting_outcome(
        &self,
        decision: Decision,
        cookie: CookieAction,
        view: &QueueView,
        arrival: u64,
        refresh_secs: u64,
    ) -> Outcome {
        let mut outcome = Outcome::new(decision, cookie);
        outcome.refresh_secs = refresh_secs.max(1);
        let (ahead, estimates) = self.estimates(view, arrival);
        outcome.users_ahead = ahead;
        outcome.estimates = estimates;
        outcome
    }

    fn admit(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        arrival: Option<u64>,
        now: Timestamp,
    ) -> Outcome {
        let key = ring.active();
        let claims = self.allow_claims(uid, key.id(), arrival, now.millis(), now);
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
        let valid = presented.valid.as_ref();

        // Admitted users keep access, whatever else holds the room, until their session is
        // revoked: then they are a new arrival.
        let mut revoked = false;
        if let Some(token) = valid.filter(|t| t.claims.dec == Dec::Allow) {
            if !self
                .store
                .is_marked(&self.scope, revoked_mark(session_of(&token.claims)), now)
            {
                return self.keep_active(ring, uid, token, now);
            }
            revoked = true;
        }
        let mut outcome = self.decide_unadmitted(ring, uid, valid.filter(|_| !revoked), now);
        if revoked {
            outcome.rejected = Some(Reject::Revoked);
        }
        outcome
    }

    /// Everyone but an admitted user: a waiting user checks in, anyone else arrives.
    fn decide_unadmitted(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        valid: Option<&Arc<Token>>,
        now: Timestamp,
    ) -> Outcome {
        let minute = now.minute();

        // A waiting user (a capacity token; a lottery wait token starts over).
        if let Some(token) = valid.filter(|t| t.claims.dec == Dec::Wait && t.claims.arr.is_some()) {
            return self.check_in(ring, uid, token, now);
        }

        // A new arrival.
        let view = self.view(now);
        let u = arrival_draw(uid, now);
        if !self.queue_all && view.waiting_total == 0 {
            let free = self.free_slots(&view, self.admitted_this_minute(now));
            if free != Some(0) && self.try_admit(now) {
                return self.admit(ring, uid, Some(minute), now);
            }
        }
        let interval = self.interval(u);
        self.touch_waiting(minute, None, now);
        self.invalidate();
        let cookie = CookieAction::Set(self.wait_token(ring, uid, minute, interval, now));
        self.waiting_outcome(Decision::Anon, cookie, &view, minute, interval)
    }

    fn keep_active(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        token: &Token,
        now: Timestamp,
    ) -> Outcome {
        let minute = now.minute();
        let c = &token.claims;
        let key = ring.active();
        let mut outcome = Outcome::new(Decision::Allow, CookieAction::Keep);
        outcome.place = Some(Place {
            session: session_of(c),
            minute,
        });
        if c.chk == Some(minute) && c.kid == key.id() {
            return outcome;
        }
        if c.chk != Some(minute) {
            self.touch_active(c.chk, now);
        }
        let accepted = c.acc.unwrap_or(now.millis());
        let claims = self.allow_claims(uid, key.id(), c.arr, accepted, now);
        outcome.cookie = CookieAction::Set(claims.sign(key).into());
        outcome
    }

    fn check_in(&self, ring: &KeyRing, uid: &Identity, token: &Token, now: Timestamp) -> Outcome {
        let c = &token.claims;
        let arrival = c.arr.unwrap_or(now.minute());
        let view = self.view(now);
        // Too early: no chance, nothing counted, the cookie stands.
        if now.secs() < c.exp {
            return self.waiting_outcome(
                Decision::Wait,
                CookieAction::Keep,
                &view,
                arrival,
                c.exp - now.secs(),
            );
        }
        self.checkins.observe(0, 1, now);
        let Some(mut rng) = token.rng(ring) else {
            // Its key left the ring since it was checked: not trusted.
            return self.decide_unadmitted(ring, uid, None, now);
        };
        let draw = unit_interval(rng.next_u64());
        let jitter = unit_interval(rng.next_u64());
        if !self.queue_all {
            let free = self.free_slots(&view, self.admitted_this_minute(now));
            let eligible = match self.order {
                QueueOrder::Fifo => self.fifo_reserved(&view, arrival, free),
                QueueOrder::Random => draw < self.random_chance(free, now),
            };
            if eligible && free != Some(0) && self.try_admit(now) {
                self.leave_queue(arrival, c.chk, now);
                return self.admit(ring, uid, Some(arrival), now);
            }
        }
        self.touch_waiting(arrival, c.chk, now);
        let interval = self.interval(jitter);
        let cookie = CookieAction::Set(self.wait_token(ring, uid, arrival, interval, now));
        self.waiting_outcome(Decision::Wait, cookie, &view, arrival, interval)
    }
}

/// `n = ln(1 − p) / ln(1 − P)`: the minutes within which a share `p` of waiting users get in,
/// when each gets in within a minute with probability `per_minute`.
pub fn random_wait_minutes(p: f64, per_minute: f64) -> f64 {
    (1.0 - p).ln() / (1.0 - per_minute).ln()
}

/// The session an allow token belongs to: every token of one admission carries the same
/// identity, arrival and admission time, whichever minute it was renewed in.
pub fn session_of(claims: &Claims) -> u64 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(claims.uid.as_bytes());
    h.update([0]);
    h.update(claims.arr.unwrap_or(u64::MAX).to_le_bytes());
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
