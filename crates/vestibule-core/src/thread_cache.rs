//! A bounded LRU map per worker thread, owned by one object (a page set, a catalog set).
//!
//! A cache every thread hits on every answer, behind one lock, makes each hit a write to lines
//! every thread shares: the lock taken and released, the LRU list reordered, the value's
//! reference count raised and lowered. Each hit pulls those lines over from the core that wrote
//! them last, a cost that grows with the threads (`cargo bench --bench core -- page_answers`).
//! Here each thread has a map of its own: a hit writes only to that thread's memory, and the
//! values it hands out are that thread's copies. The price is memory and misses: up to
//! `capacity` entries per thread, and a value is built once per thread that needs it.
//!
//! The maps live as long as their owner: a reload's new page set starts with empty maps, and
//! dropping the old one frees every thread's.

use std::cell::RefCell;
use std::hash::Hash;
use std::num::NonZeroUsize;

use lru::LruCache;
use thread_local::ThreadLocal;

pub struct PerThreadLru<K: Send, V: Send> {
    capacity: NonZeroUsize,
    maps: ThreadLocal<RefCell<LruCache<K, V>>>,
}

impl<K: Hash + Eq + Send, V: Send> PerThreadLru<K, V> {
    /// Room for `capacity` entries (at least one) on each thread.
    pub fn new(capacity: usize) -> Self {
        PerThreadLru {
            capacity: NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
            maps: ThreadLocal::new(),
        }
    }

    /// Runs `f` on the calling thread's map; `None` (and `f` not run) if this thread is already
    /// inside `with` on the same cache, so a caller treats it as a miss.
    pub fn with<R>(&self, f: impl FnOnce(&mut LruCache<K, V>) -> R) -> Option<R> {
        let map = self
            .maps
            .get_or(|| RefCell::new(LruCache::new(self.capacity)));
        let mut map = map.try_borrow_mut().ok()?;
        Some(f(&mut map))
    }
}

impl<K: Send, V: Send> std::fmt::Debug for PerThreadLru<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerThreadLru")
            .field("capacity", &self.capacity)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_has_its_own_bounded_map() {
        let cache: PerThreadLru<u32, String> = PerThreadLru::new(2);
        cache.with(|m| m.put(1, "main".to_owned()));
        std::thread::scope(|s| {
            s.spawn(|| {
                // Another thread does not see the first thread's entry, and fills its own.
                assert_eq!(cache.with(|m| m.get(&1).cloned()), Some(None));
                cache.with(|m| {
                    m.put(1, "other".to_owned());
                    m.put(2, "other".to_owned());
                    m.put(3, "other".to_owned());
                });
                assert_eq!(cache.with(|m| m.len()), Some(2));
                assert_eq!(cache.with(|m| m.get(&1).cloned()), Some(None));
            });
        });
        assert_eq!(
            cache.with(|m| m.get(&1).cloned()),
            Some(Some("main".to_owned()))
        );
        assert_eq!(cache.with(|m| m.len()), Some(1));
    }

    #[test]
    fn a_nested_call_is_a_miss_not_a_panic() {
        let cache: PerThreadLru<u32, u32> = PerThreadLru::new(4);
        let inner = cache.with(|m| {
            m.put(1, 1);
            cache.with(|m| m.get(&1).copied())
        });
        assert_eq!(inner, Some(None));
    }
}
