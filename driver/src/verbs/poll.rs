//! Polling completions (`ibv_poll_cq`), arming a CQ (`ibv_req_notify_cq`) and taking
//! completion events.
//!
//! [`Cq::poll`] takes CQEs the device wrote (owner bit, then a read barrier — the HAL's
//! [`CqRing`](uhca_hal::cq::CqRing)), checks each against the work-request tables of the QP
//! it names, and fills the caller's [`WorkCompletion`]s:
//!
//! - a requester CQE at WQE counter N retires every send WQE up to N (earlier unsignalled
//!   ones complete silently, as on every verbs provider) and reports N's `wr_id`;
//! - a responder CQE takes the oldest receive WQE of the QP (its counter must name it) or
//!   the SRQ WQE the counter names;
//! - an error CQE is decoded to a [`WcStatus`] with the vendor syndrome, and the QP is
//!   marked as in error: the device moved it to ERR, so `post_send` and `post_recv` refuse
//!   with [`WrError::QpInError`](super::WrError::QpInError) until the QP is moved to RESET,
//!   and the device flushes the rest of its WQEs with [`WcStatus::WrFlushed`].
//!
//! A CQE that names a QP the driver does not know, a QP that does not use this CQ, a WQE
//! that is not outstanding, or that contradicts what was posted is consumed and reported
//! as a [`PollError`]; the work-request tables stay as they were. CQEs left over from a QP
//! that was destroyed (until its number is used again, or, when the CQ's map is rebuilt,
//! one of the 16 most recently destroyed), or from a queue of a QP that was moved to RESET
//! and not posted to since, are dropped, as rdma-core removes them from the CQ at those
//! transitions (a dropped receive from an SRQ gives its WQE back; receives from an SRQ of a
//! QP that was reset are delivered). Polling allocates nothing.

use uhca_fwif::consts::{CqeOpcode, QpServiceType, WqeOpcode};
use uhca_hal::Platform;
use uhca_hal::cq::CqeView;
use uhca_hal::dma::DmaMem;

use core::sync::atomic::Ordering;

use super::Cq;
use super::dp::{QpMap, QpShared};
use super::wr::{WcFlags, WcOpcode, WcStatus, WorkCompletion, wc_opcode_of_wqe};
use crate::error::{BadCqe, PollError};
use crate::hca::Hca;

/// For each WQE opcode (as a requester CQE's `sop` reports it), one more than the raw
/// [`WcOpcode`] it completes as; 0 for opcodes a verbs send queue never posts.
const WC_OF_SOP: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = match wc_opcode_of_wqe(WqeOpcode::from_raw(i as u8)) {
            Some(op) => op.raw() + 1,
            None => 0,
        };
        i += 1;
    }
    t
};

/// A successful requester CQE (the common case, kept apart from [`complete`]): checked
/// against the QP's send table like any other and written into `out`. `Ok(false)` for a
/// CQE that is dropped (see [`complete`]).
#[inline(always)]
fn complete_req<P: Platform, M: DmaMem>(
    map: &mut QpMap<P>,
    cqn: u32,
    cqe: &CqeView<'_, M>,
    out: &mut WorkCompletion,
) -> Result<bool, BadCqe> {
    let (qpn, counter) = (cqe.qpn(), cqe.wqe_counter());
    let qp = map.get(qpn).ok_or(BadCqe::UnknownQp { qpn })?;
    if qp.is_destroyed() || qp.sq_stale.load(Ordering::Relaxed) {
        return Ok(false);
    }
    let sq = match &qp.sq {
        Some(sq) if qp.send_cqn == cqn => sq,
        _ => return Err(BadCqe::WrongCq { qpn, cqn }),
    };
    let slot = sq.outstanding(counter).ok_or(BadCqe::NotOutstanding {
        qpn,
        wqe_counter: counter,
    })?;
    let sop = cqe.sop();
    // The WQE opcode the device reports must complete as the one posted there.
    let posted = match WcOpcode::from_raw(slot.tag) {
        Some(op) if WC_OF_SOP[sop as usize] == slot.tag + 1 => op,
        _ => {
            return Err(BadCqe::OpcodeMismatch {
                qpn,
                wqe_counter: counter,
                reported: sop,
            });
        }
    };
    *out = WorkCompletion {
        wr_id: slot.wr_id,
        opcode: posted,
        byte_len: match posted {
            WcOpcode::RdmaRead => cqe.byte_cnt(),
            WcOpcode::CompSwap | WcOpcode::FetchAdd => 8,
            _ => 0,
        },
        qp_num: qpn,
        wqe_counter: counter,
        ..WorkCompletion::default()
    };
    sq.retire(&slot);
    Ok(true)
}

/// The error fields of an error CQE (`mlx5_err_cqe` overlays the CQE): status and vendor
/// syndrome.
#[inline(always)]
fn error_status<M: DmaMem>(cqe: &CqeView<'_, M>) -> (WcStatus, u8) {
    let (syndrome, vendor) = cqe.error_syndromes();
    (WcStatus::from_syndrome(syndrome), vendor)
}

/// Checks one CQE of CQ `cqn` against the tables of the QP it names and turns it into a
/// completion. The CQE is read field by field where the PRM puts them (an error CQE keeps
/// the QPN and the WQE counter where a good one has them).
///
/// `Ok(false)` for a CQE left over from a QP that was destroyed, or from a queue of a QP
/// that was moved to RESET and not posted to since: it is dropped, as rdma-core removes
/// such CQEs from the CQ (a receive from an SRQ gives its SRQ WQE back). A successful
/// requester CQE goes to [`complete_req`] instead (here it is an unexpected opcode).
#[inline(always)]
fn complete<P: Platform, M: DmaMem>(
    map: &mut QpMap<P>,
    cqn: u32,
    cqe: &CqeView<'_, M>,
    out: &mut WorkCompletion,
) -> Result<bool, BadCqe> {
    let opcode = cqe.opcode();
    let (qpn, counter) = (cqe.qpn(), cqe.wqe_counter());
    let responder = matches!(
        opcode,
        CqeOpcode::RespSend
            | CqeOpcode::RespSendImm
            | CqeOpcode::RespSendInv
            | CqeOpcode::RespWrImm
            | CqeOpcode::RespErr
    );
    let qp = map.get(qpn).ok_or(BadCqe::UnknownQp { qpn })?;
    if qp.is_destroyed() {
        if let Some(srq) = &qp.srq
            && responder
        {
            // The SRQ WQE was consumed: back to the free list.
            let _ = srq.shadow.lock().complete(counter);
        }
        return Ok(false);
    }
    // Left over from before RESET (SRQ receives are delivered: their WQEs were used).
    let requester = matches!(opcode, CqeOpcode::Req | CqeOpcode::ReqErr);
    if (responder && qp.srq.is_none() && qp.rq_stale.load(Ordering::Relaxed))
        || (requester && qp.sq_stale.load(Ordering::Relaxed))
    {
        return Ok(false);
    }
    // Written in place: the caller's slot is this completion's (or, for a CQE refused
    // below, past the ones polled).
    *out = WorkCompletion {
        qp_num: qpn,
        wqe_counter: counter,
        ..WorkCompletion::default()
    };
    let wc = out;
    match opcode {
        // A successful requester CQE takes `complete_req`; here only its error twin.
        CqeOpcode::ReqErr => {
            let sq = match &qp.sq {
                Some(sq) if qp.send_cqn == cqn => sq,
                _ => return Err(BadCqe::WrongCq { qpn, cqn }),
            };
            let not_outstanding = BadCqe::NotOutstanding {
                qpn,
                wqe_counter: counter,
            };
            let slot = sq.outstanding(counter).ok_or(not_outstanding)?;
            wc.wr_id = slot.wr_id;
            wc.opcode = WcOpcode::from_raw(slot.tag).ok_or(not_outstanding)?;
            (wc.status, wc.vendor_err) = error_status(cqe);
            qp.error.store(true, Ordering::Relaxed);
            sq.retire(&slot);
        }
        CqeOpcode::RespSend
        | CqeOpcode::RespSendImm
        | CqeOpcode::RespSendInv
        | CqeOpcode::RespWrImm
        | CqeOpcode::RespErr => complete_recv(qp, cqn, opcode, cqe, wc)?,
        other => return Err(BadCqe::UnexpectedOpcode { qpn, opcode: other }),
    }
    Ok(true)
}

/// A responder CQE (a receive of the QP's RQ or of its SRQ), checked against the tables
/// and written into `wc`: the receive WQE it names is taken, then the status (an error
/// CQE) or what was received.
#[inline(always)]
fn complete_recv<P: Platform, M: DmaMem>(
    qp: &QpShared<P>,
    cqn: u32,
    opcode: CqeOpcode,
    cqe: &CqeView<'_, M>,
    wc: &mut WorkCompletion,
) -> Result<(), BadCqe> {
    let (qpn, counter) = (cqe.qpn(), cqe.wqe_counter());
    if qp.recv_cqn != cqn {
        return Err(BadCqe::WrongCq { qpn, cqn });
    }
    let not_outstanding = BadCqe::NotOutstanding {
        qpn,
        wqe_counter: counter,
    };
    // A SEND cannot bring more than the receive WQE can take: refused before the
    // WQE is taken, so the tables stay as they were. (An RDMA WRITE with immediate
    // consumes a receive WQE but writes where its rkey says: its byte count is the
    // WRITE's length.)
    let is_send = matches!(
        opcode,
        CqeOpcode::RespSend | CqeOpcode::RespSendImm | CqeOpcode::RespSendInv
    );
    let fields = cqe.recv_fields();
    wc.wr_id = match (&qp.srq, &qp.rq) {
        // The SRQ's shadow is locked once for the length check and the take.
        (Some(srq), _) => {
            let mut sh = srq.shadow.lock();
            if is_send {
                let byte_cnt = fields.byte_cnt();
                if let Some(posted) = sh.posted_len(counter)
                    && byte_cnt > posted
                {
                    return Err(BadCqe::ByteCountTooLarge { qpn, byte_cnt });
                }
            }
            sh.complete(counter).ok_or(not_outstanding)?
        }
        // The RQ checks the length and takes the WQE in one look at its counters.
        (None, Some(rq)) if is_send => {
            let byte_cnt = fields.byte_cnt();
            match rq.take_within(counter, byte_cnt) {
                Some(Ok(wr_id)) => wr_id,
                Some(Err(())) => return Err(BadCqe::ByteCountTooLarge { qpn, byte_cnt }),
                None => return Err(not_outstanding),
            }
        }
        (None, Some(rq)) => rq.take(counter).ok_or(not_outstanding)?,
        (None, None) => return Err(BadCqe::WrongCq { qpn, cqn }),
    };
    if opcode == CqeOpcode::RespErr {
        wc.opcode = WcOpcode::Recv;
        (wc.status, wc.vendor_err) = error_status(cqe);
        qp.error.store(true, Ordering::Relaxed);
    } else {
        wc.opcode = if opcode == CqeOpcode::RespWrImm {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        };
        wc.byte_len = fields.byte_cnt();
        if matches!(opcode, CqeOpcode::RespSendImm | CqeOpcode::RespWrImm) {
            wc.imm_data = fields.immediate();
            wc.wc_flags |= WcFlags::WITH_IMM;
        }
        if opcode == CqeOpcode::RespSendInv {
            // The CQE's immediate field carries the invalidated rkey.
            wc.invalidated_rkey = fields.immediate();
            wc.wc_flags |= WcFlags::WITH_INV;
        }
        let flags = fields.flags_rqpn();
        if flags.grh() {
            wc.wc_flags |= WcFlags::GRH;
        }
        // The service level on every receive, as libmlx5 (cq.c) and Linux's
        // mlx5_ib report it; the source QP only where verbs defines it (UD).
        wc.sl = flags.sl();
        if matches!(qp.st, QpServiceType::Ud | QpServiceType::Qp1) {
            wc.src_qp = flags.remote_qpn();
        }
        let (ml_path, slid) = fields.ml_path_slid();
        wc.slid = slid;
        wc.dlid_path_bits = ml_path & 0x7f;
    }
    Ok(())
}

/// The HCA is gone (torn down, bus mastering off): completes in software, with
/// [`WcStatus::WrFlushed`], every WQE still outstanding on the queues of this CQ's QPs, oldest
/// first per queue (as Linux's `mlx5_ib` does once the device is in internal error), and
/// marks the QPs in error so nothing more is posted. Receives of an SRQ are not flushed
/// (they belong to the SRQ, not to a QP). Returns how many completions it wrote. Out of
/// line: it runs only once the HCA is gone, and must not weigh on the polling loop.
#[cold]
#[inline(never)]
fn flush_in_software<P: Platform>(map: &QpMap<P>, cqn: u32, wc: &mut [WorkCompletion]) -> usize {
    let mut n = 0;
    map.for_each_live(|qp| {
        qp.error.store(true, Ordering::Relaxed);
        if let Some(sq) = &qp.sq
            && qp.send_cqn == cqn
        {
            while n < wc.len() {
                let Some(e) = sq.outstanding(sq.consumer() as u16) else {
                    break;
                };
                wc[n] = WorkCompletion {
                    wr_id: e.wr_id,
                    status: WcStatus::WrFlushed,
                    opcode: WcOpcode::from_raw(e.tag).unwrap_or(WcOpcode::Send),
                    qp_num: qp.qpn,
                    wqe_counter: e.wqe_index,
                    ..WorkCompletion::default()
                };
                sq.retire(&e);
                n += 1;
            }
        }
        if let Some(rq) = &qp.rq
            && qp.recv_cqn == cqn
        {
            while n < wc.len() {
                let tail = rq.consumer() as u16;
                let Some(wr_id) = rq.take(tail) else { break };
                wc[n] = WorkCompletion {
                    wr_id,
                    status: WcStatus::WrFlushed,
                    opcode: WcOpcode::Recv,
                    qp_num: qp.qpn,
                    wqe_counter: tail,
                    ..WorkCompletion::default()
                };
                n += 1;
            }
        }
    });
    n
}

impl<P: Platform> Cq<P> {
    /// Polls up to `wc.len()` completions into `wc` (`ibv_poll_cq`) and returns how many;
    /// the consumed CQEs are handed back to the device (consumer index in the doorbell
    /// record) before it returns.
    ///
    /// ```no_run
    /// # use uhca_driver::verbs::{Cq, WorkCompletion, WcStatus};
    /// # fn f<P: uhca_hal::Platform>(cq: &mut Cq<P>) {
    /// let mut wc = [WorkCompletion::default(); 16];
    /// let n = cq.poll(&mut wc).unwrap();
    /// for c in &wc[..n] {
    ///     assert_eq!(c.status, WcStatus::Success, "wr {} failed", c.wr_id);
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`PollError`] for a CQE that does not match what was posted; the completions before
    /// it are in `wc[..polled]`, and the next call continues after the bad CQE.
    ///
    /// Once the HCA is closed (or dropped), the CQEs the device wrote come first, then
    /// every request still outstanding on this CQ's QPs completes in software with
    /// [`WcStatus::WrFlushed`]: each request posted completes exactly once even when the
    /// HCA goes away under it.
    pub fn poll(&mut self, wc: &mut [WorkCompletion]) -> Result<usize, PollError> {
        // An empty CQ returns before the CQE loop's set-up.
        let n = if self.poll_parts().1.has_next() {
            self.poll_device(wc)?
        } else {
            0
        };
        if n < wc.len() && self.hca_gone() {
            return Ok(n + self.flush_gone(&mut wc[n..]));
        }
        Ok(n)
    }

    /// Polls like [`Cq::poll`] until at least one completion is in `wc` or `timeout_ns`
    /// nanoseconds have passed on the platform's clock, and returns how many (0: none
    /// within the time). A wait asked for explicitly: between empty polls it spins, and
    /// where the clock stands still (a virtual clock) it lets the platform's delay move it.
    ///
    /// ```no_run
    /// # use uhca_driver::verbs::{Cq, WorkCompletion, WcStatus};
    /// # fn f<P: uhca_hal::Platform>(cq: &mut Cq<P>) {
    /// let mut wc = [WorkCompletion::default()];
    /// match cq.poll_timeout(&mut wc, 1_000_000_000).unwrap() {
    ///     0 => eprintln!("no completion within a second"),
    ///     _ => assert_eq!(wc[0].status, WcStatus::Success),
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Cq::poll`].
    pub fn poll_timeout(
        &mut self,
        wc: &mut [WorkCompletion],
        timeout_ns: u64,
    ) -> Result<usize, PollError> {
        let start = self.platform().now_ns();
        let mut last = start;
        loop {
            let n = self.poll(wc)?;
            let now = self.platform().now_ns();
            if n > 0 || wc.is_empty() || now.saturating_sub(start) >= timeout_ns {
                return Ok(n);
            }
            if now == last {
                self.platform().delay_us(1);
            } else {
                core::hint::spin_loop();
            }
            last = now;
        }
    }

    /// The HCA is gone: [`flush_in_software`].
    #[cold]
    #[inline(never)]
    fn flush_gone(&mut self, wc: &mut [WorkCompletion]) -> usize {
        let cqn = self.cqn();
        let (map, _) = self.poll_parts();
        flush_in_software(map, cqn, wc)
    }

    /// The CQEs the device wrote, checked and turned into completions.
    #[inline(always)]
    fn poll_device(&mut self, wc: &mut [WorkCompletion]) -> Result<usize, PollError> {
        let cqn = self.cqn();
        let (map, ring) = self.poll_parts();
        let start = ring.consumer_index();
        let mut n = 0;
        let mut result = Ok(());
        while n < wc.len() {
            let Some(cqe) = ring.poll_next() else { break };
            let done = if cqe.opcode_raw() == CqeOpcode::Req.raw() {
                complete_req(map, cqn, &cqe, &mut wc[n])
            } else {
                complete(map, cqn, &cqe, &mut wc[n])
            };
            match done {
                Ok(true) => n += 1,
                Ok(false) => {}
                Err(cqe) => {
                    result = Err(PollError {
                        polled: n,
                        cqn,
                        cqe,
                    });
                    break;
                }
            }
        }
        if ring.consumer_index() != start {
            ring.update_consumer_index();
        }
        result.map(|()| n)
    }

    /// Arms the CQ (`ibv_req_notify_cq`): the device raises one completion event at the
    /// next completion (or, with `solicited_only`, the next solicited or error completion);
    /// read it with [`Hca::next_completion_event`] after [`Hca::process_events`], then
    /// [`Cq::ack_event`], poll, and arm again.
    pub fn req_notify(&mut self, solicited_only: bool) {
        let (p, uar, ring) = self.arm_parts();
        ring.arm(p, uar, solicited_only);
    }

    /// Notes that a completion event of this CQ was taken (the arm sequence number moves
    /// on, as the device expects for the next arm).
    pub fn ack_event(&mut self) {
        self.ring_mut().event_received();
    }

    /// Takes a waiting completion event of this CQ from `hca` and acknowledges it;
    /// returns whether there was one.
    pub fn take_event(&mut self, hca: &mut Hca<P>) -> bool {
        if hca.check_owner(self.hca_id()).is_ok() && hca.take_completion_event(self.cqn()) {
            self.ack_event();
            true
        } else {
            false
        }
    }
}
