//! The platform every device's verbs objects run on: a mock HCA in the process or a
//! ConnectX function through VFIO, one type so the object tables hold either.
//!
//! Each method forwards to the variant's platform. A value never changes variant, so what
//! one variant allocated (DMA memory, host memory, IOMMU mappings) is always freed by the
//! same variant.

use core::ptr::NonNull;

use uhca_driver::vfio::VfioPlatform;
use uhca_hal::{Bar, Clock, ConfigError, Dma, DmaError, DmaRegion, HostMem, PciConfig};
use uhca_mock::MockPlatform;

/// A device's platform: the mock's or VFIO's.
#[derive(Clone)]
pub enum DevPlatform {
    /// A mock HCA in this process (`mock:NAME=udp:IP`).
    Mock(MockPlatform),
    /// A ConnectX function bound to vfio-pci (`vfio:NAME=BDF`).
    Vfio(VfioPlatform),
}

impl DevPlatform {
    /// The VFIO platform, for a VFIO device.
    pub fn vfio(&self) -> Option<&VfioPlatform> {
        match self {
            DevPlatform::Vfio(v) => Some(v),
            DevPlatform::Mock(_) => None,
        }
    }
}

macro_rules! each {
    ($self:expr, $p:ident => $e:expr) => {
        match $self {
            DevPlatform::Mock($p) => $e,
            DevPlatform::Vfio($p) => $e,
        }
    };
}

// SAFETY: every method forwards to the variant's platform, which upholds the trait's
// obligations (single volatile accesses, no references into the BAR, bounds checks).
unsafe impl Bar for DevPlatform {
    #[inline(always)]
    fn bar_len(&self) -> usize {
        each!(self, p => p.bar_len())
    }
    #[inline(always)]
    fn read32(&self, offset: usize) -> u32 {
        each!(self, p => p.read32(offset))
    }
    #[inline(always)]
    fn write32(&self, offset: usize, value: u32) {
        each!(self, p => p.write32(offset, value))
    }
    #[inline(always)]
    fn read64(&self, offset: usize) -> u64 {
        each!(self, p => p.read64(offset))
    }
    #[inline(always)]
    fn write64(&self, offset: usize, value: u64) {
        each!(self, p => p.write64(offset, value))
    }
    #[inline(always)]
    fn read_be32(&self, offset: usize) -> u32 {
        each!(self, p => p.read_be32(offset))
    }
    #[inline(always)]
    fn write_be32(&self, offset: usize, value: u32) {
        each!(self, p => p.write_be32(offset, value))
    }
    #[inline(always)]
    fn read_be64(&self, offset: usize) -> u64 {
        each!(self, p => p.read_be64(offset))
    }
    #[inline(always)]
    fn write_be64(&self, offset: usize, value: u64) {
        each!(self, p => p.write_be64(offset, value))
    }
}

// SAFETY: every method forwards to the variant's platform, which upholds the obligations;
// a value keeps its variant, so regions and mappings go back to the platform they came from.
unsafe impl Dma for DevPlatform {
    #[inline]
    fn alloc_coherent(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        each!(self, p => p.alloc_coherent(len, align))
    }
    #[inline]
    unsafe fn free_coherent(&self, region: DmaRegion) {
        // SAFETY: the caller's obligations are those of the variant's `free_coherent`, and
        // the region came from the same variant's `alloc_coherent`.
        each!(self, p => unsafe { p.free_coherent(region) })
    }
    #[inline]
    unsafe fn map(&self, cpu: NonNull<u8>, len: usize) -> Result<u64, DmaError> {
        // SAFETY: the caller's obligations are exactly those of the variant's `map`.
        each!(self, p => unsafe { p.map(cpu, len) })
    }
    #[inline]
    unsafe fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError> {
        // SAFETY: the caller's obligations are those of the variant's `unmap`, and the
        // mapping came from the same variant's `map`.
        each!(self, p => unsafe { p.unmap(iova, len) })
    }
}

// SAFETY: every method forwards to the variant's platform, which upholds the obligations;
// allocations go back to the variant they came from.
unsafe impl HostMem for DevPlatform {
    #[inline]
    fn alloc_host(&self, len: usize, align: usize) -> Result<NonNull<u8>, DmaError> {
        each!(self, p => p.alloc_host(len, align))
    }
    #[inline]
    unsafe fn free_host(&self, ptr: NonNull<u8>, len: usize, align: usize) {
        // SAFETY: the caller's obligations are those of the variant's `free_host`, and the
        // memory came from the same variant's `alloc_host`.
        each!(self, p => unsafe { p.free_host(ptr, len, align) })
    }
}

impl PciConfig for DevPlatform {
    fn config_read8(&self, offset: u16) -> Result<u8, ConfigError> {
        each!(self, p => p.config_read8(offset))
    }
    fn config_read16(&self, offset: u16) -> Result<u16, ConfigError> {
        each!(self, p => p.config_read16(offset))
    }
    fn config_read32(&self, offset: u16) -> Result<u32, ConfigError> {
        each!(self, p => p.config_read32(offset))
    }
    fn config_write16(&self, offset: u16, value: u16) -> Result<(), ConfigError> {
        each!(self, p => p.config_write16(offset, value))
    }
    fn config_write32(&self, offset: u16, value: u32) -> Result<(), ConfigError> {
        each!(self, p => p.config_write32(offset, value))
    }
}

impl Clock for DevPlatform {
    #[inline]
    fn now_ns(&self) -> u64 {
        each!(self, p => p.now_ns())
    }
    #[inline]
    fn delay_us(&self, us: u32) {
        each!(self, p => p.delay_us(us))
    }
}
