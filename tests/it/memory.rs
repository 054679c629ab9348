//! Memory per tracked key, measured with a counting allocator. It is the global allocator of the
//! whole test binary, and counts per thread: what the other areas' tests allocate meanwhile, on
//! their own threads, is not counted here.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use vestibule::ratelimit::bucket::BucketTable;
use vestibule::ratelimit::penalty::PenaltyBox;
use vestibule::time::Timestamp;

/// Counts the bytes each thread has allocated and not freed, so that what the test harness (or
/// another test) allocates on its own threads meanwhile is not counted.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // `try_with`: a thread being torn down may still free memory.
    let _ = LIVE.try_with(|live| live.set(live.get() + delta));
}

/// Bytes this thread holds.
fn live() -> isize {
    LIVE.with(Cell::get)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn key(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Requested bytes per key; malloc adds its own header (8-16 bytes) per allocation on top.
#[test]
fn memory_per_key_is_bounded() {
    const KEYS: u64 = 200_000;
    let before = live();
    let table = BucketTable::new(KEYS as usize);
    for i in 0..KEYS {
        table.take(
            key(i),
            10,
            Duration::from_secs(60),
            Timestamp::from_millis(0),
        );
    }
    // Shards fill unevenly, so a few keys were evicted: divide by what the table holds.
    assert!(table.len() as u64 >= KEYS * 99 / 100, "{}", table.len());
    // As many keys again: the last shards fill, and evicting keys leaves the hash tables room
    // to grow once. This is the steady state the bytes per key are taken from.
    for i in KEYS..2 * KEYS {
        table.take(
            key(i),
            10,
            Duration::from_secs(60),
            Timestamp::from_millis(0),
        );
    }
    let bucket_bytes = (live() - before) as f64 / table.len() as f64;
    // lru allocates one node per entry: count malloc's header too.
    let bucket_with_malloc = bucket_bytes + 16.0;
    // From here the full table evicts instead of growing, however many keys come.
    let full = live();
    for i in 2 * KEYS..4 * KEYS {
        table.take(
            key(i),
            10,
            Duration::from_secs(60),
            Timestamp::from_millis(0),
        );
    }
    let grew = live() - full;
    assert!(
        grew.abs() < (full - before) / 50,
        "the full table grew by {grew} bytes for {} more keys",
        2 * KEYS
    );

    let before = live();
    let pbox = PenaltyBox::new(KEYS as usize);
    for i in 0..KEYS {
        pbox.put(
            key(i),
            Timestamp::from_millis(1_000_000),
            Timestamp::from_millis(0),
        );
    }
    for i in KEYS..2 * KEYS {
        pbox.put(
            key(i),
            Timestamp::from_millis(1_000_000),
            Timestamp::from_millis(0),
        );
    }
    let held = pbox.len(Timestamp::from_millis(0)) as f64;
    let penalty_bytes = (live() - before) as f64 / held;
    let full = live();
    for i in 2 * KEYS..4 * KEYS {
        pbox.put(
            key(i),
            Timestamp::from_millis(1_000_000),
            Timestamp::from_millis(0),
        );
    }
    // B-tree nodes fill and split differently as keys churn: a few percent either way, never
    // a growth per key.
    let grew = live() - full;
    assert!(
        grew.abs() < (full - before) / 20,
        "the full penalty box grew by {grew} bytes for {} more keys",
        2 * KEYS
    );
    eprintln!(
        "token bucket table: {bucket_bytes:.0} B/key requested (~{bucket_with_malloc:.0} B with malloc headers); \
         penalty box: {penalty_bytes:.0} B/key"
    );
    assert!(
        bucket_with_malloc <= 150.0,
        "{bucket_with_malloc} bytes per key"
    );
    assert!(penalty_bytes <= 150.0, "{penalty_bytes} bytes per key");
    drop((table, pbox));
}

/// A window counter occupies what `store::local` documents, allocated once.
#[test]
fn window_counter_memory_is_as_documented() {
    use vestibule::store::local::{window_bytes, LocalWindow};
    let before = live();
    let w = LocalWindow::new(10_000, 65_536);
    let bytes = (live() - before) as usize;
    eprintln!(
        "window counter for 65536 keys: {bytes} bytes (documented {})",
        window_bytes(65_536)
    );
    assert!(
        bytes >= window_bytes(65_536) && bytes < window_bytes(65_536) + 4096,
        "{bytes}"
    );
    drop(w);
}
