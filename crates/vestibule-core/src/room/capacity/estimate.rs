//! Who gets in now and how long the others wait: the random chance, the fifo head, the wait
//! estimates and the room's figures.

use super::*;

impl Capacity {
    /// The chance that an eligible check-in of `lane` gets in now (random queueing), `free`
    /// being the slots the lane may take.
    pub(super) fn random_chance(&self, lane: usize, free: Option<u64>, now: Timestamp) -> f64 {
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
    pub(super) fn fifo_reserved(
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
    pub(super) fn front(&self, view: &QueueView) -> u64 {
        let pace = self
            .admission_rate(view)
            .max(self.new_per_minute(view.at()) as f64 * view.share);
        (pace * 1.2 * self.refresh.as_secs_f64() / 60.0).ceil() as u64
    }

    /// Users expected ahead of someone who arrived at `arrival` (Unix seconds): the older
    /// buckets, and the share of their own bucket that arrived before them (arrivals spread
    /// evenly over a bucket, as far as anyone can tell).
    pub(super) fn position(&self, view: &QueueView, arrival: u64) -> f64 {
        let bucket = self.bucket(arrival);
        let into = (arrival - bucket * self.bucket_secs) as f64 / self.bucket_secs as f64;
        let mates = (view.expected_in_bucket(bucket) - 1.0).max(0.0);
        view.expected_ahead(bucket) + into * mates
    }

    /// Chance (0–1) that an eligible waiting user gets in at a check-in now.
    pub(super) fn admit_chance(&self, view: &QueueView, slots: Slots, now: Timestamp) -> f64 {
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
    pub(super) fn admission_rate(&self, view: &QueueView) -> f64 {
        if view.admitted_last_minute > 0 {
            view.admitted_last_minute as f64
        } else {
            self.new_per_minute(view.at()) as f64 * view.share
        }
    }

    /// The wait until a check-in, at quantile `q` of the jitter (0.8–1.2 × refresh), minutes.
    pub(super) fn check_in_minutes(&self, q: f64) -> f64 {
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
