//! The receipts of verifiable draws a store remembers (`room::draw`), apart from its marks.
//!
//! A pre-queue hands out a receipt to every identity that joins it, which can be far more than
//! the marks' bound; sharing that bound would let a large pre-queue (or anyone with many
//! addresses) push revocations, penalty boxes and used codes out of memory. Here each draw has
//! its own set, in the order receipts were first noted, bounded by [`MAX_RECEIPTS`]: past it a
//! receipt is not remembered but counted, and the reveal says how many were left out. A draw's
//! set is forgotten at its `until`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::time::Timestamp;

/// Receipts remembered per draw at most (8 bytes each, twice: about 32 MiB at the bound).
pub const MAX_RECEIPTS: usize = 1_000_000;

/// A draw's receipts as a store knows them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiptList {
    /// Receipts from the asked index on, in the order they were first noted.
    pub ids: Vec<u64>,
    /// How many are remembered in all.
    pub total: usize,
    /// How many were handed out past [`MAX_RECEIPTS`] and are not remembered.
    pub left_out: u64,
}

#[derive(Debug, Default)]
struct Set {
    until_ms: u64,
    seen: hashbrown::HashSet<u64, ahash::RandomState>,
    order: Vec<u64>,
    left_out: u64,
}

/// Every draw's receipts, by scope.
#[derive(Debug, Default)]
pub struct Receipts {
    sets: Mutex<HashMap<Arc<str>, Set>>,
}

impl Receipts {
    /// Notes `id` in `scope`'s draw, remembered until `until`. Whether it is new.
    pub fn note(&self, scope: &str, id: u64, until: Timestamp, now: Timestamp) -> bool {
        let mut sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        let set = match sets.get_mut(scope) {
            Some(set) => set,
            None => sets.entry(Arc::from(scope)).or_default(),
        };
        if set.until_ms <= now.millis() && !set.order.is_empty() {
            // A draw that ended and was not swept yet: a new one under the same name.
            *set = Set::default();
        }
        set.until_ms = set.until_ms.max(until.millis());
        if set.seen.contains(&id) {
            return false;
        }
        if set.order.len() >= MAX_RECEIPTS {
            set.left_out += 1;
            return false;
        }
        set.seen.insert(id);
        set.order.push(id);
        true
    }

    /// `scope`'s receipts from index `from` on (in the order noted).
    pub fn list(&self, scope: &str, from: usize, now: Timestamp) -> ReceiptList {
        let sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        match sets.get(scope).filter(|s| s.until_ms > now.millis()) {
            Some(set) => ReceiptList {
                ids: set
                    .order
                    .get(from..)
                    .map(<[u64]>::to_vec)
                    .unwrap_or_default(),
                total: set.order.len(),
                left_out: set.left_out,
            },
            None => ReceiptList::default(),
        }
    }

    /// Forgets the draws whose `until` has passed.
    pub fn sweep(&self, now: Timestamp) {
        let mut sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        sets.retain(|_, s| s.until_ms > now.millis());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_are_kept_once_in_order_until_their_draw_ends() {
        let r = Receipts::default();
        let at = Timestamp::from_secs;
        assert!(r.note("a", 3, at(100), at(1)));
        assert!(r.note("a", 1, at(100), at(1)));
        assert!(!r.note("a", 3, at(100), at(2)), "once");
        assert!(r.note("b", 3, at(100), at(2)), "draws are apart");
        assert_eq!(
            r.list("a", 0, at(50)),
            ReceiptList {
                ids: vec![3, 1],
                total: 2,
                left_out: 0
            }
        );
        assert_eq!(r.list("a", 1, at(50)).ids, vec![1]);
        assert_eq!(r.list("a", 5, at(50)).ids, Vec::<u64>::new());
        assert_eq!(r.list("a", 0, at(100)), ReceiptList::default(), "ended");
        r.sweep(at(100));
        assert_eq!(r.list("b", 0, at(99)), ReceiptList::default());
    }

    #[test]
    fn past_the_bound_receipts_are_counted_not_kept() {
        let r = Receipts::default();
        let at = Timestamp::from_secs;
        for id in 0..MAX_RECEIPTS as u64 + 3 {
            r.note("a", id, at(100), at(1));
        }
        let l = r.list("a", MAX_RECEIPTS - 1, at(2));
        assert_eq!((l.ids.len(), l.total, l.left_out), (1, MAX_RECEIPTS, 3));
    }
}
