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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::local::LocalStore;
use super::{
    Allotment, ClusterStatus, CounterKey, CounterKind, CounterStore, Counters, Invited, Mark,
    MarkKind, Ticket, WindowCounter, WindowSpec,
};
use crate::config::OnStoreFailure;
use crate::time::Timestamp;

/// A node that has not synced for this many intervals is no longer live.
pub const DEAD_AFTER_INTERVALS: u64 = 3;
/// A node pushes all its counters (not only changed ones) at least this often, so a store that
/// lost its data (a Redis restart without persistence) is whole again within it.
const FULL_PUSH_EVERY_MS: u64 = 30_000;
/// Demand is measured over this long.
const DEMAND_WINDOW_MS: u64 = 60_000;

/// What one node sends at a sync.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SyncRequest {
    /// This node's member name: node name and incarnation.
    pub member: String,
    pub now_ms: u64,
    /// Members that have not synced for this long are dropped.
    pub dead_after_ms: u64,
    /// (encoded key, this node's absolute value, expire at ms).
    pub counters: Vec<(String, i64, u64)>,
    /// (room, this node's demand over the last minute).
    pub demand: Vec<(String, u64)>,
    /// (encoded scope and mark, until ms): marks set here since the last sync.
    pub marks: Vec<(String, u64)>,
    /// Marks already read: the id of the last one.
    pub mark_cursor: String,
    /// A random seed the store keeps if it has none yet (hex).
    pub seed_candidate: String,
    /// (room, version, overrides as JSON): operator overrides to share.
    pub controls: Vec<(String, u64, String)>,
    /// The generation of the cluster's overrides this node has read.
    pub controls_seen: u64,
    /// The counters pushed, decoded, and the marks (kept to retry them after a failure).
    pushed: Vec<(CounterKey, i64)>,
    outbox: Vec<(Arc<str>, Note, Timestamp)>,
}

impl SyncRequest {
    /// Bytes of arguments the Redis script receives (as `redis.rs` counts them).
    pub fn payload_bytes(&self) -> usize {
        let arg = |s: usize| s + 16;
        let digits = |n: u64| n.checked_ilog10().map_or(1, |d| d as usize + 1);
        arg(self.member.len())
            + 5 * arg(13)
            + self
                .counters
                .iter()
                .map(|(k, v, exp)| arg(k.len()) + arg(digits(v.unsigned_abs())) + arg(digits(*exp)))
                .sum::<usize>()
            + self
                .demand
                .iter()
                .map(|(r, d)| arg(r.len()) + arg(digits(*d)))
                .sum::<usize>()
            + self
                .marks
                .iter()
                .map(|(m, u)| arg(m.len()) + arg(digits(*u)))
                .sum::<usize>()
            + arg(self.mark_cursor.len())
            + self
                .controls
                .iter()
                .map(|(r, v, doc)| arg(r.len()) + arg(digits(*v)) + arg(doc.len()))
                .sum::<usize>()
            + 2 * arg(13)
    }
}

impl SyncReply {
    /// Bytes of strings in the script's reply (as `redis.rs` counts them).
    pub fn payload_bytes(&self) -> usize {
        let bulk = |s: usize| s + 8;
        self.members.iter().map(|m| bulk(m.len())).sum::<usize>()
            + self
                .counters
                .iter()
                .map(|(k, v)| bulk(k.len()) + bulk(v.to_string().len()))
                .sum::<usize>()
            + self
                .demand
                .iter()
                .map(|(r, by)| {
                    bulk(r.len())
                        + by.iter()
                            .map(|(m, d)| bulk(m.len()) + bulk(d.to_string().len()))
                            .sum::<usize>()
                })
                .sum::<usize>()
            + self
                .marks
                .iter()
                .map(|(m, u)| bulk(m.len()) + bulk(u.to_string().len()))
                .sum::<usize>()
            + bulk(self.mark_cursor.len())
            + self
                .controls
                .iter()
                .map(|(r, v, doc)| bulk(r.len()) + bulk(v.to_string().len() + 1 + doc.len()))
                .sum::<usize>()
            + bulk(13)
    }
}

/// What a node reads back at a sync.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SyncReply {
    /// Whether this member was live before this sync (false: new, or the store lost its data).
    pub registered: bool,
    /// Live members.
    pub members: Vec<String>,
    /// (encoded key, the sum over every other member) for every live counter.
    pub counters: Vec<(String, i64)>,
    /// (room, [(member, demand)]) for the rooms this node sent demand for.
    pub demand: Vec<(String, Vec<(String, u64)>)>,
    /// (encoded scope and mark, until ms) set by other members since the cursor.
    pub marks: Vec<(String, u64)>,
    pub mark_cursor: String,
    /// The cluster's key seed (hex): the first candidate the store received.
    pub seed: String,
    /// Every room's overrides (room, version, JSON), when the generation moved since
    /// `controls_seen`; empty otherwise.
    pub controls: Vec<(String, u64, String)>,
    /// The generation of the cluster's overrides.
    pub controls_generation: u64,
}

/// Operator overrides on their way through the store: each room's newest version
/// wins, on every node.
#[derive(Debug, Default)]
struct ControlSync {
    /// The newest version of each room's overrides this node knows, from anywhere.
    known: BTreeMap<String, (u64, String)>,
    /// Versions made here and not yet sent.
    outbox: BTreeMap<String, (u64, String)>,
    /// Versions learned from the others, not yet taken in by the operator controls.
    inbox: Vec<(String, u64, String)>,
    seen: u64,
}

/// How a sync went, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SyncFigures {
    pub counters_sent: usize,
    pub counters_read: usize,
    pub members: usize,
}

fn kind_code(k: CounterKind) -> char {
    match k {
        CounterKind::Active => 'a',
        CounterKind::Admitted => 'd',
        CounterKind::Waiting => 'w',
        CounterKind::Arrived => 'n',
        CounterKind::Arrivals => 'v',
        CounterKind::Returned => 'r',
        CounterKind::Window => 'x',
        CounterKind::Granted => 'g',
        CounterKind::GrantUsed => 'u',
    }
}

fn kind_of(c: &str) -> Option<CounterKind> {
    Some(match c {
        "a" => CounterKind::Active,
        "d" => CounterKind::Admitted,
        "w" => CounterKind::Waiting,
        "n" => CounterKind::Arrived,
        "v" => CounterKind::Arrivals,
        "r" => CounterKind::Returned,
        "x" => CounterKind::Window,
        "g" => CounterKind::Granted,
        "u" => CounterKind::GrantUsed,
        _ => return None,
    })
}

/// `c|kind|slot|id|scope`: the scope last, so it may hold any character.
pub fn encode_key(k: &CounterKey) -> String {
    format!("c|{}|{}|{}|{}", kind_code(k.kind), k.slot, k.id, k.scope)
}

/// An [`encode_key`]d counter's scope, kind, slot and id (borrowed: a sync reads back every
/// live counter, and their scopes are a few rooms and rules).
pub fn decode_key(s: &str) -> Option<(&str, CounterKind, u64, u64)> {
    let mut parts = s.splitn(5, '|');
    if parts.next()? != "c" {
        return None;
    }
    let kind = kind_of(parts.next()?)?;
    let slot = parts.next()?.parse().ok()?;
    let id = parts.next()?.parse().ok()?;
    let scope = parts.next()?;
    Some((scope, kind, slot, id))
}

/// What a node tells the others through the stream of marks: a mark, or a holder who joined
/// with an invitation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Note {
    Mark(Mark),
    Invite { invite: u64, holder: u64 },
}

/// A mark as [`encode_mark`]; an invitation's holder as `u|invite|holder|scope`.
pub fn encode_note(scope: &str, note: Note) -> String {
    match note {
        Note::Mark(m) => encode_mark(scope, m),
        Note::Invite { invite, holder } => format!("u|{invite}|{holder}|{scope}"),
    }
}

pub fn decode_note(s: &str) -> Option<(String, Note)> {
    if let Some(rest) = s.strip_prefix("u|") {
        let mut parts = rest.splitn(3, '|');
        let invite = parts.next()?.parse().ok()?;
        let holder = parts.next()?.parse().ok()?;
        return Some((parts.next()?.to_owned(), Note::Invite { invite, holder }));
    }
    decode_mark(s).map(|(scope, m)| (scope, Note::Mark(m)))
}

/// `m|kind|id|scope`.
pub fn encode_mark(scope: &str, m: Mark) -> String {
    let kind = match m.kind {
        MarkKind::Revoked => 'r',
        MarkKind::Admitted => 'a',
        MarkKind::Penalty => 'p',
    };
    format!("m|{kind}|{}|{scope}", m.id)
}

pub fn decode_mark(s: &str) -> Option<(String, Mark)> {
    let mut parts = s.splitn(4, '|');
    if parts.next()? != "m" {
        return None;
    }
    let kind = match parts.next()? {
        "r" => MarkKind::Revoked,
        "a" => MarkKind::Admitted,
        "p" => MarkKind::Penalty,
        _ => return None,
    };
    let id = parts.next()?.parse().ok()?;
    Some((parts.next()?.to_owned(), Mark { kind, id }))
}

#[derive(Clone, Copy, Debug, Default)]
struct Own {
    value: i64,
    /// The value the others know (sent at the last successful sync).
    pushed: i64,
    expire_ms: u64,
}

/// Requests on a room over the last minute: the previous and current minute, weighted.
#[derive(Clone, Copy, Debug, Default)]
struct Demand {
    window: u64,
    prev: u64,
    curr: u64,
}

impl Demand {
    fn roll(&mut self, now: Timestamp) {
        let w = now.millis() / DEMAND_WINDOW_MS;
        if w != self.window {
            self.prev = if w == self.window + 1 { self.curr } else { 0 };
            self.curr = 0;
            self.window = w;
        }
    }

    fn value(&mut self, now: Timestamp) -> u64 {
        self.roll(now);
        let f = (now.millis() % DEMAND_WINDOW_MS) as f64 / DEMAND_WINDOW_MS as f64;
        (self.prev as f64 * (1.0 - f) + self.curr as f64).round() as u64
    }
}

/// `key` split into what the cluster had at the last sync and what this node counted since.
fn split_of(remote: &Remote, own: &Counters<Own>, key: &CounterKey, now: Timestamp) -> (i64, i64) {
    let others = remote.values.get(key).copied().unwrap_or(0);
    match own.get(key).filter(|o| o.expire_ms > now.millis()) {
        Some(o) => (others + o.pushed, o.value - o.pushed),
        None => (others, 0),
    }
}

#[derive(Default)]
struct Remote {
    /// The others' sum per counter.
    values: Counters<i64>,
    /// Per room: members' demand, in member order.
    shares: HashMap<Arc<str>, Allotment>,
    /// Live members, sorted.
    members: Vec<String>,
}

#[derive(Debug, Default)]
struct Health {
    up: bool,
    last_sync: Option<Timestamp>,
    last_full_push_ms: u64,
    full_push: bool,
    mark_cursor: String,
}

pub struct SharedStore {
    node: String,
    member: String,
    interval_ms: u64,
    on_failure: OnStoreFailure,
    /// Windows and marks (marks learned from the others are copied here).
    local: LocalStore,
    own: Arc<Mutex<Counters<Own>>>,
    remote: Arc<ArcSwap<Remote>>,
    /// Shared windows, by spec (a window lives as long as some rule uses it).
    windows: Mutex<HashMap<WindowSpec, std::sync::Weak<SharedWindow>>>,
    /// The cluster's key seed, from the store.
    seed: arc_swap::ArcSwapOption<[u64; 4]>,
    /// This node's candidate for the seed, should the store have none.
    seed_candidate: String,
    /// Marks and invitation uses set here since the last sync.
    outbox: Mutex<Vec<(Arc<str>, Note, Timestamp)>>,
    demand: Mutex<hashbrown::HashMap<Arc<str>, Demand, ahash::RandomState>>,
    health: Mutex<Health>,
    controls: Mutex<ControlSync>,
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
        }
    }

    fn control_sync(&self) -> std::sync::MutexGuard<'_, ControlSync> {
        self.controls.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn member(&self) -> &str {
        &self.member
    }

    pub fn interval_ms(&self) -> u64 {
        self.interval_ms
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn own_map(&self) -> std::sync::MutexGuard<'_, Counters<Own>> {
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
fn parse_seed(hex_seed: &str) -> Option<[u64; 4]> {
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

/// A rate-limit window counted across the cluster (`shared = true`). This node counts
/// in its own sketch; a key it counted `exchange_above` times in an interval becomes one of its
/// shared counters (absolute, like every counter), and every key's sample adds what the other
/// nodes reported for it at the last sync. Keys far below the limit never leave the node.
pub struct SharedWindow {
    local: Arc<dyn WindowCounter>,
    scope: Arc<str>,
    interval_ms: u64,
    exchange_above: u64,
    own: Arc<Mutex<Counters<Own>>>,
    remote: Arc<ArcSwap<Remote>>,
}

impl SharedWindow {
    /// The others' counts of `key` in the previous and current interval.
    fn others(&self, key: u64, now: Timestamp) -> (u64, u64) {
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
    fn observe(&self, key: u64, n: u64, now: Timestamp) -> super::WindowSample {
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

    fn peek(&self, key: u64, now: Timestamp) -> super::WindowSample {
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

    fn invitations_in_use(&self, scope: &str, now: Timestamp) -> super::InUse {
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

/// The exchange run in memory, with the same semantics as the Redis script
/// (`src/store/sync.lua`): for `vestibule simulate --nodes` and tests.
#[derive(Default)]
pub struct MemoryHub {
    inner: Mutex<Hub>,
}

#[derive(Default)]
struct Hub {
    /// member → last sync ms.
    members: HashMap<String, u64>,
    /// key → (expire ms, member → value).
    counters: HashMap<String, (u64, HashMap<String, i64>)>,
    /// room → member → demand.
    demand: HashMap<String, HashMap<String, u64>>,
    /// (seq, mark, until).
    marks: Vec<(u64, String, u64)>,
    /// The last mark's sequence number. Like a stream's ids it never goes back, even once every
    /// mark has expired: the nodes' cursors are past the old ones.
    mark_seq: u64,
    seed: Option<String>,
    /// room → (version, overrides), and their generation.
    controls: BTreeMap<String, (u64, String)>,
    controls_generation: u64,
    /// Down: every exchange fails.
    down: bool,
}

impl MemoryHub {
    pub fn set_down(&self, down: bool) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).down = down;
    }

    pub fn exchange(&self, req: &SyncRequest) -> Result<SyncReply, String> {
        let mut hub = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if hub.down {
            return Err("store down".into());
        }
        let now = req.now_ms;
        let registered = hub.members.contains_key(&req.member);
        hub.members.insert(req.member.clone(), now);
        hub.members.retain(|_, at| *at + req.dead_after_ms > now);
        for (k, v, exp) in &req.counters {
            let e = hub
                .counters
                .entry(k.clone())
                .or_insert((*exp, HashMap::new()));
            e.0 = *exp;
            e.1.insert(req.member.clone(), *v);
        }
        for (room, d) in &req.demand {
            hub.demand
                .entry(room.clone())
                .or_default()
                .insert(req.member.clone(), *d);
        }
        let mut seq = hub.mark_seq;
        for (m, until) in &req.marks {
            seq += 1;
            hub.marks.push((seq, m.clone(), *until));
        }
        hub.mark_seq = seq;
        hub.counters.retain(|_, (exp, _)| *exp > now);
        hub.marks.retain(|(_, _, until)| *until > now);
        let counters = hub
            .counters
            .iter()
            .map(|(k, (_, by))| {
                let sum: i64 = by
                    .iter()
                    .filter(|(m, _)| **m != req.member)
                    .map(|(_, v)| v)
                    .sum();
                (k.clone(), sum)
            })
            .filter(|(_, v)| *v != 0)
            .collect();
        let members: Vec<String> = hub.members.keys().cloned().collect();
        let demand = req
            .demand
            .iter()
            .map(|(room, _)| {
                let by = hub.demand.get(room).cloned().unwrap_or_default();
                let live = by
                    .into_iter()
                    .filter(|(m, _)| hub.members.contains_key(m))
                    .collect();
                (room.clone(), live)
            })
            .collect();
        let cursor: u64 = req
            .mark_cursor
            .split('-')
            .next()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let marks = hub
            .marks
            .iter()
            .filter(|(s, _, _)| *s > cursor)
            .map(|(_, m, u)| (m.clone(), *u))
            .collect();
        let seed = hub
            .seed
            .get_or_insert_with(|| req.seed_candidate.clone())
            .clone();
        for (room, version, doc) in &req.controls {
            if hub.controls.get(room).is_none_or(|(v, _)| v < version) {
                hub.controls.insert(room.clone(), (*version, doc.clone()));
                hub.controls_generation += 1;
            }
        }
        let controls = if hub.controls_generation == req.controls_seen {
            Vec::new()
        } else {
            hub.controls
                .iter()
                .map(|(room, (v, doc))| (room.clone(), *v, doc.clone()))
                .collect()
        };
        Ok(SyncReply {
            registered,
            members,
            counters,
            demand,
            marks,
            mark_cursor: format!("{seq}-0"),
            seed,
            controls,
            controls_generation: hub.controls_generation,
        })
    }

    /// One sync of `store` through this hub at `now`: the payload bytes (sent, received), or
    /// `None` when the hub is down.
    pub fn sync_bytes(&self, store: &SharedStore, now: Timestamp) -> Option<(usize, usize)> {
        let req = store.prepare(now);
        match self.exchange(&req) {
            Ok(reply) => {
                let bytes = (req.payload_bytes(), reply.payload_bytes());
                store.apply(req, reply, now);
                Some(bytes)
            }
            Err(_) => {
                store.failed(req);
                None
            }
        }
    }

    /// One sync of `store` through this hub at `now`; false when the hub is down.
    pub fn sync(&self, store: &SharedStore, now: Timestamp) -> bool {
        self.sync_bytes(store, now).is_some()
    }
}

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
