//! Concurrency slots: how many requests of one key are in flight, and a [`Guard`] that gives a
//! slot back when the request ends.
//!
//! The counts live in a [`Sketch`] shared by every guard, so a concurrency rule takes fixed
//! memory however many keys it sees (`4 × 8192` counters, 256 KiB), and a key's count is
//! estimated the count-min way: never below the true count, above it only when the key shares
//! a cell with other busy keys in every row. Taking a slot costs the sketch's hashes and atomic
//! additions plus one reference count; giving it back, the same in subtractions. No lock, no
//! allocation.
//!
//! The count is taken before the limit is checked: a caller over its limit drops the guard at
//! once, and the slot is free again.

use std::sync::Arc;

use crate::sketch::Sketch;

const ROWS: usize = 4;
const SLOTS: usize = 8192;

/// In-flight counts of many keys (keys are already hashes, like a rule's key).
#[derive(Debug)]
pub(crate) struct Inflight {
    counts: Arc<Sketch>,
}

impl Default for Inflight {
    fn default() -> Self {
        Inflight::new()
    }
}

impl Inflight {
    /// Empty counts, sized as a concurrency rule's: 4 rows of 8192 cells.
    pub fn new() -> Inflight {
        Inflight::with_size(ROWS, SLOTS)
    }

    /// Empty counts in a sketch of `rows × slots` cells (see [`Sketch::new`]).
    pub(crate) fn with_size(rows: usize, slots: usize) -> Inflight {
        Inflight {
            counts: Arc::new(Sketch::new(rows, slots)),
        }
    }

    /// Takes `n` slots for `key` and returns the guard that holds them with the key's count
    /// after taking them (them included). Dropping the guard gives the slots back.
    #[must_use = "dropping the guard gives the slots back at once"]
    #[inline]
    pub(crate) fn incr(&self, key: u64, n: isize) -> (Guard, isize) {
        let count = self.counts.incr(key, n);
        let guard = Guard {
            counts: Arc::clone(&self.counts),
            key,
            n,
        };
        (guard, count)
    }

    /// The count of `key` in flight now.
    #[cfg(test)]
    pub fn get(&self, key: u64) -> isize {
        self.counts.get(key)
    }
}

/// Slots held for one key; dropping it gives them back. It may outlive the [`Inflight`] that
/// made it (a reload may replace the rule while requests are still running).
pub struct Guard {
    counts: Arc<Sketch>,
    key: u64,
    n: isize,
}

impl Guard {
    /// The count of this guard's key in flight now (this guard's slots included).
    pub fn get(&self) -> isize {
        self.counts.get(self.key)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.counts.decr(self.key, self.n);
    }
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("key", &self.key)
            .field("n", &self.n)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::thread;

    #[test]
    fn guards_take_and_give_back() {
        let inflight = Inflight::new();
        let (a, count) = inflight.incr(1, 1);
        assert_eq!(count, 1);
        let (b, count) = inflight.incr(1, 2);
        assert_eq!(count, 3);
        assert_eq!(inflight.get(2), 0);
        drop(a);
        assert_eq!(b.get(), 2);
        drop(b);
        assert_eq!(inflight.get(1), 0);
        let (_c, count) = inflight.incr(1, 1);
        assert_eq!(count, 1);
    }

    #[test]
    fn keys_count_apart() {
        let inflight = Inflight::new();
        let guards: Vec<_> = (0..100u64)
            .flat_map(|k| (0..=k % 3).map(move |_| k))
            .map(|k| inflight.incr(k, 1).0)
            .collect();
        for k in 0..100u64 {
            assert_eq!(inflight.get(k), (k % 3 + 1) as isize, "key {k}");
        }
        drop(guards);
        assert!((0..100u64).all(|k| inflight.get(k) == 0));
    }

    #[test]
    fn a_guard_outlives_its_counts() {
        let inflight = Inflight::new();
        let (guard, _) = inflight.incr(9, 1);
        drop(inflight);
        assert_eq!(guard.get(), 1);
        drop(guard);
    }

    /// Threads take and give back slots of one key: each sees its own slot and at most one per
    /// thread, and every slot is back at the end. Guards also cross threads.
    #[test]
    fn threads_share_the_counts() {
        const THREADS: usize = 8;
        const ROUNDS: usize = 5_000;
        let inflight = Arc::new(Inflight::new());
        let start = Arc::new(Barrier::new(THREADS));
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let inflight = Arc::clone(&inflight);
                let start = Arc::clone(&start);
                thread::spawn(move || {
                    start.wait();
                    for _ in 0..ROUNDS {
                        let (guard, count) = inflight.incr(42, 1);
                        assert!((1..=THREADS as isize).contains(&count), "count {count}");
                        drop(guard);
                    }
                    // One held slot, handed back to the spawning thread.
                    inflight.incr(42, 1).0
                })
            })
            .collect();
        let held: Vec<Guard> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        assert_eq!(inflight.get(42), THREADS as isize);
        drop(held);
        assert_eq!(inflight.get(42), 0);
    }
}
