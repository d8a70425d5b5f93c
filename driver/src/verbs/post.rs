//! Posting work requests: `post_send` on QPs in RTS, `post_recv` on QPs in INIT, RTR,
//! RTS or SQER and on SRQs. Each post reads the QP's state once ([`WrError::QpState`],
//! [`WrError::QpInError`] otherwise).
//!
//! A post builds one WQE per work request in the queue's DMA memory, records the
//! request's `wr_id` in the QP's work-request table, and publishes the whole batch with one
//! doorbell: for the SQ a store barrier, the send counter in the doorbell record and one
//! 8-byte doorbell in the UAR (BlueFlame stays off); for the RQ and SRQ a store barrier
//! and the counter in the doorbell record. A bad request stops the batch: the requests
//! before it are posted and published, and its index and reason come back in [`BadWr`]
//! (nothing is lost, as with `ibv_post_send`'s `bad_wr`).
//!
//! Posting needs only the queue: a QP holds its rings, its UAR page and its work-request
//! tables (which the CQ's poller reads, through the protocol of
//! [`uhca_hal::wrid`]). It allocates nothing and takes no lock (an SRQ takes its own spin
//! lock, which its pollers share). [`Qp::split`] lends the send side and the receive side of
//! a QP to two threads ([`SendQueue`], [`RecvQueue`]); they post through the same
//! code as the QP itself.

use uhca_fwif::consts::{INLINE_SEG, QpServiceType, SEND_WQE_DS, WqeCtrlFlags};
use uhca_fwif::wqe::INVALID_LKEY;
use uhca_hal::Platform;
use uhca_hal::barriers;
use uhca_hal::dma::DmaView;
use uhca_hal::dma::{DmaBuf, DmaMem};
use uhca_hal::platform::Bar;
use uhca_hal::wq::{RecvRing, RqRing, SendRing, SqRing, WqError};

use super::dp::QpShared;
use super::qp::QpTransport;
use super::wr::{
    BadWr, LoweredOp, OpClass, RecvWr, SendData, SendFlags, SendOp, SendWr, Sge, WrError,
};
use super::{Qp, Srq};
use core::marker::PhantomData;
use core::sync::atomic::Ordering;
use uhca_hal::wrid::{SendEntry, SqTable};

/// Most scatter entries of a receive WQE: a 1 KiB stride of 16-byte entries, more than any
/// device's `max_wqe_sz_rq` gives (the RQ refuses longer lists before this matters).
const MAX_RECV_SGE: usize = 64;

/// Byte offset of `next_wqe_index` in an SRQ WQE's "next" segment.
const SRQ_NEXT_WQE_INDEX_OFF: usize = 0;

/// The refusal of a post on a QP in a state that does not take it: ERR after an error
/// completion ([`WrError::QpInError`]), any other the state it is in.
#[cold]
#[inline(never)]
fn not_ready<P: Platform>(sh: &QpShared<P>) -> BadWr {
    let error = if sh.error.load(Ordering::Relaxed) {
        WrError::QpInError { qpn: sh.qpn }
    } else {
        WrError::QpState {
            qpn: sh.qpn,
            state: sh.error.get(),
        }
    };
    BadWr { index: 0, error }
}

/// The request's fault, for a refusal of the HAL's WQE builder. The request was checked
/// against the QP's capabilities first ([`check_send`]), so what remains is a full queue or
/// a WQE the SQ's largest WQE cannot hold.
fn wq_error(e: WqError, wr: &SendWr<'_>, caps: &super::QpCaps) -> WrError {
    match e {
        WqError::WqeTooLarge { .. } | WqError::TooManySges { .. } | WqError::InlineTooLong(_) => {
            match wr.data {
                SendData::Sge(s) => WrError::TooManySges {
                    given: s.len(),
                    max: caps.max_send_sge,
                },
                SendData::Inline(b) => WrError::InlineTooLong {
                    given: b.len(),
                    max: caps.max_inline_data,
                },
            }
        }
        WqError::ByteCountTooLarge(_) => WrError::SgeTooLong,
        WqError::NoSq | WqError::NoRq => WrError::NoQueue,
        WqError::SqFull { .. } | WqError::RqFull => WrError::QueueFull,
        other => WrError::Ring(other),
    }
}

/// Checks one send request against the QP and returns its WQE opcode.
#[inline(always)]
fn check_send(
    st: QpServiceType,
    caps: &super::QpCaps,
    atomics: bool,
    wr: &SendWr<'_>,
    op: &LoweredOp,
) -> Result<(), WrError> {
    let class = op.class;
    let allowed = match st {
        // Atomics only where the device's atomic page offers them (`DeviceCaps::atomic`).
        QpServiceType::Rc => class != OpClass::Atomic || atomics,
        QpServiceType::Uc => class <= OpClass::Write,
        QpServiceType::Ud | QpServiceType::Qp1 => class == OpClass::Send,
        _ => false,
    };
    if !allowed {
        return Err(WrError::OpNotSupported);
    }
    if super::qp::is_datagram(st) != wr.ud.is_some() {
        return Err(WrError::Destination);
    }
    match wr.data {
        SendData::Sge(s) => {
            if s.len() > caps.max_send_sge as usize {
                return Err(WrError::TooManySges {
                    given: s.len(),
                    max: caps.max_send_sge,
                });
            }
            if s.iter().any(|s| s.len & INLINE_SEG != 0) {
                return Err(WrError::SgeTooLong);
            }
        }
        SendData::Inline(b) => {
            if class >= OpClass::Read {
                return Err(WrError::InlineNotAllowed);
            }
            if b.len() > caps.max_inline_data as usize {
                return Err(WrError::InlineTooLong {
                    given: b.len(),
                    max: caps.max_inline_data,
                });
            }
        }
    }
    if class == OpClass::Atomic {
        match wr.data {
            SendData::Sge([s]) if s.len == 8 => {}
            _ => return Err(WrError::AtomicLocalBuffer),
        }
        if let SendOp::AtomicCmpSwap { remote_addr, .. }
        | SendOp::AtomicFetchAdd { remote_addr, .. } = wr.op
            && remote_addr % 8 != 0
        {
            return Err(WrError::AtomicAlignment);
        }
    }
    Ok(())
}

/// Builds the WQE of one checked send request.
#[inline(always)]
fn build_send<R: SendRing>(
    rings: &mut R,
    op: &LoweredOp,
    flags: WqeCtrlFlags,
    wr: &SendWr<'_>,
) -> Result<uhca_hal::wq::PostedWqe, WqError> {
    let mut w = rings.sq_wqe(op.opcode, flags)?;
    if op.imm != 0 {
        w.imm(op.imm);
    }
    if let Some(d) = &wr.ud {
        w.datagram(&d.ah.av(d.remote_qpn, d.remote_qkey))?;
    }
    if let Some((remote_addr, rkey)) = op.raddr {
        w.raddr(remote_addr, rkey)?;
    }
    match wr.op {
        SendOp::AtomicCmpSwap { compare, swap, .. } => {
            w.atomic(swap, compare)?;
        }
        SendOp::AtomicFetchAdd { add, .. } => {
            w.atomic(add, 0)?;
        }
        _ => {}
    }
    match wr.data {
        SendData::Sge(s) => {
            // A zero length means 2 GiB to the device: empty entries are left out (as
            // rdma-core's mlx5 provider does).
            for e in s.iter().filter(|e| e.len != 0) {
                w.data(e.addr, e.len, e.lkey)?;
            }
        }
        SendData::Inline(b) => {
            if !b.is_empty() {
                w.inline(b)?;
            }
        }
    }
    Ok(w.finish())
}

impl<P: Platform, T: QpTransport> Qp<P, T> {
    /// Posts send work requests (`ibv_post_send`) and rings the send doorbell once.
    ///
    /// `wrs` is anything that iterates over `&SendWr` (a slice, an array, an iterator).
    /// Each request becomes one WQE; the whole batch is published with one 8-byte
    /// doorbell. On the first request that cannot be posted, the ones before it are
    /// published and [`BadWr`] names it and why; nothing after it is posted.
    ///
    /// ```no_run
    /// # use uhca_driver::verbs::{Qp, Rc, SendWr, SendOp, SendFlags, Sge};
    /// # fn f<P: uhca_hal::Platform>(qp: &mut Qp<P, Rc>, lkey: u32, rkey: u32) {
    /// let sge = [Sge { addr: 0x10_0000, len: 64, lkey }];
    /// let wrs = [
    ///     SendWr::new(1, SendOp::RdmaWrite { remote_addr: 0x20_0000, rkey }, &sge)
    ///         .with_flags(SendFlags::empty()),
    ///     SendWr::new(2, SendOp::Send, &sge),
    /// ];
    /// qp.post_send(&wrs).unwrap();
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`BadWr`] with the index of the first refused request: [`WrError::QpState`] for a
    /// QP not in RTS, [`WrError::QpInError`] in ERR (after an error completion the device
    /// moved the QP there), [`WrError::QueueFull`], or the request's own fault (see
    /// [`WrError`]).
    pub fn post_send<'w, 'd: 'w, I>(&mut self, wrs: I) -> Result<(), BadWr>
    where
        I: IntoIterator<Item = &'w SendWr<'d>>,
    {
        let d = self.datapath();
        let side = SendSide {
            shared: d.shared,
            caps: *d.caps,
            sig_all: *d.sig_all,
            atomics: d.atomics,
            st: T::ST,
        };
        side.post(d.rings, d.bar, wrs)
    }

    /// Splits the QP into its send side and its receive side, to be driven from two threads
    /// at once (like `TcpStream`'s halves, or rdma-core's separate SQ and RQ locks):
    /// [`SendQueue::post_send`] on one, [`RecvQueue::post_recv`] on the other, each exactly
    /// as [`Qp::post_send`] and [`Qp::post_recv`] post. Both are [`Send`] (for a platform
    /// that is `Send + Sync`, as a `Qp` is `Send` for one that is) and borrow the QP until
    /// they are gone.
    ///
    /// They share nothing that either writes: the send side writes only the SQ, the send
    /// counter of the doorbell record and the SQ's work-request table; the receive side
    /// only the RQ, the receive counter and the RQ's table. The DMA buffer that holds both
    /// queues is lent to each through a view restricted to its own bytes
    /// ([`uhca_hal::dma::DmaSplit`]), and each table is shared with the CQ's poller through
    /// its own protocol ([`uhca_hal::wrid`]).
    ///
    /// ```no_run
    /// # use uhca_driver::verbs::{Qp, Rc, SendWr, SendOp, RecvWr, Sge};
    /// # fn f<P: uhca_hal::Platform + Send + Sync>(qp: &mut Qp<P, Rc>, sge: Sge) {
    /// let (mut tx, mut rx) = qp.split();
    /// std::thread::scope(|s| {
    ///     s.spawn(move || tx.post_send(&[SendWr::new(1, SendOp::Send, &[sge])]).unwrap());
    ///     s.spawn(move || rx.post_recv(&[RecvWr { wr_id: 2, sg_list: &[sge] }]).unwrap());
    /// });
    /// # }
    /// ```
    pub fn split(&mut self) -> (SendQueue<'_, P, T>, RecvQueue<'_, P, T>) {
        let d = self.datapath();
        let (sq, rq) = d.rings.split();
        (
            SendQueue {
                rings: sq,
                bar: d.bar,
                side: SendSide {
                    shared: d.shared,
                    caps: *d.caps,
                    sig_all: *d.sig_all,
                    atomics: d.atomics,
                    st: T::ST,
                },
                _transport: PhantomData,
            },
            RecvQueue {
                rings: rq,
                side: RecvSide {
                    shared: d.shared,
                    caps: *d.caps,
                },
                _transport: PhantomData,
            },
        )
    }
}

/// The send side of a QP, split from it with [`Qp::split`].
pub struct SendQueue<'a, P: Platform, T: QpTransport> {
    rings: SqRing<'a, DmaView<'a>>,
    bar: &'a P,
    side: SendSide<'a, P>,
    _transport: PhantomData<fn() -> T>,
}

impl<P: Platform, T: QpTransport> core::fmt::Debug for SendQueue<'_, P, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SendQueue")
            .field("qpn", &self.side.shared.qpn)
            .finish_non_exhaustive()
    }
}

impl<P: Platform, T: QpTransport> SendQueue<'_, P, T> {
    /// Posts send work requests, as [`Qp::post_send`] does.
    ///
    /// # Errors
    ///
    /// As [`Qp::post_send`].
    pub fn post_send<'w, 'd: 'w, I>(&mut self, wrs: I) -> Result<(), BadWr>
    where
        I: IntoIterator<Item = &'w SendWr<'d>>,
    {
        self.side.post(&mut self.rings, self.bar, wrs)
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.side.shared.qpn
    }
}

/// The receive side of a QP, split from it with [`Qp::split`].
pub struct RecvQueue<'a, P: Platform, T: QpTransport> {
    rings: RqRing<'a, DmaView<'a>>,
    side: RecvSide<'a, P>,
    _transport: PhantomData<fn() -> T>,
}

impl<P: Platform, T: QpTransport> core::fmt::Debug for RecvQueue<'_, P, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RecvQueue")
            .field("qpn", &self.side.shared.qpn)
            .finish_non_exhaustive()
    }
}

impl<P: Platform, T: QpTransport> RecvQueue<'_, P, T> {
    /// Posts receive work requests, as [`Qp::post_recv`] does.
    ///
    /// # Errors
    ///
    /// As [`Qp::post_recv`].
    pub fn post_recv<'w, 'd: 'w, I>(&mut self, wrs: I) -> Result<(), BadWr>
    where
        I: IntoIterator<Item = &'w RecvWr<'d>>,
    {
        self.side.post(&mut self.rings, wrs)
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.side.shared.qpn
    }
}

/// What posting sends needs besides the rings: the one posting code of [`Qp::post_send`]
/// and [`SendQueue::post_send`].
struct SendSide<'a, P: Platform> {
    shared: &'a QpShared<P>,
    caps: super::QpCaps,
    sig_all: bool,
    atomics: bool,
    st: QpServiceType,
}

impl<P: Platform> SendSide<'_, P> {
    /// The SQ's work-request table, if the QP takes sends in its state; the SQ's CQEs are
    /// the new incarnation's from here on if it was reset.
    #[inline(always)]
    fn send_table(&self) -> Result<&SqTable<P>, BadWr> {
        let sh = self.shared;
        if !sh.error.can_send() {
            return Err(not_ready(sh));
        }
        let Some(table) = sh.sq.as_ref() else {
            return Err(BadWr {
                index: 0,
                error: WrError::NoQueue,
            });
        };
        // Posting after RESET: from here on the SQ's CQEs are the new incarnation's.
        if sh.sq_stale.load(Ordering::Relaxed) {
            sh.sq_stale.store(false, Ordering::Relaxed);
        }
        Ok(table)
    }

    #[inline(always)]
    fn post<'w, 'd: 'w, I, R, B>(&self, rings: &mut R, bar: &B, wrs: I) -> Result<(), BadWr>
    where
        I: IntoIterator<Item = &'w SendWr<'d>>,
        R: SendRing,
        B: Bar + ?Sized,
    {
        let bad = |index, error| BadWr { index, error };
        let table = self.send_table()?;
        let caps = self.caps;
        let sig_all = if self.sig_all {
            WqeCtrlFlags::CQ_UPDATE.bits()
        } else {
            0
        };
        rings.sq_set_consumer(table.consumer());
        let mut result = Ok(());
        // Only RC and UC take the one-step path (a UD send carries an address vector).
        let one_step_ok = !super::qp::is_datagram(self.st) && caps.max_send_sge != 0;
        'wrs: for (i, wr) in wrs.into_iter().enumerate() {
            // The control-segment flags: the request's own (their bits are the segment's,
            // see `SendFlags`) and CQ_UPDATE for `sq_sig_all`.
            let flags = WqeCtrlFlags::from_bits_retain(
                (wr.flags.bits() & SendFlags::all().bits()) | sig_all,
            );
            // SEND or RDMA WRITE (with or without immediate) with one non-empty gather
            // entry, or with inline data within the QP's limit, on RC or UC is valid on
            // every QP that has a send queue and is written in one step (the inline one
            // unless it reaches the ring's end); everything else is checked in full and
            // goes through the WQE builder.
            let op = wr.op.lower();
            let one_step = one_step_ok && op.class <= OpClass::Write && wr.ud.is_none();
            let posted = 'posted: {
                match wr.data {
                    SendData::Sge([sge]) if one_step && sge.len != 0 => {
                        break 'posted rings
                            .sq_post_one_sge(op.opcode, flags, op.imm, op.raddr, sge);
                    }
                    SendData::Inline(b)
                        if one_step
                            && !b.is_empty()
                            && b.len() <= caps.max_inline_data as usize =>
                    {
                        if let Some(p) = rings.sq_post_inline(op.opcode, flags, op.imm, op.raddr, b)
                        {
                            break 'posted p;
                        }
                    }
                    _ => {}
                }
                if let Err(e) = check_send(self.st, &caps, self.atomics, wr, &op) {
                    result = Err(bad(i, e));
                    break 'wrs;
                }
                build_send(rings, &op, flags, wr)
            };
            let tag = op.wc;
            match posted {
                Ok(posted) => table.record(&SendEntry {
                    wr_id: wr.wr_id,
                    wqe_index: posted.wqe_index,
                    wqebbs: posted.wqebbs,
                    tag: tag.raw(),
                    signaled: flags.contains(WqeCtrlFlags::CQ_UPDATE),
                }),
                Err(e) => {
                    result = Err(bad(i, wq_error(e, wr, &caps)));
                    break;
                }
            }
        }
        table.publish(rings.sq_producer());
        rings.ring_sq_doorbell(bar);
        result
    }
}

impl<P: Platform, T: QpTransport> Qp<P, T> {
    /// Posts receive work requests (`ibv_post_recv`) and publishes them with one
    /// doorbell-record update. Receives may be posted from INIT on, as verbs allows
    /// (INIT, RTR, RTS, SQER: one compare).
    ///
    /// # Errors
    ///
    /// [`BadWr`] with the index of the first refused request (the ones before it are
    /// posted): [`WrError::NoQueue`] for a QP that receives from an SRQ,
    /// [`WrError::QpInError`], [`WrError::QueueFull`], [`WrError::TooManySges`],
    /// [`WrError::SgeTooLong`].
    pub fn post_recv<'w, 'd: 'w, I>(&mut self, wrs: I) -> Result<(), BadWr>
    where
        I: IntoIterator<Item = &'w RecvWr<'d>>,
    {
        let d = self.datapath();
        let side = RecvSide {
            shared: d.shared,
            caps: *d.caps,
        };
        side.post(d.rings, wrs)
    }
}

/// What posting receives needs besides the rings: the one posting code of
/// [`Qp::post_recv`] and [`RecvQueue::post_recv`].
struct RecvSide<'a, P: Platform> {
    shared: &'a QpShared<P>,
    caps: super::QpCaps,
}

impl<P: Platform> RecvSide<'_, P> {
    #[inline(always)]
    fn post<'w, 'd: 'w, I, R>(&self, rings: &mut R, wrs: I) -> Result<(), BadWr>
    where
        I: IntoIterator<Item = &'w RecvWr<'d>>,
        R: RecvRing,
    {
        let bad = |index, error| BadWr { index, error };
        let sh = self.shared;
        let max_sge = self.caps.max_recv_sge;
        if !sh.error.can_recv() {
            return Err(not_ready(sh));
        }
        let Some(table) = sh.rq.as_ref() else {
            return Err(bad(0, WrError::NoQueue));
        };
        // Posting after RESET: from here on the RQ's CQEs are the new incarnation's.
        if sh.rq_stale.load(Ordering::Relaxed) {
            sh.rq_stale.store(false, Ordering::Relaxed);
        }
        rings.rq_set_consumer(table.consumer());
        let mut result = Ok(());
        for (i, wr) in wrs.into_iter().enumerate() {
            // One non-empty entry, the shape almost every receive has: checked and written
            // in one step (the same WQE and errors as the general path below).
            if let [s] = wr.sg_list
                && s.len != 0
                && max_sge != 0
            {
                match rings.post_recv_one(s) {
                    Ok(head) => table.record_with_len(head.into(), wr.wr_id, s.len),
                    Err(e) => {
                        result = Err(bad(i, recv_error(e, max_sge)));
                        break;
                    }
                }
                continue;
            }
            if wr.sg_list.len() > (max_sge as usize).min(MAX_RECV_SGE) {
                result = Err(bad(
                    i,
                    WrError::TooManySges {
                        given: wr.sg_list.len(),
                        max: max_sge.min(MAX_RECV_SGE as u32),
                    },
                ));
                break;
            }
            let head = rings.rq_head();
            // Empty entries are left out (a zero length means 2 GiB to the device).
            let posted = if wr.sg_list.iter().any(|s| s.len == 0) {
                post_recv_without_empty(rings, wr.sg_list)
            } else {
                rings.post_recv(wr.sg_list)
            };
            match posted {
                Ok(_) => {
                    let len = wr.sg_list.iter().fold(0u32, |n, s| n.saturating_add(s.len));
                    table.record_with_len(head, wr.wr_id, len);
                }
                Err(e) => {
                    result = Err(bad(i, recv_error(e, max_sge)));
                    break;
                }
            }
        }
        table.publish(rings.rq_head());
        rings.ring_rq_doorbell();
        result
    }
}

/// The work-request error of a ring's refusal of a receive WQE on a QP whose receives take
/// at most `max_sge` entries.
#[cold]
fn recv_error(e: WqError, max_sge: u32) -> WrError {
    match e {
        WqError::RqFull => WrError::QueueFull,
        WqError::ByteCountTooLarge(_) => WrError::SgeTooLong,
        WqError::TooManySges { given, .. } => WrError::TooManySges {
            given,
            max: max_sge,
        },
        WqError::NoRq | WqError::NoSq => WrError::NoQueue,
        other => WrError::Ring(other),
    }
}

/// Posts a receive WQE of the non-empty entries of `sg_list` (out of line: a gather list
/// with empty entries is rare, and the copy takes stack room).
#[cold]
#[inline(never)]
fn post_recv_without_empty<R: RecvRing>(rings: &mut R, sg_list: &[Sge]) -> Result<u16, WqError> {
    let mut kept = [Sge::default(); MAX_RECV_SGE];
    let mut n = 0;
    for (k, s) in kept.iter_mut().zip(sg_list.iter().filter(|s| s.len != 0)) {
        *k = *s;
        n += 1;
    }
    rings.post_recv(&kept[..n])
}

impl<P: Platform> Srq<P> {
    /// Posts receive work requests to the SRQ (`ibv_post_srq_recv`) and publishes them
    /// with one doorbell-record update.
    ///
    /// # Errors
    ///
    /// [`BadWr`] with the index of the first refused request (the ones before it are
    /// posted): [`WrError::QueueFull`], [`WrError::TooManySges`], [`WrError::SgeTooLong`].
    pub fn post_recv<'w, 'd: 'w, I>(&mut self, wrs: I) -> Result<(), BadWr>
    where
        I: IntoIterator<Item = &'w RecvWr<'d>>,
    {
        let max_sge = self.max_sge();
        let log_stride = self.log_stride();
        let dbr = self.dbr_offset();
        let bad = |index, error| BadWr { index, error };
        let (mem, shared) = self.post_parts();
        let mut sh = shared.shadow.lock();
        // WQEs the poller gave back are linked into the device's free list first.
        sh.flush_links(|wqe, next| link_srq_wqe(mem, log_stride, wqe, next));
        let mut result = Ok(());
        let mut posted = 0u32;
        for (i, wr) in wrs.into_iter().enumerate() {
            // One non-empty entry, the common shape: the same checks and WQE as below, in
            // one step.
            if let [s] = wr.sg_list
                && s.len != 0
                && max_sge != 0
            {
                if s.len & INLINE_SEG != 0 {
                    result = Err(bad(i, WrError::SgeTooLong));
                    break;
                }
                let Some(ind) = sh.take_free(wr.wr_id, s.len) else {
                    result = Err(bad(i, WrError::QueueFull));
                    break;
                };
                write_srq_wqe_one(mem, (ind as usize) << log_stride, max_sge, s);
                posted += 1;
                continue;
            }
            if wr.sg_list.len() > max_sge as usize {
                result = Err(bad(
                    i,
                    WrError::TooManySges {
                        given: wr.sg_list.len(),
                        max: max_sge,
                    },
                ));
                break;
            }
            if wr.sg_list.iter().any(|s| s.len & INLINE_SEG != 0) {
                result = Err(bad(i, WrError::SgeTooLong));
                break;
            }
            let len = wr.sg_list.iter().fold(0u32, |n, s| n.saturating_add(s.len));
            let Some(ind) = sh.take_free(wr.wr_id, len) else {
                result = Err(bad(i, WrError::QueueFull));
                break;
            };
            write_srq_wqe(mem, (ind as usize) << log_stride, max_sge, wr);
            posted += 1;
        }
        if posted > 0 {
            sh.counter = sh.counter.wrapping_add(posted);
            // The WQEs must be visible before the device sees the new counter.
            barriers::wqe_before_doorbell_record();
            mem.write_be32(dbr, sh.counter & 0xffff);
        }
        result
    }
}

/// Writes the data segments of an SRQ WQE at `base` (after its "next" segment, which the
/// free list owns), ended by an invalid-lkey segment when shorter than the WQE.
fn write_srq_wqe<P: Platform>(mem: &mut DmaBuf<P>, base: usize, max_sge: u32, wr: &RecvWr<'_>) {
    // One non-empty entry (the common shape): the entry and, if the WQE has room, the
    // terminating entry as one run of words (one bounds check for the WQE; the same words
    // in the same order as one write each).
    if let [s] = wr.sg_list
        && s.len != 0
    {
        return write_srq_wqe_one(mem, base, max_sge, s);
    }
    // Empty entries are left out (a zero length means 2 GiB to the device).
    let mut n = 0;
    for s in wr.sg_list.iter().filter(|s| s.len != 0) {
        let o = base + SEND_WQE_DS * (1 + n);
        mem.write_be64(o, ((s.len as u64) << 32) | s.lkey as u64);
        mem.write_be64(o + 8, s.addr);
        n += 1;
    }
    if n < max_sge as usize {
        let o = base + SEND_WQE_DS * (1 + n);
        mem.write_be64(o, INVALID_LKEY as u64);
        mem.write_be64(o + 8, 0);
    }
}

/// [`write_srq_wqe`] of a list of the one non-empty entry `s`: the entry and, if the WQE has
/// room, the terminating entry as one run of words of a constant count.
#[inline(always)]
fn write_srq_wqe_one<P: Platform>(mem: &mut DmaBuf<P>, base: usize, max_sge: u32, s: &Sge) {
    let w = [
        ((s.len as u64) << 32) | s.lkey as u64,
        s.addr,
        INVALID_LKEY as u64,
        0,
    ];
    if max_sge > 1 {
        mem.write_be64_run(base + SEND_WQE_DS, 4, |i| w[i]);
    } else {
        mem.write_be64_run(base + SEND_WQE_DS, 2, |i| w[i]);
    }
}

/// Points the "next" segment of SRQ WQE `wqe` at `next` (the device follows these links
/// to find free WQEs).
fn link_srq_wqe<P: Platform>(mem: &mut DmaBuf<P>, log_stride: u8, wqe: u32, next: u32) {
    // `next_wqe_index` is the low half of the segment's first big-endian dword; the high
    // half is reserved (zero).
    mem.write_be32(
        ((wqe as usize) << log_stride) + SRQ_NEXT_WQE_INDEX_OFF,
        next & 0xffff,
    );
}

impl<P: Platform, T: QpTransport> Qp<P, T> {
    /// Makes every send work request signalled (`sq_sig_all` of `ibv_qp_init_attr`), or
    /// back to per-request signalling. Set it before the QP is brought up.
    pub fn set_sq_sig_all(&mut self, on: bool) {
        *self.datapath().sig_all = on;
    }
}

impl<P: Platform, T: QpTransport> Qp<P, T> {
    /// Whether the driver saw an error completion for this QP, after which the device has
    /// it in ERR (posting is refused until the QP is moved to RESET).
    pub fn in_error(&self) -> bool {
        self.shared().error.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each refusal of the HAL's send ring becomes the error that names it: a full ring is
    /// `QueueFull`, and an error posting should never meet is reported as itself, not
    /// disguised as a full queue.
    #[test]
    fn ring_errors_map_to_the_error_that_names_them() {
        let caps = super::super::QpCaps {
            max_send_sge: 2,
            max_inline_data: 16,
            ..Default::default()
        };
        let sges = [Sge::default(); 3];
        let wr = SendWr::new(1, SendOp::Send, &sges);
        let full = WqError::SqFull { needed: 2, free: 1 };
        assert_eq!(wq_error(full, &wr, &caps), WrError::QueueFull);
        assert_eq!(
            wq_error(WqError::TooManySges { given: 3, max: 2 }, &wr, &caps),
            WrError::TooManySges { given: 3, max: 2 }
        );
        assert_eq!(wq_error(WqError::NoSq, &wr, &caps), WrError::NoQueue);
        for other in [WqError::NotOutstanding, WqError::BadLayout("test")] {
            assert_eq!(wq_error(other, &wr, &caps), WrError::Ring(other));
        }
    }
}
