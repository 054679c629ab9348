//! `vestibule simulate --push`: the same visitors, once all polling and once with a share of
//! their pages holding a stream, compared on what push must not change (who gets in, the
//! order, the pace, the cap) and on what it should (requests per admission, the wait).

use super::*;

/// One method run twice: all polling, and with `--push`.
#[derive(Clone, Debug)]
pub struct PushComparison {
    pub order: QueueOrder,
    /// The share of pages that streamed.
    pub push: f64,
    pub polling: Report,
    pub pushed: Report,
}

/// What one run's admitted visitors cost and waited.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Costs {
    pub admitted: usize,
    /// Requests per admission: page loads and check-ins until let in, plus streams opened.
    pub requests_per_admission: f64,
    pub mean_wait_secs: f64,
}

impl Report {
    /// What this run's admitted visitors cost, counting only those whose page streamed
    /// (`streamed`) or only those whose page polled.
    pub fn costs(&self, streamed: bool) -> Costs {
        let admitted: Vec<&Journey> = self
            .journeys
            .iter()
            .filter(|j| j.admitted_ms.is_some() && j.push == streamed)
            .collect();
        let n = admitted.len().max(1) as f64;
        Costs {
            admitted: admitted.len(),
            requests_per_admission: admitted
                .iter()
                .map(|j| f64::from(j.requests + j.streams))
                .sum::<f64>()
                / n,
            mean_wait_secs: admitted.iter().filter_map(|j| j.wait_secs()).sum::<f64>() / n,
        }
    }
}

impl PushComparison {
    /// Kendall's tau-b between the visitors' admission times in the two runs, over those let in
    /// in both: 1 when push lets everyone in in the same order.
    pub fn same_order(&self) -> f64 {
        let (x, y): (Vec<f64>, Vec<f64>) = self
            .polling
            .journeys
            .iter()
            .zip(&self.pushed.journeys)
            .filter_map(|(a, b)| Some((a.admitted_ms? as f64, b.admitted_ms? as f64)))
            .unzip();
        kendall_tau_b(&x, &y)
    }

    /// The comparison as the CLI prints it.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let poll = self.polling.costs(false);
        let all_push = self.pushed.costs(true);
        let admitted = |r: &Report| {
            r.journeys
                .iter()
                .filter(|j| j.admitted_ms.is_some())
                .count()
        };
        let per_minute = |r: &Report| {
            r.admissions_vs_target()
                .map_or("-".to_owned(), |(mean, _, max, _)| {
                    format!("{mean:.1} (max {max})")
                })
        };
        let _ = writeln!(
            s,
            "== push ({}): {:.0}% of pages stream, against all polling ==",
            self.order.as_str(),
            self.push * 100.0
        );
        let _ = writeln!(
            s,
            "let in: {} polling, {} with push; admissions per saturated minute {} vs {}; peak active {} vs {} (cap {})",
            admitted(&self.polling),
            admitted(&self.pushed),
            per_minute(&self.polling),
            per_minute(&self.pushed),
            self.polling.true_peak_active,
            self.pushed.true_peak_active,
            self.polling.cap
        );
        let _ = writeln!(
            s,
            "order: Kendall's tau (arrival vs admission) {:.3} polling, {:.3} with push; worst inversion {:.0} s vs {:.0} s; admission order of the two runs agrees at tau {:.3}",
            self.polling.kendall_tau,
            self.pushed.kendall_tau,
            self.polling.worst_inversion_secs,
            self.pushed.worst_inversion_secs,
            self.same_order()
        );
        let _ = writeln!(
            s,
            "requests per admission: {:.1} polling, {:.1} streaming (page loads and check-ins, plus streams); mean wait {:.0} s vs {:.0} s",
            poll.requests_per_admission,
            all_push.requests_per_admission,
            poll.mean_wait_secs,
            all_push.mean_wait_secs
        );
        if self.push < 1.0 {
            let polled = self.pushed.costs(false);
            let _ = writeln!(
                s,
                "in the run with push, pages that poll: {:.1} requests per admission, mean wait {:.0} s; pages that stream: {:.1}, {:.0} s",
                polled.requests_per_admission,
                polled.mean_wait_secs,
                all_push.requests_per_admission,
                all_push.mean_wait_secs
            );
        }
        s
    }
}

/// Runs `order` all polling and with `opts.push`, on the same arrivals.
pub fn compare(opts: &Options, order: QueueOrder) -> Result<PushComparison, String> {
    let polling = run(
        &Options {
            push: 0.0,
            ..opts.clone()
        },
        order,
    )?;
    let pushed = run(opts, order)?;
    Ok(PushComparison {
        order,
        push: opts.push,
        polling,
        pushed,
    })
}
