//! The model's IOMMU and memory model.
//!
//! The platform's [`Dma`](uhca_hal::Dma) calls end up here: coherent allocations come from the
//! host allocator and are mapped at an IOVA that is deliberately unrelated to their CPU
//! address (a driver that hands the device a CPU address faults instead of working by
//! accident); caller buffers are mapped the same way. Every access the device makes goes
//! through the IOMMU's `dma_read` or `dma_write`, which translate the IOVA and check
//! that the whole access lies inside one mapping. An access outside every mapping is
//! recorded as an [`IommuFault`] and fails; the firmware turns the failure into the error
//! the hardware reports.
//!
//! Bounds are exact: a mapping of 576 bytes allows no access to byte 576, even though a real
//! IOMMU maps whole pages. Overruns are bugs even when hardware would not notice them.
//!
//! This is the one place of the model with `unsafe` code: it reads and writes host memory
//! through raw pointers. The device side uses volatile byte accesses only, and never creates
//! references into the memory, because the driver may access it at any time.

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use uhca_hal::{DmaError, DmaRegion};

/// First IOVA handed out. Far from where host allocators place memory, so an IOVA is never
/// equal to a CPU address.
pub const IOVA_BASE: u64 = 0x0000_00f0_0000_0000;
/// IOVA granule: allocations and mappings start on a 4 KiB boundary (or their alignment).
pub const IOVA_PAGE: u64 = 4096;
/// Largest single allocation or mapping the model accepts (1 GiB).
pub const MAX_MAPPING: usize = 1 << 30;
/// The alignment a large mapping's IOVA keeps the buffer's address's offset within (2 MiB).
pub const LARGE_MAP_ALIGN: u64 = 2 << 20;

/// Why the device touched memory it may not touch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// No mapping covers the whole access.
    Unmapped,
    /// The command register's bus-master bit is clear, so the device may not DMA at all.
    BusMasterDisabled,
    /// A device write to memory its owner mapped for device reads only (a vfio-user
    /// client's DMA map without the writeable flag).
    ReadOnly,
    /// The range is mapped, but with no memory the device can reach: a vfio-user client
    /// mapped it without a file (ROM or device memory of the VMM), and the model does not
    /// carry DMA over messages.
    Unbacked,
}

/// Why memory from a file descriptor could not be mapped for the device
/// ([`MockHca::map_fd`](crate::MockHca::map_fd)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapFdError {
    /// The size is zero, above [`MAX_MAPPING`], or the IOVA, file offset or size is not a
    /// multiple of the 4 KiB page.
    Invalid,
    /// The range overlaps a live mapping.
    Overlap,
    /// The range reaches past the end of the file.
    OutsideFile,
    /// The host refused (`fstat` or `mmap` failed with this errno).
    Host(i32),
}

impl core::fmt::Display for MapFdError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MapFdError::Invalid => {
                f.write_str("size, IOVA or file offset invalid or not page aligned")
            }
            MapFdError::Overlap => f.write_str("the IOVA range overlaps a live mapping"),
            MapFdError::OutsideFile => f.write_str("the range reaches past the end of the file"),
            MapFdError::Host(e) => write!(f, "the host refused the mapping (errno {e})"),
        }
    }
}

impl std::error::Error for MapFdError {}

/// A device access the IOMMU refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IommuFault {
    /// Model time, in nanoseconds.
    pub time_ns: u64,
    /// First IOVA of the access.
    pub iova: u64,
    /// Length of the access in bytes.
    pub len: usize,
    /// Whether the device was writing.
    pub write: bool,
    /// Why it was refused.
    pub kind: FaultKind,
    /// What the device was doing (for example "command entry", "output mailbox", "EQE").
    pub context: &'static str,
}

#[derive(Debug)]
enum MappingKind {
    /// Memory this IOMMU allocated; freed with this layout.
    Coherent(Layout),
    /// A caller's buffer; not ours to free.
    User,
    /// Memory of a file descriptor that this IOMMU mapped into the process (a vfio-user
    /// client's DMA map); unmapped with `munmap` when the mapping goes.
    #[cfg(target_os = "linux")]
    External {
        /// Whether the device may write it.
        writable: bool,
    },
    /// A range a client mapped with no memory behind it that the device can reach; every
    /// device access to it faults (`FaultKind::Unbacked`).
    Unbacked,
}

#[derive(Debug)]
struct Mapping {
    cpu: NonNull<u8>,
    len: usize,
    kind: MappingKind,
}

#[cfg(target_os = "linux")]
impl Drop for Mapping {
    fn drop(&mut self) {
        if let MappingKind::External { .. } = self.kind {
            // SAFETY: `cpu..cpu+len` is exactly the range `mmap` returned in `map_fd`; the
            // mapping was removed from the table (or the table is being dropped), so no device
            // access can reach it any more, and it is unmapped exactly once (here).
            let r = unsafe { rustix::mm::munmap(self.cpu.as_ptr().cast(), self.len) };
            debug_assert!(r.is_ok(), "munmap of an external mapping failed: {r:?}");
        }
    }
}

// SAFETY: a Mapping is the address of memory that is either owned by the IOMMU (coherent
// allocations and mmaps of external files, freed only by the IOMMU) or lent by the caller for
// as long as it is mapped (the `Dma::map` contract). The IOMMU only lives inside the device mutex, so the pointer is
// used from one thread at a time, and all accesses through it are volatile.
unsafe impl Send for Mapping {}

/// The IOMMU: mappings from IOVA to host memory, and the faults it recorded.
#[derive(Debug)]
pub(crate) struct Iommu {
    maps: BTreeMap<u64, Mapping>,
    next_iova: u64,
    faults: Vec<IommuFault>,
    bus_master: bool,
    /// The mappings the device used last (a translation cache, like an IOTLB): a B-tree
    /// search per access costs more than the copy of a small one. Direct-mapped: an access
    /// looks only at the entry of its IOVA's 4 KiB page number, filled (on a miss) with
    /// the mapping that holds that page; any mapping an entry holds serves every access
    /// inside it. Emptied whenever a mapping goes away.
    tlb: [TlbEntry; TLB_ENTRIES],
}

// SAFETY: an entry is a copy of a live Mapping's address, used under the same rules as the
// Mapping (only inside the device mutex, volatile accesses only) and dropped from the cache
// before that mapping goes away.
unsafe impl Send for TlbEntry {}

/// Entries of [`Iommu::tlb`] (a power of two).
const TLB_ENTRIES: usize = 32;

/// A cached mapping: its IOVA range, CPU address, and whether the device may write it. An
/// empty entry has a length of 0.
#[derive(Clone, Copy, Debug)]
struct TlbEntry {
    base: u64,
    len: u64,
    cpu: NonNull<u8>,
    writable: bool,
}

impl TlbEntry {
    const EMPTY: TlbEntry = TlbEntry {
        base: 0,
        len: 0,
        cpu: NonNull::dangling(),
        writable: false,
    };
}

/// The entry of [`Iommu::tlb`] for the page of `iova`.
#[inline]
fn tlb_slot(iova: u64) -> usize {
    (iova >> 12) as usize & (TLB_ENTRIES - 1)
}

impl Iommu {
    pub(crate) fn new() -> Self {
        Iommu {
            maps: BTreeMap::new(),
            next_iova: IOVA_BASE,
            faults: Vec::new(),
            bus_master: false,
            tlb: [TlbEntry::EMPTY; TLB_ENTRIES],
        }
    }

    /// Forgets every cached translation (a mapping went away).
    fn flush_tlb(&mut self) {
        self.tlb = [TlbEntry::EMPTY; TLB_ENTRIES];
    }

    /// A cached translation of `[iova, iova + len)`: (CPU pointer to `iova`, writable).
    #[inline]
    fn tlb_lookup(&self, iova: u64, len: usize) -> Option<(NonNull<u8>, bool)> {
        let e = &self.tlb[tlb_slot(iova)];
        let off = iova.wrapping_sub(e.base);
        if off >= e.len || len as u64 > e.len - off {
            return None;
        }
        // SAFETY: `off + len <= e.len`: inside the live mapping the entry was taken from
        // (entries are emptied when a mapping goes away).
        Some((unsafe { e.cpu.add(off as usize) }, e.writable))
    }

    /// Caches the mapping that holds `iova`, if it is one the device can reach.
    fn tlb_fill(&mut self, iova: u64) {
        let Some((&base, m)) = self.maps.range(..=iova).next_back() else {
            return;
        };
        let writable = match m.kind {
            #[cfg(target_os = "linux")]
            MappingKind::External { writable } => writable,
            MappingKind::Unbacked => return,
            _ => true,
        };
        if iova.wrapping_sub(base) >= m.len as u64 {
            return;
        }
        self.tlb[tlb_slot(iova)] = TlbEntry {
            base,
            len: m.len as u64,
            cpu: m.cpu,
            writable,
        };
    }

    /// Follows the command register's bus-master bit.
    pub(crate) fn set_bus_master(&mut self, on: bool) {
        self.bus_master = on;
    }

    pub(crate) fn faults(&self) -> &[IommuFault] {
        &self.faults
    }

    pub(crate) fn take_faults(&mut self) -> Vec<IommuFault> {
        core::mem::take(&mut self.faults)
    }

    pub(crate) fn clear_faults(&mut self) {
        self.faults.clear();
    }

    /// Picks a free IOVA range for `len` bytes aligned to `align`, leaving an unmapped guard
    /// page after it so that overruns fault. `page_offset` is added so a mapping can keep
    /// its CPU address's offset within a page.
    fn take_iova(&mut self, len: usize, align: u64, page_offset: u64, cpu: usize) -> u64 {
        let align = align.max(IOVA_PAGE);
        loop {
            let base = self.next_iova.next_multiple_of(align);
            let iova = base + page_offset;
            let end = (iova + len as u64).next_multiple_of(IOVA_PAGE);
            self.next_iova = end + IOVA_PAGE;
            if iova != cpu as u64 && !self.overlaps(base, end + IOVA_PAGE - base) {
                return iova;
            }
        }
    }

    /// Allocates zeroed memory and maps it.
    pub(crate) fn alloc_coherent(
        &mut self,
        len: usize,
        align: usize,
    ) -> Result<DmaRegion, DmaError> {
        if len == 0 || len > MAX_MAPPING || !align.is_power_of_two() || align > MAX_MAPPING {
            return Err(DmaError::InvalidRequest);
        }
        let layout = Layout::from_size_align(len, align.max(IOVA_PAGE as usize))
            .map_err(|_| DmaError::InvalidRequest)?;
        // SAFETY: the layout has a non-zero size (checked above).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let cpu = NonNull::new(ptr).ok_or(DmaError::OutOfMemory)?;
        let iova = self.take_iova(len, align as u64, 0, cpu.as_ptr() as usize);
        self.maps.insert(
            iova,
            Mapping {
                cpu,
                len,
                kind: MappingKind::Coherent(layout),
            },
        );
        Ok(DmaRegion { cpu, iova, len })
    }

    /// Unmaps and frees a coherent allocation. Returns false (and changes nothing) if the
    /// region is not a live coherent allocation of this IOMMU.
    pub(crate) fn free_coherent(&mut self, region: &DmaRegion) -> bool {
        match self.maps.get(&region.iova) {
            Some(m) if m.cpu == region.cpu && m.len == region.len => {}
            _ => return false,
        }
        let Some(m) = self.maps.remove(&region.iova) else {
            return false;
        };
        self.flush_tlb();
        match m.kind {
            MappingKind::Coherent(layout) => {
                // SAFETY: the pointer came from `alloc_zeroed` with this layout and was
                // removed from the table, so it is freed exactly once.
                unsafe { std::alloc::dealloc(m.cpu.as_ptr(), layout) };
                true
            }
            _ => {
                self.maps.insert(region.iova, m);
                false
            }
        }
    }

    /// Maps a caller's buffer, keeping its offset within a 4 KiB page, and for a buffer
    /// spanning more than 512 such pages its offset within a 2 MiB page ([`LARGE_MAP_ALIGN`]), so
    /// that a memory key over it can use pages that large: a key describes a region with at
    /// most 512 translation entries, of pages whose offsets the address it is named by and
    /// the IOVA share.
    pub(crate) fn map(&mut self, cpu: NonNull<u8>, len: usize) -> Result<u64, DmaError> {
        if len == 0 || len > MAX_MAPPING {
            return Err(DmaError::InvalidRequest);
        }
        let pages = (cpu.as_ptr() as u64 % IOVA_PAGE + len as u64).div_ceil(IOVA_PAGE);
        let align = if pages > 512 {
            LARGE_MAP_ALIGN
        } else {
            IOVA_PAGE
        };
        let offset = cpu.as_ptr() as u64 % align;
        let iova = self.take_iova(len, align, offset, cpu.as_ptr() as usize);
        self.maps.insert(
            iova,
            Mapping {
                cpu,
                len,
                kind: MappingKind::User,
            },
        );
        Ok(iova)
    }

    /// Removes a mapping made by [`Iommu::map`].
    pub(crate) fn unmap(&mut self, iova: u64, len: usize) -> Result<(), DmaError> {
        match self.maps.get(&iova) {
            Some(m) if m.len == len && matches!(m.kind, MappingKind::User) => {
                self.maps.remove(&iova);
                self.flush_tlb();
                Ok(())
            }
            _ => Err(DmaError::NotMapped),
        }
    }

    /// Whether `[iova, iova + len)` shares a byte with a live mapping.
    fn overlaps(&self, iova: u64, len: u64) -> bool {
        let end = iova.saturating_add(len);
        if let Some((&base, m)) = self.maps.range(..=iova).next_back()
            && base + m.len as u64 > iova
        {
            return true;
        }
        self.maps.range(iova..end).next().is_some()
    }

    /// Maps `len` bytes of the file `fd` from `offset` at the caller's `iova` (a vfio-user
    /// client's DMA map: its memory, shared through a memfd). The IOMMU maps the file into
    /// this process itself, keeps the mapping until [`Iommu::unmap_client_range`] or its drop,
    /// and serves device accesses to it like any other mapping; writes fault unless
    /// `writable`.
    #[cfg(target_os = "linux")]
    pub(crate) fn map_fd(
        &mut self,
        iova: u64,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: u64,
        writable: bool,
    ) -> Result<(), MapFdError> {
        use rustix::mm::{MapFlags, ProtFlags};
        let page = IOVA_PAGE;
        if len == 0
            || len > MAX_MAPPING as u64
            || !iova.is_multiple_of(page)
            || !offset.is_multiple_of(page)
            || !len.is_multiple_of(page)
            || iova.checked_add(len).is_none()
        {
            return Err(MapFdError::Invalid);
        }
        if self.overlaps(iova, len) {
            return Err(MapFdError::Overlap);
        }
        let st = rustix::fs::fstat(fd).map_err(|e| MapFdError::Host(e.raw_os_error()))?;
        let size = u64::try_from(st.st_size).unwrap_or(0);
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(MapFdError::OutsideFile);
        }
        let prot = if writable {
            ProtFlags::READ | ProtFlags::WRITE
        } else {
            ProtFlags::READ
        };
        // SAFETY: a new shared mapping at an address the kernel picks (a null hint), so it
        // replaces nothing of ours; the file range was checked to lie inside the file, so
        // every byte of the mapping is backed. The pointer is used only through volatile
        // accesses under the device mutex, and unmapped exactly once when the Mapping drops.
        let p = unsafe {
            rustix::mm::mmap(
                core::ptr::null_mut(),
                len as usize,
                prot,
                MapFlags::SHARED,
                fd,
                offset,
            )
        }
        .map_err(|e| MapFdError::Host(e.raw_os_error()))?;
        let cpu = NonNull::new(p.cast::<u8>()).ok_or(MapFdError::Host(0))?;
        self.maps.insert(
            iova,
            Mapping {
                cpu,
                len: len as usize,
                kind: MappingKind::External { writable },
            },
        );
        Ok(())
    }

    /// Records `[iova, iova + len)` as mapped by a client without memory the device can
    /// reach (a DMA map without a file): it takes IOVA space like any map, and every device
    /// access to it faults with [`FaultKind::Unbacked`].
    pub(crate) fn map_unbacked(&mut self, iova: u64, len: u64) -> Result<(), MapFdError> {
        if len == 0
            || len > MAX_MAPPING as u64
            || !iova.is_multiple_of(IOVA_PAGE)
            || !len.is_multiple_of(IOVA_PAGE)
            || iova.checked_add(len).is_none()
        {
            return Err(MapFdError::Invalid);
        }
        if self.overlaps(iova, len) {
            return Err(MapFdError::Overlap);
        }
        self.maps.insert(
            iova,
            Mapping {
                cpu: NonNull::dangling(),
                len: len as usize,
                kind: MappingKind::Unbacked,
            },
        );
        Ok(())
    }

    /// Removes every client map ([`Iommu::map_fd`], [`Iommu::map_unbacked`]) lying entirely
    /// inside `[iova, iova + len)`, as Linux VFIO's type1 v2 unmap does: a range that cuts
    /// a client map at its start or end is refused and removes nothing
    /// (`DmaError::InvalidRequest`); a range with no map in it is not an error. Returns how
    /// many maps were removed.
    pub(crate) fn unmap_client_range(&mut self, iova: u64, len: u64) -> Result<usize, DmaError> {
        // The last byte, inclusive: a range may end at the top of the 64-bit IOVA space
        // (QEMU unmaps up to 2^64 when the guest invalidates everything above an address).
        let last = len
            .checked_sub(1)
            .and_then(|l| iova.checked_add(l))
            .ok_or(DmaError::InvalidRequest)?;
        let client = |m: &Mapping| !matches!(m.kind, MappingKind::Coherent(_) | MappingKind::User);
        if let Some((&base, m)) = self.maps.range(..iova).next_back()
            && client(m)
            && base + m.len as u64 > iova
        {
            return Err(DmaError::InvalidRequest);
        }
        let inside: Vec<u64> = self
            .maps
            .range(iova..=last)
            .filter(|(_, m)| client(m))
            .map(|(&b, _)| b)
            .collect();
        if let Some(&b) = inside.last()
            && b + (self.maps[&b].len as u64 - 1) > last
        {
            return Err(DmaError::InvalidRequest);
        }
        for b in &inside {
            self.maps.remove(b);
        }
        self.flush_tlb();
        Ok(inside.len())
    }

    /// Removes every client map ([`Iommu::map_fd`], [`Iommu::map_unbacked`]); returns how
    /// many there were.
    pub(crate) fn unmap_all_client(&mut self) -> usize {
        let before = self.maps.len();
        self.maps
            .retain(|_, m| matches!(m.kind, MappingKind::Coherent(_) | MappingKind::User));
        self.flush_tlb();
        before - self.maps.len()
    }

    /// Whether `iova` lies in a client map without memory ([`Iommu::map_unbacked`]).
    fn unbacked_holds(&self, iova: u64) -> bool {
        self.maps.range(..=iova).next_back().is_some_and(|(&b, m)| {
            matches!(m.kind, MappingKind::Unbacked) && iova - b < m.len as u64
        })
    }

    /// The mapping that holds `[iova, iova + len)` entirely, as (CPU pointer to `iova`,
    /// whether the device may write it).
    fn translate_rw(&self, iova: u64, len: usize) -> Option<(NonNull<u8>, bool)> {
        let (&base, m) = self.maps.range(..=iova).next_back()?;
        let off = iova - base;
        let end = off.checked_add(len as u64)?;
        if end > m.len as u64 {
            return None;
        }
        let writable = match m.kind {
            #[cfg(target_os = "linux")]
            MappingKind::External { writable } => writable,
            MappingKind::Unbacked => return None,
            _ => true,
        };
        // SAFETY: `off < m.len` (or `off == m.len` with `len == 0`), so the result stays within
        // (or one past the end of) the mapped object.
        Some((unsafe { m.cpu.add(off as usize) }, writable))
    }

    /// The mapping that holds `[iova, iova + len)` entirely, as (CPU pointer to `iova`).
    fn translate(&self, iova: u64, len: usize) -> Option<NonNull<u8>> {
        self.translate_rw(iova, len).map(|(p, _)| p)
    }

    #[inline]
    fn check(
        &mut self,
        iova: u64,
        len: usize,
        write: bool,
        now: u64,
        context: &'static str,
    ) -> Result<NonNull<u8>, IommuFault> {
        if self.bus_master
            && let Some((p, writable)) = self.tlb_lookup(iova, len)
            && (writable || !write)
        {
            return Ok(p);
        }
        self.check_uncached(iova, len, write, now, context)
    }

    /// [`Iommu::check`] past the translation cache: the mapping table, or the fault.
    #[inline(never)]
    fn check_uncached(
        &mut self,
        iova: u64,
        len: usize,
        write: bool,
        now: u64,
        context: &'static str,
    ) -> Result<NonNull<u8>, IommuFault> {
        if self.bus_master {
            // One search of the mapping table fills the entry; it then answers as a hit
            // would (same bounds and permission checks).
            self.tlb_fill(iova);
            if let Some((p, writable)) = self.tlb_lookup(iova, len)
                && (writable || !write)
            {
                return Ok(p);
            }
        }
        let kind = if !self.bus_master {
            FaultKind::BusMasterDisabled
        } else if let Some((p, writable)) = self.translate_rw(iova, len) {
            if writable || !write {
                return Ok(p);
            }
            FaultKind::ReadOnly
        } else if self.unbacked_holds(iova) {
            FaultKind::Unbacked
        } else {
            FaultKind::Unmapped
        };
        let fault = IommuFault {
            time_ns: now,
            iova,
            len,
            write,
            kind,
            context,
        };
        if self.faults.len() < crate::log::LOG_CAPACITY {
            self.faults.push(fault);
        }
        Err(fault)
    }

    /// A device read of `buf.len()` bytes at `iova`.
    pub(crate) fn dma_read(
        &mut self,
        iova: u64,
        buf: &mut [u8],
        now: u64,
        context: &'static str,
    ) -> Result<(), IommuFault> {
        let p = self.check(iova, buf.len(), false, now, context)?;
        // SAFETY: `translate` proved `[iova, iova + buf.len())` lies in one live mapping,
        // whose memory is valid for reads (allocated by us, or lent under the `map`
        // contract) for as long as it is mapped; the device mutex is held.
        unsafe { volatile_read(p, buf) };
        Ok(())
    }

    /// A device write of `data` at `iova`.
    pub(crate) fn dma_write(
        &mut self,
        iova: u64,
        data: &[u8],
        now: u64,
        context: &'static str,
    ) -> Result<(), IommuFault> {
        let p = self.check(iova, data.len(), true, now, context)?;
        // SAFETY: as in `dma_read`; the mapping is valid for writes too (coherent memory
        // and `map`ped buffers are both lent to the device for reading and writing).
        unsafe { volatile_write(p, data) };
        Ok(())
    }

    /// Host-side (CPU) read of mapped memory by IOVA, for tests; records no fault and
    /// ignores bus mastering.
    pub(crate) fn host_read(&self, iova: u64, buf: &mut [u8]) -> bool {
        let Some(p) = self.translate(iova, buf.len()) else {
            return false;
        };
        // SAFETY: as in `dma_read`: the range lies within one live mapping.
        unsafe { volatile_read(p, buf) };
        true
    }

    /// Host-side (CPU) write of mapped memory by IOVA, for tests.
    pub(crate) fn host_write(&self, iova: u64, data: &[u8]) -> bool {
        let Some((p, true)) = self.translate_rw(iova, data.len()) else {
            return false;
        };
        // SAFETY: as in `dma_write`: the range lies within one live mapping.
        unsafe { volatile_write(p, data) };
        true
    }

    /// Whether `[iova, iova + len)` lies within one mapping.
    pub(crate) fn is_mapped(&self, iova: u64, len: usize) -> bool {
        // A cached entry is a live mapping the device can reach (never an unbacked one).
        self.tlb_lookup(iova, len).is_some() || self.translate(iova, len).is_some()
    }
}

/// Copies `buf.len()` bytes from device-visible memory at `src` into `buf` with volatile
/// accesses (the driver's CPU shares that memory, so no access may be elided or merged
/// away): [`read_narrow`] up to an 8-byte boundary of `src`, then aligned 8-byte words
/// (on x86_64, aligned 16-byte accesses from the first 16-byte boundary on, and words for
/// what is left), then [`read_narrow`] for the rest. A 1 KiB packet's payload so costs 64
/// accesses, not 128 words or 1,024 bytes.
///
/// Every naturally aligned 2-, 4- or 8-byte field inside the range is read in one access,
/// as a device's DMA read sees a CPU's aligned store of that size whole: a doorbell record
/// word the driver updates while the model reads it (a CQ's consumer index, written by
/// the polling thread while another thread's doorbell or the fabric writes CQEs) is its
/// old or its new value, never bytes of both. (Read byte by byte, a consumer index going
/// from 0x5FF to 0x60F was once read as 0x50F, 256 behind: a CQ overrun that was not one,
/// and a lost CQE.)
///
/// # Safety
///
/// `[src, src + buf.len())` must be valid for reads for the duration of the call.
unsafe fn volatile_read(src: NonNull<u8>, buf: &mut [u8]) {
    let src = src.as_ptr();
    let len = buf.len();
    let head = src.align_offset(8).min(len);
    // SAFETY: `head <= len`: inside the range the caller vouches for.
    unsafe { read_narrow(src, &mut buf[..head]) };
    let mut at = head;
    // One word to a 16-byte boundary, if the range goes that far.
    if len - at >= 8 && !(src as usize + at).is_multiple_of(16) {
        // SAFETY: `src + at` is 8-byte aligned (`head` reached the boundary) and
        // `at + 8 <= len`.
        let v = unsafe { src.add(at).cast::<u64>().read_volatile() };
        buf[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        at += 8;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::__m128i;
        if len - at >= 16 && (src as usize + at).is_multiple_of(16) {
            let n = (len - at) / 16 * 16;
            let body = &mut buf[at..at + n];
            // Four 16-byte accesses per turn, then the ones left: SSE2's aligned moves
            // (on a CPU with AVX each is atomic; on any x86_64 each of its aligned 8-byte
            // halves is read whole), a half of the accesses of 8-byte words.
            let mut quads = body.chunks_exact_mut(64);
            for q in &mut quads {
                // SAFETY: `src + at` is 16-byte aligned (checked above, each step adds
                // 64) and `at + 64 <= len` (the chunk lies inside `buf[..len]`).
                let v: [[u8; 16]; 4] = unsafe {
                    let p = src.add(at).cast::<__m128i>();
                    core::mem::transmute([
                        p.read_volatile(),
                        p.add(1).read_volatile(),
                        p.add(2).read_volatile(),
                        p.add(3).read_volatile(),
                    ])
                };
                q[..16].copy_from_slice(&v[0]);
                q[16..32].copy_from_slice(&v[1]);
                q[32..48].copy_from_slice(&v[2]);
                q[48..].copy_from_slice(&v[3]);
                at += 64;
            }
            for w in quads.into_remainder().chunks_exact_mut(16) {
                // SAFETY: as above, for one access: aligned, and `at + 16 <= len`.
                let v: [u8; 16] =
                    unsafe { core::mem::transmute(src.add(at).cast::<__m128i>().read_volatile()) };
                w.copy_from_slice(&v);
                at += 16;
            }
        }
    }
    // Aligned 8-byte words, four per turn, then the words left (the whole body where the
    // 16-byte accesses are not used): no bounds checks in the loop.
    let words = (len - at) / 8;
    let body = &mut buf[at..at + words * 8];
    let mut quads = body.chunks_exact_mut(32);
    for q in &mut quads {
        // SAFETY: `src + at` is 8-byte aligned (`head` reached the boundary, each step
        // since added a multiple of 8) and `at + 32 <= len` (the chunk lies inside
        // `buf[..len]`).
        let v = unsafe {
            let p = src.add(at).cast::<u64>();
            [
                p.read_volatile(),
                p.add(1).read_volatile(),
                p.add(2).read_volatile(),
                p.add(3).read_volatile(),
            ]
        };
        q[..8].copy_from_slice(&v[0].to_ne_bytes());
        q[8..16].copy_from_slice(&v[1].to_ne_bytes());
        q[16..24].copy_from_slice(&v[2].to_ne_bytes());
        q[24..].copy_from_slice(&v[3].to_ne_bytes());
        at += 32;
    }
    for w in quads.into_remainder().chunks_exact_mut(8) {
        // SAFETY: as above, for one word: aligned, and `at + 8 <= len`.
        let v = unsafe { src.add(at).cast::<u64>().read_volatile() };
        w.copy_from_slice(&v.to_ne_bytes());
        at += 8;
    }
    // SAFETY: `at <= len`: the rest of the caller's range (fewer than 8 bytes, from an
    // 8-byte boundary when any are left).
    unsafe { read_narrow(src.add(at), &mut buf[at..]) };
}

/// Copies the fewer than 8 bytes at `src` (which do not cross an 8-byte boundary) into
/// `buf` with volatile accesses in increasing address order: at each address, a 4-byte
/// access if it is 4-aligned and 4 bytes are left, else a 2-byte one if it is 2-aligned and
/// 2 are left, else one byte. So an aligned 4-byte field is one read.
///
/// # Safety
///
/// `[src, src + buf.len())` must be valid for reads for the duration of the call.
#[inline(always)]
unsafe fn read_narrow(src: *const u8, buf: &mut [u8]) {
    let mut at = 0;
    while at < buf.len() {
        let left = buf.len() - at;
        // SAFETY: `at < buf.len()`: inside the caller's range.
        let p = unsafe { src.add(at) };
        if left >= 4 && (p as usize).is_multiple_of(4) {
            // SAFETY: 4-aligned, and `at + 4 <= buf.len()`.
            let v = unsafe { p.cast::<u32>().read_volatile() };
            buf[at..at + 4].copy_from_slice(&v.to_ne_bytes());
            at += 4;
        } else if left >= 2 && (p as usize).is_multiple_of(2) {
            // SAFETY: 2-aligned, and `at + 2 <= buf.len()`.
            let v = unsafe { p.cast::<u16>().read_volatile() };
            buf[at..at + 2].copy_from_slice(&v.to_ne_bytes());
            at += 2;
        } else {
            // SAFETY: `at < buf.len()`.
            buf[at] = unsafe { p.read_volatile() };
            at += 1;
        }
    }
}

/// Copies `data` into device-visible memory at `dst` with volatile accesses, bytes to an
/// 8-byte boundary, then aligned words (on x86_64, aligned 16-byte accesses from the first
/// 16-byte boundary on), then bytes (see [`volatile_read`]).
///
/// # Safety
///
/// `[dst, dst + data.len())` must be valid for writes for the duration of the call.
unsafe fn volatile_write(dst: NonNull<u8>, data: &[u8]) {
    let dst = dst.as_ptr();
    let len = data.len();
    let head = dst.align_offset(8).min(len);
    for (i, &b) in data[..head].iter().enumerate() {
        // SAFETY: `i < len`, within the range the caller vouches for.
        unsafe { dst.add(i).write_volatile(b) };
    }
    let word = |b: &[u8]| {
        let mut v = [0u8; 8];
        v.copy_from_slice(b);
        u64::from_ne_bytes(v)
    };
    let mut at = head;
    // One word to a 16-byte boundary, if the range goes that far.
    if len - at >= 8 && !(dst as usize + at).is_multiple_of(16) {
        // SAFETY: `dst + at` is 8-byte aligned and `at + 8 <= len`.
        unsafe {
            dst.add(at)
                .cast::<u64>()
                .write_volatile(word(&data[at..at + 8]))
        };
        at += 8;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::__m128i;
        if len - at >= 16 && (dst as usize + at).is_multiple_of(16) {
            let n = (len - at) / 16 * 16;
            let body = &data[at..at + n];
            // Aligned 16-byte stores, four per turn (see `volatile_read`).
            let mut quads = body.chunks_exact(64);
            let block = |b: &[u8]| -> __m128i {
                let mut v = [0u8; 16];
                v.copy_from_slice(b);
                // SAFETY: any 16 bytes are a valid `__m128i`.
                unsafe { core::mem::transmute(v) }
            };
            for q in &mut quads {
                let v = [
                    block(&q[..16]),
                    block(&q[16..32]),
                    block(&q[32..48]),
                    block(&q[48..]),
                ];
                // SAFETY: `dst + at` is 16-byte aligned (checked above, each step adds 64)
                // and `at + 64 <= len`.
                unsafe {
                    let p = dst.add(at).cast::<__m128i>();
                    p.write_volatile(v[0]);
                    p.add(1).write_volatile(v[1]);
                    p.add(2).write_volatile(v[2]);
                    p.add(3).write_volatile(v[3]);
                }
                at += 64;
            }
            for w in quads.remainder().chunks_exact(16) {
                // SAFETY: as above, for one access: aligned, and `at + 16 <= len`.
                unsafe { dst.add(at).cast::<__m128i>().write_volatile(block(w)) };
                at += 16;
            }
        }
    }
    let words = (len - at) / 8;
    let body = &data[at..at + words * 8];
    let mut quads = body.chunks_exact(32);
    for q in &mut quads {
        let v = [
            word(&q[..8]),
            word(&q[8..16]),
            word(&q[16..24]),
            word(&q[24..]),
        ];
        // SAFETY: `dst + at` is 8-byte aligned (`head` reached the boundary, each step
        // since added a multiple of 8) and `at + 32 <= len`.
        unsafe {
            let p = dst.add(at).cast::<u64>();
            p.write_volatile(v[0]);
            p.add(1).write_volatile(v[1]);
            p.add(2).write_volatile(v[2]);
            p.add(3).write_volatile(v[3]);
        }
        at += 32;
    }
    for w in quads.remainder().chunks_exact(8) {
        // SAFETY: `dst + at` is 8-byte aligned and `at + 8 <= len`.
        unsafe { dst.add(at).cast::<u64>().write_volatile(word(w)) };
        at += 8;
    }
    for (i, &b) in data.iter().enumerate().skip(at) {
        // SAFETY: `i < len`.
        unsafe { dst.add(i).write_volatile(b) };
    }
}

impl Drop for Iommu {
    fn drop(&mut self) {
        for (_, m) in std::mem::take(&mut self.maps) {
            if let MappingKind::Coherent(layout) = m.kind {
                // SAFETY: allocated by `alloc_zeroed` with this layout and never freed (freed
                // allocations are removed from the table).
                unsafe { std::alloc::dealloc(m.cpu.as_ptr(), layout) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two doorbell-record words, 8-aligned as a doorbell record is.
    #[repr(C, align(8))]
    struct Record([core::sync::atomic::AtomicU32; 2]);

    /// A 4-byte doorbell-record word that the CPU rewrites while the device reads it is
    /// read whole, in the second word of the record (the SQ counter's place: an unaligned
    /// start of the copy) and in the first (the CQ consumer index's place: the copy's
    /// tail): always the old or the new value, never bytes of both.
    #[test]
    fn a_dword_rewritten_by_the_cpu_is_read_whole() {
        use core::sync::atomic::{AtomicBool, Ordering};
        // Every byte differs between the two values.
        const A: u32 = 0x00ff_00ff;
        const B: u32 = 0xff00_ff00;
        let rec = Record([A.into(), A.into()]);
        let stop = AtomicBool::new(false);
        let torn = std::thread::scope(|s| {
            s.spawn(|| {
                let mut v = A;
                while !stop.load(Ordering::Relaxed) {
                    v ^= A ^ B;
                    rec.0[0].store(v, Ordering::Relaxed);
                    rec.0[1].store(v, Ordering::Relaxed);
                }
            });
            let base = NonNull::from(&rec).cast::<u8>();
            let start = std::time::Instant::now();
            let mut torn = Vec::new();
            let mut reads = 0u64;
            // Long enough for the two threads to share the CPUs for a while on a busy
            // machine; read byte by byte, torn values come within milliseconds.
            while start.elapsed() < std::time::Duration::from_millis(300) && torn.len() < 4 {
                for off in [4, 0] {
                    let mut b = [0u8; 4];
                    // SAFETY: `off + 4 <= 8`: inside `rec`, which lives across the scope
                    // (the writer's stores are atomic; the read is the model's volatile
                    // copy of memory a CPU shares, as in `dma_read`).
                    unsafe { volatile_read(base.add(off), &mut b) };
                    let v = u32::from_ne_bytes(b);
                    if v != A && v != B {
                        torn.push((off, v));
                    }
                    reads += 1;
                }
            }
            stop.store(true, Ordering::Relaxed);
            assert!(reads > 1000, "only {reads} reads");
            torn
        });
        assert!(torn.is_empty(), "torn reads (offset, value): {torn:x?}");
    }

    /// A caller's buffer spanning more than 512 pages is mapped at its address's offset
    /// within 2 MiB (a memory key over it can then use 2 MiB pages); a smaller one keeps
    /// only its offset within its 4 KiB page.
    #[test]
    fn a_large_mapping_keeps_its_offset_within_2_mib() {
        let mut m = Iommu::new();
        let big = vec![0u8; (3 << 20) + 8192];
        let cpu = NonNull::new(big.as_ptr().wrapping_add(4096 + 40) as *mut u8).unwrap();
        let iova = m.map(cpu, 3 << 20).unwrap();
        assert_eq!(
            iova % LARGE_MAP_ALIGN,
            cpu.as_ptr() as u64 % LARGE_MAP_ALIGN
        );
        // 512 pages from an unaligned start span 513: large too.
        let iova2 = m.map(cpu, 512 * 4096).unwrap();
        assert_eq!(
            iova2 % LARGE_MAP_ALIGN,
            cpu.as_ptr() as u64 % LARGE_MAP_ALIGN
        );
        let small = m.map(cpu, 5000).unwrap();
        assert_eq!(small % IOVA_PAGE, cpu.as_ptr() as u64 % IOVA_PAGE);
        m.unmap(iova, 3 << 20).unwrap();
        m.unmap(iova2, 512 * 4096).unwrap();
        m.unmap(small, 5000).unwrap();
        drop(big);
    }

    /// The translation cache answers only as the mapping table would: an access that starts
    /// in a cached mapping and runs past its end faults (nothing written), mappings whose
    /// pages share a cache entry take turns in it with their own bytes, and a mapping that
    /// went away faults even though it was cached.
    #[test]
    fn the_translation_cache_answers_as_the_mapping_table_would() {
        let mut m = Iommu::new();
        m.set_bus_master(true);
        let a = m.alloc_coherent(8192, 4096).unwrap();
        m.dma_write(a.iova + 8, &[1; 8], 0, "test").unwrap();
        // Cached now (both pages): from inside `a` to 8 bytes past its end.
        m.dma_write(a.iova + 4096, &[2; 8], 0, "test").unwrap();
        let past = m.dma_write(a.iova + 8192 - 8, &[3; 16], 0, "test");
        assert_eq!(past.unwrap_err().kind, FaultKind::Unmapped);
        let mut tail = [0u8; 8];
        m.dma_read(a.iova + 8192 - 8, &mut tail, 0, "test").unwrap();
        assert_eq!(tail, [0; 8], "a refused write wrote nothing");
        // A mapping whose first page takes the cache entry of `a`'s (8 KiB mappings and
        // their guard pages step through every entry).
        let mut others = Vec::new();
        let c = loop {
            assert!(others.len() < 2 * TLB_ENTRIES, "no mapping shares an entry");
            let r = m.alloc_coherent(8192, 4096).unwrap();
            if tlb_slot(r.iova) == tlb_slot(a.iova) {
                break r;
            }
            others.push(r);
        };
        for i in 0..3u8 {
            m.dma_write(c.iova, &[i + 10; 8], 0, "test").unwrap();
            let mut b = [0u8; 8];
            m.dma_read(a.iova + 8, &mut b, 0, "test").unwrap();
            assert_eq!(b, [1; 8]);
            m.dma_read(c.iova, &mut b, 0, "test").unwrap();
            assert_eq!(b, [i + 10; 8]);
        }
        assert!(m.free_coherent(&c));
        let gone = m.dma_read(c.iova, &mut [0u8; 8], 0, "test");
        assert_eq!(gone.unwrap_err().kind, FaultKind::Unmapped);
        assert!(!m.is_mapped(c.iova, 8));
        assert!(m.is_mapped(a.iova, 8192) && !m.is_mapped(a.iova, 8193));
        for r in &others {
            assert!(m.free_coherent(r));
        }
        assert!(m.free_coherent(&a));
    }

    /// Volatile copies move exactly the bytes asked for, at every alignment of the device
    /// side to a 16-byte boundary and every length across the byte, word, 16-byte and
    /// four-access boundaries.
    #[test]
    fn volatile_copies_at_every_alignment() {
        #[repr(C, align(16))]
        struct Mem([u8; 192]);
        let mut mem = Mem([0u8; 192]);
        let mem = &mut mem.0;
        for off in 0..17 {
            for len in 0..161 {
                mem.iter_mut().for_each(|b| *b = 0xEE);
                let data: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(7) ^ 0x5A).collect();
                let base = NonNull::new(mem.as_mut_ptr()).unwrap();
                // SAFETY: `off + len <= 176 < 192`: inside `mem`, which nothing else touches.
                let p = unsafe { base.add(off) };
                // SAFETY: as above.
                unsafe { volatile_write(p, &data) };
                assert!(mem[..off].iter().all(|&b| b == 0xEE), "{off}+{len}: before");
                assert_eq!(&mem[off..off + len], &data[..], "{off}+{len}");
                assert!(
                    mem[off + len..].iter().all(|&b| b == 0xEE),
                    "{off}+{len}: after"
                );
                let mut back = vec![0u8; len];
                // SAFETY: as above.
                unsafe { volatile_read(p, &mut back) };
                assert_eq!(back, data, "{off}+{len}: read back");
            }
        }
    }
}
