//! The penalty box: keys denied until a deadline, exact, with a cap.
//!
//! When the box is full, a new entry evicts the one with the least time left (Fastly's rule):
//! that entry was about to be released anyway. Expired entries are dropped as they are met and
//! by [`PenaltyBox::len`]. The box is sharded so concurrent requests rarely share a lock, and a
//! lookup in an empty shard (nobody penalized: the usual case) takes no lock at all.

use std::collections::{BTreeSet, HashMap};

use crate::shard::{CountedShard, Held};
use crate::time::Timestamp;

const SHARDS: usize = 16;

#[derive(Default)]
struct Shard {
    until: HashMap<u64, u64>,
    /// (deadline ms, key): the first entry has the least time left.
    by_deadline: BTreeSet<(u64, u64)>,
}

impl Held for Shard {
    fn held(&self) -> usize {
        self.until.len()
    }
}

impl Shard {
    fn remove(&mut self, key: u64) {
        if let Some(deadline) = self.until.remove(&key) {
            self.by_deadline.remove(&(deadline, key));
        }
    }

    fn purge(&mut self, now_ms: u64) {
        while let Some(&(deadline, key)) = self.by_deadline.first() {
            if deadline > now_ms {
                break;
            }
            self.by_deadline.pop_first();
            self.until.remove(&key);
        }
    }
}

/// A rule looks its key up on every request: an empty shard (the usual case) is known from its
/// count alone, without taking its lock.
pub struct PenaltyBox {
    shards: [CountedShard<Shard>; SHARDS],
    cap_per_shard: usize,
}

impl PenaltyBox {
    /// A box holding at most about `cap` keys.
    pub fn new(cap: usize) -> PenaltyBox {
        PenaltyBox {
            shards: std::array::from_fn(|_| CountedShard::default()),
            cap_per_shard: cap.div_ceil(SHARDS).max(1),
        }
    }

    fn slot(&self, key: u64) -> &CountedShard<Shard> {
        // The low bits feed hash maps; use the high ones to pick a shard.
        &self.shards[(key >> 60) as usize % SHARDS]
    }

    /// The deadline of `key`, if it is in the box at `now`.
    pub fn until(&self, key: u64, now: Timestamp) -> Option<Timestamp> {
        let slot = self.slot(key);
        if slot.held() == 0 {
            return None;
        }
        slot.change(|shard| match shard.until.get(&key) {
            Some(&deadline) if deadline > now.millis() => Some(Timestamp::from_millis(deadline)),
            Some(_) => {
                shard.remove(key);
                None
            }
            None => None,
        })
    }

    /// Puts `key` in the box until `deadline` (replacing an earlier deadline).
    pub fn put(&self, key: u64, deadline: Timestamp, now: Timestamp) {
        let cap = self.cap_per_shard;
        self.slot(key).change(|shard| {
            shard.remove(key);
            shard.purge(now.millis());
            if shard.until.len() >= cap {
                if let Some((_, evicted)) = shard.by_deadline.pop_first() {
                    shard.until.remove(&evicted);
                }
            }
            shard.until.insert(key, deadline.millis());
            shard.by_deadline.insert((deadline.millis(), key));
        });
    }

    /// Keys in the box at `now` (expired ones are dropped on the way).
    pub fn len(&self, now: Timestamp) -> usize {
        self.shards
            .iter()
            .map(|slot| {
                slot.change(|shard| {
                    shard.purge(now.millis());
                    shard.until.len()
                })
            })
            .sum()
    }

    pub fn is_empty(&self, now: Timestamp) -> bool {
        self.len(now) == 0
    }

    pub fn capacity(&self) -> usize {
        self.cap_per_shard * SHARDS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn holds_until_the_deadline() {
        let b = PenaltyBox::new(100);
        b.put(1, at(5_000), at(0));
        assert_eq!(b.until(1, at(4_999)), Some(at(5_000)));
        assert_eq!(b.until(1, at(5_000)), None);
        assert_eq!(b.len(at(5_000)), 0);
        assert_eq!(b.until(2, at(0)), None);
    }

    #[test]
    fn a_shard_emptied_and_filled_again_is_looked_up_again() {
        let b = PenaltyBox::new(100);
        let (one, two) = (1u64, 2u64); // both in shard 0
        assert_eq!(b.until(one, at(0)), None, "an empty box");
        b.put(one, at(1_000), at(0));
        assert_eq!(b.until(two, at(0)), None);
        // The only key expires on lookup: the shard is empty again.
        assert_eq!(b.until(one, at(1_000)), None);
        assert_eq!(b.slot(one).held(), 0);
        b.put(two, at(2_000), at(1_000));
        assert_eq!(b.until(two, at(1_500)), Some(at(2_000)));
        // Emptied by a count too.
        assert_eq!(b.len(at(2_000)), 0);
        assert_eq!(b.until(two, at(1_999)), None, "dropped by len at 2,000");
        b.put(two, at(3_000), at(2_000));
        assert_eq!(b.until(two, at(2_000)), Some(at(3_000)));
    }

    #[test]
    fn a_full_box_evicts_the_least_time_left() {
        let b = PenaltyBox::new(SHARDS); // one per shard
        let key = |i: u64| i; // all in shard 0
        b.put(key(1), at(9_000), at(0));
        b.put(key(2), at(3_000), at(0));
        assert_eq!(b.len(at(0)), 1, "cap of one per shard");
        // Key 1 had more time left than key 2, but the newest entry always goes in: key 1 was
        // the only entry, so it was evicted.
        assert_eq!(b.until(key(2), at(0)), Some(at(3_000)));
        let b = PenaltyBox::new(2 * SHARDS); // two per shard
        b.put(key(1), at(9_000), at(0));
        b.put(key(2), at(3_000), at(0));
        b.put(key(3), at(6_000), at(0));
        assert_eq!(b.until(key(2), at(0)), None, "least time left goes first");
        assert!(b.until(key(1), at(0)).is_some() && b.until(key(3), at(0)).is_some());
    }

    #[test]
    fn memory_stays_bounded_under_a_flood() {
        let b = PenaltyBox::new(1_000);
        for i in 0..100_000u64 {
            b.put(
                i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                at(1_000_000 + i),
                at(i),
            );
        }
        assert!(b.len(at(0)) <= b.capacity());
    }
}
