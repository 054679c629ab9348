//! One node's state: its own counts, the others' sums as of the last sync, each room's
//! allotment and demand, and the sync's two halves ([`SharedStore::prepare`] and
//! [`SharedStore::apply`]).

use super::*;

/// Operator overrides on their way through the store: each room's newest version
/// wins, on every node.
#[derive(Debug, Default)]
pub(super) struct ControlSync {
    /// The newest version of each room's overrides this node knows, from anywhere.
    pub(super) known: BTreeMap<String, (u64, String)>,
    /// Versions made here and not yet sent.
    pub(super) outbox: BTreeMap<String, (u64, String)>,
    /// Versions learned from the others, not yet taken in by the operator controls.
    pub(super) inbox: Vec<(String, u64, String)>,
    pub(super) seen: u64,
}

/// How a sync went, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SyncFigures {
    pub counters_sent: usize,
    pub counters_read: usize,
    pub members: usize,
}

/// The fewest queue numbers a node asks the store for at once.
pub(super) const MIN_BLOCK: u64 = 4;

/// A room's queue numbers on this node: the blocks the store gave, used in order.
#[derive(Debug, Default)]
pub(super) struct Numbers {
    /// (next, last) of each block, oldest first.
    pub(super) blocks: std::collections::VecDeque<(u64, u64)>,
    /// Numbers given since the last sync.
    pub(super) given: u64,
    /// The most given in one sync interval lately (halved at each sync, raised by `given`).
    pub(super) peak: u64,
}

impl Numbers {
    /// The next number, if a block has one left.
    pub(super) fn take(&mut self) -> Option<u64> {
        while let Some((next, last)) = self.blocks.front_mut() {
            if *next <= *last {
                let n = *next;
                *next += 1;
                self.given += 1;
                return Some(n);
            }
            self.blocks.pop_front();
        }
        None
    }

    /// A new block from the store. What is left of the older ones is dropped (a gap) unless
    /// the new block follows on from them: then no other node took numbers in between, and
    /// none of theirs can be higher than those left here.
    pub(super) fn take_block(&mut self, first: u64, last: u64) {
        let follows = self.blocks.back().is_some_and(|(_, end)| end + 1 == first);
        if !follows {
            self.blocks.clear();
        }
        self.blocks.push_back((first, last));
    }

    /// How many to ask the store for at this sync: twice the busiest recent interval's
    /// arrivals. Every sync asks: a block serves until the next one arrives, and what is left
    /// of it then is dropped (a gap), so no number is given more than about one sync interval
    /// after the store handed it out, and numbers stray from arrival order by at most that.
    pub(super) fn wanted(&mut self) -> u64 {
        self.peak = (self.peak - self.peak / 8).max(self.given);
        self.given = 0;
        (2 * self.peak).max(MIN_BLOCK)
    }
}

/// A register on this node: its value, and whether the store has it yet.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RegisterValue {
    pub(super) value: u64,
    pub(super) dirty: bool,
}

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Own {
    pub(super) value: i64,
    /// The value the others know (sent at the last successful sync).
    pub(super) pushed: i64,
    pub(super) expire_ms: u64,
}

/// Requests on a room over the last minute: the previous and current minute, weighted.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Demand {
    pub(super) window: u64,
    pub(super) prev: u64,
    pub(super) curr: u64,
}

impl Demand {
    pub(super) fn roll(&mut self, now: Timestamp) {
        let w = now.millis() / DEMAND_WINDOW_MS;
        if w != self.window {
            self.prev = if w == self.window + 1 { self.curr } else { 0 };
            self.curr = 0;
            self.window = w;
        }
    }

    pub(super) fn value(&mut self, now: Timestamp) -> u64 {
        self.roll(now);
        let f = (now.millis() % DEMAND_WINDOW_MS) as f64 / DEMAND_WINDOW_MS as f64;
        (self.prev as f64 * (1.0 - f) + self.curr as f64).round() as u64
    }
}

/// `key` split into what the cluster had at the last sync and what this node counted since.
pub(super) fn split_of(
    remote: &Remote,
    own: &Counters<Own>,
    key: &CounterKey,
    now: Timestamp,
) -> (i64, i64) {
    let others = remote.values.get(key).copied().unwrap_or(0);
    match own.get(key).filter(|o| o.expire_ms > now.millis()) {
        Some(o) => (others + o.pushed, o.value - o.pushed),
        None => (others, 0),
    }
}

#[derive(Default)]
pub(super) struct Remote {
    /// The others' sum per counter.
    pub(super) values: Counters<i64>,
    /// Per room: members' demand, in member order.
    pub(super) shares: HashMap<Arc<str>, Allotment>,
    /// Live members, sorted.
    pub(super) members: Vec<String>,
}

#[derive(Debug, Default)]
pub(super) struct Health {
    pub(super) up: bool,
    pub(super) last_sync: Option<Timestamp>,
    pub(super) last_full_push_ms: u64,
    pub(super) full_push: bool,
    pub(super) mark_cursor: String,
}

pub struct SharedStore {
    pub(super) node: String,
    pub(super) member: String,
    pub(super) interval_ms: u64,
    pub(super) on_failure: OnStoreFailure,
    /// Windows and marks (marks learned from the others are copied here).
    pub(super) local: LocalStore,
    pub(super) own: Arc<Mutex<Counters<Own>>>,
    pub(super) remote: Arc<ArcSwap<Remote>>,
    /// Shared windows, by spec (a window lives as long as some rule uses it).
    pub(super) windows: Mutex<HashMap<WindowSpec, std::sync::Weak<SharedWindow>>>,
    /// The cluster's key seed, from the store.
    pub(super) seed: arc_swap::ArcSwapOption<[u64; 4]>,
    /// This node's candidate for the seed, should the store have none.
    pub(super) seed_candidate: String,
    /// Marks and invitation uses set here since the last sync.
    pub(super) outbox: Mutex<Vec<(Arc<str>, Note, Timestamp)>>,
    pub(super) demand: Mutex<hashbrown::HashMap<Arc<str>, Demand, ahash::RandomState>>,
    pub(super) health: Mutex<Health>,
    pub(super) controls: Mutex<ControlSync>,
    /// Per room: its queue numbers' blocks.
    pub(super) numbers: Mutex<HashMap<Arc<str>, Numbers>>,
    pub(super) registers: Mutex<HashMap<Arc<str>, [RegisterValue; Register::ALL.len()]>>,
}

impl SharedStore {
    /// A store for node `node`, run `incarnation` (distinct per process start), syncing every
    /// `interval_ms`.
    pub fn new(
        node: &str,
        incarnation: &str,
        interval_ms: u64,
        on_failure: OnStoreFailure,
    ) -> SharedStore {
        SharedStore {
            node: node.to_owned(),
            member: format!("{node}#{incarnation}"),
            interval_ms: interval_ms.max(1),
            on_failure,
            local: LocalStore::new(),
            own: Arc::default(),
            remote: Arc::new(ArcSwap::from_pointee(Remote::default())),
            windows: Mutex::new(HashMap::new()),
            seed: arc_swap::ArcSwapOption::empty(),
            seed_candidate: {
                use rand::RngCore;
                let mut b = [0u8; 32];
                rand::thread_rng().fill_bytes(&mut b);
                hex::encode(b)
            },
            outbox: Mutex::new(Vec::new()),
            demand: Mutex::default(),
            health: Mutex::new(Health {
                full_push: true,
                mark_cursor: "0-0".into(),
                ..Health::default()
            }),
            controls: Mutex::new(ControlSync::default()),
            numbers: Mutex::default(),
            registers: Mutex::default(),
        }
    }

    pub(super) fn control_sync(&self) -> std::sync::MutexGuard<'_, ControlSync> {
        self.controls.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn member(&self) -> &str {
        &self.member
    }

    pub fn interval_ms(&self) -> u64 {
        self.interval_ms
    }

    pub(super) fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn numbers(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Numbers>> {
        self.numbers.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn registers(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, [RegisterValue; Register::ALL.len()]>> {
        self.registers.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn own_map(&self) -> std::sync::MutexGuard<'_, Counters<Own>> {
        self.own.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What to send now: counters changed since the last sync (all of them after a failure,
    /// when the store did not know this node, and every 30 s), demand, and new marks.
    pub fn prepare(&self, now: Timestamp) -> SyncRequest {
        let (full, cursor) = {
            let mut h = self.health();
            let full = h.full_push
                || now.millis().saturating_sub(h.last_full_push_ms) >= FULL_PUSH_EVERY_MS;
            if full {
                h.last_full_push_ms = now.millis();
            }
            (full, h.mark_cursor.clone())
        };
        let mut pushed = Vec::new();
        let mut counters = Vec::new();
        for counter in self.own_map().iter() {
            let o = counter.value;
            if o.expire_ms > now.millis() && (full || o.value != o.pushed) {
                let k = counter.key();
                counters.push((encode_key(&k), o.value, o.expire_ms));
                pushed.push((k, o.value));
            }
        }
        let demand = {
            let mut d = self.demand.lock().unwrap_or_else(|p| p.into_inner());
            d.iter_mut()
                .map(|(scope, d)| (scope.to_string(), d.value(now)))
                .collect()
        };
        let (controls, controls_seen) = {
            let mut c = self.control_sync();
            // After the store forgot this node (or lost its data), everything known goes again.
            let sending = if full {
                c.outbox.clear();
                c.known.clone()
            } else {
                std::mem::take(&mut c.outbox)
            };
            let list = sending
                .into_iter()
                .map(|(room, (v, doc))| (room, v, doc))
                .collect();
            (list, c.seen)
        };
        let mut registers = Vec::new();
        for (scope, regs) in self.registers().iter_mut() {
            for (reg, r) in Register::ALL.iter().zip(regs.iter_mut()) {
                if (full || r.dirty) && r.value > 0 && reg.is_shared() {
                    r.dirty = false;
                    registers.push((encode_register(scope, *reg), r.value));
                }
            }
        }
        let blocks = self
            .numbers()
            .iter_mut()
            .map(|(scope, n)| (scope.to_string(), n.wanted()))
            .filter(|(_, want)| *want > 0)
            .collect();
        let outbox = std::mem::take(&mut *self.outbox.lock().unwrap_or_else(|p| p.into_inner()));
        let marks = outbox
            .iter()
            .map(|(scope, n, until)| (encode_note(scope, *n), until.millis()))
            .collect();
        SyncRequest {
            member: self.member.clone(),
            now_ms: now.millis(),
            dead_after_ms: self.interval_ms * DEAD_AFTER_INTERVALS,
            counters,
            demand,
            marks,
            mark_cursor: cursor,
            seed_candidate: self.seed_candidate.clone(),
            controls,
            controls_seen,
            registers,
            blocks,
            pushed,
            outbox,
        }
    }

    /// Takes in a successful sync's reply to `req`.
    pub fn apply(&self, req: SyncRequest, reply: SyncReply, now: Timestamp) -> SyncFigures {
        {
            let mut own = self.own_map();
            for (k, v) in &req.pushed {
                if let Some(o) = own.get_mut(k) {
                    o.pushed = *v;
                }
            }
        }
        let mut values = Counters::default();
        for (k, v) in &reply.counters {
            if let Some((scope, kind, slot, id)) = decode_key(k) {
                *values.get_or_insert_with_in(scope, kind, slot, id, || 0) = *v;
            }
        }
        let mut members = reply.members.clone();
        if !members.contains(&self.member) {
            members.push(self.member.clone());
        }
        members.sort();
        let mut shares = HashMap::new();
        for (scope, by_member) in &reply.demand {
            let demand: BTreeMap<&str, u64> =
                by_member.iter().map(|(m, d)| (m.as_str(), *d)).collect();
            let weights: Vec<f64> = members
                .iter()
                .map(|m| demand.get(m.as_str()).copied().unwrap_or(0) as f64)
                .collect();
            let mine = members.iter().position(|m| *m == self.member).unwrap_or(0);
            shares.insert(
                Arc::<str>::from(scope.as_str()),
                Allotment::Share {
                    weights: weights.into(),
                    mine,
                },
            );
        }
        for (m, until) in &reply.marks {
            let until = Timestamp::from_millis(*until);
            match decode_note(m) {
                // Receipts stay apart from marks, as on the node that handed them out.
                Some((scope, Note::Mark(mark))) if mark.kind == MarkKind::Receipt => {
                    self.local.note_receipt(&scope, mark.id, until, now);
                }
                Some((scope, Note::Mark(mark))) => {
                    self.local.mark(&scope, mark, until, now);
                }
                Some((scope, Note::Invite { invite, holder })) => {
                    self.local
                        .remember_invite(&scope, invite, holder, until, now);
                }
                None => {}
            }
        }
        let figures = SyncFigures {
            counters_sent: req.counters.len(),
            counters_read: values.len(),
            members: members.len(),
        };
        self.remote.store(Arc::new(Remote {
            values,
            shares,
            members,
        }));
        {
            let mut c = self.control_sync();
            for (room, version, doc) in reply.controls {
                if c.known.get(&room).is_none_or(|(v, _)| *v < version) {
                    c.known.insert(room.clone(), (version, doc.clone()));
                    c.inbox.push((room, version, doc));
                }
            }
            c.seen = reply.controls_generation;
        }
        // Rooms reset since the last sync: their blocks, given out before the reset, go.
        let mut reset = Vec::new();
        {
            let mut regs = self.registers();
            for (k, v) in &reply.registers {
                if let Some((scope, reg)) = decode_register(k) {
                    let r = &mut regs.entry(Arc::from(scope)).or_default()[reg.index()];
                    if reg == Register::ResetAt && *v > r.value {
                        reset.push(scope.to_owned());
                    }
                    r.value = r.value.max(*v);
                }
            }
        }
        {
            let mut numbers = self.numbers();
            for scope in &reset {
                if let Some(n) = numbers.get_mut(scope.as_str()) {
                    n.blocks.clear();
                }
            }
            for (room, last) in &reply.blocks {
                let asked = req.blocks.iter().find(|(r, _)| r == room).map(|(_, n)| *n);
                if let (Some(n), Some(size)) = (numbers.get_mut(room.as_str()), asked) {
                    n.take_block(last + 1 - size.min(*last), *last);
                }
            }
        }
        if let Some(seed) = parse_seed(&reply.seed) {
            if self.seed.load().as_deref() != Some(&seed) {
                self.seed.store(Some(Arc::new(seed)));
            }
        }
        let mut h = self.health();
        h.up = true;
        h.last_sync = Some(now);
        h.full_push = !reply.registered;
        h.mark_cursor = reply.mark_cursor;
        figures
    }

    /// A sync that failed: everything is sent again next time, marks included.
    pub fn failed(&self, req: SyncRequest) {
        {
            let mut regs = self.registers();
            for (k, _) in &req.registers {
                if let Some((scope, reg)) = decode_register(k) {
                    if let Some(r) = regs.get_mut(scope) {
                        r[reg.index()].dirty = true;
                    }
                }
            }
        }
        {
            let mut c = self.control_sync();
            for (room, version, doc) in req.controls {
                if c.outbox.get(&room).is_none_or(|(v, _)| *v < version) {
                    c.outbox.insert(room, (version, doc));
                }
            }
        }
        let mut outbox = self.outbox.lock().unwrap_or_else(|p| p.into_inner());
        let mut again = req.outbox;
        again.append(&mut outbox);
        *outbox = again;
        drop(outbox);
        let mut h = self.health();
        h.up = false;
        h.full_push = true;
    }

    pub fn is_up(&self) -> bool {
        self.health().up
    }
}

/// 32 bytes of hex as four words.
pub(super) fn parse_seed(hex_seed: &str) -> Option<[u64; 4]> {
    let bytes = hex::decode(hex_seed).ok()?;
    if bytes.len() != 32 {
        return None;
    }
    let mut out = [0u64; 4];
    for (i, w) in out.iter_mut().enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
        *w = u64::from_le_bytes(b);
    }
    Some(out)
}
