//! A memory-backed fake platform for tests and benchmarks (feature `testing`, needs `std`).
//!
//! * [`FakeBar`]: BAR0 as plain memory behind a mutex, with a log of every write (as the
//!   big-endian register value the device would see), read-only bits, and the command
//!   doorbell bits accumulated for a fake device to pick up.
//! * [`FakeDma`]: heap allocations whose IOVA deliberately differs from the CPU address,
//!   with a translation table a fake device uses, and accounting of live allocations.
//! * A virtual clock: [`Clock::delay_us`] advances it and then runs a hook, which is where
//!   a fake device gets to run (synchronously, or by handing a tick to its own thread and
//!   waiting for it), so device accesses never race with the driver's.
//!
//! This is not the device model (`uhca-mock`); it only serves the HAL's own tests.

use crate::platform::{Bar, Clock, ConfigError, Dma, DmaError, DmaRegion, PciConfig};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use std::boxed::Box;
use std::sync::Mutex;
use std::vec::Vec;
use uhca_fwif::Field;
use uhca_fwif::init_seg::initial_seg;

/// Size of the fake BAR0.
pub const FAKE_BAR_LEN: usize = 0x10000;
/// Offset of the UAR page tests use in the fake BAR.
pub const FAKE_UAR: usize = 0x4000;

struct BarInner {
    mem: Vec<u8>,
    log: Vec<(usize, u64)>,
    ro: Vec<(usize, u32)>,
    cmd_doorbell: u32,
}

/// BAR0 as memory.
pub struct FakeBar {
    inner: Mutex<BarInner>,
}

impl FakeBar {
    fn new() -> Self {
        FakeBar {
            inner: Mutex::new(BarInner {
                mem: std::vec![0; FAKE_BAR_LEN],
                log: Vec::new(),
                // log_cmdq_size and log_cmdq_stride are read-only.
                ro: std::vec![(0x14, 0xff)],
                cmd_doorbell: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BarInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets a field of the initialization segment directly (as the device would), without
    /// logging it.
    pub fn set_field(&self, f: Field, value: u32) {
        let off = f.dword_byte_offset();
        let mut g = self.lock();
        let old = u32::from_be_bytes(g.mem[off..off + 4].try_into().unwrap_or([0; 4]));
        g.mem[off..off + 4].copy_from_slice(&f.into_dword(old, value).to_be_bytes());
    }

    /// Sets a field of the health buffer.
    pub fn set_health_field(&self, f: Field, value: u32) {
        self.set_field(
            Field {
                name: f.name,
                bit_offset: initial_seg::health_buffer.bit_offset + f.bit_offset,
                bit_width: f.bit_width,
            },
            value,
        );
    }

    /// Every write so far: (offset, register value as big-endian), oldest first.
    pub fn write_log(&self) -> Vec<(usize, u64)> {
        self.lock().log.clone()
    }

    /// Clears the write log.
    pub fn clear_log(&self) {
        self.lock().log.clear();
    }

    /// Takes the command-doorbell bits written since the last call.
    pub fn take_cmd_doorbell(&self) -> u32 {
        core::mem::take(&mut self.lock().cmd_doorbell)
    }

    fn check(off: usize, w: usize) {
        assert!(
            off.is_multiple_of(w) && off + w <= FAKE_BAR_LEN,
            "BAR access out of bounds or misaligned"
        );
    }
}

// SAFETY: accesses go to a Vec behind a mutex (no references to device memory leave this
// type), bounds and alignment are checked (panic otherwise), and the mutex makes it
// thread-safe; each access is one locked read or write, so it never tears.
unsafe impl Bar for FakeBar {
    fn bar_len(&self) -> usize {
        FAKE_BAR_LEN
    }
    fn read32(&self, offset: usize) -> u32 {
        Self::check(offset, 4);
        let g = self.lock();
        u32::from_ne_bytes(g.mem[offset..offset + 4].try_into().unwrap_or([0; 4]))
    }
    fn write32(&self, offset: usize, value: u32) {
        Self::check(offset, 4);
        let mut g = self.lock();
        let ro = g.ro.iter().find(|r| r.0 == offset).map_or(0, |r| r.1);
        let old = u32::from_be_bytes(g.mem[offset..offset + 4].try_into().unwrap_or([0; 4]));
        let new = (u32::from_be(value) & !ro) | (old & ro);
        g.mem[offset..offset + 4].copy_from_slice(&new.to_be_bytes());
        g.log.push((offset, u32::from_be(value) as u64));
        if offset == initial_seg::command_doorbell_vector.dword_byte_offset() {
            g.cmd_doorbell |= u32::from_be(value);
        }
    }
    fn read64(&self, offset: usize) -> u64 {
        Self::check(offset, 8);
        let g = self.lock();
        u64::from_ne_bytes(g.mem[offset..offset + 8].try_into().unwrap_or([0; 8]))
    }
    fn write64(&self, offset: usize, value: u64) {
        Self::check(offset, 8);
        let mut g = self.lock();
        g.mem[offset..offset + 8].copy_from_slice(&value.to_ne_bytes());
        g.log.push((offset, u64::from_be(value)));
    }
}

struct Alloc {
    cpu: NonNull<u8>,
    iova: u64,
    len: usize,
    align: usize,
    coherent: bool,
}

/// DMA memory from the heap, with IOVAs that differ from CPU addresses.
pub struct FakeDma {
    allocs: Mutex<Vec<Alloc>>,
    next_iova: AtomicU64,
}

// SAFETY: an Alloc describes memory owned by the FakeDma; it is only dereferenced by
// FakeDma's device accessors under the documented no-concurrent-access rule.
unsafe impl Send for Alloc {}

impl FakeDma {
    fn new() -> Self {
        FakeDma {
            allocs: Mutex::new(Vec::new()),
            next_iova: AtomicU64::new(0x10_0000_0000),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Alloc>> {
        self.allocs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take_iova(&self, len: usize, align: usize) -> u64 {
        let align = align.max(4096) as u64;
        let span = (len as u64).div_ceil(4096) * 4096 + 4096; // one guard page
        let mut cur = self.next_iova.load(Ordering::Relaxed);
        loop {
            let iova = cur.div_ceil(align) * align;
            match self.next_iova.compare_exchange(
                cur,
                iova + span,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return iova,
                Err(v) => cur = v,
            }
        }
    }

    /// Coherent allocations not yet freed.
    pub fn live_allocations(&self) -> usize {
        self.lock().iter().filter(|a| a.coherent).count()
    }

    /// Translates a device address range to a CPU pointer, as a fake device's IOMMU would;
    /// `None` if the range is not inside one allocation or mapping.
    pub fn translate(&self, iova: u64, len: usize) -> Option<*mut u8> {
        self.lock().iter().find_map(|a| {
            (iova >= a.iova && iova + len as u64 <= a.iova + a.len as u64)
                .then(|| a.cpu.as_ptr().wrapping_add((iova - a.iova) as usize))
        })
    }

    /// Reads device memory as the device would (for fake devices and tests).
    ///
    /// # Panics
    ///
    /// If the range is not mapped.
    pub fn device_read(&self, iova: u64, dst: &mut [u8]) {
        let p = self
            .translate(iova, dst.len())
            .expect("device read of unmapped IOVA");
        // SAFETY: the range lies inside a live allocation (checked by `translate`); the
        // callers only do this while the driver is not accessing the memory (the fake
        // device runs inside `delay_us` or between driver calls).
        unsafe { core::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) };
    }

    /// Writes device memory as the device would.
    ///
    /// # Panics
    ///
    /// If the range is not mapped.
    pub fn device_write(&self, iova: u64, src: &[u8]) {
        let p = self
            .translate(iova, src.len())
            .expect("device write of unmapped IOVA");
        // SAFETY: as in `device_read`.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
    }
}

impl Drop for FakeDma {
    fn drop(&mut self) {
        // Free what tests leaked on purpose, so leak checkers stay quiet.
        for a in self.lock().drain(..) {
            if a.coherent
                && let Ok(layout) = std::alloc::Layout::from_size_align(a.len, a.align)
            {
                // SAFETY: allocated with this layout in `alloc_coherent`, not freed yet.
                unsafe { std::alloc::dealloc(a.cpu.as_ptr(), layout) };
            }
        }
    }
}

// SAFETY: allocations come from the global allocator with the requested alignment
// (IOVAs are aligned too), zeroed, never aliased; IOVA ranges never overlap (a bump
// allocator with guard pages); the mutex makes the methods thread-safe.
unsafe impl Dma for FakeDma {
    fn alloc_coherent(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        let layout = std::alloc::Layout::from_size_align(len, align)
            .map_err(|_| DmaError::InvalidRequest)?;
        if len == 0 {
            return Err(DmaError::InvalidRequest);
        }
        // SAFETY: the layout has a non-zero size.
        let cpu = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
            .ok_or(DmaError::OutOfMemory)?;
        let iova = self.take_iova(len, align);
        self.lock().push(Alloc {
            cpu,
            iova,
            len,
            align,
            coherent: true,
        });
        Ok(DmaRegion { cpu, iova, len })
    }

    unsafe fn free_coherent(&self, region: DmaRegion) {
        let mut g = self.lock();
        let i = g
            .iter()
            .position(|a| a.coherent && a.iova == region.iova && a.cpu == region.cpu)
            .expect("free of a region this FakeDma did not allocate");
        let a = g.swap_remove(i);
        if let Ok(layout) = std::alloc::Layout::from_size_align(a.len, a.align) {
            // SAFETY: allocated with this layout, removed from the table so freed once.
            unsafe { std::alloc::dealloc(a.cpu.as_ptr(), layout) };
        }
    }

    unsafe fn map(&self, cpu: NonNull<u8>, len: usize) -> Result<u64, DmaError> {
        if len == 0 {
            return Err(DmaError::InvalidRequest);
        }
        let iova = self.take_iova(len, 4096) + (cpu.as_ptr() as u64 % 4096);
        self.lock().push(Alloc {
            cpu,
            iova,
            len,
            align: 1,
            coherent: false,
        });
        Ok(iova)
    }

    unsafe fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError> {
        let mut g = self.lock();
        let i = g
            .iter()
            .position(|a| !a.coherent && a.iova == iova && a.len == len)
            .ok_or(DmaError::NotMapped)?;
        g.swap_remove(i);
        Ok(())
    }
}

/// The hook [`FakePlatform`] runs after each delay: (platform, virtual time in ns).
pub type DelayHook = Box<dyn FnMut(&FakePlatform, u64) + Send>;

/// The virtual clock.
pub struct FakeClock {
    now: AtomicU64,
    hook: Mutex<Option<DelayHook>>,
}

impl FakeClock {
    /// Virtual time in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// A fake platform: [`FakeBar`], [`FakeDma`], a virtual clock and an empty config space.
pub struct FakePlatform {
    /// BAR0.
    pub bar: FakeBar,
    /// DMA memory.
    pub dma: FakeDma,
    /// Virtual time.
    pub clock: FakeClock,
}

impl Default for FakePlatform {
    fn default() -> Self {
        Self::new()
    }
}

impl FakePlatform {
    /// A fresh platform: BAR all zeros, no allocations, time 0.
    pub fn new() -> Self {
        FakePlatform {
            bar: FakeBar::new(),
            dma: FakeDma::new(),
            clock: FakeClock {
                now: AtomicU64::new(0),
                hook: Mutex::new(None),
            },
        }
    }

    /// Sets the hook run after every `delay_us` (replacing any previous one).
    pub fn on_delay(&self, hook: impl FnMut(&FakePlatform, u64) + Send + 'static) {
        *self.clock.hook.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(hook));
    }

    /// Removes the delay hook.
    pub fn clear_on_delay(&self) {
        *self.clock.hook.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

// SAFETY: forwards to FakeBar.
unsafe impl Bar for FakePlatform {
    fn bar_len(&self) -> usize {
        self.bar.bar_len()
    }
    fn read32(&self, offset: usize) -> u32 {
        self.bar.read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        self.bar.write32(offset, value)
    }
    fn read64(&self, offset: usize) -> u64 {
        self.bar.read64(offset)
    }
    fn write64(&self, offset: usize, value: u64) {
        self.bar.write64(offset, value)
    }
}

// SAFETY: forwards to FakeDma.
unsafe impl Dma for FakePlatform {
    fn alloc_coherent(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        self.dma.alloc_coherent(len, align)
    }
    unsafe fn free_coherent(&self, region: DmaRegion) {
        // SAFETY: the caller's obligations are those of FakeDma::free_coherent.
        unsafe { self.dma.free_coherent(region) }
    }
    unsafe fn map(&self, cpu: NonNull<u8>, len: usize) -> Result<u64, DmaError> {
        // SAFETY: the caller's obligations are those of FakeDma::map.
        unsafe { self.dma.map(cpu, len) }
    }
    unsafe fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError> {
        // SAFETY: the caller's obligations are those of FakeDma::unmap.
        unsafe { self.dma.unmap(iova, len) }
    }
}

// SAFETY: host memory from the global allocator (the trait's default bodies);
// host memory is never part of the fake device.
unsafe impl crate::HostMem for FakePlatform {}

impl PciConfig for FakePlatform {
    fn config_read8(&self, offset: u16) -> Result<u8, ConfigError> {
        if offset < 256 {
            Ok(0)
        } else {
            Err(ConfigError::OutOfRange)
        }
    }
    fn config_read16(&self, offset: u16) -> Result<u16, ConfigError> {
        if offset < 255 && offset.is_multiple_of(2) {
            Ok(0)
        } else {
            Err(ConfigError::OutOfRange)
        }
    }
    fn config_read32(&self, offset: u16) -> Result<u32, ConfigError> {
        if offset < 253 && offset.is_multiple_of(4) {
            Ok(0)
        } else {
            Err(ConfigError::OutOfRange)
        }
    }
    fn config_write16(&self, offset: u16, _value: u16) -> Result<(), ConfigError> {
        if offset < 255 && offset.is_multiple_of(2) {
            Ok(())
        } else {
            Err(ConfigError::OutOfRange)
        }
    }
    fn config_write32(&self, offset: u16, _value: u32) -> Result<(), ConfigError> {
        if offset < 253 && offset.is_multiple_of(4) {
            Ok(())
        } else {
            Err(ConfigError::OutOfRange)
        }
    }
}

impl Clock for FakePlatform {
    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }
    fn delay_us(&self, us: u32) {
        let now = self.clock.now.fetch_add(us as u64 * 1000, Ordering::SeqCst) + us as u64 * 1000;
        // Take the hook out while it runs, so it may use the platform (but not re-enter
        // delay_us with a hook of its own).
        let hook = self
            .clock
            .hook
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(mut h) = hook {
            h(self, now);
            let mut slot = self.clock.hook.lock().unwrap_or_else(|e| e.into_inner());
            if slot.is_none() {
                *slot = Some(h);
            }
        }
    }
}
