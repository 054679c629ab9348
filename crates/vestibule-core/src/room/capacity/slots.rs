//! The free slots: the cluster's allotment to this node, each lane's part of them, and the
//! reservation an admission makes.

use super::*;

impl Capacity {
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
    pub(super) fn lane_slots(
        &self,
        views: &Views,
        lane: usize,
        slots: Slots,
        now: Timestamp,
    ) -> Slots {
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
    pub(super) fn headroom(&self, now: Timestamp) -> (Option<i64>, Option<i64>) {
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
        let new_per_minute = self.new_per_minute(now);
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
    pub(super) fn try_admit(&self, lane: usize, now: Timestamp) -> bool {
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
    pub(super) fn count_lane_admission(&self, lane: usize, now: Timestamp) {
        if self.laned() {
            let minute = now.minute();
            self.add_lane(lane, CounterKind::Admitted, minute, LANE_ADMITTED, 1, now);
        }
        self.invalidate();
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
