//! The files a run writes: the CSV per method, the heatmap and the cluster's plots.

use super::*;

/// Writes `simulate-<order>.csv`: one line per user.
pub fn write_csv(report: &Report, dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join(format!("simulate-{}.csv", report.order.as_str()));
    let mut s = String::from(
        "user,arrival_secs,arrival_minute,admitted_secs,wait_secs,check_ins,abandoned,estimate_p25_min,estimate_p50_min,estimate_p75_min,lane,queue_number\n",
    );
    for (i, j) in report.journeys.iter().enumerate() {
        let admitted = j
            .admitted_ms
            .map_or(String::new(), |a| format!("{:.3}", a as f64 / 1000.0));
        let wait = j.wait_secs().map_or(String::new(), |w| format!("{w:.3}"));
        let e = j
            .estimate
            .map_or(",,".to_owned(), |[a, b, c]| format!("{a:.2},{b:.2},{c:.2}"));
        let lane = report
            .lanes
            .get(j.lane)
            .map_or(crate::invite::PUBLIC_LANE, |(name, _)| name);
        let _ = writeln!(
            s,
            "{i},{:.3},{},{admitted},{wait},{},{},{e},{lane},{}",
            j.arrival_ms as f64 / 1000.0,
            j.arrival_minute(),
            j.check_ins,
            u8::from(j.abandoned),
            j.queue_number.map_or(String::new(), |n| n.to_string())
        );
    }
    std::fs::write(&path, s)?;
    Ok(path)
}

/// A viridis-like ramp from dark blue (few) to yellow (many).
fn heat(v: f64) -> plotters::style::RGBColor {
    const STOPS: [(f64, (u8, u8, u8)); 5] = [
        (0.0, (68, 1, 84)),
        (0.25, (59, 82, 139)),
        (0.5, (33, 145, 140)),
        (0.75, (94, 201, 98)),
        (1.0, (253, 231, 37)),
    ];
    let v = v.clamp(0.0, 1.0);
    let k = STOPS.iter().position(|(s, _)| *s >= v).unwrap_or(4).max(1);
    let (s0, c0) = STOPS[k - 1];
    let (s1, c1) = STOPS[k];
    let f = (v - s0) / (s1 - s0);
    let mix = |a: u8, b: u8| (f64::from(a) + f * (f64::from(b) - f64::from(a))).round() as u8;
    plotters::style::RGBColor(mix(c0.0, c1.0), mix(c0.1, c1.1), mix(c0.2, c1.2))
}

/// Writes `heatmap-<order>.png`: users by arrival minute (x) and wait in minutes (y), colour
/// on a square-root scale of the count.
pub fn write_heatmap(report: &Report, dir: &Path) -> Result<PathBuf, String> {
    use plotters::prelude::*;
    let path = dir.join(format!("heatmap-{}.png", report.order.as_str()));
    let mut cells: BTreeMap<(u64, u64), u32> = BTreeMap::new();
    for j in &report.journeys {
        if let Some(w) = j.wait_secs() {
            *cells
                .entry((j.arrival_minute(), (w / 60.0) as u64))
                .or_insert(0) += 1;
        }
    }
    let max_x = report
        .journeys
        .iter()
        .map(Journey::arrival_minute)
        .max()
        .unwrap_or(0)
        + 1;
    let max_y = cells.keys().map(|(_, y)| *y).max().unwrap_or(0) + 1;
    let max_count = f64::from(cells.values().copied().max().unwrap_or(1));
    let root = BitMapBackend::new(&path, (900, 560)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let labels = crate::plot::font_available();
    let mut chart = ChartBuilder::on(&root)
        .margin(16)
        .x_label_area_size(if labels { 40 } else { 8 })
        .y_label_area_size(if labels { 50 } else { 8 })
        .caption(
            if labels {
                format!(
                    "{}: wait by arrival minute ({} users)",
                    report.order.as_str(),
                    report.journeys.len()
                )
            } else {
                String::new()
            },
            ("sans-serif", 22),
        )
        .build_cartesian_2d(0u64..max_x, 0u64..max_y)
        .map_err(|e| err(&e))?;
    if labels {
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("arrival minute")
            .y_desc("wait (minutes)")
            .draw()
            .map_err(|e| err(&e))?;
    }
    chart
        .draw_series(cells.iter().map(|((x, y), n)| {
            let color = heat((f64::from(*n) / max_count).sqrt());
            Rectangle::new([(*x, *y), (x + 1, y + 1)], color.filled())
        }))
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    drop(chart);
    drop(root);
    Ok(path)
}

/// `cluster-admissions.png` (admissions per minute against the cap, per method) and
/// `cluster-overshoot.png` (the overshoot against the sync interval, with the bound).
pub(super) fn write_cluster_plots(
    opts: &Options,
    reports: &[Report],
    sweeps: &[Sweep],
) -> Result<Vec<PathBuf>, String> {
    use crate::plot::{draw, Chart, Panel, Series};
    let admissions = Chart {
        title: format!(
            "{} nodes ({}), sync every {}: admissions per minute",
            opts.nodes,
            opts.weights()
                .iter()
                .map(|w| format!("{:.0}%", w * 100.0))
                .collect::<Vec<_>>()
                .join("/"),
            humantime::format_duration(opts.sync_interval)
        ),
        x_label: "minute".into(),
        panels: reports
            .iter()
            .map(|r| Panel {
                y_label: format!("{} admitted", r.order.as_str()),
                series: vec![Series {
                    name: "cluster admissions".into(),
                    points: r
                        .admitted_per_minute
                        .iter()
                        .map(|(m, n)| (*m as f64, f64::from(*n)))
                        .collect(),
                    color: 0,
                }],
                hlines: vec![(f64::from(r.target), "new_users_per_minute".into())],
            })
            .collect(),
        events: vec![],
    };
    let a = opts.out.join("cluster-admissions.png");
    draw(&admissions, &a, 1000, 260)?;
    let mut series: Vec<Series> = sweeps
        .iter()
        .enumerate()
        .map(|(i, (order, points))| Series {
            name: format!("{} overshoot", order.as_str()),
            points: points
                .iter()
                .map(|(secs, over, _)| (*secs, f64::from(*over)))
                .collect(),
            color: i,
        })
        .collect();
    series.push(Series {
        name: "bound: busiest node's share of one interval + 1".into(),
        points: SWEEP_INTERVALS
            .iter()
            .map(|s| (*s, f64::from(overshoot_bound(opts, *s))))
            .collect(),
        color: 5,
    });
    let overshoot = Chart {
        title: format!(
            "{} nodes: most admitted in a minute over new_users_per_minute ({})",
            opts.nodes, opts.new_users_per_minute
        ),
        x_label: "sync interval (s)".into(),
        panels: vec![Panel {
            y_label: "users over the cap".into(),
            series,
            hlines: vec![],
        }],
        events: vec![],
    };
    let o = opts.out.join("cluster-overshoot.png");
    draw(&overshoot, &o, 1000, 360)?;
    Ok(vec![a, o])
}
