//! Counters and a histogram that every worker thread updates without writing to the others'
//! cache lines.
//!
//! A `prometheus` counter is one atomic that every request of every thread increments, and its
//! histogram is five: with several worker threads each increment pulls the cache line over
//! from the core that wrote it last, a cost that grows with the threads (issue 16). Here each
//! series has one slot per shard, padded to its own cache line; a thread picks its shard once
//! (round robin), so with up to [`SHARDS`] threads no two write the same line. A scrape sums
//! the shards, so the exposition is exact and unchanged: same names, help, types and labels.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use prometheus::core::{Collector, Desc};
use prometheus::proto;

/// Slots per series. Threads beyond this share slots (still exact, only slower).
pub(crate) const SHARDS: usize = 16;

/// One cache line (two on CPUs that fetch lines in pairs).
#[repr(align(128))]
#[derive(Default)]
struct Slot(AtomicU64);

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's slot, `usize::MAX` until its first update (a const initializer and no
    /// destructor: the cheapest kind of thread-local to read).
    static SHARD: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

fn shard() -> usize {
    SHARD.with(|s| {
        let shard = s.get();
        if shard != usize::MAX {
            return shard;
        }
        let shard = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
        s.set(shard);
        shard
    })
}

/// A monotonic count, one slot per shard.
pub struct Counter {
    slots: Box<[Slot]>,
}

impl Counter {
    fn new() -> Counter {
        Counter {
            slots: (0..SHARDS).map(|_| Slot::default()).collect(),
        }
    }

    pub fn inc(&self) {
        self.inc_by(1);
    }

    pub(crate) fn inc_by(&self, n: u64) {
        self.slots[shard()].0.fetch_add(n, Ordering::Relaxed);
    }

    /// The sum over the shards.
    pub fn get(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

fn desc(name: &str, help: &str, labels: &[&str]) -> Desc {
    Desc::new(
        name.to_owned(),
        help.to_owned(),
        labels.iter().map(|l| (*l).to_owned()).collect(),
        Default::default(),
    )
    .unwrap_or_else(|e| unreachable!("{name}: {e}"))
}

/// Label pairs sorted by name, as `prometheus`'s own families expose them.
fn label_pairs(names: &[String], values: &[String]) -> Vec<proto::LabelPair> {
    let mut pairs: Vec<proto::LabelPair> = names
        .iter()
        .zip(values)
        .map(|(n, v)| {
            let mut p = proto::LabelPair::default();
            p.set_name(n.clone());
            p.set_value(v.clone());
            p
        })
        .collect();
    pairs.sort_by(|a, b| a.name().cmp(b.name()));
    pairs
}

fn family(
    desc: &Desc,
    kind: proto::MetricType,
    metrics: Vec<proto::Metric>,
) -> proto::MetricFamily {
    let mut f = proto::MetricFamily::default();
    f.set_name(desc.fq_name.clone());
    f.set_help(desc.help.clone());
    f.set_field_type(kind);
    f.set_metric(metrics);
    f
}

/// A family of [`Counter`]s by label values, exposed as a Prometheus counter family.
#[derive(Clone)]
pub struct CounterVec {
    desc: Arc<Desc>,
    series: Arc<RwLock<BTreeMap<Vec<String>, Arc<Counter>>>>,
}

impl CounterVec {
    pub fn new(name: &str, help: &str, labels: &[&str]) -> CounterVec {
        CounterVec {
            desc: Arc::new(desc(name, help, labels)),
            series: Arc::default(),
        }
    }

    /// The series with these label values (one per label, in order), created at zero the first
    /// time. Look it up once and keep it: this takes a lock.
    pub fn with_label_values(&self, values: &[&str]) -> Arc<Counter> {
        debug_assert_eq!(values.len(), self.desc.variable_labels.len());
        let key: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        if let Some(c) = self
            .series
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return c.clone();
        }
        self.series
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_insert_with(|| Arc::new(Counter::new()))
            .clone()
    }
}

impl Collector for CounterVec {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<proto::MetricFamily> {
        let series = self.series.read().unwrap_or_else(|p| p.into_inner());
        let metrics = series
            .iter()
            .map(|(values, c)| {
                let mut value = proto::Counter::default();
                value.set_value(c.get() as f64);
                let mut m =
                    proto::Metric::from_label(label_pairs(&self.desc.variable_labels, values));
                m.set_counter(value);
                m
            })
            .collect();
        vec![family(&self.desc, proto::MetricType::COUNTER, metrics)]
    }
}

/// One shard of a histogram: counts by bucket (the last is +Inf), and the sum of observations
/// in nanoseconds-of-a-second units (1e-9), so that it adds as an integer.
struct HistogramShard {
    counts: Box<[AtomicU64]>,
    sum_nanos: AtomicU64,
}

#[repr(align(128))]
struct PaddedShard(HistogramShard);

/// A histogram of seconds without labels, one set of bucket counts per shard.
#[derive(Clone)]
pub struct Histogram {
    desc: Arc<Desc>,
    bounds: Arc<[f64]>,
    shards: Arc<[PaddedShard]>,
}

impl Histogram {
    /// `bounds`: the upper bounds, increasing; +Inf is implied.
    pub fn new(name: &str, help: &str, bounds: &[f64]) -> Histogram {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        Histogram {
            desc: Arc::new(desc(name, help, &[])),
            bounds: bounds.into(),
            shards: (0..SHARDS)
                .map(|_| {
                    PaddedShard(HistogramShard {
                        counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
                        sum_nanos: AtomicU64::new(0),
                    })
                })
                .collect(),
        }
    }

    /// Counts one observation of `seconds` (negative or NaN counts as 0).
    pub fn observe(&self, seconds: f64) {
        let seconds = if seconds.is_finite() && seconds > 0.0 {
            seconds
        } else {
            0.0
        };
        let bucket = self.bounds.partition_point(|b| *b < seconds);
        let s = &self.shards[shard()].0;
        s.counts[bucket].fetch_add(1, Ordering::Relaxed);
        s.sum_nanos
            .fetch_add((seconds * 1e9) as u64, Ordering::Relaxed);
    }

    /// (count, sum in seconds, cumulative count per bound then +Inf).
    pub fn get(&self) -> (u64, f64, Vec<u64>) {
        let mut per_bucket = vec![0u64; self.bounds.len() + 1];
        let mut sum_nanos = 0u64;
        for s in self.shards.iter() {
            for (total, c) in per_bucket.iter_mut().zip(s.0.counts.iter()) {
                *total = total.wrapping_add(c.load(Ordering::Relaxed));
            }
            sum_nanos = sum_nanos.wrapping_add(s.0.sum_nanos.load(Ordering::Relaxed));
        }
        let mut running = 0u64;
        let cumulative: Vec<u64> = per_bucket
            .iter()
            .map(|c| {
                running = running.wrapping_add(*c);
                running
            })
            .collect();
        (running, sum_nanos as f64 / 1e9, cumulative)
    }
}

impl Collector for Histogram {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<proto::MetricFamily> {
        let (count, sum, cumulative) = self.get();
        let mut h = proto::Histogram::default();
        h.set_sample_count(count);
        h.set_sample_sum(sum);
        h.set_bucket(
            self.bounds
                .iter()
                .zip(&cumulative)
                .map(|(bound, c)| {
                    let mut b = proto::Bucket::default();
                    b.set_upper_bound(*bound);
                    b.set_cumulative_count(*c);
                    b
                })
                .collect(),
        );
        let mut m = proto::Metric::default();
        m.set_histogram(h);
        vec![family(&self.desc, proto::MetricType::HISTOGRAM, vec![m])]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Encoder, Registry, TextEncoder};

    fn render(r: &Registry) -> String {
        let mut out = Vec::new();
        TextEncoder::new().encode(&r.gather(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn counts_from_many_threads_add_up_exactly() {
        let family = CounterVec::new("t_total", "Test.", &["kind"]);
        let a = family.with_label_values(&["a"]);
        std::thread::scope(|s| {
            for _ in 0..(SHARDS + 3) {
                let a = a.clone();
                let family = family.clone();
                s.spawn(move || {
                    let b = family.with_label_values(&["b"]);
                    for _ in 0..1000 {
                        a.inc();
                        b.inc_by(2);
                    }
                });
            }
        });
        assert_eq!(a.get(), 1000 * (SHARDS as u64 + 3));
        assert_eq!(
            family.with_label_values(&["b"]).get(),
            2000 * (SHARDS as u64 + 3)
        );
        let r = Registry::new();
        r.register(Box::new(family.clone())).unwrap();
        let text = render(&r);
        assert!(
            text.contains("# HELP t_total Test.\n# TYPE t_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains(&format!("t_total{{kind=\"a\"}} {}\n", 1000 * (SHARDS + 3))),
            "{text}"
        );
        assert!(
            text.contains(&format!("t_total{{kind=\"b\"}} {}\n", 2000 * (SHARDS + 3))),
            "{text}"
        );
    }

    #[test]
    fn the_same_labels_give_the_same_series() {
        let family = CounterVec::new("u_total", "Test.", &["x", "y"]);
        family.with_label_values(&["1", "2"]).inc();
        family.with_label_values(&["1", "2"]).inc();
        assert_eq!(family.with_label_values(&["1", "2"]).get(), 2);
        assert_eq!(family.with_label_values(&["2", "1"]).get(), 0);
    }

    #[test]
    fn labels_are_exposed_in_the_order_prometheus_own_families_use() {
        let ours = CounterVec::new("ours_total", "Test.", &["room", "reason"]);
        let theirs = prometheus::IntCounterVec::new(
            prometheus::Opts::new("theirs_total", "Test."),
            &["room", "reason"],
        )
        .unwrap();
        ours.with_label_values(&["sale", "revoked"]).inc_by(5);
        theirs.with_label_values(&["sale", "revoked"]).inc_by(5);
        let r = Registry::new();
        r.register(Box::new(ours)).unwrap();
        r.register(Box::new(theirs)).unwrap();
        let text = render(&r);
        assert!(
            text.contains("ours_total{reason=\"revoked\",room=\"sale\"} 5\n"),
            "{text}"
        );
        assert!(
            text.contains("theirs_total{reason=\"revoked\",room=\"sale\"} 5\n"),
            "{text}"
        );
    }

    #[test]
    fn histogram_matches_prometheus_own() {
        let bounds = [0.001, 0.01, 0.1, 1.0];
        let ours = Histogram::new("ours_seconds", "Test.", &bounds);
        let theirs = prometheus::Histogram::with_opts(
            prometheus::HistogramOpts::new("theirs_seconds", "Test.").buckets(bounds.to_vec()),
        )
        .unwrap();
        let samples = [0.0005, 0.001, 0.002, 0.05, 0.1, 0.7, 3.0, 12.5, -1.0];
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for v in samples {
                        ours.observe(v);
                        theirs.observe(v.max(0.0));
                    }
                });
            }
        });
        let r = Registry::new();
        r.register(Box::new(ours.clone())).unwrap();
        r.register(Box::new(theirs.clone())).unwrap();
        let text = render(&r);
        let lines = |prefix: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with(prefix) && !l.contains("_sum"))
                .map(|l| l.replacen(prefix, "", 1))
                .collect()
        };
        assert_eq!(lines("ours_seconds"), lines("theirs_seconds"), "{text}");
        assert!(text.contains("# TYPE ours_seconds histogram"), "{text}");
        let (count, sum, _) = ours.get();
        assert_eq!(count, 4 * samples.len() as u64);
        assert!((sum - theirs.get_sample_sum()).abs() < 1e-6, "{sum}");
    }
}
