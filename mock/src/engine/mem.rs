//! Memory as the datapath sees it: queue buffers through their page lists, memory keys
//! (existence, PD, access rights, bounds), and gather/scatter through the IOMMU.

use super::Engine;
pub(crate) use super::state::Sge;
use crate::objects::Objects;
use crate::objects::RESERVED_LKEY;
use uhca_fwif::consts::MkcAccessMode;

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

/// The queue whose buffer an access goes to: its page list stays in the firmware's table
/// (read in place, not copied per access).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueBuf {
    /// A QP's work queue buffer (SQ and RQ).
    Qp(u32),
    /// An SRQ's (or RMP's) buffer.
    Srq(u32),
}

impl QueueBuf {
    /// Where the queue starts in its first page: a QP's or SRQ's `page_offset`, in 64ths of
    /// its page size (Linux sets it for a user buffer that does not start on such a page).
    fn start(self, objs: &crate::objects::Objects, page_size: u64) -> u64 {
        let po = match self {
            QueueBuf::Qp(n) => objs.qps.get(&n).map_or(0, |q| q.qpc.page_offset()),
            QueueBuf::Srq(n) => objs.srqs.get(&n).map_or(0, |s| s.page_offset()),
        };
        po as u64 * (page_size / 64)
    }

    fn pas(self, objs: &crate::objects::Objects) -> Option<&[u64]> {
        Some(match self {
            QueueBuf::Qp(n) => &objs.qps.get(&n)?.pas,
            QueueBuf::Srq(n) => &objs.srqs.get(&n)?.pas,
        })
    }
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

/// A range of a memory key that passed [`Engine::key_check`]: where its bytes lie in IOVA
/// space, walked piece by piece (a piece never crosses a translation page).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    /// First virtual address of the range.
    pub(crate) va: u64,
    /// Bytes in the range.
    pub(crate) len: u64,
    map: SpanMap,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SpanMap {
    /// The address is the IOVA (physical access mode, the reserved lkey).
    Direct,
    /// Through the translation entries of the key at `index`, pages of `1 << shift` bytes
    /// from `base` (a shift, so that the walk finds a page and an offset without dividing).
    Mtt { index: u32, shift: u32, base: u64 },
}

impl Span {
    /// Calls `f(iova, bytes, offset)` for each piece of `[offset, offset + len)` of the span
    /// (offset relative to `offset`), in order, until `f` returns false; returns whether
    /// every piece was visited. A range beyond the span, or a translation entry that went
    /// away since the check, ends the walk (false).
    fn walk(
        &self,
        objs: &Objects,
        offset: u64,
        len: u64,
        mut f: impl FnMut(u64, u64, u64) -> bool,
    ) -> bool {
        if len == 0 {
            return true;
        }
        if offset.checked_add(len).is_none_or(|e| e > self.len) {
            return false;
        }
        let start = self.va + offset;
        match self.map {
            SpanMap::Direct => f(start, len, 0),
            SpanMap::Mtt { index, shift, base } => {
                let ps = 1u64 << shift;
                let Some(m) = objs.mkeys.get(&index) else {
                    return false;
                };
                let end = start + len;
                let mut cur = start;
                while cur < end {
                    let page = ((cur - base) >> shift) as usize;
                    let off = (cur - base) & (ps - 1);
                    let n = (ps - off).min(end - cur);
                    let Some(&entry) = m.mtt.get(page) else {
                        return false;
                    };
                    if !f((entry & !(ps - 1)) + off, n, cur - start) {
                        return false;
                    }
                    cur += n;
                }
                true
            }
        }
    }
}

/// Why a memory-key access failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// No such key, other PD, missing right or out of bounds: a protection error.
    Protection,
    /// The IOMMU refused the access (the key's pages are not mapped).
    Dma,
}

impl Engine<'_> {
    /// Reads `buf.len()` bytes at `offset` of a queue buffer (pages of `page_size` bytes
    /// listed in its object's `pas`).
    pub(crate) fn queue_read(
        &mut self,
        queue: QueueBuf,
        page_size: u64,
        offset: u64,
        buf: &mut [u8],
        now: u64,
        what: &'static str,
    ) -> bool {
        let Engine { objs, iommu, .. } = self;
        let offset = offset + queue.start(objs, page_size);
        let Some(pas) = queue.pas(objs) else {
            return false;
        };
        let mut done = 0usize;
        while done < buf.len() {
            let off = offset + done as u64;
            let page = (off / page_size) as usize;
            let in_page = off % page_size;
            let n = ((page_size - in_page) as usize).min(buf.len() - done);
            let Some(&base) = pas.get(page) else {
                return false;
            };
            if iommu
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

    /// A big-endian dword of a doorbell record.
    pub(crate) fn dbr_dword(&mut self, dbr: u64, index: u64, now: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.iommu
            .dma_read(dbr.wrapping_add(index * 4), &mut b, now, "doorbell record")
            .ok()?;
        Some(u32::from_be_bytes(b))
    }

    /// Checks a gather or scatter of `[va, va + len)` through local key `key` by a queue
    /// with `keys`: the reserved lkey, when the queue's context allows it (`rlky`), names
    /// IOVAs directly (no translation, no PD, no bounds: the IOMMU alone decides what the
    /// device reaches); any other key goes through [`Engine::key_check`].
    pub(crate) fn local_check(
        &self,
        key: u32,
        keys: LocalKeys,
        va: u64,
        len: u64,
        access: Access,
    ) -> Result<Span, KeyError> {
        if key == RESERVED_LKEY && keys.rlky && len != 0 {
            return Ok(Span {
                va,
                len,
                map: SpanMap::Direct,
            });
        }
        self.key_check(key, keys.pd, va, len, access)
    }

    /// Checks an access to `[va, va + len)` of memory key `key` by a QP of `pd`: the key
    /// must exist (index and variant byte), belong to `pd`, grant `access` and cover the
    /// range (every translation entry of it present). Returns the checked range, which
    /// [`Engine::span_read`] and [`Engine::span_write`] walk without building a list. (The
    /// reserved lkey is no memory key: its index is below the first one CREATE_MKEY hands
    /// out, so here it is a protection error; see [`Engine::local_check`].)
    pub(crate) fn key_check(
        &self,
        key: u32,
        pd: u32,
        va: u64,
        len: u64,
        access: Access,
    ) -> Result<Span, KeyError> {
        if len == 0 {
            return Ok(Span {
                va,
                len: 0,
                map: SpanMap::Direct,
            });
        }
        let Some(m) = self.objs.mkeys.get(&(key >> 8)) else {
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
        let end = va.checked_add(len).ok_or(KeyError::Protection)?;
        if !c.length64() {
            let key_end = c
                .start_addr()
                .checked_add(c.len())
                .ok_or(KeyError::Protection)?;
            if va < c.start_addr() || end > key_end {
                return Err(KeyError::Protection);
            }
        }
        let map = match m.access_mode() {
            MkcAccessMode::Pa => SpanMap::Direct,
            MkcAccessMode::Mtt => {
                let shift = u32::from(c.log_page_size());
                let ps = 1u64 << shift;
                let base = c.start_addr() & !(ps - 1);
                // Every page of the range needs its translation entry.
                let last = (end - 1).checked_sub(base).ok_or(KeyError::Protection)? >> shift;
                if va < base || last >= m.mtt.len() as u64 {
                    return Err(KeyError::Protection);
                }
                SpanMap::Mtt {
                    index: key >> 8,
                    shift,
                    base,
                }
            }
            _ => return Err(KeyError::Protection),
        };
        Ok(Span { va, len, map })
    }

    /// Translates `[va, va + len)` of memory key `key` for an access by a QP of `pd` (the
    /// checks of [`Engine::key_check`]). Returns IOVA pieces.
    pub(crate) fn key_translate(
        &self,
        key: u32,
        pd: u32,
        va: u64,
        len: u64,
        access: Access,
    ) -> Result<Vec<(u64, u64)>, KeyError> {
        let span = self.key_check(key, pd, va, len, access)?;
        let mut out = Vec::new();
        span.walk(self.objs, 0, len, |iova, n, _| {
            out.push((iova, n));
            true
        });
        Ok(out)
    }

    /// Reads `buf.len()` bytes from `offset` into a checked span through the IOMMU.
    pub(crate) fn span_read(
        &mut self,
        span: &Span,
        offset: u64,
        buf: &mut [u8],
        now: u64,
        what: &'static str,
    ) -> Result<(), KeyError> {
        let Engine { objs, iommu, .. } = self;
        let ok = span.walk(objs, offset, buf.len() as u64, |iova, n, at| {
            let at = at as usize;
            iommu
                .dma_read(iova, &mut buf[at..at + n as usize], now, what)
                .is_ok()
        });
        if ok { Ok(()) } else { Err(KeyError::Dma) }
    }

    /// Writes `data` at `offset` into a checked span through the IOMMU.
    pub(crate) fn span_write(
        &mut self,
        span: &Span,
        offset: u64,
        data: &[u8],
        now: u64,
        what: &'static str,
    ) -> Result<(), KeyError> {
        let Engine { objs, iommu, .. } = self;
        let ok = span.walk(objs, offset, data.len() as u64, |iova, n, at| {
            let at = at as usize;
            iommu
                .dma_write(iova, &data[at..at + n as usize], now, what)
                .is_ok()
        });
        if ok { Ok(()) } else { Err(KeyError::Dma) }
    }

    /// Whether the IOMMU maps every piece of a checked span; the first piece that is not
    /// mapped is probed (its first and last byte), so the refused access is recorded as an
    /// IOMMU fault, as a read of it would be.
    pub(crate) fn span_mapped(&mut self, span: &Span, now: u64) -> bool {
        let Engine { objs, iommu, .. } = self;
        span.walk(objs, 0, span.len, |iova, n, _| {
            if n <= crate::iommu::MAX_MAPPING as u64 && iommu.is_mapped(iova, n as usize) {
                return true;
            }
            let mut probe = [0u8; 1];
            let _ = iommu
                .dma_read(iova, &mut probe, now, "data (gather)")
                .and_then(|_| {
                    iommu.dma_read(
                        iova.wrapping_add(n.saturating_sub(1)),
                        &mut probe,
                        now,
                        "data (gather)",
                    )
                });
            false
        })
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
            let span = self.local_check(
                s.lkey,
                keys,
                s.addr.wrapping_add(skip),
                n as u64,
                Access::LocalWrite,
            )?;
            self.span_write(&span, 0, &data[at..at + n], now, "data (scatter)")?;
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
            self.local_check(s.lkey, keys, s.addr, s.len as u64, Access::LocalWrite)?;
        }
        Ok(())
    }
}
