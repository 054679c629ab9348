//! Premature resets: the budget of HTTP/2 clients that cancel what they ask for (the paced
//! variant of the rapid reset, CVE-2023-44487).
//!
//! A client may open a stream, let vestibule start on it (rooms, rate limits, a request to the
//! origin) and reset it a few milliseconds later. The `h2` crate bounds resets of streams that
//! were never accepted; once a stream is accepted, its reset costs the origin a request, and an
//! origin connection that had to be dropped mid-answer. At a few thousand resets a second from
//! one connection, that is a flood the client pays almost nothing for.
//!
//! The model is Envoy's "premature reset" (October 2023): a reset is premature when the client
//! sends it before its answer is complete and within [`ResetBudget::within`] of the request's
//! start. Two budgets follow from it:
//!
//! - **Per connection** ([`ConnectionResets`]): a connection whose premature resets reach
//!   [`ResetBudget::per_connection`] and are more than half of its streams gets GOAWAY
//!   (`ENHANCE_YOUR_CALM`). The share keeps a long-lived browser connection that cancels now and
//!   then (a navigation, an aborted fetch) out of reach: only a connection that mostly cancels
//!   is cut.
//! - **Per client** ([`ClientResets`]): a client identity (its address after trusted proxies)
//!   has a token bucket of [`ResetBudget::per_client`] premature resets, refilled over
//!   [`ResetBudget::window`], across all its connections, so reconnecting does not start a new
//!   budget. When it is empty the client goes in a penalty box for [`ResetBudget::penalty`]:
//!   its requests are refused (429) before they reach the origin, and its HTTP/2 connections
//!   get GOAWAY.
//!
//! Both are pure: the clock is an argument. Memory is bounded: the buckets are an LRU table and
//! the penalty box has a cap, so a flood from many addresses evicts the oldest entries (an
//! evicted bucket starts full again, an evicted penalty ends early) instead of growing.

use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::config::ResetBudget;
use crate::ratelimit::bucket::BucketTable;
use crate::ratelimit::penalty::PenaltyBox;
use crate::time::Timestamp;

/// Clients whose reset budget is tracked at once (about 100 bytes each).
const MAX_CLIENTS: usize = 65_536;
/// Clients that can be in the penalty box at once.
const MAX_PENALIZED: usize = 16_384;

/// Whether a client's reset of a stream counts as premature: before its answer was complete
/// (the caller knows that) and within `budget.within` of the request's start.
pub(crate) fn is_premature(age: Duration, budget: &ResetBudget) -> bool {
    age < budget.within
}

/// One HTTP/2 connection's streams and premature resets.
#[derive(Debug, Default)]
pub(crate) struct ConnectionResets {
    streams: AtomicU32,
    premature: AtomicU32,
}

impl ConnectionResets {
    /// Counts a stream the connection opened.
    pub fn stream(&self) {
        self.streams.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a premature reset. True when the connection is now past its budget: at least
    /// `per_connection` premature resets, and more than half of its streams. A budget of 0
    /// never trips.
    pub(crate) fn premature(&self, per_connection: u32) -> bool {
        let premature = self
            .premature
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        let streams = self.streams.load(Ordering::Relaxed).max(premature);
        per_connection > 0
            && premature >= per_connection
            && u64::from(premature) * 2 > u64::from(streams)
    }

    /// (streams, premature resets) so far.
    pub fn counts(&self) -> (u32, u32) {
        (
            self.streams.load(Ordering::Relaxed),
            self.premature.load(Ordering::Relaxed),
        )
    }
}

/// Every client's premature resets, across its connections, and the penalty box.
pub struct ClientResets {
    buckets: BucketTable,
    penalty: PenaltyBox,
    hasher: ahash::RandomState,
}

impl Default for ClientResets {
    fn default() -> Self {
        ClientResets::new(MAX_CLIENTS, MAX_PENALIZED)
    }
}

impl ClientResets {
    pub fn new(clients: usize, penalized: usize) -> ClientResets {
        ClientResets {
            buckets: BucketTable::new(clients),
            penalty: PenaltyBox::new(penalized),
            hasher: ahash::RandomState::new(),
        }
    }

    /// The key of a client address: IPv6 clients by their `/ipv6_prefix`, as identities are,
    /// so a client cannot step through the addresses of its own prefix for new budgets.
    pub fn key(&self, ip: IpAddr, ipv6_prefix: u8) -> u64 {
        let mut h = self.hasher.build_hasher();
        match ip.to_canonical() {
            IpAddr::V4(v4) => h.write(&v4.octets()),
            IpAddr::V6(v6) => {
                let prefix = u32::from(ipv6_prefix.min(128));
                let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
                h.write(&(u128::from(v6) & mask).to_be_bytes());
                h.write_u8(6);
            }
        }
        h.finish()
    }

    /// Until when `key` is refused, if it is in the penalty box at `now`.
    pub fn penalized(&self, key: u64, now: Timestamp) -> Option<Timestamp> {
        self.penalty.until(key, now)
    }

    /// Counts a premature reset of `key`. True when that emptied its budget: it is now in the
    /// penalty box until `now + penalty`. A budget of 0 never penalizes.
    pub(crate) fn premature(&self, key: u64, budget: &ResetBudget, now: Timestamp) -> bool {
        if budget.per_client == 0 {
            return false;
        }
        let take = self
            .buckets
            .take(key, budget.per_client, budget.window, now);
        if take.allowed {
            return false;
        }
        self.penalty
            .put(key, now.saturating_add(budget.penalty), now);
        true
    }

    /// Clients in the penalty box at `now`.
    pub fn penalized_count(&self, now: Timestamp) -> usize {
        self.penalty.len(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> ResetBudget {
        ResetBudget {
            per_connection: 10,
            per_client: 25,
            window: Duration::from_secs(60),
            penalty: Duration::from_secs(30),
            within: Duration::from_secs(1),
        }
    }

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn a_connection_that_mostly_cancels_trips_at_its_budget() {
        let c = ConnectionResets::default();
        let mut tripped = None;
        for i in 1..=20 {
            c.stream();
            if c.premature(10) && tripped.is_none() {
                tripped = Some(i);
            }
        }
        assert_eq!(tripped, Some(10));
    }

    #[test]
    fn a_connection_that_cancels_now_and_then_never_trips() {
        let c = ConnectionResets::default();
        // 1,000 requests, every third one cancelled: a third of the streams, never half.
        for i in 0..1_000 {
            c.stream();
            if i % 3 == 0 {
                assert!(!c.premature(10), "tripped at request {i}");
            }
        }
        assert_eq!(c.counts(), (1_000, 334));
    }

    #[test]
    fn a_zero_budget_is_off() {
        let c = ConnectionResets::default();
        for _ in 0..100 {
            c.stream();
            assert!(!c.premature(0));
        }
        let clients = ClientResets::default();
        let off = ResetBudget {
            per_client: 0,
            ..budget()
        };
        let key = clients.key("192.0.2.1".parse().unwrap(), 64);
        for _ in 0..1_000 {
            assert!(!clients.premature(key, &off, at(0)));
        }
        assert_eq!(clients.penalized(key, at(0)), None);
    }

    #[test]
    fn a_client_is_penalized_across_connections_and_released_after_the_penalty() {
        let clients = ClientResets::default();
        let b = budget();
        let key = clients.key("192.0.2.1".parse().unwrap(), 64);
        let other = clients.key("192.0.2.2".parse().unwrap(), 64);
        // Three connections' worth of resets in a second: the budget is the client's, however
        // many connections it opens.
        let mut penalized_at = None;
        for i in 0..30u64 {
            if clients.premature(key, &b, at(i)) && penalized_at.is_none() {
                penalized_at = Some(i);
            }
        }
        assert_eq!(penalized_at, Some(25), "the 26th premature reset");
        assert_eq!(clients.penalized(key, at(1_000)), Some(at(29 + 30_000)));
        assert_eq!(clients.penalized(other, at(1_000)), None);
        assert_eq!(clients.penalized(key, at(29 + 30_000)), None);
        assert_eq!(clients.penalized_count(at(29 + 30_000)), 0);
    }

    #[test]
    fn the_client_budget_refills_over_its_window() {
        let clients = ClientResets::default();
        let b = budget();
        let key = clients.key("192.0.2.1".parse().unwrap(), 64);
        // 25 resets a minute, spread out, never run the bucket dry.
        for i in 0..100u64 {
            assert!(!clients.premature(key, &b, at(i * 2_400)), "reset {i}");
        }
    }

    #[test]
    fn ipv6_clients_share_their_prefix() {
        let clients = ClientResets::default();
        let a = clients.key("2001:db8:1:2::1".parse().unwrap(), 64);
        let b = clients.key("2001:db8:1:2:ffff::9".parse().unwrap(), 64);
        let c = clients.key("2001:db8:1:3::1".parse().unwrap(), 64);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mapped = clients.key("::ffff:192.0.2.1".parse().unwrap(), 64);
        assert_eq!(mapped, clients.key("192.0.2.1".parse().unwrap(), 64));
        // Whole addresses when the prefix is 128, and no overflow at 0.
        assert_ne!(
            clients.key("2001:db8::1".parse().unwrap(), 128),
            clients.key("2001:db8::2".parse().unwrap(), 128)
        );
        assert_eq!(
            clients.key("2001:db8::1".parse().unwrap(), 0),
            clients.key("2001:db9::2".parse().unwrap(), 0)
        );
    }

    #[test]
    fn premature_means_young() {
        let b = budget();
        assert!(is_premature(Duration::from_millis(5), &b));
        assert!(!is_premature(Duration::from_secs(1), &b));
    }
}
