//! A count-min sketch: approximate counts of many keys in a fixed amount of memory.
//!
//! The sketch is `rows` arrays of `slots` signed counters. Each row hashes a key to one of its
//! cells with a hasher of its own (ahash, seeded at random when the sketch is made); counting
//! adds to the key's cell in every row, and a key's count is the smallest of its cells. A key
//! that shares a cell with other keys in every row is overcounted by their counts; with only
//! additions of positive amounts a key is never undercounted. The store's window counters
//! (`local.rs` in the edge) size their sketches and document the resulting error.
//!
//! Everything is atomic and lock-free: counting a key costs `rows` hashes and `rows` atomic
//! additions, no allocation. Counters wrap on overflow, like the atomics they are. Loads and
//! stores are relaxed: a count read while other threads count is one of the values it passed
//! through, no more.

use std::hash::Hash;
use std::sync::atomic::{AtomicIsize, Ordering};

use ahash::RandomState;

/// A count-min sketch over keys of any hashable type. Memory is fixed when it is made:
/// `rows × slots` counters of `isize`.
pub(crate) struct Sketch {
    /// Row `r` is `cells[r * slots .. (r + 1) * slots]`.
    cells: Box<[AtomicIsize]>,
    /// One hasher per row.
    hashers: Box<[RandomState]>,
    slots: usize,
}

impl Sketch {
    /// A sketch of `rows` hashes of `slots` cells each, all counts zero. Zero rows or slots are
    /// taken as one.
    pub fn new(rows: usize, slots: usize) -> Sketch {
        let rows = rows.max(1);
        let slots = slots.max(1);
        Sketch {
            cells: (0..rows * slots).map(|_| AtomicIsize::new(0)).collect(),
            hashers: (0..rows).map(|_| RandomState::new()).collect(),
            slots,
        }
    }

    /// Rows (independent hashes) in the sketch.
    pub fn rows(&self) -> usize {
        self.hashers.len()
    }

    /// The cell of `key` in each row.
    #[inline]
    fn cells<'a, K: Hash>(&'a self, key: &'a K) -> impl Iterator<Item = &'a AtomicIsize> + 'a {
        let slots = self.slots;
        self.hashers.iter().enumerate().map(move |(row, hasher)| {
            // The hash scaled onto 0..slots (multiply and keep the high word): no division,
            // and any `slots`, not only powers of two.
            let hash = hasher.hash_one(key);
            let slot = ((u128::from(hash) * slots as u128) >> 64) as usize;
            &self.cells[row * slots + slot]
        })
    }

    /// Adds `n` to the count of `key` and returns the key's count after it (the smallest of its
    /// cells).
    #[inline]
    pub(crate) fn incr<K: Hash>(&self, key: K, n: isize) -> isize {
        self.cells(&key).fold(isize::MAX, |least, cell| {
            least.min(cell.fetch_add(n, Ordering::Relaxed).wrapping_add(n))
        })
    }

    /// Takes `n` from the count of `key`: undoes an [`incr`](Sketch::incr) of `n`.
    #[inline]
    pub(crate) fn decr<K: Hash>(&self, key: K, n: isize) {
        for cell in self.cells(&key) {
            cell.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// The count of `key`: never below what was added for it (when only positive amounts were),
    /// more when it shares a cell with other keys in every row.
    #[inline]
    pub fn get<K: Hash>(&self, key: K) -> isize {
        self.cells(&key).fold(isize::MAX, |least, cell| {
            least.min(cell.load(Ordering::Relaxed))
        })
    }

    /// Sets every count to zero. Counting that runs at the same time may land before or after.
    pub fn reset(&self) {
        for cell in self.cells.iter() {
            cell.store(0, Ordering::Relaxed);
        }
    }
}

impl std::fmt::Debug for Sketch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sketch")
            .field("rows", &self.rows())
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_per_key() {
        let s = Sketch::new(4, 1024);
        assert_eq!(s.incr("a", 1), 1);
        assert_eq!(s.incr("b", 1), 1);
        assert_eq!(s.incr("a", 2), 3);
        assert_eq!(s.incr(7u64, 5), 5);
        assert_eq!(s.get("a"), 3);
        assert_eq!(s.get("b"), 1);
        assert_eq!(s.get(7u64), 5);
        assert_eq!(s.get("never"), 0);
    }

    #[test]
    fn decr_undoes_incr() {
        let s = Sketch::new(4, 1024);
        s.incr("a", 3);
        s.incr("b", 3);
        s.decr("a", 1);
        assert_eq!(s.get("a"), 2);
        assert_eq!(s.get("b"), 3);
        s.decr("a", 2);
        assert_eq!(s.get("a"), 0);
    }

    #[test]
    fn reset_clears_every_key() {
        let s = Sketch::new(4, 64);
        for k in 0..100u64 {
            s.incr(k, 2);
        }
        s.reset();
        assert!((0..100u64).all(|k| s.get(k) == 0));
        assert_eq!(s.incr(3u64, 1), 1);
    }

    #[test]
    fn counters_wrap() {
        let s = Sketch::new(1, 1);
        assert_eq!(s.incr("a", isize::MAX), isize::MAX);
        assert_eq!(s.incr("a", 1), isize::MIN);
        assert_eq!(s.get("a"), isize::MIN);
    }

    #[test]
    fn zero_size_is_one_cell() {
        let s = Sketch::new(0, 0);
        assert_eq!((s.rows(), s.slots), (1, 1));
        // One cell: every key shares it.
        s.incr("a", 2);
        assert_eq!(s.incr("b", 3), 5);
        assert_eq!(s.get("a"), 5);
    }

    #[test]
    fn odd_slot_counts_stay_in_their_row() {
        // 3 cells a row: every key lands in 0..3 of each row, so 3 rows hold all the counts.
        let s = Sketch::new(3, 3);
        for k in 0..1000u64 {
            s.incr(k, 1);
        }
        let total: isize = s.cells.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        assert_eq!(total, 3 * 1000);
        for row in s.cells.chunks(3) {
            assert_eq!(
                row.iter().map(|c| c.load(Ordering::Relaxed)).sum::<isize>(),
                1000
            );
        }
    }

    /// The sizing the store uses (`slots = 2 × keys`, 4 rows): no key is undercounted; about
    /// `(1 − e^(−1/2))^4 ≈ 2.4 %` of keys are overcounted; and the textbook bound holds, that a
    /// key is overcounted by more than `e·N/slots` (N the total count) with probability at most
    /// `e^(−rows)`.
    #[test]
    fn overcount_stays_within_the_bounds() {
        const ROWS: usize = 4;
        const KEYS: u64 = 4096;
        let slots = 2 * KEYS as usize;
        let s = Sketch::new(ROWS, slots);
        let truth = |k: u64| (1 + k % 7) as isize;
        let mut total = 0;
        for k in 0..KEYS {
            s.incr(k, truth(k));
            total += truth(k);
        }
        let bound = std::f64::consts::E * total as f64 / slots as f64;
        let (mut over, mut far_over, mut excess) = (0u64, 0u64, 0isize);
        for k in 0..KEYS {
            let got = s.get(k);
            assert!(
                got >= truth(k),
                "key {k} undercounted: {got} < {}",
                truth(k)
            );
            if got > truth(k) {
                over += 1;
                excess += got - truth(k);
            }
            if (got - truth(k)) as f64 > bound {
                far_over += 1;
            }
        }
        let share = over as f64 / KEYS as f64;
        assert!(share < 0.05, "{:.2} % of keys overcounted", share * 100.0);
        let far_share = far_over as f64 / KEYS as f64;
        assert!(
            far_share <= (-(ROWS as f64)).exp(),
            "{far_over} keys beyond e·N/slots"
        );
        // The mean overcount is at most one row's expected share of the others' counts.
        let mean = excess as f64 / KEYS as f64;
        assert!(mean <= total as f64 / slots as f64, "mean overcount {mean}");
    }

    /// Fewer cells than keys: overcounting is the rule, and still never undercounting.
    #[test]
    fn a_crowded_sketch_overcounts_but_never_under() {
        let s = Sketch::new(2, 16);
        for k in 0..256u64 {
            s.incr(k, 1);
        }
        let over = (0..256u64).filter(|&k| s.get(k) > 1).count();
        assert!((0..256u64).all(|k| s.get(k) >= 1));
        assert!(
            over > 200,
            "only {over} of 256 keys overcounted in 2 × 16 cells"
        );
    }
}
