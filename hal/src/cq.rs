//! The completion-queue poller.
//!
//! A CQE belongs to software when its opcode is not [`CqeOpcode::Invalid`] and its owner
//! bit equals the parity of the number of times the consumer index has wrapped the queue
//! (`(ci >> log_cqe_cnt) & 1`). A new queue is filled with invalid-opcode CQEs whose owner
//! bit is 1, so nothing is valid before the device writes. After the owner check a read
//! barrier comes before the rest of the CQE is read; the consumed entries are handed back
//! through the CQ doorbell record (`SET_CI`). Arming writes the arm word to the record and
//! rings the CQ doorbell in the UAR.
//!
//! ```
//! # use uhca_hal::testing::FakePlatform;
//! use uhca_hal::cq::{CqLayout, CqRing};
//! use uhca_hal::DmaBuf;
//! let p = FakePlatform::new();
//! let layout = CqLayout::new(7, 6);
//! let buf = DmaBuf::alloc(&p, layout.buffer_len(), 4096).unwrap();
//! let mut cq = CqRing::new(buf, layout).unwrap();
//! assert!(cq.poll_one().is_none());
//! ```

use crate::barriers;
use crate::dma::DmaMem;
use crate::platform::Bar;
use uhca_fwif::consts::{CQ_DOORBELL, CQE_OWNER_MASK, CqeOpcode, CqeSyndrome, WqeOpcode};
use uhca_fwif::cqe::{Cqe64, ErrCqe, op_own_of};
use uhca_fwif::doorbell::{CqDoorbellRecord, cq_arm_word, cq_uar_doorbell};
use zerocopy::{FromZeros, IntoBytes};

const SET_CI_OFF: usize = core::mem::offset_of!(CqDoorbellRecord, set_ci);
const ARM_DB_OFF: usize = core::mem::offset_of!(CqDoorbellRecord, arm_db);
const CQE64: usize = core::mem::size_of::<Cqe64>();
const OP_OWN_OFF: usize = core::mem::offset_of!(Cqe64, op_own);
const _: () = {
    assert!(core::mem::offset_of!(Cqe64, slid) == 22);
    assert!(core::mem::offset_of!(Cqe64, flags_rqpn) == 24);
    assert!(core::mem::offset_of!(Cqe64, l4_l3_hdr_type) == 29);
    assert!(core::mem::offset_of!(Cqe64, srqn) == 32);
    assert!(core::mem::offset_of!(Cqe64, immediate) == 36);
    assert!(core::mem::offset_of!(Cqe64, byte_cnt) == 44);
    assert!(core::mem::offset_of!(Cqe64, timestamp_h) == 48);
    assert!(core::mem::offset_of!(Cqe64, timestamp_l) == 52);
    assert!(core::mem::offset_of!(Cqe64, sop_drop_qpn) == 56);
    assert!(core::mem::offset_of!(Cqe64, wqe_counter) == 60);
    assert!(OP_OWN_OFF == 63);
    assert!(core::mem::offset_of!(ErrCqe, srqn) == 32);
    assert!(core::mem::offset_of!(ErrCqe, vendor_err_synd) == 54);
    assert!(core::mem::offset_of!(ErrCqe, syndrome) == 55);
    assert!(core::mem::offset_of!(ErrCqe, s_wqe_opcode_qpn) == 56);
    assert!(core::mem::offset_of!(ErrCqe, wqe_counter) == 60);
};

/// Where a CQ's entries and doorbell record sit in its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqLayout {
    /// The CQ number (for the arm doorbell).
    pub cqn: u32,
    /// log2 of the number of CQEs.
    pub log_cqe_cnt: u8,
    /// log2 of the CQE stride: 6 (64-byte CQEs) or 7 (128-byte CQEs, whose 64-byte CQE is
    /// the second half).
    pub log_stride: u8,
    /// Byte offset of the CQEs.
    pub cqe_offset: usize,
    /// Byte offset of the 8-byte doorbell record (8-byte aligned).
    pub dbr_offset: usize,
}

impl CqLayout {
    /// 64-byte CQEs at offset 0, doorbell record after them.
    pub const fn new(cqn: u32, log_cqe_cnt: u8) -> Self {
        CqLayout {
            cqn,
            log_cqe_cnt,
            log_stride: 6,
            cqe_offset: 0,
            dbr_offset: CQE64 << log_cqe_cnt,
        }
    }

    /// Bytes of the CQEs (what CREATE_CQ's `pas` describes).
    pub const fn cqe_bytes(&self) -> usize {
        1usize << (self.log_cqe_cnt + self.log_stride)
    }

    /// The buffer length this layout needs.
    pub const fn buffer_len(&self) -> usize {
        let a = self.cqe_offset + self.cqe_bytes();
        let b = self.dbr_offset + 8;
        if a > b { a } else { b }
    }
}

/// A successful completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqeSuccess {
    /// The CQE opcode ([`CqeOpcode::Req`] for the requester; `Resp*` for the responder).
    pub opcode: CqeOpcode,
    /// For a requester CQE, the raw opcode of the completed WQE (`sop_drop_qpn[31:24]`);
    /// see [`CqeSuccess::wqe_opcode`].
    pub sop: u8,
    /// The QP (`sop_drop_qpn[23:0]`).
    pub qpn: u32,
    /// The WQE counter: SQ WQE index (requester) or receive WQE index.
    pub wqe_counter: u16,
    /// Bytes received, or read by an RDMA READ or atomic.
    pub byte_count: u32,
    /// Immediate data, invalidated rkey or P_Key index (`immediate`).
    pub immediate: u32,
    /// The SRQ number or user index (`srqn`).
    pub srqn: u32,
    /// For UD receives, the remote QPN (`flags_rqpn[23:0]`).
    pub remote_qpn: u32,
    /// The received packet had a GRH ([`FlagsRqpn::grh`]).
    pub grh: bool,
    /// The sender's service level ([`FlagsRqpn::sl`]).
    pub sl: u8,
    /// Source LID (InfiniBand receive).
    pub slid: u16,
    /// RoCE L3 header type (`l4_l3_hdr_type[3:2]`).
    pub roce_l3_hdr_type: u8,
    /// The timestamp.
    pub timestamp: u64,
}

impl CqeSuccess {
    /// For a requester CQE, the opcode of the completed WQE.
    pub fn wqe_opcode(&self) -> WqeOpcode {
        WqeOpcode::from_raw(self.sop)
    }
}

/// An error completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqeError {
    /// [`CqeOpcode::ReqErr`] or [`CqeOpcode::RespErr`].
    pub opcode: CqeOpcode,
    /// The syndrome.
    pub syndrome: CqeSyndrome,
    /// The vendor syndrome (firmware-specific).
    pub vendor_syndrome: u8,
    /// The QP.
    pub qpn: u32,
    /// The counter of the failed WQE.
    pub wqe_counter: u16,
    /// The opcode of the failed WQE (`s_wqe_opcode_qpn[31:24]`).
    pub wqe_opcode: u8,
    /// The SRQ number.
    pub srqn: u32,
}

impl core::fmt::Display for CqeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} on QP {:#x}, WQE {}: {} (vendor syndrome {:#x})",
            self.opcode, self.qpn, self.wqe_counter, self.syndrome, self.vendor_syndrome
        )
    }
}

impl core::error::Error for CqeError {}

/// A completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The work request succeeded.
    Success(CqeSuccess),
    /// The work request failed.
    Error(CqeError),
}

impl Completion {
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        match self {
            Completion::Success(s) => s.qpn,
            Completion::Error(e) => e.qpn,
        }
    }

    /// The WQE counter.
    pub fn wqe_counter(&self) -> u16 {
        match self {
            Completion::Success(s) => s.wqe_counter,
            Completion::Error(e) => e.wqe_counter,
        }
    }
}

impl Default for Completion {
    /// A blank successful completion (opcode [`CqeOpcode::Invalid`], every field 0): what
    /// an output array of [`CqRing::poll`] starts as.
    fn default() -> Self {
        Completion::Success(CqeSuccess {
            opcode: CqeOpcode::Invalid,
            sop: 0,
            qpn: 0,
            wqe_counter: 0,
            byte_count: 0,
            immediate: 0,
            srqn: 0,
            remote_qpn: 0,
            grh: false,
            sl: 0,
            slid: 0,
            roce_l3_hdr_type: 0,
            timestamp: 0,
        })
    }
}

/// Byte offset of the CQE's last eight bytes: `sop_drop_qpn`, `wqe_counter`, `signature`,
/// `op_own` (the same place in a good and an error CQE).
const TAIL_OFF: usize = core::mem::offset_of!(Cqe64, sop_drop_qpn);
const _: () = assert!(TAIL_OFF + 8 == CQE64);

/// The receive fields of a CQE, bytes 16..48 read as four big-endian words
/// ([`CqeView::recv_fields`]): `rss_hash_type`, `ml_path`, `check_sum`, `slid`;
/// `flags_rqpn`, `hds_ip_ext`, `l4_l3_hdr_type`, `vlan_info`; `srqn`, `immediate`; reserved,
/// `byte_cnt`. The same values as the [`CqeView`] accessors of the same names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvFields([u64; 4]);

impl RecvFields {
    const AT: usize = core::mem::offset_of!(Cqe64, rss_hash_type);
    const _LAYOUT: () = assert!(
        Self::AT == 16
            && core::mem::offset_of!(Cqe64, ml_path) == 17
            && core::mem::offset_of!(Cqe64, slid) == 22
            && core::mem::offset_of!(Cqe64, flags_rqpn) == 24
            && core::mem::offset_of!(Cqe64, srqn) == 32
            && core::mem::offset_of!(Cqe64, immediate) == 36
            && core::mem::offset_of!(Cqe64, byte_cnt) == 44
    );

    /// `byte_cnt` (bytes 44..48).
    #[inline(always)]
    pub fn byte_cnt(&self) -> u32 {
        let () = Self::_LAYOUT;
        self.0[3] as u32
    }

    /// `immediate` (bytes 36..40): immediate data, or the invalidated rkey.
    #[inline(always)]
    pub fn immediate(&self) -> u32 {
        self.0[2] as u32
    }

    /// `srqn` (bytes 32..36, `[23:0]`).
    #[inline(always)]
    pub fn srqn(&self) -> u32 {
        (self.0[2] >> 32) as u32 & 0x00ff_ffff
    }

    /// `flags_rqpn` (bytes 24..28).
    #[inline(always)]
    pub fn flags_rqpn(&self) -> FlagsRqpn {
        FlagsRqpn((self.0[1] >> 32) as u32)
    }

    /// `ml_path` (byte 17) and `slid` (bytes 22..24).
    #[inline(always)]
    pub fn ml_path_slid(&self) -> (u8, u16) {
        ((self.0[0] >> 48) as u8, self.0[0] as u16)
    }
}

/// A CQE software owns (from [`CqRing::poll_next`]), read in place field by field. Offsets
/// are those of [`Cqe64`] (and of [`ErrCqe`] for an error CQE).
#[derive(Debug)]
pub struct CqeView<'a, M: DmaMem> {
    mem: &'a M,
    off: usize,
    /// Bytes 56..64, big-endian: `sop_drop_qpn`, `wqe_counter`, `signature`, `op_own`.
    tail: u64,
}

impl<M: DmaMem> CqeView<'_, M> {
    /// The CQE opcode (`op_own[7:4]`).
    #[inline(always)]
    pub fn opcode(&self) -> CqeOpcode {
        CqeOpcode::from_raw(self.opcode_raw())
    }

    /// The raw `opcode` field (`op_own[7:4]`): compared with one value, cheaper than
    /// decoding it with [`CqeView::opcode`].
    #[inline(always)]
    pub fn opcode_raw(&self) -> u8 {
        (self.tail as u8) >> 4
    }

    /// The QP number (`sop_drop_qpn[23:0]`; `s_wqe_opcode_qpn` of an error CQE).
    #[inline(always)]
    pub fn qpn(&self) -> u32 {
        (self.tail >> 32) as u32 & 0x00ff_ffff
    }

    /// The WQE opcode of a requester CQE (`sop_drop_qpn[31:24]`).
    #[inline(always)]
    pub fn sop(&self) -> u8 {
        (self.tail >> 56) as u8
    }

    /// The WQE counter.
    #[inline(always)]
    pub fn wqe_counter(&self) -> u16 {
        (self.tail >> 16) as u16
    }

    /// `byte_cnt`.
    #[inline(always)]
    pub fn byte_cnt(&self) -> u32 {
        self.mem
            .read_be32(self.off + core::mem::offset_of!(Cqe64, byte_cnt))
    }

    /// `immediate` (immediate data, or the invalidated rkey).
    #[inline(always)]
    pub fn immediate(&self) -> u32 {
        self.mem
            .read_be32(self.off + core::mem::offset_of!(Cqe64, immediate))
    }

    /// `flags_rqpn`: GRH present, service level, remote QPN.
    #[inline(always)]
    pub fn flags_rqpn(&self) -> FlagsRqpn {
        FlagsRqpn(
            self.mem
                .read_be32(self.off + core::mem::offset_of!(Cqe64, flags_rqpn)),
        )
    }

    /// `srqn` (`[23:0]`): the SRQ number or user index.
    #[inline(always)]
    pub fn srqn(&self) -> u32 {
        self.mem
            .read_be32(self.off + core::mem::offset_of!(Cqe64, srqn))
            & 0x00ff_ffff
    }

    /// The RoCE L3 header type (`l4_l3_hdr_type[3:2]`).
    #[inline(always)]
    pub fn roce_l3_hdr_type(&self) -> u8 {
        (self
            .mem
            .read_u8(self.off + core::mem::offset_of!(Cqe64, l4_l3_hdr_type))
            >> 2)
            & 0x3
    }

    /// The timestamp (`timestamp_h`, `timestamp_l`).
    #[inline(always)]
    pub fn timestamp(&self) -> u64 {
        self.mem
            .read_be64(self.off + core::mem::offset_of!(Cqe64, timestamp_h))
    }

    /// `ml_path` and `slid`, read as one word (bytes 16..24: `rss_hash_type`, `ml_path`,
    /// reserved, `check_sum`, `slid`).
    #[inline(always)]
    pub fn ml_path_slid(&self) -> (u8, u16) {
        const AT: usize = core::mem::offset_of!(Cqe64, rss_hash_type);
        const _: () = assert!(
            core::mem::offset_of!(Cqe64, ml_path) == AT + 1
                && core::mem::offset_of!(Cqe64, slid) == AT + 6
        );
        let w = self.mem.read_be64(self.off + AT);
        ((w >> 48) as u8, w as u16)
    }

    /// The fields a receive completion reports (bytes 16..48), read as one run of four
    /// words: one bounds check for all of them instead of one per field.
    #[inline(always)]
    pub fn recv_fields(&self) -> RecvFields {
        RecvFields(self.mem.read_be64_array::<4>(self.off + RecvFields::AT))
    }

    /// An error CQE's syndrome and vendor syndrome.
    #[inline(always)]
    pub fn error_syndromes(&self) -> (CqeSyndrome, u8) {
        const AT: usize = core::mem::offset_of!(ErrCqe, vendor_err_synd);
        const _: () = assert!(core::mem::offset_of!(ErrCqe, syndrome) == AT + 1);
        let w = self.mem.read_be16(self.off + AT);
        (CqeSyndrome::from_raw(w as u8), (w >> 8) as u8)
    }

    /// Every field of the CQE, read through the accessors above: a [`Completion`].
    #[inline(always)]
    pub fn completion(&self) -> Completion {
        let opcode = self.opcode();
        if matches!(opcode, CqeOpcode::ReqErr | CqeOpcode::RespErr) {
            let (syndrome, vendor_syndrome) = self.error_syndromes();
            return Completion::Error(CqeError {
                opcode,
                syndrome,
                vendor_syndrome,
                qpn: self.qpn(),
                wqe_counter: self.wqe_counter(),
                // `s_wqe_opcode_qpn[31:24]`, where a good CQE has `sop_drop_qpn[31:24]`.
                wqe_opcode: self.sop(),
                srqn: self.srqn(),
            });
        }
        let flags = self.flags_rqpn();
        let (_, slid) = self.ml_path_slid();
        Completion::Success(CqeSuccess {
            opcode,
            sop: self.sop(),
            qpn: self.qpn(),
            wqe_counter: self.wqe_counter(),
            byte_count: self.byte_cnt(),
            immediate: self.immediate(),
            srqn: self.srqn(),
            remote_qpn: flags.remote_qpn(),
            grh: flags.grh(),
            sl: flags.sl(),
            slid,
            roce_l3_hdr_type: self.roce_l3_hdr_type(),
            timestamp: self.timestamp(),
        })
    }
}

/// A CQE's `flags_rqpn` word (offset 0x18): `g` in bits 29:28, the service level in 27:24,
/// the remote QP number in 23:0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlagsRqpn(pub u32);

impl FlagsRqpn {
    /// `g`, `flags_rqpn[29:28]`.
    const G_SHIFT: u32 = 28;
    /// `sl`, `flags_rqpn[27:24]`.
    const SL_SHIFT: u32 = 24;

    /// The received packet carried a GRH: the two-bit `g` field is not 0. (`g` also says
    /// where the GRH went, 1 for the receive buffer and 2 for the second half of a 128-byte
    /// CQE; verbs reports only that there was one, as libmlx5 and Linux's mlx5_ib do.)
    #[inline(always)]
    pub const fn grh(self) -> bool {
        (self.0 >> Self::G_SHIFT) & 0x3 != 0
    }

    /// The sender's service level.
    #[inline(always)]
    pub const fn sl(self) -> u8 {
        ((self.0 >> Self::SL_SHIFT) & 0xf) as u8
    }

    /// The remote QP number (a UD receive's source QP).
    #[inline(always)]
    pub const fn remote_qpn(self) -> u32 {
        self.0 & 0x00ff_ffff
    }
}

/// Why a CQ could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CqLayoutError {
    /// Entries or record outside the buffer, overlapping, misaligned, or a bad stride.
    BadLayout(&'static str),
}

impl core::fmt::Display for CqLayoutError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CqLayoutError::BadLayout(w) => write!(f, "bad CQ layout: {w}"),
        }
    }
}

impl core::error::Error for CqLayoutError {}

/// A completion queue's entries and doorbell record, and its consumer state.
#[derive(Debug)]
pub struct CqRing<M: DmaMem> {
    mem: M,
    cqn: u32,
    log_cnt: u8,
    log_stride: u8,
    cqe_off: usize,
    dbr: usize,
    ci: u32,
    arm_sn: u32,
}

impl<M: DmaMem> CqRing<M> {
    /// Takes over `mem`, initialises every CQE as invalid with owner 1, zeroes the doorbell
    /// record.
    ///
    /// # Errors
    ///
    /// [`CqLayoutError::BadLayout`] if the layout does not fit `mem`, overlaps, is
    /// misaligned, or the stride is not 64 or 128 bytes.
    pub fn new(mut mem: M, layout: CqLayout) -> Result<Self, CqLayoutError> {
        if !(6..=7).contains(&layout.log_stride) {
            return Err(CqLayoutError::BadLayout(
                "CQE stride must be 64 or 128 bytes",
            ));
        }
        if layout.log_cqe_cnt > 24
            || !layout.cqe_offset.is_multiple_of(64)
            || !layout.dbr_offset.is_multiple_of(8)
        {
            return Err(CqLayoutError::BadLayout("size or alignment"));
        }
        let cqe_end = layout.cqe_offset.saturating_add(layout.cqe_bytes());
        if cqe_end > mem.len() || layout.dbr_offset.saturating_add(8) > mem.len() {
            return Err(CqLayoutError::BadLayout("outside the buffer"));
        }
        if layout.dbr_offset < cqe_end && layout.cqe_offset < layout.dbr_offset + 8 {
            return Err(CqLayoutError::BadLayout(
                "doorbell record overlaps the CQEs",
            ));
        }
        let invalid = op_own_of(CqeOpcode::Invalid, 1);
        let stride = 1usize << layout.log_stride;
        for i in 0..1usize << layout.log_cqe_cnt {
            mem.write_u8(
                layout.cqe_offset + i * stride + stride - CQE64 + OP_OWN_OFF,
                invalid,
            );
        }
        mem.write_be64(layout.dbr_offset, 0);
        Ok(CqRing {
            mem,
            cqn: layout.cqn,
            log_cnt: layout.log_cqe_cnt,
            log_stride: layout.log_stride,
            cqe_off: layout.cqe_offset,
            dbr: layout.dbr_offset,
            ci: 0,
            arm_sn: 0,
        })
    }

    /// The memory.
    pub fn mem(&self) -> &M {
        &self.mem
    }

    /// Gives the memory back (for freeing once the device no longer uses the CQ).
    pub fn into_mem(self) -> M {
        self.mem
    }

    /// The IOVA of the doorbell record (CREATE_CQ's `dbr_addr`).
    pub fn dbr_iova(&self) -> u64 {
        self.mem.iova() + self.dbr as u64
    }

    /// The consumer index (wrapping; the device sees its low 24 bits).
    pub fn consumer_index(&self) -> u32 {
        self.ci
    }

    /// Byte offset of the 64-byte CQE for consumer index `ci`.
    #[inline(always)]
    fn cqe_at(&self, ci: u32) -> usize {
        let idx = (ci & ((1u32 << self.log_cnt) - 1)) as usize;
        self.cqe_off + (idx << self.log_stride) + (1usize << self.log_stride) - CQE64
    }

    /// Whether software owns the CQE at the consumer index.
    #[inline(always)]
    fn sw_owned(&self, op_own: u8) -> bool {
        let owner = ((self.ci >> self.log_cnt) & 1) as u8;
        (op_own >> 4) != CqeOpcode::Invalid.raw() && (op_own & CQE_OWNER_MASK) == owner
    }

    /// Whether software owns the next CQE (the device wrote it): what
    /// [`CqRing::poll_next`] checks first, without taking it.
    #[inline(always)]
    pub fn has_next(&self) -> bool {
        self.sw_owned(self.mem.read_u8(self.cqe_at(self.ci) + OP_OWN_OFF))
    }

    /// Takes the next CQE if software owns it, advancing the consumer index (not yet
    /// published: see [`CqRing::update_consumer_index`]).
    #[inline(always)]
    pub fn poll_raw(&mut self) -> Option<Cqe64> {
        let off = self.cqe_at(self.ci);
        if !self.sw_owned(self.mem.read_u8(off + OP_OWN_OFF)) {
            return None;
        }
        // The owner bit said the CQE is ours: read the rest only after it.
        barriers::cqe_owner_before_cqe_read();
        // Eight volatile words under one bounds check, stored back in wire order.
        let words = self.mem.read_be64_array::<{ CQE64 / 8 }>(off);
        let mut cqe = Cqe64::new_zeroed();
        for (dst, w) in cqe.as_mut_bytes().chunks_exact_mut(8).zip(words) {
            dst.copy_from_slice(&w.to_be_bytes());
        }
        self.ci = self.ci.wrapping_add(1);
        Some(cqe)
    }

    /// Takes the next CQE if software owns it, advancing the consumer index (not yet
    /// published: see [`CqRing::update_consumer_index`]), and returns a view that reads its
    /// fields where the PRM puts them: the last eight bytes (QPN, WQE counter, opcode) are
    /// read at once, anything else only when asked for. Cheaper than
    /// [`poll_raw`](Self::poll_raw), which copies all 64 bytes.
    #[inline(always)]
    pub fn poll_next(&mut self) -> Option<CqeView<'_, M>> {
        let off = self.cqe_at(self.ci);
        if !self.sw_owned(self.mem.read_u8(off + OP_OWN_OFF)) {
            return None;
        }
        // The owner bit said the CQE is ours: read the rest only after it.
        barriers::cqe_owner_before_cqe_read();
        let tail = self.mem.read_be64(off + TAIL_OFF);
        self.ci = self.ci.wrapping_add(1);
        Some(CqeView {
            mem: &self.mem,
            off,
            tail,
        })
    }

    /// Takes and decodes the next CQE if software owns it: [`CqRing::poll_next`] read whole
    /// with [`CqeView::completion`]. The consumer index is not yet published: call
    /// [`CqRing::update_consumer_index`] after a batch.
    #[inline(always)]
    pub fn poll_one(&mut self) -> Option<Completion> {
        self.poll_next().map(|v| v.completion())
    }

    /// Fills `out` with completions and publishes the consumer index if any was taken.
    /// Returns how many.
    #[inline(always)]
    pub fn poll(&mut self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        for slot in out.iter_mut() {
            match self.poll_one() {
                Some(c) => {
                    *slot = c;
                    n += 1;
                }
                None => break,
            }
        }
        if n != 0 {
            self.update_consumer_index();
        }
        n
    }

    /// Publishes the consumer index in the doorbell record (`SET_CI`), handing the consumed
    /// CQEs back to the device.
    #[inline(always)]
    pub fn update_consumer_index(&mut self) {
        // The consumed CQEs must be read before the device may overwrite them.
        barriers::cqe_read_before_consumer_index();
        self.mem
            .write_be32(self.dbr + SET_CI_OFF, self.ci & 0x00ff_ffff);
    }

    /// Notes that a completion event for this CQ arrived (the arm sequence number moves on).
    pub fn event_received(&mut self) {
        self.arm_sn = self.arm_sn.wrapping_add(1);
    }

    /// Arms the CQ for the next (or the next solicited) completion: the arm word to the
    /// doorbell record, then the 64-bit CQ doorbell at UAR + [`CQ_DOORBELL`].
    pub fn arm<B: Bar + ?Sized>(&mut self, bar: &B, uar_page: usize, solicited_only: bool) {
        let word = cq_arm_word(self.arm_sn, solicited_only, self.ci);
        self.mem.write_be32(self.dbr + ARM_DB_OFF, word);
        // The arm word in the record must be visible before the doorbell.
        barriers::doorbell_record_before_mmio();
        bar.write_be64(uar_page + CQ_DOORBELL, cq_uar_doorbell(word, self.cqn));
        // Push the doorbell out of a write-combining buffer.
        barriers::mmio_flush_writes();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::dma::DmaBuf;
    use crate::testing::{FAKE_UAR, FakePlatform};
    use uhca_fwif::consts::CQ_DB_REQ_NOT_SOL;

    /// Writes a CQE as the device would: body first, `op_own` last.
    fn device_write_cqe(p: &FakePlatform, iova: u64, mut cqe: Cqe64, opcode: CqeOpcode, owner: u8) {
        cqe.op_own = op_own_of(opcode, owner);
        p.dma.device_write(iova, &cqe.as_bytes()[..63]);
        p.dma.device_write(iova + 63, &[cqe.op_own]);
    }

    fn req_cqe(qpn: u32, wqe_counter: u16, byte_cnt: u32) -> Cqe64 {
        let mut c = Cqe64::new_zeroed();
        c.sop_drop_qpn
            .set((WqeOpcode::RdmaWrite.raw() as u32) << 24 | qpn);
        c.wqe_counter.set(wqe_counter);
        c.byte_cnt.set(byte_cnt);
        c.immediate.set(0xfeed);
        c
    }

    #[test]
    fn owner_bit_follows_the_wrap_count() {
        let p = FakePlatform::new();
        let l = CqLayout::new(9, 2); // 4 CQEs
        let mut cq = CqRing::new(DmaBuf::alloc(&p, l.buffer_len(), 4096).unwrap(), l).unwrap();
        assert_eq!(
            cq.mem().read_u8(63),
            0xf1,
            "initialised invalid with owner 1"
        );
        assert!(cq.poll_one().is_none());
        for lap in 0..3u32 {
            let owner = (lap & 1) as u8;
            for i in 0..4u32 {
                let n = lap * 4 + i;
                // A CQE with the previous lap's owner is stale.
                let at = cq.mem().iova() + i as u64 * 64;
                device_write_cqe(
                    &p,
                    at,
                    req_cqe(0x11, n as u16, n),
                    CqeOpcode::Req,
                    owner ^ 1,
                );
                assert!(cq.poll_one().is_none(), "stale owner at lap {lap}");
                device_write_cqe(&p, at, req_cqe(0x11, n as u16, n), CqeOpcode::Req, owner);
                let c = cq.poll_one().expect("a fresh CQE");
                let Completion::Success(s) = c else {
                    panic!("{c:?}")
                };
                assert_eq!((s.qpn, s.wqe_counter, s.byte_count), (0x11, n as u16, n));
                assert_eq!(
                    (s.opcode, s.wqe_opcode(), s.immediate),
                    (CqeOpcode::Req, WqeOpcode::RdmaWrite, 0xfeed)
                );
            }
        }
        assert_eq!(cq.consumer_index(), 12);
        let dbr = l.dbr_offset;
        assert_eq!(
            cq.mem().read_be32(dbr),
            0,
            "consumer index published only when asked"
        );
        cq.update_consumer_index();
        assert_eq!(cq.mem().read_be32(dbr), 12);
    }

    #[test]
    fn error_cqes_decode_syndromes() {
        let p = FakePlatform::new();
        let l = CqLayout::new(9, 3);
        let buf = DmaBuf::alloc(&p, l.buffer_len(), 4096).unwrap();
        let mut e = ErrCqe::new_zeroed();
        e.syndrome = CqeSyndrome::RemoteAccessErr.raw();
        e.vendor_err_synd = 0x88;
        e.s_wqe_opcode_qpn.set(0x0a00_0123);
        e.wqe_counter.set(7);
        let mut cqe = Cqe64::new_zeroed();
        cqe.as_mut_bytes().copy_from_slice(e.as_bytes());
        let mut cq = CqRing::new(buf, l).unwrap();
        device_write_cqe(&p, cq.mem().iova(), cqe, CqeOpcode::ReqErr, 0);
        let mut out = [Completion::Error(CqeError {
            opcode: CqeOpcode::Invalid,
            syndrome: CqeSyndrome::Unknown(0),
            vendor_syndrome: 0,
            qpn: 0,
            wqe_counter: 0,
            wqe_opcode: 0,
            srqn: 0,
        }); 4];
        assert_eq!(cq.poll(&mut out), 1);
        let Completion::Error(err) = out[0] else {
            panic!()
        };
        assert_eq!(err.syndrome, CqeSyndrome::RemoteAccessErr);
        assert_eq!(
            (
                err.vendor_syndrome,
                err.qpn,
                err.wqe_counter,
                err.wqe_opcode
            ),
            (0x88, 0x123, 7, 0x0a)
        );
        assert_eq!(
            std::format!("{err}"),
            "MLX5_CQE_REQ_ERR on QP 0x123, WQE 7: MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR (vendor syndrome 0x88)"
        );
        assert_eq!(
            cq.mem().read_be32(l.dbr_offset),
            1,
            "poll() publishes the consumer index"
        );
    }

    /// A responder CQE with every field set: each decoded from where the PRM puts it.
    #[test]
    fn responder_cqe_fields_at_prm_offsets() {
        let p = FakePlatform::new();
        let l = CqLayout::new(9, 2);
        let mut cq = CqRing::new(DmaBuf::alloc(&p, l.buffer_len(), 4096).unwrap(), l).unwrap();
        let mut c = Cqe64::new_zeroed();
        c.slid.set(0x1234);
        c.flags_rqpn.set(0x1a00_0456); // g = 1, sl = 10, remote QPN 0x456
        c.l4_l3_hdr_type = 0x2 << 2;
        c.srqn.set(0xff00_0077);
        c.immediate.set(0xdead_beef);
        c.byte_cnt.set(4096);
        c.timestamp_h.set(0x0102_0304);
        c.timestamp_l.set(0x0506_0708);
        c.sop_drop_qpn.set(0x0000_0099);
        c.wqe_counter.set(3);
        device_write_cqe(&p, cq.mem().iova(), c, CqeOpcode::RespSendImm, 0);
        let Some(Completion::Success(s)) = cq.poll_one() else {
            panic!("no successful CQE")
        };
        assert_eq!(
            s,
            CqeSuccess {
                opcode: CqeOpcode::RespSendImm,
                sop: 0,
                qpn: 0x99,
                wqe_counter: 3,
                byte_count: 4096,
                immediate: 0xdead_beef,
                srqn: 0x77,
                remote_qpn: 0x456,
                grh: true,
                sl: 10,
                slid: 0x1234,
                roce_l3_hdr_type: 2,
                timestamp: 0x0102_0304_0506_0708,
            }
        );
    }

    /// [`CqeView::recv_fields`] reads the same receive fields as the view's accessors, each
    /// from its PRM offset, with every neighbouring byte set so a misplaced shift shows.
    #[test]
    fn recv_fields_read_the_accessors_values_in_one_run() {
        let p = FakePlatform::new();
        let l = CqLayout::new(9, 2);
        let mut cq = CqRing::new(DmaBuf::alloc(&p, l.buffer_len(), 4096).unwrap(), l).unwrap();
        let mut c = Cqe64::new_zeroed();
        c.rss_hash_type = 0xa1;
        c.ml_path = 0x85;
        c.check_sum.set(0xc3c4);
        c.slid.set(0x1234);
        c.flags_rqpn.set(0x2b00_0456);
        c.hds_ip_ext = 0xe1;
        c.l4_l3_hdr_type = 0xe2;
        c.vlan_info.set(0xe3e4);
        c.srqn.set(0xff00_0077);
        c.immediate.set(0xdead_beef);
        c.rsvd40 = [0xf1, 0xf2, 0xf3, 0xf4];
        c.byte_cnt.set(0x0001_0203);
        device_write_cqe(&p, cq.mem().iova(), c, CqeOpcode::RespSendImm, 0);
        let v = cq.poll_next().expect("a CQE");
        let f = v.recv_fields();
        assert_eq!(f.byte_cnt(), 0x0001_0203);
        assert_eq!(f.byte_cnt(), v.byte_cnt());
        assert_eq!(f.immediate(), 0xdead_beef);
        assert_eq!(f.immediate(), v.immediate());
        assert_eq!(f.srqn(), 0x77);
        assert_eq!(f.srqn(), v.srqn());
        assert_eq!(f.flags_rqpn(), v.flags_rqpn());
        assert_eq!(f.flags_rqpn().remote_qpn(), 0x456);
        assert_eq!(f.ml_path_slid(), (0x85, 0x1234));
        assert_eq!(f.ml_path_slid(), v.ml_path_slid());
    }

    /// `g` is the two bits 29:28 of `flags_rqpn`: any value but 0 means the packet had a
    /// GRH (2: the GRH is in the CQE's first half), and the service level below it is apart.
    #[test]
    fn grh_is_any_nonzero_g_field() {
        let p = FakePlatform::new();
        let l = CqLayout::new(9, 2);
        let mut cq = CqRing::new(DmaBuf::alloc(&p, l.buffer_len(), 4096).unwrap(), l).unwrap();
        for (i, (g, grh)) in [(0u32, false), (1, true), (2, true), (3, true)]
            .into_iter()
            .enumerate()
        {
            let mut c = req_cqe(0x11, i as u16, 0);
            c.flags_rqpn.set(g << 28 | 0xf << 24 | 0x42);
            let at = cq.mem().iova() + i as u64 * 64;
            device_write_cqe(&p, at, c, CqeOpcode::RespSend, 0);
            let view = cq.poll_next().expect("a fresh CQE");
            assert_eq!(view.flags_rqpn().grh(), grh, "g = {g}");
            let Completion::Success(s) = view.completion() else {
                panic!("an error CQE")
            };
            assert_eq!((s.grh, s.sl, s.remote_qpn), (grh, 0xf, 0x42), "g = {g}");
        }
    }

    #[test]
    fn arm_writes_record_then_doorbell_with_sequence_number() {
        let p = FakePlatform::new();
        let l = CqLayout::new(0x42, 3);
        let mut cq = CqRing::new(DmaBuf::alloc(&p, l.buffer_len(), 4096).unwrap(), l).unwrap();
        cq.arm(&p, FAKE_UAR, false);
        cq.event_received();
        cq.arm(&p, FAKE_UAR, true);
        let w0 = cq_arm_word(0, false, 0);
        let w1 = (1 << 28) | CQ_DB_REQ_NOT_SOL;
        assert_eq!(cq_arm_word(1, true, 0), w1);
        assert_eq!(cq.mem().read_be32(l.dbr_offset + 4), w1);
        assert_eq!(
            p.bar.write_log(),
            [
                (FAKE_UAR + 0x20, (w0 as u64) << 32 | 0x42),
                (FAKE_UAR + 0x20, (w1 as u64) << 32 | 0x42)
            ]
        );
    }
}
