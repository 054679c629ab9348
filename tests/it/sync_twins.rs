//! The cluster sync's two implementations, side by side: `sync.lua` on a real Redis (what a
//! cluster runs) and `MemoryHub`, its in-memory twin (what `vestibule simulate --nodes` and the
//! store's unit tests run). Three nodes live twice, once on each, do the same things at the
//! same (simulated) times, and sync in the same order; after every sync the replies and what
//! every node then reads (counters, allotments, marks, invitations, overrides, the key seed,
//! the live nodes) must be the same in both worlds.
//!
//! The simulated clock starts at the real one and only moves forward, because Redis expires
//! counters by its own clock (`PEXPIREAT`) while the script reads `now` from the node.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use vestibule::config::OnStoreFailure;
use vestibule::store::redis::RedisSync;
use vestibule::store::shared::{MemoryHub, SharedStore, SyncReply, SyncRequest};
use vestibule::store::{
    CounterKey, CounterKind, CounterStore, Mark, MarkKind, Ticket, WindowCounter, WindowSpec,
};
use vestibule::time::Timestamp;

use crate::common::*;

const ROOM: &str = "sale";
const INTERVAL_MS: u64 = 1000;
/// Marks and invitations are remembered this long: the sequence outlives them.
const MARKS_LIVE_MS: u64 = 20_000;

/// How one of the two exchanges is reached.
enum Exchange {
    Memory(MemoryHub),
    Redis(RedisSync, tokio::runtime::Runtime),
}

impl Exchange {
    fn run(&self, req: &SyncRequest) -> SyncReply {
        match self {
            Exchange::Memory(hub) => hub.exchange(req).expect("the hub is up"),
            Exchange::Redis(redis, rt) => {
                rt.block_on(redis.exchange(req, Duration::from_secs(10)))
                    .expect("redis answers")
                    .0
            }
        }
    }
}

/// One world: the nodes (in the order they were created) and their exchange.
struct World {
    exchange: Exchange,
    nodes: Vec<SharedStore>,
    /// Each node's shared rate-limit window (held: a store keeps only the windows in use).
    windows: Vec<Arc<dyn WindowCounter>>,
    /// Every node's seed candidate, to say whose candidate became the cluster's seed (the
    /// candidates are random, so the two worlds' differ).
    candidates: Vec<String>,
}

impl World {
    fn new(exchange: Exchange) -> World {
        World {
            exchange,
            nodes: Vec::new(),
            windows: Vec::new(),
            candidates: Vec::new(),
        }
    }

    fn join(&mut self, name: &str, incarnation: &str) -> usize {
        let store = SharedStore::new(name, incarnation, INTERVAL_MS, OnStoreFailure::LastShare);
        self.windows.push(store.window(&api_window()));
        self.nodes.push(store);
        self.nodes.len() - 1
    }

    /// Whose candidate `seed` is.
    fn seed_owner(&self, seed: &str) -> Option<usize> {
        self.candidates.iter().position(|c| c == seed)
    }

    fn seed_words_owner(&self, seed: Option<[u64; 4]>) -> Option<usize> {
        let seed = seed?;
        let hex: String = seed
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .map(|b| format!("{b:02x}"))
            .collect();
        self.seed_owner(&hex)
    }

    /// Node `i` syncs at `now`: (its request and the reply, both with what is the same in
    /// both worlds only), after which the node has taken the reply in.
    fn sync(&mut self, i: usize, now: Timestamp) -> String {
        let req = self.nodes[i].prepare(now);
        if self.candidates.len() <= i {
            self.candidates.resize(i + 1, String::new());
        }
        self.candidates[i] = req.seed_candidate.clone();
        let reply = self.exchange.run(&req);
        let seen = format!(
            "request {}\nreply {}",
            comparable_request(&req),
            self.comparable_reply(&reply)
        );
        self.nodes[i].apply(req, reply, now);
        seen
    }

    fn comparable_reply(&self, reply: &SyncReply) -> String {
        let mut members = reply.members.clone();
        members.sort();
        let mut counters = reply.counters.clone();
        counters.sort();
        let mut demand: Vec<_> = reply
            .demand
            .iter()
            .map(|(room, by)| {
                let mut by = by.clone();
                by.sort();
                (room.clone(), by)
            })
            .collect();
        demand.sort();
        let mut controls = reply.controls.clone();
        controls.sort();
        // The mark cursor is each store's own (a stream id on Redis, a sequence number in
        // memory): what it selects is compared instead, as `marks`.
        format!(
            "registered={} members={members:?} counters={counters:?} demand={demand:?} \
             marks={:?} seed_of={:?} controls={controls:?} generation={}",
            reply.registered,
            reply.marks,
            self.seed_owner(&reply.seed),
            reply.controls_generation,
        )
    }

    /// What every node reads now, of the counters, marks and invitations in `seen`.
    fn reads(&self, seen: &Seen, now: Timestamp) -> String {
        let mut out = String::new();
        for (n, store) in self.nodes.iter().enumerate() {
            out += &format!("node {n} ({}):\n", store.member());
            for key in &seen.keys {
                out += &format!(
                    "  {key:?}: get={} split={:?} own={}\n",
                    store.get(key, now),
                    store.split(key, now),
                    store.own(key, now)
                );
            }
            for kind in [
                CounterKind::Active,
                CounterKind::Waiting,
                CounterKind::Granted,
            ] {
                let mut scan = store.scan(ROOM, kind, now);
                scan.sort();
                out += &format!("  scan {kind:?}: {scan:?}\n");
            }
            for (scope, mark) in &seen.marks {
                out += &format!(
                    "  {scope} {mark:?}: {:?}\n",
                    store.marked_until(scope, *mark, now)
                );
            }
            for key in &seen.window_keys {
                out += &format!("  window {key}: {:?}\n", self.windows[n].peek(*key, now));
            }
            let mut overrides = store.take_overrides();
            overrides.sort();
            out += &format!(
                "  allotment={:?} invitations={:?} seed_of={:?} nodes={:?} up={} overrides={overrides:?}\n",
                store.allotment(ROOM),
                store.invitations_in_use(ROOM, now),
                self.seed_words_owner(store.key_seed()),
                store.cluster().map(|c| c.nodes),
                store.is_up(),
            );
        }
        out
    }
}

/// The request with what is the same in both worlds: sorted, without the mark cursor and the
/// random seed candidate.
fn comparable_request(req: &SyncRequest) -> String {
    let mut counters = req.counters.clone();
    counters.sort();
    let mut demand = req.demand.clone();
    demand.sort();
    format!(
        "member={} now={} counters={counters:?} demand={demand:?} marks={:?} controls={:?} seen={}",
        req.member, req.now_ms, req.marks, req.controls, req.controls_seen
    )
}

/// What the sequence has touched, to read back after each step.
#[derive(Default)]
struct Seen {
    keys: Vec<CounterKey>,
    marks: Vec<(String, Mark)>,
    window_keys: Vec<u64>,
}

fn api_window() -> WindowSpec {
    WindowSpec {
        name: "api".into(),
        interval_ms: 10_000,
        max_keys: 1000,
        shared: Some(3),
    }
}

/// Both worlds, driven in lockstep.
struct Twins {
    memory: World,
    redis: World,
    seen: Seen,
    now: Timestamp,
    /// The nodes that sync (a node that stopped is still read, as it last was).
    running: Vec<usize>,
    steps: usize,
}

impl Twins {
    /// Does the same to node `i` of each world; their answers must be the same too.
    fn each<T: PartialEq + std::fmt::Debug>(
        &mut self,
        what: &str,
        i: usize,
        f: impl Fn(&SharedStore, Timestamp) -> T,
    ) -> T {
        let m = f(&self.memory.nodes[i], self.now);
        let r = f(&self.redis.nodes[i], self.now);
        assert_eq!(m, r, "{what} on node {i}: memory, then redis");
        m
    }

    fn join(&mut self, name: &str, incarnation: &str) -> usize {
        let i = self.memory.join(name, incarnation);
        assert_eq!(self.redis.join(name, incarnation), i);
        self.running.push(i);
        i
    }

    fn advance(&mut self, ms: u64) {
        self.now = Timestamp::from_millis(self.now.millis() + ms);
    }

    fn key(&mut self, kind: CounterKind, slot: u64, id: u64) -> CounterKey {
        let key = CounterKey {
            scope: Arc::from(ROOM),
            kind,
            slot,
            id,
        };
        if !self.seen.keys.contains(&key) {
            self.seen.keys.push(key.clone());
        }
        key
    }

    fn add(&mut self, i: usize, key: &CounterKey, delta: i64, lives_ms: u64) -> i64 {
        let until = Timestamp::from_millis(self.now.millis() + lives_ms);
        self.each("add", i, |s, now| s.add(key, delta, now, until))
    }

    fn mark(&mut self, i: usize, scope: &str, mark: Mark, lives_ms: u64) -> bool {
        if !self.seen.marks.contains(&(scope.to_owned(), mark)) {
            self.seen.marks.push((scope.to_owned(), mark));
        }
        let until = Timestamp::from_millis(self.now.millis() + lives_ms);
        self.each("mark", i, |s, now| s.mark(scope, mark, until, now))
    }

    fn invite(&mut self, i: usize, holder: u64) -> vestibule::store::Invited {
        let ticket = Ticket {
            invite: 0xfeed,
            holder,
            uses: 2,
            until: Timestamp::from_millis(self.now.millis() + MARKS_LIVE_MS),
            cap: 10,
        };
        self.each("invite", i, |s, now| s.invite(ROOM, &ticket, now))
    }

    fn hit_window(&mut self, i: usize, key: u64, n: u64) {
        if !self.seen.window_keys.contains(&key) {
            self.seen.window_keys.push(key);
        }
        let m = self.memory.windows[i].observe(key, n, self.now);
        let r = self.redis.windows[i].observe(key, n, self.now);
        assert_eq!(m, r, "observe on node {i}: memory, then redis");
    }

    /// Node `i` syncs in both worlds; the exchanges and then every node's reads must match.
    fn sync(&mut self, i: usize, label: &str) {
        self.steps += 1;
        let m = self.memory.sync(i, self.now);
        let r = self.redis.sync(i, self.now);
        assert_eq!(
            m, r,
            "step {} ({label}): node {i}'s sync, memory (left) and redis (right)",
            self.steps
        );
        let m = self.memory.reads(&self.seen, self.now);
        let r = self.redis.reads(&self.seen, self.now);
        assert_eq!(
            m, r,
            "step {} ({label}): what the nodes read after node {i}'s sync, memory (left) and redis (right)",
            self.steps
        );
    }

    fn sync_all(&mut self, label: &str) {
        for i in self.running.clone() {
            self.sync(i, label);
        }
    }

    fn stop(&mut self, i: usize) {
        self.running.retain(|n| *n != i);
    }
}

#[test]
fn memory_hub_and_sync_lua_agree_step_by_step() {
    let Some(redis) = Redis::start() else { return };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let lua = RedisSync::new(&[redis.url()], "parity:").expect("a redis client");
    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64;
    let mut t = Twins {
        memory: World::new(Exchange::Memory(MemoryHub::default())),
        redis: World::new(Exchange::Redis(lua, rt)),
        seen: Seen::default(),
        now: Timestamp::from_millis(start),
        running: Vec::new(),
        steps: 0,
    };
    let minute = t.now.millis() / 60_000;
    let (a, b, c) = (t.join("a", "1"), t.join("b", "1"), t.join("c", "1"));

    // Everyone joins: the first candidate becomes the seed, and each node learns the others.
    t.sync_all("joining");
    t.sync_all("everyone known");

    // Traffic: a admits three and b one, b queues arrivals in two buckets, everyone asks.
    let active = t.key(CounterKind::Active, minute, 0);
    let admitted = t.key(CounterKind::Admitted, minute, 0);
    assert_eq!(t.add(a, &active, 3, 120_000), 3);
    t.add(a, &admitted, 3, 120_000);
    t.add(b, &active, 1, 120_000);
    t.add(b, &admitted, 1, 120_000);
    let tick = t.now.millis() / 5_000;
    let waiting0 = t.key(CounterKind::Waiting, tick, 0);
    let waiting1 = t.key(CounterKind::Waiting, tick, 1);
    t.add(b, &waiting0, 5, 60_000);
    t.add(b, &waiting1, 2, 60_000);
    t.add(c, &waiting1, 4, 60_000);
    for (node, n) in [(a, 30), (b, 60), (c, 10)] {
        t.each("demand", node, |s, now| s.demand(ROOM, n, now));
    }
    t.advance(400);
    t.sync_all("counts and demand");

    // One of a's users moves to c and leaves there (c's own count goes negative), a user is
    // revoked on a, b's winner is marked, an invitation is used on a and b, an operator grant
    // is made on c and partly used on a.
    t.add(c, &active, -1, 120_000);
    let revoked = Mark {
        kind: MarkKind::Revoked,
        id: 0xdead_beef,
    };
    let winner = Mark {
        kind: MarkKind::Admitted,
        id: 42,
    };
    assert!(t.mark(a, ROOM, revoked, MARKS_LIVE_MS));
    assert!(t.mark(b, ROOM, winner, MARKS_LIVE_MS));
    assert!(
        !t.mark(b, ROOM, winner, MARKS_LIVE_MS),
        "a mark is set once"
    );
    assert_eq!(t.invite(a, 1), vestibule::store::Invited::First);
    assert_eq!(t.invite(b, 2), vestibule::store::Invited::First);
    let granted = t.key(CounterKind::Granted, t.now.millis(), 0);
    let used = t.key(CounterKind::GrantUsed, granted.slot, 0);
    t.add(c, &granted, 20, 600_000);
    t.add(a, &used, 7, 600_000);
    t.each("publish", c, |s, _| {
        s.publish_overrides(ROOM, 1, r#"{"paused":true}"#)
    });
    t.advance(600);
    t.sync_all("moves, marks, invitations, a grant, an override");
    t.advance(1000);
    t.sync_all("everyone has heard of it");

    // A holder who came on b comes back on c; a third holder finds the invitation used up.
    assert_eq!(t.invite(c, 2), vestibule::store::Invited::Again);
    assert_eq!(t.invite(c, 3), vestibule::store::Invited::UsedUp);

    // Overrides race: b publishes version 3, then a an older version 2, which loses everywhere.
    t.each("publish", b, |s, _| {
        s.publish_overrides(ROOM, 3, r#"{"paused":false}"#)
    });
    t.each("publish", a, |s, _| {
        s.publish_overrides(ROOM, 2, r#"{"paused":true,"by":"a"}"#)
    });
    // A shared rate-limit window: key 7 passes the exchange threshold on a and b, key 9 not.
    t.hit_window(a, 7, 4);
    t.hit_window(b, 7, 3);
    t.hit_window(c, 9, 2);
    t.advance(500);
    t.sync(b, "newer override");
    t.sync(a, "older override");
    t.sync(c, "both overrides known");
    t.advance(500);
    t.sync_all("windows shared");

    // c goes silent: after three intervals the others drop it (and its demand); its counts
    // stay, as the users they stand for do. It comes back restarted, as a new member, and
    // pushes everything it has.
    t.stop(c);
    for _ in 0..4 {
        t.advance(1000);
        t.add(a, &active, 1, 120_000);
        t.sync_all("c silent");
    }
    let c2 = t.join("c", "2");
    t.add(c2, &waiting0, 1, 60_000);
    t.each("demand", c2, |s, now| s.demand(ROOM, 25, now));
    t.sync(c2, "c restarted");
    t.advance(300);
    t.sync_all("c2 known");

    // The waiting counts expire (their minute is over): they leave the replies.
    t.advance(61_000);
    let later = t.key(CounterKind::Waiting, t.now.millis() / 5_000, 0);
    t.add(b, &later, 2, 60_000);
    t.sync_all("a minute later");
    // Every mark and invitation so far has expired: new ones still reach every node.
    let penalty = Mark {
        kind: MarkKind::Penalty,
        id: 7,
    };
    assert!(t.mark(b, "rl|api|10000", penalty, MARKS_LIVE_MS));
    assert_eq!(t.invite(a, 4), vestibule::store::Invited::First);
    t.advance(500);
    t.sync_all("marks after the others expired");
    t.advance(1000);
    t.sync_all("settled");
    assert!(t.steps >= 30, "{} steps", t.steps);
}
