//! Memory regions: one MTT memory key per registration (CREATE_MKEY, QUERY_MKEY,
//! DESTROY_MKEY).
//!
//! # What can be registered, and why
//!
//! rdma-core's `ibv_reg_mr` registers any user buffer: the kernel (or, under VFIO,
//! rdma-core itself) pins and maps it for the device. Mapping a caller's buffer is an
//! `unsafe` promise (the memory must stay valid and unmoved while the device may touch it,
//! and the caller accepts that the device writes it), and a key that names a range makes
//! the device, and through it every remote peer with the rkey, read and write that range.
//! So a memory region here **owns** the memory it registers: a [`DmaBuf`] (coherent,
//! device-mapped memory of the platform, hugepage-backed under VFIO), as rust-ibverbs'
//! `ProtectionDomain::allocate` owns its buffer. The key can never outlive the memory: the
//! buffer comes back only from [`Mr::destroy`], after DESTROY_MKEY succeeded. The
//! application reads and writes the memory through [`Mr::mem`]/[`Mr::mem_mut`] (volatile
//! accesses by offset: the device may write it at any time), and puts
//! [`Mr::iova`]` + offset` with [`Mr::lkey`]/[`Mr::rkey`] in its work requests.
//!
//! Memory the application already has (a `Box<[u8]>`, a `Vec<u8>`, a `&'static mut [u8]`)
//! is registered by handing it over: [`Hca::map_host_buf`] maps it through the platform's
//! `Dma::map` into a HAL [`MappedBuf`](uhca_hal::dma::MappedBuf) that owns it (all the
//! `unsafe` stays in the HAL), and [`Hca::reg_user_mr`] makes the same key over it as a
//! [`UserMr`](super::UserMr), which gives the buffer back only after its key is destroyed.
//!
//! The MR's memory is one contiguous IOVA range, so the driver describes it with as few
//! translation entries as it can: 4 KiB pages while that takes at most 512 entries, larger
//! pages beyond (the key's `start_addr` and `len` still bound every access exactly).

use core::sync::atomic::{AtomicU8, Ordering};

use uhca_fwif::cmd::{Command, CreateMkeyIn, QueryMkeyIn};
use uhca_fwif::consts::{ADAPTER_PAGE_SHIFT, AccessFlags, MkcAccessMode};
use uhca_fwif::ctx::Mkc;
use uhca_hal::Platform;
use uhca_hal::dma::{DmaBuf, DmaMem};

use super::{Failed, MAX_PAS, Pd, Sge, device_may_hold};
use crate::error::Error;
use crate::error::{Arg, InvalidArgument, Result};
use crate::hca::Hca;
use crate::release::{Dropped, Held, ObjectKind, Ticket};

/// `mkc.qpn` of a key not bound to a QP.
const MKEY_QPN_UNBOUND: u32 = 0x00ff_ffff;
/// MTT entry bits: the page may be read and written (`MLX5_MTT_READ | MLX5_MTT_WRITE`).
const MTT_READ_WRITE: u64 = 0x3;
/// Largest MTT page size the driver uses (1 GiB).
const MAX_MTT_PAGE_SHIFT: u32 = 30;

/// The variant byte of the next key (`mkey_7_0`), so a key index that is reused gets a
/// different key. Races between threads only repeat a variant, which is harmless.
static NEXT_KEY_VARIANT: AtomicU8 = AtomicU8::new(0x5a);

/// A registered memory region: an MTT memory key over memory it owns.
#[derive(Debug)]
pub struct Mr<P: Platform> {
    /// The key and the whole buffer; the region is `offset..offset + len` of it.
    reg: MttRegion<P, DmaBuf<P>>,
    offset: usize,
    len: usize,
}

/// What both kinds of region, [`Mr`] and [`UserMr`](super::UserMr), are made of: an MTT
/// memory key and the memory `M` it covers, which the region owns while the key lives.
/// Made by [`Hca::register_mtt`]; [`MttRegion::destroy`] gives the memory back after
/// DESTROY_MKEY; dropped undestroyed, it hands both to the HCA's release queue.
#[derive(Debug)]
pub(crate) struct MttRegion<P: Platform, M: Into<Held<P>>> {
    /// The memory (`None` once given back by `destroy` or handed over by drop).
    mem: Option<M>,
    /// Its place in the HCA's release queue.
    ticket: Option<Ticket<P>>,
    pub(crate) mkey_index: u32,
    /// `(mkey_index << 8) | mkey_7_0`: the lkey and the rkey.
    pub(crate) key: u32,
    pub(crate) pdn: u32,
    pub(crate) access: AccessFlags,
    pub(crate) hca_id: u64,
}

impl<P: Platform, M: Into<Held<P>>> MttRegion<P, M> {
    /// The memory the key covers.
    pub(crate) fn mem(&self) -> &M {
        match &self.mem {
            Some(m) => m,
            None => unreachable!("the buffer is only taken by destroy and drop"),
        }
    }

    /// The memory, for writing (the device may read it at any time).
    pub(crate) fn mem_mut(&mut self) -> &mut M {
        match &mut self.mem {
            Some(m) => m,
            None => unreachable!("the buffer is only taken by destroy and drop"),
        }
    }

    /// DESTROY_MKEY, after checking that `hca` made the key, then the memory back (the
    /// one command of [`Mr::destroy`] and [`UserMr::destroy`](super::UserMr::destroy)).
    /// On an error the key and the memory stay.
    pub(crate) fn destroy(&mut self, hca: &mut Hca<P>) -> Result<M> {
        hca.check_owner(self.hca_id)?;
        hca.destroy_object(ObjectKind::Mr, self.mkey_index)?;
        match self.mem.take() {
            Some(m) => Ok(m),
            None => unreachable!("the buffer is only taken by destroy and drop"),
        }
    }
}

impl<P: Platform, M: Into<Held<P>>> Drop for MttRegion<P, M> {
    fn drop(&mut self) {
        // Not destroyed: the key may still let the device (and remote peers) reach the
        // memory, so it goes back (a caller's buffer: is unmapped) only after the HCA's
        // DESTROY_MKEY (`crate::release`).
        if let Some(m) = self.mem.take() {
            match self.ticket.take() {
                Some(t) => t.release(Dropped {
                    kind: ObjectKind::Mr,
                    number: self.mkey_index,
                    held: m.into(),
                    qp: None,
                    busy_at: None,
                }),
                None => core::mem::forget(m),
            }
        }
    }
}

/// What QUERY_MKEY reports about a memory region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrAttr {
    /// The PD.
    pub pdn: u32,
    /// First address the key covers (the IOVA).
    pub start_addr: u64,
    /// Bytes the key covers.
    pub len: u64,
    /// The access rights (`lw`, `rr`, `rw`, `a`; `lr` is always set).
    pub access: AccessFlags,
    /// The key variant byte (`mkey_7_0`).
    pub mkey_7_0: u8,
    /// log2 of the translation page size.
    pub log_page_size: u8,
    /// The access mode (MTT).
    pub access_mode: MkcAccessMode,
}

impl<P: Platform> Mr<P> {
    /// The local key (`(mkey_index << 8) | mkey_7_0`), for scatter/gather entries.
    pub fn lkey(&self) -> u32 {
        self.reg.key
    }

    /// The remote key (the same value), for peers' RDMA and atomic requests.
    pub fn rkey(&self) -> u32 {
        self.reg.key
    }

    /// The memory key index.
    pub fn mkey_index(&self) -> u32 {
        self.reg.mkey_index
    }

    /// The address of the region's first byte as the device and the peers use it (an
    /// IOVA); work requests name `iova() + offset`.
    pub fn iova(&self) -> u64 {
        self.reg.mem().iova() + self.offset as u64
    }

    /// The region's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: registrations are at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.reg.access
    }

    /// The PD number.
    pub fn pdn(&self) -> u32 {
        self.reg.pdn
    }

    /// The whole buffer behind the region (the region is `offset..offset + len()` of it,
    /// see [`Mr::buffer_offset`]).
    pub fn mem(&self) -> &DmaBuf<P> {
        self.reg.mem()
    }

    /// The buffer, for writing (the device may read it at any time).
    pub fn mem_mut(&mut self) -> &mut DmaBuf<P> {
        self.reg.mem_mut()
    }

    /// Where the region starts in its buffer.
    pub fn buffer_offset(&self) -> usize {
        self.offset
    }

    /// QUERY_MKEY.
    ///
    /// # Errors
    ///
    /// The command's error.
    pub fn query(&self, hca: &mut Hca<P>) -> Result<MrAttr> {
        hca.check_owner(self.reg.hca_id)?;
        let mut q = QueryMkeyIn::new_cmd();
        q.set_mkey_index(self.reg.mkey_index);
        let out = hca.cmd(&q)?;
        let m = out.memory_key_mkey_entry();
        let mut access = AccessFlags::empty();
        access.set(AccessFlags::LOCAL_WRITE, m.lw());
        access.set(AccessFlags::REMOTE_READ, m.rr());
        access.set(AccessFlags::REMOTE_WRITE, m.rw());
        access.set(AccessFlags::REMOTE_ATOMIC, m.a());
        Ok(MrAttr {
            pdn: m.pd(),
            start_addr: m.start_addr(),
            len: m.len(),
            access,
            mkey_7_0: m.mkey_7_0(),
            log_page_size: m.log_page_size(),
            access_mode: MkcAccessMode::from_raw((m.access_mode_4_2() << 2) | m.access_mode_1_0()),
        })
    }

    /// DESTROY_MKEY, then gives the buffer back (the device can no longer reach it through
    /// this key).
    ///
    /// # Errors
    ///
    /// The region back with the error; its buffer stays registered.
    pub fn destroy(mut self, hca: &mut Hca<P>) -> core::result::Result<DmaBuf<P>, Failed<Self>> {
        match self.reg.destroy(hca) {
            Ok(b) => Ok(b),
            Err(error) => Err(Failed {
                object: self,
                error,
            }),
        }
    }
}

impl<P: Platform> Hca<P> {
    /// Allocates `len` bytes of zeroed DMA memory and registers them (like rust-ibverbs'
    /// `pd.allocate`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a zero length or bad access flags (no command is
    /// sent); [`Error::Dma`]; the command's error.
    pub fn alloc_mr(&mut self, pd: &Pd<P>, len: usize, access: AccessFlags) -> Result<Mr<P>> {
        if len == 0 {
            return Err(InvalidArgument::min(Arg::MrLength, 0, 1).into());
        }
        check_access(access)?;
        let buf = self.alloc_dma(len, 1 << ADAPTER_PAGE_SHIFT)?;
        self.reg_mr(pd, buf, 0, len, access).map_err(Error::from)
    }

    /// Registers `len` bytes at `offset` of `buf` (CREATE_MKEY, MTT access mode,
    /// `ibv_reg_mr`). The region owns the buffer until [`Mr::destroy`] gives it back.
    /// `lr` is always set; `access` adds local write, remote read, remote write and remote
    /// atomic.
    ///
    /// # Errors
    ///
    /// The buffer back with the error: [`Error::InvalidArgument`] for an empty or
    /// out-of-bounds range, remote write or atomic without local write, or a region larger
    /// than the device allows (no command is sent); the command's error. The buffer is
    /// `None` (leaked, never freed) when the device may have made the key anyway: the
    /// command timed out or the device died.
    pub fn reg_mr(
        &mut self,
        pd: &Pd<P>,
        buf: DmaBuf<P>,
        offset: usize,
        len: usize,
        access: AccessFlags,
    ) -> core::result::Result<Mr<P>, Failed<Option<DmaBuf<P>>>> {
        let reg = self.register_mtt(pd, buf, offset, len, None, access)?;
        Ok(Mr { reg, offset, len })
    }

    /// CREATE_MKEY (MTT access mode) over `len` bytes at `offset` of `mem`, with a place
    /// in the release queue taken first: the registration of [`Hca::reg_mr`] and
    /// [`Hca::reg_user_mr`]. Gives the key with the memory, or the memory back with the
    /// error (`None`, leaked, when the device may have made the key anyway).
    pub(crate) fn register_mtt<M: DmaMem + Into<Held<P>>>(
        &mut self,
        pd: &Pd<P>,
        mem: M,
        offset: usize,
        len: usize,
        key_start: Option<u64>,
        access: AccessFlags,
    ) -> core::result::Result<MttRegion<P, M>, Failed<Option<M>>> {
        let ticket = match self.release_ticket() {
            Ok(t) => t,
            Err(error) => {
                return Err(Failed {
                    object: Some(mem),
                    error,
                });
            }
        };
        match self.create_mtt_mkey(pd, &mem, offset, len, key_start, access) {
            Ok((mkey_index, key)) => Ok(MttRegion {
                mem: Some(mem),
                ticket: Some(ticket),
                mkey_index,
                key,
                pdn: pd.pdn(),
                access,
                hca_id: self.id(),
            }),
            Err(error) => {
                let object = if device_may_hold(&error) {
                    core::mem::forget(mem);
                    None
                } else {
                    Some(mem)
                };
                Err(Failed { object, error })
            }
        }
    }

    fn create_mtt_mkey(
        &mut self,
        pd: &Pd<P>,
        buf: &impl DmaMem,
        offset: usize,
        len: usize,
        key_start: Option<u64>,
        access: AccessFlags,
    ) -> Result<(u32, u32)> {
        self.check_owner(pd.hca_id())?;
        if len == 0 {
            return Err(InvalidArgument::min(Arg::MrLength, 0, 1).into());
        }
        if offset.checked_add(len).is_none_or(|end| end > buf.len()) {
            let end = offset
                .checked_add(len)
                .map_or(u64::MAX, InvalidArgument::wide);
            return Err(
                InvalidArgument::max(Arg::RangeEnd, end, InvalidArgument::wide(buf.len())).into(),
            );
        }
        check_access(access)?;
        let log_max = self.hca_cap().log_max_mrw_sz();
        if log_max < 64 && len as u64 > (1u64 << log_max) {
            return Err(InvalidArgument::max(
                Arg::MrLength,
                InvalidArgument::wide(len),
                1u64 << log_max,
            )
            .into());
        }
        let start = buf.iova() + offset as u64;
        let end = start + len as u64;
        // The address the key starts at: the IOVA, or the caller's (then the first byte's
        // offset within a translation page must be the same in both, as the device adds the
        // address's offset within its page to the page's entry).
        let key_addr = key_start.unwrap_or(start);
        if key_addr.checked_add(len as u64).is_none() {
            return Err(InvalidArgument::rule(
                Arg::MrIova,
                key_addr,
                "the key's range wraps past the end of the address space",
            )
            .into());
        }
        let page_mask = |shift: u32| (1u64 << shift) - 1;
        if (key_addr ^ start) & page_mask(ADAPTER_PAGE_SHIFT) != 0 {
            return Err(InvalidArgument::rule(
                Arg::MrIova,
                key_addr,
                "the key's address and the memory's IOVA differ in their offset within a 4 KiB page",
            )
            .into());
        }
        let (shift, npages) = mtt_pages(start, end, key_addr, len)?;
        // Octwords hold two entries; pad to an even count.
        let octwords = npages.div_ceil(2);
        let base = start & !((1u64 << shift) - 1);
        let mut mtt = [0u8; MAX_PAS * 8];
        for i in 0..npages {
            let e = (base + ((i as u64) << shift)) | MTT_READ_WRITE;
            mtt[i * 8..i * 8 + 8].copy_from_slice(&e.to_be_bytes());
        }
        let variant = NEXT_KEY_VARIANT.load(Ordering::Relaxed);
        NEXT_KEY_VARIANT.store(variant.wrapping_add(1), Ordering::Relaxed);

        let c = mtt_mkey_cmd(pd.pdn(), access, variant, key_addr, len, octwords, shift);
        let out = self.exec(&c, &mtt[..octwords * 16], &mut [])?;
        let index = out.mkey_index();
        Ok((index, (index << 8) | variant as u32))
    }
}

/// The smallest translation page size (`1 << shift` bytes, from 4 KiB) whose pages cover
/// `start..end` in at most [`MAX_PAS`] entries with the key's address `key_addr` at the
/// same offset within a page as `start`: `(shift, entries)`.
fn mtt_pages(start: u64, end: u64, key_addr: u64, len: usize) -> Result<(u32, usize)> {
    let page_mask = |shift: u32| (1u64 << shift) - 1;
    let mut shift = ADAPTER_PAGE_SHIFT;
    loop {
        let ps = 1u64 << shift;
        let n = (end.div_ceil(ps) - start / ps) as usize;
        if n <= MAX_PAS {
            return Ok((shift, n));
        }
        if shift >= MAX_MTT_PAGE_SHIFT || (key_addr ^ start) & page_mask(shift + 1) != 0 {
            return Err(InvalidArgument::rule(
                Arg::MrLength,
                InvalidArgument::wide(len),
                "the region needs more than 512 translation entries of the largest page its addresses allow",
            )
            .into());
        }
        shift += 1;
    }
}

/// The CREATE_MKEY command of an MTT key of `len` bytes from `key_addr` in PD `pdn`, its
/// key byte `variant`, `octwords` of translation entries of pages of `1 << shift` bytes.
fn mtt_mkey_cmd(
    pdn: u32,
    access: AccessFlags,
    variant: u8,
    key_addr: u64,
    len: usize,
    octwords: usize,
    shift: u32,
) -> CreateMkeyIn {
    let mut c = CreateMkeyIn::new_cmd();
    c.set_translations_octword_actual_size(octwords as u32);
    let m: &mut Mkc = c.memory_key_mkey_entry_mut();
    let mode = MkcAccessMode::Mtt.raw();
    m.set_access_mode_1_0(mode & 3)
        .set_access_mode_4_2(mode >> 2)
        .set_lr(true)
        .set_lw(access.contains(AccessFlags::LOCAL_WRITE))
        .set_rr(access.contains(AccessFlags::REMOTE_READ))
        .set_rw(access.contains(AccessFlags::REMOTE_WRITE))
        .set_a(access.contains(AccessFlags::REMOTE_ATOMIC))
        .set_qpn(MKEY_QPN_UNBOUND)
        .set_mkey_7_0(variant)
        .set_pd(pdn)
        .set_start_addr(key_addr)
        .set_len(len as u64)
        .set_translations_octword_size(octwords as u32)
        .set_log_page_size(shift as u8);
    c
}

/// The IB rule every verbs provider checks: remote write and remote atomic need local
/// write.
fn check_access(access: AccessFlags) -> Result<()> {
    if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(InvalidArgument::rule(
            Arg::AccessFlags,
            access.bits().into(),
            "remote write or remote atomic access needs local write",
        )
        .into());
    }
    Ok(())
}

impl<P: Platform> Mr<P> {
    /// The scatter/gather entry for `len` bytes at `offset` in the region (offsets count
    /// from the region's first byte, [`Mr::iova`]), with this region's local key: what a
    /// work request names to send from or receive into these bytes.
    ///
    /// ```
    /// # use uhca_driver::{Hca, HcaConfig};
    /// # use uhca_fwif::consts::AccessFlags;
    /// # let dev = uhca_mock::MockHca::new(uhca_mock::MockConfig::default());
    /// # let mut hca = Hca::open_with(dev.platform(), HcaConfig::default())?;
    /// let pd = hca.alloc_pd()?;
    /// let mr = hca.alloc_mr(&pd, 4096, AccessFlags::LOCAL_WRITE)?;
    /// let sge = mr.sge(1024, 512)?;
    /// assert_eq!((sge.addr, sge.len, sge.lkey), (mr.iova() + 1024, 512, mr.lkey()));
    /// assert!(mr.sge(4000, 512).is_err()); // past the region's end
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `offset..offset + len` is not inside the region, or
    /// `len` does not fit the 32-bit length of a scatter/gather entry. It never panics.
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge> {
        region_sge(self.iova(), self.len, self.reg.key, offset, len)
    }

    /// The scatter/gather entry for the whole region (`sge(0, len())`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the region is longer than a scatter/gather entry can
    /// say (4 GiB - 1).
    pub fn sge_all(&self) -> Result<Sge> {
        self.sge(0, self.len)
    }
}

/// The entry for `offset..offset + len` of a region of `region_len` bytes at `iova`,
/// bounds-checked.
pub(crate) fn region_sge(
    iova: u64,
    region_len: usize,
    lkey: u32,
    offset: usize,
    len: usize,
) -> Result<Sge> {
    if offset.checked_add(len).is_none_or(|end| end > region_len) {
        let end = offset
            .checked_add(len)
            .map_or(u64::MAX, InvalidArgument::wide);
        return Err(
            InvalidArgument::max(Arg::RangeEnd, end, InvalidArgument::wide(region_len)).into(),
        );
    }
    let len = u32::try_from(len).map_err(|_| {
        InvalidArgument::max(Arg::SgeLength, InvalidArgument::wide(len), u32::MAX.into())
    })?;
    Ok(Sge {
        addr: iova + offset as u64,
        len,
        lkey,
    })
}
