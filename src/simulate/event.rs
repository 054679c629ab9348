//! `vestibule simulate --event`: a scheduled event's pre-queue and start on the simulated clock.
//!
//! Visitors arrive uniformly over the pre-queue (`prequeue` visitors) and then over the first
//! minutes after the start (`later` visitors). Each follows its cookie as a browser does: the
//! pre-queue page reloads when it says (at the start, by the token's due moment), a waiting
//! page at its check-in. Every request goes through the same [`Room::decide`] the proxy calls,
//! with real signed tokens and the in-process store. The run is made twice, without and with
//! `shuffle_at_start`, and reports for each:
//!
//! - Kendall's tau between arrival and admission among the pre-queued (goal: about 1 without
//!   the shuffle, about 0 with it);
//! - how many later arrivals got in before the last pre-queued visitor (goal: none);
//! - admissions per minute against the event's `new_users_per_minute`.
//!
//! A third run draws with `draw = "verifiable"`: each pre-queued visitor's receipt is kept, and
//! the run measures how closely each minute's admissions followed the published places
//! (`HMAC-SHA256(seed, receipt)`): the share of pre-queued visitors let in in another minute
//! than their rank among the places gives (the k-th lowest place goes in the minute the k-th
//! admission fell in). A fifo room orders by arrival buckets of half a `refresh`, so visitors
//! whose places are that close may swap, across a minute's boundary too.
//!
//! It writes `event.png`: admission time against arrival time, one panel per run without and
//! with the keyed shuffle.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::kendall_tau_b;
use crate::identity::Identity;
use crate::room::{CookieAction, Decision, Room};
use crate::store::local::LocalStore;
use crate::store::CounterStore;
use crate::time::Timestamp;

/// The pre-queue opens here (simulated Unix seconds, on a minute boundary).
const OPENS: u64 = 1_800_000_000;

#[derive(Clone, Debug)]
pub struct EventOptions {
    /// Visitors arriving during the pre-queue.
    pub prequeue: u32,
    /// Visitors arriving after the start.
    pub later: u32,
    /// How long the pre-queue lasts, minutes.
    pub prequeue_minutes: u32,
    /// Over how many minutes after the start the later visitors arrive.
    pub later_minutes: u32,
    /// The event's `new_users_per_minute`.
    pub new_users_per_minute: u32,
    /// The room's `refresh`, seconds.
    pub refresh_secs: u64,
    /// Pre-queued visitors arrive this far apart (milliseconds), one after another from
    /// [`BURST_INTO_PREQUEUE_MS`] into the pre-queue, instead of at random over it.
    pub arrival_gap_ms: Option<u64>,
    /// Every pre-queued visitor asks again this long after the start (milliseconds), all at the
    /// same moment, in arrival order, whatever their page said; then as their pages say.
    pub check_in_at_start_ms: Option<u64>,
    /// The most a browser adds to the moment a page says to come back, milliseconds (drawn
    /// uniformly; 0: exactly on time, visitors due together ask in arrival order).
    pub latency_ms: u64,
    /// With the shuffle, draw verifiably (`draw = "verifiable"`) rather than keyed.
    pub verifiable: bool,
    pub seed: u64,
    pub out: PathBuf,
}

/// With `arrival_gap_ms`, the first pre-queued visitor arrives this far into the pre-queue.
pub(crate) const BURST_INTO_PREQUEUE_MS: u64 = 10_000;

impl Default for EventOptions {
    fn default() -> Self {
        EventOptions {
            prequeue: 2_000,
            later: 1_000,
            prequeue_minutes: 30,
            later_minutes: 10,
            new_users_per_minute: 200,
            refresh_secs: 20,
            arrival_gap_ms: None,
            check_in_at_start_ms: None,
            latency_ms: 800,
            verifiable: false,
            seed: 7,
            out: PathBuf::from("simulation"),
        }
    }
}

impl EventOptions {
    /// A short pre-queue whose visitors all come back at the start: 40 visitors 0.15 s apart in
    /// a one-minute pre-queue, each asking again half a second after the start in arrival
    /// order and then exactly when told; a fifo room letting in 10 a minute, refresh 5 s.
    pub fn short_prequeue() -> EventOptions {
        EventOptions {
            prequeue: 40,
            later: 0,
            prequeue_minutes: 1,
            later_minutes: 1,
            new_users_per_minute: 10,
            refresh_secs: 5,
            arrival_gap_ms: Some(150),
            check_in_at_start_ms: Some(500),
            latency_ms: 0,
            ..EventOptions::default()
        }
    }
}

/// One visitor's journey: arrival and admission, seconds from the start (negative: before).
#[derive(Clone, Copy, Debug)]
pub struct Visit {
    pub arrival: f64,
    pub admitted: Option<f64>,
    pub prequeued: bool,
}

/// One run's outcome.
#[derive(Clone, Debug)]
pub struct EventReport {
    pub shuffle: bool,
    pub visits: Vec<Visit>,
    /// Kendall's tau between arrival and admission among the pre-queued who got in.
    pub tau_prequeue: f64,
    /// Later arrivals let in before the last pre-queued visitor was.
    pub overtaken: usize,
    /// Pre-queued visitors let in / pre-queued visitors.
    pub prequeued_in: (usize, usize),
    /// Admissions in each whole minute from the start while the pre-queue was being let in.
    pub per_minute: Vec<u32>,
    /// The mean arrival rank (0-based, among the pre-queued) of the first
    /// `new_users_per_minute` pre-queued visitors let in: about `(n − 1) / 2` for a fair draw,
    /// `(k − 1) / 2` in arrival order.
    pub first_mean_rank: f64,
    /// A verifiable draw: the share of the pre-queued who got in in another minute than their
    /// rank among the published places gives.
    pub other_minute: Option<f64>,
}

impl EventReport {
    pub fn summary(&self, opts: &EventOptions) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "event, shuffle_at_start = {}: {} of {} pre-queued let in; Kendall tau (arrival vs admission, pre-queued) = {:.3}; mean arrival rank of the first {} let in {:.1}; later arrivals let in before the last pre-queued: {}",
            self.shuffle,
            self.prequeued_in.0,
            self.prequeued_in.1,
            self.tau_prequeue,
            opts.new_users_per_minute.min(self.prequeued_in.0 as u32),
            self.first_mean_rank,
            self.overtaken
        );
        if let Some(share) = self.other_minute {
            let _ = writeln!(
                s,
                "  draw = \"verifiable\": pre-queued let in in another minute than their published place gives: {:.1} %",
                share * 100.0
            );
        }
        let minutes: Vec<String> = self.per_minute.iter().map(u32::to_string).collect();
        let _ = writeln!(
            s,
            "  admitted per minute from the start: {} (new_users_per_minute {})",
            minutes.join(" "),
            opts.new_users_per_minute
        );
        s
    }
}

fn room(opts: &EventOptions, shuffle: bool, store: &Arc<dyn CounterStore>) -> Result<Room, String> {
    use crate::config::event::rfc3339;
    let start = OPENS + u64::from(opts.prequeue_minutes) * 60;
    let toml = format!(
        "[upstream]\npeers = [\"127.0.0.1:1\"]\n[[room]]\nname = \"simulated\"\nadmission = \"fifo\"\n\
         new_users_per_minute = 1\nrefresh = \"{}s\"\n\
         [[room.event]]\nname = \"launch\"\nprequeue_start = \"{}\"\nstart = \"{}\"\nend = \"{}\"\n\
         shuffle_at_start = {shuffle}\nnew_users_per_minute = {}\n{}",
        opts.refresh_secs,
        rfc3339(OPENS),
        rfc3339(start),
        rfc3339(start + 24 * 3600),
        opts.new_users_per_minute,
        if shuffle && opts.verifiable {
            "draw = \"verifiable\"\n"
        } else {
            ""
        }
    );
    let config =
        crate::config::parse(&toml, Path::new("<simulation>")).map_err(|e| e.to_string())?;
    let room = config.rooms.into_iter().next().ok_or("no room")?;
    Ok(Room::new(room, store))
}

/// Runs the event once.
pub fn run(opts: &EventOptions, shuffle: bool) -> Result<EventReport, String> {
    let store: Arc<dyn CounterStore> = Arc::new(LocalStore::new());
    let room = room(opts, shuffle, &store)?;
    let ring = super::seeded_ring(opts.seed ^ 0x00e7_e47d)?;
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    // A verifiable draw's secret, from the seed (a node makes it at random once).
    let mut secret = [0u8; 32];
    ChaCha8Rng::seed_from_u64(opts.seed ^ 0xd2a3).fill(&mut secret);
    store.set_draw_secret(secret);
    let start_ms = u64::from(opts.prequeue_minutes) * 60_000;
    let total = opts.prequeue + opts.later;
    let arrivals = arrival_times(opts, &mut rng, start_ms);
    let ids: Vec<Identity> = (0..total)
        .map(|i| {
            Identity::of_ip(
                std::net::IpAddr::from((0x0A00_0000u32 + i).to_be_bytes()),
                64,
            )
        })
        .collect();
    let mut cookies: Vec<Option<String>> = vec![None; total as usize];
    let mut admitted: Vec<Option<u64>> = vec![None; total as usize];
    let mut receipts: Vec<Option<crate::room::draw::Receipt>> = vec![None; total as usize];
    let mut queue: BinaryHeap<Reverse<(u64, u32)>> = arrivals
        .iter()
        .enumerate()
        .map(|(i, (t, _))| Reverse((*t, i as u32)))
        .collect();
    // Everyone is in well within a day at any sane pace.
    let deadline = start_ms + 24 * 3_600_000;
    let mut steps = 0u64;
    // Pre-queued visitors who still have their check-in at the start to make.
    let mut at_start: Vec<bool> = arrivals
        .iter()
        .map(|(_, pre)| *pre && opts.check_in_at_start_ms.is_some())
        .collect();
    while let Some(Reverse((t, i))) = queue.pop() {
        steps += 1;
        if t > deadline || steps > 50_000_000 {
            break;
        }
        let now = Timestamp::from_millis(OPENS * 1000 + t);
        let values: Vec<&[u8]> = cookies[i as usize]
            .as_deref()
            .map(str::as_bytes)
            .into_iter()
            .collect();
        let outcome = room.decide(&ring, &ids[i as usize], &values, now);
        if let CookieAction::Set(v) = &outcome.cookie {
            cookies[i as usize] = Some(v.to_string());
        }
        if let Some(r) = outcome.receipt {
            receipts[i as usize].get_or_insert(r);
        }
        match outcome.decision {
            Decision::Allow => {
                admitted[i as usize].get_or_insert(t);
            }
            Decision::Deny | Decision::Bypass | Decision::SoldOut | Decision::QueueFull => {}
            _ => {
                // The page reloads when its countdown ends; browsers add a little latency.
                let latency = rng.gen_range(0..=opts.latency_ms);
                let mut next = t + outcome.refresh_secs.max(1) * 1000 + latency;
                if let (true, Some(after)) = (at_start[i as usize], opts.check_in_at_start_ms) {
                    if t >= start_ms {
                        at_start[i as usize] = false;
                    } else if next >= start_ms {
                        // Asked again at the start, whatever the page said.
                        next = start_ms + after;
                    }
                }
                queue.push(Reverse((next, i)));
            }
        }
    }
    let mut report = report(opts, shuffle, start_ms, &arrivals, &admitted);
    // The published places of the receipts handed out, against when each got in.
    if let Some(draw) = room.config.events.first().and_then(|e| room.draw(e)) {
        let mut got: Vec<(f64, u64)> = receipts
            .iter()
            .zip(&admitted)
            .filter_map(|(r, a)| {
                Some((
                    draw.fraction((*r)?),
                    (*a)?.saturating_sub(start_ms) / 60_000,
                ))
            })
            .collect();
        // The k-th lowest place should go in the minute of the k-th admission.
        let mut minutes: Vec<u64> = got.iter().map(|g| g.1).collect();
        minutes.sort_unstable();
        got.sort_by(|a, b| a.0.total_cmp(&b.0));
        let other = got.iter().zip(&minutes).filter(|(g, m)| g.1 != **m).count();
        report.other_minute = Some(other as f64 / got.len().max(1) as f64);
    }
    Ok(report)
}

/// When each visitor arrives (ms), and whether in the pre-queue: sorted by time.
fn arrival_times(opts: &EventOptions, rng: &mut ChaCha8Rng, start_ms: u64) -> Vec<(u64, bool)> {
    let total = opts.prequeue + opts.later;
    let later_span = u64::from(opts.later_minutes.max(1)) * 60_000;
    let mut arrivals: Vec<(u64, bool)> = Vec::with_capacity(total as usize);
    for i in 0..opts.prequeue {
        let at = match opts.arrival_gap_ms {
            Some(gap) => {
                (BURST_INTO_PREQUEUE_MS + u64::from(i) * gap).min(start_ms.saturating_sub(1))
            }
            None => rng.gen_range(0..start_ms.max(1)),
        };
        arrivals.push((at, true));
    }
    for _ in 0..opts.later {
        arrivals.push((start_ms + rng.gen_range(0..later_span), false));
    }
    arrivals.sort_unstable();
    arrivals
}

/// What the run found, from the arrivals and when each visitor was let in (ms, `None`: never).
fn report(
    opts: &EventOptions,
    shuffle: bool,
    start_ms: u64,
    arrivals: &[(u64, bool)],
    admitted: &[Option<u64>],
) -> EventReport {
    let secs = |ms: u64| (ms as f64 - start_ms as f64) / 1000.0;
    let visits: Vec<Visit> = arrivals
        .iter()
        .zip(admitted)
        .map(|((t, pre), a)| Visit {
            arrival: secs(*t),
            admitted: a.map(secs),
            prequeued: *pre,
        })
        .collect();
    let (x, y): (Vec<f64>, Vec<f64>) = visits
        .iter()
        .filter(|v| v.prequeued)
        .filter_map(|v| Some((v.arrival, v.admitted?)))
        .unzip();
    let last_pre = y.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let overtaken = visits
        .iter()
        .filter(|v| !v.prequeued && v.admitted.is_some_and(|a| a < last_pre))
        .count();
    let minutes = (last_pre / 60.0).ceil().max(1.0) as usize;
    let mut per_minute = vec![0u32; minutes];
    for v in &visits {
        if let Some(a) = v.admitted.filter(|a| *a >= 0.0) {
            if let Some(m) = per_minute.get_mut((a / 60.0) as usize) {
                *m += 1;
            }
        }
    }
    // Arrival ranks are the visitors' indices: `arrivals` is sorted.
    let mut firsts: Vec<(f64, usize)> = visits
        .iter()
        .enumerate()
        .filter(|(_, v)| v.prequeued)
        .filter_map(|(rank, v)| Some((v.admitted?, rank)))
        .collect();
    firsts.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let k = (opts.new_users_per_minute as usize)
        .min(firsts.len())
        .max(1);
    let first_mean_rank = firsts.iter().take(k).map(|(_, r)| *r as f64).sum::<f64>() / k as f64;
    EventReport {
        shuffle,
        first_mean_rank,
        tau_prequeue: kendall_tau_b(&x, &y),
        overtaken,
        prequeued_in: (x.len(), opts.prequeue as usize),
        per_minute,
        visits,
        other_minute: None,
    }
}

/// The run's per-minute history, as a node running the room would have written it (room
/// `simulated`, node `simulation`), for `vestibule report`: from the pre-queue's opening to the
/// last admission. Simulated visitors never walk away, and a session counts as active for the
/// room's five minutes after its admission. What only the edge counts (pages, the origin) is 0.
pub fn history(report: &EventReport, opts: &EventOptions) -> Vec<vestibule_core::history::Minute> {
    use vestibule_core::history::{self, Minute, WAIT_BUCKETS};
    let start = OPENS + u64::from(opts.prequeue_minutes) * 60;
    // Seconds from the start → Unix seconds.
    let abs = |s: f64| start as f64 + s;
    let last = report
        .visits
        .iter()
        .map(|v| abs(v.admitted.unwrap_or(v.arrival)))
        .fold(OPENS as f64, f64::max);
    let session = 300.0;
    let mut out = Vec::new();
    let mut t0 = OPENS;
    let mut waiting_before = 0;
    while (t0 as f64) <= last {
        let (a, b) = (t0 as f64, (t0 + 60) as f64);
        let mut m = Minute {
            start: history::rfc3339(t0),
            room: "simulated".into(),
            node: "simulation".into(),
            cap: Some(if t0 >= start {
                f64::from(opts.new_users_per_minute)
            } else {
                1.0
            }),
            ..Minute::default()
        };
        let mut waits = vec![0u64; WAIT_BUCKETS.len() + 1];
        for v in &report.visits {
            let arrived = abs(v.arrival);
            if (a..b).contains(&arrived) {
                m.arrivals += 1;
            }
            let admitted = v.admitted.map(abs);
            if let Some(at) = admitted.filter(|at| (a..b).contains(at)) {
                m.admitted += 1;
                if at > arrived {
                    let wait = at - arrived;
                    waits[WAIT_BUCKETS.partition_point(|x| *x < wait)] += 1;
                }
            }
            if arrived < b && admitted.is_none_or(|at| at >= b) {
                m.waiting += 1;
            }
            if admitted.is_some_and(|at| at < b && at >= b - session) {
                m.active += 1;
            }
        }
        m.waited = waits.iter().sum();
        m.waits = history::trim_buckets(waits);
        m.set_percentiles();
        m.abandoned =
            history::abandoned(waiting_before, m.arrivals, m.admitted, m.waited, m.waiting);
        waiting_before = m.waiting;
        out.push(m);
        t0 += 60;
    }
    out
}

/// Writes `event.png`: admission minute against arrival minute (both from the start), a panel
/// per run, pre-queued visitors in blue, later arrivals in orange.
pub fn write_plot(reports: &[EventReport], dir: &Path) -> Result<PathBuf, String> {
    use plotters::prelude::*;
    let path = dir.join("event.png");
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    let root = BitMapBackend::new(&path, (1100, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let labels = crate::plot::font_available();
    let all = reports.iter().flat_map(|r| r.visits.iter());
    let (mut x_lo, mut x_hi, mut y_hi) = (0f64, 1f64, 1f64);
    for v in all {
        x_lo = x_lo.min(v.arrival / 60.0);
        x_hi = x_hi.max(v.arrival / 60.0);
        if let Some(a) = v.admitted {
            y_hi = y_hi.max(a / 60.0);
        }
    }
    let panels = root.split_evenly((1, reports.len().max(1)));
    for (report, area) in reports.iter().zip(panels.iter()) {
        let mut chart = ChartBuilder::on(area)
            .margin(14)
            .x_label_area_size(if labels { 40 } else { 8 })
            .y_label_area_size(if labels { 50 } else { 8 })
            .caption(
                if labels {
                    format!(
                        "shuffle_at_start = {}: tau {:.2}, overtaken {}",
                        report.shuffle, report.tau_prequeue, report.overtaken
                    )
                } else {
                    String::new()
                },
                ("sans-serif", 20),
            )
            .build_cartesian_2d(x_lo..x_hi * 1.02, 0f64..y_hi * 1.05)
            .map_err(|e| err(&e))?;
        if labels {
            chart
                .configure_mesh()
                .x_desc("arrival (minutes from the start)")
                .y_desc("let in (minutes from the start)")
                .draw()
                .map_err(|e| err(&e))?;
        }
        let step = report.visits.len().div_ceil(4_000).max(1);
        for (pre, color) in [
            (true, RGBColor(53, 88, 214)),
            (false, RGBColor(214, 83, 53)),
        ] {
            chart
                .draw_series(
                    report
                        .visits
                        .iter()
                        .step_by(step)
                        .filter(|v| v.prequeued == pre)
                        .filter_map(|v| Some((v.arrival / 60.0, v.admitted? / 60.0)))
                        .map(|(x, y)| Circle::new((x, y), 2, color.filled())),
                )
                .map_err(|e| err(&e))?;
        }
    }
    root.present().map_err(|e| err(&e))?;
    drop(panels);
    drop(root);
    Ok(path)
}

/// Both runs, their summaries and the plot.
pub fn simulate(opts: &EventOptions) -> Result<(Vec<EventReport>, PathBuf), String> {
    std::fs::create_dir_all(&opts.out).map_err(|e| format!("{}: {e}", opts.out.display()))?;
    let verifiable = EventOptions {
        verifiable: true,
        ..opts.clone()
    };
    let reports = vec![run(opts, false)?, run(opts, true)?, run(&verifiable, true)?];
    let png = write_plot(&reports[..2], &opts.out)?;
    Ok((reports, png))
}

/// The shuffled run over `seeds` seeds (a key each, so a draw each): the means of Kendall's
/// tau and of the first admissions' mean arrival rank.
pub fn over_seeds(opts: &EventOptions, seeds: u64) -> Result<(f64, f64), String> {
    let (mut tau, mut rank) = (0.0, 0.0);
    let n = seeds.max(1);
    for seed in 0..n {
        let r = run(
            &EventOptions {
                seed: opts.seed.wrapping_add(seed),
                ..opts.clone()
            },
            true,
        )?;
        tau += r.tau_prequeue / n as f64;
        rank += r.first_mean_rank / n as f64;
    }
    Ok((tau, rank))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_of_a_run_adds_up_to_its_visits() {
        let opts = EventOptions::short_prequeue();
        let r = run(&opts, true).unwrap();
        let minutes = history(&r, &opts);
        let admitted = r.visits.iter().filter(|v| v.admitted.is_some()).count() as u64;
        assert_eq!(
            minutes.iter().map(|m| m.arrivals).sum::<u64>(),
            r.visits.len() as u64
        );
        assert_eq!(minutes.iter().map(|m| m.admitted).sum::<u64>(), admitted);
        // The pre-queued waited; someone waited in every minute that let anyone in from it.
        assert!(minutes.iter().any(|m| m.wait_p50.is_some()));
        assert!(minutes.windows(2).all(|w| w[0].start < w[1].start));
        assert!(minutes
            .iter()
            .all(|m| m.admitted <= u64::from(opts.new_users_per_minute)));
    }

    #[test]
    fn the_shuffle_draws_the_pre_queue_and_keeps_it_ahead() {
        // (Prints its summaries with --nocapture.)
        let opts = EventOptions {
            prequeue: 400,
            later: 200,
            prequeue_minutes: 20,
            later_minutes: 5,
            new_users_per_minute: 100,
            ..EventOptions::default()
        };
        let plain = run(&opts, false).unwrap();
        let shuffled = run(&opts, true).unwrap();
        print!("{}{}", plain.summary(&opts), shuffled.summary(&opts));
        for r in [&plain, &shuffled] {
            assert_eq!(r.prequeued_in, (400, 400), "{}", r.summary(&opts));
            assert_eq!(r.overtaken, 0, "{}", r.summary(&opts));
            // The event's pace, never over it, and not the room's own 1 a minute. (Within a few
            // buckets a fifo room gives up some slots rather than let people in far out of
            // order; the last minute is the rest.)
            let full = &r.per_minute[..r.per_minute.len() - 1];
            assert!(
                full.iter().all(|m| (80..=100).contains(m)),
                "{}",
                r.summary(&opts)
            );
        }
        assert!(plain.tau_prequeue > 0.85, "{}", plain.summary(&opts));
        assert!(
            shuffled.tau_prequeue.abs() < 0.1,
            "{}",
            shuffled.summary(&opts)
        );
    }

    #[test]
    fn a_verifiable_draw_lets_the_pre_queue_in_in_the_order_of_its_published_places() {
        // (Prints its summaries with --nocapture.) The same event as the keyed shuffle's test,
        // drawn verifiably: the pre-queue still goes first, at the event's pace, in an order
        // that owes nothing to arrival, and each minute lets in the lowest published places, to
        // the room's resolution (an arrival bucket is 10 s of the 20-minute pre-queue: 1/120
        // of it, a third of a minute's admissions here; visitors that close may swap across a
        // minute's boundary).
        let opts = EventOptions {
            prequeue: 400,
            later: 200,
            prequeue_minutes: 20,
            later_minutes: 5,
            new_users_per_minute: 100,
            verifiable: true,
            ..EventOptions::default()
        };
        let r = run(&opts, true).unwrap();
        print!("{}", r.summary(&opts));
        assert_eq!(r.prequeued_in, (400, 400), "{}", r.summary(&opts));
        assert_eq!(r.overtaken, 0, "{}", r.summary(&opts));
        assert!(r.tau_prequeue.abs() < 0.1, "{}", r.summary(&opts));
        let share = r.other_minute.expect("the places of a verifiable draw");
        assert!(share < 0.05, "{}", r.summary(&opts));
        // A keyed shuffle of the same event has no published places.
        let keyed = run(
            &EventOptions {
                verifiable: false,
                ..opts
            },
            true,
        )
        .unwrap();
        assert_eq!(keyed.other_minute, None);
    }

    #[test]
    fn a_short_prequeue_checking_in_at_once_is_let_in_in_the_drawn_order() {
        // 40 visitors 0.15 s apart, all asking again half a second after the start in arrival
        // order, then exactly when told. Over many draws (a key per seed) the order of
        // admission owes nothing to the order of arrival: Kendall's tau between them averages
        // within 0.05 of 0, and the first 10 let in have a mean arrival rank near 19.5 (a
        // fair draw: 19.5, with a standard deviation of 3.2 per run, so 3.2 / √seeds over the
        // seeds; pure arrival order: 4.5).
        // The same when they all ask again at once only after every token is due (5.5 s:
        // dues are within the 5 s refresh of the start).
        let seeds = 60;
        for at in [500, 5_500] {
            let opts = EventOptions {
                check_in_at_start_ms: Some(at),
                ..EventOptions::short_prequeue()
            };
            let r = run(&opts, true).unwrap();
            assert_eq!(r.prequeued_in, (40, 40), "{}", r.summary(&opts));
            let (tau, rank) = over_seeds(&opts, seeds).unwrap();
            println!(
                "short pre-queue, back {at} ms after the start, over {seeds} seeds: mean tau {tau:.3}, mean first rank {rank:.2}"
            );
            assert!(tau.abs() < 0.05, "tau {tau}");
            // Four standard errors of the mean: 4 × 3.2 / √60 = 1.65.
            assert!((rank - 19.5).abs() < 1.65, "mean rank {rank}");
        }
    }
}
