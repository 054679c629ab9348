//! The counter store's interface: what the decision counts over time, behind one trait, so a
//! store shared by several nodes can back a cluster. The stores themselves (in process, Redis)
//! are the edge's.
//!
//! Everything the decision counts over time goes through [`CounterStore`]: the sliding windows
//! of rate-limit rules and the accounting of capacity rooms (active users per minute,
//! admissions per minute, waiting users per arrival bucket).
//!
//! What is deliberately *not* here: penalty boxes, token buckets and concurrency slots. They
//! are verdict caches and per-node resources (vsthrottle and Fastly's penalty box are per node
//! too). With shared windows, a key that trips a limit on one node is caught by the shared
//! count on every node; each node then keeps its own penalty box.
//!
//! Time is always passed in; a store never reads a clock.

mod counters;
pub mod local;
pub mod marks;
pub mod receipts;
pub mod shared;

pub use counters::Counters;

use std::sync::Arc;

use crate::time::Timestamp;

/// Counts of one key in a sliding window: the previous complete interval, the current one, and
/// how far into the current one `now` is.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WindowSample {
    pub prev: u64,
    pub curr: u64,
    /// Elapsed fraction of the current interval, in [0, 1).
    pub fraction: f64,
}

impl WindowSample {
    /// Events in the last full interval, estimated: `prev·(1−f) + curr`.
    pub(crate) fn weighted(&self) -> f64 {
        self.prev as f64 * (1.0 - self.fraction) + self.curr as f64
    }
}

/// What a window counter is for. Two equal specs name the same counter, so its counts survive
/// a reload that leaves the rule's window alone.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WindowSpec {
    /// The rule's name.
    pub name: String,
    /// Interval length; intervals are aligned on multiples of it since the epoch.
    pub interval_ms: u64,
    /// Distinct keys the counter is sized for (accuracy degrades beyond it; see `local.rs`).
    pub max_keys: usize,
    /// Counted across the cluster when the store is shared (`shared = true`): a key's
    /// counts are exchanged once this node counted `exchange_above` of them in an interval.
    pub shared: Option<u64>,
}

/// A sliding-window counter family: many keys, one interval length.
pub trait WindowCounter: Send + Sync {
    /// Adds `n` events for `key` at `now` and returns the window as it stands after them.
    fn observe(&self, key: u64, n: u64, now: Timestamp) -> WindowSample;

    /// The window of `key` at `now`, without counting anything.
    fn peek(&self, key: u64, now: Timestamp) -> WindowSample;
}

/// Identifies one exact counter. `scope` is a room name; `kind` says what is counted; `slot`
/// is the time bucket (a minute number); `id` distinguishes counters within a slot (an arrival
/// bucket, say).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterKey {
    pub scope: Arc<str>,
    pub kind: CounterKind,
    pub slot: u64,
    pub id: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CounterKind {
    /// Users whose last counted minute of activity is `slot`.
    Active,
    /// Users admitted during minute `slot`.
    Admitted,
    /// Waiting users of arrival bucket `id` whose last check-in fell in tick `slot`.
    Waiting,
    /// New arrivals of bucket `id`, seen once (at tick `slot`) and not yet back for their first
    /// check-in: some of them have already walked away.
    Arrived,
    /// Arrivals that joined the queue during minute `slot`.
    Arrivals,
    /// Arrivals that came back for their first check-in during minute `slot`.
    Returned,
    /// A shared rate-limit window's count of key `id` in interval `slot` (scope: the rule).
    Window,
    /// Admissions an operator granted (`admit`) at `slot` (Unix milliseconds).
    Granted,
    /// Admissions taken from the grant made at `slot`.
    GrantUsed,
    /// An account's place in a capacity room (enqueue tokens), so its other devices find it:
    /// `slot` names the account; id 0 holds its arrival (Unix s), id 1 its queue number.
    Account,
    /// Visitors given a place in the pre-queue of the event starting at `slot` (Unix s): the
    /// room's waiting users while nobody checks in yet.
    PreQueued,
}

/// Something that happens once and is remembered until it cannot matter any more: a mark.
/// Marks are what stateless tokens cannot carry themselves (a token cannot know it was revoked,
/// or already counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mark {
    pub kind: MarkKind,
    /// A digest naming the thing marked (the same on every node).
    pub id: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MarkKind {
    /// An admitted user's session the origin ended: its tokens are refused from then on.
    Revoked,
    /// A waiting token that already won its draw: presenting it again is not a new admission.
    Admitted,
    /// A key a shared rate-limit rule put in its penalty box (scope: the rule).
    Penalty,
    /// An API request the room let in (id: its queue number): it holds an active place until
    /// the mark ends, unless its token is issued first.
    Reached,
    /// An API request whose token was issued (id: its queue number), until the token's expiry
    /// and a day more, so expired tokens can be listed.
    Redeemed,
    /// An API request whose session was marked completed or abandoned (id: its queue number).
    Ended,
    /// An OpenID Connect authorization code traded for tokens (id: from its MAC; scope: the
    /// `[oidc]` room), until the code expires: a second trade is refused.
    CodeUsed,
    /// A verifiable draw's receipt handed out (id: the receipt; scope: the draw), on its way
    /// to the other nodes of a cluster: stores keep receipts apart from their marks
    /// ([`receipts`]), and a node that learns one notes it there.
    Receipt,
}

/// A value per scope that only grows, merged across nodes by the highest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Register {
    /// The last queue number given (one process; a cluster's numbers come in blocks).
    Numbered,
    /// The serving counter: the highest queue number let in.
    Serving,
    /// The numbers an operator's `serving` move let in, beyond the room's own admissions.
    Moved,
    /// When the last `serving` move was made (Unix ms): it lets in only numbers of arrivals
    /// before it.
    MovedAt,
    /// When the room was last reset, Unix milliseconds.
    ResetAt,
    /// The last queue number given before the room's last reset.
    ResetBelow,
    /// When the store's numbering of the room began (Unix ms): numbers of an arrival before it
    /// belong to an earlier numbering (a restarted process, a store that lost its data) and
    /// are refused, so no number is ever given to two requests.
    Since,
    /// The last reset this node has cleared its counts for (Unix ms). This node's own: never
    /// shared with the others.
    Cleared,
}

impl Register {
    /// Every register, in the order of [`Register::index`].
    pub const ALL: [Register; 8] = [
        Register::Numbered,
        Register::Serving,
        Register::Moved,
        Register::MovedAt,
        Register::ResetAt,
        Register::ResetBelow,
        Register::Since,
        Register::Cleared,
    ];

    /// Its place in a scope's array of registers (the order of [`Register::ALL`]).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The register's name in the store.
    pub fn code(self) -> &'static str {
        match self {
            Register::Numbered => "qn",
            Register::Serving => "sv",
            Register::Moved => "mv",
            Register::MovedAt => "ma",
            Register::ResetAt => "ra",
            Register::ResetBelow => "rb",
            Register::Since => "ns",
            Register::Cleared => "cl",
        }
    }

    /// Whether the cluster shares it (all but [`Register::Cleared`]).
    pub fn is_shared(self) -> bool {
        self != Register::Cleared
    }

    /// The register named `code`.
    pub fn of_code(code: &str) -> Option<Register> {
        Some(match code {
            "qn" => Register::Numbered,
            "sv" => Register::Serving,
            "mv" => Register::Moved,
            "ma" => Register::MovedAt,
            "ra" => Register::ResetAt,
            "rb" => Register::ResetBelow,
            "ns" => Register::Since,
            _ => return None,
        })
    }
}

/// One visitor presenting one invitation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    /// The invitation's id.
    pub invite: u64,
    /// Who presents it: a digest of the invitation and the identity, the same on every node.
    pub holder: u64,
    /// How many holders it admits.
    pub uses: u32,
    /// When it expires: it is forgotten then.
    pub until: Timestamp,
    /// The most invitations the scope remembers at once (`max_invitations`).
    pub cap: usize,
}

/// Invitations in use in a scope.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InUse {
    pub invitations: usize,
    pub holders: usize,
}

/// What the store said to a [`Ticket`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invited {
    /// A new holder, within the invitation's uses.
    First,
    /// A holder who joined with it before.
    Again,
    /// Every use is taken by other holders.
    UsedUp,
    /// The scope remembers `cap` invitations in use already; a new one cannot be counted.
    Full,
}

pub trait CounterStore: Send + Sync {
    /// The window counter for `spec`. Calling again with an equal spec returns the same counter.
    fn window(&self, spec: &WindowSpec) -> Arc<dyn WindowCounter>;

    /// Adds `delta` (possibly negative) to `key` at `now` and returns the new value. Counters
    /// count people, so they never go below zero: a decrement past zero leaves 0. The counter
    /// is forgotten at `expire_at` (each write may extend it); a forgotten counter reads 0.
    fn add(&self, key: &CounterKey, delta: i64, now: Timestamp, expire_at: Timestamp) -> i64;

    /// The value of `key` at `now` (0 if never written or expired).
    fn get(&self, key: &CounterKey, now: Timestamp) -> i64;

    /// Every live counter of `scope` and `kind`, as (slot, id, value). Used to read a room's
    /// queue; a shared store may answer from an index of keys.
    fn scan(&self, scope: &str, kind: CounterKind, now: Timestamp) -> Vec<(u64, u64, i64)>;

    /// Sets `mark` in `scope` until `until` (when it can no longer matter). Returns true only
    /// when it was not set already, so whatever it guards happens once: a replayed revoke frees
    /// nothing twice, a re-presented winning token is not counted twice.
    fn mark(&self, scope: &str, mark: Mark, until: Timestamp, now: Timestamp) -> bool;

    /// Until when `mark` is set in `scope`, if it is (and has not expired).
    fn marked_until(&self, scope: &str, mark: Mark, now: Timestamp) -> Option<Timestamp>;

    /// Lets `ticket.holder` join with invitation `ticket.invite` of `scope`: the
    /// first `uses` holders are let in, each of them again as often as they come back, and the
    /// invitation is remembered until `ticket.until`. A shared store tells the other nodes
    /// at its next sync: until then, two nodes may each let in a last holder.
    fn invite(&self, scope: &str, ticket: &Ticket, now: Timestamp) -> Invited;

    /// The invitations of `scope` remembered as in use now (against its cap), and how many
    /// holders joined with them.
    fn invitations_in_use(&self, scope: &str, now: Timestamp) -> InUse;

    /// Whether `mark` is set in `scope` (and has not expired).
    fn is_marked(&self, scope: &str, mark: Mark, now: Timestamp) -> bool {
        self.marked_until(scope, mark, now).is_some()
    }

    /// The seed shared rate-limit keys are hashed with: the same on every node of a cluster,
    /// and secret (it comes from the store). `None` without a shared store, or before the first
    /// sync.
    fn key_seed(&self) -> Option<[u64; 4]> {
        None
    }

    /// Notes a verifiable draw's receipt in `scope` (a draw) until `until`, apart from the marks
    /// ([`receipts`]); a shared store tells the other nodes. Whether it is new here.
    fn note_receipt(&self, _scope: &str, _id: u64, _until: Timestamp, _now: Timestamp) -> bool {
        false
    }

    /// The receipts of `scope`'s draw this store knows (the cluster's, once synced), from index
    /// `from` on, in the order noted here.
    fn receipts(&self, _scope: &str, _from: usize, _now: Timestamp) -> receipts::ReceiptList {
        receipts::ReceiptList::default()
    }

    /// The in-process store's secret for verifiable draws (`room::draw`), set once by the
    /// process from its state folder; `None` when none was set, and always in a shared store,
    /// whose draws derive theirs from [`CounterStore::key_seed`].
    fn draw_secret(&self) -> Option<[u8; 32]> {
        None
    }

    /// Sets the in-process store's draw secret; the first call wins. A shared store ignores it.
    fn set_draw_secret(&self, _secret: [u8; 32]) {}

    /// Drops what has expired. The in-process store calls this from a background task; a
    /// shared store with native expiry may do nothing.
    fn sweep(&self, now: Timestamp);

    /// `key` split in two: what the whole cluster had counted at the last sync, and what this
    /// node counted since (its own, not seen by the others yet). Their sum is what `get` reads
    /// before clamping. A store of one process has synced nothing: it is all its own.
    fn split(&self, key: &CounterKey, now: Timestamp) -> (i64, i64) {
        (0, self.get(key, now))
    }

    /// [`CounterStore::split`] of each of `keys`, in order, from one look at the store (a room
    /// reads a counter per minute of its session at once: one lock, not one per minute).
    fn split_each(&self, keys: &[CounterKey], now: Timestamp) -> Vec<(i64, i64)> {
        keys.iter().map(|k| self.split(k, now)).collect()
    }

    /// What this node itself counted in `key` (in a cluster, its own contribution; it may be
    /// negative). A store of one process counted everything itself.
    fn own(&self, key: &CounterKey, now: Timestamp) -> i64 {
        self.get(key, now)
    }

    /// This node's part of `scope`'s free slots. A store of one process has all of
    /// them.
    fn allotment(&self, scope: &str) -> Allotment {
        let _ = scope;
        Allotment::Whole
    }

    /// Notes `n` requests of demand on `scope` (arrivals and check-ins), by which a shared
    /// store shares out the slots.
    fn demand(&self, scope: &str, n: u64, now: Timestamp) {
        let _ = (scope, n, now);
    }

    /// Shares a room's operator overrides with the other nodes: `version` orders
    /// them (the newest wins everywhere), `doc` is their JSON. A store of one process has
    /// nobody to tell.
    fn publish_overrides(&self, room: &str, version: u64, doc: &str) {
        let _ = (room, version, doc);
    }

    /// Overrides other nodes published since the last call: (room, version, JSON).
    fn take_overrides(&self) -> Vec<(String, u64, String)> {
        Vec::new()
    }

    /// The next queue number of `scope` (an `api = true` room): 1, 2, 3, … in the order of
    /// the calls on one process. A cluster's store hands each node blocks of numbers, so they
    /// are unique with gaps; `None` when this node has no number to give right now (its blocks
    /// are used up until the next sync): the request path never waits for one.
    fn number(&self, scope: &str, now: Timestamp) -> Option<u64>;

    /// Says that `scope` will ask for queue numbers, so a cluster's store fetches a block at
    /// its next sync rather than after the first arrival.
    fn want_numbers(&self, scope: &str) {
        let _ = scope;
    }

    /// How far apart the clocks that stamp arrivals and [`Register::Since`] may be, ms: 0 for
    /// one process, a few seconds for a cluster's nodes.
    fn clock_skew_ms(&self) -> u64 {
        0
    }

    /// Raises register `reg` of `scope` to at least `value` and returns its value. Registers
    /// only ever grow; in a cluster they are merged by the highest value.
    fn raise(&self, scope: &str, reg: Register, value: u64) -> u64;

    /// Forgets the counters of `scope` this node holds that `stale` picks by kind and slot (a
    /// room's reset: those of before it). Other nodes forget theirs when they see the reset.
    fn clear(&self, scope: &str, stale: &dyn Fn(CounterKind, u64) -> bool);

    /// The marks of `kind` in `scope` still set at `now`, with when each ends.
    fn marks_of(&self, scope: &str, kind: MarkKind, now: Timestamp) -> Vec<(u64, Timestamp)>;

    /// The cluster this store belongs to, for `/status` and metrics; `None` for one process.
    fn cluster(&self) -> Option<ClusterStatus> {
        None
    }
}

/// Which part of a room's free slots this node may give.
#[derive(Clone, Debug, PartialEq)]
pub enum Allotment {
    /// The store is this process's alone: every slot.
    Whole,
    /// The store is down and `on_store_failure = "open"`: no limit.
    Open,
    /// No slot: the store is down with `on_store_failure = "closed"`, or was never reached.
    Closed,
    /// Live nodes' weights (their demand over the last minute), in the same order on every
    /// node, and which one is this node.
    Share { weights: Arc<[f64]>, mine: usize },
}

impl Allotment {
    /// This node's part of `free` slots; `None`: no limit. Shares are apportioned by largest
    /// remainders (Hamilton), so the parts of nodes with the same view add up to `free`
    /// exactly: no slot is lost to rounding, none given twice.
    pub fn of(&self, free: u64) -> Option<u64> {
        match self {
            Allotment::Whole => Some(free),
            Allotment::Open => None,
            Allotment::Closed => Some(0),
            Allotment::Share { weights, mine } => Some(apportion(weights, *mine, free)),
        }
    }

    /// This node's share, 0–1 (1 unlimited).
    pub fn fraction(&self) -> f64 {
        match self {
            Allotment::Whole | Allotment::Open => 1.0,
            Allotment::Closed => 0.0,
            Allotment::Share { weights, mine } => {
                let total: f64 = weights.iter().sum();
                match weights.get(*mine) {
                    Some(w) if total > 0.0 => w / total,
                    _ => 0.0,
                }
            }
        }
    }
}

/// Entry `mine` of `free` apportioned by `weights` with the largest-remainder method (ties go
/// to the lower index). All-zero weights share equally.
pub fn apportion(weights: &[f64], mine: usize, free: u64) -> u64 {
    if mine >= weights.len() {
        return 0;
    }
    let total: f64 = weights.iter().map(|w| w.max(0.0)).sum();
    let n = weights.len() as f64;
    let quota = |w: f64| {
        if total > 0.0 {
            free as f64 * w.max(0.0) / total
        } else {
            free as f64 / n
        }
    };
    let floors: Vec<u64> = weights.iter().map(|w| quota(*w).floor() as u64).collect();
    let given: u64 = floors.iter().sum();
    let rest = free.saturating_sub(given) as usize;
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| {
        let ra = quota(weights[a]) - floors[a] as f64;
        let rb = quota(weights[b]) - floors[b] as f64;
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    floors[mine] + u64::from(order.iter().take(rest).any(|&i| i == mine))
}

/// What `/status` shows of the cluster: never the store's address or credentials.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterStatus {
    pub store: &'static str,
    pub node: String,
    /// Live nodes at the last sync.
    pub nodes: usize,
    pub up: bool,
    pub last_sync: Option<Timestamp>,
}
