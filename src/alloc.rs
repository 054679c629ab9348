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
