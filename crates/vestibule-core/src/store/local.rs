//! The in-process [`CounterStore`]: what one vestibule node uses unless told otherwise.
//!
//! ## Windows
//!
//! Each window counter is two count-min sketches ([`Sketch`], from the core), one for the
//! current interval and one for the previous, like pingora's `Rate`, but driven by the clock
//! the caller passes in (so unit tests and the simulator control time) and with intervals
//! aligned on multiples of the interval since the epoch (like Fastly's buckets). Memory is fixed when
//! the counter is made: `2 × 4 rows × slots × 8 bytes`, with `slots` the power of two at or
//! above `2 × max_keys` (at least 1024): 128 bytes per key. For the default `max_keys = 16384` that is 2 MiB per
//! rule, whatever the traffic.
//!
//! A count-min sketch never undercounts; it overcounts a key when, in every one of the 4 rows,
//! the key shares its cell with another active key. With `K` keys active in one interval and
//! `slots` cells per row, that happens to a given key with probability about
//! `(1 − e^(−K/slots))^4`, and the overcount is the colliding keys' own counts:
//!
//! | active keys `K` | share of keys overcounted |
//! | --- | --- |
//! | `max_keys / 4` | 0.01 % |
//! | `max_keys / 2` | 0.2 % |
//! | `max_keys` | 2.4 % |
//! | `2 × max_keys` | 16 % |
//! | `4 × max_keys` | 56 % |
//!
//! So it fails gracefully but in one direction: beyond `max_keys`, well-behaved keys start to be
//! charged for their neighbours' traffic, and a flood of distinct keys (a botnet, spoofed
//! headers in a `header:` key) makes that worse for everyone in the interval. Size `max_keys`
//! for the number of distinct keys you expect in one window interval. The test
//! `overcount_matches_the_documented_table` measures the table above.
//!
//! ## Exact counters
//!
//! Room accounting uses few counters (a handful per room per minute), kept exactly in one map
//! with their expiry; [`LocalStore::sweep`] drops expired ones.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::marks::Marks;
use super::{
    CounterKey, CounterKind, CounterStore, Counters, InUse, Invited, Mark, MarkKind, Register,
    Ticket, WindowCounter, WindowSample, WindowSpec,
};
use crate::sketch::Sketch;
use crate::time::Timestamp;

const HASHES: usize = 4;
const MIN_SLOTS: usize = 1024;

/// Cells per sketch row for `max_keys`.
pub(crate) fn slots_for(max_keys: usize) -> usize {
    max_keys
        .saturating_mul(2)
        .next_power_of_two()
        .max(MIN_SLOTS)
}

/// Bytes a window counter for `max_keys` occupies.
pub fn window_bytes(max_keys: usize) -> usize {
    2 * HASHES * slots_for(max_keys) * std::mem::size_of::<isize>()
}

/// Two sketches taking turns as the current and the previous interval.
pub struct LocalWindow {
    interval_ms: u64,
    sketches: [Sketch; 2],
    /// Interval index + 1 that each sketch holds (0: none yet).
    holds: [AtomicU64; 2],
    rotating: Mutex<()>,
}

impl LocalWindow {
    pub fn new(interval_ms: u64, max_keys: usize) -> LocalWindow {
        let slots = slots_for(max_keys);
        LocalWindow {
            interval_ms: interval_ms.max(1),
            sketches: [Sketch::new(HASHES, slots), Sketch::new(HASHES, slots)],
            holds: [AtomicU64::new(0), AtomicU64::new(0)],
            rotating: Mutex::new(()),
        }
    }

    /// The sketch for interval `index`, cleared first if it still holds an older interval.
    fn current(&self, index: u64) -> &Sketch {
        let s = (index % 2) as usize;
        let tag = index + 1;
        if self.holds[s].load(Ordering::SeqCst) < tag {
            let _guard = self.rotating.lock().unwrap_or_else(|p| p.into_inner());
            if self.holds[s].load(Ordering::SeqCst) < tag {
                self.sketches[s].reset();
                self.holds[s].store(tag, Ordering::SeqCst);
            }
        }
        &self.sketches[s]
    }

    /// The sketch holding interval `index`, if one does.
    fn holding(&self, index: u64) -> Option<&Sketch> {
        let s = (index % 2) as usize;
        (self.holds[s].load(Ordering::SeqCst) == index + 1).then(|| &self.sketches[s])
    }

    fn sample(&self, key: u64, now: Timestamp, add: u64) -> WindowSample {
        let index = now.millis() / self.interval_ms;
        let curr = if add > 0 {
            self.current(index).incr(key, add as isize)
        } else {
            self.holding(index).map_or(0, |e| e.get(key))
        };
        let prev = index
            .checked_sub(1)
            .and_then(|i| self.holding(i))
            .map_or(0, |e| e.get(key));
        WindowSample {
            prev: prev.max(0) as u64,
            curr: curr.max(0) as u64,
            fraction: (now.millis() % self.interval_ms) as f64 / self.interval_ms as f64,
        }
    }
}

impl WindowCounter for LocalWindow {
    fn observe(&self, key: u64, n: u64, now: Timestamp) -> WindowSample {
        self.sample(key, now, n.max(1))
    }

    fn peek(&self, key: u64, now: Timestamp) -> WindowSample {
        self.sample(key, now, 0)
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Exact {
    value: i64,
    expire_ms: u64,
}

pub use super::marks::MAX_MARKS;

/// The in-process store.
#[derive(Default)]
pub struct LocalStore {
    /// Weak: a counter lives as long as some snapshot's rule uses it.
    windows: Mutex<HashMap<WindowSpec, Weak<LocalWindow>>>,
    exact: Mutex<Counters<Exact>>,
    /// Revoked sessions, counted winners, shared penalty boxes.
    marks: Marks,
    /// Per scope: the invitations in use, by id.
    invites: Mutex<HashMap<Arc<str>, HashMap<u64, Used>>>,
    /// Per scope: the registers (queue numbers, the serving counter, resets).
    registers: Mutex<HashMap<Arc<str>, [u64; Register::ALL.len()]>>,
    /// The secret of verifiable draws, once the process sets it.
    draw_secret: std::sync::OnceLock<[u8; 32]>,
    /// Verifiable draws' receipts.
    receipts: super::receipts::Receipts,
}

/// An invitation in use: who joined with it, and until when it matters.
#[derive(Debug)]
struct Used {
    until_ms: u64,
    holders: Vec<u64>,
}

impl LocalStore {
    pub fn new() -> LocalStore {
        LocalStore::default()
    }

    /// Notes that `holder` joined with `invite` of `scope` on another node: it counts here too,
    /// whatever its uses and the cap (that node checked them).
    pub(crate) fn remember_invite(
        &self,
        scope: &str,
        invite: u64,
        holder: u64,
        until: Timestamp,
        now: Timestamp,
    ) {
        if until <= now {
            return;
        }
        let mut invites = self.invites.lock().unwrap_or_else(|p| p.into_inner());
        let used = invites
            .entry(Arc::from(scope))
            .or_default()
            .entry(invite)
            .or_insert(Used {
                until_ms: until.millis(),
                holders: Vec::new(),
            });
        if used.until_ms <= now.millis() {
            used.holders.clear();
        }
        used.until_ms = used.until_ms.max(until.millis());
        if !used.holders.contains(&holder) {
            used.holders.push(holder);
        }
    }
}

/// The value of `key` at `now` (0 if never written or expired).
fn live_value(exact: &Counters<Exact>, key: &CounterKey, now: Timestamp) -> i64 {
    exact
        .get(key)
        .filter(|e| e.expire_ms > now.millis())
        .map_or(0, |e| e.value)
}

impl CounterStore for LocalStore {
    fn window(&self, spec: &WindowSpec) -> Arc<dyn WindowCounter> {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        windows.retain(|_, w| w.strong_count() > 0);
        if let Some(w) = windows.get(spec).and_then(Weak::upgrade) {
            return w;
        }
        let w = Arc::new(LocalWindow::new(spec.interval_ms, spec.max_keys));
        windows.insert(spec.clone(), Arc::downgrade(&w));
        w
    }

    fn add(&self, key: &CounterKey, delta: i64, now: Timestamp, expire_at: Timestamp) -> i64 {
        let mut exact = self.exact.lock().unwrap_or_else(|p| p.into_inner());
        let e = exact.get_or_insert_with(key, Exact::default);
        // Expired but not swept yet: it starts again from zero.
        if e.expire_ms <= now.millis() {
            e.value = 0;
        }
        e.value = e.value.saturating_add(delta).max(0);
        e.expire_ms = e.expire_ms.max(expire_at.millis());
        e.value
    }

    fn get(&self, key: &CounterKey, now: Timestamp) -> i64 {
        let exact = self.exact.lock().unwrap_or_else(|p| p.into_inner());
        live_value(&exact, key, now)
    }

    fn split_each(&self, keys: &[CounterKey], now: Timestamp) -> Vec<(i64, i64)> {
        let exact = self.exact.lock().unwrap_or_else(|p| p.into_inner());
        keys.iter()
            .map(|k| (0, live_value(&exact, k, now)))
            .collect()
    }

    fn scan(&self, scope: &str, kind: CounterKind, now: Timestamp) -> Vec<(u64, u64, i64)> {
        let exact = self.exact.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<(u64, u64, i64)> = exact
            .of(scope, kind)
            .filter(|(_, _, e)| e.expire_ms > now.millis())
            .map(|(slot, id, e)| (slot, id, e.value))
            .collect();
        out.sort_unstable();
        out
    }

    fn mark(&self, scope: &str, mark: Mark, until: Timestamp, now: Timestamp) -> bool {
        self.marks.set(scope, mark, until, now)
    }

    fn number(&self, scope: &str, now: Timestamp) -> Option<u64> {
        let mut regs = self.registers.lock().unwrap_or_else(|p| p.into_inner());
        let r = regs.entry(Arc::from(scope)).or_default();
        // A process numbers from 1 from its first number on: what an earlier one gave is void.
        let since = &mut r[Register::Since.index()];
        if *since == 0 {
            *since = now.millis().max(1);
        }
        let n = &mut r[Register::Numbered.index()];
        *n += 1;
        Some(*n)
    }

    fn raise(&self, scope: &str, reg: Register, value: u64) -> u64 {
        let mut regs = self.registers.lock().unwrap_or_else(|p| p.into_inner());
        // Reading (or not raising) a scope's register allocates nothing.
        if let Some(v) = regs.get_mut(scope).map(|r| &mut r[reg.index()]) {
            *v = (*v).max(value);
            return *v;
        }
        if value == 0 {
            return 0;
        }
        regs.entry(Arc::from(scope)).or_default()[reg.index()] = value;
        value
    }

    fn clear(&self, scope: &str, stale: &dyn Fn(CounterKind, u64) -> bool) {
        let mut exact = self.exact.lock().unwrap_or_else(|p| p.into_inner());
        for (kind, slot, counter) in exact.of_scope(scope) {
            if stale(kind, slot) {
                counter.value = 0;
            }
        }
    }

    fn marks_of(&self, scope: &str, kind: MarkKind, now: Timestamp) -> Vec<(u64, Timestamp)> {
        self.marks.of(scope, kind, now)
    }

    fn draw_secret(&self) -> Option<[u8; 32]> {
        self.draw_secret.get().copied()
    }

    fn set_draw_secret(&self, secret: [u8; 32]) {
        let _ = self.draw_secret.set(secret);
    }

    fn note_receipt(&self, scope: &str, id: u64, until: Timestamp, now: Timestamp) -> bool {
        self.receipts.note(scope, id, until, now)
    }

    fn receipts(&self, scope: &str, from: usize, now: Timestamp) -> super::receipts::ReceiptList {
        self.receipts.list(scope, from, now)
    }

    fn invite(&self, scope: &str, ticket: &Ticket, now: Timestamp) -> Invited {
        let mut invites = self.invites.lock().unwrap_or_else(|p| p.into_inner());
        let room = invites.entry(Arc::from(scope)).or_default();
        let now_ms = now.millis();
        if let Some(used) = room.get_mut(&ticket.invite).filter(|u| u.until_ms > now_ms) {
            if used.holders.contains(&ticket.holder) {
                return Invited::Again;
            }
            if used.holders.len() >= ticket.uses as usize {
                return Invited::UsedUp;
            }
            used.holders.push(ticket.holder);
            return Invited::First;
        }
        if room.len() >= ticket.cap {
            room.retain(|_, u| u.until_ms > now_ms);
            if room.len() >= ticket.cap {
                return Invited::Full;
            }
        }
        if ticket.uses == 0 {
            return Invited::UsedUp;
        }
        room.insert(
            ticket.invite,
            Used {
                until_ms: ticket.until.millis(),
                holders: vec![ticket.holder],
            },
        );
        Invited::First
    }

    fn invitations_in_use(&self, scope: &str, now: Timestamp) -> InUse {
        let invites = self.invites.lock().unwrap_or_else(|p| p.into_inner());
        let mut in_use = InUse::default();
        for used in invites
            .get(scope)
            .into_iter()
            .flat_map(|room| room.values())
        {
            if used.until_ms > now.millis() {
                in_use.invitations += 1;
                in_use.holders += used.holders.len();
            }
        }
        in_use
    }

    fn marked_until(&self, scope: &str, mark: Mark, now: Timestamp) -> Option<Timestamp> {
        self.marks.until(scope, mark, now)
    }

    fn sweep(&self, now: Timestamp) {
        let mut exact = self.exact.lock().unwrap_or_else(|p| p.into_inner());
        exact.retain(|e| e.expire_ms > now.millis());
        drop(exact);
        self.marks.forget_expired(now);
        self.receipts.sweep(now);
        let mut invites = self.invites.lock().unwrap_or_else(|p| p.into_inner());
        for room in invites.values_mut() {
            room.retain(|_, u| u.until_ms > now.millis());
        }
        invites.retain(|_, room| !room.is_empty());
        drop(invites);
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        windows.retain(|_, w| w.strong_count() > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MarkKind;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn intervals_are_aligned_and_slide() {
        let w = LocalWindow::new(10_000, 1000);
        // Interval [10 s, 20 s): 5 events.
        for _ in 0..5 {
            w.observe(7, 1, at(12_000));
        }
        let s = w.peek(7, at(19_999));
        assert_eq!((s.prev, s.curr), (0, 5));
        // Next interval: they become `prev`, weighted by what is left of it.
        let s = w.observe(7, 1, at(22_500));
        assert_eq!((s.prev, s.curr), (5, 1));
        assert!((s.fraction - 0.25).abs() < 1e-9);
        assert!((s.weighted() - (5.0 * 0.75 + 1.0)).abs() < 1e-9);
        // Two intervals later nothing is left.
        let s = w.peek(7, at(40_000));
        assert_eq!((s.prev, s.curr), (0, 0));
        // Other keys are independent.
        assert_eq!(w.peek(8, at(22_600)).curr, 0);
    }

    #[test]
    fn a_skipped_interval_clears_prev() {
        let w = LocalWindow::new(1_000, 1000);
        w.observe(1, 3, at(1_500));
        // Jump straight to interval 3: interval 2 was never written, so prev is 0.
        let s = w.observe(1, 1, at(3_100));
        assert_eq!((s.prev, s.curr), (0, 1));
    }

    #[test]
    fn clock_going_back_never_clears_newer_counts() {
        let w = LocalWindow::new(1_000, 1000);
        w.observe(1, 1, at(5_500));
        w.observe(1, 1, at(4_900));
        assert_eq!(w.peek(1, at(5_600)).curr, 1);
        assert_eq!(w.peek(1, at(5_600)).prev, 1);
    }

    #[test]
    fn sizing() {
        assert_eq!(slots_for(1), 1024);
        assert_eq!(slots_for(65_536), 131_072);
        assert_eq!(window_bytes(65_536), 8 * 1024 * 1024);
    }

    #[test]
    fn overcount_matches_the_documented_table() {
        // The sketch's hashes are seeded at random: the share is the mean of several sketches,
        // so one unlucky seed (a few keys more, at 2,048) does not fail the table.
        const TRIALS: usize = 8;
        let max_keys = 4096;
        for (keys, expected) in [
            (max_keys / 2, 0.002),
            (max_keys, 0.024),
            (2 * max_keys, 0.16),
        ] {
            let mut over = 0.0;
            for _ in 0..TRIALS {
                let w = LocalWindow::new(1_000, max_keys);
                for k in 0..keys as u64 {
                    w.observe(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), 1, at(0));
                }
                over += (0..keys as u64)
                    .filter(|k| w.peek(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), at(0)).curr > 1)
                    .count() as f64
                    / keys as f64;
            }
            let over = over / TRIALS as f64;
            assert!(
                over < expected * 2.0 + 0.002,
                "{keys} keys: {over:.4} overcounted, documented {expected}"
            );
        }
    }

    #[test]
    fn windows_are_shared_by_spec_and_freed_with_their_rules() {
        let store = LocalStore::new();
        let spec = WindowSpec {
            name: "r".into(),
            interval_ms: 1000,
            max_keys: 10,
            shared: None,
        };
        let a = store.window(&spec);
        a.observe(1, 2, at(0));
        assert_eq!(store.window(&spec).peek(1, at(1)).curr, 2);
        drop(a);
        assert_eq!(store.window(&spec).peek(1, at(1)).curr, 0);
    }

    #[test]
    fn counters_never_go_below_zero() {
        let store = LocalStore::new();
        let key = CounterKey {
            scope: "room".into(),
            kind: CounterKind::Active,
            slot: 1,
            id: 0,
        };
        assert_eq!(store.add(&key, 1, at(0), at(10_000)), 1);
        assert_eq!(store.add(&key, -3, at(1), at(10_000)), 0);
        assert_eq!(store.add(&key, 1, at(2), at(10_000)), 1);
    }

    #[test]
    fn a_mark_is_set_once_until_it_expires() {
        let store = LocalStore::new();
        let m = Mark {
            kind: MarkKind::Revoked,
            id: 42,
        };
        assert!(!store.is_marked("room", m, at(0)));
        assert!(store.mark("room", m, at(60_000), at(0)));
        assert!(
            !store.mark("room", m, at(60_000), at(1)),
            "a replay changes nothing"
        );
        assert!(store.is_marked("room", m, at(59_999)));
        assert!(!store.is_marked("other", m, at(1)), "rooms are apart");
        let admitted = Mark {
            kind: MarkKind::Admitted,
            id: 42,
        };
        assert!(!store.is_marked("room", admitted, at(1)), "kinds are apart");
        assert!(!store.is_marked("room", m, at(60_000)));
        store.sweep(at(60_000));
        assert_eq!(store.marks.len(), 0);
    }

    #[test]
    fn an_invitation_admits_its_uses_until_it_expires() {
        use crate::store::{Invited, Ticket};
        let store = LocalStore::new();
        let ticket = |invite, holder| Ticket {
            invite,
            holder,
            uses: 2,
            until: at(60_000),
            cap: 2,
        };
        assert_eq!(store.invite("room", &ticket(1, 10), at(0)), Invited::First);
        assert_eq!(store.invite("room", &ticket(1, 10), at(1)), Invited::Again);
        assert_eq!(store.invite("room", &ticket(1, 11), at(2)), Invited::First);
        assert_eq!(store.invite("room", &ticket(1, 12), at(3)), Invited::UsedUp);
        assert_eq!(store.invite("room", &ticket(1, 11), at(4)), Invited::Again);
        assert_eq!(
            store.invite("other", &ticket(1, 12), at(5)),
            Invited::First,
            "rooms are apart"
        );
        // The cap counts invitations, not holders: a second fits, a third does not.
        assert_eq!(store.invite("room", &ticket(2, 10), at(6)), Invited::First);
        assert_eq!(store.invite("room", &ticket(3, 10), at(7)), Invited::Full);
        assert_eq!(
            store.invite("room", &ticket(1, 10), at(8)),
            Invited::Again,
            "used ones stay"
        );
        // Another node's holder counts here, beyond the cap and the uses.
        store.remember_invite("room", 2, 20, at(60_000), at(9));
        store.remember_invite("room", 2, 21, at(60_000), at(9));
        assert_eq!(
            store.invite("room", &ticket(2, 22), at(10)),
            Invited::UsedUp
        );
        assert_eq!(store.invite("room", &ticket(2, 21), at(10)), Invited::Again);
        let in_use = |scope, t| {
            let n = store.invitations_in_use(scope, at(t));
            (n.invitations, n.holders)
        };
        assert_eq!(in_use("room", 10), (2, 5));
        assert_eq!(in_use("other", 10), (1, 1));
        // Expired invitations are forgotten, and make room.
        let later = Ticket {
            until: at(120_000),
            ..ticket(3, 10)
        };
        assert_eq!(store.invite("room", &later, at(60_000)), Invited::First);
        assert_eq!(in_use("room", 60_000), (1, 1));
        store.sweep(at(120_000));
        assert!(store.invites.lock().unwrap().is_empty());
    }

    #[test]
    fn split_each_reads_each_key_as_get() {
        let store = LocalStore::new();
        let key = |slot| CounterKey {
            scope: Arc::from("room"),
            kind: CounterKind::Active,
            slot,
            id: 0,
        };
        store.add(&key(1), 2, at(0), at(1_000));
        store.add(&key(2), 5, at(0), at(500));
        let keys = [key(1), key(2), key(3)];
        assert_eq!(store.split_each(&keys, at(10)), [(0, 2), (0, 5), (0, 0)]);
        assert_eq!(
            store.split_each(&keys, at(500)),
            [(0, 2), (0, 0), (0, 0)],
            "an expired counter reads 0"
        );
    }

    #[test]
    fn queue_numbers_count_from_one_and_registers_only_grow() {
        let s = LocalStore::new();
        let now = at(0);
        assert_eq!(
            (1..=3).map(|_| s.number("a", now)).collect::<Vec<_>>(),
            [Some(1), Some(2), Some(3)]
        );
        assert_eq!(s.number("b", now), Some(1), "per scope");
        assert_eq!(s.raise("a", Register::Numbered, 0), 3);
        assert_eq!(s.raise("a", Register::Serving, 2), 2);
        assert_eq!(s.raise("a", Register::Serving, 1), 2);
        // A reset's clear zeroes the scope's counters and nothing else.
        let key = |scope: &str| CounterKey {
            scope: Arc::from(scope),
            kind: CounterKind::Active,
            slot: 0,
            id: 0,
        };
        s.add(&key("a"), 5, now, at(60_000));
        s.add(&key("b"), 4, now, at(60_000));
        s.clear("a", &|_, _| true);
        assert_eq!((s.get(&key("a"), now), s.get(&key("b"), now)), (0, 4));
        // Marks are listed by kind.
        let m = |kind, id| Mark { kind, id };
        s.mark("a", m(MarkKind::Reached, 3), at(5_000), now);
        s.mark("a", m(MarkKind::Reached, 1), at(5_000), now);
        s.mark("a", m(MarkKind::Redeemed, 2), at(5_000), now);
        let reached: Vec<u64> = s
            .marks_of("a", MarkKind::Reached, now)
            .iter()
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(reached, [1, 3]);
        assert!(
            s.marks_of("a", MarkKind::Reached, at(6_000)).is_empty(),
            "expired"
        );
    }

    #[test]
    fn exact_counters_expire() {
        let store = LocalStore::new();
        let key = CounterKey {
            scope: "room".into(),
            kind: CounterKind::Active,
            slot: 5,
            id: 0,
        };
        assert_eq!(store.add(&key, 3, at(0), at(10_000)), 3);
        assert_eq!(store.add(&key, -1, at(1), at(10_000)), 2);
        assert_eq!(store.get(&key, at(9_999)), 2);
        assert_eq!(store.get(&key, at(10_000)), 0);
        assert_eq!(
            store.scan("room", CounterKind::Active, at(0)),
            vec![(5, 0, 2)]
        );
        assert!(store.scan("room", CounterKind::Waiting, at(0)).is_empty());
        // Written after expiry but before a sweep: starts from zero.
        assert_eq!(store.add(&key, 1, at(10_500), at(20_000)), 1);
        store.sweep(at(20_000));
        assert_eq!(store.get(&key, at(10_000)), 0);
    }
}
