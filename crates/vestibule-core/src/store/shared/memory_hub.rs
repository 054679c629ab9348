//! [`MemoryHub`]: the exchange run in memory.

use super::*;

/// The exchange run in memory, with the same semantics as the Redis script
/// (the edge's `sync.lua`): for `vestibule simulate --nodes` and tests.
#[derive(Default)]
pub struct MemoryHub {
    pub(super) inner: Mutex<Hub>,
}

#[derive(Default)]
pub(super) struct Hub {
    /// member → last sync ms.
    pub(super) members: HashMap<String, u64>,
    /// key → (expire ms, member → value).
    pub(super) counters: HashMap<String, (u64, HashMap<String, i64>)>,
    /// room → member → demand.
    pub(super) demand: HashMap<String, HashMap<String, u64>>,
    /// (seq, mark, until).
    pub(super) marks: Vec<(u64, String, u64)>,
    /// The last mark's sequence number. Like a stream's ids it never goes back, even once every
    /// mark has expired: the nodes' cursors are past the old ones.
    pub(super) mark_seq: u64,
    pub(super) seed: Option<String>,
    /// room → (version, overrides), and their generation.
    pub(super) controls: BTreeMap<String, (u64, String)>,
    pub(super) controls_generation: u64,
    /// Registers, merged by the highest value.
    pub(super) registers: BTreeMap<String, u64>,
    /// room → the last queue number given in a block.
    pub(super) numbered: HashMap<String, u64>,
    /// Down: every exchange fails.
    pub(super) down: bool,
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
        for (k, v) in &req.registers {
            let r = hub.registers.entry(k.clone()).or_insert(0);
            *r = (*r).max(*v);
        }
        let blocks = req
            .blocks
            .iter()
            .map(|(room, size)| {
                // Never below a number a node remembers giving (a store that lost its data),
                // and the numbering's start kept, or set now.
                let floor = hub
                    .registers
                    .get(&encode_register(room, Register::Numbered))
                    .copied()
                    .unwrap_or(0);
                hub.registers
                    .entry(encode_register(room, Register::Since))
                    .or_insert(now);
                let last = hub.numbered.entry(room.clone()).or_insert(0);
                *last = (*last).max(floor) + size;
                (room.clone(), *last)
            })
            .collect();
        let registers = hub.registers.iter().map(|(k, v)| (k.clone(), *v)).collect();
        Ok(SyncReply {
            registers,
            blocks,
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
