//! The queue as the counters see it: each lane's [`QueueView`], cached for a second, and the
//! admissions counted per minute.

use super::*;

impl Capacity {
    /// The queue of `lane` now; the room's active users with lane 0's.
    pub(super) fn compute_view(&self, lane: usize, now: Timestamp) -> QueueView {
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
    pub(super) fn admitted(&self, lane: usize, minute: u64, now: Timestamp) -> u64 {
        self.store.get(&self.admitted_key(lane, minute), now).max(0) as u64
    }

    /// Where `lane`'s admissions in `minute` are counted (the room's own without lanes).
    pub(super) fn admitted_key(&self, lane: usize, minute: u64) -> CounterKey {
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
        self.forget_before_reset(now);
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
    pub(super) fn invalidate(&self) {
        *self.views.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}
