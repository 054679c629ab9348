//! An event's pre-queue: visitors before the start get their place, and go first once it opens.

use super::*;

impl Capacity {
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
        let mut qn = waiting.and_then(|t| t.claims.qn);
        // A verifiable draw: the visitor's receipt, every time they ask (it is the same). Those
        // who were waiting before the pre-queue opened keep their place ahead of it, outside
        // the draw: they get none.
        let draws = |arrival: u64| {
            (event.verifiable() && arrival >= event.opens())
                .then(|| draw::hand_out(&*self.store, &self.scope, event, uid, now))
                .flatten()
        };
        let (cookie, due, arrived, drawn) = match in_line {
            Some(exp) => {
                let arrival = waiting.and_then(|t| t.claims.arr).map_or(0, token_secs);
                (CookieAction::Keep, exp, false, draws(arrival))
            }
            None => {
                // Someone already waiting keeps their arrival, unless they were gone too long.
                let kept = waiting
                    .filter(|t| self.within_grace(&t.claims, 0, now))
                    .map(|t| token_secs(t.claims.arr.unwrap_or(0)));
                let head_of_start = self.bucket(event.start) * self.bucket_secs;
                let arrival = kept
                    .unwrap_or(now.secs())
                    .min(head_of_start.saturating_sub(1));
                let drawn = draws(arrival);
                let place = match drawn {
                    Some((_, place)) => place,
                    // Verifiable, with no draw secret yet: the middle of the first interval;
                    // their place is drawn when they come back.
                    None if event.verifiable() && arrival >= event.opens() => 0.5,
                    None => prequeue_place(ring.active(), event, uid, arrival),
                };
                let due = event.start + (place * self.refresh_secs() as f64) as u64;
                let key = ring.active();
                let mut claims =
                    Claims::new(Dec::Wait, due, uid, key.id()).in_room(self.bound.as_ref());
                // The lane of the token they hold, else the invitation's they bring.
                let lane = waiting.map_or(lane, |t| t.claims.lane.as_deref());
                claims.lane = self.lane_claim(self.lane_of(lane));
                claims.arr = Some(arrival);
                if self.numbered {
                    qn = qn.or_else(|| self.next_number(now));
                    claims.qn = qn;
                }
                claims.refresh = Some(u32::try_from(due - now.secs().min(due)).unwrap_or(u32::MAX));
                // A visitor takes this branch once per event: their new token keeps them in line.
                self.add(CounterKind::PreQueued, event.start, 0, 1, now);
                (
                    CookieAction::Set(claims.sign(key).into()),
                    due,
                    kept.is_none(),
                    drawn,
                )
            }
        };
        let mut outcome = Outcome::prequeued(cookie, due, now);
        outcome.queue_number = qn;
        outcome.arrived = arrived;
        outcome.receipt = drawn.map(|(receipt, _)| receipt);
        outcome
    }

    /// How many visitors hold a place in the pre-queue of `event` (cluster-wide).
    pub fn prequeued(&self, event: &EventConfig, now: Timestamp) -> u64 {
        self.store
            .get(&self.key(CounterKind::PreQueued, event.start, 0), now)
            .max(0) as u64
    }

    /// Where a pre-queued visitor who arrived at `arrival` stands once `event` has started:
    /// with `shuffle_at_start`, an arrival drawn for their identity within the pre-queue's
    /// buckets (those before the start's), so the order among them is the draw; else their
    /// arrival. Visitors who arrived before the pre-queue opened keep their place ahead of it.
    /// With a verifiable draw, the place is their receipt's ([`draw::hand_out`]).
    pub(super) fn prequeued_place(
        &self,
        ring: &KeyRing,
        uid: &Identity,
        event: &EventConfig,
        arrival: u64,
        now: Timestamp,
    ) -> u64 {
        let Some(opens) = event.prequeue_start else {
            return arrival;
        };
        if !event.shuffle_at_start || !(opens..event.start).contains(&arrival) {
            return arrival;
        }
        let head_of_start = self.bucket(event.start) * self.bucket_secs;
        let span = head_of_start.saturating_sub(opens).max(1);
        let drawn = event
            .verifiable()
            .then(|| draw::hand_out(&*self.store, &self.scope, event, uid, now))
            .flatten();
        let place = match drawn {
            Some((_, place)) => place,
            // No draw secret (a cluster's store lost its data): the keyed draw, unpublished.
            None => prequeue_place(ring.active(), event, uid, arrival),
        };
        (opens + (place * span as f64) as u64).min(head_of_start.saturating_sub(1))
    }

    /// Whether every pre-queued visitor of the running `event` can have made their first
    /// check-in, and so be counted in the bucket of their place: each is due within a refresh
    /// interval of the start, give or take what a browser adds.
    pub(super) fn prequeue_counted(&self, event: &EventConfig, now: Timestamp) -> bool {
        now.secs() >= event.start + self.refresh_secs() + CHECKIN_SLACK_SECS.ceil() as u64
    }

    /// Whether the pre-queued visitors of the running `event` still go first: until all of
    /// them can have checked in (their first check-in falls within a refresh interval of the
    /// start, then the liveness window), and while any of them waits.
    pub(super) fn prequeue_first(
        &self,
        event: Option<&EventConfig>,
        views: &Views,
        now: Timestamp,
    ) -> bool {
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
}
