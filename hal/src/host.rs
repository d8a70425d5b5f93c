//! Host memory from the platform: memory the CPU uses and the device never reaches.
//!
//! The driver keeps, beside each queue the device reads, what it needs to know about the
//! work it posted there (the work-request ids, each WQE's size and opcode). That memory must
//! not be DMA memory (a device that may be hostile must not be able to rewrite it), and the
//! core is `no_std` without an allocator, so it comes from the platform, like the DMA memory
//! does: [`HostMem`]. On it, three owners that the rest of the project uses in safe code:
//!
//! * [`HostArray`]: a fixed-length array (like `Box<[T]>`).
//! * [`HostArc`]: one value shared between owners, freed with the last (like `Arc<T>`); a QP
//!   shares its work-request tables with the CQs it completes to this way.
//! * [`SpinLock`]: mutual exclusion for short critical sections, with no allocation and no
//!   operating system (an SRQ's free list, which its poster and its pollers both change).
//!
//! ```
//! # use uhca_hal::testing::FakePlatform;
//! use uhca_hal::host::{HostArc, HostArray};
//! let p = FakePlatform::new();
//! let mut a = HostArray::new(&p, 4, |i| i as u32 * 10).unwrap();
//! a[1] += 1;
//! assert_eq!(&a[..], &[0, 11, 20, 30]);
//! let shared = HostArc::new(&p, 7u64).unwrap();
//! let other = shared.clone();
//! assert_eq!((*shared, *other), (7, 7));
//! ```

use crate::platform::DmaError;
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};
// The lock's flag is a loom atomic in loom builds, so the model in `loom_models` checks the
// lock's orderings.
#[cfg(not(loom))]
use core::sync::atomic::AtomicBool;
#[cfg(loom)]
use loom::sync::atomic::AtomicBool;

/// Host memory for the driver's bookkeeping: never mapped for the device.
///
/// # Implementation safety
///
/// * `alloc_host` returns memory valid for reads and writes of `len` bytes, aligned to
///   `align`, zero-filled, not aliased by any other live allocation, until it is passed to
///   `free_host` with the same `len` and `align`.
/// * The memory is never made reachable by the device.
/// * Methods take `&self` and must be sound when called from several threads.
///
/// With the `alloc` feature both methods have default bodies that use the global allocator
/// ([`GlobalHostMem`]): a platform with `std` implements the trait with an empty block.
pub unsafe trait HostMem {
    /// Allocates `len` (> 0) zeroed bytes aligned to `align` (a power of two).
    #[cfg(not(feature = "alloc"))]
    fn alloc_host(&self, len: usize, align: usize) -> Result<NonNull<u8>, DmaError>;

    /// Allocates `len` (> 0) zeroed bytes aligned to `align` (a power of two); by default
    /// from the global allocator.
    #[cfg(feature = "alloc")]
    fn alloc_host(&self, len: usize, align: usize) -> Result<NonNull<u8>, DmaError> {
        GlobalHostMem.alloc_host(len, align)
    }

    /// Frees an allocation.
    ///
    /// # Safety
    ///
    /// `ptr`, `len` and `align` must be those of a live allocation of this platform, and no
    /// pointer derived from it may be used afterwards.
    #[cfg(not(feature = "alloc"))]
    unsafe fn free_host(&self, ptr: NonNull<u8>, len: usize, align: usize);

    /// Frees an allocation; by default to the global allocator.
    ///
    /// # Safety
    ///
    /// `ptr`, `len` and `align` must be those of a live allocation of this platform, and no
    /// pointer derived from it may be used afterwards.
    #[cfg(feature = "alloc")]
    unsafe fn free_host(&self, ptr: NonNull<u8>, len: usize, align: usize) {
        // SAFETY: the caller's obligations are those of GlobalHostMem::free_host, and the
        // default `alloc_host` allocated from it.
        unsafe { GlobalHostMem.free_host(ptr, len, align) }
    }
}

// SAFETY: every method forwards to `T`, which upholds the obligations.
unsafe impl<T: HostMem + ?Sized> HostMem for &T {
    #[inline]
    fn alloc_host(&self, len: usize, align: usize) -> Result<NonNull<u8>, DmaError> {
        (**self).alloc_host(len, align)
    }
    #[inline]
    unsafe fn free_host(&self, ptr: NonNull<u8>, len: usize, align: usize) {
        // SAFETY: the caller's obligations are exactly those of `T::free_host`.
        unsafe { (**self).free_host(ptr, len, align) }
    }
}

/// Allocates room for `n` values of `T` from `host` (dangling for zero bytes).
fn alloc_array<T, H: HostMem>(host: &H, n: usize) -> Result<NonNull<T>, DmaError> {
    let bytes = core::mem::size_of::<T>()
        .checked_mul(n)
        .ok_or(DmaError::InvalidRequest)?;
    if bytes == 0 {
        return Ok(NonNull::dangling());
    }
    let align = core::mem::align_of::<T>();
    let p = host.alloc_host(bytes, align)?;
    if !(p.as_ptr() as usize).is_multiple_of(align) {
        // The platform broke its contract; give the memory back and refuse it.
        // SAFETY: just allocated with these arguments, never used.
        unsafe { host.free_host(p, bytes, align) };
        return Err(DmaError::InvalidRequest);
    }
    Ok(p.cast())
}

/// Gives back what [`alloc_array`] allocated for `n` values of `T`.
///
/// # Safety
///
/// `ptr` must come from `alloc_array::<T>(host, n)` and not be used afterwards.
unsafe fn free_array<T, H: HostMem>(host: &H, ptr: NonNull<T>, n: usize) {
    let bytes = core::mem::size_of::<T>() * n;
    if bytes != 0 {
        // SAFETY: per the caller, a live allocation of `bytes` bytes with T's alignment.
        unsafe { host.free_host(ptr.cast(), bytes, core::mem::align_of::<T>()) };
    }
}

/// A fixed-length array of `T` in host memory (like `Box<[T]>`).
pub struct HostArray<T, H: HostMem> {
    // Invariant: `ptr` came from `alloc_array::<T>(&host, len)` and holds `len`
    // initialised values, owned by this array.
    ptr: NonNull<T>,
    len: usize,
    host: H,
    _owns: PhantomData<T>,
}

// SAFETY: the array owns its values (like Box<[T]>); sending it sends them and the
// platform handle.
unsafe impl<T: Send, H: HostMem + Send> Send for HostArray<T, H> {}
// SAFETY: shared access gives `&[T]` only (and `&H`).
unsafe impl<T: Sync, H: HostMem + Sync> Sync for HostArray<T, H> {}

impl<T, H: HostMem> HostArray<T, H> {
    /// An array of `len` values, element `i` being `init(i)`.
    ///
    /// # Errors
    ///
    /// What the platform reports when it has no memory; [`DmaError::InvalidRequest`] if
    /// the size overflows.
    pub fn new(host: H, len: usize, mut init: impl FnMut(usize) -> T) -> Result<Self, DmaError> {
        let ptr = alloc_array::<T, H>(&host, len)?;
        for i in 0..len {
            // SAFETY: `ptr` has room for `len` values of T; slot `i` is written once,
            // before anything reads it. (If `init` panics, the memory and the values
            // written so far leak, which is safe.)
            unsafe { ptr.as_ptr().add(i).write(init(i)) };
        }
        Ok(HostArray {
            ptr,
            len,
            host,
            _owns: PhantomData,
        })
    }

    /// The platform handle the memory came from.
    pub fn host(&self) -> &H {
        &self.host
    }
}

impl<T, H: HostMem> Deref for HostArray<T, H> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised values at `ptr` (invariant), borrowed with `self`.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T, H: HostMem> DerefMut for HostArray<T, H> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as for `deref`, and `&mut self` makes the access exclusive.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T, H: HostMem> Drop for HostArray<T, H> {
    fn drop(&mut self) {
        // SAFETY: the values are initialised and owned (invariant); after dropping them
        // the memory is given back once and never used again.
        unsafe {
            core::ptr::drop_in_place(core::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ));
            free_array::<T, H>(&self.host, self.ptr, self.len);
        }
    }
}

impl<T: core::fmt::Debug, H: HostMem> core::fmt::Debug for HostArray<T, H> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

struct ArcInner<T, H> {
    count: AtomicUsize,
    host: H,
    value: T,
}

/// One value in host memory shared by several owners and freed with the last of them
/// (like `Arc<T>`, over the platform's memory).
pub struct HostArc<T, H: HostMem> {
    // Invariant: `ptr` came from `alloc_array::<ArcInner<T, H>>(host, 1)`, is initialised,
    // and `count` is the number of `HostArc`s pointing at it.
    ptr: NonNull<ArcInner<T, H>>,
    _owns: PhantomData<ArcInner<T, H>>,
}

// SAFETY: as for `Arc<T>`: the value is shared between threads through the handles, so it
// must be Send + Sync; the platform handle is used by whichever thread frees.
unsafe impl<T: Send + Sync, H: HostMem + Send + Sync> Send for HostArc<T, H> {}
// SAFETY: as for Send.
unsafe impl<T: Send + Sync, H: HostMem + Send + Sync> Sync for HostArc<T, H> {}

impl<T, H: HostMem> HostArc<T, H> {
    /// Moves `value` into host memory of `host`.
    ///
    /// # Errors
    ///
    /// What the platform reports when it has no memory (`value` is dropped).
    pub fn new(host: H, value: T) -> Result<Self, DmaError> {
        let ptr = alloc_array::<ArcInner<T, H>, H>(&host, 1)?;
        // SAFETY: room for one ArcInner, written once before any read.
        unsafe {
            ptr.as_ptr().write(ArcInner {
                count: AtomicUsize::new(1),
                host,
                value,
            })
        };
        Ok(HostArc {
            ptr,
            _owns: PhantomData,
        })
    }

    #[inline(always)]
    fn inner(&self) -> &ArcInner<T, H> {
        // SAFETY: initialised and alive while any handle exists (invariant).
        unsafe { self.ptr.as_ref() }
    }

    /// How many handles share the value.
    pub fn strong_count(this: &Self) -> usize {
        this.inner().count.load(Ordering::Acquire)
    }

    /// Whether two handles share one value.
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        a.ptr == b.ptr
    }
}

impl<T, H: HostMem> Clone for HostArc<T, H> {
    #[inline]
    fn clone(&self) -> Self {
        // Relaxed is enough to take a new handle from an existing one (as `Arc` does).
        let old = self.inner().count.fetch_add(1, Ordering::Relaxed);
        assert!(old < usize::MAX / 2, "HostArc count overflow");
        HostArc {
            ptr: self.ptr,
            _owns: PhantomData,
        }
    }
}

impl<T, H: HostMem> Deref for HostArc<T, H> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.inner().value
    }
}

impl<T, H: HostMem> Drop for HostArc<T, H> {
    fn drop(&mut self) {
        // Release: this handle's uses happen before the free; the last one acquires them.
        if self.inner().count.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        core::sync::atomic::fence(Ordering::Acquire);
        let ptr = self.ptr;
        // SAFETY: this was the last handle: nothing else can reach the value. The host
        // handle is moved out first (it frees the memory), then the value is dropped in
        // place and the memory given back once.
        unsafe {
            let host = core::ptr::read(&(*ptr.as_ptr()).host);
            core::ptr::drop_in_place(&mut (*ptr.as_ptr()).value);
            free_array::<ArcInner<T, H>, H>(&host, ptr, 1);
        }
    }
}

impl<T: core::fmt::Debug, H: HostMem> core::fmt::Debug for HostArc<T, H> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (**self).fmt(f)
    }
}

/// A spin lock for short critical sections (a few dozen instructions), where there is no
/// operating system to sleep on. Uncontended, locking costs one atomic swap and unlocking
/// one store. `get_mut` needs no locking at all.
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to the value to one thread at a time, so the value only
// needs to be sendable (as `Mutex<T>`).
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: owning the lock owns the value.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// A lock around `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// A lock around `value` (loom builds: not `const`, as loom's atomics are not).
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, spinning while another thread holds it.
    #[inline]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        loop {
            if let Some(g) = self.try_lock() {
                return g;
            }
            #[cfg(not(loom))]
            while self.locked.load(Ordering::Relaxed) {
                core::hint::spin_loop();
            }
            // Under loom the thread yields to the holder and tries the swap again (a relaxed
            // load may read a stale `true` for as long as loom likes, which it would explore
            // without end).
            #[cfg(loom)]
            loom::thread::yield_now();
        }
    }

    /// Takes the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        if self.locked.swap(true, lock_ordering(Ordering::Acquire)) {
            None
        } else {
            Some(SpinGuard { lock: self })
        }
    }

    /// The value, through exclusive access (no locking needed).
    #[inline]
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

impl<T: core::fmt::Debug> core::fmt::Debug for SpinLock<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.try_lock() {
            Some(g) => f.debug_tuple("SpinLock").field(&*g).finish(),
            None => f.write_str("SpinLock(<locked>)"),
        }
    }
}

/// Access to a [`SpinLock`]'s value; unlocks when dropped.
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while this thread holds the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`; `&mut self` keeps the access exclusive within the thread.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Release: the critical section's accesses happen before the next holder's.
        #[cfg(not(loom))]
        self.lock
            .locked
            .store(false, lock_ordering(Ordering::Release));
        // Loom 0.7 can order a plain store before an earlier swap of another thread that
        // read the old value (an RMW then reads a stale `true` and the lock stays taken
        // in its model, which real atomics never do); a swap, with the same release
        // ordering, keeps its model coherent.
        #[cfg(loom)]
        self.lock
            .locked
            .swap(false, lock_ordering(Ordering::Release));
    }
}

/// The lock's acquire (or release) ordering, relaxed in a loom twin ([`loom_weaken_lock`]).
#[inline(always)]
fn lock_ordering(strong: Ordering) -> Ordering {
    #[cfg(loom)]
    if WEAK_LOCK.with(|w| w.get()) {
        return Ordering::Relaxed;
    }
    strong
}

#[cfg(loom)]
std::thread_local! {
    static WEAK_LOCK: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Loom builds only: on the calling thread, makes [`SpinLock`]'s acquire and release
/// relaxed, so a model can show that loom finds what they prevent.
#[cfg(loom)]
pub fn loom_weaken_lock(on: bool) {
    WEAK_LOCK.with(|w| w.set(on));
}

/// Host memory from the global allocator (feature `alloc`): what a platform with `std`
/// hands its [`HostMem`] calls to.
#[cfg(feature = "alloc")]
#[derive(Clone, Copy, Debug, Default)]
pub struct GlobalHostMem;

#[cfg(feature = "alloc")]
extern crate alloc;

// SAFETY: `alloc_zeroed` returns zeroed, aligned, unaliased memory valid until
// `dealloc` with the same layout, which is what `free_host`'s caller passes; the global
// allocator is thread-safe and never maps memory for a device.
#[cfg(feature = "alloc")]
unsafe impl HostMem for GlobalHostMem {
    fn alloc_host(&self, len: usize, align: usize) -> Result<NonNull<u8>, DmaError> {
        let layout = core::alloc::Layout::from_size_align(len, align)
            .map_err(|_| DmaError::InvalidRequest)?;
        if len == 0 {
            return Err(DmaError::InvalidRequest);
        }
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc::alloc::alloc_zeroed(layout) };
        NonNull::new(p).ok_or(DmaError::OutOfMemory)
    }

    unsafe fn free_host(&self, ptr: NonNull<u8>, len: usize, align: usize) {
        // SAFETY: per the caller, allocated above with this size and alignment, so the
        // layout is valid and matches.
        unsafe {
            alloc::alloc::dealloc(
                ptr.as_ptr(),
                core::alloc::Layout::from_size_align_unchecked(len, align),
            )
        }
    }
}

#[cfg(all(test, feature = "alloc"))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize as Counter;

    static DROPS: Counter = Counter::new(0);
    struct Noisy;
    impl Drop for Noisy {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn arrays_and_arcs_drop_their_values_once() {
        let before = DROPS.load(Ordering::SeqCst);
        drop(HostArray::new(GlobalHostMem, 5, |_| Noisy).unwrap());
        assert_eq!(DROPS.load(Ordering::SeqCst) - before, 5);
        let a = HostArc::new(GlobalHostMem, Noisy).unwrap();
        let b = a.clone();
        assert_eq!(HostArc::strong_count(&a), 2);
        drop(a);
        assert_eq!(DROPS.load(Ordering::SeqCst) - before, 5, "still shared");
        drop(b);
        assert_eq!(DROPS.load(Ordering::SeqCst) - before, 6);
        let empty: HostArray<u64, _> = HostArray::new(GlobalHostMem, 0, |_| 0).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn a_spin_lock_excludes_other_threads() {
        let l = std::sync::Arc::new(SpinLock::new(0u64));
        let threads: std::vec::Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let mut g = l.lock();
                        // A read-modify-write in two steps: lost updates without the lock.
                        let v = *g;
                        core::hint::black_box(());
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*l.lock(), 40_000);
        assert!(l.try_lock().is_some());
        let g = l.lock();
        assert!(l.try_lock().is_none(), "held");
        drop(g);
    }
}
