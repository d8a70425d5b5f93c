//! What uhca's test suites share (a dev-dependency only, never linked into the crates).
//!
//! [`CountingAlloc`]: a global allocator that counts the allocations a thread makes inside
//! [`counted`], so a test can show that posting and polling allocate nothing. Counting is
//! per thread: the test harness's other threads (its output, its bookkeeping) allocate
//! when they please without spoiling the count.
//!
//! It also keeps the bytes the whole process holds from it ([`live_bytes`]), so a soak
//! test can show that host memory stays flat over a run.
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: uhca_test_support::CountingAlloc = uhca_test_support::CountingAlloc;
//!
//! let (_, allocations) = uhca_test_support::counted(|| qp.post_send(&wrs));
//! assert_eq!(allocations, 0);
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes allocated and not yet freed, all threads together.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Bytes the process holds from [`CountingAlloc`] now (allocated and not freed, every
/// thread). Only meaningful in a binary whose global allocator is [`CountingAlloc`].
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

thread_local! {
    /// Whether this thread is inside [`counted`].
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// Allocations this thread made while counting.
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

/// Notes one allocation if this thread is counting. Touches only `const` thread-locals
/// without destructors, which never allocate; during thread teardown nothing is counted.
fn note() {
    let _ = COUNTING.try_with(|c| {
        if c.get() {
            let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        }
    });
}

/// The system allocator, counting allocations and reallocations of threads inside
/// [`counted`].
#[derive(Debug, Default)]
pub struct CountingAlloc;

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// GlobalAlloc contract; counting touches only thread-local cells and never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract is forwarded unchanged.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note();
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note();
        // SAFETY: as above.
        let q = unsafe { System.realloc(p, l, n) };
        if !q.is_null() {
            LIVE.fetch_add(n, Ordering::Relaxed);
            LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        }
        q
    }
}

/// Runs `f` counting the allocations this thread makes; returns `f`'s result and the count.
/// Only meaningful in a test binary whose global allocator is [`CountingAlloc`].
pub fn counted<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let before = ALLOCS.with(|a| a.get());
    COUNTING.with(|c| c.set(true));
    let r = f();
    COUNTING.with(|c| c.set(false));
    (r, ALLOCS.with(|a| a.get()) - before)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static GLOBAL: CountingAlloc = CountingAlloc;

    #[test]
    fn counts_this_threads_allocations_only() {
        let (v, n) = counted(|| vec![1u8; 100]);
        assert_eq!((v.len(), n), (100, 1));
        let (_, n) = counted(|| {
            // Another thread's allocations are not this thread's.
            std::thread::scope(|s| {
                s.spawn(|| std::hint::black_box(vec![0u8; 10]));
            });
        });
        // Spawning itself allocates on this thread; the child's vector is not counted.
        let (_, spawn_only) = counted(|| {
            std::thread::scope(|s| {
                s.spawn(|| ());
            });
        });
        assert_eq!(n, spawn_only);
        let (_, none) = counted(|| 1 + 1);
        assert_eq!(none, 0);
    }

    #[test]
    fn live_bytes_follow_what_is_held() {
        // Other test threads allocate too: hold a large block so its size dominates.
        let before = live_bytes();
        let big = std::hint::black_box(vec![0u8; 64 << 20]);
        assert!(live_bytes() >= before + (64 << 20) - (8 << 20));
        drop(big);
        assert!(live_bytes() < before + (8 << 20));
    }
}
