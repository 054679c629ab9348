//! The request path's side of a [`SharedStore`]: the [`CounterStore`] it is, and the rate-limit
//! window counted across the cluster ([`SharedWindow`]). Nothing here waits on the network.

use super::*;

/// A rate-limit window counted across the cluster (`shared = true`). This node counts
/// in its own sketch; a key it counted `exchange_above` times in an interval becomes one of its
/// shared counters (absolute, like every counter), and every key's sample adds what the other
/// nodes reported for it at the last sync. Keys far below the limit never leave the node.
pub struct SharedWindow {
    pub(super) local: Arc<dyn WindowCounter>,
    pub(super) scope: Arc<str>,
    pub(super) interval_ms: u64,
    pub(super) exchange_above: u64,
    pub(super) own: Arc<Mutex<Counters<Own>>>,
    pub(super) remote: Arc<ArcSwap<Remote>>,
}

impl SharedWindow {
    /// The others' counts of `key` in the previous and current interval.
    pub(super) fn others(&self, key: u64, now: Timestamp) -> (u64, u64) {
        let remote = self.remote.load();
        let Some(counts) = remote.values.group(&self.scope, CounterKind::Window) else {
            return (0, 0);
        };
        let slot = now.millis() / self.interval_ms;
        let get = |s: u64| counts.get(s, key).copied().unwrap_or(0).max(0) as u64;
        (get(slot.wrapping_sub(1)), get(slot))
    }
}

impl WindowCounter for SharedWindow {
    fn observe(&self, key: u64, n: u64, now: Timestamp) -> crate::store::WindowSample {
        let mut s = self.local.observe(key, n, now);
        if s.curr >= self.exchange_above {
            let slot = now.millis() / self.interval_ms;
            let mut own = self.own.lock().unwrap_or_else(|p| p.into_inner());
            let o = own.get_or_insert_with_in(
                &self.scope,
                CounterKind::Window,
                slot,
                key,
                Own::default,
            );
            o.value = s.curr as i64;
            o.expire_ms = (slot + 2) * self.interval_ms;
        }
        let (prev, curr) = self.others(key, now);
        s.prev += prev;
        s.curr += curr;
        s
    }

    fn peek(&self, key: u64, now: Timestamp) -> crate::store::WindowSample {
        let mut s = self.local.peek(key, now);
        let (prev, curr) = self.others(key, now);
        s.prev += prev;
        s.curr += curr;
        s
    }
}

impl CounterStore for SharedStore {
    fn window(&self, spec: &WindowSpec) -> Arc<dyn WindowCounter> {
        let Some(exchange_above) = spec.shared else {
            return self.local.window(spec);
        };
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        windows.retain(|_, w| w.strong_count() > 0);
        if let Some(w) = windows.get(spec).and_then(std::sync::Weak::upgrade) {
            return w;
        }
        let w = Arc::new(SharedWindow {
            local: self.local.window(spec),
            scope: Arc::from(format!("rl|{}|{}", spec.name, spec.interval_ms)),
            interval_ms: spec.interval_ms.max(1),
            exchange_above: exchange_above.max(1),
            own: self.own.clone(),
            remote: self.remote.clone(),
        });
        windows.insert(spec.clone(), Arc::downgrade(&w));
        w
    }

    fn marked_until(&self, scope: &str, mark: Mark, now: Timestamp) -> Option<Timestamp> {
        self.local.marked_until(scope, mark, now)
    }

    fn key_seed(&self) -> Option<[u64; 4]> {
        self.seed.load().as_deref().copied()
    }

    fn add(&self, key: &CounterKey, delta: i64, now: Timestamp, expire_at: Timestamp) -> i64 {
        let remote = self.remote.load();
        let mut own = self.own_map();
        let o = own.get_or_insert_with(key, Own::default);
        if o.expire_ms <= now.millis() {
            o.value = 0;
            o.pushed = 0;
        }
        o.value = o.value.saturating_add(delta);
        o.expire_ms = o.expire_ms.max(expire_at.millis());
        let value = o.value;
        drop(own);
        (remote.values.get(key).copied().unwrap_or(0) + value).max(0)
    }

    fn get(&self, key: &CounterKey, now: Timestamp) -> i64 {
        let (synced, pending) = self.split(key, now);
        (synced + pending).max(0)
    }

    fn split(&self, key: &CounterKey, now: Timestamp) -> (i64, i64) {
        split_of(&self.remote.load(), &self.own_map(), key, now)
    }

    fn split_each(&self, keys: &[CounterKey], now: Timestamp) -> Vec<(i64, i64)> {
        let remote = self.remote.load();
        let own = self.own_map();
        keys.iter()
            .map(|k| split_of(&remote, &own, k, now))
            .collect()
    }

    fn own(&self, key: &CounterKey, now: Timestamp) -> i64 {
        self.own_map()
            .get(key)
            .filter(|o| o.expire_ms > now.millis())
            .map_or(0, |o| o.value)
    }

    fn scan(&self, scope: &str, kind: CounterKind, now: Timestamp) -> Vec<(u64, u64, i64)> {
        let mut merged: BTreeMap<(u64, u64), i64> = BTreeMap::new();
        for (slot, id, v) in self.remote.load().values.of(scope, kind) {
            *merged.entry((slot, id)).or_insert(0) += v;
        }
        for (slot, id, o) in self.own_map().of(scope, kind) {
            if o.expire_ms > now.millis() {
                *merged.entry((slot, id)).or_insert(0) += o.value;
            }
        }
        merged
            .into_iter()
            .map(|((slot, id), v)| (slot, id, v.max(0)))
            .collect()
    }

    fn mark(&self, scope: &str, mark: Mark, until: Timestamp, now: Timestamp) -> bool {
        if !self.local.mark(scope, mark, until, now) {
            return false;
        }
        self.outbox.lock().unwrap_or_else(|p| p.into_inner()).push((
            Arc::from(scope),
            Note::Mark(mark),
            until,
        ));
        true
    }

    fn note_receipt(&self, scope: &str, id: u64, until: Timestamp, now: Timestamp) -> bool {
        if !self.local.note_receipt(scope, id, until, now) {
            return false;
        }
        let mark = Mark {
            kind: MarkKind::Receipt,
            id,
        };
        self.outbox.lock().unwrap_or_else(|p| p.into_inner()).push((
            Arc::from(scope),
            Note::Mark(mark),
            until,
        ));
        true
    }

    fn receipts(
        &self,
        scope: &str,
        from: usize,
        now: Timestamp,
    ) -> crate::store::receipts::ReceiptList {
        self.local.receipts(scope, from, now)
    }

    fn number(&self, scope: &str, _now: Timestamp) -> Option<u64> {
        let n = {
            let mut numbers = self.numbers();
            match numbers.get_mut(scope) {
                Some(n) => n.take(),
                None => {
                    // The first arrival of this room here: the next sync asks for a block.
                    numbers.insert(Arc::from(scope), Numbers::default());
                    None
                }
            }
        }?;
        self.raise(scope, Register::Numbered, n);
        Some(n)
    }

    fn clock_skew_ms(&self) -> u64 {
        CLOCK_SKEW_MS
    }

    fn want_numbers(&self, scope: &str) {
        self.numbers().entry(Arc::from(scope)).or_default();
    }

    fn raise(&self, scope: &str, reg: Register, value: u64) -> u64 {
        let mut regs = self.registers();
        let raise = |r: &mut RegisterValue| {
            if value > r.value {
                r.value = value;
                r.dirty = true;
            }
            r.value
        };
        // Reading (or not raising) a scope's register allocates nothing.
        match regs.get_mut(scope) {
            Some(r) => raise(&mut r[reg.index()]),
            None if value == 0 => 0,
            None => raise(&mut regs.entry(Arc::from(scope)).or_default()[reg.index()]),
        }
    }

    fn clear(&self, scope: &str, stale: &dyn Fn(CounterKind, u64) -> bool) {
        for (kind, slot, o) in self.own_map().of_scope(scope) {
            if stale(kind, slot) {
                o.value = 0;
            }
        }
    }

    fn marks_of(&self, scope: &str, kind: MarkKind, now: Timestamp) -> Vec<(u64, Timestamp)> {
        self.local.marks_of(scope, kind, now)
    }

    fn invitations_in_use(&self, scope: &str, now: Timestamp) -> crate::store::InUse {
        self.local.invitations_in_use(scope, now)
    }

    fn invite(&self, scope: &str, ticket: &Ticket, now: Timestamp) -> Invited {
        let invited = self.local.invite(scope, ticket, now);
        if invited == Invited::First {
            self.outbox.lock().unwrap_or_else(|p| p.into_inner()).push((
                Arc::from(scope),
                Note::Invite {
                    invite: ticket.invite,
                    holder: ticket.holder,
                },
                ticket.until,
            ));
        }
        invited
    }

    fn sweep(&self, now: Timestamp) {
        self.own_map().retain(|o| o.expire_ms > now.millis());
        self.local.sweep(now);
    }

    fn allotment(&self, scope: &str) -> Allotment {
        let (up, synced) = {
            let h = self.health();
            (h.up, h.last_sync.is_some())
        };
        if !up {
            match self.on_failure {
                OnStoreFailure::Open => return Allotment::Open,
                OnStoreFailure::Closed => return Allotment::Closed,
                // Before any sync there is no last share: nothing is given.
                OnStoreFailure::LastShare if !synced => return Allotment::Closed,
                OnStoreFailure::LastShare => {}
            }
        }
        let remote = self.remote.load();
        if let Some(a) = remote.shares.get(scope) {
            return a.clone();
        }
        // A room nobody has reported demand for yet: equal parts.
        let n = remote.members.len().max(1);
        Allotment::Share {
            weights: vec![1.0; n].into(),
            mine: remote
                .members
                .iter()
                .position(|m| *m == self.member)
                .unwrap_or(0),
        }
    }

    fn demand(&self, scope: &str, n: u64, now: Timestamp) {
        let mut d = self.demand.lock().unwrap_or_else(|p| p.into_inner());
        let e = d.entry_ref(scope).or_default();
        e.roll(now);
        e.curr += n;
    }

    fn publish_overrides(&self, room: &str, version: u64, doc: &str) {
        let mut c = self.control_sync();
        if c.known.get(room).is_some_and(|(v, _)| *v >= version) {
            return;
        }
        c.known.insert(room.to_owned(), (version, doc.to_owned()));
        c.outbox.insert(room.to_owned(), (version, doc.to_owned()));
    }

    fn take_overrides(&self) -> Vec<(String, u64, String)> {
        std::mem::take(&mut self.control_sync().inbox)
    }

    fn cluster(&self) -> Option<ClusterStatus> {
        let h = self.health();
        Some(ClusterStatus {
            store: "redis",
            node: self.node.clone(),
            nodes: self.remote.load().members.len(),
            up: h.up,
            last_sync: h.last_sync,
        })
    }
}
