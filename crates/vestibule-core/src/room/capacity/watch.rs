//! A waiting visitor's stream (`/rooms/<room>/stream`): their place held while they are not
//! checking in themselves, and the moment their next request would let them in.
//!
//! A visitor with a stream open does not poll: the stream checks in for them on their token's
//! schedule (its `exp`, then every interval of its `ref`), counting exactly what their own
//! check-in would count, and gives them the chances their check-in would have had. Between
//! those check-ins it asks [`Capacity::chances`], the question their request would ask, and
//! tells them [`Tell::Turn`] once the answer lets them in. Nothing is decided here: they come in
//! by that request, and the check-in decides as it always does.
//!
//! Their cookie does not change while the stream runs, so when it ends ([`Capacity::unwatch`])
//! the counts go back to where their token says they are: the stream's check-ins leave no trace
//! but the check-ins observed, which were chances given. Their next request then finds the
//! queue as a polling visitor's would have left it.

use super::admit::period_draws;
use super::*;
use crate::room::watch::Tell;

/// A capacity room's hold on a waiting visitor's place while their stream is open. It is plain
/// data: the stream task keeps it, and the room (rebuilt on a reload) reads it.
#[derive(Clone, Debug)]
pub struct Watched {
    token: Arc<Token>,
    uid: Identity,
    /// Their lane's name as their token names it.
    lane: Option<Arc<str>>,
    arrival: u64,
    qn: Option<u64>,
    /// Their token's `exp`, and its check-in interval.
    exp: u64,
    interval: u64,
    /// The tick their token counts them at (its `chk`).
    counted: Option<u64>,
    /// Their token's last check-in (`chk`), Unix seconds.
    seen: u64,
    /// The token of an arrival not back yet: counted apart ([`CounterKind::Arrived`]).
    first: bool,
    /// The tick the stream counts them at now, once it has checked in for them.
    held_at: Option<u64>,
    /// The minute the stream's first check-in counted them as come back (`first` tokens).
    returned: Option<u64>,
    /// The check-ins made for them: the next is due at `exp + checked × interval`.
    checked: u64,
}

impl Watched {
    /// When the stream checks in for them next, Unix seconds.
    pub fn next_check_in(&self) -> u64 {
        self.exp + self.checked * self.interval
    }

    /// When they were last seen by a request: their place is theirs until `rejoin_grace` after.
    pub fn last_seen(&self) -> u64 {
        self.seen
    }
}

impl Capacity {
    /// Holds the place of the visitor whose valid wait `token` is presented, if it can be
    /// watched: it names an arrival, was counted at a check-in, and is within its grace. Tokens
    /// of the pre-queue not checked in since the start, and anything else, are left to polling.
    pub(crate) fn watch(
        &self,
        uid: &Identity,
        token: &Arc<Token>,
        now: Timestamp,
    ) -> Option<Watched> {
        let c = &token.claims;
        if c.dec != Dec::Wait || self.before_reset(c, now) {
            return None;
        }
        let arrival = token_secs(c.arr?);
        let chk = token_secs(c.chk?);
        if !self.within_grace(c, 0, now) {
            return None;
        }
        Some(Watched {
            token: token.clone(),
            uid: uid.clone(),
            lane: c.lane.clone(),
            arrival,
            qn: c.qn,
            exp: c.exp,
            interval: c.refresh.map_or(self.refresh_secs(), u64::from).max(1),
            counted: Some(chk / TICK_SECS),
            seen: chk,
            first: c.chk == c.arr,
            held_at: None,
            returned: None,
            checked: 0,
        })
    }

    /// What the stream tells the watched visitor at `now`: their turn if their request now
    /// would get in, else where they stand. It checks in for them when one is due. `hold` is
    /// what holds the room (the operator's pause, the event running); `grant` whether an
    /// operator's `admit` has admissions left.
    pub(crate) fn tell(
        &self,
        ring: &KeyRing,
        w: &mut Watched,
        hold: &Hold,
        now: Timestamp,
    ) -> Tell {
        let lane = self.lane_of(w.lane.as_deref());
        let due = now.secs() >= w.exp;
        // A check-in of theirs is due now: it gets the draw their request meets in the same
        // interval.
        let period = self.period(&w.token.claims, now);
        let checking_in = now.secs() >= w.next_check_in();
        let draw = match checking_in {
            true => match period_draws(&w.token, ring, period) {
                Some((d, _)) => Some(d),
                // Its key left the ring: their request will be a new arrival.
                None => return Tell::End,
            },
            false => None,
        };
        let views = self.views(now);
        // Random rooms give a chance only at a check-in; the others let in whoever's place
        // comes up, whenever it does.
        let d = match (self.order, draw) {
            (QueueOrder::Random, None) => f64::INFINITY,
            (_, d) => d.unwrap_or(0.0),
        };
        let chances = self.chances(&views, (lane, w.arrival, w.qn), hold, d, now);
        // Their request earns a chance only once their token is due (before, it is too early),
        // except past an operator's move of the serving counter, which lets them in whatever
        // node they ask. A random room's visitors are all "at the head" of an operator's grant,
        // which goes to whoever checks in first: a stream offers it at a check-in of theirs only,
        // so a grant does not call every streaming visitor at once.
        let grant =
            chances.at_head && (self.order != QueueOrder::Random || checking_in) && (hold.grant)();
        if chances.moved || (due && (chances.slot || grant)) {
            // Nothing counted for this one: their request is the check-in, and counts it.
            return Tell::Turn;
        }
        if checking_in {
            self.check_in_for(w, lane, now);
            w.checked = period + 1;
        }
        let free = self.lane_slots(&views, lane, self.slots(now), now).cluster;
        let (ahead, estimates) = self.estimates(&views.lanes[lane], w.arrival, free, now);
        Tell::Wait {
            users_ahead: ahead,
            estimates,
        }
    }

    /// Counts the check-in the visitor's own request would have counted now, without a slot:
    /// a chance observed, their place kept.
    fn check_in_for(&self, w: &mut Watched, lane: usize, now: Timestamp) {
        self.checkins.observe(lane as u64, 1, now);
        self.store.demand(&self.scope, 1, now);
        self.keep_account(&w.uid, (w.arrival, w.qn), now);
        let bucket = self.bucket(w.arrival);
        match (w.first, w.held_at, w.counted) {
            (true, None, Some(arrived)) => {
                self.came_back(lane, bucket, arrived, now);
                w.returned = Some(now.minute());
                self.touch_waiting(lane, bucket, None, now);
            }
            (_, held, counted) => self.touch_waiting(lane, bucket, held.or(counted), now),
        }
        w.held_at = Some(now.secs() / TICK_SECS);
    }

    /// Gives the watched visitor's counts back to where their token says they are: the stream
    /// ended (their turn came, it ran its time, or they left).
    pub(crate) fn unwatch(&self, w: &Watched, now: Timestamp) {
        let Some(held) = w.held_at else { return };
        let lane = self.lane_of(w.lane.as_deref());
        let id = bucket_id(self.bucket(w.arrival), self.bucket_secs);
        let live = self.first_live_tick(now.secs() / TICK_SECS);
        if held >= live {
            self.add_lane(lane, CounterKind::Waiting, held, id, -1, now);
        }
        let restored = w.counted.filter(|c| *c >= live);
        if w.first {
            if let Some(minute) = w.returned {
                self.add_lane(lane, CounterKind::Returned, minute, 0, -1, now);
            }
            if let Some(arrived) = restored {
                self.add_lane(lane, CounterKind::Arrived, arrived, id, 1, now);
            }
        } else if let Some(counted) = restored {
            self.add_lane(lane, CounterKind::Waiting, counted, id, 1, now);
        }
        // The view is not invalidated: its second-long TTL takes the change, and thousands of
        // streams ending at once (a restart) do not recompute it thousands of times.
    }

    /// Until when a stream may hold the place of a visitor last seen at `last_seen`: their
    /// request must come within `rejoin_grace` of it to keep their place, so the stream ends
    /// one interval before, and the page checks in.
    pub(crate) fn watch_until(&self, w: &Watched) -> u64 {
        (w.last_seen() + self.rejoin_grace.as_secs()).saturating_sub(w.interval.max(TICK_SECS))
    }
}
