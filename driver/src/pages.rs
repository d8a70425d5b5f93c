//! Firmware pages: the pool, and giving and taking them with MANAGE_PAGES.
//!
//! The firmware runs on memory the driver gives it, in 4 KiB pages (boot and init pages
//! during bring-up, more on request at run time, all taken back at teardown). The pool
//! allocates DMA memory in 2 MiB chunks and hands out their pages, tracking each with a
//! bit, so it needs no allocator and can find a returned page from its address alone.
//! The driver gives and takes pages in MANAGE_PAGES batches of at most 512 addresses, for
//! the function the firmware names, and counts how many each function holds.

use heapless::Vec;
use uhca_fwif::cmd::{Command, ManagePagesIn, ManagePagesOut};
use uhca_fwif::consts::{ADAPTER_PAGE_SIZE, ManagePagesOpMod};
use uhca_hal::Platform;
use uhca_hal::cmdq::CmdError;
use uhca_hal::dma::{DmaBuf, DmaMem};
use uhca_hal::{Dma, DmaError};

use crate::error::Error;

/// Bytes per chunk of pages.
pub const CHUNK_BYTES: usize = 2 << 20;
const PAGES_PER_CHUNK: usize = CHUNK_BYTES / ADAPTER_PAGE_SIZE;
const WORDS: usize = PAGES_PER_CHUNK / 64;
/// Most chunks the pool holds (256 MiB of firmware pages, more than any ConnectX asks for).
pub const MAX_CHUNKS: usize = 128;
/// The most firmware pages the pool can hold ([`MAX_CHUNKS`] chunks of 512 pages): the
/// default and the ceiling of [`HcaConfig::max_firmware_pages`](crate::HcaConfig).
pub const MAX_FIRMWARE_PAGES: u32 = (MAX_CHUNKS * PAGES_PER_CHUNK) as u32;

struct Chunk<D: Dma> {
    buf: DmaBuf<D>,
    used: [u64; WORDS],
}

/// Why the pool could not hand out or take back a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PageError {
    /// No DMA memory for another chunk.
    Dma(DmaError),
    /// The budget is spent, or [`MAX_CHUNKS`] are all in use.
    Full,
    /// The firmware returned an address the pool never gave it, or gave twice.
    UnknownPage(u64),
}

impl core::fmt::Display for PageError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PageError::Dma(e) => write!(f, "no DMA memory for firmware pages: {e}"),
            PageError::Full => {
                f.write_str("the firmware page pool is full (budget or chunks spent)")
            }
            PageError::UnknownPage(a) => {
                write!(
                    f,
                    "firmware returned page {a:#x}, which the pool never gave it or gave twice"
                )
            }
        }
    }
}

impl core::error::Error for PageError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            PageError::Dma(e) => Some(e),
            _ => None,
        }
    }
}

/// Firmware pages: which the firmware holds, which are free.
pub struct PagePool<D: Dma + Clone> {
    dma: D,
    chunks: Vec<Chunk<D>, MAX_CHUNKS>,
    given: usize,
    /// The most pages the firmware may hold at once.
    budget: u32,
}

impl<D: Dma + Clone> core::fmt::Debug for PagePool<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PagePool")
            .field("chunks", &self.chunks.len())
            .field("given", &self.given)
            .finish()
    }
}

impl<D: Dma + Clone> PagePool<D> {
    /// An empty pool that allocates through `dma`, with a budget of
    /// [`MAX_FIRMWARE_PAGES`].
    pub fn new(dma: D) -> Self {
        Self::with_budget(dma, MAX_FIRMWARE_PAGES)
    }

    /// An empty pool that gives the firmware at most `budget` pages at once (at most
    /// [`MAX_FIRMWARE_PAGES`]).
    pub fn with_budget(dma: D, budget: u32) -> Self {
        PagePool {
            dma,
            chunks: Vec::new(),
            given: 0,
            budget: budget.min(MAX_FIRMWARE_PAGES),
        }
    }

    /// The most pages the firmware may hold at once.
    pub fn budget(&self) -> u32 {
        self.budget
    }

    /// Pages the firmware holds.
    pub fn given(&self) -> usize {
        self.given
    }

    /// Bytes of DMA memory the pool holds (given or free).
    pub fn reserved_bytes(&self) -> usize {
        self.chunks.len() * CHUNK_BYTES
    }

    /// Takes a free page and returns its IOVA, growing the pool by a chunk if needed.
    ///
    /// # Errors
    ///
    /// [`PageError::Dma`] or [`PageError::Full`].
    pub fn give_one(&mut self) -> Result<u64, PageError> {
        if self.given >= self.budget as usize {
            return Err(PageError::Full);
        }
        for chunk in self.chunks.iter_mut() {
            if let Some(iova) = Self::take_free(chunk) {
                self.given += 1;
                return Ok(iova);
            }
        }
        if self.chunks.is_full() {
            return Err(PageError::Full);
        }
        let buf = DmaBuf::alloc(self.dma.clone(), CHUNK_BYTES, ADAPTER_PAGE_SIZE)
            .map_err(PageError::Dma)?;
        let mut chunk = Chunk {
            buf,
            used: [0; WORDS],
        };
        let iova = Self::take_free(&mut chunk).ok_or(PageError::Full)?;
        // The capacity was checked above, so the push cannot fail.
        if self.chunks.push(chunk).is_err() {
            return Err(PageError::Full);
        }
        self.given += 1;
        Ok(iova)
    }

    fn take_free(chunk: &mut Chunk<D>) -> Option<u64> {
        for (w, word) in chunk.used.iter_mut().enumerate() {
            if *word != u64::MAX {
                let bit = word.trailing_ones() as usize;
                *word |= 1 << bit;
                let page = w * 64 + bit;
                return Some(chunk.buf.iova() + (page * ADAPTER_PAGE_SIZE) as u64);
            }
        }
        None
    }

    /// Takes back a page the firmware returned.
    ///
    /// # Errors
    ///
    /// [`PageError::UnknownPage`] if the pool did not give that page (the device is
    /// wrong; the page is not touched).
    pub fn take_back(&mut self, iova: u64) -> Result<(), PageError> {
        for chunk in self.chunks.iter_mut() {
            let base = chunk.buf.iova();
            if iova >= base && iova < base + CHUNK_BYTES as u64 {
                let off = (iova - base) as usize;
                if !off.is_multiple_of(ADAPTER_PAGE_SIZE) {
                    return Err(PageError::UnknownPage(iova));
                }
                let page = off / ADAPTER_PAGE_SIZE;
                let (w, bit) = (page / 64, page % 64);
                if chunk.used[w] & (1 << bit) == 0 {
                    return Err(PageError::UnknownPage(iova));
                }
                chunk.used[w] &= !(1 << bit);
                self.given -= 1;
                return Ok(());
            }
        }
        Err(PageError::UnknownPage(iova))
    }

    /// Forgets every page given to the firmware, as after a fast teardown, where the
    /// firmware releases its pages without returning them one by one.
    pub fn forget_all(&mut self) {
        for chunk in self.chunks.iter_mut() {
            chunk.used = [0; WORDS];
        }
        self.given = 0;
    }

    /// Frees every chunk whose pages are all free (memory goes back to the platform). The
    /// firmware only uses the pages it holds, so free pages are not in use by the device.
    pub fn shrink(&mut self) {
        let mut i = 0;
        while i < self.chunks.len() {
            if self.chunks[i].used.iter().all(|&w| w == 0) {
                self.chunks.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }
}

// MANAGE_PAGES: giving pages to the firmware and taking them back, in batches, for the
// function the firmware names.

/// Most page addresses in one MANAGE_PAGES (4 KiB of `pas`, as Linux and mlx5st batch).
const PAGES_PER_COMMAND: usize = 512;
/// Bit 15 of a page request's `ec_function` word: the pages are for the embedded CPU
/// function (Linux `pagealloc.c` `EC_FUNCTION_MASK`).
pub(crate) const PAGE_REQ_EC_FUNCTION: u16 = 0x8000;
/// Bit 14 of a page request's `ec_function` word: the firmware released every page of the
/// function at once; the driver frees them without MANAGE_PAGES (Linux `pagealloc.c`
/// `RELEASE_ALL_PAGES_MASK` and `release_all_pages`). The firmware sends it only to a
/// driver that set the `release_all_pages` capability, as this one does.
pub(crate) const PAGE_REQ_RELEASE_ALL: u16 = 0x4000;
/// Most functions the driver holds firmware pages for (a lone function needs one).
const MAX_PAGE_FUNCTIONS: usize = 4;

/// The function firmware pages are given to or taken from: MANAGE_PAGES `function_id` and
/// `embedded_cpu_function`, as QUERY_PAGES or the page request named it (rdma-core
/// `providers/mlx5/mlx5_vfio.c:1660`, `:1676`, `:266`; Linux `pagealloc.c`
/// `mlx5_satisfy_startup_pages`, `req_pages_handler`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageFunction {
    pub(crate) id: u16,
    pub(crate) ec: bool,
}

impl PageFunction {
    pub(crate) fn set_in(self, input: &mut ManagePagesIn) {
        input
            .set_function_id(self.id)
            .set_embedded_cpu_function(self.ec);
    }
}

/// How many pages each function holds (the pool only knows the total).
#[derive(Debug, Default)]
pub(crate) struct PageOwners {
    list: heapless::Vec<(PageFunction, u32), MAX_PAGE_FUNCTIONS>,
}

impl PageOwners {
    pub(crate) fn count(&self, f: PageFunction) -> u32 {
        self.list
            .iter()
            .find(|(g, _)| *g == f)
            .map_or(0, |&(_, n)| n)
    }

    pub(crate) fn add(&mut self, f: PageFunction, n: u32) -> crate::error::Result<()> {
        if let Some((_, c)) = self.list.iter_mut().find(|(g, _)| *g == f) {
            *c += n;
            return Ok(());
        }
        self.list
            .push((f, n))
            .map_err(|_| Error::Unsupported("firmware pages for more than 4 functions"))
    }

    pub(crate) fn sub(&mut self, f: PageFunction, n: u32) {
        if let Some((_, c)) = self.list.iter_mut().find(|(g, _)| *g == f) {
            *c = c.saturating_sub(n);
        }
        self.list.retain(|&(_, c)| c > 0);
    }

    /// The first function that still holds pages.
    pub(crate) fn first(&self) -> Option<PageFunction> {
        self.list.first().map(|&(f, _)| f)
    }
}

/// Sends one MANAGE_PAGES (through the page slot, from wherever the driver is).
pub(crate) type ManagePagesFn<'a> = dyn FnMut(&ManagePagesIn, &[u8], &mut [u8]) -> core::result::Result<ManagePagesOut, CmdError>
    + 'a;

/// The firmware dropped every page of `function` at once: they are free again, with no
/// command (Linux `pagealloc.c` `release_all_pages`).
pub(crate) fn release_all_pages<P: Platform>(
    pages: &mut PagePool<P>,
    owners: &mut PageOwners,
    function: PageFunction,
) -> crate::error::Result<()> {
    let n = owners.count(function);
    if n == 0 {
        // Nothing given to that function (Linux warns and does nothing).
        return Ok(());
    }
    if n as usize != pages.given() {
        // The pool does not know which pages are whose.
        return Err(Error::Unsupported(
            "release of all pages of one of several functions",
        ));
    }
    pages.forget_all();
    owners.sub(function, n);
    Ok(())
}

/// Gives `n` pages to the firmware for `function` in batches; if the pool runs dry, tells
/// the firmware (MANAGE_PAGES "can't give", as Linux does) and reports the error.
pub(crate) fn give_pages<P: Platform>(
    pages: &mut PagePool<P>,
    owners: &mut PageOwners,
    function: PageFunction,
    mut n: u32,
    manage_pages: &mut ManagePagesFn<'_>,
) -> crate::error::Result<()> {
    let held = pages.given() as u32;
    if n > pages.budget().saturating_sub(held) {
        // More than the configuration allows: refuse before allocating anything, and tell
        // the firmware, as for any page it cannot have. Its answer changes nothing (a
        // firmware that never asked may refuse the notice; Linux ignores it too).
        let mut input = ManagePagesIn::new_cmd();
        input.set_op_mod(ManagePagesOpMod::CantGive.raw());
        function.set_in(&mut input);
        let _ = manage_pages(&input, &[], &mut []);
        return Err(Error::PageBudget {
            requested: n,
            held,
            budget: pages.budget(),
        });
    }
    let mut pas = [0u8; PAGES_PER_COMMAND * 8];
    while n > 0 {
        let batch = (n as usize).min(PAGES_PER_COMMAND);
        let mut got = 0;
        let mut failure = None;
        while got < batch {
            match pages.give_one() {
                Ok(iova) => {
                    pas[got * 8..got * 8 + 8].copy_from_slice(&iova.to_be_bytes());
                    got += 1;
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if got > 0 {
            let mut input = ManagePagesIn::new_cmd();
            input
                .set_op_mod(ManagePagesOpMod::Give.raw())
                .set_input_num_entries(got as u32);
            function.set_in(&mut input);
            let given = owners.add(function, got as u32).and_then(|()| {
                manage_pages(&input, &pas[..got * 8], &mut []).map_err(|e| {
                    owners.sub(function, got as u32);
                    Error::from(e)
                })
            });
            if let Err(e) = given {
                // The firmware did not take them: they are ours again.
                for chunk in pas[..got * 8].chunks_exact(8) {
                    let iova = u64::from_be_bytes(chunk.try_into().unwrap_or([0; 8]));
                    let _ = pages.take_back(iova);
                }
                return Err(e);
            }
        }
        if let Some(e) = failure {
            let mut input = ManagePagesIn::new_cmd();
            input.set_op_mod(ManagePagesOpMod::CantGive.raw());
            function.set_in(&mut input);
            manage_pages(&input, &[], &mut [])?;
            return Err(match e {
                PageError::Dma(d) => Error::Dma(d),
                _ => Error::OutOfPages,
            });
        }
        n -= got as u32;
    }
    Ok(())
}

/// Takes up to `n` pages back from the firmware for `function`; returns how many it gave
/// (stops at the first empty reply).
pub(crate) fn take_pages<P: Platform>(
    pages: &mut PagePool<P>,
    owners: &mut PageOwners,
    function: PageFunction,
    mut n: u32,
    manage_pages: &mut ManagePagesFn<'_>,
) -> crate::error::Result<u32> {
    let mut total = 0;
    while n > 0 {
        let returned = take_pages_once(pages, owners, function, n, manage_pages)?;
        total += returned;
        if returned == 0 {
            break;
        }
        n -= returned;
    }
    Ok(total)
}

/// One MANAGE_PAGES TAKE of at most `n` pages (and [`PAGES_PER_COMMAND`]) for `function`;
/// returns how many the firmware gave back.
pub(crate) fn take_pages_once<P: Platform>(
    pages: &mut PagePool<P>,
    owners: &mut PageOwners,
    function: PageFunction,
    n: u32,
    manage_pages: &mut ManagePagesFn<'_>,
) -> crate::error::Result<u32> {
    let mut pas = [0u8; PAGES_PER_COMMAND * 8];
    let batch = (n as usize).min(PAGES_PER_COMMAND);
    let mut input = ManagePagesIn::new_cmd();
    input
        .set_op_mod(ManagePagesOpMod::Take.raw())
        .set_input_num_entries(batch as u32);
    function.set_in(&mut input);
    let out = manage_pages(&input, &[], &mut pas[..batch * 8])?;
    let returned = out.output_num_entries() as usize;
    if returned > batch {
        return Err(Error::DeviceMisbehaved(
            "MANAGE_PAGES returned more pages than asked",
        ));
    }
    for chunk in pas[..returned * 8].chunks_exact(8) {
        let iova = u64::from_be_bytes(chunk.try_into().unwrap_or([0; 8]));
        pages
            .take_back(iova)
            .map_err(|_| Error::DeviceMisbehaved("firmware returned a page it was not given"))?;
        owners.sub(function, 1);
    }
    Ok(returned as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uhca_hal::testing::FakePlatform;

    #[test]
    fn gives_distinct_aligned_pages_and_takes_them_back() {
        let p = FakePlatform::new();
        let mut pool = PagePool::new(&p);
        let mut pages = [0u64; 600];
        for slot in pages.iter_mut() {
            *slot = pool.give_one().unwrap();
            assert_eq!(*slot % ADAPTER_PAGE_SIZE as u64, 0);
        }
        let mut sorted = pages;
        sorted.sort_unstable();
        assert!(
            sorted.windows(2).all(|w| w[0] != w[1]),
            "every page distinct"
        );
        assert_eq!(pool.given(), 600);
        assert_eq!(
            pool.reserved_bytes(),
            2 * CHUNK_BYTES,
            "600 pages need two chunks"
        );
        for &iova in &pages[..300] {
            pool.take_back(iova).unwrap();
        }
        assert_eq!(
            pool.take_back(pages[0]),
            Err(PageError::UnknownPage(pages[0])),
            "twice"
        );
        assert_eq!(pool.take_back(12345), Err(PageError::UnknownPage(12345)));
        assert_eq!(pool.given(), 300);
        // Freed pages are reused before a new chunk is allocated.
        for _ in 0..300 {
            pool.give_one().unwrap();
        }
        assert_eq!(pool.reserved_bytes(), 2 * CHUNK_BYTES);
        pool.forget_all();
        assert_eq!(pool.given(), 0);
        pool.shrink();
        assert_eq!(pool.reserved_bytes(), 0);
    }
}
