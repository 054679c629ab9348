//! Queue numbers and the serving counter (`api = true` rooms).
//!
//! Every arrival with a place gets the next queue number from the store
//! ([`CounterStore::number`]), carried in its wait token (`qn`). The serving counter is the
//! highest number the room let in: every admission raises it ([`Register::Serving`]). A number
//! at or below it is at the head of the line: its holder is let in at their next check-in
//! while the room has a free slot, whatever the arrival buckets say. An operator's move of the
//! counter ([`Register::Moved`]) lets the numbers it passes in beyond the limits, as `admit`
//! does. A reset ([`Register::ResetAt`], [`Register::ResetBelow`]) voids every token issued
//! before it and starts the numbers shown over from 1.

use std::sync::atomic::Ordering;

use super::*;
use crate::store::Register;

impl Capacity {
    /// Arrivals get queue numbers from now on.
    pub(crate) fn number_arrivals(&mut self) {
        self.numbered = true;
        self.store.want_numbers(&self.scope);
    }

    /// Whether arrivals get queue numbers.
    pub fn is_numbered(&self) -> bool {
        self.numbered
    }

    /// The next queue number, in a numbered room (none when a cluster node has run out of its
    /// blocks until its next sync: the visitor gets one at a later check-in).
    pub(super) fn next_number(&self, now: Timestamp) -> Option<u64> {
        if !self.numbered {
            return None;
        }
        self.store.number(&self.scope, now)
    }

    /// The room let `qn` in: the serving counter reaches it.
    pub(super) fn served(&self, qn: Option<u64>) {
        if let (true, Some(n)) = (self.numbered, qn) {
            self.store.raise(&self.scope, Register::Serving, n);
        }
    }

    /// Whether the serving counter has reached `qn`.
    pub(super) fn is_served(&self, qn: Option<u64>) -> bool {
        self.numbered && qn.is_some_and(|n| n <= self.register(Register::Serving))
    }

    /// Whether an operator moved the serving counter past `qn`.
    pub(super) fn is_moved_past(&self, qn: Option<u64>) -> bool {
        self.numbered && qn.is_some_and(|n| n <= self.register(Register::Moved))
    }

    fn register(&self, reg: Register) -> u64 {
        self.store.raise(&self.scope, reg, 0)
    }

    /// The numbers as shown: counted from the last reset.
    pub fn shown(&self, qn: u64) -> u64 {
        qn.saturating_sub(self.register(Register::ResetBelow))
    }

    /// The serving counter as shown (0 before anyone was let in).
    pub fn serving_number(&self) -> u64 {
        self.shown(self.register(Register::Serving))
    }

    /// The last queue number given, as shown.
    pub fn last_number(&self) -> u64 {
        self.shown(self.register(Register::Numbered))
    }

    /// The last reset (Unix ms; 0 = never).
    pub fn reset_at_ms(&self) -> u64 {
        self.register(Register::ResetAt)
    }

    /// Moves the serving counter `by` numbers past where it is: their holders are let in at
    /// their next check-in, beyond the limits. Returns the counter as shown.
    pub fn move_serving(&self, by: u64) -> u64 {
        let to = self.register(Register::Serving).saturating_add(by);
        self.store.raise(&self.scope, Register::Moved, to);
        self.store.raise(&self.scope, Register::Serving, to);
        self.shown(to)
    }

    /// Resets the room: every token issued until `now` is void, the numbers shown start over,
    /// and this node forgets its counts (the others do when they see the reset).
    pub fn reset(&self, now: Timestamp) {
        let last = self
            .register(Register::Numbered)
            .max(self.register(Register::Serving));
        self.store.raise(&self.scope, Register::ResetBelow, last);
        self.store.raise(&self.scope, Register::Moved, last);
        self.store.raise(&self.scope, Register::Serving, last);
        self.store
            .raise(&self.scope, Register::ResetAt, now.millis());
        self.forget_before_reset();
        self.invalidate();
    }

    /// Clears this node's counts once per reset it has not cleared for yet (the views are
    /// being recomputed, or are invalidated by the caller).
    pub(super) fn forget_before_reset(&self) {
        if !self.numbered {
            return;
        }
        let at = self.register(Register::ResetAt);
        if self.reset_seen.fetch_max(at, Ordering::Relaxed) < at {
            for lane in &self.lanes {
                self.store.clear(&lane.scope);
            }
        }
    }

    /// The store the room counts in.
    pub(crate) fn store(&self) -> &Arc<dyn CounterStore> {
        &self.store
    }

    /// The room the tokens are bound to, if they are.
    pub(crate) fn bound(&self) -> Option<&Arc<str>> {
        self.bound.as_ref()
    }

    /// Whether a waiting token still holds its place: checked in within `rejoin_grace` (a
    /// pre-queue token, not checked in yet, holds it until the event's start decides).
    pub(crate) fn still_in_line(&self, claims: &Claims, now: Timestamp) -> bool {
        claims.dec != Dec::Wait || claims.chk.is_none() || self.within_grace(claims, 0, now)
    }

    /// Whether queue number `qn` was given before the room's last reset.
    pub(crate) fn before_reset_number(&self, qn: u64) -> bool {
        qn <= self.register(Register::ResetBelow)
    }

    /// Whether a token was issued before the room's last reset.
    pub(super) fn before_reset(&self, claims: &Claims, now: Timestamp) -> bool {
        if !self.numbered {
            return false;
        }
        let at = self.register(Register::ResetAt);
        if at == 0 {
            return false;
        }
        let _ = now;
        // Wait tokens carry their arrival and number; allow tokens their admission.
        let issued_ms = match (claims.acc, claims.arr) {
            (Some(acc), _) => acc,
            (None, Some(arr)) => token_secs(arr) * 1000,
            (None, None) => 0,
        };
        issued_ms < at
            || claims
                .qn
                .is_some_and(|n| n <= self.register(Register::ResetBelow))
    }
}
