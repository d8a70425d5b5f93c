//! DMA memory: hugepage-backed blocks mapped into the IOMMU, carved into 4 KiB pages, and
//! IOMMU mappings of caller buffers.
//!
//! Host memory comes in 2 MiB blocks, each `mmap`ed with `MAP_HUGETLB` (one 2 MiB page, so
//! one IOMMU and one TLB entry) when hugepages are available, else from ordinary 4 KiB pages
//! aligned to 2 MiB. Each block is mapped once with `VFIO_IOMMU_MAP_DMA` at a 2 MiB-aligned
//! IOVA; allocations of up to 2 MiB take runs of 4 KiB pages inside a block (a bitmap per
//! block), so CPU address and IOVA share every alignment up to 2 MiB. Larger allocations get
//! blocks of their own. Blocks stay mapped until the pool is dropped, so freeing is cheap
//! and never races with the IOMMU.
//!
//! Every mapping is marked `MADV_DONTFORK`: after a `fork`, a copy-on-write fault in the
//! parent would otherwise move the parent to a new page while the device keeps using the
//! pinned old one.

use std::collections::BTreeMap;
use std::io;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use uhca_hal::platform::{DmaError, DmaRegion};

use super::error::VfioError;
use super::iova::{IovaAllocator, IovaRange};
use super::paths::{VfioPaths, free_hugepages_2m};

/// Size of a DMA block and of a hugepage.
pub const BLOCK_SIZE: usize = 2 << 20;
/// Granule of allocations inside a block.
pub const PAGE_SIZE: usize = 4096;
const PAGES_PER_BLOCK: usize = BLOCK_SIZE / PAGE_SIZE;

/// Whether DMA memory uses 2 MiB hugepages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HugePages {
    /// Use hugepages when the kernel has free ones; otherwise print one message (and keep it
    /// for [`VfioPlatform::dma_notice`](super::VfioPlatform::dma_notice)) and use 4 KiB pages.
    #[default]
    Prefer,
    /// Use hugepages only; an allocation fails when none are left.
    Require,
    /// Never use hugepages.
    Never,
}

/// What the pool decided to try for the next block.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// `mmap` with `MAP_HUGETLB`.
    TryHuge,
    /// Ordinary pages, with the message to give (once) when it is a fallback.
    Small(Option<String>),
}

fn fallback_message(free: Option<u64>, errno: Option<i32>) -> String {
    let mut m = String::from("uhca-vfio: no 2 MiB hugepages available");
    match (free, errno) {
        (Some(n), None) => m.push_str(&format!(" ({n} free)")),
        (_, Some(e)) => m.push_str(&format!(
            " (mmap MAP_HUGETLB: {})",
            io::Error::from_raw_os_error(e)
        )),
        (None, None) => {}
    }
    m.push_str(
        "; using 4 KiB pages for DMA memory instead, which costs 512 times more IOMMU and \
         TLB entries. Reserve hugepages with `echo 512 > /proc/sys/vm/nr_hugepages` \
         (1 GiB) or boot with hugepages=512.",
    );
    m
}

/// Decides how to back `blocks` new 2 MiB blocks given the policy and the kernel's count
/// of free hugepages (`None` when unknown: then trying is the only way to find out).
pub(crate) fn plan_backing(
    policy: HugePages,
    free: Option<u64>,
    blocks: u64,
) -> Result<Plan, VfioError> {
    let short = free.is_some_and(|n| n < blocks);
    match policy {
        HugePages::Never => Ok(Plan::Small(None)),
        HugePages::Require if short => Err(VfioError::NoHugePages { free, errno: None }),
        HugePages::Require => Ok(Plan::TryHuge),
        HugePages::Prefer if short => Ok(Plan::Small(Some(fallback_message(free, None)))),
        HugePages::Prefer => Ok(Plan::TryHuge),
    }
}

/// What to do when the `MAP_HUGETLB` attempt failed with `errno`: the fallback message, or
/// the error when hugepages are required.
pub(crate) fn after_huge_failure(
    policy: HugePages,
    free: Option<u64>,
    errno: i32,
) -> Result<String, VfioError> {
    match policy {
        HugePages::Require => Err(VfioError::NoHugePages {
            free,
            errno: Some(errno),
        }),
        _ => Ok(fallback_message(free, Some(errno))),
    }
}

/// An anonymous private mapping owned by the pool, unmapped on drop.
#[derive(Debug)]
pub(crate) struct HostMapping {
    ptr: NonNull<u8>,
    len: usize,
    huge: bool,
}

// SAFETY: a HostMapping owns its address range exclusively and is only accessed through
// raw pointers (volatile accesses by the HAL, the kernel through the IOMMU); moving the
// owner to another thread moves no reference.
unsafe impl Send for HostMapping {}
// SAFETY: as for Send; `&HostMapping` gives out only the address.
unsafe impl Sync for HostMapping {}

fn mmap_anon(len: usize, huge: bool) -> io::Result<NonNull<u8>> {
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    if huge {
        flags |= libc::MAP_HUGETLB | libc::MAP_HUGE_2MB;
    }
    // SAFETY: an anonymous mapping at an address of the kernel's choosing touches no
    // existing memory.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned null"))
}

/// Unmaps `len` bytes at `ptr`.
///
/// # Safety
///
/// The range must be (part of) a mapping this module made and nothing may use it after.
unsafe fn munmap(ptr: *mut u8, len: usize) {
    // SAFETY: per this function's contract.
    let r = unsafe { libc::munmap(ptr.cast(), len) };
    debug_assert_eq!(r, 0, "munmap failed: {}", io::Error::last_os_error());
}

impl HostMapping {
    /// Maps `len` bytes (a multiple of 2 MiB) aligned to `align` (a power of two of at
    /// least 2 MiB), from hugepages when `huge`.
    pub(crate) fn new(len: usize, align: usize, huge: bool) -> io::Result<Self> {
        debug_assert!(
            len.is_multiple_of(BLOCK_SIZE) && align.is_power_of_two() && align >= BLOCK_SIZE
        );
        let unit = if huge {
            BLOCK_SIZE
        } else {
            super::sys::page_size()
        };
        // Hugetlb mappings are 2 MiB-aligned already; anything else is over-reserved by
        // `align - unit` and trimmed.
        let extra = align.saturating_sub(unit);
        let total = len
            .checked_add(extra)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        let base = mmap_anon(total, huge)?;
        let addr = base.as_ptr() as usize;
        let aligned = (addr + align - 1) & !(align - 1);
        let head = aligned - addr;
        let tail = total - head - len;
        if head > 0 {
            // SAFETY: the head lies inside the mapping just made and is never used.
            unsafe { munmap(base.as_ptr(), head) };
        }
        if tail > 0 {
            // SAFETY: the tail lies inside the mapping just made and is never used.
            unsafe { munmap(base.as_ptr().wrapping_add(head + len), tail) };
        }
        let ptr = base.as_ptr().wrapping_add(head);
        let this = HostMapping {
            ptr: NonNull::new(ptr).ok_or_else(|| io::Error::other("null mapping"))?,
            len,
            huge,
        };
        // SAFETY: the range is our own mapping; madvise changes only its fork behaviour.
        let r = unsafe { libc::madvise(ptr.cast(), len, libc::MADV_DONTFORK) };
        if r != 0 {
            return Err(io::Error::last_os_error()); // `this` unmaps on drop
        }
        Ok(this)
    }

    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for HostMapping {
    fn drop(&mut self) {
        // SAFETY: we own the mapping; the pool drops it only after its IOMMU mapping is
        // gone and after the last DmaRegion into it was freed (or the device disabled).
        unsafe { munmap(self.ptr.as_ptr(), self.len) };
    }
}

/// Zeroes `len` bytes at `p` with volatile stores (the memory is device-shared, so only
/// volatile or atomic raw accesses are allowed on it).
///
/// # Safety
///
/// `p..p+len` must be valid for writes, 8-byte aligned, `len` a multiple of 8.
unsafe fn zero_volatile(p: *mut u8, len: usize) {
    let words = p.cast::<u64>();
    for i in 0..len / 8 {
        // SAFETY: in bounds and aligned per the contract.
        unsafe { words.add(i).write_volatile(0) };
    }
}

/// The IOMMU operations the pool needs (VFIO in production, a recorder in tests).
pub(crate) trait IommuMap: Send + Sync {
    /// Maps `len` bytes at `vaddr` at `iova`; the errno on failure.
    ///
    /// # Safety
    ///
    /// `vaddr..vaddr+len` must stay mapped until `unmap` of the same range, and be accessed
    /// only through raw pointers meanwhile.
    unsafe fn map(&self, iova: u64, len: usize, vaddr: *mut u8) -> Result<(), i32>;
    /// Unmaps a range mapped by `map`, exactly.
    fn unmap(&self, iova: u64, len: usize) -> Result<(), i32>;
}

#[derive(Debug)]
struct Block {
    mem: HostMapping,
    iova: u64,
    used: [u64; PAGES_PER_BLOCK / 64],
    /// Free pages, so that full blocks are skipped in O(1) (a driver holds thousands of
    /// firmware pages).
    free: usize,
}

impl Block {
    fn new(mem: HostMapping, iova: u64) -> Self {
        Block {
            mem,
            iova,
            used: [0; PAGES_PER_BLOCK / 64],
            free: PAGES_PER_BLOCK,
        }
    }
    fn is_used(&self, page: usize) -> bool {
        self.used[page / 64] & (1 << (page % 64)) != 0
    }
    fn set(&mut self, first: usize, n: usize, used: bool) {
        for p in first..first + n {
            let bit = 1u64 << (p % 64);
            let w = &mut self.used[p / 64];
            if used && *w & bit == 0 {
                *w |= bit;
                self.free -= 1;
            } else if !used && *w & bit != 0 {
                *w &= !bit;
                self.free += 1;
            }
        }
    }
    /// First run of `n` free pages starting at a multiple of `align` pages.
    fn find_run(&self, n: usize, align: usize) -> Option<usize> {
        if self.free < n {
            return None;
        }
        if n == 1 {
            // The common case (one firmware page): the first clear bit, word by word.
            for (i, w) in self.used.iter().enumerate() {
                let mut free = !*w;
                while free != 0 {
                    let p = i * 64 + free.trailing_zeros() as usize;
                    if p.is_multiple_of(align) {
                        return Some(p);
                    }
                    free &= free - 1;
                }
            }
            return None;
        }
        let mut start = 0;
        while start + n <= PAGES_PER_BLOCK {
            match (start..start + n).find(|&p| self.is_used(p)) {
                None => return Some(start),
                Some(p) => start = (p + 1).div_ceil(align) * align,
            }
        }
        None
    }
}

#[derive(Debug)]
struct UserMapping {
    len: usize,
    map_iova: u64,
    map_len: usize,
    /// The IOVA range reserved for it (`map_iova..map_iova + map_len` and, for a large
    /// mapping, the unmapped space before it that aligns it).
    res_iova: u64,
    res_len: u64,
}

/// A user mapping spanning more than this many IOMMU pages keeps its address's offset
/// within [`LARGE_MAP_ALIGN`] in its IOVA: a memory key describes a region with at most 512
/// translation entries, of pages whose offset the application's address and the IOVA share,
/// so a large registration needs large pages in common.
const LARGE_MAP_PAGES: usize = 512;
/// 2 MiB: with it, a key of 512 entries covers 1 GiB.
const LARGE_MAP_ALIGN: usize = 2 << 20;

/// Counters describing a pool, for diagnostics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DmaStats {
    /// 2 MiB blocks carved into pages.
    pub blocks: usize,
    /// Blocks (and dedicated mappings) backed by hugepages.
    pub huge_mappings: usize,
    /// Allocations larger than a block, with their own mapping.
    pub dedicated: usize,
    /// Live mappings of caller buffers.
    pub user_mappings: usize,
    /// Pages (4 KiB) allocated inside blocks.
    pub pages_in_use: usize,
}

struct State {
    /// Keyed by IOVA, so `free` finds a region's block in O(log n).
    blocks: BTreeMap<u64, Block>,
    dedicated: BTreeMap<u64, HostMapping>,
    user: BTreeMap<u64, UserMapping>,
    notice: Option<String>,
}

/// The DMA allocator of one device.
pub(crate) struct DmaPool<M: IommuMap> {
    mapper: M,
    state: Mutex<State>,
    /// The IOVA space of the IOMMU domain, shared with the other devices of the container;
    /// locked after `state`, never before.
    iova: Arc<Mutex<IovaAllocator>>,
    /// The part of it this device can reach.
    window: (u64, u64),
    policy: HugePages,
    paths: VfioPaths,
    /// IOMMU/CPU page granule for caller buffers.
    granule: usize,
    /// Print the hugepage fallback message on stderr (besides keeping it).
    announce: bool,
}

impl<M: IommuMap> DmaPool<M> {
    pub(crate) fn new(
        mapper: M,
        iova: Arc<Mutex<IovaAllocator>>,
        window: (u64, u64),
        policy: HugePages,
        paths: VfioPaths,
        granule: usize,
        announce: bool,
    ) -> Self {
        DmaPool {
            mapper,
            state: Mutex::new(State {
                blocks: BTreeMap::new(),
                dedicated: BTreeMap::new(),
                user: BTreeMap::new(),
                notice: None,
            }),
            iova,
            window,
            policy,
            paths,
            granule: granule.max(PAGE_SIZE),
            announce,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent state (every mutation is
        // complete before anything can panic), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn iova_space(&self) -> std::sync::MutexGuard<'_, IovaAllocator> {
        self.iova.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn iova_alloc(&self, size: u64, align: u64) -> Option<u64> {
        self.iova_space()
            .alloc_in(size, align, self.window.0, self.window.1)
    }

    fn iova_free(&self, start: u64, size: u64) {
        let r = self.iova_space().free(start, size);
        debug_assert!(r.is_ok(), "IOVA {start:#x}+{size:#x} freed twice");
    }

    /// The free IOVA ranges this device can still allocate from.
    pub(crate) fn free_iova_ranges(&self) -> Vec<IovaRange> {
        let (lo, hi) = self.window;
        self.iova_space()
            .free_ranges()
            .iter()
            .filter(|r| r.last >= lo && r.start <= hi)
            .map(|r| IovaRange::new(r.start.max(lo), r.last.min(hi)))
            .collect()
    }

    pub(crate) fn notice(&self) -> Option<String> {
        self.lock().notice.clone()
    }

    pub(crate) fn stats(&self) -> DmaStats {
        let st = self.lock();
        DmaStats {
            blocks: st.blocks.len(),
            huge_mappings: st.blocks.values().filter(|b| b.mem.huge).count()
                + st.dedicated.values().filter(|m| m.huge).count(),
            dedicated: st.dedicated.len(),
            user_mappings: st.user.len(),
            pages_in_use: st.blocks.values().map(|b| PAGES_PER_BLOCK - b.free).sum(),
        }
    }

    fn give_notice(&self, st: &mut State, msg: String) {
        if st.notice.is_none() {
            if self.announce {
                eprintln!("{msg}");
            }
            st.notice = Some(msg);
        }
    }

    /// Host memory for `len` bytes (a multiple of 2 MiB) aligned to `align`, per the policy.
    fn host_memory(
        &self,
        st: &mut State,
        len: usize,
        align: usize,
    ) -> Result<HostMapping, DmaError> {
        let free = free_hugepages_2m(&self.paths);
        let plan = plan_backing(self.policy, free, (len / BLOCK_SIZE) as u64).map_err(|e| {
            self.give_notice(st, e.to_string());
            DmaError::OutOfMemory
        })?;
        let small = match plan {
            Plan::Small(msg) => msg,
            Plan::TryHuge => match HostMapping::new(len, align, true) {
                Ok(m) => return Ok(m),
                Err(e) => {
                    let errno = e.raw_os_error().unwrap_or(libc::ENOMEM);
                    match after_huge_failure(self.policy, free, errno) {
                        Ok(msg) => Some(msg),
                        Err(e) => {
                            self.give_notice(st, e.to_string());
                            return Err(DmaError::OutOfMemory);
                        }
                    }
                }
            },
        };
        if let Some(msg) = small {
            self.give_notice(st, msg);
        }
        HostMapping::new(len, align, false).map_err(|_| DmaError::OutOfMemory)
    }

    /// Maps `mem` into the IOMMU at a fresh IOVA aligned to `align`.
    fn map_host(&self, mem: &HostMapping, align: usize) -> Result<u64, DmaError> {
        let iova = self
            .iova_alloc(mem.len() as u64, align.max(self.granule) as u64)
            .ok_or(DmaError::OutOfMemory)?;
        // SAFETY: `mem` is our own mapping; it stays mapped until the pool unmaps this IOVA
        // (on drop or on free of a dedicated mapping) and is only reached through raw
        // pointers: the HAL's volatile accesses and the device.
        match unsafe { self.mapper.map(iova, mem.len(), mem.ptr().as_ptr()) } {
            Ok(()) => Ok(iova),
            Err(errno) => {
                self.iova_free(iova, mem.len() as u64);
                Err(DmaError::MappingFailed(errno))
            }
        }
    }

    pub(crate) fn alloc(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        if len == 0 || !align.is_power_of_two() {
            return Err(DmaError::InvalidRequest);
        }
        let mut st = self.lock();
        if len <= BLOCK_SIZE && align <= BLOCK_SIZE {
            let pages = len.div_ceil(PAGE_SIZE);
            let align_pages = (align / PAGE_SIZE).max(1);
            let found = st
                .blocks
                .iter()
                .find_map(|(&k, b)| b.find_run(pages, align_pages).map(|p| (k, p)));
            let (key, first) = match found {
                Some(f) => f,
                None => {
                    let mem = self.host_memory(&mut st, BLOCK_SIZE, BLOCK_SIZE)?;
                    let iova = self.map_host(&mem, BLOCK_SIZE)?;
                    st.blocks.insert(iova, Block::new(mem, iova));
                    (iova, 0)
                }
            };
            let Some(b) = st.blocks.get_mut(&key) else {
                return Err(DmaError::OutOfMemory); // unreachable: the key was just found
            };
            b.set(first, pages, true);
            let cpu = b.mem.ptr().as_ptr().wrapping_add(first * PAGE_SIZE);
            // SAFETY: the pages lie inside the block, are now ours, and no device access to
            // them is legitimate (they were free); 4 KiB-aligned, length a page multiple.
            unsafe { zero_volatile(cpu, pages * PAGE_SIZE) };
            return Ok(DmaRegion {
                cpu: NonNull::new(cpu).ok_or(DmaError::OutOfMemory)?,
                iova: b.iova + (first * PAGE_SIZE) as u64,
                len,
            });
        }
        // Larger than a block or more aligned: a mapping of its own (fresh, so zeroed).
        let size = len
            .checked_next_multiple_of(BLOCK_SIZE)
            .ok_or(DmaError::InvalidRequest)?;
        let align = align.max(BLOCK_SIZE);
        let mem = self.host_memory(&mut st, size, align)?;
        let iova = self.map_host(&mem, align)?;
        let cpu = mem.ptr();
        st.dedicated.insert(iova, mem);
        Ok(DmaRegion { cpu, iova, len })
    }

    pub(crate) fn free(&self, region: DmaRegion) {
        let mut st = self.lock();
        if let Some((_, b)) = st
            .blocks
            .range_mut(..=region.iova)
            .next_back()
            .filter(|(_, b)| region.iova < b.iova + BLOCK_SIZE as u64)
        {
            let first = ((region.iova - b.iova) as usize) / PAGE_SIZE;
            let pages = region.len.div_ceil(PAGE_SIZE);
            debug_assert!(first + pages <= PAGES_PER_BLOCK);
            debug_assert!((first..first + pages).all(|p| b.is_used(p)), "double free");
            b.set(first, pages.min(PAGES_PER_BLOCK - first), false);
            return;
        }
        if let Some(mem) = st.dedicated.remove(&region.iova) {
            match self.mapper.unmap(region.iova, mem.len()) {
                Ok(()) => {
                    self.iova_free(region.iova, mem.len() as u64);
                    drop(mem);
                }
                Err(e) => {
                    // The device may still reach it: keep the memory and the IOVA.
                    eprintln!(
                        "uhca-vfio: VFIO_IOMMU_UNMAP_DMA of {:#x}+{:#x} failed ({}); \
                         leaking the memory rather than reusing it",
                        region.iova,
                        mem.len(),
                        io::Error::from_raw_os_error(e)
                    );
                    std::mem::forget(mem);
                }
            }
            return;
        }
        debug_assert!(false, "free of DMA memory the pool never allocated");
    }

    /// Maps a caller's buffer; see `Dma::map`. The IOMMU maps whole pages, so the rest of
    /// the first and last page is reachable by the device too.
    ///
    /// # Safety
    ///
    /// As `Dma::map`.
    pub(crate) unsafe fn map_user(&self, cpu: NonNull<u8>, len: usize) -> Result<u64, DmaError> {
        if len == 0 {
            return Err(DmaError::InvalidRequest);
        }
        let g = self.granule;
        let addr = cpu.as_ptr() as usize;
        let base = addr & !(g - 1);
        let end = addr
            .checked_add(len)
            .and_then(|e| e.checked_next_multiple_of(g))
            .ok_or(DmaError::InvalidRequest)?;
        let map_len = end - base;
        let mut st = self.lock();
        // A large mapping starts at the same offset within 2 MiB as its address.
        let (align, slack) = if map_len / g > LARGE_MAP_PAGES && LARGE_MAP_ALIGN > g {
            (LARGE_MAP_ALIGN, base % LARGE_MAP_ALIGN)
        } else {
            (g, 0)
        };
        let res_len = (slack + map_len) as u64;
        let res_iova = self
            .iova_alloc(res_len, align as u64)
            .ok_or(DmaError::OutOfMemory)?;
        let map_iova = res_iova + slack as u64;
        // `base` is derived from `cpu`'s address; keep its provenance.
        let vaddr = cpu.as_ptr().wrapping_sub(addr - base);
        // SAFETY: the caller guarantees the buffer stays allocated and is used as device
        // memory until `unmap`; the pages around it belong to the same allocation or to
        // memory the caller accepted to expose (documented on `Dma::map` for this platform).
        if let Err(e) = unsafe { self.mapper.map(map_iova, map_len, vaddr) } {
            self.iova_free(res_iova, res_len);
            return Err(DmaError::MappingFailed(e));
        }
        let iova = map_iova + (addr - base) as u64;
        st.user.insert(
            iova,
            UserMapping {
                len,
                map_iova,
                map_len,
                res_iova,
                res_len,
            },
        );
        Ok(iova)
    }

    pub(crate) fn unmap_user(&self, iova: u64, len: usize) -> Result<(), DmaError> {
        let mut st = self.lock();
        let m = match st.user.get(&iova) {
            Some(m) if m.len == len => m,
            _ => return Err(DmaError::NotMapped),
        };
        let (map_iova, map_len, res_iova, res_len) = (m.map_iova, m.map_len, m.res_iova, m.res_len);
        self.mapper
            .unmap(map_iova, map_len)
            .map_err(DmaError::MappingFailed)?;
        st.user.remove(&iova);
        self.iova_free(res_iova, res_len);
        Ok(())
    }
}

impl<M: IommuMap> Drop for DmaPool<M> {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        let user = std::mem::take(&mut st.user);
        let dedicated = std::mem::take(&mut st.dedicated);
        let blocks = std::mem::take(&mut st.blocks);
        // The IOVA space may outlive this pool (another device of the container keeps it):
        // return each range once the IOMMU no longer maps it. What cannot be unmapped stays
        // reserved, and its memory is leaked rather than reused.
        for (_, m) in user {
            if self.mapper.unmap(m.map_iova, m.map_len).is_ok() {
                self.iova_free(m.res_iova, m.res_len);
            }
        }
        for (iova, mem) in dedicated {
            if self.mapper.unmap(iova, mem.len()).is_ok() {
                self.iova_free(iova, mem.len() as u64);
            } else {
                std::mem::forget(mem);
            }
        }
        for (iova, b) in blocks {
            if self.mapper.unmap(iova, b.mem.len()).is_ok() {
                self.iova_free(iova, b.mem.len() as u64);
            } else {
                std::mem::forget(b.mem);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::iova::IovaRange;
    use crate::paths::fake::FakeSys;
    use std::sync::Arc;

    /// Records IOMMU calls; fails maps with `fail_with` when set.
    /// (map or unmap, iova, len, vaddr)
    type Event = (bool, u64, usize, usize);

    #[derive(Clone, Default)]
    pub(crate) struct Recorder {
        pub(crate) log: Arc<Mutex<Vec<Event>>>,
        pub(crate) fail_with: Arc<Mutex<Option<i32>>>,
    }

    impl IommuMap for Recorder {
        unsafe fn map(&self, iova: u64, len: usize, vaddr: *mut u8) -> Result<(), i32> {
            if let Some(e) = *self.fail_with.lock().unwrap() {
                return Err(e);
            }
            self.log
                .lock()
                .unwrap()
                .push((true, iova, len, vaddr as usize));
            Ok(())
        }
        fn unmap(&self, iova: u64, len: usize) -> Result<(), i32> {
            let mut log = self.log.lock().unwrap();
            let mapped = log
                .iter()
                .filter(|e| e.1 == iova && e.2 == len)
                .fold(0i32, |n, e| if e.0 { n + 1 } else { n - 1 });
            if mapped != 1 {
                return Err(libc::EINVAL);
            }
            log.push((false, iova, len, 0));
            Ok(())
        }
    }

    fn pool(policy: HugePages, free_huge: Option<u64>) -> (DmaPool<Recorder>, Recorder, FakeSys) {
        let fake = FakeSys::new();
        if let Some(n) = free_huge {
            fake.set_free_hugepages(n);
        }
        let rec = Recorder::default();
        let iova = IovaAllocator::new(&[IovaRange::new(0x1_0000, (1 << 32) - 1)]);
        let p = DmaPool::new(
            rec.clone(),
            Arc::new(Mutex::new(iova)),
            (0, u64::MAX),
            policy,
            fake.paths(),
            4096,
            false,
        );
        (p, rec, fake)
    }

    fn read_all(r: &DmaRegion) -> Vec<u8> {
        (0..r.len)
            // SAFETY: in bounds of a live region.
            .map(|i| unsafe { r.cpu.as_ptr().add(i).read_volatile() })
            .collect()
    }

    #[test]
    fn plan_decisions() {
        assert_eq!(
            plan_backing(HugePages::Never, Some(100), 1).unwrap(),
            Plan::Small(None)
        );
        assert_eq!(
            plan_backing(HugePages::Prefer, Some(1), 1).unwrap(),
            Plan::TryHuge
        );
        assert_eq!(
            plan_backing(HugePages::Prefer, None, 1).unwrap(),
            Plan::TryHuge
        );
        assert_eq!(
            plan_backing(HugePages::Require, None, 4).unwrap(),
            Plan::TryHuge
        );
        match plan_backing(HugePages::Prefer, Some(0), 1).unwrap() {
            Plan::Small(Some(m)) => {
                assert!(m.contains("no 2 MiB hugepages available (0 free)"), "{m}");
                assert!(m.contains("using 4 KiB pages"), "{m}");
                assert!(m.contains("/proc/sys/vm/nr_hugepages"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        let e = plan_backing(HugePages::Require, Some(3), 4).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("hugepages are required but none are available (3 free)"),
            "{m}"
        );
        assert!(m.contains("nr_hugepages"), "{m}");
        // The attempt itself failed.
        let m = after_huge_failure(HugePages::Prefer, None, libc::ENOMEM).unwrap();
        assert!(
            m.contains("mmap MAP_HUGETLB: Cannot allocate memory"),
            "{m}"
        );
        let e = after_huge_failure(HugePages::Require, Some(0), libc::ENOMEM).unwrap_err();
        assert!(matches!(
            e,
            VfioError::NoHugePages {
                errno: Some(libc::ENOMEM),
                ..
            }
        ));
    }

    #[test]
    fn small_allocations_share_a_block_and_are_zeroed() {
        let (p, rec, _f) = pool(HugePages::Never, None);
        let a = p.alloc(64, 64).unwrap();
        let b = p.alloc(4096, 4096).unwrap();
        let c = p.alloc(3 * 4096, 16384).unwrap();
        assert_eq!(rec.log.lock().unwrap().len(), 1, "one block mapped once");
        for r in [&a, &b, &c] {
            assert!(read_all(r).iter().all(|&x| x == 0));
        }
        assert_eq!(a.iova % BLOCK_SIZE as u64, 0);
        assert_eq!(b.iova, a.iova + 4096);
        assert_eq!(c.iova % 16384, 0);
        assert_eq!(c.cpu.as_ptr() as usize % 16384, 0);
        // CPU offset and IOVA offset agree.
        assert_eq!(
            c.cpu.as_ptr() as usize - a.cpu.as_ptr() as usize,
            (c.iova - a.iova) as usize
        );
        // Dirty b, free it, allocate again: same page, zeroed.
        // SAFETY: b is live and 4096 bytes long.
        unsafe { b.cpu.as_ptr().write_bytes(0xab, 4096) };
        let b_iova = b.iova;
        p.free(b);
        let b2 = p.alloc(100, 8).unwrap();
        assert_eq!(b2.iova, b_iova);
        assert!(read_all(&b2).iter().all(|&x| x == 0));
        assert_eq!(p.stats().pages_in_use, 1 + 1 + 3);
        assert!(p.notice().is_none(), "Never gives no fallback notice");
    }

    #[test]
    fn a_full_block_opens_another_and_large_ones_get_their_own() {
        let (p, rec, _f) = pool(HugePages::Never, None);
        let whole = p.alloc(BLOCK_SIZE, BLOCK_SIZE).unwrap();
        let next = p.alloc(4096, 4096).unwrap();
        assert_eq!(p.stats().blocks, 2);
        assert_ne!(whole.iova, next.iova);
        let big = p.alloc(5 << 20, 4096).unwrap();
        assert_eq!(p.stats().dedicated, 1);
        assert_eq!(big.iova % BLOCK_SIZE as u64, 0);
        assert_eq!(big.cpu.as_ptr() as usize % BLOCK_SIZE, 0);
        assert!(read_all(&big).iter().all(|&x| x == 0));
        let (big_iova, big_cpu) = (big.iova, big.cpu.as_ptr() as usize);
        p.free(big);
        let log = rec.log.lock().unwrap().clone();
        assert_eq!(log.last().unwrap(), &(false, big_iova, 6 << 20, 0));
        assert!(log.contains(&(true, big_iova, 6 << 20, big_cpu)));
        assert_eq!(p.stats().dedicated, 0);
        // Alignment larger than a block.
        let huge_align = p.alloc(4096, 8 << 20).unwrap();
        assert_eq!(huge_align.iova % (8 << 20), 0);
        assert_eq!(huge_align.cpu.as_ptr() as usize % (8 << 20), 0);
    }

    #[test]
    fn invalid_requests_and_failures() {
        let (p, rec, _f) = pool(HugePages::Never, None);
        assert_eq!(p.alloc(0, 8).unwrap_err(), DmaError::InvalidRequest);
        assert_eq!(p.alloc(8, 3).unwrap_err(), DmaError::InvalidRequest);
        assert_eq!(
            p.alloc(usize::MAX, 8).unwrap_err(),
            DmaError::InvalidRequest
        );
        *rec.fail_with.lock().unwrap() = Some(libc::ENOMEM);
        assert_eq!(
            p.alloc(8, 8).unwrap_err(),
            DmaError::MappingFailed(libc::ENOMEM)
        );
        // The IOVA of the failed mapping went back.
        assert_eq!(p.iova_space().free_bytes(), (1u128 << 32) - 0x1_0000);
        *rec.fail_with.lock().unwrap() = None;
        // Exhausted IOVA space.
        let tiny = DmaPool::new(
            rec.clone(),
            Arc::new(Mutex::new(IovaAllocator::new(&[IovaRange::new(
                0x20_0000, 0x3f_ffff,
            )]))),
            (0, u64::MAX),
            HugePages::Never,
            VfioPaths::default(),
            4096,
            false,
        );
        let _one = tiny.alloc(BLOCK_SIZE, 4096).unwrap();
        assert_eq!(tiny.alloc(8, 8).unwrap_err(), DmaError::OutOfMemory);
    }

    #[test]
    fn caller_buffers_are_mapped_by_whole_pages() {
        let (p, rec, _f) = pool(HugePages::Never, None);
        let mut buf = vec![0u8; 3 * 4096];
        let start = buf.as_mut_ptr().wrapping_add(100);
        let cpu = NonNull::new(start).unwrap();
        // SAFETY: the buffer outlives the mapping (unmapped below) and is not accessed
        // meanwhile.
        let iova = unsafe { p.map_user(cpu, 5000) }.unwrap();
        let (_, map_iova, map_len, vaddr) = *rec.log.lock().unwrap().last().unwrap();
        assert_eq!(vaddr % 4096, 0);
        assert_eq!(iova - map_iova, (start as usize - vaddr) as u64);
        assert!(map_len >= 5000 && map_len % 4096 == 0 && map_len <= 3 * 4096);
        assert_eq!(p.stats().user_mappings, 1);
        assert_eq!(p.unmap_user(iova, 4999), Err(DmaError::NotMapped));
        assert_eq!(p.unmap_user(iova + 1, 5000), Err(DmaError::NotMapped));
        p.unmap_user(iova, 5000).unwrap();
        assert_eq!(p.unmap_user(iova, 5000), Err(DmaError::NotMapped));
        assert_eq!(
            rec.log.lock().unwrap().last().unwrap(),
            &(false, map_iova, map_len, 0)
        );
        // SAFETY: as above.
        assert_eq!(unsafe { p.map_user(cpu, 0) }, Err(DmaError::InvalidRequest));
        drop(buf);
    }

    /// A caller's buffer of more than 512 pages gets an IOVA at its own offset within
    /// 2 MiB (so a memory key over it can use 2 MiB pages); the space reserved before it
    /// returns with the unmap, and a small buffer keeps the 4 KiB rule only.
    #[test]
    fn large_caller_buffers_keep_their_offset_within_2_mib() {
        let (p, rec, _f) = pool(HugePages::Never, None);
        let before = p.free_iova_ranges();
        let len = 3 << 20;
        let mut buf = vec![0u8; len + 8192];
        let start = buf.as_mut_ptr().wrapping_add(4096 + 24);
        let cpu = NonNull::new(start).unwrap();
        // SAFETY: the buffer outlives the mapping (unmapped below) and is not accessed
        // meanwhile.
        let iova = unsafe { p.map_user(cpu, len) }.unwrap();
        assert_eq!(iova % (2 << 20), start as u64 % (2 << 20));
        let (_, map_iova, map_len, vaddr) = *rec.log.lock().unwrap().last().unwrap();
        assert_eq!(map_iova % (2 << 20), vaddr as u64 % (2 << 20));
        assert!(map_len >= len && map_len % 4096 == 0);
        p.unmap_user(iova, len).unwrap();
        assert_eq!(p.free_iova_ranges(), before, "every reserved IOVA returned");
        // A small one: only the offset within its page is kept.
        // SAFETY: as above.
        let small = unsafe { p.map_user(cpu, 5000) }.unwrap();
        assert_eq!(small % 4096, start as u64 % 4096);
        p.unmap_user(small, 5000).unwrap();
        drop(buf);
    }

    /// Two pools sharing one IOVA space (two functions of one IOMMU group): no IOVA is
    /// handed out twice, each pool stays in its window, and dropping one returns its IOVAs.
    #[test]
    fn pools_sharing_an_iova_space() {
        let rec = Recorder::default();
        let space = Arc::new(Mutex::new(IovaAllocator::new(&[IovaRange::new(
            0x1_0000,
            (1 << 32) - 1,
        )])));
        let total = space.lock().unwrap().free_bytes();
        let mk = |window| {
            DmaPool::new(
                rec.clone(),
                space.clone(),
                window,
                HugePages::Never,
                VfioPaths::default(),
                4096,
                false,
            )
        };
        let wide = mk((0, u64::MAX));
        let narrow = mk((0, (1 << 28) - 1));
        let a = wide.alloc(4096, 4096).unwrap();
        let b = narrow.alloc(4096, 4096).unwrap();
        let c = wide.alloc(3 << 20, 4096).unwrap();
        assert_ne!(a.iova >> 21, b.iova >> 21, "each pool maps its own blocks");
        assert!(b.iova < 1 << 28);
        assert!(narrow.free_iova_ranges().iter().all(|r| r.last < 1 << 28));
        assert!(c.iova + (3 << 20) <= a.iova || a.iova + 4096 <= c.iova);
        drop(wide);
        // Only the narrow pool's block is still taken.
        assert_eq!(
            space.lock().unwrap().free_bytes(),
            total - BLOCK_SIZE as u128
        );
        narrow.free(b);
        drop(narrow);
        assert_eq!(space.lock().unwrap().free_bytes(), total);
    }

    #[test]
    fn drop_unmaps_everything() {
        let (p, rec, _f) = pool(HugePages::Never, None);
        let _a = p.alloc(4096, 4096).unwrap();
        let _b = p.alloc(3 << 20, 4096).unwrap();
        let buf = vec![0u8; 4096];
        // SAFETY: `buf` outlives the pool.
        let _u = unsafe { p.map_user(NonNull::new(buf.as_ptr().cast_mut()).unwrap(), 4096) };
        drop(p);
        let log = rec.log.lock().unwrap();
        let maps = log.iter().filter(|e| e.0).count();
        let unmaps = log.iter().filter(|e| !e.0).count();
        assert_eq!((maps, unmaps), (3, 3));
    }

    /// On this machine there are no hugepages: Prefer falls back with one notice, Require
    /// fails, both without crashing.
    #[test]
    fn hugepage_fallback_and_requirement() {
        let (p, _rec, _f) = pool(HugePages::Prefer, Some(0));
        let r = p.alloc(4096, 4096).unwrap();
        let n = p.notice().expect("a fallback notice");
        assert!(n.contains("using 4 KiB pages"), "{n}");
        assert_eq!(p.stats().huge_mappings, 0);
        p.free(r);
        let (p, _rec, _f) = pool(HugePages::Require, Some(0));
        assert_eq!(p.alloc(4096, 4096).unwrap_err(), DmaError::OutOfMemory);
        let n = p.notice().unwrap();
        assert!(n.contains("required"), "{n}");
        // Unknown count: the MAP_HUGETLB attempt decides (fails here, or succeeds where
        // hugepages exist).
        let (p, _rec, _f) = pool(HugePages::Prefer, None);
        let r = p.alloc(4096, 4096).unwrap();
        let s = p.stats();
        assert!(s.huge_mappings == 1 || p.notice().unwrap().contains("MAP_HUGETLB"));
        p.free(r);
    }

    #[test]
    fn block_run_search() {
        let mut b = Block::new(HostMapping::new(BLOCK_SIZE, BLOCK_SIZE, false).unwrap(), 0);
        assert_eq!(b.find_run(512, 1), Some(0));
        assert_eq!(b.find_run(513, 1), None);
        b.set(0, 1, true);
        assert_eq!(b.find_run(1, 1), Some(1));
        assert_eq!(b.find_run(2, 4), Some(4));
        b.set(4, 1, true);
        assert_eq!(b.find_run(4, 4), Some(8));
        b.set(0, 512, true);
        assert_eq!(b.find_run(1, 1), None);
        assert_eq!(b.free, 0);
        b.set(511, 1, false);
        assert_eq!(b.free, 1);
        assert_eq!(b.find_run(1, 1), Some(511));
        assert_eq!(b.find_run(1, 2), None);
        b.set(0, 512, false);
        assert_eq!(b.free, 512);
        b.set(0, 3, true);
        b.set(0, 3, true); // idempotent: the count follows the bits
        assert_eq!(b.free, 509);
        assert_eq!(b.find_run(1, 1), Some(3));
        assert_eq!(b.find_run(1, 2), Some(4));
        assert_eq!(b.find_run(1, 8), Some(8));
    }

    /// Thousands of single pages (a driver's firmware pages) across many blocks, freed in a
    /// scrambled order and taken again: no page is handed out twice, counts stay exact, and
    /// freed pages are reused before new blocks are made.
    #[test]
    fn many_pages_across_blocks() {
        let (p, rec, _f) = pool(HugePages::Never, None);
        let n = 3 * PAGES_PER_BLOCK + 17;
        let mut regions: Vec<DmaRegion> = (0..n).map(|_| p.alloc(4096, 4096).unwrap()).collect();
        assert_eq!(p.stats().blocks, 4);
        assert_eq!(p.stats().pages_in_use, n);
        let mut iovas: Vec<u64> = regions.iter().map(|r| r.iova).collect();
        iovas.sort_unstable();
        iovas.dedup();
        assert_eq!(iovas.len(), n, "an IOVA handed out twice");
        let mut cpus: Vec<usize> = regions.iter().map(|r| r.cpu.as_ptr() as usize).collect();
        cpus.sort_unstable();
        cpus.dedup();
        assert_eq!(cpus.len(), n, "a CPU page handed out twice");
        // Free every third region, in reverse.
        let mut kept = Vec::new();
        for (i, r) in regions
            .drain(..)
            .enumerate()
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            if i % 3 == 0 {
                p.free(r);
            } else {
                kept.push(r);
            }
        }
        let freed = n.div_ceil(3);
        assert_eq!(p.stats().pages_in_use, n - freed);
        let again: Vec<DmaRegion> = (0..freed).map(|_| p.alloc(4096, 4096).unwrap()).collect();
        assert_eq!(p.stats().blocks, 4, "freed pages are reused");
        assert_eq!(
            rec.log.lock().unwrap().len(),
            4,
            "one IOMMU mapping per block"
        );
        for r in kept.into_iter().chain(again) {
            p.free(r);
        }
        assert_eq!(p.stats().pages_in_use, 0);
    }
}
