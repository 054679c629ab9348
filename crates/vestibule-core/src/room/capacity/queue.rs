//! The queue's bookkeeping: the counts that move when a user arrives, checks in, comes back,
//! is let in, or has their session revoked.

use super::*;

impl Capacity {
    /// Moves an active user's count to this minute (`counted`: the minute they were counted in).
    pub(super) fn touch_active(&self, counted: Option<u64>, now: Timestamp) {
        let minute = now.minute();
        self.add(CounterKind::Active, minute, 0, 1, now);
        if let Some(c) = counted.filter(|c| *c < minute && *c >= self.first_active_minute(minute)) {
            self.add(CounterKind::Active, c, 0, -1, now);
        }
    }

    /// Counts a waiting user of `bucket` at this tick; `counted` is the tick they were counted
    /// at before (their count moves).
    pub(super) fn touch_waiting(
        &self,
        lane: usize,
        bucket: u64,
        counted: Option<u64>,
        now: Timestamp,
    ) {
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
    pub(super) fn leave_queue(
        &self,
        lane: usize,
        bucket: u64,
        counted: Option<u64>,
        now: Timestamp,
    ) {
        let tick = now.secs() / TICK_SECS;
        if let Some(c) = counted.filter(|c| *c >= self.first_live_tick(tick)) {
            let id = bucket_id(bucket, self.bucket_secs);
            self.add_lane(lane, CounterKind::Waiting, c, id, -1, now);
        }
    }

    /// A new arrival joins the queue: counted apart until they come back.
    pub(super) fn join(&self, lane: usize, bucket: u64, now: Timestamp) {
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
    pub(super) fn came_back(&self, lane: usize, bucket: u64, arrived: u64, now: Timestamp) {
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
}
