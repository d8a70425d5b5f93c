//! The firmware page pool.
//!
//! The firmware runs on memory the driver gives it, in 4 KiB pages (boot and init pages
//! during bring-up, more on request at run time, all taken back at teardown). The pool
//! allocates DMA memory in 2 MiB chunks and hands out their pages, tracking each with a
//! bit, so it needs no allocator and can find a returned page from its address alone.

use heapless::Vec;
use uhca_fwif::consts::ADAPTER_PAGE_SIZE;
use uhca_hal::dma::{DmaBuf, DmaMem};
use uhca_hal::{Dma, DmaError};

/// Bytes per chunk of pages.
pub const CHUNK_BYTES: usize = 2 << 20;
const PAGES_PER_CHUNK: usize = CHUNK_BYTES / ADAPTER_PAGE_SIZE;
const WORDS: usize = PAGES_PER_CHUNK / 64;
/// Most chunks the pool holds (256 MiB of firmware pages, more than any ConnectX asks for).
pub const MAX_CHUNKS: usize = 128;

struct Chunk<D: Dma> {
    buf: DmaBuf<D>,
    used: [u64; WORDS],
}

/// Why the pool could not hand out or take back a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageError {
    /// No DMA memory for another chunk.
    Dma(DmaError),
    /// [`MAX_CHUNKS`] are all in use.
    Full,
    /// The firmware returned an address the pool never gave it, or gave twice.
    UnknownPage(u64),
}

/// Firmware pages: which the firmware holds, which are free.
pub struct PagePool<D: Dma + Clone> {
    dma: D,
    chunks: Vec<Chunk<D>, MAX_CHUNKS>,
    given: usize,
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
    /// An empty pool that allocates through `dma`.
    pub fn new(dma: D) -> Self {
        PagePool {
            dma,
            chunks: Vec::new(),
            given: 0,
        }
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
