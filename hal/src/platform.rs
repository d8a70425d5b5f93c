//! The platform seam: everything hardware-specific that the HAL and the driver need.
//!
//! A platform provides access to one PCI function: its BAR0 ([`Bar`]), coherent DMA memory
//! and mappings of caller buffers ([`Dma`]), host memory the device never reaches for the
//! driver's bookkeeping ([`HostMem`]), its configuration space ([`PciConfig`]) and a
//! monotonic clock with a delay ([`Clock`]). The VFIO platform implements them over a real
//! device; the mock implements them over a model of one. Code generic over [`Platform`]
//! compiles to direct volatile accesses on real hardware.
//!
//! Traits whose implementers carry memory-safety obligations are `unsafe trait`s; each
//! states its obligations under "Implementation safety".

use core::ptr::NonNull;

pub use crate::host::HostMem;

/// Volatile access to a memory BAR (BAR0 of an mlx5 function: the initialization segment,
/// then UAR pages).
///
/// Offsets are bytes from the start of the BAR. The primitive accesses move a value in host
/// byte order exactly as a volatile load or store of that width would; the `*_be` helpers
/// convert from and to the big-endian order every mlx5 register uses.
///
/// # Implementation safety
///
/// * Every access at an in-bounds, naturally aligned offset must be a single volatile access
///   of the stated width (no tearing, no merging with other accesses, no elision).
/// * The implementation must never create a Rust reference (`&`/`&mut`) into the BAR.
/// * An out-of-bounds or misaligned offset must panic (it is a driver bug), never touch
///   memory outside the BAR.
/// * Accesses through `&self` from several threads must be sound (the hardware serialises
///   them; a model must synchronise internally).
pub unsafe trait Bar {
    /// Length of the BAR in bytes.
    fn bar_len(&self) -> usize;
    /// A 32-bit volatile read at `offset` (4-byte aligned).
    fn read32(&self, offset: usize) -> u32;
    /// A 32-bit volatile write at `offset` (4-byte aligned).
    fn write32(&self, offset: usize, value: u32);
    /// A 64-bit volatile read at `offset` (8-byte aligned).
    fn read64(&self, offset: usize) -> u64;
    /// A 64-bit volatile write at `offset` (8-byte aligned). Doorbells rely on it being one
    /// 8-byte transaction.
    fn write64(&self, offset: usize, value: u64);

    /// Reads a big-endian 32-bit register.
    #[inline(always)]
    fn read_be32(&self, offset: usize) -> u32 {
        u32::from_be(self.read32(offset))
    }
    /// Writes a big-endian 32-bit register.
    #[inline(always)]
    fn write_be32(&self, offset: usize, value: u32) {
        self.write32(offset, value.to_be())
    }
    /// Reads a big-endian 64-bit register.
    #[inline(always)]
    fn read_be64(&self, offset: usize) -> u64 {
        u64::from_be(self.read64(offset))
    }
    /// Writes a big-endian 64-bit register (the UAR doorbells).
    #[inline(always)]
    fn write_be64(&self, offset: usize, value: u64) {
        self.write64(offset, value.to_be())
    }
}

/// A region of coherent DMA memory: where the CPU sees it and where the device sees it.
///
/// It is a plain description; ownership and access go through the HAL's DMA buffer types,
/// which never hand out references into the memory (the device may write it at any time).
#[derive(Debug)]
pub struct DmaRegion {
    /// CPU address of the first byte.
    pub cpu: NonNull<u8>,
    /// I/O virtual address of the first byte, as the device must use it.
    pub iova: u64,
    /// Length in bytes.
    pub len: usize,
}

// SAFETY: a DmaRegion is an address range, not a reference; the HAL's buffer types decide
// who may access the memory and how (volatile accesses only).
unsafe impl Send for DmaRegion {}
// SAFETY: as for Send; sharing the description shares no access by itself.
unsafe impl Sync for DmaRegion {}

/// Why a DMA request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DmaError {
    /// No memory (or no IOVA space) left for the request.
    OutOfMemory,
    /// The size or alignment is zero, not a power of two where one is needed, or too large.
    InvalidRequest,
    /// The address range is not mapped (unmap of something never mapped).
    NotMapped,
    /// The platform refused the mapping (for VFIO: the ioctl failed; the code is the errno).
    MappingFailed(i32),
}

impl core::fmt::Display for DmaError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DmaError::OutOfMemory => f.write_str("out of DMA memory or IOVA space"),
            DmaError::InvalidRequest => f.write_str("invalid DMA size or alignment"),
            DmaError::NotMapped => f.write_str("address range not mapped for DMA"),
            DmaError::MappingFailed(e) => write!(f, "DMA mapping failed (errno {e})"),
        }
    }
}

impl core::error::Error for DmaError {}

/// DMA memory for one device: coherent allocations the driver shares with the device
/// (queues, mailboxes, doorbell records, firmware pages), and mappings of caller buffers
/// (memory regions).
///
/// # Implementation safety
///
/// * `alloc_coherent` returns memory that is valid for volatile reads and writes of `len`
///   bytes at `cpu` until it is passed to `free_coherent`, aligned to at least `align` in
///   both the CPU address and the IOVA, zero-filled, not aliased by any other allocation,
///   and reachable by the device at `iova` for the same `len` bytes.
/// * Coherent means no cache maintenance is needed: ordering is the only concern, and the
///   HAL's barriers handle it.
/// * `map` makes `len` bytes at `cpu` reachable by the device at the returned IOVA until
///   `unmap`; it must not alias any other live mapping's IOVA range.
/// * Methods take `&self` and must be sound when called from several threads.
pub unsafe trait Dma {
    /// Allocates zeroed coherent memory of `len` bytes aligned to `align` (a power of two).
    fn alloc_coherent(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError>;

    /// Frees an allocation.
    ///
    /// # Safety
    ///
    /// `region` must come from `alloc_coherent` of this platform and not have been freed; the
    /// device must no longer access it (the object using it is destroyed or the device is
    /// disabled), and no pointer derived from it may be used afterwards.
    unsafe fn free_coherent(&self, region: DmaRegion);

    /// Makes a caller's buffer reachable by the device and returns its IOVA.
    ///
    /// # Safety
    ///
    /// `cpu..cpu+len` must be valid memory that stays allocated (and is not moved) until
    /// `unmap` is called for the returned IOVA; the caller accepts that the device may read
    /// and write it while it is mapped.
    unsafe fn map(&self, cpu: NonNull<u8>, len: usize) -> Result<u64, DmaError>;

    /// Removes a mapping made by `map`.
    ///
    /// # Safety
    ///
    /// `iova` and `len` must be exactly those of a live mapping, and the device must no
    /// longer use it (its memory key is destroyed).
    unsafe fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError>;
}

/// Why a configuration-space access failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The offset is outside the configuration space or misaligned for the width.
    OutOfRange,
    /// The platform's access failed (for VFIO: `pread`/`pwrite` on the config region; the
    /// code is the errno).
    Io(i32),
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigError::OutOfRange => f.write_str("PCI config access out of range"),
            ConfigError::Io(e) => write!(f, "PCI config access failed (errno {e})"),
        }
    }
}

impl core::error::Error for ConfigError {}

/// PCI configuration space of the function, in the PCI's little-endian order (values are
/// returned in host order).
pub trait PciConfig {
    /// Reads 8 bits.
    fn config_read8(&self, offset: u16) -> Result<u8, ConfigError>;
    /// Reads 16 bits (2-byte aligned).
    fn config_read16(&self, offset: u16) -> Result<u16, ConfigError>;
    /// Reads 32 bits (4-byte aligned).
    fn config_read32(&self, offset: u16) -> Result<u32, ConfigError>;
    /// Writes 16 bits (2-byte aligned).
    fn config_write16(&self, offset: u16, value: u16) -> Result<(), ConfigError>;
    /// Writes 32 bits (4-byte aligned).
    fn config_write32(&self, offset: u16, value: u32) -> Result<(), ConfigError>;
}

/// A monotonic clock and a delay. Every wait in uhca is bounded by a timeout measured on it.
pub trait Clock {
    /// Nanoseconds since an arbitrary fixed point; never decreases.
    fn now_ns(&self) -> u64;
    /// Waits at least `us` microseconds (a model with a virtual clock advances it). Must
    /// return: callers rely on it to make progress towards their timeouts.
    fn delay_us(&self, us: u32);
}

/// Everything the HAL needs from one device's platform.
///
/// A platform is a handle: `Clone` must be cheap and every clone must reach the same device
/// (a shared reference, or an `Arc` of the platform's state as `uhca-vfio`'s and the
/// mock's platforms are). The driver's objects each keep a clone, so they own the
/// platform and carry no lifetime.
pub trait Platform: Bar + Dma + HostMem + PciConfig + Clock + Clone {}

impl<T: Bar + Dma + HostMem + PciConfig + Clock + Clone> Platform for T {}

// A shared reference to a platform is a platform handle: the HAL's owners (DMA buffers,
// the command queue) keep a handle so they can free memory and reach the device, and
// `&P` is the simplest one.

// SAFETY: every method forwards to `T`, which upholds the obligations.
unsafe impl<T: Bar + ?Sized> Bar for &T {
    #[inline(always)]
    fn bar_len(&self) -> usize {
        (**self).bar_len()
    }
    #[inline(always)]
    fn read32(&self, offset: usize) -> u32 {
        (**self).read32(offset)
    }
    #[inline(always)]
    fn write32(&self, offset: usize, value: u32) {
        (**self).write32(offset, value)
    }
    #[inline(always)]
    fn read64(&self, offset: usize) -> u64 {
        (**self).read64(offset)
    }
    #[inline(always)]
    fn write64(&self, offset: usize, value: u64) {
        (**self).write64(offset, value)
    }
}

// SAFETY: every method forwards to `T`, which upholds the obligations.
unsafe impl<T: Dma + ?Sized> Dma for &T {
    #[inline]
    fn alloc_coherent(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        (**self).alloc_coherent(len, align)
    }
    #[inline]
    unsafe fn free_coherent(&self, region: DmaRegion) {
        // SAFETY: the caller's obligations are exactly those of `T::free_coherent`.
        unsafe { (**self).free_coherent(region) }
    }
    #[inline]
    unsafe fn map(&self, cpu: NonNull<u8>, len: usize) -> Result<u64, DmaError> {
        // SAFETY: the caller's obligations are exactly those of `T::map`.
        unsafe { (**self).map(cpu, len) }
    }
    #[inline]
    unsafe fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError> {
        // SAFETY: the caller's obligations are exactly those of `T::unmap`.
        unsafe { (**self).unmap(iova, len) }
    }
}

impl<T: PciConfig + ?Sized> PciConfig for &T {
    fn config_read8(&self, offset: u16) -> Result<u8, ConfigError> {
        (**self).config_read8(offset)
    }
    fn config_read16(&self, offset: u16) -> Result<u16, ConfigError> {
        (**self).config_read16(offset)
    }
    fn config_read32(&self, offset: u16) -> Result<u32, ConfigError> {
        (**self).config_read32(offset)
    }
    fn config_write16(&self, offset: u16, value: u16) -> Result<(), ConfigError> {
        (**self).config_write16(offset, value)
    }
    fn config_write32(&self, offset: u16, value: u32) -> Result<(), ConfigError> {
        (**self).config_write32(offset, value)
    }
}

impl<T: Clock + ?Sized> Clock for &T {
    #[inline]
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
    #[inline]
    fn delay_us(&self, us: u32) {
        (**self).delay_us(us)
    }
}
