//! What the memory allocator is told, so that memory taken during a surge goes back to the OS.
//!
//! mimalloc (the default build) frees pages lazily: a page emptied on a worker thread is
//! purged (returned to the OS) only after `purge_delay`, and only when some thread next does
//! allocator housekeeping. After a flood the workers go quiet, so without a nudge the memory
//! would stay resident. [`collect`] runs from the housekeeping task every few seconds and runs
//! the delayed purges, which are process-wide.

/// Returns freed memory to the OS where the allocator has it ready to go.
pub fn collect() {
    #[cfg(feature = "mimalloc")]
    // SAFETY: `mi_collect` only walks the calling thread's heap and the process's arenas under
    // mimalloc's own locks; it has no preconditions.
    unsafe {
        libmimalloc_sys::mi_collect(false)
    };
}

/// The global allocator of the default build: mimalloc, asked the way it answers fastest.
///
/// The `mimalloc` crate's allocator passes every request to `mi_malloc_aligned`, whatever the
/// alignment. For the usual alignment (8 or less) that is a detour: when the page's free list is
/// empty, mimalloc's aligned path goes generic, and for a size whose block is not a power of two
/// (24, 40, 160 bytes…) it over-allocates `size + alignment - 1` and marks the page as holding
/// aligned blocks, which every later `free` on that page pays for (mimalloc issue #889). About
/// ten allocations per proxied request took that path.
///
/// Every mimalloc block is at least word-aligned (blocks are whole words, laid out from an
/// aligned page start), so alignments up to a word go to `mi_malloc`, `mi_zalloc` and
/// `mi_realloc`; larger ones (Tokio's 128-byte task cells) keep the aligned calls. This is the
/// rule std's `System` allocator follows with `malloc`.
#[cfg(feature = "mimalloc")]
pub struct MiMalloc;

#[cfg(feature = "mimalloc")]
mod mi {
    use std::alloc::{GlobalAlloc, Layout};
    use std::ffi::c_void;

    use libmimalloc_sys as sys;

    /// The alignment every mimalloc block has.
    const WORD: usize = std::mem::size_of::<usize>();

    // SAFETY: each method forwards to mimalloc with a size and alignment it accepts: a plain
    // call only when the alignment is at most a word, which every mimalloc block meets; the
    // aligned call (which takes any power of two, as a `Layout`'s alignment is) otherwise.
    // Pointers given back were allocated by this allocator, so by mimalloc.
    unsafe impl GlobalAlloc for super::MiMalloc {
        #[inline]
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if layout.align() <= WORD {
                unsafe { sys::mi_malloc(layout.size()) as *mut u8 }
            } else {
                unsafe { sys::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8 }
            }
        }

        #[inline]
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            if layout.align() <= WORD {
                unsafe { sys::mi_zalloc(layout.size()) as *mut u8 }
            } else {
                unsafe { sys::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8 }
            }
        }

        #[inline]
        unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
            unsafe { sys::mi_free(ptr as *mut c_void) }
        }

        #[inline]
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let ptr = ptr as *mut c_void;
            if layout.align() <= WORD {
                unsafe { sys::mi_realloc(ptr, new_size) as *mut u8 }
            } else {
                unsafe { sys::mi_realloc_aligned(ptr, new_size, layout.align()) as *mut u8 }
            }
        }
    }
}

#[cfg(all(test, feature = "mimalloc"))]
mod tests {
    use std::alloc::{GlobalAlloc, Layout};

    use super::MiMalloc;

    /// Every size from 1 byte to 2 KiB and a few large ones, at every alignment from 1 to 4 KiB:
    /// the block is aligned, zeroed when asked, and keeps its bytes through a realloc.
    #[test]
    fn blocks_are_aligned_zeroed_and_kept() {
        let sizes = (1..=2048).chain([4095, 4096, 10_000, 65_536, 1 << 20, (1 << 22) + 24]);
        let mut held = Vec::new();
        for size in sizes {
            for align in (0..=12).map(|shift| 1usize << shift) {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: the layout has a non-zero size; every block is freed with its layout.
                unsafe {
                    let p = MiMalloc.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "alloc({size}, {align})");
                    p.write_bytes(0xA5, size);
                    let z = MiMalloc.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0, "alloc_zeroed({size}, {align})");
                    assert!(std::slice::from_raw_parts(z, size).iter().all(|b| *b == 0));
                    let grown = size * 3 + 5;
                    let r = MiMalloc.realloc(p, layout, grown);
                    assert_eq!(r as usize % align, 0, "realloc({size}, {align})");
                    assert!(std::slice::from_raw_parts(r, size)
                        .iter()
                        .all(|b| *b == 0xA5));
                    MiMalloc.dealloc(z, layout);
                    // Some blocks stay allocated a while, so pages fill and free lists run dry
                    // (the path where the aligned call used to go generic).
                    if size % 7 == 0 {
                        held.push((r, Layout::from_size_align(grown, align).unwrap()));
                    } else {
                        MiMalloc.dealloc(r, Layout::from_size_align(grown, align).unwrap());
                    }
                }
            }
        }
        for (p, layout) in held {
            // SAFETY: allocated above with this layout, freed once.
            unsafe { MiMalloc.dealloc(p, layout) };
        }
    }
}
