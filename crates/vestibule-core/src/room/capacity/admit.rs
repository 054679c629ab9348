//! The decision for one request: a new arrival, a waiting user's check-in, an admitted user
//! kept active, and the tokens each of them gets.

use super::*;

impl Capacity {
    /// 0.8–1.2 × refresh, from a uniform draw.
    pub(super) fn interval(&self, u: f64) -> u64 {
        (self.refresh.as_secs_f64() * (0.8 + 0.4 * u))
            .round()
            .max(1.0) as u64
    }

    pub(super) fn wait_token(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        (lane, arrival_secs): (usize, u64),
        (interval, qn): (u64, Option<u64>),
        now: Timestamp,
    ) -> Arc<str> {
        let key = ring.active();
        let mut claims = Claims::new(Dec::Wait, now.secs() + interval, uid, key.id())
            .in_room(self.bound.as_ref());
        claims.lane = self.lane_claim(lane);
        claims.arr = Some(arrival_secs);
        claims.chk = Some(now.secs());
        claims.refresh = Some(interval as u32);
        claims.qn = qn;
        claims.sign(key).into()
    }

    pub(super) fn allow_claims(
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

    pub(super) fn waiting_outcome(
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

    pub(super) fn admit(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        (arrival_secs, qn): (Option<u64>, Option<u64>),
        now: Timestamp,
    ) -> Outcome {
        self.served(qn);
        let key = ring.active();
        let claims = self.allow_claims(uid, key.id(), arrival_secs, now.millis(), now);
        let place = Place {
            session: session_of(&claims),
            minute: now.minute(),
        };
        let mut outcome = Outcome::new(Decision::Allow, CookieAction::Set(claims.sign(key).into()));
        outcome.admitted = true;
        outcome.place = Some(place);
        outcome.queue_number = qn;
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
    pub(crate) fn decide_held(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        presented: &Presented,
        hold: &Hold,
        now: Timestamp,
    ) -> Outcome {
        // Tokens from before the room's last reset are void: their holders are new arrivals.
        let valid = presented
            .valid
            .as_ref()
            .filter(|t| !self.before_reset(&t.claims, now));

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
    pub(super) fn arrive(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        hold: &Hold,
        now: Timestamp,
    ) -> Outcome {
        self.store.demand(&self.scope, 1, now);
        let lane = self.lane_of(hold.lane);
        // Another device of an account already in line (enqueue tokens): its place.
        if let Some(kept) = self.account_place(uid, now) {
            return self.rejoin(ring, uid, lane, kept, now);
        }
        let views = self.views(now);
        let full = self.max_waiting > 0 && views.expected_waiting() >= self.max_waiting as f64;
        // Every arrival with a place (straight in, or in line) has a queue number.
        let qn = if full { None } else { self.next_number(now) };
        // Nobody waiting, not even a recent arrival who has not come back yet: straight in.
        if !self.queue_all
            && !hold.held
            && !self.prequeue_first(hold.event, &views, now)
            && views.is_empty()
            && self.slots(now).here != Some(0)
            && self.try_admit(lane, now)
        {
            let mut outcome = self.admit(ring, uid, (Some(now.secs()), qn), now);
            outcome.lane = self.lane_claim(lane);
            outcome.arrived = true;
            return outcome;
        }
        // The line is full: no place in it, and those in it keep theirs.
        if full {
            let mut outcome = Outcome::new(Decision::QueueFull, CookieAction::Keep);
            outcome.refresh_secs = self.refresh_secs();
            return outcome;
        }
        let bucket = self.bucket(now.secs());
        let interval = self.interval(arrival_draw(uid, now));
        self.join(lane, bucket, now);
        self.keep_account(uid, (now.secs(), qn), now);
        self.invalidate();
        let place = (lane, now.secs());
        let cookie = CookieAction::Set(self.wait_token(ring, uid, place, (interval, qn), now));
        // The estimate counts this user in their bucket.
        let views = self.views(now);
        let mut outcome =
            self.waiting_outcome(Decision::Anon, cookie, &views, place, interval, now);
        outcome.queue_number = qn;
        outcome.arrived = true;
        outcome
    }

    /// A device of an account whose place is kept (`arrival`, `qn`): a wait token for that
    /// place, counted as waiting from now, due at its next check-in.
    fn rejoin(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        lane: usize,
        (arrival, qn): (u64, Option<u64>),
        now: Timestamp,
    ) -> Outcome {
        let interval = self.interval(arrival_draw(uid, now));
        self.touch_waiting(lane, self.bucket(arrival), None, now);
        self.invalidate();
        let place = (lane, arrival);
        let cookie = CookieAction::Set(self.wait_token(ring, uid, place, (interval, qn), now));
        let views = self.views(now);
        let mut outcome =
            self.waiting_outcome(Decision::Wait, cookie, &views, place, interval, now);
        outcome.queue_number = qn;
        outcome
    }

    pub(super) fn keep_active(
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
    pub(super) fn within_grace(&self, claims: &Claims, since: u64, now: Timestamp) -> bool {
        let last = token_secs(claims.chk.or(claims.arr).unwrap_or(0)).max(since);
        now.secs().saturating_sub(last) <= self.rejoin_grace.as_secs()
    }

    pub(super) fn check_in(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        token: &Token,
        hold: &Hold,
        now: Timestamp,
    ) -> Outcome {
        let c = &token.claims;
        let mut arrival = c.arr.map_or(now.secs(), token_secs);
        // When they first came: the wait an admission ends (a pre-queue draw moves `arrival`).
        let arrived = arrival;
        let waited = |mut outcome: Outcome| {
            outcome.waited_secs = Some(now.secs().saturating_sub(arrived));
            outcome
        };
        // Their number; one given now if they had none (a cluster node short of numbers).
        let qn = c.qn.or_else(|| self.next_number(now));
        // A pre-queue token's first check-in in the event: its place in the pre-queue.
        if let (Some(event), None) = (hold.event, c.chk) {
            arrival = self.prequeued_place(ring, uid, event, arrival, now);
        }
        let bucket = self.bucket(arrival);
        // Their lane is the one their token names (`public` if the room has no such lane now).
        let lane = self.lane_of(c.lane.as_deref());
        let views = self.views(now);
        // The token of an arrival: counted apart, and back now for the first time.
        let first = c.chk.is_some() && c.chk == c.arr;
        let counted = c.chk.map(|v| token_secs(v) / TICK_SECS);
        // Too early: no chance, nothing counted, the cookie stands; unless the serving counter
        // has passed their number (they are at the head, and are let in as soon as they ask).
        let head = self.is_served(qn) || self.is_moved_past(qn, arrival);
        if now.secs() < c.exp && !head {
            let mut outcome = self.waiting_outcome(
                Decision::Wait,
                CookieAction::Keep,
                &views,
                (lane, arrival),
                c.exp - now.secs(),
                now,
            );
            outcome.queue_number = c.qn;
            return outcome;
        }
        self.checkins.observe(lane as u64, 1, now);
        self.store.demand(&self.scope, 1, now);
        self.keep_account(uid, (arrival, qn), now);
        let Some((draw, jitter)) = period_draws(token, ring, self.period(c, now)) else {
            // Its key left the ring since it was checked: not trusted.
            return self.arrive(ring, uid, hold, now);
        };
        let leave = || match (first, counted) {
            (true, Some(arrived)) => self.came_back(lane, bucket, arrived, now),
            _ => self.leave_queue(lane, bucket, counted, now),
        };
        let chances = self.chances(&views, (lane, arrival, qn), hold, draw, now);
        if chances.slot && self.try_admit(lane, now) {
            leave();
            let mut outcome = self.admit(ring, uid, (Some(arrival), qn), now);
            outcome.lane = self.lane_claim(lane);
            return waited(outcome);
        }
        if chances.moved || (chances.at_head && (hold.grant)()) {
            self.add(CounterKind::Active, now.minute(), 0, 1, now);
            self.count_lane_admission(lane, now);
            leave();
            let mut outcome = self.admit(ring, uid, (Some(arrival), qn), now);
            outcome.lane = self.lane_claim(lane);
            return waited(outcome);
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
        let cookie = CookieAction::Set(self.wait_token(ring, uid, place, (interval, qn), now));
        let mut outcome =
            self.waiting_outcome(Decision::Wait, cookie, &views, place, interval, now);
        outcome.queue_number = qn;
        outcome
    }
}

/// What a check-in now may bring a waiting visitor, before anything is counted (see
/// [`Capacity::chances`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Chances {
    /// One of the free slots is theirs, if reserving it succeeds.
    pub slot: bool,
    /// They are at the head of the line: an operator's `admit` grant goes to them.
    pub at_head: bool,
    /// An operator moved the serving counter past their number: in, beyond the limits.
    pub moved: bool,
}

impl Capacity {
    /// What a check-in at `now` brings a visitor of `lane` who arrived at `arrival` (their place,
    /// after any pre-queue draw) with queue number `qn`, under `hold`, `draw` being their uniform
    /// draw for this check-in. A check-in and a visitor's stream ask the same question here, so
    /// the stream tells a visitor it is their turn exactly when their request would get in.
    pub(super) fn chances(
        &self,
        views: &Views,
        (lane, arrival, qn): (usize, u64, Option<u64>),
        hold: &Hold,
        draw: f64,
        now: Timestamp,
    ) -> Chances {
        let view = &views.lanes[lane];
        let bucket = self.bucket(arrival);
        // Arrived after the start of an event whose pre-queued visitors still go first.
        let behind = hold.event.is_some_and(|e| arrival >= e.start)
            && self.prequeue_first(hold.event, views, now);
        // Pre-queued: let in in the pre-queue's order (drawn, or of arrival), whatever the method.
        let prequeued = hold
            .event
            .is_some_and(|e| e.prequeue_start.is_some() && arrival < e.start);
        let mut chances = Chances::default();
        if !self.queue_all && !hold.held && !behind {
            let slots = self.lane_slots(views, lane, self.slots(now), now);
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
                // The serving counter passed their number: they are at the head.
                QueueOrder::Fifo => {
                    self.is_served(qn) || self.fifo_reserved(view, arrival, slots.cluster, now)
                }
                QueueOrder::Random => draw < self.random_chance(lane, slots.here, now),
            };
            chances.slot = eligible && slots.here != Some(0);
        }
        // An operator's `admit`, beyond the limits: fifo gives it to the head of the queue (the
        // oldest two buckets), random to whoever checks in first (check-ins come in a random
        // order).
        chances.at_head = !behind
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
        // An operator's move of the serving counter past their number, also beyond the limits.
        chances.moved = !hold.held && self.is_moved_past(qn, arrival);
        chances
    }

    /// Which of a wait token's check-ins one at `now` is: 0 up to one interval after its `exp`,
    /// then one more each interval. Each gets its own draw ([`period_draws`]), so a visitor
    /// whose stream checked in for them meets the same draw when their request comes, and
    /// coming back late is one check-in, never a re-roll of an earlier one.
    pub(super) fn period(&self, claims: &Claims, now: Timestamp) -> u64 {
        let interval = claims.refresh.map_or(self.refresh_secs(), u64::from).max(1);
        (now.secs().saturating_sub(claims.exp) / interval).min(MAX_PERIODS)
    }
}

/// Check-ins of one wait token told apart by their draws; later ones share the last draw. A
/// token is taken back at most `rejoin_grace` after it was issued, far fewer intervals.
const MAX_PERIODS: u64 = 100_000;

/// The uniform draw and the jitter of a wait token's check-in number `period`: two values of
/// the stream keyed by its signature ([`Token::rng`]), `period` pairs in. `None` when the
/// token's key has left the ring.
pub(super) fn period_draws(token: &Token, ring: &KeyRing, period: u64) -> Option<(f64, f64)> {
    let mut rng = token.rng(ring)?;
    // Each `next_u64` takes two 32-bit words of the ChaCha stream.
    rng.set_word_pos(u128::from(period) * 4);
    Some((unit_interval(rng.next_u64()), unit_interval(rng.next_u64())))
}
