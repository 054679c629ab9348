//! Edge rate limiting: estimated windows with a penalty box, token buckets, concurrency caps.
//!
//! Semantics follow Fastly's Edge Rate Limiting (`window`: requests/s estimated over 1 s, 10 s or
//! 60 s; over the limit, the key goes to the penalty box) and Varnish vsthrottle
//! (`token_bucket`: `limit` tokens per `period`, blocked altogether for `penalty` once empty),
//! plus two things neither has: IETF `RateLimit` headers and a dry run (`action = "log"`).
//!
//! A rule applies to a request when its `paths`, `methods` and `bypass_cidrs` say so; its key is
//! a keyed 64-bit hash of the configured parts, so huge or odd header and cookie values are
//! never stored. Rules run in file order, each once per request, in the phase their `scope`
//! names; the first rule that blocks answers the request, and later rules are not counted for
//! it. Memory is bounded per rule by `max_keys`: fixed-size window sketches, and a penalty box
//! and bucket table capped at `max_keys` entries with eviction.

pub mod bucket;
pub mod penalty;
pub mod window;

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, Weak};

use crate::config::{Action, Algorithm, KeyPart, RuleConfig, Scope};
use crate::identity::Identity;
use crate::inflight::{Guard, Inflight};
use crate::store::{CounterStore, Mark, MarkKind, WindowCounter, WindowSpec};
use crate::time::{ceil_secs, Timestamp};

use bucket::BucketTable;
use penalty::PenaltyBox;

/// What a rule did with one request (the `outcome` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Pass,
    /// Over the limit now.
    Limited,
    /// Still in the penalty box from an earlier trip.
    Penalized,
    /// Would have been limited or penalized, but the rule is a dry run.
    DryRun,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [
        Outcome::Pass,
        Outcome::Limited,
        Outcome::Penalized,
        Outcome::DryRun,
    ];

    /// Position in [`Outcome::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Limited => "limited",
            Outcome::Penalized => "penalized",
            Outcome::DryRun => "dry_run",
        }
    }
}

/// One rule's verdict on one request.
#[derive(Debug)]
pub struct Check {
    pub outcome: Outcome,
    /// Seconds until trying again makes sense (denials and dry runs).
    pub retry_after: u64,
    /// Quota left: a token bucket's whole tokens (advertised in `RateLimit`), a concurrency
    /// cap's free slots. A window's pass leaves it at 0: nothing reads it.
    pub remaining: u64,
    /// Seconds until the quota is whole again (0 for a window's pass, as above).
    pub reset: u64,
    /// A concurrency slot, held until the request ends.
    pub guard: Option<Guard>,
}

impl Check {
    fn pass(remaining: u64, reset: u64) -> Check {
        Check {
            outcome: Outcome::Pass,
            retry_after: 0,
            remaining,
            reset,
            guard: None,
        }
    }

    fn denied(outcome: Outcome, retry_after: u64) -> Check {
        Check {
            outcome,
            retry_after: retry_after.max(1),
            remaining: 0,
            reset: retry_after.max(1),
            guard: None,
        }
    }
}

/// What a rule sees of a request.
pub struct RequestView<'a> {
    pub identity: &'a Identity,
    pub client_ip: IpAddr,
    /// Lowercase, without port.
    pub host: &'a str,
    /// Normalised.
    pub path: &'a str,
    pub method: &'a http::Method,
    pub headers: &'a http::HeaderMap,
}

/// The state of a rule that outlives config snapshots.
pub(crate) struct RuleState {
    penalty: PenaltyBox,
    counter: Counter,
}

enum Counter {
    Window(Arc<dyn WindowCounter>),
    Bucket(Box<BucketTable>),
    Concurrency(Inflight),
}

/// What identifies a rule's state across reloads: the state survives while these stay equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct StateKey {
    name: String,
    shape: Shape,
    max_keys: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Shape {
    Window { interval_ms: u64 },
    Bucket { limit: u32, period_ms: u64 },
    Concurrency,
}

/// Rule states by identity, kept weakly: a state lives while some snapshot's rule holds it.
#[derive(Default)]
pub struct RuleStates {
    states: Mutex<HashMap<StateKey, Weak<RuleState>>>,
    /// Keys rule keys are hashed with (aHash, keyed at random per process, so nobody can aim
    /// collisions).
    hasher: ahash::RandomState,
}

impl RuleStates {
    fn get(&self, config: &RuleConfig, store: &dyn CounterStore) -> Arc<RuleState> {
        let shape = match config.algorithm {
            Algorithm::Window { window, .. } => Shape::Window {
                interval_ms: window.as_millis() as u64,
            },
            Algorithm::TokenBucket { limit, period, .. } => Shape::Bucket {
                limit,
                period_ms: period.as_millis() as u64,
            },
            Algorithm::Concurrency { .. } => Shape::Concurrency,
        };
        let key = StateKey {
            name: config.name.clone(),
            shape,
            max_keys: config.max_keys,
        };
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        states.retain(|_, s| s.strong_count() > 0);
        if let Some(state) = states.get(&key).and_then(Weak::upgrade) {
            return state;
        }
        let counter = match key.shape {
            Shape::Window { interval_ms } => Counter::Window(store.window(&WindowSpec {
                name: config.name.clone(),
                interval_ms,
                max_keys: config.max_keys,
                shared: config.shared.then(|| exchange_above(&config.algorithm)),
            })),
            Shape::Bucket { .. } => Counter::Bucket(Box::new(BucketTable::new(config.max_keys))),
            Shape::Concurrency => Counter::Concurrency(Inflight::new()),
        };
        let state = Arc::new(RuleState {
            penalty: PenaltyBox::new(config.max_keys),
            counter,
        });
        states.insert(key, Arc::downgrade(&state));
        state
    }
}

/// One `[[rate_limit]]`, ready to check.
pub struct Rule {
    pub config: RuleConfig,
    state: Arc<RuleState>,
    /// Keyed with the process-wide seed (so keys survive a reload) and already fed the rule's
    /// name (so equal parts under two rules are two keys).
    key_hasher: ahash::AHasher,
    /// `RateLimit-Policy` item, formatted once.
    policy: String,
    /// The item as a header value, one copy per worker thread: a copy every thread cloned
    /// would have its reference count raised and lowered by all of them on every request.
    policy_value: thread_local::ThreadLocal<http::HeaderValue>,
    /// The start of this rule's `RateLimit` item: `"<rule>";r=`.
    item_prefix: String,
    /// `shared = true`: the store that carries the cluster's key seed and penalty boxes.
    shared: Option<Arc<dyn CounterStore>>,
    /// Where this rule's shared penalty-box entries are marked.
    mark_scope: String,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule")
            .field("name", &self.config.name)
            .finish()
    }
}

impl Rule {
    pub fn new(config: RuleConfig, states: &RuleStates, store: &Arc<dyn CounterStore>) -> Rule {
        let state = states.get(&config, store.as_ref());
        let policy = policy_item(&config);
        Rule {
            state,
            key_hasher: {
                let mut h = states.hasher.build_hasher();
                h.write(config.name.as_bytes());
                h
            },
            policy,
            policy_value: thread_local::ThreadLocal::new(),
            item_prefix: format!("\"{}\";r=", config.name),
            shared: config.shared.then(|| store.clone()),
            mark_scope: format!("rl|{}", config.name),
            config,
        }
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Whether this rule looks at the request at all.
    pub fn applies(&self, req: &RequestView) -> bool {
        let c = &self.config;
        c.paths.iter().any(|p| req.path.starts_with(p.as_str()))
            && (c.methods.is_empty() || c.methods.contains(req.method))
            && !c.bypass_cidrs.iter().any(|n| n.contains(&req.client_ip))
    }

    /// The key of a request: a keyed hash of the configured parts, each length-prefixed so
    /// parts cannot run into each other.
    ///
    /// A shared rule hashes with the cluster's seed, the same on every node (and secret: it
    /// comes from the store), so its counts and penalty boxes meet; until the first sync it
    /// hashes like any rule, and counts locally.
    pub fn key(&self, req: &RequestView) -> u64 {
        if let Some(seed) = self.shared.as_ref().and_then(|s| s.key_seed()) {
            let mut h =
                ahash::RandomState::with_seeds(seed[0], seed[1], seed[2], seed[3]).build_hasher();
            h.write(self.config.name.as_bytes());
            return self.hash_parts(h, req);
        }
        self.hash_parts(self.key_hasher.clone(), req)
    }

    fn hash_parts(&self, mut h: ahash::AHasher, req: &RequestView) -> u64 {
        for part in &self.config.key {
            let bytes: &[u8] = match part {
                KeyPart::ClientIp => req.identity.as_str().as_bytes(),
                KeyPart::Host => req.host.as_bytes(),
                KeyPart::Path => req.path.as_bytes(),
                KeyPart::Method => req.method.as_str().as_bytes(),
                KeyPart::Header(name) => req.headers.get(name).map_or(&[][..], |v| v.as_bytes()),
                KeyPart::Cookie(name) => crate::cookie::values(
                    req.headers
                        .get_all(http::header::COOKIE)
                        .iter()
                        .map(|v| v.as_bytes()),
                    name,
                )
                .first()
                .copied()
                .unwrap_or(&[]),
            };
            h.write_usize(bytes.len());
            h.write(bytes);
        }
        h.finish()
    }

    /// Counts the request against `key` and says what happens to it.
    pub fn check(&self, key: u64, now: Timestamp) -> Check {
        let check = self.check_limit(key, now);
        if self.config.action == Action::Log && check.outcome != Outcome::Pass {
            return Check {
                outcome: Outcome::DryRun,
                ..check
            };
        }
        check
    }

    fn check_limit(&self, key: u64, now: Timestamp) -> Check {
        let state = &self.state;
        if let Some(until) = state.penalty.until(key, now) {
            return Check::denied(Outcome::Penalized, ceil_secs(until.since(now)));
        }
        // Another node's penalty box, spread through the store.
        if let Some(until) = self
            .shared
            .as_ref()
            .and_then(|s| s.marked_until(&self.mark_scope, penalty_mark(key), now))
        {
            state.penalty.put(key, until, now);
            return Check::denied(Outcome::Penalized, ceil_secs(until.since(now)));
        }
        match (&state.counter, self.config.algorithm) {
            (
                Counter::Window(counter),
                Algorithm::Window {
                    window,
                    quota,
                    penalty,
                },
            ) => {
                let sample = counter.observe(key, 1, now);
                if sample.weighted() <= quota as f64 {
                    // A window's pass is not advertised (only buckets' are): no quota to work out.
                    return Check::pass(0, 0);
                }
                let wait = if penalty.is_zero() {
                    window::time_to_recover(&sample, window, quota)
                } else {
                    let until = now.saturating_add(penalty);
                    state.penalty.put(key, until, now);
                    if let Some(store) = &self.shared {
                        store.mark(&self.mark_scope, penalty_mark(key), until, now);
                    }
                    penalty
                };
                Check::denied(Outcome::Limited, ceil_secs(wait))
            }
            (
                Counter::Bucket(table),
                Algorithm::TokenBucket {
                    limit,
                    period,
                    penalty,
                },
            ) => {
                let took = table.take(key, limit, period, now);
                if took.allowed {
                    return Check::pass(took.remaining, ceil_secs(took.wait));
                }
                let wait = if penalty.is_zero() {
                    took.wait
                } else {
                    state.penalty.put(key, now.saturating_add(penalty), now);
                    penalty
                };
                Check::denied(Outcome::Limited, ceil_secs(wait))
            }
            (Counter::Concurrency(inflight), Algorithm::Concurrency { limit }) => {
                let (guard, in_flight) = inflight.incr(key, 1);
                let in_flight = in_flight.max(0) as u64;
                if in_flight <= u64::from(limit) {
                    let mut check = Check::pass(u64::from(limit) - in_flight, 0);
                    check.guard = Some(guard);
                    return check;
                }
                // Denied: the slot is returned at once. A dry run keeps it, so the count
                // reflects what really is in flight.
                let mut check = Check::denied(Outcome::Limited, 1);
                if self.config.action == Action::Log {
                    check.guard = Some(guard);
                }
                check
            }
            // `RuleStates` builds the counter from the same algorithm.
            _ => Check::pass(0, 0),
        }
    }

    /// Keys in this rule's penalty box now.
    pub fn penalty_box_len(&self, now: Timestamp) -> usize {
        self.state.penalty.len(now)
    }

    /// Keys this rule's penalty box holds at most (about `max_keys`).
    pub fn penalty_box_capacity(&self) -> usize {
        self.state.penalty.capacity()
    }

    /// The `RateLimit-Policy` item: `"<rule>";q=<quota>;w=<seconds>`.
    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// The same item as a header value (this thread's copy).
    pub fn policy_value(&self) -> http::HeaderValue {
        self.policy_value
            .get_or(|| {
                // Rule names are validated labels, so the item is always a valid header value.
                http::HeaderValue::from_str(&self.policy)
                    .unwrap_or_else(|_| http::HeaderValue::from_static(""))
            })
            .clone()
    }

    /// The `RateLimit` item, `"<rule>";r=<remaining>;t=<seconds>`, in a buffer of exactly its
    /// length: `Bytes` takes such a buffer as it is, so the header value costs one allocation.
    pub fn ratelimit_item(&self, remaining: u64, reset: u64) -> Vec<u8> {
        let (mut r, mut t) = (itoa::Buffer::new(), itoa::Buffer::new());
        let parts = self.item_parts(&mut r, &mut t, remaining, reset);
        let mut item = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
        for part in parts {
            item.extend_from_slice(part.as_bytes());
        }
        item
    }

    /// Appends the `RateLimit` item to `out` (a list of several buckets' items).
    pub fn write_ratelimit_item(&self, out: &mut String, remaining: u64, reset: u64) {
        let (mut r, mut t) = (itoa::Buffer::new(), itoa::Buffer::new());
        // Plain appends, no formatter.
        for part in self.item_parts(&mut r, &mut t, remaining, reset) {
            out.push_str(part);
        }
    }

    /// The item's pieces, the numbers written into `r` and `t`.
    fn item_parts<'a>(
        &'a self,
        r: &'a mut itoa::Buffer,
        t: &'a mut itoa::Buffer,
        remaining: u64,
        reset: u64,
    ) -> [&'a str; 4] {
        [
            &self.item_prefix,
            r.format(remaining),
            ";t=",
            t.format(reset),
        ]
    }

    pub(crate) fn is_token_bucket(&self) -> bool {
        matches!(self.config.algorithm, Algorithm::TokenBucket { .. })
    }
}

fn penalty_mark(key: u64) -> Mark {
    Mark {
        kind: MarkKind::Penalty,
        id: key,
    }
}

/// A shared window's counts of a key are exchanged with the other nodes once this node counted a
/// twentieth of the rule's quota for it in an interval: keys far below the limit stay local,
/// which keeps the store's traffic bounded by the hot keys however many keys there are. The
/// cost: a client spread over N nodes may go unseen by the others for up to N × 5 % of the
/// quota (docs/src/concepts/cluster.md).
pub(crate) fn exchange_above(algorithm: &Algorithm) -> u64 {
    match algorithm {
        Algorithm::Window { quota, .. } => (quota / 20).max(1),
        _ => 1,
    }
}

/// `q` is the quota per `w` seconds (IETF httpapi-ratelimit-headers).
fn policy_item(c: &RuleConfig) -> String {
    match c.algorithm {
        Algorithm::Window { window, quota, .. } => {
            format!("\"{}\";q={quota};w={}", c.name, window.as_secs())
        }
        Algorithm::TokenBucket { limit, period, .. } => {
            format!("\"{}\";q={limit};w={}", c.name, period.as_secs())
        }
        Algorithm::Concurrency { limit } => format!("\"{}\";q={limit}", c.name),
    }
}

/// Every rule of a snapshot.
#[derive(Debug, Default)]
pub struct RuleSet {
    rules: Vec<Rule>,
    /// Whether any rule runs in [`Scope::All`], and in [`Scope::Origin`]: a request skips a
    /// scope with none.
    scopes: [bool; 2],
}

/// A rule's verdict, with the rule's position.
#[derive(Debug)]
pub struct Checked {
    pub rule: usize,
    pub check: Check,
}

/// The verdicts of one request (held inline for up to four rules).
pub type Checks = smallvec::SmallVec<[Checked; 4]>;

impl RuleSet {
    pub fn new(rules: Vec<Rule>) -> RuleSet {
        let scopes = [Scope::All, Scope::Origin].map(|s| rules.iter().any(|r| r.config.scope == s));
        RuleSet { rules, scopes }
    }

    /// Whether any rule runs in `scope`.
    pub(crate) fn has_scope(&self, scope: Scope) -> bool {
        self.scopes[scope as usize]
    }

    pub fn get(&self, index: usize) -> Option<&Rule> {
        self.rules.get(index)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter()
    }

    /// Checks the rules of `scope` that apply, in order, appending each verdict to `out`.
    /// Returns the position in `out` of the verdict that blocks the request, if one does; no
    /// rule after it is checked.
    pub fn check(
        &self,
        scope: Scope,
        req: &RequestView,
        now: Timestamp,
        out: &mut Checks,
    ) -> Option<usize> {
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.config.scope != scope || !rule.applies(req) {
                continue;
            }
            let check = rule.check(rule.key(req), now);
            let blocks = matches!(check.outcome, Outcome::Limited | Outcome::Penalized);
            out.push(Checked { rule: i, check });
            if blocks {
                return Some(out.len() - 1);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::store::local::LocalStore;
    use std::path::Path;
    use std::time::Duration;

    fn rules(toml: &str) -> (RuleSet, RuleStates, Arc<dyn CounterStore>) {
        let config = Config::parse(
            &format!("[upstream]\npeers = [\"127.0.0.1:1\"]\n{toml}"),
            Path::new("/tmp/x.toml"),
            &crate::config::testing::Bare,
        )
        .unwrap();
        let states = RuleStates::default();
        let store: Arc<dyn CounterStore> = Arc::new(LocalStore::new());
        let set = RuleSet::new(
            config
                .rate_limits
                .into_iter()
                .map(|c| Rule::new(c, &states, &store))
                .collect(),
        );
        (set, states, store)
    }

    fn view<'a>(id: &'a Identity, headers: &'a http::HeaderMap, path: &'a str) -> RequestView<'a> {
        RequestView {
            identity: id,
            client_ip: "192.0.2.1".parse().unwrap(),
            host: "example.com",
            path,
            method: &http::Method::GET,
            headers,
        }
    }

    fn id(s: &str) -> Identity {
        Identity::of_ip(s.parse().unwrap(), 64)
    }

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn window_trips_into_the_penalty_box() {
        let (set, _, _) = rules("[[rate_limit]]\nwindow = \"1s\"\nlimit = 5\npenalty = \"30s\"\n");
        let rule = set.get(0).unwrap();
        let h = http::HeaderMap::new();
        let a = id("192.0.2.1");
        let key = rule.key(&view(&a, &h, "/"));
        for i in 0..5 {
            let c = rule.check(key, at(1_000 + i));
            assert_eq!(c.outcome, Outcome::Pass, "request {}", i + 1);
        }
        let c = rule.check(key, at(1_010));
        assert_eq!((c.outcome, c.retry_after), (Outcome::Limited, 30));
        let c = rule.check(key, at(20_000));
        assert_eq!((c.outcome, c.retry_after), (Outcome::Penalized, 12));
        assert_eq!(rule.penalty_box_len(at(20_000)), 1);
        assert_eq!(rule.check(key, at(31_010)).outcome, Outcome::Pass);
        // Another key is not affected.
        let b = id("192.0.2.2");
        assert_eq!(
            rule.check(rule.key(&view(&b, &h, "/")), at(1_011)).outcome,
            Outcome::Pass
        );
    }

    /// "5/10s" allows 5 requests in a 10 s window, not 5 per second: the 6th is refused, and
    /// the policy header says 5 per 10.
    #[test]
    fn a_rate_written_as_text_is_a_quota_per_window() {
        let (set, _, _) =
            rules("[[rate_limit]]\nname = \"r\"\nlimit = \"5/10s\"\npenalty = \"0s\"\n");
        let rule = set.get(0).unwrap();
        assert_eq!(rule.policy(), "\"r\";q=5;w=10");
        for i in 0..5 {
            let c = rule.check(7, at(10_000 + i * 1_000));
            assert_eq!(c.outcome, Outcome::Pass, "request {}", i + 1);
        }
        let c = rule.check(7, at(15_000));
        assert_eq!(c.outcome, Outcome::Limited);
        // curr = 6 over a quota of 5: the rest of this interval (5 s), then a sixth of the next.
        assert_eq!(c.retry_after, 7);
    }

    #[test]
    fn window_without_penalty_says_when_it_recovers() {
        let (set, _, _) = rules("[[rate_limit]]\nwindow = \"10s\"\nlimit = 1\npenalty = \"0s\"\n");
        let rule = set.get(0).unwrap();
        // 10 requests fit in 10 s at 1/s; the 11th, at t = 10.0 s... is counted in interval 1.
        for i in 0..10 {
            assert_eq!(rule.check(7, at(10_000 + i)).outcome, Outcome::Pass);
        }
        let c = rule.check(7, at(10_010));
        assert_eq!(c.outcome, Outcome::Limited);
        // curr = 11 over a quota of 10: the rest of this interval, then a tenth of the next.
        assert_eq!(c.retry_after, 11);
        assert_eq!(rule.penalty_box_len(at(10_010)), 0);
    }

    #[test]
    fn token_bucket_then_penalty() {
        let (set, _, _) = rules(
            "[[rate_limit]]\nalgorithm = \"token_bucket\"\nlimit = 15\nperiod = \"10s\"\npenalty = \"30s\"\n",
        );
        let rule = set.get(0).unwrap();
        for i in 0..15 {
            let c = rule.check(1, at(0));
            assert_eq!((c.outcome, c.remaining), (Outcome::Pass, 14 - i));
        }
        let c = rule.check(1, at(0));
        assert_eq!((c.outcome, c.retry_after), (Outcome::Limited, 30));
        // Blocked for the whole penalty even though tokens refill meanwhile.
        assert_eq!(rule.check(1, at(29_999)).outcome, Outcome::Penalized);
        assert_eq!(rule.check(1, at(30_000)).outcome, Outcome::Pass);
    }

    #[test]
    fn concurrency_returns_slots() {
        let (set, _, _) = rules("[[rate_limit]]\nalgorithm = \"concurrency\"\nlimit = 2\n");
        let rule = set.get(0).unwrap();
        let a = rule.check(9, at(0));
        let b = rule.check(9, at(0));
        assert!(a.guard.is_some() && b.guard.is_some());
        let c = rule.check(9, at(0));
        assert_eq!(c.outcome, Outcome::Limited);
        assert!(c.guard.is_none());
        drop(a);
        assert_eq!(rule.check(9, at(0)).outcome, Outcome::Pass);
    }

    #[test]
    fn dry_run_counts_but_never_blocks() {
        let (set, _, _) = rules("[[rate_limit]]\nwindow = \"1s\"\nlimit = 1\naction = \"log\"\n");
        let h = http::HeaderMap::new();
        let a = id("192.0.2.1");
        let mut out = Checks::new();
        for _ in 0..3 {
            assert_eq!(
                set.check(Scope::All, &view(&a, &h, "/"), at(5_000), &mut out),
                None
            );
        }
        let outcomes: Vec<Outcome> = out.iter().map(|c| c.check.outcome).collect();
        assert_eq!(outcomes, [Outcome::Pass, Outcome::DryRun, Outcome::DryRun]);
    }

    #[test]
    fn filters_scopes_and_first_block_wins() {
        let (set, _, _) = rules(
            "[[rate_limit]]\nname = \"api\"\npaths = [\"/api\"]\nmethods = [\"POST\"]\nwindow = \"1s\"\nlimit = 1\n\
             [[rate_limit]]\nname = \"origin\"\nscope = \"origin\"\nwindow = \"1s\"\nlimit = 1\n\
             [[rate_limit]]\nname = \"office\"\nbypass_cidrs = [\"192.0.2.0/24\"]\nwindow = \"1s\"\nlimit = 1\n\
             [[rate_limit]]\nname = \"all\"\nalgorithm = \"token_bucket\"\nlimit = 1\nperiod = \"1h\"\n",
        );
        let h = http::HeaderMap::new();
        let a = id("192.0.2.1");
        let mut out = Checks::new();
        // GET /: only "all" applies in scope all (api wants POST /api; office is bypassed).
        assert_eq!(
            set.check(Scope::All, &view(&a, &h, "/"), at(0), &mut out),
            None
        );
        assert_eq!(out.iter().map(|c| c.rule).collect::<Vec<_>>(), [3]);
        out.clear();
        let blocked = set.check(Scope::All, &view(&a, &h, "/"), at(1), &mut out);
        assert_eq!(blocked, Some(0));
        assert_eq!(out[0].check.outcome, Outcome::Limited);
        out.clear();
        assert_eq!(
            set.check(Scope::Origin, &view(&a, &h, "/"), at(2), &mut out),
            None
        );
        assert_eq!(out.iter().map(|c| c.rule).collect::<Vec<_>>(), [1]);
        assert!(set.has_scope(Scope::All) && set.has_scope(Scope::Origin));
    }

    #[test]
    fn a_scope_without_rules_is_known_empty() {
        let (all, _, _) = rules("[[rate_limit]]\nname = \"a\"\nwindow = \"1s\"\nlimit = 1\n");
        assert!(all.has_scope(Scope::All) && !all.has_scope(Scope::Origin));
        let (origin, _, _) =
            rules("[[rate_limit]]\nname = \"o\"\nscope = \"origin\"\nwindow = \"1s\"\nlimit = 1\n");
        assert!(!origin.has_scope(Scope::All) && origin.has_scope(Scope::Origin));
        let (none, _, _) = rules("");
        assert!(!none.has_scope(Scope::All) && !none.has_scope(Scope::Origin));
    }

    #[test]
    fn keys_hash_every_part_and_bound_huge_values() {
        let (set, _, _) = rules(
            "[[rate_limit]]\nkey = [\"client_ip\", \"header:x-api-key\", \"cookie:session\", \"path\", \"method\", \"host\"]\n",
        );
        let rule = set.get(0).unwrap();
        let a = id("192.0.2.1");
        let mut h1 = http::HeaderMap::new();
        h1.insert("x-api-key", "k1".parse().unwrap());
        let mut h2 = http::HeaderMap::new();
        h2.insert("x-api-key", "k2".parse().unwrap());
        let mut h3 = h1.clone();
        h3.insert("cookie", "session=s1; other=x".parse().unwrap());
        let k1 = rule.key(&view(&a, &h1, "/"));
        assert_eq!(k1, rule.key(&view(&a, &h1, "/")));
        assert_ne!(k1, rule.key(&view(&a, &h2, "/")));
        assert_ne!(k1, rule.key(&view(&a, &h3, "/")));
        assert_ne!(k1, rule.key(&view(&a, &h1, "/x")));
        // A huge value is hashed whole (two that differ only in their last byte are two keys)
        // into the same 64 bits as any other: nothing of it is kept.
        let huge = |last: char| {
            let mut h = http::HeaderMap::new();
            let value = format!("{}{last}", "z".repeat(64 * 1024));
            h.insert("x-api-key", value.parse().unwrap());
            h
        };
        let (h_a, h_b) = (huge('a'), huge('b'));
        let ka = rule.key(&view(&a, &h_a, "/"));
        assert_eq!(ka, rule.key(&view(&a, &huge('a'), "/")));
        assert_ne!(ka, rule.key(&view(&a, &h_b, "/")));
        assert_eq!(std::mem::size_of_val(&ka), 8);
    }

    #[test]
    fn state_survives_an_equal_rule_and_resets_for_a_changed_one() {
        let (set, states, store) =
            rules("[[rate_limit]]\nwindow = \"1s\"\nlimit = 1\npenalty = \"1m\"\n");
        let rule = set.get(0).unwrap();
        rule.check(1, at(0));
        rule.check(1, at(1));
        assert_eq!(rule.penalty_box_len(at(2)), 1);
        let again = Rule::new(rule.config.clone(), &states, &store);
        assert_eq!(again.penalty_box_len(at(2)), 1);
        assert_eq!(again.check(1, at(3)).outcome, Outcome::Penalized);
        // A new limit keeps the state (same window); a new window starts afresh.
        let mut changed = rule.config.clone();
        changed.algorithm = Algorithm::Window {
            window: Duration::from_secs(10),
            quota: 10,
            penalty: Duration::from_secs(60),
        };
        let other = Rule::new(changed, &states, &store);
        assert_eq!(other.penalty_box_len(at(2)), 0);
    }

    #[test]
    fn policy_headers() {
        let (set, _, _) = rules(
            "[[rate_limit]]\nname = \"w\"\nwindow = \"10s\"\nlimit = 100\n\
             [[rate_limit]]\nname = \"b\"\nalgorithm = \"token_bucket\"\nlimit = 15\nperiod = \"10s\"\n\
             [[rate_limit]]\nname = \"c\"\nalgorithm = \"concurrency\"\nlimit = 4\n",
        );
        let p: Vec<&str> = set.iter().map(Rule::policy).collect();
        assert_eq!(p, ["\"w\";q=1000;w=10", "\"b\";q=15;w=10", "\"c\";q=4"]);
        let item = set.get(1).unwrap().ratelimit_item(3, 7);
        assert_eq!(item, b"\"b\";r=3;t=7");
        assert_eq!(item.capacity(), item.len());
        let mut written = String::new();
        set.get(1)
            .unwrap()
            .write_ratelimit_item(&mut written, 12, 3600);
        assert_eq!(written, "\"b\";r=12;t=3600");
    }
}
