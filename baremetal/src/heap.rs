//! The global allocator, for `uhca-collective` (its `alloc` core: per-communicator
//! bookkeeping) and the fibers' stacks. The driver itself never allocates; it takes its
//! memory through the platform ([`crate::platform`]). A pool of RAM in 256-byte granules.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{NonNull, null_mut};

use crate::platform::Pool;

/// Bytes of the heap (the most a pool of 256-byte granules tracks).
pub const HEAP_BYTES: usize = 16 << 20;

/// The heap's pool.
pub static HEAP_POOL: Pool = Pool::new(256);

struct Heap;

// SAFETY: `Pool::alloc` hands out unaliased, `align`-aligned ranges of RAM owned by the
// pool until `free`, which takes back exactly what `alloc` gave (same pointer and size).
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HEAP_POOL
            .alloc(layout.size(), layout.align())
            .map_or(null_mut(), NonNull::as_ptr)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            HEAP_POOL.free(p, layout.size());
        }
    }
}

#[global_allocator]
static HEAP: Heap = Heap;
