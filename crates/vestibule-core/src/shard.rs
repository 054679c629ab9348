//! One shard of a sharded map that every request reads and few requests write: a lock, with a
//! count of what it holds that is readable without the lock, on cache lines of its own.
//!
//! The penalty box and the store's marks are looked up on every request they could concern, and
//! nearly always hold nothing for it. A lock taken for each lookup is a write to a line every
//! worker thread shares, pulled from core to core. Here an empty shard is known from one load,
//! and the count is written only when it changes, so lookups of every thread leave the shard's
//! lines shared rather than bounced between cores. Shards are `#[repr(align(128))]`: two
//! neighbours never share a line, nor the pair of lines some CPUs fetch together.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// What a shard's contents count as entries.
pub trait Held {
    fn held(&self) -> usize;
}

#[repr(align(128))]
#[derive(Default)]
pub(crate) struct CountedShard<T> {
    /// Equal to `inner.held()`; written only under the lock, and only when it changed.
    held: AtomicUsize,
    inner: Mutex<T>,
}

impl<T: Held> CountedShard<T> {
    /// How many entries the shard holds, read without its lock (zero: nothing to find).
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    fn lock(&self) -> MutexGuard<'_, T> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the contents under the lock; `f` changes nothing.
    pub fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.lock())
    }

    /// Runs `f` on the contents under the lock, then records how many entries they hold.
    pub fn change<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut inner = self.lock();
        let out = f(&mut inner);
        let held = inner.held();
        if self.held.load(Ordering::Relaxed) != held {
            self.held.store(held, Ordering::Release);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Held for Vec<u32> {
        fn held(&self) -> usize {
            self.len()
        }
    }

    #[test]
    fn the_count_follows_every_change() {
        let shard = CountedShard::<Vec<u32>>::default();
        assert_eq!(shard.held(), 0);
        shard.change(|v| v.extend([1, 2, 3]));
        assert_eq!(shard.held(), 3);
        assert_eq!(shard.change(|v| v.pop()), Some(3));
        assert_eq!(shard.held(), 2);
        assert_eq!(shard.read(|v| v.iter().sum::<u32>()), 3);
        shard.change(Vec::clear);
        assert_eq!(shard.held(), 0);
        assert_eq!(std::mem::align_of::<CountedShard<Vec<u32>>>(), 128);
    }

    #[test]
    fn a_panic_under_the_lock_leaves_the_shard_usable() {
        let shard = CountedShard::<Vec<u32>>::default();
        shard.change(|v| v.push(1));
        let hit = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            shard.change(|v| {
                v.push(2);
                panic!("a bug under the lock");
            })
        }));
        assert!(hit.is_err());
        // The count was not recorded by the change that panicked; the next change records it.
        assert_eq!(shard.held(), 1);
        shard.change(|v| v.push(3));
        assert_eq!(shard.held(), 3);
    }
}
