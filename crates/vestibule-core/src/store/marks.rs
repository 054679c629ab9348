//! The in-process store's marks (revoked sessions, counted winners, shared penalty boxes), in
//! shards.
//!
//! Marks are written rarely (an admission, a revoke, a key sent to a penalty box) and read on
//! every request that could be marked: every admitted visitor's request in a capacity room
//! asks whether its session was revoked, and every request under a shared rate-limit rule asks
//! whether its key is in the box. Behind one lock, each of those reads was a write to the lock's
//! line, which every worker thread shares, and the lookup allocated the scope's name. Here the
//! marks are spread over [`SHARDS`] shards by a keyed hash of the mark (so nobody can aim them
//! at one shard), each a [`CountedShard`] (its own cache lines, with a count of what it holds):
//! a read finds an empty shard with one load and no lock, and otherwise locks only its shard, which other
//! threads' reads of other marks do not touch.
//!
//! At most [`MAX_MARKS`] are remembered: once full, the expired go, then the mark closest to its
//! expiry (across all shards). The total is the sum of the shards' counts. Two threads adding marks at that very moment can each add one
//! beyond it, until the next addition makes room again.

use std::collections::HashMap;
use std::sync::Arc;

use super::Mark;
use crate::shard::{CountedShard, Held};
use crate::time::Timestamp;

/// Marks remembered at most; beyond it the mark closest to its expiry goes first. Marks are set
/// by admissions and revokes, which capacity limits and the origin already bound.
pub const MAX_MARKS: usize = 100_000;

/// Shards (a power of two).
pub const SHARDS: usize = 64;

/// Per scope (a room, a rule): each mark and when it may be forgotten, in ms.
type ByScope =
    hashbrown::HashMap<Arc<str>, HashMap<Mark, u64, ahash::RandomState>, ahash::RandomState>;

impl Held for ByScope {
    /// Marks of every scope (a store holds the scopes of a few rooms and rules).
    fn held(&self) -> usize {
        self.values().map(HashMap::len).sum()
    }
}

/// When `mark` of `scope` is remembered: `Some(false)` if it holds at `now`, else `Some(true)`
/// with it set again until `until` (expired but not yet swept; the counts stay). `None` when
/// it is not remembered.
fn renew(
    map: &mut ByScope,
    scope: &str,
    mark: Mark,
    until: Timestamp,
    now: Timestamp,
) -> Option<bool> {
    let at = map.get_mut(scope)?.get_mut(&mark)?;
    if *at > now.millis() {
        return Some(false);
    }
    *at = until.millis();
    Some(true)
}

/// Sets `mark` of `scope` until `until` (`renew` found it not remembered).
fn insert(map: &mut ByScope, scope: &str, mark: Mark, until: Timestamp) {
    // The scope's name is allocated only when it is new.
    map.entry_ref(scope)
        .or_default()
        .insert(mark, until.millis());
}

pub struct Marks {
    hasher: ahash::RandomState,
    shards: Box<[CountedShard<ByScope>]>,
}

impl Default for Marks {
    fn default() -> Self {
        Marks {
            hasher: ahash::RandomState::new(),
            shards: (0..SHARDS).map(|_| CountedShard::default()).collect(),
        }
    }
}

impl Marks {
    fn shard(&self, mark: Mark) -> &CountedShard<ByScope> {
        &self.shards[self.hasher.hash_one(mark) as usize & (SHARDS - 1)]
    }

    /// How many marks all shards hold, expired or not (read without their locks).
    fn total(&self) -> usize {
        self.shards.iter().map(CountedShard::held).sum()
    }

    /// Until when `mark` of `scope` holds, if it does at `now`.
    pub fn until(&self, scope: &str, mark: Mark, now: Timestamp) -> Option<Timestamp> {
        let shard = self.shard(mark);
        if shard.held() == 0 {
            return None;
        }
        shard.read(|map| {
            map.get(scope)?
                .get(&mark)
                .filter(|&&at| at > now.millis())
                .map(|&at| Timestamp::from_millis(at))
        })
    }

    /// The marks of `kind` in `scope` that hold at `now`, with when each ends.
    pub fn of(&self, scope: &str, kind: super::MarkKind, now: Timestamp) -> Vec<(u64, Timestamp)> {
        let mut out = Vec::new();
        for shard in self.shards.iter().filter(|s| s.held() > 0) {
            shard.read(|map| {
                if let Some(marks) = map.get(scope) {
                    out.extend(
                        marks
                            .iter()
                            .filter(|(m, at)| m.kind == kind && **at > now.millis())
                            .map(|(m, at)| (m.id, Timestamp::from_millis(*at))),
                    );
                }
            });
        }
        out.sort_unstable();
        out
    }

    /// Marks `mark` of `scope` until `until`; false if it already held at `now`.
    pub fn set(&self, scope: &str, mark: Mark, until: Timestamp, now: Timestamp) -> bool {
        let shard = self.shard(mark);
        let done = shard.change(|map| {
            if let Some(set) = renew(map, scope, mark, until, now) {
                return Some(set);
            }
            if self.total() < MAX_MARKS {
                insert(map, scope, mark, until);
                return Some(true);
            }
            None
        });
        if let Some(set) = done {
            return set;
        }
        // Full: make room without holding this shard's lock (one lock at a time), then add.
        self.make_room(now);
        shard.change(|map| {
            renew(map, scope, mark, until, now).unwrap_or_else(|| {
                insert(map, scope, mark, until);
                true
            })
        })
    }

    /// Forgets the expired marks; then, if all are still needed and there is no room, the one
    /// closest to its expiry.
    fn make_room(&self, now: Timestamp) {
        self.forget_expired(now);
        if self.total() < MAX_MARKS {
            return;
        }
        let oldest = self
            .shards
            .iter()
            .enumerate()
            .filter_map(|(i, shard)| {
                shard.read(|map| {
                    map.iter()
                        .flat_map(|(scope, marks)| {
                            marks.iter().map(move |(m, &at)| (at, scope, *m))
                        })
                        .min_by_key(|&(at, _, _)| at)
                        .map(|(at, scope, m)| (at, i, scope.clone(), m))
                })
            })
            .min_by_key(|&(at, ..)| at);
        if let Some((at, i, scope, mark)) = oldest {
            self.shards[i].change(|map| {
                // Unless another thread already took it away or set it again.
                if let Some(marks) = map.get_mut(&scope) {
                    if marks.get(&mark) == Some(&at) {
                        marks.remove(&mark);
                        if marks.is_empty() {
                            map.remove(&scope);
                        }
                    }
                }
            });
        }
    }

    /// Forgets every mark expired at `now`.
    pub(crate) fn forget_expired(&self, now: Timestamp) {
        for shard in self.shards.iter() {
            if shard.held() == 0 {
                continue;
            }
            shard.change(|map| {
                map.retain(|_, marks| {
                    marks.retain(|_, &mut at| at > now.millis());
                    !marks.is_empty()
                })
            });
        }
    }

    /// How many marks are remembered, expired or not.
    pub fn len(&self) -> usize {
        self.total()
    }

    /// Whether no mark is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `mark` of `scope` is remembered, expired or not.
    #[cfg(test)]
    fn remembers(&self, scope: &str, mark: Mark) -> bool {
        self.shard(mark).read(|map| {
            map.get(scope)
                .is_some_and(|marks| marks.contains_key(&mark))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MarkKind;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn mark(id: u64) -> Mark {
        Mark {
            kind: MarkKind::Revoked,
            id,
        }
    }

    #[test]
    fn marks_are_capped_and_the_closest_to_expiry_go_first() {
        let marks = Marks::default();
        for i in 0..MAX_MARKS as u64 + 10 {
            assert!(marks.set("room", mark(i), at(1_000_000 + i), at(0)));
        }
        assert_eq!(marks.len(), MAX_MARKS);
        let held: usize = marks
            .shards
            .iter()
            .map(|s| s.read(|map| map.values().map(HashMap::len).sum::<usize>()))
            .sum();
        assert_eq!(held, MAX_MARKS, "the count is what the shards hold");
        for i in 0..10 {
            assert!(!marks.remembers("room", mark(i)), "{i} was closest");
        }
        for i in 10..MAX_MARKS as u64 + 10 {
            assert!(marks.remembers("room", mark(i)), "{i} was kept");
        }
    }

    #[test]
    fn when_full_the_expired_go_before_any_mark_still_needed() {
        let marks = Marks::default();
        for i in 0..MAX_MARKS as u64 {
            // Every other mark expires at 500.
            let until = if i % 2 == 0 { 500 } else { 1_000_000 };
            assert!(marks.set("room", mark(i), at(until), at(0)));
        }
        assert!(marks.set("room", mark(u64::MAX), at(2_000_000), at(600)));
        assert_eq!(marks.len(), MAX_MARKS / 2 + 1);
        assert!(marks.remembers("room", mark(1)));
        assert!(!marks.remembers("room", mark(0)));
    }

    #[test]
    fn an_expired_mark_is_set_again_and_counted_once() {
        let marks = Marks::default();
        assert!(marks.set("room", mark(7), at(100), at(0)));
        assert!(!marks.set("room", mark(7), at(200), at(50)), "still holds");
        assert!(marks.set("room", mark(7), at(300), at(150)), "expired");
        assert_eq!(marks.len(), 1);
        assert_eq!(marks.until("room", mark(7), at(250)), Some(at(300)));
        marks.forget_expired(at(300));
        assert_eq!(marks.len(), 0);
        assert_eq!(marks.until("room", mark(7), at(0)), None);
        assert!(marks.set("room", mark(7), at(400), at(300)), "set again");
        assert_eq!(marks.until("room", mark(7), at(301)), Some(at(400)));
    }

    #[test]
    fn threads_setting_the_same_marks_count_each_once() {
        let marks = Marks::default();
        let won = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for i in 0..2_000 {
                        if marks.set("room", mark(i), at(10_000), at(0)) {
                            won.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(won.into_inner(), 2_000, "each mark set once");
        assert_eq!(marks.len(), 2_000);
        for i in 0..2_000 {
            assert_eq!(marks.until("room", mark(i), at(1)), Some(at(10_000)));
        }
    }
}
