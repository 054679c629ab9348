//! The cluster sweep: one run per sync interval, and the overshoot each interval may make.

use super::*;

/// A sweep of one method: (sync interval in seconds, overshoot, liveness at the least).
pub type Sweep = (QueueOrder, Vec<(f64, u32, f64)>);

/// Sync intervals the cluster sweep tries, seconds.
pub const SWEEP_INTERVALS: [f64; 7] = [0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0];

/// The overshoot a cluster may make over `new_users_per_minute` at a sync interval: one
/// interval of the busiest node's share of the pace, plus one for nodes whose views of the
/// free slots differ when they apportion them (measured by the sweep).
pub fn overshoot_bound(opts: &Options, interval_secs: f64) -> u32 {
    let busiest = opts.weights().iter().copied().fold(0.0, f64::max);
    (busiest * f64::from(opts.new_users_per_minute) * interval_secs / 60.0).ceil() as u32 + 1
}

/// One cluster run per sync interval of [`SWEEP_INTERVALS`]: (interval, overshoot, liveness
/// at the least).
pub fn sweep(opts: &Options, order: QueueOrder) -> Result<Vec<(f64, u32, f64)>, String> {
    SWEEP_INTERVALS
        .iter()
        .map(|&secs| {
            let o = Options {
                sync_interval: Duration::from_secs_f64(secs),
                ..opts.clone()
            };
            let r = run(&o, order)?;
            let live = r.liveness().map_or(1.0, |(_, min, _)| min);
            Ok((secs, r.overshoot(), live))
        })
        .collect()
}

/// A sweep per method, as text: one line each.
pub fn sweep_text(opts: &Options, sweeps: &[Sweep]) -> String {
    let mut s = String::new();
    for (order, points) in sweeps {
        let _ = write!(s, "overshoot by sync interval ({}):", order.as_str());
        for (secs, over, live) in points {
            let _ = write!(
                s,
                " {secs}s {over} (bound {}, liveness {:.0}%);",
                overshoot_bound(opts, *secs),
                live * 100.0
            );
        }
        s.push('\n');
    }
    s
}
