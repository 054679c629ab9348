//! What a run found: each user's [`Journey`], the [`Report`] with its goals, and the
//! statistics it is judged by (Kendall's tau, correlations, the worst inversion and lag).

use super::*;

/// One simulated user's story.
#[derive(Clone, Debug)]
pub struct Journey {
    pub arrival_ms: u64,
    pub admitted_ms: Option<u64>,
    pub check_ins: u32,
    /// Walked away after the first page.
    pub abandoned: bool,
    /// The wait the first page estimated (p25, p50, p75), minutes.
    pub estimate: Option<[f64; 3]>,
    /// The lane (an index into the run's lanes; 0, `public`, without lanes).
    pub lane: usize,
    /// The queue number the room gave (`--api`).
    pub queue_number: Option<u64>,
    /// Their waiting page holds a stream (`--push`).
    pub push: bool,
    /// Streams their page opened.
    pub streams: u32,
    /// Requests (page loads and check-ins) they made until they were let in, streams apart.
    pub requests: u32,
}

impl Journey {
    pub fn arrival_minute(&self) -> u64 {
        self.arrival_ms / 60_000
    }

    pub fn wait_secs(&self) -> Option<f64> {
        self.admitted_ms
            .map(|a| (a - self.arrival_ms) as f64 / 1000.0)
    }
}

/// What one run found.
#[derive(Clone, Debug)]
pub struct Report {
    pub order: QueueOrder,
    pub journeys: Vec<Journey>,
    /// Admissions per simulated minute.
    pub admitted_per_minute: BTreeMap<u64, u32>,
    /// Minutes where `new_users_per_minute` was the binding limit and the queue was long.
    pub saturated_minutes: Vec<u64>,
    pub peak_active: u64,
    pub target: u32,
    pub cap: u32,
    pub kendall_tau: f64,
    /// Mean correlation (arrival minute vs remaining wait) among users waiting at once.
    pub same_time_correlation: f64,
    pub decisions: u64,
    /// Streams opened by visitors' pages (`--push`).
    pub streams: u64,
    /// Minutes that began with live users waiting (arrived, not admitted, not walked away):
    /// (minute, live users waiting at its start, admissions in it).
    pub live_minutes: Vec<(u64, u32, u32)>,
    /// fifo order: the widest arrival gap between two users let in out of arrival order,
    /// seconds (one refresh interval at the head; up to 2.5 when a minute's last slots go past
    /// it).
    pub worst_inversion_secs: f64,
    /// The longest anyone was let in after someone who arrived later, seconds.
    pub worst_lag_secs: f64,
    /// Of the users whose first page gave an estimate and who were let in: the share let in
    /// within their p25, p50 and p75 estimates (calibrated: about 0.25, 0.5, 0.75).
    pub calibration: Option<[f64; 3]>,
    pub refresh_secs: f64,
    /// Nodes sharing the room, and how often they synced (seconds).
    pub nodes: u32,
    pub sync_interval_secs: f64,
    /// Every simulated second, users active by the cluster's own rule (admitted or seen within
    /// the session): the peak, counted from the users' stories rather than any node's view.
    pub true_peak_active: u64,
    /// Sync payload per node per second (sent, received), bytes: what the Redis script would
    /// carry for this room's counters.
    pub store_bytes_per_node_sec: (f64, f64),
    /// The room's lanes (name, weight), `public` first; empty without lanes.
    pub lanes: Vec<(String, u32)>,
}

/// Whether `j` was waiting, live, at `ms`: arrived before, not yet let in, not walked away.
pub(super) fn waiting_at(j: &Journey, ms: u64) -> bool {
    !j.abandoned && j.arrival_ms < ms && j.admitted_ms.is_none_or(|a| a >= ms)
}

/// How the lanes shared the slots.
#[derive(Clone, Debug, PartialEq)]
pub struct LaneSplit {
    /// Minutes in which every lane began with more live users waiting than its weight's share
    /// of `new_users_per_minute` and still had some at the end: where the split is what decides.
    pub contested_minutes: usize,
    /// Per lane, in the room's order.
    pub lanes: Vec<LaneShare>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LaneShare {
    pub name: String,
    /// weight / the sum of the weights.
    pub weight_share: f64,
    /// The lane's share of the admissions in the contested minutes.
    pub share: f64,
    /// Admitted in the contested minutes.
    pub admitted_contested: u32,
    /// Users in the lane, and how many were let in.
    pub users: u32,
    pub admitted: u32,
    /// Mean wait of those let in, minutes.
    pub mean_wait_min: f64,
}

impl Report {
    /// Liveness: in each minute that began with live users waiting, admissions as a share of
    /// what could be admitted, min(`new_users_per_minute`, live users waiting at its start):
    /// (mean, min, minutes). Goal: min at least 0.9. (The simulation's `total_active_users` is
    /// meant to be 0 or out of reach for this figure: it takes the per-minute cap as the slots.)
    pub(crate) fn liveness(&self) -> Option<(f64, f64, usize)> {
        if self.live_minutes.is_empty() || self.target == 0 {
            return None;
        }
        let shares: Vec<f64> = self
            .live_minutes
            .iter()
            .map(|(_, live, n)| (f64::from(*n) / f64::from(self.target.min(*live))).min(1.0))
            .collect();
        let mean = shares.iter().sum::<f64>() / shares.len() as f64;
        let min = shares.iter().copied().fold(f64::INFINITY, f64::min);
        Some((mean, min, shares.len()))
    }

    /// Admissions in saturated minutes: (mean, min, max, share within ±10 % of the target).
    pub(crate) fn admissions_vs_target(&self) -> Option<(f64, u32, u32, f64)> {
        let counts: Vec<u32> = self
            .saturated_minutes
            .iter()
            .map(|m| self.admitted_per_minute.get(m).copied().unwrap_or(0))
            .collect();
        if counts.is_empty() || self.target == 0 {
            return None;
        }
        let mean = counts.iter().map(|c| f64::from(*c)).sum::<f64>() / counts.len() as f64;
        let target = f64::from(self.target);
        let within = counts
            .iter()
            .filter(|c| (f64::from(**c) - target).abs() <= 0.1 * target)
            .count() as f64
            / counts.len() as f64;
        let min = counts.iter().copied().min().unwrap_or(0);
        let max = counts.iter().copied().max().unwrap_or(0);
        Some((mean, min, max, within))
    }

    /// The most admitted in one minute over `new_users_per_minute` (0 when never over).
    pub fn overshoot(&self) -> u32 {
        let most = self
            .admitted_per_minute
            .values()
            .max()
            .copied()
            .unwrap_or(0);
        if self.target == 0 {
            0
        } else {
            most.saturating_sub(self.target)
        }
    }

    /// The lanes' split of the slots (None without lanes).
    pub(crate) fn lane_split(&self) -> Option<LaneSplit> {
        if self.lanes.len() < 2 {
            return None;
        }
        let total_weight: u32 = self.lanes.iter().map(|(_, w)| w).sum();
        let target = f64::from(self.target);
        let last = self.admitted_per_minute.keys().copied().max().unwrap_or(0);
        let contested: Vec<u64> = (0..=last)
            .filter(|m| {
                self.lanes.iter().enumerate().all(|(lane, (_, w))| {
                    let waiting = |ms: u64| {
                        self.journeys
                            .iter()
                            .filter(|j| j.lane == lane && waiting_at(j, ms))
                            .count() as f64
                    };
                    let part = target * f64::from(*w) / f64::from(total_weight);
                    waiting(m * 60_000) > part && waiting((m + 1) * 60_000) > 0.0
                })
            })
            .collect();
        let in_contested = |lane: usize| {
            self.journeys
                .iter()
                .filter(|j| {
                    j.lane == lane
                        && j.admitted_ms
                            .is_some_and(|a| contested.binary_search(&(a / 60_000)).is_ok())
                })
                .count() as u32
        };
        let counts: Vec<u32> = (0..self.lanes.len()).map(in_contested).collect();
        let all: u32 = counts.iter().sum();
        let lanes = self
            .lanes
            .iter()
            .enumerate()
            .map(|(lane, (name, w))| {
                let mine: Vec<&Journey> = self.journeys.iter().filter(|j| j.lane == lane).collect();
                let waits: Vec<f64> = mine.iter().filter_map(|j| j.wait_secs()).collect();
                LaneShare {
                    name: name.clone(),
                    weight_share: f64::from(*w) / f64::from(total_weight),
                    share: f64::from(counts[lane]) / f64::from(all.max(1)),
                    admitted_contested: counts[lane],
                    users: mine.len() as u32,
                    admitted: waits.len() as u32,
                    mean_wait_min: waits.iter().sum::<f64>() / waits.len().max(1) as f64 / 60.0,
                }
            })
            .collect();
        Some(LaneSplit {
            contested_minutes: contested.len(),
            lanes,
        })
    }

    pub fn summary(&self) -> String {
        let mut s = String::new();
        let admitted = self
            .journeys
            .iter()
            .filter(|j| j.admitted_ms.is_some())
            .count();
        let waits: Vec<f64> = self
            .journeys
            .iter()
            .filter_map(Journey::wait_secs)
            .collect();
        let mean_wait = waits.iter().sum::<f64>() / waits.len().max(1) as f64 / 60.0;
        let max_wait = waits.iter().copied().fold(0.0, f64::max) / 60.0;
        let _ = writeln!(s, "== {} ==", self.order.as_str());
        let _ = writeln!(
            s,
            "users admitted: {admitted}/{} (decisions: {}); wait mean {mean_wait:.1} min, max {max_wait:.1} min",
            self.journeys.len(),
            self.decisions
        );
        match self.admissions_vs_target() {
            Some((mean, min, max, within)) => {
                let _ = writeln!(
                    s,
                    "admissions per minute (saturated minutes: {}): mean {mean:.1}, min {min}, max {max}; target {} -> {:.0}% of minutes within ±10% [{}]",
                    self.saturated_minutes.len(),
                    self.target,
                    within * 100.0,
                    pass((mean - f64::from(self.target)).abs() <= 0.1 * f64::from(self.target) && max <= self.target)
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "admissions per minute: no minute was limited by new_users_per_minute"
                );
            }
        }
        if let Some((mean, min, n)) = self.liveness() {
            let _ = writeln!(
                s,
                "liveness: in {n} minutes that began with live users waiting, admissions were {:.0}% of what could be let in (the free slots, or fewer live users) on average, {:.0}% at the least (goal >= 90%) [{}]",
                mean * 100.0,
                min * 100.0,
                pass(min >= 0.9)
            );
        }
        if let Some([p25, p50, p75]) = self.calibration {
            let _ = writeln!(
                s,
                "estimates: {:.0}% let in within their first page's p25, {:.0}% within p50, {:.0}% within p75 (calibrated: 25/50/75)",
                p25 * 100.0,
                p50 * 100.0,
                p75 * 100.0
            );
        }
        if let Some((given, unique, worst_ms)) = numbering(&self.journeys) {
            let bound = if self.nodes > 1 {
                self.sync_interval_secs
            } else {
                0.0
            };
            let worst = worst_ms as f64 / 1000.0;
            let _ = writeln!(
                s,
                "queue numbers: {given} given, {} [{}]; worst numbering against arrival order {worst:.2} s (bound: {bound:.2} s, one sync interval) [{}]",
                if unique { "all different" } else { "SOME GIVEN TWICE" },
                pass(unique),
                pass(worst <= bound + 1e-9)
            );
        }
        if self.nodes > 1 {
            let _ = writeln!(
                s,
                "cluster: {} nodes, sync every {:.2} s: most admitted in one minute {} (cap {}), overshoot {}; peak active users {} (cap {}) [{}]; sync payload per node {:.0} B/s sent, {:.0} B/s received",
                self.nodes,
                self.sync_interval_secs,
                self.admitted_per_minute.values().max().copied().unwrap_or(0),
                self.target,
                self.overshoot(),
                self.true_peak_active,
                self.cap,
                pass(self.cap == 0 || self.true_peak_active <= u64::from(self.cap)),
                self.store_bytes_per_node_sec.0,
                self.store_bytes_per_node_sec.1
            );
        }
        if self.cap > 0 {
            let _ = writeln!(
                s,
                "peak active users: {} (cap {}) [{}]",
                self.peak_active,
                self.cap,
                pass(self.peak_active <= u64::from(self.cap))
            );
        } else {
            let _ = writeln!(s, "peak active users: {} (no cap)", self.peak_active);
        }
        self.write_lanes(&mut s);
        self.write_order(&mut s);
        s
    }

    /// The summary's lines on the lanes: each one's share of the contested minutes' admissions.
    fn write_lanes(&self, s: &mut String) {
        if let Some(split) = self.lane_split() {
            let parts: Vec<String> = split
                .lanes
                .iter()
                .map(|l| {
                    format!(
                        "{} {:.1}% ({} let in; weight's share {:.1}%)",
                        l.name,
                        l.share * 100.0,
                        l.admitted_contested,
                        l.weight_share * 100.0
                    )
                })
                .collect();
            let close = split
                .lanes
                .iter()
                .all(|l| (l.share - l.weight_share).abs() <= 0.05);
            let _ = writeln!(
                s,
                "lanes: in the {} minutes every lane had more users waiting than its weight's share of the slots, the admissions went {} [{}]",
                split.contested_minutes,
                parts.join(", "),
                pass(split.contested_minutes > 0 && close)
            );
            for l in &split.lanes {
                let _ = writeln!(
                    s,
                    "  lane {}: {}/{} users let in, mean wait {:.1} min",
                    l.name, l.admitted, l.users, l.mean_wait_min
                );
            }
        }
    }

    /// The summary's line on the order kept: fifo's inversions, random's correlation.
    fn write_order(&self, s: &mut String) {
        let within_lanes = if self.lanes.len() > 1 {
            " (within each lane; the worst lane)"
        } else {
            ""
        };
        match self.order {
            QueueOrder::Fifo => {
                let _ = writeln!(
                    s,
                    "arrival order kept{}: Kendall tau {:.3} (arrival time vs admission time); users let in out of arrival order arrived at most {:.1} s apart ({:.1} refresh intervals; one, or up to 2.5 when a minute's last slots go past the head) [{}]; the longest anyone was let in after a later arrival: {:.0} s",
                    within_lanes,
                    self.kendall_tau,
                    self.worst_inversion_secs,
                    self.worst_inversion_secs / self.refresh_secs,
                    pass(self.worst_inversion_secs <= 2.5 * self.refresh_secs),
                    self.worst_lag_secs
                );
            }
            QueueOrder::Random => {
                let _ = writeln!(
                    s,
                    "arrival order{}: Kendall tau {:.3}; correlation of arrival minute with remaining wait among users waiting at once: {:.3} (goal near 0) [{}]",
                    within_lanes,
                    self.kendall_tau,
                    self.same_time_correlation,
                    pass(self.same_time_correlation.abs() < 0.1)
                );
            }
        }
    }
}

fn pass(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "MISSED"
    }
}

/// The share of users admitted within each of their first estimate's percentiles.
pub(super) fn calibration(journeys: &[Journey]) -> Option<[f64; 3]> {
    let judged: Vec<(f64, [f64; 3])> = journeys
        .iter()
        .filter_map(|j| Some((j.wait_secs()? / 60.0, j.estimate?)))
        .collect();
    if judged.is_empty() {
        return None;
    }
    let share =
        |i: usize| judged.iter().filter(|(w, e)| *w <= e[i]).count() as f64 / judged.len() as f64;
    Some([share(0), share(1), share(2)])
}

/// The longest anyone was let in after someone who arrived later: max over pairs where A
/// arrived before B of (admitted(A) − admitted(B)), in ms.
pub fn worst_lag(journeys: &[Journey]) -> u64 {
    let mut admitted: Vec<(u64, u64)> = journeys
        .iter()
        .filter_map(|j| j.admitted_ms.map(|a| (j.arrival_ms, a)))
        .collect();
    admitted.sort_unstable();
    let mut earliest_later = u64::MAX;
    let mut worst = 0;
    for &(_, admit) in admitted.iter().rev() {
        worst = worst.max(admit.saturating_sub(earliest_later));
        earliest_later = earliest_later.min(admit);
    }
    worst
}

/// How the queue numbers kept arrival order (`--api`): numbers given, whether all differ, and
/// the widest arrival gap of a pair numbered against its order of arrival, ms.
pub fn numbering(journeys: &[Journey]) -> Option<(usize, bool, u64)> {
    let mut numbered: Vec<(u64, u64)> = journeys
        .iter()
        .filter_map(|j| j.queue_number.map(|n| (n, j.arrival_ms)))
        .collect();
    if numbered.is_empty() {
        return None;
    }
    numbered.sort_unstable();
    let unique = numbered.windows(2).all(|w| w[0].0 != w[1].0);
    // The latest arrival among the lower numbers, against each arrival.
    let mut latest = 0u64;
    let mut worst = 0;
    for &(_, arrival) in &numbered {
        worst = worst.max(latest.saturating_sub(arrival));
        latest = latest.max(arrival);
    }
    Some((numbered.len(), unique, worst))
}

/// The widest arrival gap of an inversion: max over pairs where A arrived before B but was let
/// in after B of (arrival(B) − arrival(A)), in ms (0 when arrival order held exactly).
pub fn worst_inversion(journeys: &[Journey]) -> u64 {
    let mut admitted: Vec<(u64, u64)> = journeys
        .iter()
        .filter_map(|j| j.admitted_ms.map(|a| (a, j.arrival_ms)))
        .collect();
    admitted.sort_unstable();
    // earliest[i]: the earliest arrival among users let in at position i or later.
    let mut earliest = vec![u64::MAX; admitted.len() + 1];
    for i in (0..admitted.len()).rev() {
        earliest[i] = earliest[i + 1].min(admitted[i].1);
    }
    let mut worst = 0;
    for (i, &(admit, arrival)) in admitted.iter().enumerate() {
        // Users let in strictly later than this one.
        let later = i + admitted[i..].partition_point(|(a, _)| *a <= admit);
        worst = worst.max(arrival.saturating_sub(earliest[later]));
    }
    worst
}

/// Kendall's tau-b (ties in either series allowed), on at most 4,000 evenly spaced points.
pub fn kendall_tau_b(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len().min(y.len());
    if n < 2 {
        return 1.0;
    }
    let step = n.div_ceil(4_000).max(1);
    let idx: Vec<usize> = (0..n).step_by(step).collect();
    let (mut concordant, mut discordant, mut ties_x, mut ties_y) = (0f64, 0f64, 0f64, 0f64);
    for (a, &i) in idx.iter().enumerate() {
        for &j in &idx[a + 1..] {
            let dx = x[i] - x[j];
            let dy = y[i] - y[j];
            if dx == 0.0 && dy == 0.0 {
                continue;
            } else if dx == 0.0 {
                ties_x += 1.0;
            } else if dy == 0.0 {
                ties_y += 1.0;
            } else if (dx > 0.0) == (dy > 0.0) {
                concordant += 1.0;
            } else {
                discordant += 1.0;
            }
        }
    }
    let denom = ((concordant + discordant + ties_x) * (concordant + discordant + ties_y)).sqrt();
    if denom == 0.0 {
        0.0
    } else {
        (concordant - discordant) / denom
    }
}

pub fn pearson(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len().min(y.len()) as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mx = x.iter().sum::<f64>() / n;
    let my = y.iter().sum::<f64>() / n;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    if sxx == 0.0 || syy == 0.0 {
        0.0
    } else {
        sxy / (sxx * syy).sqrt()
    }
}

/// At moments through the arrival span, takes the users waiting at that moment and correlates
/// their arrival minute with the wait they still had ahead; returns the mean.
pub(super) fn waiting_together_correlation(journeys: &[Journey], span_ms: u64) -> f64 {
    let mut values = Vec::new();
    for k in 1..10u64 {
        let at = span_ms * k / 10;
        let (x, y): (Vec<f64>, Vec<f64>) = journeys
            .iter()
            .filter(|j| j.arrival_ms <= at && j.admitted_ms.is_some_and(|a| a > at))
            .map(|j| {
                (
                    j.arrival_minute() as f64,
                    (j.admitted_ms.unwrap_or(0) - at) as f64,
                )
            })
            .unzip();
        if x.len() >= 30 {
            values.push(pearson(&x, &y));
        }
    }
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}
