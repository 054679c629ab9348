//! A store shared by several nodes, synced in the background.
//!
//! The request path never waits on the network. Each node keeps, in memory:
//!
//! - its **own** contribution to every counter, as an absolute value (it may go negative: a user
//!   admitted on another node and moved on this one takes one off there);
//! - the **others'** sums per counter, as of the last sync;
//! - each room's **allotment**: the live nodes' demand over the last minute, from which this
//!   node's part of the free slots is apportioned.
//!
//! `get` reads own + others (clamped at 0), `add` changes own only. Every `sync_interval` the
//! sync service sends one [`SyncRequest`] (this node's changed counters as absolute values, its
//! demand per room, new marks) and applies the [`SyncReply`] (every counter's sum over the other
//! nodes, the live nodes and their demand, marks from the others). Because values are absolute
//! and kept per node, a sync repeated or retried after an outage counts nothing twice: it only
//! overwrites this node's own field. A node that restarts comes back as a new *member* (its
//! name and an incarnation), so the counts of its previous run stay until they expire, as the
//! users they stand for do.
//!
//! The exchange itself is elsewhere: [`super::redis`] runs it as one Lua script on Redis, and
//! [`MemoryHub`] runs the same semantics in memory, for `vestibule simulate --nodes` and tests.
//!
//! Rate-limit windows, penalty boxes and buckets stay local (`shared = true` windows are
//! not built yet).
//!
//! The parts: `wire` is the sync's format (requests, replies, keys and marks as strings),
//! `node` one node's state and the sync's two halves, `counter_store` the request path's side
//! (the [`CounterStore`] and the cluster's rate-limit window), `memory_hub` the exchange in
//! memory. The tests of the whole sit at the bottom of this file.

mod counter_store;
mod memory_hub;
mod node;
mod wire;

pub use counter_store::SharedWindow;
pub use memory_hub::MemoryHub;
pub use node::{SharedStore, SyncFigures};
pub use wire::{
    decode_key, decode_mark, decode_note, decode_register, encode_key, encode_mark, encode_note,
    encode_register, Note, SyncReply, SyncRequest,
};

// The parts share their private items, as they did in one file.
use node::*;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::local::LocalStore;
use super::{
    Allotment, ClusterStatus, CounterKey, CounterKind, CounterStore, Counters, Invited, Mark,
    MarkKind, Register, Ticket, WindowCounter, WindowSpec,
};
use crate::config::OnStoreFailure;
use crate::time::Timestamp;

/// A node that has not synced for this many intervals is no longer live.
pub(crate) const DEAD_AFTER_INTERVALS: u64 = 3;
/// A node pushes all its counters (not only changed ones) at least this often, so a store that
/// lost its data (a Redis restart without persistence) is whole again within it.
const FULL_PUSH_EVERY_MS: u64 = 30_000;
/// How far apart two nodes' clocks may be, for what they stamp: 5 s.
pub(crate) const CLOCK_SKEW_MS: u64 = 5_000;
/// Demand is measured over this long.
const DEMAND_WINDOW_MS: u64 = 60_000;

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: CounterKind, slot: u64) -> CounterKey {
        CounterKey {
            scope: Arc::from("shop"),
            kind,
            slot,
            id: 0,
        }
    }

    fn at(s: u64) -> Timestamp {
        Timestamp::from_secs(s)
    }

    fn node(name: &str) -> SharedStore {
        SharedStore::new(name, "1", 1000, OnStoreFailure::LastShare)
    }

    #[test]
    fn keys_and_marks_round_trip() {
        let k = CounterKey {
            scope: Arc::from("a|b:c"),
            kind: CounterKind::Waiting,
            slot: 42,
            id: 7 << 40 | 3,
        };
        let encoded = encode_key(&k);
        assert_eq!(
            decode_key(&encoded),
            Some((&*k.scope, k.kind, k.slot, k.id))
        );
        let m = Mark {
            kind: MarkKind::Revoked,
            id: u64::MAX,
        };
        assert_eq!(
            decode_mark(&encode_mark("x|y", m)),
            Some(("x|y".to_owned(), m))
        );
        let n = Note::Invite {
            invite: u64::MAX,
            holder: 3,
        };
        assert_eq!(
            decode_note(&encode_note("x|y", n)),
            Some(("x|y".to_owned(), n))
        );
        assert_eq!(
            decode_note(&encode_note("r", Note::Mark(m))),
            Some(("r".to_owned(), Note::Mark(m)))
        );
        assert_eq!(decode_note("u|1|x|r"), None);
        assert_eq!(decode_key("c|z|1|2|s"), None);
        assert_eq!(decode_key("garbage"), None);
    }

    #[test]
    fn queue_numbers_come_in_blocks_unique_across_nodes_and_registers_keep_the_highest() {
        let hub = MemoryHub::default();
        let (a, b) = (node("a"), node("b"));
        // Before its first sync a node has no number to give; it asks for a block then.
        assert_eq!(a.number("sale", at(0)), None);
        b.want_numbers("sale");
        assert!(hub.sync(&a, at(1)) && hub.sync(&b, at(1)));
        let mut given = Vec::new();
        for i in 0..6 {
            let n = if i % 2 == 0 { &a } else { &b };
            given.push(n.number("sale", at(2)).expect("a block"));
        }
        let mut unique = given.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 6, "{given:?}");
        // A node's block serves until its next one: what is left is dropped when another node
        // took numbers in between, so nothing older than a sync is given.
        let before_a = a.number("sale", at(3)).unwrap();
        assert!(hub.sync(&b, at(4)));
        assert!(hub.sync(&a, at(4)));
        let after_a = a.number("sale", at(5)).unwrap();
        assert!(
            after_a > b.number("sale", at(5)).unwrap() && after_a > before_a + 1,
            "a's new block follows b's: {before_a} then {after_a}"
        );
        // With nobody else taking numbers, the next block follows on and nothing is dropped.
        let next = a.number("sale", at(6)).unwrap();
        assert!(hub.sync(&a, at(7)));
        assert_eq!(a.number("sale", at(8)), Some(next + 1));

        // Registers: each node raises its own; every node reads the highest after a sync.
        assert_eq!(a.raise("sale", Register::Serving, 7), 7);
        assert_eq!(b.raise("sale", Register::Serving, 5), 5);
        assert_eq!(a.raise("sale", Register::Serving, 3), 7, "never lower");
        hub.set_down(true);
        assert!(
            !hub.sync(&a, at(9)),
            "a failed sync keeps the change to send again"
        );
        hub.set_down(false);
        assert!(hub.sync(&b, at(10)) && hub.sync(&a, at(10)) && hub.sync(&b, at(11)));
        assert_eq!(b.raise("sale", Register::Serving, 0), 7);
        assert_eq!(a.raise("sale", Register::Serving, 0), 7);
        assert_eq!(a.raise("other", Register::Serving, 0), 0, "per scope");
    }

    #[test]
    fn split_each_is_split_of_each_key() {
        let hub = MemoryHub::default();
        let (a, b) = (node("a"), node("b"));
        let (k1, k2, k3) = (
            key(CounterKind::Active, 1),
            key(CounterKind::Active, 2),
            key(CounterKind::Active, 3),
        );
        a.add(&k1, 3, at(60), at(600));
        b.add(&k1, 2, at(60), at(600));
        b.add(&k2, 4, at(60), at(70));
        assert!(hub.sync(&a, at(61)));
        assert!(hub.sync(&b, at(61)));
        assert!(hub.sync(&a, at(62)));
        a.add(&k1, 1, at(62), at(600));
        a.add(&k3, -2, at(62), at(600));
        for now in [at(62), at(80)] {
            let keys = [k1.clone(), k2.clone(), k3.clone()];
            let each: Vec<_> = keys.iter().map(|k| a.split(k, now)).collect();
            assert_eq!(a.split_each(&keys, now), each);
        }
        assert_eq!(a.split_each(std::slice::from_ref(&k1), at(62)), [(5, 1)]);
        assert_eq!(
            a.split_each(&[k3], at(62)),
            [(0, -2)],
            "own may be negative"
        );
    }

    #[test]
    fn counts_add_up_across_nodes_and_a_retried_sync_counts_nothing_twice() {
        let hub = MemoryHub::default();
        let (a, b) = (node("a"), node("b"));
        let k = key(CounterKind::Admitted, 1);
        let exp = at(600);
        a.add(&k, 3, at(60), exp);
        b.add(&k, 2, at(60), exp);
        assert_eq!(a.get(&k, at(60)), 3, "before a sync, a node knows its own");
        assert!(hub.sync(&a, at(61)));
        assert!(hub.sync(&b, at(61)));
        assert!(hub.sync(&a, at(62)));
        assert_eq!(a.get(&k, at(62)), 5);
        assert_eq!(b.get(&k, at(62)), 5);
        assert_eq!(a.split(&k, at(62)), (5, 0));
        a.add(&k, 1, at(62), exp);
        assert_eq!(a.split(&k, at(62)), (5, 1));
        // The store goes down; a's next push fails, then succeeds twice: still 6.
        hub.set_down(true);
        assert!(!hub.sync(&a, at(63)));
        assert!(!a.is_up());
        hub.set_down(false);
        assert!(hub.sync(&a, at(64)));
        assert!(hub.sync(&a, at(65)));
        assert!(hub.sync(&b, at(65)));
        assert_eq!(b.get(&k, at(65)), 6);
        // A user admitted on a and moved on b: b's own count goes negative, the sum is right.
        b.add(&k, -1, at(66), exp);
        assert_eq!(b.get(&k, at(66)), 5);
        assert!(hub.sync(&b, at(66)));
        assert!(hub.sync(&a, at(66)));
        assert_eq!(a.get(&k, at(66)), 5);
        assert_eq!(
            a.scan("shop", CounterKind::Admitted, at(66)),
            vec![(1, 0, 5)]
        );
    }

    #[test]
    fn shares_follow_demand_and_a_silent_node_drops_out() {
        let hub = MemoryHub::default();
        let (a, b) = (node("a"), node("b"));
        for _ in 0..30 {
            a.demand("shop", 1, at(100));
        }
        for _ in 0..10 {
            b.demand("shop", 1, at(100));
        }
        hub.sync(&a, at(100));
        hub.sync(&b, at(100));
        hub.sync(&a, at(100));
        assert_eq!(a.allotment("shop").of(40), Some(30));
        assert_eq!(b.allotment("shop").of(40), Some(10));
        assert!((b.allotment("shop").fraction() - 0.25).abs() < 1e-9);
        // Apportioned, the parts add up exactly, whatever the rounding.
        for free in 0..50 {
            let sum = a.allotment("shop").of(free).unwrap() + b.allotment("shop").of(free).unwrap();
            assert_eq!(sum, free);
        }
        // b stops syncing: after 3 intervals a has every slot.
        hub.sync(&a, Timestamp::from_millis(103_001));
        hub.sync(&a, at(104));
        assert_eq!(a.allotment("shop").of(40), Some(40));
        assert_eq!(a.cluster().unwrap().nodes, 1);
    }

    #[test]
    fn on_store_failure_modes() {
        let k = "shop";
        for (mode, expect) in [
            (OnStoreFailure::Open, Allotment::Open),
            (OnStoreFailure::Closed, Allotment::Closed),
        ] {
            let s = SharedStore::new("a", "1", 1000, mode);
            assert_eq!(s.allotment(k), expect, "never synced");
        }
        let s = node("a");
        assert_eq!(s.allotment(k), Allotment::Closed, "no last share yet");
        let hub = MemoryHub::default();
        s.demand(k, 5, at(10));
        hub.sync(&s, at(10));
        let share = s.allotment(k);
        assert_eq!(share.of(10), Some(10));
        hub.set_down(true);
        hub.sync(&s, at(11));
        assert_eq!(s.allotment(k), share, "the last share is kept");
    }

    #[test]
    fn shared_windows_add_the_other_nodes_hot_keys() {
        let hub = MemoryHub::default();
        let (a, b) = (node("a"), node("b"));
        let spec = WindowSpec {
            name: "api".into(),
            interval_ms: 10_000,
            max_keys: 100,
            shared: Some(5),
        };
        let (wa, wb) = (a.window(&spec), b.window(&spec));
        // Same spec, same window; a local spec is another one.
        assert!(Arc::ptr_eq(&wa, &a.window(&spec)));
        for _ in 0..8 {
            wa.observe(1, 1, at(100));
        }
        // Key 2 stays below the exchange threshold: never leaves node a.
        for _ in 0..3 {
            wa.observe(2, 1, at(100));
        }
        hub.sync(&a, at(101));
        hub.sync(&b, at(101));
        let s = wb.observe(1, 1, at(101));
        assert_eq!((s.prev, s.curr), (0, 9), "b counts a's 8 and its own 1");
        assert_eq!(wb.peek(2, at(101)).curr, 0);
        // The next interval sees them as the previous one.
        assert_eq!(wb.peek(1, at(111)).prev, 9);
        // Both nodes hash shared keys with the same seed, from the store.
        assert!(a.key_seed().is_some());
        assert_eq!(a.key_seed(), b.key_seed());
        assert_eq!(
            SharedStore::new("c", "1", 1000, OnStoreFailure::Open).key_seed(),
            None
        );
    }

    #[test]
    fn keys_far_below_the_limit_never_leave_the_node() {
        let a = node("a");
        let w = a.window(&WindowSpec {
            name: "api".into(),
            interval_ms: 10_000,
            max_keys: 1_000_000,
            shared: Some(5),
        });
        // A million clients a request each, ten of them hot.
        for k in 0..1_000_000u64 {
            w.observe(k, 1, at(100));
        }
        for k in 0..10u64 {
            for _ in 0..5 {
                w.observe(k, 1, at(100));
            }
        }
        let req = a.prepare(at(101));
        assert_eq!(req.counters.len(), 10, "only the hot keys are exchanged");
        assert!(req.payload_bytes() < 2_000, "{} bytes", req.payload_bytes());
    }

    #[test]
    fn operator_overrides_reach_every_node_and_the_newest_wins() {
        let hub = MemoryHub::default();
        let (a, b) = (node("a"), node("b"));
        hub.sync(&a, at(1));
        hub.sync(&b, at(1));
        a.publish_overrides("sale", 100, "{\"version\":100}");
        // Lost in a failed sync, sent again at the next.
        hub.set_down(true);
        hub.sync(&a, at(2));
        hub.set_down(false);
        hub.sync(&a, at(3));
        assert!(
            a.take_overrides().is_empty(),
            "a node does not hear its own"
        );
        hub.sync(&b, at(3));
        assert_eq!(
            b.take_overrides(),
            vec![("sale".to_owned(), 100, "{\"version\":100}".to_owned())]
        );
        // Nothing new: nothing read again.
        hub.sync(&b, at(4));
        assert!(b.take_overrides().is_empty());
        // An older version loses, on the hub and at the nodes; a newer one wins.
        b.publish_overrides("sale", 90, "old");
        b.publish_overrides("sale", 120, "{\"version\":120}");
        a.publish_overrides("other", 50, "{\"version\":50}");
        hub.sync(&b, at(5));
        hub.sync(&a, at(5));
        assert_eq!(
            a.take_overrides(),
            vec![("sale".to_owned(), 120, "{\"version\":120}".to_owned())]
        );
        hub.sync(&b, at(6));
        assert_eq!(
            b.take_overrides(),
            vec![("other".to_owned(), 50, "{\"version\":50}".to_owned())]
        );
        // A store that lost its data gets everything back from the nodes that know it.
        let fresh = MemoryHub::default();
        fresh.sync(&a, at(7));
        fresh.sync(&a, at(8));
        let c = node("c");
        fresh.sync(&c, at(8));
        let mut got = c.take_overrides();
        got.sort();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[1].1, 120);
    }

    #[test]
    fn marks_spread_to_every_node() {
        let hub = MemoryHub::default();
        let (a, b) = (node("a"), node("b"));
        let m = Mark {
            kind: MarkKind::Revoked,
            id: 9,
        };
        assert!(a.mark("shop", m, at(500), at(10)));
        assert!(!a.mark("shop", m, at(500), at(10)));
        assert!(!b.is_marked("shop", m, at(10)));
        // Lost in a failed sync, sent again at the next.
        hub.set_down(true);
        hub.sync(&a, at(11));
        hub.set_down(false);
        hub.sync(&a, at(12));
        hub.sync(&b, at(12));
        assert!(b.is_marked("shop", m, at(12)));
        assert!(!b.mark("shop", m, at(500), at(12)));
    }
}
