//! The bare-metal platform: what a user of uhca without an operating system provides, and
//! the part of this crate to copy. It implements `uhca_hal`'s platform traits for one PCI
//! function on x86_64 with an identity map (virtual = physical) and no IOMMU (the device's
//! IOVA = physical address):
//!
//! * [`Bar`]: BAR0 as volatile loads and stores through a raw pointer, bounds-checked;
//! * [`Dma`]: coherent memory from a physical page pool ([`DMA_POOL`]), `iova = address`
//!   (x86 DMA is cache-coherent); `map` is the identity;
//! * [`HostMem`]: the driver's bookkeeping from a second pool ([`HOST_POOL`]);
//! * [`PciConfig`]: the first 256 bytes through ports 0xCF8/0xCFC ([`crate::pci`]);
//! * [`Clock`]: the HPET's main counter (its period read from the HPET), a busy-wait delay.
//!
//! Every wait in the driver (firmware ready, each command, each page request) takes its
//! timeout from this clock, so a device that stops answering gives an error, not a hang.

use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use uhca_hal::HostMem;
use uhca_hal::platform::{Bar, Clock, ConfigError, Dma, DmaError, DmaRegion, PciConfig};

use crate::pci::{self, Bdf};

// ---------------------------------------------------------------------------------------
// Memory pools

/// Granules a pool tracks at most (one bit each).
const POOL_BITS: usize = 65536;

struct PoolState {
    base: usize,
    granules: usize,
    used: usize,
    peak: usize,
    map: [u64; POOL_BITS / 64],
}

/// A first-fit allocator over one physical range, in granules of a fixed size, with a bit
/// per granule; it counts the granules in use and their peak (what the driver needed).
pub struct Pool {
    granule: usize,
    lock: AtomicBool,
    state: UnsafeCell<PoolState>,
}

// SAFETY: `state` is only reached with `lock` held (`with`).
unsafe impl Sync for Pool {}

impl Pool {
    /// A pool of `granule`-byte granules (a power of two), empty until [`Pool::init`].
    pub const fn new(granule: usize) -> Self {
        Pool {
            granule,
            lock: AtomicBool::new(false),
            state: UnsafeCell::new(PoolState {
                base: 0,
                granules: 0,
                used: 0,
                peak: 0,
                map: [0; POOL_BITS / 64],
            }),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut PoolState) -> R) -> R {
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        // SAFETY: the lock is held, so this is the only reference to the state.
        let r = f(unsafe { &mut *self.state.get() });
        self.lock.store(false, Ordering::Release);
        r
    }

    /// Hands the pool `len` bytes of RAM at `base` (identity-mapped, used by nothing else).
    /// Returns the bytes it will manage (at most `POOL_BITS` granules).
    ///
    /// # Safety
    ///
    /// `base..base + len` must be RAM this program owns and never touches otherwise.
    pub unsafe fn init(&self, base: usize, len: usize) -> usize {
        let g = self.granule;
        let start = base.next_multiple_of(g);
        let granules = ((base + len - start) / g).min(POOL_BITS);
        self.with(|s| {
            s.base = start;
            s.granules = granules;
        });
        granules * g
    }

    /// `len` zeroed bytes aligned to `align`, or `None` when no free run is long enough.
    pub fn alloc(&self, len: usize, align: usize) -> Option<NonNull<u8>> {
        if len == 0 || !align.is_power_of_two() {
            return None;
        }
        let g = self.granule;
        let n = len.div_ceil(g);
        let step = (align / g).max(1);
        let p = self.with(|s| {
            let free = |s: &PoolState, i: usize| s.map[i / 64] & (1 << (i % 64)) == 0;
            // First index whose address is `align`-aligned.
            let first = (s.base.next_multiple_of(align) - s.base) / g;
            let mut i = first;
            while i + n <= s.granules {
                match (i..i + n).find(|&j| !free(s, j)) {
                    None => {
                        for j in i..i + n {
                            s.map[j / 64] |= 1 << (j % 64);
                        }
                        s.used += n;
                        s.peak = s.peak.max(s.used);
                        return Some(s.base + i * g);
                    }
                    Some(j) => i = (j + 1).next_multiple_of(step).max(i + step),
                }
            }
            None
        })?;
        // SAFETY: the granules were free, so nothing else uses these bytes; zeroed as the
        // DMA contract asks (and harmless for host memory).
        unsafe { core::ptr::write_bytes(p as *mut u8, 0, n * g) };
        NonNull::new(p as *mut u8)
    }

    /// Gives back `len` bytes at `p`, as [`Pool::alloc`] handed them out.
    pub fn free(&self, p: NonNull<u8>, len: usize) {
        let g = self.granule;
        let n = len.div_ceil(g);
        self.with(|s| {
            let a = p.as_ptr() as usize;
            assert!(
                a >= s.base && (a - s.base).is_multiple_of(g),
                "pool: free of a foreign pointer"
            );
            let i = (a - s.base) / g;
            assert!(i + n <= s.granules, "pool: free beyond the pool");
            for j in i..i + n {
                assert!(s.map[j / 64] & (1 << (j % 64)) != 0, "pool: double free");
                s.map[j / 64] &= !(1 << (j % 64));
            }
            s.used -= n;
        });
    }

    /// Bytes in use now.
    pub fn used(&self) -> usize {
        self.with(|s| s.used) * self.granule
    }

    /// The most bytes in use at once so far.
    pub fn peak(&self) -> usize {
        self.with(|s| s.peak) * self.granule
    }

    /// Forgets the peak (the next one counts from what is in use now).
    pub fn reset_peak(&self) {
        self.with(|s| s.peak = s.used);
    }
}

/// Coherent DMA memory, in 4 KiB pages (the device's page size).
pub static DMA_POOL: Pool = Pool::new(4096);
/// The driver's host memory (work-request tables, shared counters), in 64-byte granules.
pub static HOST_POOL: Pool = Pool::new(64);

// ---------------------------------------------------------------------------------------
// Clock: the HPET

const HPET_BASE: usize = 0xfed0_0000;
static HPET_FS_PER_TICK: AtomicU64 = AtomicU64::new(0);
static HPET_START: AtomicU64 = AtomicU64::new(0);

fn hpet_reg(off: usize) -> *mut u64 {
    (HPET_BASE + off) as *mut u64
}

/// Starts the HPET's main counter; returns its period in femtoseconds.
pub fn clock_init() -> u64 {
    // SAFETY: the HPET's registers at 0xfed00000 are identity-mapped uncached by the boot
    // page tables; these are plain 64-bit register accesses.
    let fs = unsafe {
        let cap = hpet_reg(0).read_volatile();
        let conf = hpet_reg(0x10).read_volatile();
        hpet_reg(0x10).write_volatile(conf | 1);
        cap >> 32
    };
    assert!(
        fs != 0 && fs <= 100_000_000,
        "no HPET at {HPET_BASE:#x} (period {fs} fs)"
    );
    HPET_FS_PER_TICK.store(fs, Ordering::Relaxed);
    HPET_START.store(hpet_ticks(), Ordering::Relaxed);
    fs
}

fn hpet_ticks() -> u64 {
    // SAFETY: as in `clock_init`; the main counter is read-only here.
    unsafe { hpet_reg(0xf0).read_volatile() }
}

/// Nanoseconds since [`clock_init`].
pub fn now_ns() -> u64 {
    let t = hpet_ticks().wrapping_sub(HPET_START.load(Ordering::Relaxed));
    (u128::from(t) * u128::from(HPET_FS_PER_TICK.load(Ordering::Relaxed)) / 1_000_000) as u64
}

// ---------------------------------------------------------------------------------------
// The platform of one function

/// One mlx5 PCI function on bare metal.
pub struct BareMetal {
    bdf: Bdf,
    bar: *mut u8,
    bar_len: usize,
    dma_live: AtomicUsize,
}

// SAFETY: the BAR pointer is only used for volatile MMIO (the device serialises accesses);
// everything else is immutable or atomic, and the pools lock.
unsafe impl Send for BareMetal {}
// SAFETY: as above.
unsafe impl Sync for BareMetal {}

impl BareMetal {
    /// The platform of the function at `bdf`, whose BAR0 is `bar_len` bytes at physical
    /// `bar_addr`.
    ///
    /// # Safety
    ///
    /// `bar_addr..bar_addr + bar_len` must be that function's BAR0, mapped uncached at the
    /// same virtual address, and used by nothing else.
    pub unsafe fn new(bdf: Bdf, bar_addr: u64, bar_len: u64) -> Self {
        BareMetal {
            bdf,
            bar: bar_addr as *mut u8,
            bar_len: bar_len as usize,
            dma_live: AtomicUsize::new(0),
        }
    }

    /// BAR0's physical address and length.
    pub fn bar0(&self) -> (u64, u64) {
        (self.bar as u64, self.bar_len as u64)
    }

    /// The function's address.
    pub fn bdf(&self) -> Bdf {
        self.bdf
    }

    /// Bytes of coherent DMA memory this function's driver holds now.
    pub fn dma_live(&self) -> usize {
        self.dma_live.load(Ordering::Relaxed)
    }

    fn check(&self, offset: usize, width: usize) {
        assert!(
            offset.is_multiple_of(width)
                && offset.checked_add(width).is_some_and(|e| e <= self.bar_len),
            "BAR0 access of {width} B at {offset:#x} out of bounds or misaligned"
        );
    }
}

// SAFETY: each in-bounds access is one volatile access of its width through a raw pointer
// (never a reference); out-of-bounds or misaligned offsets panic before touching memory.
unsafe impl Bar for BareMetal {
    fn bar_len(&self) -> usize {
        self.bar_len
    }
    fn read32(&self, offset: usize) -> u32 {
        self.check(offset, 4);
        // SAFETY: checked to lie in BAR0, aligned; BAR0 is mapped uncached (`new`).
        unsafe { (self.bar.add(offset) as *const u32).read_volatile() }
    }
    fn write32(&self, offset: usize, value: u32) {
        self.check(offset, 4);
        // SAFETY: as in `read32`.
        unsafe { (self.bar.add(offset) as *mut u32).write_volatile(value) }
    }
    fn read64(&self, offset: usize) -> u64 {
        self.check(offset, 8);
        // SAFETY: as in `read32`.
        unsafe { (self.bar.add(offset) as *const u64).read_volatile() }
    }
    fn write64(&self, offset: usize, value: u64) {
        self.check(offset, 8);
        // SAFETY: as in `read32`.
        unsafe { (self.bar.add(offset) as *mut u64).write_volatile(value) }
    }
}

// SAFETY: regions come zeroed from `DMA_POOL` (RAM used by nothing else, not aliased),
// aligned to `align` in CPU address and IOVA alike (they are equal: no IOMMU, identity
// map); x86 DMA snoops the caches, so the memory is coherent. `map` returns the physical
// address of caller memory, which the device reaches as-is (no IOMMU to program).
unsafe impl Dma for BareMetal {
    fn alloc_coherent(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        if len == 0 || !align.is_power_of_two() {
            return Err(DmaError::InvalidRequest);
        }
        let cpu = DMA_POOL
            .alloc(len, align.max(4096))
            .ok_or(DmaError::OutOfMemory)?;
        self.dma_live
            .fetch_add(len.next_multiple_of(4096), Ordering::Relaxed);
        Ok(DmaRegion {
            cpu,
            iova: cpu.as_ptr() as u64,
            len,
        })
    }

    unsafe fn free_coherent(&self, region: DmaRegion) {
        self.dma_live
            .fetch_sub(region.len.next_multiple_of(4096), Ordering::Relaxed);
        DMA_POOL.free(region.cpu, region.len);
    }

    unsafe fn map(&self, cpu: NonNull<u8>, _len: usize) -> Result<u64, DmaError> {
        Ok(cpu.as_ptr() as u64)
    }

    unsafe fn unmap(&self, _iova: u64, _len: usize) -> Result<(), DmaError> {
        Ok(())
    }
}

// SAFETY: allocations come from `HOST_POOL`, aligned, unaliased, valid until freed.
unsafe impl HostMem for BareMetal {
    fn alloc_host(&self, len: usize, align: usize) -> Result<NonNull<u8>, DmaError> {
        HOST_POOL.alloc(len, align).ok_or(DmaError::OutOfMemory)
    }

    unsafe fn free_host(&self, ptr: NonNull<u8>, len: usize, _align: usize) {
        HOST_POOL.free(ptr, len);
    }
}

impl PciConfig for BareMetal {
    fn config_read8(&self, offset: u16) -> Result<u8, ConfigError> {
        let o = u8::try_from(offset).map_err(|_| ConfigError::OutOfRange)?;
        Ok(pci::read8(self.bdf, o))
    }
    fn config_read16(&self, offset: u16) -> Result<u16, ConfigError> {
        let o = u8::try_from(offset).map_err(|_| ConfigError::OutOfRange)?;
        if o % 2 != 0 || o == 255 {
            return Err(ConfigError::OutOfRange);
        }
        Ok(pci::read16(self.bdf, o))
    }
    fn config_read32(&self, offset: u16) -> Result<u32, ConfigError> {
        let o = u8::try_from(offset).map_err(|_| ConfigError::OutOfRange)?;
        if o % 4 != 0 {
            return Err(ConfigError::OutOfRange);
        }
        Ok(pci::read32(self.bdf, o))
    }
    fn config_write16(&self, offset: u16, value: u16) -> Result<(), ConfigError> {
        let o = u8::try_from(offset).map_err(|_| ConfigError::OutOfRange)?;
        if o % 2 != 0 || o == 255 {
            return Err(ConfigError::OutOfRange);
        }
        pci::write16(self.bdf, o, value);
        Ok(())
    }
    fn config_write32(&self, offset: u16, value: u32) -> Result<(), ConfigError> {
        let o = u8::try_from(offset).map_err(|_| ConfigError::OutOfRange)?;
        if o % 4 != 0 {
            return Err(ConfigError::OutOfRange);
        }
        pci::write32(self.bdf, o, value);
        Ok(())
    }
}

impl Clock for BareMetal {
    fn now_ns(&self) -> u64 {
        now_ns()
    }
    fn delay_us(&self, us: u32) {
        let end = now_ns() + u64::from(us) * 1000;
        while now_ns() < end {
            core::hint::spin_loop();
        }
    }
}
