//! Work queues: the send queue (SQ) with its WQE builder and the receive queue (RQ) of one
//! QP, their doorbell record, and the send doorbell in the UAR.
//!
//! [`QpRings`] owns the QP's DMA memory: the RQ, the SQ and the 8-byte doorbell record live
//! at offsets of one buffer (which is what CREATE_QP describes: `pas` for the queues,
//! `dbr_addr` = buffer IOVA + [`QpLayout::dbr_offset`]). Posting is allocation-free and
//! lock-free; many WQEs can be posted and then published with one doorbell.
//!
//! Send WQEs are counted in 64-byte basic blocks (WQEBBs, [`SEND_WQE_BB`]); their size in
//! 16-byte units (`ds`, ≤ 63, and ≤ 16 WQEBBs); a WQE that reaches the end of the ring
//! continues at its start. The producer counter (in WQEBBs) is the WQE index of the next
//! WQE; its low 16 bits go to the control segment and to the doorbell record.
//!
//! ```
//! # use uhca_hal::testing::{FakePlatform, FAKE_UAR};
//! use uhca_hal::wq::{QpLayout, QpRings, SqDoorbell};
//! use uhca_hal::DmaBuf;
//! use uhca_fwif::consts::{WqeOpcode, WqeCtrlFlags};
//! let p = FakePlatform::new();
//! let layout = QpLayout::new(0x17, Some((4, 5)), Some(6));
//! let buf = DmaBuf::alloc(&p, layout.buffer_len(), 4096).unwrap();
//! let mut qp = QpRings::new(buf, layout, SqDoorbell::new(FAKE_UAR)).unwrap();
//! let mut w = qp.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::CQ_UPDATE).unwrap();
//! w.data(0x1000, 64, 0x42).unwrap();
//! let posted = w.finish();
//! assert_eq!((posted.wqe_index, posted.wqebbs), (0, 1));
//! qp.ring_sq_doorbell(&p);
//! ```

use crate::barriers;
use crate::dma::{DmaMem, DmaSplit};
use crate::platform::Bar;
use uhca_fwif::consts::{
    BF_OFFSET, INLINE_SEG, SEND_WQE_BB, SEND_WQE_DS, SEND_WQE_MAX_WQEBBS, WQE_CTRL_DS_MASK,
    WQE_CTRL_OPCODE_MASK, WQE_CTRL_WQE_INDEX_MASK, WQE_CTRL_WQE_INDEX_SHIFT,
    WQE_INLINE_SEG_BYTE_COUNT_MASK, WqeCtrlFlags, WqeOpcode,
};
use uhca_fwif::doorbell::{BF_BUFFER_STRIDE, QpDoorbellRecord};
use uhca_fwif::wqe::{Av, INVALID_LKEY, WqeCtrlSeg, WqeInlineSeg};

/// Byte offset of the receive counter in the QP doorbell record.
const RCV_DBR_OFF: usize = core::mem::offset_of!(QpDoorbellRecord, recv_counter);
/// Byte offset of the send counter in the QP doorbell record.
const SND_DBR_OFF: usize = core::mem::offset_of!(QpDoorbellRecord, send_counter);
/// Most 16-byte units in one WQE (`qpn_ds[5:0]`).
const MAX_DS: u32 = WQE_CTRL_DS_MASK;

/// Errors of posting and of ring set-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WqError {
    /// The SQ has no room for the WQE (the device has not consumed enough yet).
    SqFull {
        /// WQEBBs the WQE needs so far.
        needed: u32,
        /// WQEBBs free.
        free: u32,
    },
    /// The WQE would exceed 63 16-byte units or the QP's largest WQE.
    WqeTooLarge {
        /// 16-byte units the WQE would need.
        ds: u32,
    },
    /// More inline bytes than an inline segment can carry.
    InlineTooLong(usize),
    /// A data segment length with bit 31 set (it would read as inline data).
    ByteCountTooLarge(u32),
    /// The RQ is full.
    RqFull,
    /// More scatter entries than an RQ WQE holds.
    TooManySges {
        /// Entries given.
        given: usize,
        /// Entries that fit the RQ stride.
        max: usize,
    },
    /// The QP has no SQ.
    NoSq,
    /// The QP has no RQ.
    NoRq,
    /// A completion reported a WQE that is not outstanding.
    NotOutstanding,
    /// The layout does not fit the buffer, overlaps itself or is not aligned.
    BadLayout(&'static str),
}

impl core::fmt::Display for WqError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WqError::SqFull { needed, free } => {
                write!(f, "send queue full: WQE needs {needed} WQEBBs, {free} free")
            }
            WqError::WqeTooLarge { ds } => write!(f, "WQE too large: {ds} 16-byte units"),
            WqError::InlineTooLong(n) => write!(f, "{n} bytes of inline data is too long"),
            WqError::ByteCountTooLarge(n) => write!(f, "data segment length {n:#x} too large"),
            WqError::RqFull => f.write_str("receive queue full"),
            WqError::TooManySges { given, max } => {
                write!(f, "{given} scatter entries, the receive WQE holds {max}")
            }
            WqError::NoSq => f.write_str("the QP has no send queue"),
            WqError::NoRq => f.write_str("the QP has no receive queue"),
            WqError::NotOutstanding => f.write_str("completion for a WQE that is not outstanding"),
            WqError::BadLayout(why) => write!(f, "bad work-queue layout: {why}"),
        }
    }
}

impl core::error::Error for WqError {}

/// A scatter/gather entry: device address, length, local key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    /// Device address (IOVA or a key-relative address).
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key.
    pub lkey: u32,
}

/// Where a QP's queues and doorbell record sit in its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpLayout {
    /// QP number (the control segment's `qpn`).
    pub qpn: u32,
    /// RQ: (byte offset, log2 WQE count, log2 stride in bytes ≥ 4), or none.
    pub rq: Option<(usize, u8, u8)>,
    /// SQ: (byte offset, log2 WQEBB count), or none.
    pub sq: Option<(usize, u8)>,
    /// Largest send WQE in WQEBBs (1..=16).
    pub max_sq_wqebbs: u8,
    /// Byte offset of the 8-byte doorbell record (8-byte aligned).
    pub dbr_offset: usize,
}

impl QpLayout {
    /// The layout Linux and rdma-core use: RQ at offset 0 (`rq` = (log2 WQE count, log2
    /// stride)), SQ right after it (`log_sq` = log2 WQEBB count), doorbell record after the
    /// SQ, 64-byte aligned; largest send WQE 16 WQEBBs.
    pub const fn new(qpn: u32, rq: Option<(u8, u8)>, log_sq: Option<u8>) -> Self {
        let rq_bytes = match rq {
            Some((n, s)) => 1usize << (n + s),
            None => 0,
        };
        let sq_bytes = match log_sq {
            Some(n) => SEND_WQE_BB << n,
            None => 0,
        };
        QpLayout {
            qpn,
            rq: match rq {
                Some((n, s)) => Some((0, n, s)),
                None => None,
            },
            sq: match log_sq {
                Some(n) => Some((rq_bytes, n)),
                None => None,
            },
            max_sq_wqebbs: SEND_WQE_MAX_WQEBBS as u8,
            dbr_offset: (rq_bytes + sq_bytes).next_multiple_of(64),
        }
    }

    /// Bytes of the RQ and SQ (what CREATE_QP's `pas` describes).
    pub const fn wq_len(&self) -> usize {
        let rq = match self.rq {
            Some((o, n, s)) => o + (1usize << (n + s)),
            None => 0,
        };
        let sq = match self.sq {
            Some((o, n)) => o + (SEND_WQE_BB << n),
            None => 0,
        };
        if rq > sq { rq } else { sq }
    }

    /// The buffer length this layout needs (queues and doorbell record).
    pub const fn buffer_len(&self) -> usize {
        let end = self.dbr_offset + 8;
        let wq = self.wq_len();
        if end > wq { end } else { wq }
    }
}

/// How the send doorbell is rung.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqDoorbell {
    /// BAR offset of the BlueFlame register (UAR page + [`BF_OFFSET`] + register index ×
    /// `bf_reg_size`).
    pub bf_reg: usize,
    /// Alternate between the register's two buffers (`offset ^= 0x100` after each
    /// doorbell), as rdma-core does for registers with a BlueFlame buffer.
    pub alternate: bool,
    /// Copy a single small WQE to the BlueFlame buffer instead of the 8-byte doorbell.
    /// Off unless asked for: it needs a write-combining UAR mapping to pay off.
    pub blueflame: bool,
}

impl SqDoorbell {
    /// 8-byte doorbells to the first register of the UAR page at BAR offset `uar_page`,
    /// alternating buffers, no BlueFlame.
    pub const fn new(uar_page: usize) -> Self {
        SqDoorbell {
            bf_reg: uar_page + BF_OFFSET,
            alternate: true,
            blueflame: false,
        }
    }

    /// The same, with BlueFlame for single WQEs of at most 256 bytes.
    pub const fn with_blueflame(mut self) -> Self {
        self.blueflame = true;
        self
    }
}

#[derive(Clone, Copy, Debug)]
struct SqState {
    off: usize,
    log_cnt: u8,
    /// Largest WQE in 16-byte units: min(63, 4 × max_wqebbs).
    limit_ds: u32,
    /// Ring bytes − 1.
    mask: usize,
    pi: u32,
    ci: u32,
    last_ctrl: u64,
    last_start: u32,
    last_bbs: u32,
    batch: u32,
    db: SqDoorbell,
    toggle: usize,
}

impl SqState {
    #[inline(always)]
    fn ring_mask(&self) -> usize {
        self.mask
    }
    #[inline(always)]
    fn free(&self) -> u32 {
        (1u32 << self.log_cnt) - self.pi.wrapping_sub(self.ci)
    }
}

#[derive(Clone, Copy, Debug)]
struct RqState {
    off: usize,
    log_cnt: u8,
    log_stride: u8,
    head: u32,
    tail: u32,
}

/// What a posted send WQE occupies; keep it (with the work request id) to retire the
/// WQE when its completion arrives ([`QpRings::sq_complete`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostedWqe {
    /// The WQE index (low 16 bits of the producer counter at its first WQEBB), which the
    /// CQE's `wqe_counter` reports.
    pub wqe_index: u16,
    /// WQEBBs it occupies.
    pub wqebbs: u8,
}

/// The body of [`QpRings::ring_sq_doorbell`] and of its send half's: a macro rather than a
/// function, because the function (inlined or not) made the compiler keep the buffer's
/// address on the stack in a posting loop, 3 to 4 more instructions per WQE in the HAL
/// benchmark (callgrind); expanded in place, the unsplit rings compile as before. It writes
/// only the send counter of the doorbell record at `$dbr`, and reads only the SQ.
macro_rules! ring_sq_doorbell {
    ($mem:expr, $sq:expr, $dbr:expr, $bar:expr) => {{
        let Some(sq) = $sq else { return };
        if sq.batch == 0 {
            return;
        }
        // The WQE stores must be visible before the device can see the new send counter.
        barriers::wqe_before_doorbell_record();
        $mem.write_be32($dbr + SND_DBR_OFF, sq.pi & 0xffff);
        // The doorbell record must be visible before the doorbell makes the device look.
        barriers::doorbell_record_before_mmio();
        let reg = sq.db.bf_reg + sq.toggle;
        if sq.db.blueflame
            && sq.batch == 1
            && sq.last_bbs as usize * SEND_WQE_BB <= BF_BUFFER_STRIDE
        {
            let mask = sq.ring_mask();
            for bb in 0..sq.last_bbs as usize {
                let src = sq.off + (((sq.last_start as usize + bb) * SEND_WQE_BB) & mask);
                for w in 0..SEND_WQE_BB / 8 {
                    $bar.write_be64(reg + bb * SEND_WQE_BB + w * 8, $mem.read_be64(src + w * 8));
                }
            }
        } else {
            $bar.write_be64(reg, sq.last_ctrl);
        }
        // Push the doorbell out (write-combining) before the other buffer is used.
        barriers::mmio_flush_writes();
        if sq.db.alternate {
            sq.toggle ^= BF_BUFFER_STRIDE;
        }
        sq.batch = 0;
    }};
}

/// The SQ, RQ and doorbell record of one QP, in one DMA buffer.
#[derive(Debug)]
pub struct QpRings<M: DmaMem> {
    mem: M,
    /// `qpn_ds` with the DS count 0.
    qpn_bits: u32,
    dbr: usize,
    sq: Option<SqState>,
    rq: Option<RqState>,
}

impl<M: DmaMem> QpRings<M> {
    /// Takes over `mem` with `layout`, zeroes the doorbell record and returns the rings.
    ///
    /// # Errors
    ///
    /// [`WqError::BadLayout`] if a queue or the record lies outside `mem`, they overlap,
    /// the record is not 8-byte aligned, queue offsets are not 64-byte aligned, the RQ
    /// stride is below 16 bytes, or `max_sq_wqebbs` is not in 1..=16.
    pub fn new(mut mem: M, layout: QpLayout, doorbell: SqDoorbell) -> Result<Self, WqError> {
        let len = mem.len();
        let mut ranges: [(usize, usize); 3] = [(0, 0); 3];
        if !layout.dbr_offset.is_multiple_of(8) {
            return Err(WqError::BadLayout("doorbell record not 8-byte aligned"));
        }
        ranges[0] = (layout.dbr_offset, layout.dbr_offset.saturating_add(8));
        let rq = match layout.rq {
            Some((off, log_cnt, log_stride)) => {
                if !(4..=12).contains(&log_stride) || log_cnt > 16 || off % 64 != 0 {
                    return Err(WqError::BadLayout("RQ stride, size or offset"));
                }
                ranges[1] = (off, off.saturating_add(1 << (log_cnt + log_stride)));
                Some(RqState {
                    off,
                    log_cnt,
                    log_stride,
                    head: 0,
                    tail: 0,
                })
            }
            None => None,
        };
        let sq = match layout.sq {
            Some((off, log_cnt)) => {
                if log_cnt > 15 || off % 64 != 0 {
                    return Err(WqError::BadLayout("SQ size or offset"));
                }
                if !(1..=SEND_WQE_MAX_WQEBBS as u8).contains(&layout.max_sq_wqebbs) {
                    return Err(WqError::BadLayout("max_sq_wqebbs must be 1..=16"));
                }
                ranges[2] = (off, off.saturating_add(SEND_WQE_BB << log_cnt));
                Some(SqState {
                    off,
                    log_cnt,
                    limit_ds: ((layout.max_sq_wqebbs as u32).min(1 << log_cnt) * 4).min(MAX_DS),
                    mask: (SEND_WQE_BB << log_cnt) - 1,
                    pi: 0,
                    ci: 0,
                    last_ctrl: 0,
                    last_start: 0,
                    last_bbs: 0,
                    batch: 0,
                    db: doorbell,
                    toggle: 0,
                })
            }
            None => None,
        };
        for (i, a) in ranges.iter().enumerate() {
            if a.1 > len {
                return Err(WqError::BadLayout(
                    "queue or doorbell record outside the buffer",
                ));
            }
            for b in &ranges[i + 1..] {
                if a.0 < b.1 && b.0 < a.1 {
                    return Err(WqError::BadLayout("queues or doorbell record overlap"));
                }
            }
        }
        // A stale record would let the device read garbage counters (UCX PR #5034).
        mem.write_be64(layout.dbr_offset, 0);
        Ok(QpRings {
            mem,
            qpn_bits: WqeCtrlSeg::qpn_ds_of(layout.qpn, 0),
            dbr: layout.dbr_offset,
            sq,
            rq,
        })
    }

    /// The memory (for diagnostics and tests).
    pub fn mem(&self) -> &M {
        &self.mem
    }

    /// Gives the memory back.
    pub fn into_mem(self) -> M {
        self.mem
    }

    /// The IOVA of the doorbell record (CREATE_QP's `dbr_addr`).
    pub fn dbr_iova(&self) -> u64 {
        self.mem.iova() + self.dbr as u64
    }

    /// The SQ producer counter in WQEBBs (wrapping).
    pub fn sq_producer(&self) -> u32 {
        self.sq.map_or(0, |s| s.pi)
    }

    /// WQEBBs free in the SQ.
    pub fn sq_free(&self) -> u32 {
        self.sq.map_or(0, |s| s.free())
    }

    /// Starts a send WQE. Segments are appended with the builder's methods, then
    /// [`WqeBuilder::finish`] writes the control segment and takes the WQEBBs; a builder
    /// dropped without `finish` posts nothing.
    ///
    /// # Errors
    ///
    /// [`WqError::NoSq`]; [`WqError::SqFull`] if not even one WQEBB is free.
    #[inline(always)]
    pub fn sq_wqe(
        &mut self,
        opcode: WqeOpcode,
        flags: WqeCtrlFlags,
    ) -> Result<WqeBuilder<'_, M>, WqError> {
        sq_wqe(
            &mut self.mem,
            self.sq.as_mut(),
            self.qpn_bits,
            opcode,
            flags,
        )
    }

    /// Posts a send WQE of the most common shape in one step: a control segment, a
    /// remote-address segment if `raddr` is given (RDMA WRITE), and one data segment — at
    /// most three 16-byte units, so one WQEBB that never crosses the ring's end. The bytes
    /// are exactly what [`sq_wqe`](Self::sq_wqe), [`WqeBuilder::imm`],
    /// [`WqeBuilder::raddr`], [`WqeBuilder::data`] and [`WqeBuilder::finish`] write, with
    /// one bounds check instead of four.
    ///
    /// # Errors
    ///
    /// [`WqError::NoSq`], [`WqError::SqFull`], [`WqError::ByteCountTooLarge`].
    #[inline(always)]
    pub fn sq_post_one_sge(
        &mut self,
        opcode: WqeOpcode,
        flags: WqeCtrlFlags,
        imm: u32,
        raddr: Option<(u64, u32)>,
        sge: &Sge,
    ) -> Result<PostedWqe, WqError> {
        sq_post_one_sge(
            &mut self.mem,
            self.sq.as_mut(),
            self.qpn_bits,
            opcode,
            flags,
            imm,
            raddr,
            sge,
        )
    }

    /// Posts a send WQE of control segment, optional remote-address segment (RDMA WRITE) and
    /// one inline-data segment in one step, when it does not reach the ring's end; `None`
    /// when it would (then build it with [`sq_wqe`](Self::sq_wqe), which wraps). The bytes
    /// are exactly what the builder writes ([`WqeBuilder::inline`]: the header with the
    /// first data bytes as one word, the rest of the data, the padding left as it was).
    ///
    /// # Errors
    ///
    /// [`WqError::NoSq`], [`WqError::SqFull`], [`WqError::WqeTooLarge`],
    /// [`WqError::InlineTooLong`].
    #[inline(always)]
    pub fn sq_post_inline(
        &mut self,
        opcode: WqeOpcode,
        flags: WqeCtrlFlags,
        imm: u32,
        raddr: Option<(u64, u32)>,
        data: &[u8],
    ) -> Option<Result<PostedWqe, WqError>> {
        sq_post_inline(
            &mut self.mem,
            self.sq.as_mut(),
            self.qpn_bits,
            opcode,
            flags,
            imm,
            raddr,
            data,
        )
    }

    /// Retires send WQEs up to and including the one at `wqe_index` of `wqebbs` WQEBBs (as
    /// a requester CQE's `wqe_counter` reports it; earlier unsignalled WQEs complete with
    /// it).
    ///
    /// # Errors
    ///
    /// [`WqError::NotOutstanding`] if that WQE is not between the consumer and the producer.
    pub fn sq_complete(&mut self, wqe_index: u16, wqebbs: u8) -> Result<(), WqError> {
        let sq = self.sq.as_mut().ok_or(WqError::NoSq)?;
        let end = wqe_index.wrapping_add(wqebbs as u16);
        let delta = end.wrapping_sub(sq.ci as u16) as u32;
        if delta == 0 || delta > sq.pi.wrapping_sub(sq.ci) {
            return Err(WqError::NotOutstanding);
        }
        sq.ci = sq.ci.wrapping_add(delta);
        Ok(())
    }

    /// Sets the SQ consumer counter (basic blocks retired) to `ci`, as the thread that polls
    /// the completions published it ([`SqTable::consumer`](crate::wrid::SqTable::consumer)):
    /// the ring's free room follows it. Nothing changes if `ci` lies outside the window
    /// between the current consumer and the producer (a counter from before a reset).
    #[inline(always)]
    pub fn sq_set_consumer(&mut self, ci: u32) {
        sq_set_consumer(self.sq.as_mut(), ci)
    }

    /// Publishes the WQEs posted since the last doorbell: store barrier, send counter to
    /// the doorbell record, then the UAR doorbell (the first 8 bytes of the last control
    /// segment, or the whole WQE through BlueFlame when enabled and exactly one WQE of at
    /// most 256 bytes is pending). Does nothing when no WQE is pending.
    #[inline(always)]
    pub fn ring_sq_doorbell<B: Bar + ?Sized>(&mut self, bar: &B) {
        ring_sq_doorbell!(self.mem, self.sq.as_mut(), self.dbr, bar)
    }

    /// Receive WQEs that can still be posted.
    pub fn rq_free(&self) -> u32 {
        self.rq
            .map_or(0, |r| (1u32 << r.log_cnt) - r.head.wrapping_sub(r.tail))
    }

    /// The RQ producer counter (wrapping).
    pub fn rq_head(&self) -> u32 {
        self.rq.map_or(0, |r| r.head)
    }

    /// Posts one receive WQE with the scatter list `sges`; a list shorter than the WQE
    /// stride is ended by a segment with [`INVALID_LKEY`]. Returns the WQE index. Publish
    /// with [`QpRings::ring_rq_doorbell`].
    ///
    /// # Errors
    ///
    /// [`WqError::NoRq`], [`WqError::RqFull`], [`WqError::TooManySges`],
    /// [`WqError::ByteCountTooLarge`].
    #[inline(always)]
    pub fn post_recv(&mut self, sges: &[Sge]) -> Result<u16, WqError> {
        post_recv(&mut self.mem, self.rq.as_mut(), sges)
    }

    /// [`post_recv`](Self::post_recv) of the one entry `sge`: the same WQE, the same checks
    /// and errors, in fewer instructions.
    ///
    /// # Errors
    ///
    /// [`WqError::NoRq`], [`WqError::RqFull`], [`WqError::ByteCountTooLarge`].
    #[inline(always)]
    pub fn post_recv_one(&mut self, sge: &Sge) -> Result<u16, WqError> {
        post_recv_one(&mut self.mem, self.rq.as_mut(), sge)
    }

    /// Publishes posted receive WQEs: store barrier, then the receive counter in the
    /// doorbell record (the RQ has no MMIO doorbell).
    #[inline(always)]
    pub fn ring_rq_doorbell(&mut self) {
        ring_rq_doorbell(&mut self.mem, self.rq.as_ref(), self.dbr)
    }

    /// Sets the RQ consumer counter (WQEs retired) to `tail`, as the poller published it
    /// ([`RqTable::consumer`](crate::wrid::RqTable::consumer)). Nothing changes if `tail`
    /// lies outside the window between the current consumer and the producer.
    #[inline(always)]
    pub fn rq_set_consumer(&mut self, tail: u32) {
        rq_set_consumer(self.rq.as_mut(), tail)
    }

    /// Starts both queues over at counter 0 (the QP went back to RESET, where the device
    /// starts its counters over too), with the doorbell record zeroed.
    pub fn reset(&mut self) {
        if let Some(sq) = self.sq.as_mut() {
            sq.pi = 0;
            sq.ci = 0;
            sq.batch = 0;
        }
        if let Some(rq) = self.rq.as_mut() {
            rq.head = 0;
            rq.tail = 0;
        }
        self.mem.write_be64(self.dbr, 0);
    }

    /// Retires `n` receive WQEs (responder completions consume the RQ in order).
    ///
    /// # Errors
    ///
    /// [`WqError::NotOutstanding`] if fewer than `n` are outstanding.
    pub fn rq_complete(&mut self, n: u32) -> Result<(), WqError> {
        let rq = self.rq.as_mut().ok_or(WqError::NoRq)?;
        if n > rq.head.wrapping_sub(rq.tail) {
            return Err(WqError::NotOutstanding);
        }
        rq.tail = rq.tail.wrapping_add(n);
        Ok(())
    }
}

// The posting code of both queues, shared by [`QpRings`] and the halves of a split
// ([`SqRing`], [`RqRing`]): each function touches only the memory it is given, its own
// queue's state and its own word of the doorbell record.

#[allow(clippy::too_many_arguments)]
/// Posts a send WQE of the most common shape in one step: a control segment, a
/// remote-address segment if `raddr` is given (RDMA WRITE), and one data segment — at
/// most three 16-byte units, so one WQEBB that never crosses the ring's end. The bytes
/// are exactly what [`QpRings::sq_wqe`], [`WqeBuilder::imm`],
/// [`WqeBuilder::raddr`], [`WqeBuilder::data`] and [`WqeBuilder::finish`] write, with
/// one bounds check instead of four.
///
/// # Errors
///
/// [`WqError::NoSq`], [`WqError::SqFull`], [`WqError::ByteCountTooLarge`].
#[inline(always)]
fn sq_post_one_sge<M: DmaMem>(
    mem: &mut M,
    sq: Option<&mut SqState>,
    qpn_bits: u32,
    opcode: WqeOpcode,
    flags: WqeCtrlFlags,
    imm: u32,
    raddr: Option<(u64, u32)>,
    sge: &Sge,
) -> Result<PostedWqe, WqError> {
    let sq = sq.ok_or(WqError::NoSq)?;
    if sq.free() == 0 {
        return Err(WqError::SqFull { needed: 1, free: 0 });
    }
    if sge.len & INLINE_SEG != 0 {
        return Err(WqError::ByteCountTooLarge(sge.len));
    }
    let start = sq.pi;
    // A WQEBB-aligned slot inside the ring: the whole WQE is contiguous.
    let off = sq.off + ((start as usize * SEND_WQE_BB) & sq.ring_mask());
    let ds = if raddr.is_some() { 3 } else { 2 };
    let w0 =
        ((ctrl_opmod_idx_opcode(0, start, opcode.raw()) as u64) << 32) | (qpn_bits | ds) as u64;
    let w1 = ((flags.bits() as u64) << 32) | imm as u64;
    let d0 = ((sge.len as u64) << 32) | sge.lkey as u64;
    match raddr {
        Some((addr, rkey)) => {
            let words = [w0, w1, addr, (rkey as u64) << 32, d0, sge.addr];
            mem.write_be64_run(off, 6, |i| words[i]);
        }
        None => {
            let words = [w0, w1, d0, sge.addr];
            mem.write_be64_run(off, 4, |i| words[i]);
        }
    }
    sq.pi = start.wrapping_add(1);
    sq.last_ctrl = w0;
    sq.last_start = start;
    sq.last_bbs = 1;
    sq.batch += 1;
    Ok(PostedWqe {
        wqe_index: start as u16,
        wqebbs: 1,
    })
}

#[allow(clippy::too_many_arguments)]
/// Posts a send WQE of control segment, optional remote-address segment (RDMA WRITE) and
/// one inline-data segment in one step, when it does not reach the ring's end; `None`
/// when it would (then build it with [`QpRings::sq_wqe`], which wraps). The bytes
/// are exactly what the builder writes ([`WqeBuilder::inline`]: the header with the
/// first data bytes as one word, the rest of the data, the padding left as it was).
///
/// # Errors
///
/// [`WqError::NoSq`], [`WqError::SqFull`], [`WqError::WqeTooLarge`],
/// [`WqError::InlineTooLong`].
#[inline(always)]
fn sq_post_inline<M: DmaMem>(
    mem: &mut M,
    sq: Option<&mut SqState>,
    qpn_bits: u32,
    opcode: WqeOpcode,
    flags: WqeCtrlFlags,
    imm: u32,
    raddr: Option<(u64, u32)>,
    data: &[u8],
) -> Option<Result<PostedWqe, WqError>> {
    let Some(sq) = sq else {
        return Some(Err(WqError::NoSq));
    };
    let len = data.len();
    if len > WQE_INLINE_SEG_BYTE_COUNT_MASK as usize {
        return Some(Err(WqError::InlineTooLong(len)));
    }
    let head_units = if raddr.is_some() { 2 } else { 1 };
    let ds = head_units + (4 + len).div_ceil(SEND_WQE_DS) as u32;
    if ds > sq.limit_ds {
        return Some(Err(WqError::WqeTooLarge { ds }));
    }
    let bbs = ds.div_ceil(4);
    let free = sq.free();
    if bbs > free {
        return Some(Err(WqError::SqFull { needed: bbs, free }));
    }
    let start = sq.pi;
    let slot = (start as usize * SEND_WQE_BB) & sq.ring_mask();
    if slot + bbs as usize * SEND_WQE_BB > sq.ring_mask() + 1 {
        return None;
    }
    let off = sq.off + slot;
    let w0 =
        ((ctrl_opmod_idx_opcode(0, start, opcode.raw()) as u64) << 32) | (qpn_bits | ds) as u64;
    let w1 = ((flags.bits() as u64) << 32) | imm as u64;
    let seg = off + head_units as usize * SEND_WQE_DS;
    match raddr {
        Some((addr, rkey)) => {
            let words = [w0, w1, addr, (rkey as u64) << 32];
            mem.write_be64_run(off, 4, |i| words[i]);
        }
        None => {
            let words = [w0, w1];
            mem.write_be64_run(off, 2, |i| words[i]);
        }
    }
    // The header with up to four data bytes (zero-padded) as one word, then the rest.
    mem.write_be64(seg, inline_head_word(len as u32, data));
    if len > 4 {
        mem.write_bytes(seg + 8, &data[4..]);
    }
    sq.pi = start.wrapping_add(bbs);
    sq.last_ctrl = w0;
    sq.last_start = start;
    sq.last_bbs = bbs;
    sq.batch += 1;
    Some(Ok(PostedWqe {
        wqe_index: start as u16,
        wqebbs: bbs as u8,
    }))
}

/// The first word of an inline-data segment: the byte count (with the inline bit) and up
/// to four data bytes, zero-padded, in the segment's big-endian order. Built in registers
/// (a copy of a run of bytes whose length is only known at run time would be a call to
/// `memcpy`).
#[inline(always)]
fn inline_head_word(len: u32, data: &[u8]) -> u64 {
    let bc = (WqeInlineSeg::byte_count_of(len) as u64) << 32;
    let bytes = match data {
        [a, b, c, d, ..] => u32::from_be_bytes([*a, *b, *c, *d]),
        short => short
            .iter()
            .enumerate()
            .fold(0, |w, (k, &b)| w | (b as u32) << (24 - 8 * k)),
    };
    bc | bytes as u64
}

/// Starts a send WQE on `sq` (see [`QpRings::sq_wqe`]).
#[inline(always)]
fn sq_wqe<'a, M: DmaMem>(
    mem: &'a mut M,
    sq: Option<&'a mut SqState>,
    qpn_bits: u32,
    opcode: WqeOpcode,
    flags: WqeCtrlFlags,
) -> Result<WqeBuilder<'a, M>, WqError> {
    let sq = sq.ok_or(WqError::NoSq)?;
    let free = sq.free();
    if free == 0 {
        return Err(WqError::SqFull { needed: 1, free: 0 });
    }
    let limit = sq.limit_ds;
    Ok(WqeBuilder {
        start: sq.pi,
        ds: 1,
        room: (free * 4).min(limit),
        limit,
        opmod: 0,
        opcode: opcode.raw(),
        flags: flags.bits(),
        imm: 0,
        qpn_bits,
        mem,
        sq,
    })
}

/// See [`QpRings::sq_set_consumer`].
#[inline(always)]
fn sq_set_consumer(sq: Option<&mut SqState>, ci: u32) {
    if let Some(sq) = sq
        && ci.wrapping_sub(sq.ci) <= sq.pi.wrapping_sub(sq.ci)
    {
        sq.ci = ci;
    }
}

/// See [`QpRings::post_recv`]: writes only the RQ.
#[inline(always)]
fn post_recv<M: DmaMem>(
    mem: &mut M,
    rq: Option<&mut RqState>,
    sges: &[Sge],
) -> Result<u16, WqError> {
    let rq = rq.ok_or(WqError::NoRq)?;
    let cnt = 1u32 << rq.log_cnt;
    if rq.head.wrapping_sub(rq.tail) >= cnt {
        return Err(WqError::RqFull);
    }
    let max = 1usize << (rq.log_stride - 4);
    if sges.len() > max {
        return Err(WqError::TooManySges {
            given: sges.len(),
            max,
        });
    }
    // One OR over the lengths finds an entry with the inline bit (the rare error path then
    // names the first such entry, as before).
    if sges.iter().fold(0, |a, s| a | s.len) & INLINE_SEG != 0 {
        let s = sges.iter().find(|s| s.len & INLINE_SEG != 0);
        return Err(WqError::ByteCountTooLarge(s.map_or(0, |s| s.len)));
    }
    let base = rq.off + (((rq.head & (cnt - 1)) as usize) << rq.log_stride);
    // The entries, then the terminating entry if the WQE has room. One entry (the common
    // shape) is one run of words: one bounds check for the WQE, the same words in the same
    // order as one write each.
    if let [s] = sges {
        let w = [
            ((s.len as u64) << 32) | s.lkey as u64,
            s.addr,
            INVALID_LKEY as u64,
            0,
        ];
        mem.write_be64_run(base, if max > 1 { 4 } else { 2 }, |i| w[i & 3]);
    } else {
        for (i, s) in sges.iter().enumerate() {
            let o = base + i * SEND_WQE_DS;
            mem.write_be64(o, ((s.len as u64) << 32) | s.lkey as u64);
            mem.write_be64(o + 8, s.addr);
        }
        if sges.len() < max {
            let o = base + sges.len() * SEND_WQE_DS;
            mem.write_be64(o, INVALID_LKEY as u64);
            mem.write_be64(o + 8, 0);
        }
    }
    let idx = rq.head as u16;
    rq.head = rq.head.wrapping_add(1);
    Ok(idx)
}

/// See [`QpRings::post_recv_one`]: [`post_recv`] for a list of one entry, the shape almost
/// every receive has, with the list's checks done on the one entry and the WQE's words
/// written with a constant count.
#[inline(always)]
fn post_recv_one<M: DmaMem>(
    mem: &mut M,
    rq: Option<&mut RqState>,
    s: &Sge,
) -> Result<u16, WqError> {
    let rq = rq.ok_or(WqError::NoRq)?;
    let mask = (1u32 << rq.log_cnt) - 1;
    if rq.head.wrapping_sub(rq.tail) > mask {
        return Err(WqError::RqFull);
    }
    if s.len & INLINE_SEG != 0 {
        return Err(WqError::ByteCountTooLarge(s.len));
    }
    let base = rq.off + (((rq.head & mask) as usize) << rq.log_stride);
    let w = [
        ((s.len as u64) << 32) | s.lkey as u64,
        s.addr,
        INVALID_LKEY as u64,
        0,
    ];
    // A stride of one entry (16 bytes) has no room for the terminating entry.
    if rq.log_stride > 4 {
        mem.write_be64_run(base, 4, |i| w[i]);
    } else {
        mem.write_be64_run(base, 2, |i| w[i]);
    }
    let idx = rq.head as u16;
    rq.head = rq.head.wrapping_add(1);
    Ok(idx)
}

/// See [`QpRings::ring_rq_doorbell`]: writes only the receive counter of the doorbell
/// record at `dbr`.
#[inline(always)]
fn ring_rq_doorbell<M: DmaMem>(mem: &mut M, rq: Option<&RqState>, dbr: usize) {
    let Some(rq) = rq else { return };
    // The receive WQEs must be visible before the device sees the new counter.
    barriers::wqe_before_doorbell_record();
    mem.write_be32(dbr + RCV_DBR_OFF, rq.head & 0xffff);
}

/// See [`QpRings::rq_set_consumer`].
#[inline(always)]
fn rq_set_consumer(rq: Option<&mut RqState>, tail: u32) {
    if let Some(rq) = rq
        && tail.wrapping_sub(rq.tail) <= rq.head.wrapping_sub(rq.tail)
    {
        rq.tail = tail;
    }
}

impl<M: DmaSplit> QpRings<M> {
    /// Splits the rings into their send half and their receive half, which can be used
    /// from two threads at once (like `TcpStream`'s halves, or rdma-core's separate SQ and
    /// RQ locks): the [`SqRing`] reads and writes only the SQ and the send counter of the
    /// doorbell record, the [`RqRing`] only the RQ and the receive counter. Each holds a
    /// view of the memory restricted to those bytes ([`DmaSplit`]); any other access
    /// panics. The rings are borrowed until both halves are gone, and their counters carry
    /// on where the halves left them.
    pub fn split(&mut self) -> (SqRing<'_, M::View<'_>>, RqRing<'_, M::View<'_>>) {
        let sq_win = self
            .sq
            .map_or(0..0, |s| s.off..s.off + (SEND_WQE_BB << s.log_cnt));
        let rq_win = self.rq.map_or(0..0, |r| {
            r.off..r.off + (1usize << (r.log_cnt + r.log_stride))
        });
        let snd = self.dbr + SND_DBR_OFF;
        let rcv = self.dbr + RCV_DBR_OFF;
        let (sq_mem, rq_mem) = self
            .mem
            .split_windows([sq_win, snd..snd + 4], [rq_win, rcv..rcv + 4]);
        (
            SqRing {
                mem: sq_mem,
                sq: self.sq.as_mut(),
                qpn_bits: self.qpn_bits,
                dbr: self.dbr,
            },
            RqRing {
                mem: rq_mem,
                rq: self.rq.as_mut(),
                dbr: self.dbr,
            },
        )
    }
}

/// The send half of split [`QpRings`] ([`QpRings::split`]): posts send WQEs and rings the
/// send doorbell, exactly as the whole rings do.
#[derive(Debug)]
pub struct SqRing<'a, V: DmaMem> {
    mem: V,
    sq: Option<&'a mut SqState>,
    qpn_bits: u32,
    dbr: usize,
}

/// The receive half of split [`QpRings`] ([`QpRings::split`]): posts receive WQEs and
/// publishes them, exactly as the whole rings do.
#[derive(Debug)]
pub struct RqRing<'a, V: DmaMem> {
    mem: V,
    rq: Option<&'a mut RqState>,
    dbr: usize,
}

/// What posting send WQEs needs: [`QpRings`] and its send half [`SqRing`], which run the
/// same code.
pub trait SendRing {
    /// The memory the WQEs are built in.
    type Mem: DmaMem;
    /// Starts a send WQE ([`QpRings::sq_wqe`]).
    ///
    /// # Errors
    ///
    /// As [`QpRings::sq_wqe`].
    fn sq_wqe(
        &mut self,
        opcode: WqeOpcode,
        flags: WqeCtrlFlags,
    ) -> Result<WqeBuilder<'_, Self::Mem>, WqError>;
    /// The SQ producer counter ([`QpRings::sq_producer`]).
    fn sq_producer(&self) -> u32;
    /// Sets the SQ consumer counter ([`QpRings::sq_set_consumer`]).
    fn sq_set_consumer(&mut self, ci: u32);
    /// Publishes the pending WQEs ([`QpRings::ring_sq_doorbell`]).
    fn ring_sq_doorbell<B: Bar + ?Sized>(&mut self, bar: &B);
    /// Posts a one-gather-entry WQE in one step ([`QpRings::sq_post_one_sge`]).
    ///
    /// # Errors
    ///
    /// As [`QpRings::sq_post_one_sge`].
    fn sq_post_one_sge(
        &mut self,
        opcode: WqeOpcode,
        flags: WqeCtrlFlags,
        imm: u32,
        raddr: Option<(u64, u32)>,
        sge: &Sge,
    ) -> Result<PostedWqe, WqError>;
    /// Posts an inline WQE in one step if it does not wrap ([`QpRings::sq_post_inline`]).
    fn sq_post_inline(
        &mut self,
        opcode: WqeOpcode,
        flags: WqeCtrlFlags,
        imm: u32,
        raddr: Option<(u64, u32)>,
        data: &[u8],
    ) -> Option<Result<PostedWqe, WqError>>;
}

/// What posting receive WQEs needs: [`QpRings`] and its receive half [`RqRing`], which run
/// the same code.
pub trait RecvRing {
    /// Posts one receive WQE ([`QpRings::post_recv`]).
    ///
    /// # Errors
    ///
    /// As [`QpRings::post_recv`].
    fn post_recv(&mut self, sges: &[Sge]) -> Result<u16, WqError>;
    /// Posts one receive WQE of one entry ([`QpRings::post_recv_one`]).
    ///
    /// # Errors
    ///
    /// As [`QpRings::post_recv_one`].
    fn post_recv_one(&mut self, sge: &Sge) -> Result<u16, WqError>;
    /// The RQ producer counter ([`QpRings::rq_head`]).
    fn rq_head(&self) -> u32;
    /// Sets the RQ consumer counter ([`QpRings::rq_set_consumer`]).
    fn rq_set_consumer(&mut self, tail: u32);
    /// Publishes the posted receive WQEs ([`QpRings::ring_rq_doorbell`]).
    fn ring_rq_doorbell(&mut self);
}

impl<M: DmaMem> SendRing for QpRings<M> {
    type Mem = M;
    #[inline(always)]
    fn sq_wqe(
        &mut self,
        opcode: WqeOpcode,
        flags: WqeCtrlFlags,
    ) -> Result<WqeBuilder<'_, M>, WqError> {
        QpRings::sq_wqe(self, opcode, flags)
    }
    #[inline(always)]
    fn sq_producer(&self) -> u32 {
        QpRings::sq_producer(self)
    }
    #[inline(always)]
    fn sq_set_consumer(&mut self, ci: u32) {
        QpRings::sq_set_consumer(self, ci)
    }
    #[inline(always)]
    fn ring_sq_doorbell<B: Bar + ?Sized>(&mut self, bar: &B) {
        QpRings::ring_sq_doorbell(self, bar)
    }
    #[inline(always)]
    fn sq_post_one_sge(
        &mut self,
        opcode: WqeOpcode,
        flags: WqeCtrlFlags,
        imm: u32,
        raddr: Option<(u64, u32)>,
        sge: &Sge,
    ) -> Result<PostedWqe, WqError> {
        QpRings::sq_post_one_sge(self, opcode, flags, imm, raddr, sge)
    }
    #[inline(always)]
    fn sq_post_inline(
        &mut self,
        opcode: WqeOpcode,
        flags: WqeCtrlFlags,
        imm: u32,
        raddr: Option<(u64, u32)>,
        data: &[u8],
    ) -> Option<Result<PostedWqe, WqError>> {
        QpRings::sq_post_inline(self, opcode, flags, imm, raddr, data)
    }
}

impl<M: DmaMem> RecvRing for QpRings<M> {
    #[inline(always)]
    fn post_recv(&mut self, sges: &[Sge]) -> Result<u16, WqError> {
        QpRings::post_recv(self, sges)
    }
    #[inline(always)]
    fn post_recv_one(&mut self, sge: &Sge) -> Result<u16, WqError> {
        QpRings::post_recv_one(self, sge)
    }
    #[inline(always)]
    fn rq_head(&self) -> u32 {
        QpRings::rq_head(self)
    }
    #[inline(always)]
    fn rq_set_consumer(&mut self, tail: u32) {
        QpRings::rq_set_consumer(self, tail)
    }
    #[inline(always)]
    fn ring_rq_doorbell(&mut self) {
        QpRings::ring_rq_doorbell(self)
    }
}

impl<V: DmaMem> SendRing for SqRing<'_, V> {
    type Mem = V;
    #[inline(always)]
    fn sq_wqe(
        &mut self,
        opcode: WqeOpcode,
        flags: WqeCtrlFlags,
    ) -> Result<WqeBuilder<'_, V>, WqError> {
        sq_wqe(
            &mut self.mem,
            self.sq.as_deref_mut(),
            self.qpn_bits,
            opcode,
            flags,
        )
    }
    #[inline(always)]
    fn sq_producer(&self) -> u32 {
        self.sq.as_ref().map_or(0, |s| s.pi)
    }
    #[inline(always)]
    fn sq_set_consumer(&mut self, ci: u32) {
        sq_set_consumer(self.sq.as_deref_mut(), ci)
    }
    #[inline(always)]
    fn ring_sq_doorbell<B: Bar + ?Sized>(&mut self, bar: &B) {
        ring_sq_doorbell!(self.mem, self.sq.as_deref_mut(), self.dbr, bar)
    }
    #[inline(always)]
    fn sq_post_one_sge(
        &mut self,
        opcode: WqeOpcode,
        flags: WqeCtrlFlags,
        imm: u32,
        raddr: Option<(u64, u32)>,
        sge: &Sge,
    ) -> Result<PostedWqe, WqError> {
        sq_post_one_sge(
            &mut self.mem,
            self.sq.as_deref_mut(),
            self.qpn_bits,
            opcode,
            flags,
            imm,
            raddr,
            sge,
        )
    }
    #[inline(always)]
    fn sq_post_inline(
        &mut self,
        opcode: WqeOpcode,
        flags: WqeCtrlFlags,
        imm: u32,
        raddr: Option<(u64, u32)>,
        data: &[u8],
    ) -> Option<Result<PostedWqe, WqError>> {
        sq_post_inline(
            &mut self.mem,
            self.sq.as_deref_mut(),
            self.qpn_bits,
            opcode,
            flags,
            imm,
            raddr,
            data,
        )
    }
}

impl<V: DmaMem> RecvRing for RqRing<'_, V> {
    #[inline(always)]
    fn post_recv(&mut self, sges: &[Sge]) -> Result<u16, WqError> {
        post_recv(&mut self.mem, self.rq.as_deref_mut(), sges)
    }
    #[inline(always)]
    fn post_recv_one(&mut self, sge: &Sge) -> Result<u16, WqError> {
        post_recv_one(&mut self.mem, self.rq.as_deref_mut(), sge)
    }
    #[inline(always)]
    fn rq_head(&self) -> u32 {
        self.rq.as_ref().map_or(0, |r| r.head)
    }
    #[inline(always)]
    fn rq_set_consumer(&mut self, tail: u32) {
        rq_set_consumer(self.rq.as_deref_mut(), tail)
    }
    #[inline(always)]
    fn ring_rq_doorbell(&mut self) {
        ring_rq_doorbell(&mut self.mem, self.rq.as_deref(), self.dbr)
    }
}

/// Builds one send WQE in place, segment by segment (see [`QpRings::sq_wqe`]).
///
/// Segments go in the order the PRM requires for the opcode: for UD a datagram segment
/// first; for RDMA a remote-address segment; for atomics a remote-address then an atomic
/// segment; then data or inline segments.
pub struct WqeBuilder<'a, M: DmaMem> {
    mem: &'a mut M,
    sq: &'a mut SqState,
    qpn_bits: u32,
    start: u32,
    ds: u32,
    room: u32,
    limit: u32,
    opmod: u8,
    opcode: u8,
    flags: u8,
    imm: u32,
}

/// `opmod_idx_opcode` of a control segment; the same as
/// [`WqeCtrlSeg::opmod_idx_opcode_of`], composed here from the fwif masks so the hot path
/// makes no cross-crate call (a test checks they agree).
#[inline(always)]
fn ctrl_opmod_idx_opcode(opmod: u8, wqe_index: u32, opcode: u8) -> u32 {
    ((opmod as u32) << 24)
        | ((wqe_index << WQE_CTRL_WQE_INDEX_SHIFT) & WQE_CTRL_WQE_INDEX_MASK)
        | (opcode as u32 & WQE_CTRL_OPCODE_MASK)
}

impl<M: DmaMem> WqeBuilder<'_, M> {
    #[inline(always)]
    fn reserve(&mut self, n: u32) -> Result<u32, WqError> {
        let ds = self.ds + n;
        if ds > self.room {
            return Err(if ds > self.limit {
                WqError::WqeTooLarge { ds }
            } else {
                WqError::SqFull {
                    needed: ds.div_ceil(4),
                    free: self.room / 4,
                }
            });
        }
        let at = self.ds;
        self.ds = ds;
        Ok(at)
    }

    /// Byte offset in the buffer of the 16-byte unit `ds` of this WQE (wrapping).
    #[inline(always)]
    fn unit(&self, ds: u32) -> usize {
        self.sq.off
            + ((((self.start as usize) * SEND_WQE_BB) + (ds as usize) * SEND_WQE_DS)
                & self.sq.ring_mask())
    }

    /// Sets the opcode modifier (`opmod`).
    #[inline(always)]
    pub fn opmod(&mut self, opmod: u8) -> &mut Self {
        self.opmod = opmod;
        self
    }

    /// Sets the immediate (`imm`): immediate data for the `*_IMM` opcodes, the rkey to
    /// invalidate for SEND_INVAL. Written big-endian, so `imm` is the value a receiver
    /// reads back from its CQE's `immediate`.
    #[inline(always)]
    pub fn imm(&mut self, imm: u32) -> &mut Self {
        self.imm = imm;
        self
    }

    /// Appends a remote-address segment (RDMA READ, WRITE, atomics).
    #[inline(always)]
    pub fn raddr(&mut self, raddr: u64, rkey: u32) -> Result<&mut Self, WqError> {
        let at = self.reserve(1)?;
        let o = self.unit(at);
        let unit = [raddr, (rkey as u64) << 32];
        self.mem.write_be64_run(o, 2, |i| unit[i]);
        Ok(self)
    }

    /// Appends an atomic segment (swap or add, compare).
    #[inline(always)]
    pub fn atomic(&mut self, swap_add: u64, compare: u64) -> Result<&mut Self, WqError> {
        let at = self.reserve(1)?;
        let o = self.unit(at);
        let unit = [swap_add, compare];
        self.mem.write_be64_run(o, 2, |i| unit[i]);
        Ok(self)
    }

    /// Appends a data (gather) segment. A length of 0 means 2 GiB to the device.
    #[inline(always)]
    pub fn data(&mut self, addr: u64, len: u32, lkey: u32) -> Result<&mut Self, WqError> {
        if len & INLINE_SEG != 0 {
            return Err(WqError::ByteCountTooLarge(len));
        }
        let at = self.reserve(1)?;
        let o = self.unit(at);
        let unit = [((len as u64) << 32) | lkey as u64, addr];
        self.mem.write_be64_run(o, 2, |i| unit[i]);
        Ok(self)
    }

    /// Appends a data segment for each entry of `sges`.
    #[inline(always)]
    pub fn sges(&mut self, sges: &[Sge]) -> Result<&mut Self, WqError> {
        for s in sges {
            self.data(s.addr, s.len, s.lkey)?;
        }
        Ok(self)
    }

    /// Appends an inline-data segment: a 4-byte byte count with [`INLINE_SEG`] set, the
    /// bytes, padding to 16 bytes. Data reaching the end of the ring continues at its start.
    #[inline(always)]
    pub fn inline(&mut self, data: &[u8]) -> Result<&mut Self, WqError> {
        let len = data.len();
        if len > WQE_INLINE_SEG_BYTE_COUNT_MASK as usize {
            return Err(WqError::InlineTooLong(len));
        }
        let n = (4 + len).div_ceil(SEND_WQE_DS);
        let at = self.reserve(n as u32)?;
        // The segment is the 4-byte header, the data and padding to 16 bytes. `word(w)` is
        // its 8-byte word `w` (padding zeroed); a 16-byte unit is never split by the ring's
        // end, so a segment that wraps is written unit by unit.
        let word = |w: usize| {
            let k = w * 8; // byte offset in the segment
            if k == 0 {
                return inline_head_word(len as u32, data);
            }
            let mut b = [0u8; 8];
            if k + 4 <= len {
                // Eight data bytes: data[k - 4..k + 4].
                b.copy_from_slice(&data[k - 4..k + 4]);
            } else if k - 4 < len {
                // The last data bytes, then zero padding.
                let m = len - (k - 4);
                b[..m].copy_from_slice(&data[k - 4..]);
            }
            u64::from_be_bytes(b)
        };
        let first = self.unit(at);
        if first - self.sq.off + n * SEND_WQE_DS <= self.sq.ring_mask() + 1 {
            // Contiguous: the header with the first four data bytes as one word, then the
            // rest of the data (the padding is left as it was; the device reads
            // `byte_count` bytes).
            self.mem.write_be64(first, word(0));
            if len > 4 {
                self.mem.write_bytes(first + 8, &data[4..]);
            }
        } else {
            for u in 0..n {
                let o = self.unit(at + u as u32);
                self.mem.write_be64_run(o, 2, |i| word(u * 2 + i));
            }
        }
        Ok(self)
    }

    /// Appends a datagram segment (the address vector of a UD send).
    #[inline(always)]
    pub fn datagram(&mut self, av: &Av) -> Result<&mut Self, WqError> {
        self.segment(zerocopy::IntoBytes::as_bytes(av))
    }

    /// Appends a segment given as bytes (a multiple of 16 bytes, already in the device's
    /// byte order), for segment types this builder has no method for.
    ///
    /// # Panics
    ///
    /// If `bytes.len()` is not a multiple of 16.
    #[inline(always)]
    pub fn segment(&mut self, bytes: &[u8]) -> Result<&mut Self, WqError> {
        assert!(
            bytes.len().is_multiple_of(SEND_WQE_DS),
            "segment length must be a multiple of 16"
        );
        let n = (bytes.len() / SEND_WQE_DS) as u32;
        let at = self.reserve(n)?;
        for (i, chunk) in bytes.chunks_exact(SEND_WQE_DS).enumerate() {
            let o = self.unit(at + i as u32);
            self.mem.write_bytes(o, chunk);
        }
        Ok(self)
    }

    /// 16-byte units used so far (the control segment included).
    pub fn ds(&self) -> u32 {
        self.ds
    }

    /// Writes the control segment and takes the WQE's WQEBBs. The WQE is visible to the
    /// device only after the next doorbell.
    #[inline(always)]
    pub fn finish(self) -> PostedWqe {
        let bbs = self.ds.div_ceil(4);
        let w0 = ((ctrl_opmod_idx_opcode(self.opmod, self.start, self.opcode) as u64) << 32)
            | (self.qpn_bits | (self.ds & WQE_CTRL_DS_MASK)) as u64;
        // signature 0, reserved 0, fm_ce_se, imm.
        let w1 = ((self.flags as u64) << 32) | self.imm as u64;
        let o = self.unit(0);
        let unit = [w0, w1];
        self.mem.write_be64_run(o, 2, |i| unit[i]);
        let sq = self.sq;
        sq.pi = sq.pi.wrapping_add(bbs);
        sq.last_ctrl = w0;
        sq.last_start = self.start;
        sq.last_bbs = bbs;
        sq.batch += 1;
        PostedWqe {
            wqe_index: self.start as u16,
            wqebbs: bbs as u8,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::dma::DmaBuf;
    use crate::testing::{FAKE_UAR, FakePlatform};
    use uhca_fwif::wqe::{WqeAtomicSeg, WqeDataSeg, WqeRaddrSeg};
    use zerocopy::FromBytes;

    fn qp(p: &FakePlatform, log_sq: u8, db: SqDoorbell) -> QpRings<DmaBuf<&FakePlatform>> {
        let layout = QpLayout::new(0xabc, Some((3, 5)), Some(log_sq));
        let buf = DmaBuf::alloc(p, layout.buffer_len(), 4096).unwrap();
        QpRings::new(buf, layout, db).unwrap()
    }

    fn bytes<M: DmaMem>(m: &M, off: usize, n: usize) -> std::vec::Vec<u8> {
        let mut v = std::vec![0; n];
        m.read_bytes(off, &mut v);
        v
    }

    #[test]
    fn rdma_write_wqe_has_the_prm_layout() {
        let p = FakePlatform::new();
        let mut q = qp(&p, 4, SqDoorbell::new(FAKE_UAR));
        let sq_off = QpLayout::new(0xabc, Some((3, 5)), Some(4)).sq.unwrap().0;
        let mut w = q
            .sq_wqe(
                WqeOpcode::RdmaWriteImm,
                WqeCtrlFlags::CQ_UPDATE | WqeCtrlFlags::FENCE,
            )
            .unwrap();
        w.imm(0x1234_5678).opmod(0);
        w.raddr(0xdead_beef_0000, 0x77)
            .unwrap()
            .data(0x5000, 300, 0x99)
            .unwrap();
        let posted = w.finish();
        assert_eq!(
            posted,
            PostedWqe {
                wqe_index: 0,
                wqebbs: 1
            }
        );
        let b = bytes(q.mem(), sq_off, 64);
        let (ctrl, rest) = WqeCtrlSeg::read_from_prefix(&b).unwrap();
        assert_eq!(ctrl.opcode(), WqeOpcode::RdmaWriteImm);
        assert_eq!(ctrl.wqe_index(), 0);
        assert_eq!(ctrl.qpn(), 0xabc);
        assert_eq!(ctrl.ds(), 3);
        assert_eq!(ctrl.flags(), WqeCtrlFlags::CQ_UPDATE | WqeCtrlFlags::FENCE);
        assert_eq!(ctrl.imm.get(), 0x1234_5678);
        assert_eq!(ctrl.signature, 0);
        let (raddr, rest) = WqeRaddrSeg::read_from_prefix(rest).unwrap();
        assert_eq!(
            (raddr.raddr.get(), raddr.rkey.get(), raddr.reserved.get()),
            (0xdead_beef_0000, 0x77, 0)
        );
        let (data, _) = WqeDataSeg::read_from_prefix(rest).unwrap();
        assert_eq!(
            (data.byte_count.get(), data.lkey.get(), data.addr.get()),
            (300, 0x99, 0x5000)
        );
        // The second WQE gets index 1.
        let mut w = q
            .sq_wqe(WqeOpcode::AtomicCs, WqeCtrlFlags::empty())
            .unwrap();
        w.raddr(0x10, 1)
            .unwrap()
            .atomic(5, 6)
            .unwrap()
            .data(0x20, 8, 2)
            .unwrap();
        assert_eq!(
            w.finish(),
            PostedWqe {
                wqe_index: 1,
                wqebbs: 1
            }
        );
        let b = bytes(q.mem(), sq_off + 64, 64);
        let at = WqeAtomicSeg::read_from_bytes(&b[32..48]).unwrap();
        assert_eq!((at.swap_add.get(), at.compare.get()), (5, 6));
        assert_eq!(WqeCtrlSeg::read_from_bytes(&b[..16]).unwrap().ds(), 4);
    }

    #[test]
    fn doorbell_record_then_uar_doorbell_alternating_buffers() {
        let p = FakePlatform::new();
        let mut q = qp(&p, 4, SqDoorbell::new(FAKE_UAR));
        let dbr = QpLayout::new(0xabc, Some((3, 5)), Some(4)).dbr_offset;
        for i in 0..3u32 {
            for _ in 0..=i {
                let mut w = q.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::CQ_UPDATE).unwrap();
                w.data(0, 4, 0).unwrap();
                w.finish();
            }
            assert_eq!(
                q.mem().read_be32(dbr + 4),
                [0, 1, 3][i as usize],
                "record not written before the doorbell"
            );
            q.ring_sq_doorbell(&p);
        }
        // No WQE pending: no doorbell.
        q.ring_sq_doorbell(&p);
        assert_eq!(q.mem().read_be32(dbr + 4), 6, "send counter");
        assert_eq!(q.mem().read_be32(dbr), 0, "receive counter untouched");
        let log = p.bar.write_log();
        // Each doorbell carries the first 8 bytes of the last control segment of its batch.
        let ctrl = |idx: u16, ds: u8| {
            ((WqeCtrlSeg::opmod_idx_opcode_of(0, idx, WqeOpcode::Send) as u64) << 32)
                | WqeCtrlSeg::qpn_ds_of(0xabc, ds) as u64
        };
        assert_eq!(
            log,
            [
                (FAKE_UAR + 0x800, ctrl(0, 2)),
                (FAKE_UAR + 0x900, ctrl(2, 2)),
                (FAKE_UAR + 0x800, ctrl(5, 2)),
            ]
        );
    }

    #[test]
    fn inline_data_is_padded_and_wraps_at_the_ring_end() {
        let p = FakePlatform::new();
        // 4 WQEBBs: a 2-WQEBB inline WQE started in the last WQEBB wraps to the first.
        let mut q = qp(&p, 2, SqDoorbell::new(FAKE_UAR));
        let sq_off = QpLayout::new(0xabc, Some((3, 5)), Some(2)).sq.unwrap().0;
        for _ in 0..3 {
            let w = q.sq_wqe(WqeOpcode::Nop, WqeCtrlFlags::empty()).unwrap();
            w.finish();
        }
        q.sq_complete(2, 1).unwrap();
        let data: std::vec::Vec<u8> = (0..100u8).collect();
        let mut w = q.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::CQ_UPDATE).unwrap();
        w.inline(&data).unwrap();
        // ctrl 1 DS + (4 + 100 → 112 bytes) 7 DS = 8 DS = 2 WQEBBs.
        assert_eq!(w.ds(), 8);
        assert_eq!(
            w.finish(),
            PostedWqe {
                wqe_index: 3,
                wqebbs: 2
            }
        );
        // WQE at WQEBB 3 (ring position 192 of 256): ctrl at 192, inline header at 208,
        // data at 212..256 (44 bytes) then 0..56.
        let ring = bytes(q.mem(), sq_off, 256);
        assert_eq!(
            u32::from_be_bytes(ring[208..212].try_into().unwrap()),
            0x8000_0000 | 100
        );
        assert_eq!(&ring[212..256], &data[..44]);
        assert_eq!(&ring[..56], &data[44..]);
        assert_eq!(
            WqeCtrlSeg::read_from_bytes(&ring[192..208])
                .unwrap()
                .wqe_index(),
            3
        );
        // Too long for any inline segment.
        let big = [0u8; 1024];
        let mut w = q.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::empty()).unwrap();
        assert_eq!(w.inline(&big).err(), Some(WqError::InlineTooLong(1024)));
    }

    #[test]
    fn full_ring_and_oversized_wqes_are_refused_without_side_effects() {
        let p = FakePlatform::new();
        let mut q = qp(&p, 2, SqDoorbell::new(FAKE_UAR)); // 4 WQEBBs
        for _ in 0..4 {
            let mut w = q.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::empty()).unwrap();
            w.data(0, 1, 0).unwrap();
            w.finish();
        }
        assert_eq!(q.sq_free(), 0);
        assert!(matches!(
            q.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::empty()),
            Err(WqError::SqFull { .. })
        ));
        q.sq_complete(1, 1).unwrap(); // the first two WQEs are done
        assert_eq!(q.sq_free(), 2);
        let mut w = q.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::empty()).unwrap();
        // 2 free WQEBBs = 8 DS: ctrl + 7 data fit, the 8th does not.
        for _ in 0..7 {
            w.data(0, 1, 0).unwrap();
        }
        assert_eq!(
            w.data(0, 1, 0).err(),
            Some(WqError::SqFull { needed: 3, free: 2 })
        );
        let _ = w; // abandoned
        assert_eq!(q.sq_producer(), 4, "an abandoned WQE takes nothing");
        // More than 63 DS is too large whatever the free space.
        let p2 = FakePlatform::new();
        let mut q2 = qp(&p2, 6, SqDoorbell::new(FAKE_UAR));
        let mut w = q2.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::empty()).unwrap();
        for _ in 0..62 {
            w.data(0, 1, 0).unwrap();
        }
        assert_eq!(w.data(0, 1, 0).err(), Some(WqError::WqeTooLarge { ds: 64 }));
        assert_eq!(
            w.data(0, 0x8000_0000, 0).err(),
            Some(WqError::ByteCountTooLarge(0x8000_0000))
        );
        // Retiring what is not outstanding is refused.
        assert_eq!(q.sq_complete(9, 1), Err(WqError::NotOutstanding));
    }

    #[test]
    fn blueflame_copies_a_single_wqe_and_falls_back_for_batches() {
        let p = FakePlatform::new();
        let mut q = qp(&p, 4, SqDoorbell::new(FAKE_UAR).with_blueflame());
        let sq_off = QpLayout::new(0xabc, Some((3, 5)), Some(4)).sq.unwrap().0;
        let mut w = q.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::CQ_UPDATE).unwrap();
        w.inline(&[7u8; 64]).unwrap();
        w.finish(); // 1 + 5 DS = 2 WQEBBs
        q.ring_sq_doorbell(&p);
        let log = p.bar.write_log();
        assert_eq!(log.len(), 16, "two WQEBBs in 8-byte words");
        for (i, (off, v)) in log.iter().enumerate() {
            assert_eq!(*off, FAKE_UAR + 0x800 + i * 8);
            assert_eq!(*v, q.mem().read_be64(sq_off + i * 8));
        }
        p.bar.clear_log();
        for _ in 0..2 {
            let mut w = q.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::empty()).unwrap();
            w.data(0, 1, 0).unwrap();
            w.finish();
        }
        q.ring_sq_doorbell(&p);
        let log = p.bar.write_log();
        assert_eq!(log.len(), 1, "a batch rings the 8-byte doorbell");
        assert_eq!(log[0].0, FAKE_UAR + 0x900, "alternate buffer");
    }

    /// Posts `n` SENDs (1 or 2 WQEBBs, inline data of varying length), retiring what was
    /// published at each doorbell so the ring wraps many times.
    fn post_sends<R: SendRing>(r: &mut R, bar: &FakePlatform, n: u32) {
        for i in 0..n {
            let mut w = r.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::CQ_UPDATE).unwrap();
            let data = [i as u8; 40];
            w.inline(&data[..(i % 41) as usize]).unwrap();
            w.finish();
            if i % 3 == 2 {
                r.ring_sq_doorbell(bar);
                let pi = r.sq_producer();
                r.sq_set_consumer(pi);
            }
        }
        r.ring_sq_doorbell(bar);
    }

    /// Posts `n` receive WQEs of 1 or 2 entries, retiring them in batches.
    fn post_recvs<R: RecvRing>(r: &mut R, n: u32) {
        for i in 0..n {
            let s = Sge {
                addr: 0x1000 * i as u64,
                len: 64 + i,
                lkey: i,
            };
            r.post_recv(&[s, s][..1 + (i % 2) as usize]).unwrap();
            if i % 5 == 4 {
                r.ring_rq_doorbell();
                let head = r.rq_head();
                r.rq_set_consumer(head);
            }
        }
        r.ring_rq_doorbell();
    }

    #[test]
    fn split_halves_post_from_two_threads_what_the_whole_rings_post() {
        let p = FakePlatform::new();
        let mut whole = qp(&p, 3, SqDoorbell::new(FAKE_UAR));
        let mut split = qp(&p, 3, SqDoorbell::new(FAKE_UAR));
        post_sends(&mut whole, &p, 1000);
        post_recvs(&mut whole, 1000);
        {
            let (mut sq, mut rq) = split.split();
            std::thread::scope(|s| {
                s.spawn(|| post_sends(&mut sq, &p, 1000));
                s.spawn(|| post_recvs(&mut rq, 1000));
            });
        }
        let len = whole.mem().len();
        assert_eq!(
            bytes(split.mem(), 0, len),
            bytes(whole.mem(), 0, len),
            "the halves built other WQEs or doorbell record than the whole rings"
        );
        assert_eq!(split.sq_producer(), whole.sq_producer());
        assert_eq!(split.rq_head(), whole.rq_head());
        assert_eq!(
            (split.sq_free(), split.rq_free()),
            (whole.sq_free(), whole.rq_free()),
            "consumer counters carried over"
        );
    }

    #[test]
    #[should_panic(expected = "outside the view's windows")]
    fn a_view_cannot_reach_the_other_views_bytes() {
        use crate::dma::DmaSplit;
        let p = FakePlatform::new();
        let mut buf = DmaBuf::alloc(&p, 256, 64).unwrap();
        let (mut a, b) = buf.split_windows([0..64, 128..132], [64..128, 132..136]);
        a.write_be32(128, 1);
        assert_eq!(b.read_be32(132), 0);
        a.write_be32(132, 1);
    }

    #[test]
    #[should_panic(expected = "overlap")]
    fn overlapping_views_are_refused() {
        use crate::dma::DmaSplit;
        let p = FakePlatform::new();
        let mut buf = DmaBuf::alloc(&p, 256, 64).unwrap();
        let _ = buf.split_windows([0..64, 0..0], [60..128, 0..0]);
    }

    #[test]
    fn receive_wqes_end_with_the_invalid_lkey_segment() {
        let p = FakePlatform::new();
        let mut q = qp(&p, 4, SqDoorbell::new(FAKE_UAR)); // RQ: 8 WQEs of 32 bytes
        let dbr = QpLayout::new(0xabc, Some((3, 5)), Some(4)).dbr_offset;
        assert_eq!(
            q.post_recv(&[Sge {
                addr: 0x1000,
                len: 256,
                lkey: 5
            }])
            .unwrap(),
            0
        );
        assert_eq!(
            q.post_recv(&[
                Sge {
                    addr: 1,
                    len: 2,
                    lkey: 3
                },
                Sge {
                    addr: 4,
                    len: 5,
                    lkey: 6
                }
            ])
            .unwrap(),
            1
        );
        assert_eq!(
            q.post_recv(&[Sge::default(); 3]).err(),
            Some(WqError::TooManySges { given: 3, max: 2 })
        );
        let b = bytes(q.mem(), 0, 64);
        let s0 = WqeDataSeg::read_from_bytes(&b[0..16]).unwrap();
        let t0 = WqeDataSeg::read_from_bytes(&b[16..32]).unwrap();
        assert_eq!(
            (s0.byte_count.get(), s0.lkey.get(), s0.addr.get()),
            (256, 5, 0x1000)
        );
        assert_eq!(
            (t0.byte_count.get(), t0.lkey.get(), t0.addr.get()),
            (0, INVALID_LKEY, 0)
        );
        let s1 = WqeDataSeg::read_from_bytes(&b[48..64]).unwrap();
        assert_eq!((s1.byte_count.get(), s1.lkey.get()), (5, 6));
        assert_eq!(
            q.mem().read_be32(dbr),
            0,
            "not published before the doorbell"
        );
        q.ring_rq_doorbell();
        assert_eq!(q.mem().read_be32(dbr), 2);
        assert!(p.bar.write_log().is_empty(), "the RQ has no MMIO doorbell");
        for _ in 0..6 {
            q.post_recv(&[]).unwrap();
        }
        assert_eq!(q.post_recv(&[]).err(), Some(WqError::RqFull));
        q.rq_complete(3).unwrap();
        assert_eq!(q.rq_free(), 3);
        assert_eq!(q.rq_complete(6), Err(WqError::NotOutstanding));
    }

    #[test]
    fn control_word_matches_fwif() {
        for (opmod, idx, op) in [
            (0u8, 0u32, WqeOpcode::Send),
            (0xff, 0xffff, WqeOpcode::Umr),
            (3, 0x1_2345, WqeOpcode::RdmaRead),
        ] {
            assert_eq!(
                ctrl_opmod_idx_opcode(opmod, idx, op.raw()),
                WqeCtrlSeg::opmod_idx_opcode_of(opmod, idx as u16, op)
            );
        }
    }

    #[test]
    fn layouts_are_validated() {
        let p = FakePlatform::new();
        let l = QpLayout::new(1, Some((3, 5)), Some(4));
        let small = DmaBuf::alloc(&p, l.buffer_len() - 8, 4096).unwrap();
        assert!(matches!(
            QpRings::new(small, l, SqDoorbell::new(0)),
            Err(WqError::BadLayout(_))
        ));
        let mut overlap = l;
        overlap.dbr_offset = 64;
        let buf = DmaBuf::alloc(&p, l.buffer_len(), 4096).unwrap();
        assert!(matches!(
            QpRings::new(buf, overlap, SqDoorbell::new(0)),
            Err(WqError::BadLayout(_))
        ));
    }
}
