//! Memory as the datapath sees it: queue buffers through their page lists, memory keys
//! (existence, PD, access rights, bounds), and gather/scatter through the IOMMU.

use crate::device::Device;
use crate::firmware::RESERVED_LKEY;

/// What an access through a memory key needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// The HCA reads local memory (send gather): `lr`.
    LocalRead,
    /// The HCA writes local memory (receive scatter, READ response, atomic result): `lw`.
    LocalWrite,
    /// A remote RDMA READ: `rr`.
    RemoteRead,
    /// A remote RDMA WRITE: `rw`.
    RemoteWrite,
    /// A remote atomic: `a`.
    RemoteAtomic,
}

/// A scatter/gather entry of a WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sge {
    pub(crate) lkey: u32,
    pub(crate) addr: u64,
    pub(crate) len: u32,
}

/// Whose local keys a gather or scatter goes through: the QP's PD, and whether the
/// context of the queue the WQE came from allows the reserved lkey (`qpc.rlky` for the
/// send queue and the QP's own receive queue, `srqc.rlky` for an SRQ's receive WQEs: when
/// clear, the reserved lkey is no key of this queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LocalKeys {
    pub(crate) pd: u32,
    pub(crate) rlky: bool,
}

/// Why a memory-key access failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// No such key, other PD, missing right or out of bounds: a protection error.
    Protection,
    /// The IOMMU refused the access (the key's pages are not mapped).
    Dma,
}

impl Device {
    /// Reads `buf.len()` bytes at `offset` of a queue buffer described by `pas` (pages of
    /// `page_size` bytes).
    pub(crate) fn queue_read(
        &mut self,
        pas: &[u64],
        page_size: u64,
        offset: u64,
        buf: &mut [u8],
        now: u64,
        what: &'static str,
    ) -> bool {
        let mut done = 0usize;
        while done < buf.len() {
            let off = offset + done as u64;
            let page = (off / page_size) as usize;
            let in_page = off % page_size;
            let n = ((page_size - in_page) as usize).min(buf.len() - done);
            let Some(&base) = pas.get(page) else {
                return false;
            };
            if self
                .iommu
                .dma_read(
                    base.wrapping_add(in_page),
                    &mut buf[done..done + n],
                    now,
                    what,
                )
                .is_err()
            {
                return false;
            }
            done += n;
        }
        true
    }

    /// Writes `data` at `offset` of a queue buffer.
    pub(crate) fn queue_write(
        &mut self,
        pas: &[u64],
        page_size: u64,
        offset: u64,
        data: &[u8],
        now: u64,
        what: &'static str,
    ) -> bool {
        let mut done = 0usize;
        while done < data.len() {
            let off = offset + done as u64;
            let page = (off / page_size) as usize;
            let in_page = off % page_size;
            let n = ((page_size - in_page) as usize).min(data.len() - done);
            let Some(&base) = pas.get(page) else {
                return false;
            };
            if self
                .iommu
                .dma_write(base.wrapping_add(in_page), &data[done..done + n], now, what)
                .is_err()
            {
                return false;
            }
            done += n;
        }
        true
    }

    /// A big-endian dword of a doorbell record.
    pub(crate) fn dbr_dword(&mut self, dbr: u64, index: u64, now: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.iommu
            .dma_read(dbr.wrapping_add(index * 4), &mut b, now, "doorbell record")
            .ok()?;
        Some(u32::from_be_bytes(b))
    }

    /// Translates `[va, va + len)` of local key `key` for a gather or scatter of a queue
    /// with `keys`: the reserved lkey, when the queue's context allows it (`rlky`), names
    /// IOVAs directly (no translation, no PD, no bounds: the IOMMU alone decides what the
    /// device reaches); any other key goes through [`Device::key_translate`].
    pub(crate) fn local_translate(
        &self,
        key: u32,
        keys: LocalKeys,
        va: u64,
        len: u64,
        access: Access,
    ) -> Result<Vec<(u64, u64)>, KeyError> {
        if key == RESERVED_LKEY && keys.rlky && len != 0 {
            return Ok(vec![(va, len)]);
        }
        self.key_translate(key, keys.pd, va, len, access)
    }

    /// Translates `[va, va + len)` of memory key `key` for an access by a QP of `pd`:
    /// the key must exist (index and variant byte), belong to `pd`, grant `access` and cover
    /// the range. Returns IOVA pieces. (The reserved lkey is no memory key: its index is
    /// below the first one CREATE_MKEY hands out, so here it is a protection error.)
    pub(crate) fn key_translate(
        &self,
        key: u32,
        pd: u32,
        va: u64,
        len: u64,
        access: Access,
    ) -> Result<Vec<(u64, u64)>, KeyError> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let Some(m) = self.fw.mkeys.get(&(key >> 8)) else {
            return Err(KeyError::Protection);
        };
        let c = &m.mkc;
        if c.mkey_7_0() != (key & 0xff) as u8 || c.free() || c.pd() != pd {
            return Err(KeyError::Protection);
        }
        let allowed = match access {
            Access::LocalRead => c.lr(),
            Access::LocalWrite => c.lw(),
            Access::RemoteRead => c.rr(),
            Access::RemoteWrite => c.rw(),
            Access::RemoteAtomic => c.a(),
        };
        if !allowed {
            return Err(KeyError::Protection);
        }
        m.translate(va, len).ok_or(KeyError::Protection)
    }

    /// Reads the pieces of a translation.
    pub(crate) fn dma_gather(
        &mut self,
        pieces: &[(u64, u64)],
        out: &mut Vec<u8>,
        now: u64,
    ) -> Result<(), KeyError> {
        for &(iova, n) in pieces {
            // Refuse before allocating: no mapping is larger than `MAX_MAPPING`.
            if n > crate::iommu::MAX_MAPPING as u64 || !self.iommu.is_mapped(iova, n as usize) {
                let mut probe = [0u8; 1];
                let _ = self
                    .iommu
                    .dma_read(iova, &mut probe, now, "data (gather)")
                    .and_then(|_| {
                        self.iommu.dma_read(
                            iova.wrapping_add(n.saturating_sub(1)),
                            &mut probe,
                            now,
                            "data (gather)",
                        )
                    });
                return Err(KeyError::Dma);
            }
            let start = out.len();
            out.resize(start + n as usize, 0);
            self.iommu
                .dma_read(iova, &mut out[start..], now, "data (gather)")
                .map_err(|_| KeyError::Dma)?;
        }
        Ok(())
    }

    /// Writes `data` over the pieces of a translation.
    pub(crate) fn dma_scatter(
        &mut self,
        pieces: &[(u64, u64)],
        data: &[u8],
        now: u64,
    ) -> Result<(), KeyError> {
        let mut at = 0usize;
        for &(iova, n) in pieces {
            let n = n as usize;
            self.iommu
                .dma_write(iova, &data[at..at + n], now, "data (scatter)")
                .map_err(|_| KeyError::Dma)?;
            at += n;
        }
        Ok(())
    }

    /// Gathers the data of a list of SGEs (local read).
    pub(crate) fn gather_sges(
        &mut self,
        keys: LocalKeys,
        sges: &[Sge],
        out: &mut Vec<u8>,
        now: u64,
    ) -> Result<(), KeyError> {
        for s in sges {
            let p = self.local_translate(s.lkey, keys, s.addr, s.len as u64, Access::LocalRead)?;
            self.dma_gather(&p, out, now)?;
        }
        Ok(())
    }

    /// Scatters `data` into a list of SGEs starting `offset` bytes into the list (local
    /// write). `Ok(false)`: the list is too short (a length error); nothing beyond its end
    /// is written.
    pub(crate) fn scatter_sges(
        &mut self,
        keys: LocalKeys,
        sges: &[Sge],
        offset: u64,
        data: &[u8],
        now: u64,
    ) -> Result<bool, KeyError> {
        let total: u64 = sges.iter().map(|s| s.len as u64).sum();
        if offset + data.len() as u64 > total {
            return Ok(false);
        }
        let mut skip = offset;
        let mut at = 0usize;
        for s in sges {
            if at == data.len() {
                break;
            }
            let len = s.len as u64;
            if skip >= len {
                skip -= len;
                continue;
            }
            let n = ((len - skip) as usize).min(data.len() - at);
            let p = self.local_translate(
                s.lkey,
                keys,
                s.addr.wrapping_add(skip),
                n as u64,
                Access::LocalWrite,
            )?;
            self.dma_scatter(&p, &data[at..at + n], now)?;
            at += n;
            skip = 0;
        }
        Ok(true)
    }

    /// Checks that every SGE may be written locally (for the targets of RDMA READ and
    /// atomic results).
    pub(crate) fn check_sges_writable(
        &self,
        keys: LocalKeys,
        sges: &[Sge],
    ) -> Result<(), KeyError> {
        for s in sges {
            self.local_translate(s.lkey, keys, s.addr, s.len as u64, Access::LocalWrite)?;
        }
        Ok(())
    }
}
