//! Token buckets (vsthrottle semantics), in a bounded table.
//!
//! A bucket holds up to `limit` tokens and refills continuously at `limit / period`; a request
//! takes one token, and an empty bucket denies. A key's bucket starts full, so a key evicted from
//! the table forgets its debt: the table is an LRU of `max_keys` entries, and the least recently
//! used key (the one most likely to be full again anyway) goes first. Memory per key is
//! measured by `tests/it/memory.rs` once the table is full and evicting (its hash tables grow once
//! as evictions begin, then stay): 85 bytes requested per key on 64-bit Linux, about 101 with
//! malloc's per-allocation header (the goal is at most 150).

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::Duration;

use lru::LruCache;

use crate::time::Timestamp;

const SHARDS: usize = 16;

/// One key's bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    pub tokens: f64,
    pub updated_ms: u64,
}

/// The result of taking a token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Take {
    pub allowed: bool,
    /// Whole tokens left after this request.
    pub remaining: u64,
    /// Until the bucket is full again (allowed) or holds a token (denied).
    pub wait: Duration,
}

/// The refill arithmetic, pure: refills `bucket` up to `now` and takes a token if there is one.
pub fn take(bucket: &mut Bucket, limit: u32, period: Duration, now: Timestamp) -> Take {
    let limit = f64::from(limit.max(1));
    // Whole milliseconds as a u64 first: `u128 as f64` is a software conversion.
    let period_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1);
    let per_ms = limit / period_ms as f64;
    let elapsed = now.millis().saturating_sub(bucket.updated_ms) as f64;
    bucket.tokens = (bucket.tokens + elapsed * per_ms).min(limit);
    bucket.updated_ms = bucket.updated_ms.max(now.millis());
    if bucket.tokens >= 1.0 {
        bucket.tokens -= 1.0;
        let to_full = (limit - bucket.tokens) / per_ms;
        Take {
            allowed: true,
            remaining: bucket.tokens.floor() as u64,
            wait: Duration::from_millis(to_full.ceil() as u64),
        }
    } else {
        let to_one = (1.0 - bucket.tokens) / per_ms;
        Take {
            allowed: false,
            remaining: 0,
            wait: Duration::from_millis(to_one.ceil() as u64),
        }
    }
}

pub struct BucketTable {
    shards: [Shard; SHARDS],
}

/// A shard on cache lines of its own: two threads taking from buckets in neighbouring shards
/// do not bounce one line between their cores.
#[repr(align(128))]
struct Shard(Mutex<LruCache<u64, Bucket>>);

impl BucketTable {
    /// A table of at most about `max_keys` buckets.
    pub fn new(max_keys: usize) -> BucketTable {
        let per_shard =
            NonZeroUsize::new(max_keys.div_ceil(SHARDS).max(1)).unwrap_or(NonZeroUsize::MIN);
        BucketTable {
            shards: std::array::from_fn(|_| Shard(Mutex::new(LruCache::new(per_shard)))),
        }
    }

    /// Takes a token from `key`'s bucket (a new key starts full).
    pub fn take(&self, key: u64, limit: u32, period: Duration, now: Timestamp) -> Take {
        let mut shard = self.shards[(key >> 60) as usize % SHARDS]
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let bucket = shard.get_or_insert_mut(key, || Bucket {
            tokens: f64::from(limit),
            updated_ms: now.millis(),
        });
        take(bucket, limit, period, now)
    }

    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.0.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.0.lock().unwrap_or_else(|p| p.into_inner()).cap().get())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn fifteen_per_ten_seconds() {
        let period = Duration::from_secs(10);
        let mut b = Bucket {
            tokens: 15.0,
            updated_ms: 0,
        };
        for i in 0..15 {
            let t = take(&mut b, 15, period, at(0));
            assert!(t.allowed, "request {}", i + 1);
            assert_eq!(t.remaining, 14 - i);
        }
        let t = take(&mut b, 15, period, at(0));
        assert!(!t.allowed);
        // One token every 10/15 s = 667 ms.
        assert_eq!(t.wait, Duration::from_millis(667));
        assert!(!take(&mut b, 15, period, at(666)).allowed);
        assert!(take(&mut b, 15, period, at(667)).allowed);
        // Refill is continuous and capped at the limit.
        let t = take(&mut b, 15, period, at(1_000_000));
        assert!(t.allowed);
        assert_eq!(t.remaining, 14);
        assert_eq!(t.wait, Duration::from_millis(667));
    }

    #[test]
    fn the_clock_going_back_does_not_mint_tokens() {
        let mut b = Bucket {
            tokens: 0.0,
            updated_ms: 10_000,
        };
        assert!(!take(&mut b, 1, Duration::from_secs(10), at(5_000)).allowed);
        assert_eq!(b.updated_ms, 10_000);
    }

    #[test]
    fn table_is_bounded_and_evicts_least_recently_used() {
        let t = BucketTable::new(SHARDS * 2);
        let period = Duration::from_secs(60);
        // Two keys in shard 0 fill it.
        assert!(t.take(1, 1, period, at(0)).allowed);
        assert!(t.take(2, 1, period, at(0)).allowed);
        assert!(!t.take(1, 1, period, at(1)).allowed);
        // A third key evicts key 2 (least recently used), not key 1.
        assert!(t.take(3, 1, period, at(2)).allowed);
        assert!(!t.take(1, 1, period, at(3)).allowed);
        assert!(
            t.take(2, 1, period, at(4)).allowed,
            "key 2 was forgotten, so it is full again"
        );
        // 100,000 keys later it holds exactly its capacity: every shard is full, none grew.
        for k in 0..100_000u64 {
            t.take(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), 10, period, at(5));
        }
        assert_eq!((t.len(), t.capacity()), (SHARDS * 2, SHARDS * 2));
    }
}
