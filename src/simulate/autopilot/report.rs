//! What the runs found and how it is shown: the recovery after a slow spell, the timeline, the
//! best fixed setting, the table and `autopilot.png`; and [`simulate`], which runs the autopilot
//! beside fixed settings and reports.

use super::*;

/// After a slow spell: when (seconds into the run) the admissions over the last minute first
/// reach `share` of the pace the origin sustains at the target, the spell over.
pub fn recovered_at(opts: &AutopilotOptions, r: &AutopilotReport, share: f64) -> Option<u64> {
    let after = opts.slow.map_or(0, |spell| spell.secs);
    let interval = opts.interval_secs.max(1);
    let window = (60 / interval).max(1) as usize;
    let goal = share * opts.pace_at_target();
    (window..=r.samples.len()).find_map(|end| {
        let last = &r.samples[end - window..end];
        let at = last.last()?.at_secs;
        let admitted: u64 = last.iter().map(|s| s.admitted).sum();
        let per_minute = admitted as f64 * 60.0 / (window as u64 * interval) as f64;
        (at > after && per_minute >= goal).then_some(at)
    })
}

/// A run's steered value, admissions a minute and p95 every `every` seconds, as a table.
pub fn timeline(opts: &AutopilotOptions, r: &AutopilotReport, every: u64) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| time | {} | admitted a minute (last {every} s) | p95 |",
        if opts.lottery_wait_secs.is_some() {
            "allow_percentage"
        } else {
            "new_users_per_minute"
        }
    );
    let _ = writeln!(s, "| ---: | ---: | ---: | ---: |");
    let interval = opts.interval_secs.max(1);
    let per = (every / interval).max(1) as usize;
    for chunk in r.samples.chunks(per) {
        let Some(last) = chunk.last() else { continue };
        let admitted: u64 = chunk.iter().map(|x| x.admitted).sum();
        let _ = writeln!(
            s,
            "| {}:{:02} | {:.2} | {:.0} | {} |",
            last.at_secs / 60,
            last.at_secs % 60,
            last.value,
            admitted as f64 * 60.0 / (chunk.len() as u64 * interval) as f64,
            last.p95
                .map_or("-".into(), |p| format!("{:.0} ms", p * 1000.0)),
        );
    }
    s
}

/// Whether a run kept the origin healthy once settled: p95 under the target (the median
/// interval) and errors under the limit.
pub fn healthy(opts: &AutopilotOptions, r: &AutopilotReport) -> bool {
    r.p95_median <= opts.settings.target_latency && r.error_rate <= opts.settings.max_error_rate
}

/// The best fixed setting: the highest `new_users_per_minute` whose run stays healthy, found by
/// bisection between half and twice the model's pace at the target (health only worsens as the
/// pace grows).
pub fn best_fixed(opts: &AutopilotOptions) -> AutopilotReport {
    let pace = opts.pace_at_target();
    let (mut lo, mut hi) = match opts.lottery_wait_secs {
        // A percentage: anywhere in 1..=100.
        Some(_) => (1, 101),
        None => (
            (pace * 0.5).floor().max(1.0) as u32,
            (pace * 2.0).ceil() as u32,
        ),
    };
    let mut best = run(opts, Steering::Fixed(lo));
    if !healthy(opts, &best) {
        return run(opts, Steering::Fixed(opts.settings.min));
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let r = run(opts, Steering::Fixed(mid));
        if healthy(opts, &r) {
            lo = mid;
            best = r;
        } else {
            hi = mid;
        }
    }
    best
}

/// The autopilot, the best fixed setting, and fixed settings too low (half of it) and too high
/// (twice it); the summary and the plot.
pub fn simulate(
    opts: &AutopilotOptions,
) -> Result<(Vec<AutopilotReport>, String, PathBuf), String> {
    std::fs::create_dir_all(&opts.out).map_err(|e| format!("{}: {e}", opts.out.display()))?;
    if opts.lottery_wait_secs.is_some() {
        return simulate_lottery(opts);
    }
    let best = best_fixed(opts);
    let Steering::Fixed(right) = best.steering else {
        unreachable!("a fixed run")
    };
    let reports = vec![
        run(opts, Steering::Autopilot),
        run(opts, Steering::Fixed(right / 2)),
        best,
        run(opts, Steering::Fixed(right * 2)),
    ];
    let mut s = table(opts, &reports);
    let auto = &reports[0];
    let _ = writeln!(
        s,
        "autopilot: {:.1} % of the best fixed setting's admissions ({} a minute); its pace once settled {:.0} a minute, swinging by {:.0} % (standard deviation over mean)",
        100.0 * auto.admitted as f64 / reports[2].admitted.max(1) as f64,
        right,
        auto.pace_mean,
        auto.pace_spread * 100.0
    );
    let png = write_plot(opts, &reports, &opts.out)?;
    Ok((reports, s, png))
}

/// The runs side by side, as a Markdown table.
fn table(opts: &AutopilotOptions, reports: &[AutopilotReport]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| run | admitted | admitted a minute once settled | p95 once settled (median / worst) | vs target | errors once settled | errors, whole run |"
    );
    let _ = writeln!(s, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in reports {
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} | {:.0} / {:.0} ms | {:+.0} % | {:.2} % | {:.2} % |",
            r.name(),
            r.admitted,
            settled_per_minute(opts, r),
            r.p95_median * 1000.0,
            r.p95_worst * 1000.0,
            (r.p95_median / opts.settings.target_latency - 1.0) * 100.0,
            r.error_rate * 100.0,
            r.error_rate_all * 100.0
        );
    }
    s
}

/// The admissions a minute of a run once settled.
pub fn settled_per_minute(opts: &AutopilotOptions, r: &AutopilotReport) -> f64 {
    let settle = settle_secs(opts);
    let minutes = (u64::from(opts.minutes) * 60).saturating_sub(settle) as f64 / 60.0;
    let admitted: u64 = r
        .samples
        .iter()
        .filter(|s| s.at_secs > settle)
        .map(|s| s.admitted)
        .sum();
    admitted as f64 / minutes.max(1.0 / 60.0)
}

/// A lottery room in the same surge: its autopilot beside fixed whole percentages (the crowd
/// grows, so each of them admits more and more), and against the best fixed pace a capacity
/// room could have had.
fn simulate_lottery(
    opts: &AutopilotOptions,
) -> Result<(Vec<AutopilotReport>, String, PathBuf), String> {
    let capacity = AutopilotOptions {
        lottery_wait_secs: None,
        settings: Settings {
            min: 10,
            max: 2_000,
            ..opts.settings
        },
        ..opts.clone()
    };
    let Steering::Fixed(best) = best_fixed(&capacity).steering else {
        unreachable!("a fixed run")
    };
    let mut reports = vec![run(opts, Steering::Autopilot)];
    reports.extend([1, 5, 25].map(|p| run(opts, Steering::Fixed(p))));
    let mut s = table(opts, &reports);
    let auto = &reports[0];
    let _ = writeln!(
        s,
        "lottery autopilot: {:.0} admitted a minute once settled, {:.1} % of the best fixed pace of a capacity room in the same surge ({best} a minute); its percentage falls from {} % to {:.2} % as the crowd grows",
        settled_per_minute(opts, auto),
        100.0 * settled_per_minute(opts, auto) / f64::from(best.max(1)),
        opts.start,
        auto.samples.last().map_or(0.0, |x| x.value),
    );
    let png = write_plot(opts, &reports, &opts.out)?;
    Ok((reports, s, png))
}

/// `autopilot.png`: admitted per minute, the origin's p95 and the error rate over time, a line
/// per run.
pub fn write_plot(
    opts: &AutopilotOptions,
    reports: &[AutopilotReport],
    dir: &Path,
) -> Result<PathBuf, String> {
    let path = dir.join(if opts.lottery_wait_secs.is_some() {
        "autopilot-lottery.png"
    } else {
        "autopilot.png"
    });
    let per_min = 60.0 / opts.interval_secs.max(1) as f64;
    let series = |f: &dyn Fn(&Sample) -> f64| -> Vec<Series> {
        reports
            .iter()
            .enumerate()
            .map(|(i, r)| Series {
                name: r.name(),
                points: r
                    .samples
                    .iter()
                    .map(|s| (s.at_secs as f64 / 60.0, f(s)))
                    .collect(),
                color: i,
            })
            .collect()
    };
    let chart = Chart {
        title: format!(
            "Autopilot against fixed settings: a surge of {}x the origin's pace{}",
            opts.surge,
            if opts.lottery_wait_secs.is_some() {
                ", lottery room"
            } else {
                ""
            }
        ),
        x_label: "minutes".into(),
        panels: vec![
            Panel {
                y_label: "admitted / min".into(),
                series: series(&|s| s.admitted as f64 * per_min),
                hlines: vec![(opts.pace_at_target(), "pace at the target".into())],
            },
            Panel {
                y_label: "origin p95 (ms)".into(),
                series: series(&|s| s.p95.unwrap_or(0.0).min(opts.origin.base * 30.0) * 1000.0),
                hlines: vec![(opts.settings.target_latency * 1000.0, "target".into())],
            },
            Panel {
                y_label: "errors (%)".into(),
                series: series(&|s| s.error_rate * 100.0),
                hlines: vec![(opts.settings.max_error_rate * 100.0, "limit".into())],
            },
        ],
        events: vec![(settle_secs(opts) as f64 / 60.0, "settled".into())],
    };
    crate::plot::draw(&chart, &path, 1100, 260)?;
    Ok(path)
}
