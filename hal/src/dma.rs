//! DMA memory the driver shares with the device.
//!
//! [`DmaBuf`] owns one coherent allocation made through the platform's [`Dma`] and frees it
//! when dropped. Its memory is reached only through volatile accesses at byte offsets
//! ([`DmaMem`]), each made through a `volatile::VolatilePtr` restricted to the access it
//! makes (read-only for loads, write-only for stores): no `&` or `&mut` reference into the
//! memory is ever created, because the device may write it at any moment. Multi-byte
//! accessors convert from and to the big-endian order of every mlx5 structure.
//!
//! Offsets are checked on every access. An access outside the buffer, or a misaligned
//! one, is a driver bug and **panics**; it never touches memory outside the allocation.
//!
//! The rings and the command queue are generic over [`DmaMem`], so the same code runs on a
//! real [`DmaBuf`] and, in this crate's loom models, on memory whose every access loom
//! sees.

use crate::platform::{Dma, DmaError, DmaRegion};
use core::ptr::NonNull;
use volatile::{VolatilePtr, access};

/// Memory shared with the device, accessed by offset.
///
/// Reads take `&self`, writes `&mut self`: the owner of the memory is the only writer on
/// the CPU side, which keeps the accesses free of data races between CPU threads.
///
/// # Panics
///
/// Every method panics if the access is not entirely inside `0..len()`, and the 16-, 32-
/// and 64-bit accessors panic if `off` is not a multiple of the access width.
pub trait DmaMem {
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the memory is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The address the device uses for offset 0.
    fn iova(&self) -> u64;
    /// Reads one byte.
    fn read_u8(&self, off: usize) -> u8;
    /// Reads a big-endian 16-bit value.
    fn read_be16(&self, off: usize) -> u16;
    /// Reads a big-endian 32-bit value.
    fn read_be32(&self, off: usize) -> u32;
    /// Reads a big-endian 64-bit value.
    fn read_be64(&self, off: usize) -> u64;
    /// Writes one byte.
    fn write_u8(&mut self, off: usize, v: u8);
    /// Writes a big-endian 32-bit value.
    fn write_be32(&mut self, off: usize, v: u32);
    /// Writes a big-endian 64-bit value.
    fn write_be64(&mut self, off: usize, v: u64);
    /// Copies `src` into the memory at `off`.
    fn write_bytes(&mut self, off: usize, src: &[u8]);
    /// Copies the memory at `off` into `dst`.
    fn read_bytes(&self, off: usize, dst: &mut [u8]);
    /// Sets `len` bytes at `off` to `byte`.
    fn fill(&mut self, off: usize, len: usize, byte: u8);

    /// Reads `N` consecutive big-endian 64-bit words at `off` (one bounds check for the
    /// whole run where the implementation can). Each word is one volatile access; the
    /// words are read in increasing order.
    #[inline(always)]
    fn read_be64_array<const N: usize>(&self, off: usize) -> [u64; N] {
        core::array::from_fn(|i| self.read_be64(off + 8 * i))
    }

    /// Writes `n` big-endian 64-bit words at `off`, word `i` being `word(i)` (one bounds
    /// check for the run where the implementation can).
    #[inline(always)]
    fn write_be64_run(&mut self, off: usize, n: usize, mut word: impl FnMut(usize) -> u64) {
        for i in 0..n {
            self.write_be64(off + 8 * i, word(i));
        }
    }
}

/// An owned, coherent DMA allocation, freed when dropped.
///
/// `D` is a handle to the platform's DMA allocator (for example `&P`), kept so the buffer
/// can free itself.
///
/// # Freeing
///
/// Dropping a `DmaBuf` returns the memory to the platform. The device must no longer use it
/// by then: destroy the object that points at it (queue, mailbox chain, firmware page) or
/// disable the device first. Dropping a buffer the device still writes is a driver bug the
/// type system cannot catch (as on every DMA-capable platform); if in doubt, leak the buffer
/// with [`core::mem::forget`] instead.
pub struct DmaBuf<D: Dma> {
    dma: D,
    // Invariant: `region` came from `dma.alloc_coherent`, is not freed until drop, is
    // aligned to at least 8 bytes, and no reference into it exists.
    region: core::mem::ManuallyDrop<DmaRegion>,
}

// SAFETY: a DmaBuf owns its allocation exclusively (like a Box<[u8]>); moving it to
// another thread moves that ownership. D is sent along with it.
unsafe impl<D: Dma + Send> Send for DmaBuf<D> {}
// SAFETY: shared access only allows reads (`&self` methods); writes need `&mut self`.
// Volatile reads from several threads do not race with each other.
unsafe impl<D: Dma + Sync> Sync for DmaBuf<D> {}

impl<D: Dma> core::fmt::Debug for DmaBuf<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DmaBuf")
            .field("iova", &format_args!("{:#x}", self.iova()))
            .field("len", &self.len())
            .finish()
    }
}

impl<D: Dma> DmaBuf<D> {
    /// Allocates `len` zeroed bytes aligned to `align` (at least 8) through `dma`.
    ///
    /// # Errors
    ///
    /// [`DmaError::InvalidRequest`] for a zero length or an alignment that is not a power of
    /// two; otherwise whatever the platform reports.
    pub fn alloc(dma: D, len: usize, align: usize) -> Result<Self, DmaError> {
        if len == 0 || !align.is_power_of_two() {
            return Err(DmaError::InvalidRequest);
        }
        let align = align.max(8);
        let region = dma.alloc_coherent(len, align)?;
        if region.len < len
            || !(region.cpu.as_ptr() as usize).is_multiple_of(align)
            || region.iova % align as u64 != 0
        {
            // The platform broke its contract; give the region back and refuse it.
            // SAFETY: the region came from this allocator and nothing used it yet.
            unsafe { dma.free_coherent(region) };
            return Err(DmaError::InvalidRequest);
        }
        Ok(DmaBuf {
            dma,
            region: core::mem::ManuallyDrop::new(region),
        })
    }

    #[inline(always)]
    fn region(&self) -> &DmaRegion {
        &self.region
    }

    /// The CPU address (for diagnostics; never dereference it outside this module).
    pub fn cpu_addr(&self) -> usize {
        self.region().cpu.as_ptr() as usize
    }

    /// The allocator handle.
    pub fn allocator(&self) -> &D {
        &self.dma
    }

    /// Checks that `off..off + width` is inside the buffer and `off` is a multiple of
    /// `align`, and returns the CPU pointer to `off`.
    #[inline(always)]
    fn ptr(&self, off: usize, width: usize, align: usize) -> *mut u8 {
        let r = self.region();
        if !(off <= r.len && width <= r.len - off && off.is_multiple_of(align)) {
            // Out of line, so the hot path does not set up the message's arguments.
            bad_access(off, width, r.len);
        }
        // The offset is in bounds, so the result stays inside the allocation.
        r.cpu.as_ptr().wrapping_add(off)
    }

    #[inline(always)]
    fn raw_len(&self) -> usize {
        self.region().len
    }

    #[inline(always)]
    fn raw_iova(&self) -> u64 {
        self.region().iova
    }
}

/// A range of byte offsets `start..end` of a DMA buffer.
pub type Window = core::ops::Range<usize>;

/// DMA memory that can lend two views of itself for disjoint byte ranges, each usable from
/// its own thread while the memory is borrowed: how a QP's send and receive queues, which
/// share one buffer, are posted to from two threads ([`QpRings::split`]).
///
/// Each view accepts the buffer's own offsets but only inside its windows: any access
/// outside them panics, as an access outside the buffer does.
///
/// [`QpRings::split`]: crate::wq::QpRings::split
pub trait DmaSplit: DmaMem {
    /// A view of some windows of the memory.
    type View<'a>: DmaMem + Send
    where
        Self: 'a;

    /// Two views, the first for the windows `a` and the second for `b` (empty windows are
    /// allowed and give no access).
    ///
    /// # Panics
    ///
    /// If a window lies outside the memory, or a window of `a` overlaps one of `b`.
    fn split_windows(&mut self, a: [Window; 2], b: [Window; 2])
    -> (Self::View<'_>, Self::View<'_>);
}

/// Checks that the windows lie in `0..len` and that no window of `a` overlaps one of `b`.
fn check_windows(len: usize, a: &[Window; 2], b: &[Window; 2]) {
    for w in a.iter().chain(b) {
        assert!(
            w.start <= w.end && w.end <= len,
            "DMA window {w:?} outside a buffer of {len:#x} bytes"
        );
    }
    for x in a.iter().filter(|w| !w.is_empty()) {
        for y in b.iter().filter(|w| !w.is_empty()) {
            assert!(
                x.end <= y.start || y.end <= x.start,
                "DMA windows {x:?} and {y:?} overlap"
            );
        }
    }
}

/// A view of some byte ranges (windows) of a [`DmaBuf`], made by
/// [`DmaSplit::split_windows`]: it reads and writes only inside its windows, through the
/// same volatile, bounds-checked accessors as the buffer, at the buffer's offsets.
///
/// Two views of one buffer have disjoint windows and borrow the buffer mutably, so each is
/// the only CPU-side accessor of its bytes while it lives: they can be used from two
/// threads with no data race, while the buffer itself cannot be touched.
pub struct DmaView<'a> {
    // Invariant: `cpu` is the start of a live allocation of `len` bytes, 8-aligned, which
    // lives for 'a; no one else accesses the bytes of `windows` from the CPU while the view
    // lives (the buffer is mutably borrowed for 'a and the other view's windows are
    // disjoint from these).
    cpu: NonNull<u8>,
    len: usize,
    iova: u64,
    windows: [Window; 2],
    _borrow: core::marker::PhantomData<&'a mut [u8]>,
}

// SAFETY: the view is the only CPU-side accessor of its windows (invariant) and holds no
// thread-bound state, so moving it to another thread moves that exclusive access.
unsafe impl Send for DmaView<'_> {}

impl core::fmt::Debug for DmaView<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DmaView")
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("windows", &self.windows)
            .finish()
    }
}

impl DmaView<'_> {
    /// Checks that `off..off + width` is inside one window and `off` is a multiple of
    /// `align`, and returns the CPU pointer to `off`.
    #[inline(always)]
    fn ptr(&self, off: usize, width: usize, align: usize) -> *mut u8 {
        let inside = |w: &Window| off >= w.start && off <= w.end && width <= w.end - off;
        if !((inside(&self.windows[0]) || inside(&self.windows[1])) && off.is_multiple_of(align)) {
            bad_window(off, width, &self.windows);
        }
        // The windows lie inside the allocation (checked at the split).
        self.cpu.as_ptr().wrapping_add(off)
    }

    #[inline(always)]
    fn raw_len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn raw_iova(&self) -> u64 {
        self.iova
    }
}

/// The panic of an access outside a view's windows.
#[cold]
#[inline(never)]
fn bad_window(off: usize, width: usize, windows: &[Window; 2]) -> ! {
    panic!(
        "DMA access out of bounds or misaligned: offset {off:#x}, width {width}, outside the \
         view's windows {windows:?}"
    )
}

impl<D: Dma> DmaSplit for DmaBuf<D> {
    type View<'a>
        = DmaView<'a>
    where
        D: 'a;

    fn split_windows(&mut self, a: [Window; 2], b: [Window; 2]) -> (DmaView<'_>, DmaView<'_>) {
        let len = self.raw_len();
        check_windows(len, &a, &b);
        let cpu = self.region().cpu;
        let iova = self.raw_iova();
        let view = |windows| DmaView {
            cpu,
            len,
            iova,
            windows,
            _borrow: core::marker::PhantomData,
        };
        // Both views borrow `self` mutably for their lifetime: the buffer cannot be used
        // (nor dropped) while they live, and their windows are disjoint (checked above).
        (view(a), view(b))
    }
}

/// One volatile load of the `T` at `p`, through a read-only [`VolatilePtr`].
///
/// # Safety
///
/// `p` is non-null, aligned for `T` and valid for a read of `T` (inside a live allocation).
#[inline(always)]
unsafe fn read_at<T: Copy>(p: *const T) -> T {
    // SAFETY: the caller's guarantees are `VolatilePtr::new_read_only`'s; the pointer is
    // used for this one read and not kept.
    unsafe { VolatilePtr::new_read_only(NonNull::new_unchecked(p.cast_mut())) }.read()
}

/// One volatile store of `v` to the `T` at `p`, through a write-only [`VolatilePtr`].
///
/// # Safety
///
/// `p` is non-null, aligned for `T` and valid for a write of `T` (inside a live allocation
/// no one else writes from the CPU side).
#[inline(always)]
unsafe fn write_at<T: Copy>(p: *mut T, v: T) {
    // SAFETY: the caller's guarantees are `VolatilePtr::new_restricted`'s; the pointer is
    // used for this one write and not kept.
    unsafe { VolatilePtr::new_restricted(access::WriteOnly, NonNull::new_unchecked(p)) }.write(v)
}

/// The panic of a failed bounds or alignment check.
#[cold]
#[inline(never)]
fn bad_access(off: usize, width: usize, len: usize) -> ! {
    panic!(
        "DMA access out of bounds or misaligned: offset {off:#x}, width {width}, buffer {len:#x}"
    )
}

impl<D: Dma> Drop for DmaBuf<D> {
    fn drop(&mut self) {
        // SAFETY: `region` is taken once, here, and never read again. It came from
        // `self.dma.alloc_coherent` and is freed once; the type's documented contract is
        // that the device no longer uses it when the buffer is dropped, and no pointer into
        // it outlives `self`.
        unsafe {
            let region = core::mem::ManuallyDrop::take(&mut self.region);
            self.dma.free_coherent(region);
        }
    }
}

/// The [`DmaMem`] accessors of a type that has `raw_len`, `raw_iova` and
/// `ptr(off, width, align)` (which checks the access and returns the CPU pointer to `off`,
/// inside a live allocation that no one else on the CPU side accesses at those bytes while
/// the value is borrowed: [`DmaBuf`], and [`DmaView`] within its windows).
macro_rules! impl_dma_mem {
    ([$($gen:tt)*] $ty:ty) => {
impl<$($gen)*> DmaMem for $ty {
    #[inline(always)]
    fn len(&self) -> usize {
        self.raw_len()
    }

    #[inline(always)]
    fn iova(&self) -> u64 {
        self.raw_iova()
    }

    #[inline(always)]
    fn read_u8(&self, off: usize) -> u8 {
        let p = self.ptr(off, 1, 1);
        // SAFETY: `ptr` checked that the byte is inside the live allocation, which is valid
        // for volatile reads (Dma contract).
        unsafe { read_at(p) }
    }

    #[inline(always)]
    fn read_be16(&self, off: usize) -> u16 {
        let p = self.ptr(off, 2, 2).cast::<u16>();
        // SAFETY: in bounds and 2-aligned (the base is 8-aligned and `off` is even).
        u16::from_be(unsafe { read_at(p) })
    }

    #[inline(always)]
    fn read_be32(&self, off: usize) -> u32 {
        let p = self.ptr(off, 4, 4).cast::<u32>();
        // SAFETY: in bounds and 4-aligned (the base is 8-aligned).
        u32::from_be(unsafe { read_at(p) })
    }

    #[inline(always)]
    fn read_be64(&self, off: usize) -> u64 {
        let p = self.ptr(off, 8, 8).cast::<u64>();
        // SAFETY: in bounds and 8-aligned.
        u64::from_be(unsafe { read_at(p) })
    }

    #[inline(always)]
    fn read_be64_array<const N: usize>(&self, off: usize) -> [u64; N] {
        let p = self.ptr(off, N * 8, 8).cast::<u64>().cast_const();
        let mut out = [0u64; N];
        for (i, w) in out.iter_mut().enumerate() {
            // SAFETY: `ptr` checked that all `N` words are inside the live allocation and
            // that the first is 8-aligned (so every word is); valid for volatile reads.
            *w = u64::from_be(unsafe { read_at(p.add(i)) });
        }
        out
    }

    #[inline(always)]
    fn write_u8(&mut self, off: usize, v: u8) {
        let p = self.ptr(off, 1, 1);
        // SAFETY: in bounds of the live allocation, valid for volatile writes; `&mut self`
        // makes this the only CPU-side writer.
        unsafe { write_at(p, v) }
    }

    #[inline(always)]
    fn write_be32(&mut self, off: usize, v: u32) {
        let p = self.ptr(off, 4, 4).cast::<u32>();
        // SAFETY: in bounds and 4-aligned; exclusive CPU-side writer.
        unsafe { write_at(p, v.to_be()) }
    }

    #[inline(always)]
    fn write_be64(&mut self, off: usize, v: u64) {
        let p = self.ptr(off, 8, 8).cast::<u64>();
        // SAFETY: in bounds and 8-aligned; exclusive CPU-side writer.
        unsafe { write_at(p, v.to_be()) }
    }

    #[inline(always)]
    fn write_be64_run(&mut self, off: usize, n: usize, mut word: impl FnMut(usize) -> u64) {
        let p = self.ptr(off, n * 8, 8).cast::<u64>();
        for i in 0..n {
            // SAFETY: `ptr` checked that all `n` words are inside the allocation and that
            // the first is 8-aligned; exclusive CPU-side writer.
            unsafe { write_at(p.add(i), word(i).to_be()) };
        }
    }

    #[inline(always)]
    fn write_bytes(&mut self, off: usize, src: &[u8]) {
        let p = self.ptr(off, src.len(), 1);
        let len = src.len();
        let s = src.as_ptr();
        let mut i = 0;
        // Head up to 8-byte alignment in at most one 1-, one 2- and one 4-byte store, then
        // 8-byte words, then the tail the same way. Every store is naturally aligned: the
        // base is 8-aligned and each width is only used at a multiple of itself.
        if !(off + i).is_multiple_of(2) && i < len {
            // SAFETY: `p + i` is inside the range `ptr` checked (`i < len`).
            unsafe { write_at(p.add(i), src[i]) };
            i += 1;
        }
        if !(off + i).is_multiple_of(4) && i + 2 <= len {
            // SAFETY: `src[i..i + 2]` is in bounds (`i + 2 <= len`); the destination is
            // inside the checked range and 2-aligned (`off + i` is even here).
            unsafe {
                let h = s.add(i).cast::<u16>().read_unaligned();
                write_at(p.add(i).cast::<u16>(), h);
            }
            i += 2;
        }
        if !(off + i).is_multiple_of(8) && i + 4 <= len {
            // SAFETY: `src[i..i + 4]` is in bounds; the destination is inside the checked
            // range and 4-aligned (`off + i` is a multiple of 4 here).
            unsafe {
                let w = s.add(i).cast::<u32>().read_unaligned();
                write_at(p.add(i).cast::<u32>(), w);
            }
            i += 4;
        }
        if (off + i).is_multiple_of(8) {
            while i + 8 <= len {
                // SAFETY: `src[i..i + 8]` is in bounds (loop condition); the destination is
                // inside the checked range and 8-aligned (the base is 8-aligned and
                // `off + i` is a multiple of 8).
                unsafe {
                    let w = s.add(i).cast::<u64>().read_unaligned();
                    write_at(p.add(i).cast::<u64>(), w);
                }
                i += 8;
            }
            if i + 4 <= len {
                // SAFETY: in bounds of `src` and of the checked range; 4-aligned (`off + i`
                // is a multiple of 8).
                unsafe {
                    let w = s.add(i).cast::<u32>().read_unaligned();
                    write_at(p.add(i).cast::<u32>(), w);
                }
                i += 4;
            }
            if i + 2 <= len {
                // SAFETY: in bounds; 2-aligned (`off + i` is a multiple of 4).
                unsafe {
                    let h = s.add(i).cast::<u16>().read_unaligned();
                    write_at(p.add(i).cast::<u16>(), h);
                }
                i += 2;
            }
        }
        // The last byte, or (for a short copy whose head did not reach alignment) the rest.
        while i < len {
            // SAFETY: inside the checked range.
            unsafe { write_at(p.add(i), src[i]) };
            i += 1;
        }
    }

    #[inline]
    fn read_bytes(&self, off: usize, dst: &mut [u8]) {
        let p = self.ptr(off, dst.len(), 1);
        let mut i = 0;
        while i < dst.len() && !(off + i).is_multiple_of(8) {
            // SAFETY: inside the checked range.
            dst[i] = unsafe { read_at(p.add(i)) };
            i += 1;
        }
        while i + 8 <= dst.len() {
            // SAFETY: the source is inside the checked range and 8-aligned; `dst[i..i + 8]`
            // is in bounds (loop condition).
            unsafe {
                let w = read_at(p.add(i).cast::<u64>());
                dst.as_mut_ptr().add(i).cast::<u64>().write_unaligned(w);
            }
            i += 8;
        }
        while i < dst.len() {
            // SAFETY: inside the checked range.
            dst[i] = unsafe { read_at(p.add(i)) };
            i += 1;
        }
    }

    #[inline]
    fn fill(&mut self, off: usize, len: usize, byte: u8) {
        let p = self.ptr(off, len, 1);
        let word = u64::from_ne_bytes([byte; 8]);
        let mut i = 0;
        while i < len && !(off + i).is_multiple_of(8) {
            // SAFETY: inside the checked range.
            unsafe { write_at(p.add(i), byte) };
            i += 1;
        }
        while i + 8 <= len {
            // SAFETY: inside the checked range and 8-aligned.
            unsafe { write_at(p.add(i).cast::<u64>(), word) };
            i += 8;
        }
        while i < len {
            // SAFETY: inside the checked range.
            unsafe { write_at(p.add(i), byte) };
            i += 1;
        }
    }
}
    };
}

impl_dma_mem!([D: Dma] DmaBuf<D>);
impl_dma_mem!(['a] DmaView<'a>);
impl_dma_mem!([D: Dma] MappedBuf<D>);

/// Memory a caller already has, to be mapped for the device by [`MappedBuf::new`]: an
/// owned heap buffer (feature `alloc`) or a buffer that lives for the whole program.
#[derive(Debug)]
pub enum HostBuf {
    /// An owned heap buffer (`Box<[u8]>`, or a `Vec<u8>` through `From`).
    #[cfg(feature = "alloc")]
    Boxed(alloc::boxed::Box<[u8]>),
    /// A buffer that lives for the whole program (a `static`, or leaked memory).
    Static(&'static mut [u8]),
}

#[cfg(feature = "alloc")]
extern crate alloc;

#[cfg(feature = "alloc")]
impl From<alloc::boxed::Box<[u8]>> for HostBuf {
    fn from(b: alloc::boxed::Box<[u8]>) -> HostBuf {
        HostBuf::Boxed(b)
    }
}

#[cfg(feature = "alloc")]
impl From<alloc::vec::Vec<u8>> for HostBuf {
    fn from(v: alloc::vec::Vec<u8>) -> HostBuf {
        HostBuf::Boxed(v.into_boxed_slice())
    }
}

impl From<&'static mut [u8]> for HostBuf {
    fn from(s: &'static mut [u8]) -> HostBuf {
        HostBuf::Static(s)
    }
}

impl HostBuf {
    /// Gives up the buffer as a raw range (no reference to it is kept).
    fn into_raw(self) -> (NonNull<u8>, usize, bool) {
        match self {
            #[cfg(feature = "alloc")]
            HostBuf::Boxed(b) => {
                let len = b.len();
                let p = alloc::boxed::Box::into_raw(b).cast::<u8>();
                // `Box::into_raw` never returns null.
                (NonNull::new(p).unwrap_or(NonNull::dangling()), len, true)
            }
            HostBuf::Static(s) => {
                let len = s.len();
                (NonNull::from(s).cast::<u8>(), len, false)
            }
        }
    }

    /// Rebuilds the buffer from [`HostBuf::into_raw`]'s parts.
    ///
    /// # Safety
    ///
    /// The parts come from `into_raw`, once, and nothing else uses the memory any more.
    unsafe fn from_raw(cpu: NonNull<u8>, len: usize, boxed: bool) -> HostBuf {
        let slice = core::ptr::slice_from_raw_parts_mut(cpu.as_ptr(), len);
        if boxed {
            #[cfg(feature = "alloc")]
            // SAFETY: the pointer and length are those `Box::into_raw` gave (caller), and the
            // box is rebuilt once.
            return HostBuf::Boxed(unsafe { alloc::boxed::Box::from_raw(slice) });
        }
        // SAFETY: the range is the `&'static mut [u8]` `into_raw` gave up (caller); its
        // exclusive borrow is handed back once.
        HostBuf::Static(unsafe { &mut *slice })
    }
}

/// A caller's buffer mapped for the device through the platform's [`Dma::map`] (under
/// VFIO: the IOMMU; on the mock: its IOMMU table), owned while it is mapped and unmapped
/// when dropped. It implements [`DmaMem`] like a [`DmaBuf`], so the driver registers it as
/// a memory region the same way.
///
/// Mapping is safe here because the `MappedBuf` owns the memory: nothing else can read,
/// write or free it while the device may reach it, and the CPU side reaches it only
/// through the volatile accessors. The buffer comes back from [`MappedBuf::unmap`].
///
/// An IOMMU maps whole pages, so under VFIO the rest of the buffer's first and last page
/// is reachable by the device too (a memory key over the buffer still bounds every access
/// it allows to the buffer exactly); where even a faulty device must not reach the
/// neighbouring memory, hand over page-aligned buffers of whole pages.
///
/// # Dropping
///
/// Dropping unmaps the buffer and then frees it (a `Box`) or forgets it (a `&'static mut`).
/// As for a [`DmaBuf`], the device must no longer use it by then: destroy the memory key
/// over it first (the driver's memory region gives the buffer back only after its key is
/// destroyed, and leaks it, mapped, when dropped undestroyed). If the platform refuses
/// the unmap, the memory is leaked rather than freed.
pub struct MappedBuf<D: Dma> {
    dma: D,
    // Invariant: `region.cpu..+len` is the memory of a `HostBuf` given up with `into_raw`
    // (whether it was boxed is `boxed`), 8-aligned, mapped at `region.iova` by `dma.map`,
    // not unmapped until drop or `unmap`; no reference into it exists.
    region: core::mem::ManuallyDrop<DmaRegion>,
    boxed: bool,
}

// SAFETY: a MappedBuf owns its memory exclusively (like the Box it may hold); moving it to
// another thread moves that ownership. D is sent along with it.
unsafe impl<D: Dma + Send> Send for MappedBuf<D> {}
// SAFETY: shared access only allows reads (`&self` methods); writes need `&mut self`.
unsafe impl<D: Dma + Sync> Sync for MappedBuf<D> {}

impl<D: Dma> core::fmt::Debug for MappedBuf<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MappedBuf")
            .field("iova", &format_args!("{:#x}", self.region.iova))
            .field("len", &self.region.len)
            .finish()
    }
}

impl<D: Dma> MappedBuf<D> {
    /// Maps `buf` for the device through `dma` and takes ownership of it.
    ///
    /// # Errors
    ///
    /// The buffer back with [`DmaError::InvalidRequest`] when it is empty or its first byte
    /// is not 8-byte aligned (the 64-bit accessors need it; common allocators align every
    /// heap block to 16 bytes, though `Vec<u8>` does not promise it), or with the
    /// platform's error when the mapping fails.
    pub fn new(dma: D, buf: impl Into<HostBuf>) -> Result<MappedBuf<D>, (HostBuf, DmaError)> {
        let buf = buf.into();
        let (cpu, len, boxed) = buf.into_raw();
        let error = if len == 0 || !(cpu.as_ptr() as usize).is_multiple_of(8) {
            DmaError::InvalidRequest
        } else {
            // SAFETY: the memory stays allocated and unmoved until `unmap` (this value owns
            // it and unmaps it before giving it back or freeing it), and the caller, by
            // handing it over, lets the device read and write it.
            match unsafe { dma.map(cpu, len) } {
                Ok(iova) => {
                    return Ok(MappedBuf {
                        dma,
                        region: core::mem::ManuallyDrop::new(DmaRegion { cpu, iova, len }),
                        boxed,
                    });
                }
                Err(e) => e,
            }
        };
        // SAFETY: the parts came from `into_raw` above, are rebuilt once, and the memory
        // was not mapped.
        Err((unsafe { HostBuf::from_raw(cpu, len, boxed) }, error))
    }

    /// Unmaps the buffer and gives it back.
    ///
    /// The device must no longer use it (see the type's documentation on dropping).
    ///
    /// # Errors
    ///
    /// The platform's error when it refuses the unmap; the memory is then leaked (never
    /// freed or handed back while the device might still reach it).
    pub fn unmap(self) -> Result<HostBuf, DmaError> {
        let mut this = core::mem::ManuallyDrop::new(self);
        // SAFETY: `region` is taken once; `this` is never dropped, so neither is it again.
        let region = unsafe { core::mem::ManuallyDrop::take(&mut this.region) };
        // SAFETY: the handle is moved out once and `this` is never used again.
        let dma = unsafe { core::ptr::read(&this.dma) };
        // SAFETY: iova and len are those of the live mapping `new` made; the type's contract
        // is that the device no longer uses it now.
        unsafe { dma.unmap(region.iova, region.len) }?;
        // SAFETY: the parts are those `into_raw` gave in `new`, rebuilt once; the mapping is
        // gone.
        Ok(unsafe { HostBuf::from_raw(region.cpu, region.len, this.boxed) })
    }

    #[inline(always)]
    fn region(&self) -> &DmaRegion {
        &self.region
    }

    /// Checks that `off..off + width` is inside the buffer and `off` is a multiple of
    /// `align`, and returns the CPU pointer to `off`.
    #[inline(always)]
    fn ptr(&self, off: usize, width: usize, align: usize) -> *mut u8 {
        let r = self.region();
        if !(off <= r.len && width <= r.len - off && off.is_multiple_of(align)) {
            bad_access(off, width, r.len);
        }
        r.cpu.as_ptr().wrapping_add(off)
    }

    #[inline(always)]
    fn raw_len(&self) -> usize {
        self.region().len
    }

    #[inline(always)]
    fn raw_iova(&self) -> u64 {
        self.region().iova
    }
}

impl<D: Dma> Drop for MappedBuf<D> {
    fn drop(&mut self) {
        // SAFETY: `region` is taken once, here, and never read again.
        let region = unsafe { core::mem::ManuallyDrop::take(&mut self.region) };
        // SAFETY: iova and len are those of the live mapping `new` made; the type's contract
        // is that the device no longer uses it when the value is dropped.
        if unsafe { self.dma.unmap(region.iova, region.len) }.is_ok() {
            // SAFETY: the parts are those `into_raw` gave in `new`, rebuilt once; the mapping
            // is gone, so the memory is ours alone to free (or to hand back, for a static).
            drop(unsafe { HostBuf::from_raw(region.cpu, region.len, self.boxed) });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::testing::FakePlatform;

    #[test]
    fn a_mapped_caller_buffer_is_reachable_until_unmapped_and_comes_back() {
        extern crate alloc;
        use alloc::vec;
        let p = FakePlatform::new();
        // A byte vector is only 1-aligned by type; MappedBuf needs 8. The system allocator
        // gives 16 anyway, Miri's places allocations anywhere: take the first 8-aligned one.
        let mut tries = std::vec::Vec::new();
        let buf = loop {
            let v = vec![0u8; 100];
            if (v.as_ptr() as usize).is_multiple_of(8) {
                break v;
            }
            assert!(tries.len() < 256, "no 8-aligned allocation");
            tries.push(v);
        };
        drop(tries);
        let mut m = MappedBuf::new(&p, buf).unwrap();
        assert_eq!(m.len(), 100);
        m.write_be64(8, 0x0102_0304_0506_0708);
        m.write_bytes(97, &[7, 8, 9]);
        assert_eq!(m.read_be32(8), 0x0102_0304);
        let iova = m.iova();
        let back = m.unmap().unwrap();
        let HostBuf::Boxed(b) = back else {
            panic!("boxed")
        };
        assert_eq!(&b[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[97..], &[7, 8, 9]);
        // The mapping is gone: unmapping it again fails.
        // SAFETY: the range is no longer mapped; the fake only looks it up.
        assert_eq!(unsafe { p.unmap(iova, 100) }, Err(DmaError::NotMapped));
        // Dropping unmaps too, and frees the box (Miri checks the free).
        let m = MappedBuf::new(&p, b).unwrap();
        let iova = m.iova();
        drop(m);
        // SAFETY: as above.
        assert_eq!(unsafe { p.unmap(iova, 100) }, Err(DmaError::NotMapped));
        // Refused: empty.
        let (back, e) = MappedBuf::new(&p, vec![]).unwrap_err();
        assert_eq!(e, DmaError::InvalidRequest);
        assert!(matches!(back, HostBuf::Boxed(b) if b.is_empty()));
    }

    #[test]
    fn accessors_are_big_endian_and_round_trip() {
        let p = FakePlatform::new();
        let mut b = DmaBuf::alloc(&p, 64, 64).unwrap();
        b.write_be32(4, 0x1122_3344);
        let mut raw = [0u8; 8];
        b.read_bytes(0, &mut raw);
        assert_eq!(raw, [0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44]);
        b.write_be64(8, 0x0102_0304_0506_0708);
        assert_eq!(b.read_u8(8), 1);
        assert_eq!(b.read_u8(15), 8);
        assert_eq!(b.read_be16(14), 0x0708);
        assert_eq!(b.read_be64(8), 0x0102_0304_0506_0708);
        // Unaligned byte copies of every length and offset round-trip.
        let src: [u8; 29] = core::array::from_fn(|i| i as u8 + 1);
        for off in 0..8 {
            b.fill(0, 64, 0);
            b.write_bytes(16 + off, &src);
            let mut back = [0u8; 29];
            b.read_bytes(16 + off, &mut back);
            assert_eq!(back, src);
            assert_eq!(b.read_u8(15 + off), 0, "byte before the copy untouched");
            assert_eq!(b.read_u8(16 + off + 29), 0, "byte after the copy untouched");
        }
        // Every length at every offset (head, words and tail in all combinations).
        for off in 0..8 {
            for n in 0..=src.len() {
                b.fill(0, 64, 0);
                b.write_bytes(16 + off, &src[..n]);
                let mut back = [0u8; 64];
                b.read_bytes(0, &mut back);
                for (k, v) in back.iter().enumerate() {
                    let want = if (16 + off..16 + off + n).contains(&k) {
                        src[k - 16 - off]
                    } else {
                        0
                    };
                    assert_eq!(*v, want, "offset {off}, length {n}, byte {k}");
                }
            }
        }
        b.fill(3, 10, 0xab);
        assert_eq!(b.read_u8(2), 0);
        assert_eq!(b.read_u8(3), 0xab);
        assert_eq!(b.read_u8(12), 0xab);
        assert_eq!(b.read_u8(13), 0);
    }

    #[test]
    fn allocation_is_zeroed_aligned_and_freed_on_drop() {
        let p = FakePlatform::new();
        {
            let b = DmaBuf::alloc(&p, 4096, 4096).unwrap();
            assert_eq!(b.iova() % 4096, 0);
            assert_ne!(
                b.iova() as usize,
                b.cpu_addr(),
                "the fake IOVA differs from the CPU address"
            );
            let mut z = [0xffu8; 64];
            b.read_bytes(4000, &mut z);
            assert_eq!(z, [0; 64]);
            assert_eq!(p.dma.live_allocations(), 1);
        }
        assert_eq!(p.dma.live_allocations(), 0);
        assert_eq!(
            DmaBuf::alloc(&p, 0, 8).unwrap_err(),
            DmaError::InvalidRequest
        );
        assert_eq!(
            DmaBuf::alloc(&p, 8, 3).unwrap_err(),
            DmaError::InvalidRequest
        );
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn out_of_bounds_read_panics() {
        let p = FakePlatform::new();
        let b = DmaBuf::alloc(&p, 64, 8).unwrap();
        b.read_be32(64);
    }

    #[test]
    #[should_panic(expected = "misaligned")]
    fn misaligned_read_panics() {
        let p = FakePlatform::new();
        let b = DmaBuf::alloc(&p, 64, 8).unwrap();
        b.read_be64(4);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn copy_past_the_end_panics() {
        let p = FakePlatform::new();
        let mut b = DmaBuf::alloc(&p, 64, 8).unwrap();
        b.write_bytes(60, &[0; 8]);
    }
}
