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

use super::*;
use crate::store::Register;

/// How long a reset is news: a node that has cleared for no reset yet and learns of an older
/// one started after it.
const RESET_NEWS: Duration = Duration::from_secs(10);

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
    /// Whether an operator moved the serving counter past `qn`, given to an arrival at
    /// `arrival_secs`: a move lets in the numbers of those already in line, never of arrivals
    /// after it (a move past the last number given holds no place for whoever comes next).
    pub(super) fn is_moved_past(&self, qn: Option<u64>, arrival_secs: u64) -> bool {
        self.numbered
            && qn.is_some_and(|n| n <= self.register(Register::Moved))
            && arrival_secs.saturating_mul(1000)
                <= self.register(Register::MovedAt) + self.store.clock_skew_ms()
    }

    fn register(&self, reg: Register) -> u64 {
        self.store.raise(&self.scope, reg, 0)
    }

    /// The numbers as shown: counted from the last reset (at least 1).
    pub fn shown(&self, qn: u64) -> u64 {
        qn.saturating_sub(self.register(Register::ResetBelow))
            .max(1)
    }

    /// The serving counter as shown (0 before anyone was let in since the last reset).
    pub fn serving_number(&self) -> u64 {
        let serving = self.register(Register::Serving);
        if serving <= self.register(Register::ResetBelow) {
            0
        } else {
            self.shown(serving)
        }
    }

    /// The last queue number given, as shown (0 before any since the last reset).
    pub fn last_number(&self) -> u64 {
        let last = self.register(Register::Numbered);
        if last <= self.register(Register::ResetBelow) {
            0
        } else {
            self.shown(last)
        }
    }

    /// When the store's current numbering of the room began (Unix ms).
    pub fn numbering_since(&self) -> u64 {
        self.register(Register::Since)
    }

    /// The last reset (Unix ms; 0 = never).
    pub fn reset_at_ms(&self) -> u64 {
        self.register(Register::ResetAt)
    }

    /// Moves the serving counter `by` numbers past where it is at `now`: the holders of those
    /// numbers who arrived before now are let in at their next check-in, beyond the limits.
    /// Returns the counter as shown.
    pub fn move_serving(&self, by: u64, now: Timestamp) -> u64 {
        let to = self.register(Register::Serving).saturating_add(by);
        self.store
            .raise(&self.scope, Register::MovedAt, now.millis());
        self.store.raise(&self.scope, Register::Moved, to);
        self.store.raise(&self.scope, Register::Serving, to);
        self.serving_number()
    }

    /// Resets the room: every token issued until `now` is void, the numbers shown start over,
    /// and this node forgets its counts of before now (the others do when they see the reset).
    pub fn reset(&self, now: Timestamp) {
        let last = self
            .register(Register::Numbered)
            .max(self.register(Register::Serving));
        self.store.raise(&self.scope, Register::ResetBelow, last);
        self.store.raise(&self.scope, Register::Moved, last);
        self.store.raise(&self.scope, Register::Serving, last);
        self.store
            .raise(&self.scope, Register::ResetAt, now.millis());
        self.forget_before_reset(now);
        self.invalidate();
    }

    /// Clears this node's counts once per reset, as it learns of it (the views are being
    /// recomputed, or are invalidated by the caller). What was cleared is remembered in the
    /// store, which outlives a reload's rebuilt room. A reset this node finds already
    /// [`RESET_NEWS`] old when it has cleared for none (it started after it) was before
    /// anything it counted: nothing is cleared.
    pub(super) fn forget_before_reset(&self, now: Timestamp) {
        if !self.numbered {
            return;
        }
        let at = self.register(Register::ResetAt);
        let cleared = self.register(Register::Cleared);
        if at == 0 || cleared >= at {
            return;
        }
        self.store.raise(&self.scope, Register::Cleared, at);
        if cleared == 0 && now.millis() > at + RESET_NEWS.as_millis() as u64 {
            return;
        }
        for lane in &self.lanes {
            self.store.clear(&lane.scope, &|_, _| true);
        }
    }

    /// Whether an arrival at `arrival_ms` (give or take `spread_ms`, its stamp's precision)
    /// holds a number of the room's current numbering, given since its last reset.
    pub(crate) fn current_number(&self, arrival_ms: u64, spread_ms: u64) -> bool {
        let since = self.register(Register::Since);
        let skew = self.store.clock_skew_ms();
        // No numbering yet (a fresh process, a node before its first sync): a number shown
        // now is of an earlier one.
        since > 0
            && arrival_ms + spread_ms + skew >= since
            && arrival_ms + spread_ms >= self.register(Register::ResetAt)
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

    /// Whether a token is void: issued before the room's last reset, or carrying a number of
    /// an earlier numbering.
    pub(super) fn before_reset(&self, claims: &Claims, now: Timestamp) -> bool {
        if !self.numbered {
            return false;
        }
        let _ = now;
        // Allow tokens carry their admission (ms); wait tokens their arrival (s).
        let reset = self.register(Register::ResetAt);
        match (claims.acc, claims.arr) {
            (Some(acc), _) => acc < reset,
            (None, Some(arr)) => {
                let arr_ms = token_secs(arr) * 1000;
                arr_ms + 999 < reset || (claims.qn.is_some() && !self.current_number(arr_ms, 999))
            }
            (None, None) => false,
        }
    }
}

/// Places kept for accounts (enqueue tokens): an account's devices share one place.
impl Capacity {
    /// The account `uid` names, as a counter slot; `None` for an identity by address.
    fn account_slot(uid: &Identity) -> Option<u64> {
        let uid = uid.as_str();
        if !crate::enqueue::is_account(uid) {
            return None;
        }
        let tail = uid.get(uid.len().checked_sub(16)?..)?;
        u64::from_str_radix(tail, 16).ok()
    }

    /// The place account `uid` holds (arrival, Unix s; queue number), if one of its devices
    /// joined the line within `rejoin_grace` of its last check-in. A value that is no arrival
    /// (two nodes that each kept one before they synced) is no place: the device joins anew.
    pub(super) fn account_place(
        &self,
        uid: &Identity,
        now: Timestamp,
    ) -> Option<(u64, Option<u64>)> {
        let slot = Self::account_slot(uid)?;
        let arrival = self
            .store
            .get(&self.key(CounterKind::Account, slot, 0), now);
        let plausible = arrival > 0
            && (arrival as u64) <= now.secs()
            && now.secs() - (arrival as u64) < 7 * 86_400;
        if !plausible {
            return None;
        }
        let qn = self
            .store
            .get(&self.key(CounterKind::Account, slot, 1), now);
        Some((
            arrival as u64,
            (qn > 0 && self.numbered).then_some(qn as u64),
        ))
    }

    /// Keeps account `uid`'s place (`arrival`, `qn`): set when it joins, and kept alive by
    /// each of its check-ins.
    pub(super) fn keep_account(
        &self,
        uid: &Identity,
        (arrival, qn): (u64, Option<u64>),
        now: Timestamp,
    ) {
        let Some(slot) = Self::account_slot(uid) else {
            return;
        };
        let set = |id: u64, value: u64| {
            let current = self
                .store
                .get(&self.key(CounterKind::Account, slot, id), now);
            let delta = if current == 0 { value as i64 } else { 0 };
            self.add(CounterKind::Account, slot, id, delta, now);
        };
        set(0, arrival);
        if let Some(n) = qn {
            set(1, n);
        }
    }
}
