//! The sync's wire format: what a node sends ([`SyncRequest`]) and reads back ([`SyncReply`]),
//! and how counter keys, marks and notes are written as strings in the store.

use super::*;

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
    /// Registers changed here (`encode_register`), to be merged by the highest value.
    pub registers: Vec<(String, u64)>,
    /// Blocks of queue numbers wanted: (room, how many).
    pub blocks: Vec<(String, u64)>,
    /// The counters pushed, decoded, and the marks (kept to retry them after a failure).
    pub(super) pushed: Vec<(CounterKey, i64)>,
    pub(super) outbox: Vec<(Arc<str>, Note, Timestamp)>,
}

impl SyncRequest {
    /// Bytes of arguments the Redis script receives (as `redis.rs` counts them).
    pub(crate) fn payload_bytes(&self) -> usize {
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
            + self
                .registers
                .iter()
                .chain(&self.blocks)
                .map(|(k, v)| arg(k.len()) + arg(digits(*v)))
                .sum::<usize>()
            + 2 * arg(3)
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
    /// Every register the store holds, with its highest value.
    pub registers: Vec<(String, u64)>,
    /// The blocks given: (room, the block's last number).
    pub blocks: Vec<(String, u64)>,
}

impl SyncReply {
    /// Bytes of strings in the script's reply (as `redis.rs` counts them).
    pub(crate) fn payload_bytes(&self) -> usize {
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
            + self
                .registers
                .iter()
                .chain(&self.blocks)
                .map(|(k, v)| bulk(k.len()) + bulk(v.to_string().len()))
                .sum::<usize>()
    }
}

/// `g|code|scope`: a register in the store.
pub fn encode_register(scope: &str, reg: Register) -> String {
    format!("g|{}|{scope}", reg.code())
}

pub fn decode_register(s: &str) -> Option<(&str, Register)> {
    let mut parts = s.splitn(3, '|');
    if parts.next()? != "g" {
        return None;
    }
    let reg = Register::of_code(parts.next()?)?;
    Some((parts.next()?, reg))
}

pub(super) fn kind_code(k: CounterKind) -> char {
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
        CounterKind::Account => 'k',
        CounterKind::PreQueued => 'q',
    }
}

pub(super) fn kind_of(c: &str) -> Option<CounterKind> {
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
        "k" => CounterKind::Account,
        "q" => CounterKind::PreQueued,
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
        MarkKind::Reached => 'q',
        MarkKind::Redeemed => 't',
        MarkKind::Ended => 'e',
        MarkKind::CodeUsed => 'o',
        MarkKind::Receipt => 'd',
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
        "q" => MarkKind::Reached,
        "t" => MarkKind::Redeemed,
        "e" => MarkKind::Ended,
        "o" => MarkKind::CodeUsed,
        "d" => MarkKind::Receipt,
        _ => return None,
    };
    let id = parts.next()?.parse().ok()?;
    Some((parts.next()?.to_owned(), Mark { kind, id }))
}
