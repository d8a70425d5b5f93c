//! The requester: WQEs become packets (segmented by the path MTU), ACKs and NAKs complete
//! or retry them, RDMA READ responses and atomic acknowledgements land in the local SGL,
//! the retransmission timer (`ack_timeout`, `retry_count`) and the RNR timer (`rnr_retry`,
//! 7 = infinite) drive retries, and exhausted retries end in an error CQE and the error
//! state.

use super::mem::{Access, KeyError, LocalKeys, Sge};
use super::path::HeaderTemplate;
use super::sq::{Piece, Wqe};
use super::state::SentWqe;
use crate::device::Device;
use crate::wire::ib::PAYLOAD_IN_PLACE;
use crate::wire::ib::ext::rnr_timer_micros;
use crate::wire::ib::psn;
use crate::wire::{AethSyndrome, BthRepr, IbTransportRepr, NakCode, Opcode};
use uhca_fwif::consts::{
    ATOMIC_REQ_MODE_HOST_ENDIANNESS, CqeOpcode, CqeSyndrome, IbMtu, QpServiceType, QpState,
    WqeOpcode,
};

/// MTU of UD messages (the port MTU): InfiniBand 4096, RoCE 1024 (an Ethernet MTU of 1500).
pub(crate) fn ud_mtu(ib: bool) -> u64 {
    if ib { 4096 } else { 1024 }
}

/// The path MTU of a connected QP in bytes.
pub(crate) fn path_mtu(code: u8) -> u64 {
    IbMtu::from_raw(code).bytes().unwrap_or(256) as u64
}

/// The CQE syndrome of a gather that failed: a key check (protection) or the IOMMU.
fn gather_syndrome(e: KeyError) -> CqeSyndrome {
    match e {
        KeyError::Protection => CqeSyndrome::LocalProtErr,
        KeyError::Dma => CqeSyndrome::LocalAccessErr,
    }
}

fn send_opcode(uc: bool, first: bool, last: bool, imm: bool) -> Opcode {
    use Opcode::*;
    match (uc, first, last, imm) {
        (false, true, true, false) => RcSendOnly,
        (false, true, true, true) => RcSendOnlyWithImmediate,
        (false, true, false, _) => RcSendFirst,
        (false, false, false, _) => RcSendMiddle,
        (false, false, true, false) => RcSendLast,
        (false, false, true, true) => RcSendLastWithImmediate,
        (true, true, true, false) => UcSendOnly,
        (true, true, true, true) => UcSendOnlyWithImmediate,
        (true, true, false, _) => UcSendFirst,
        (true, false, false, _) => UcSendMiddle,
        (true, false, true, false) => UcSendLast,
        (true, false, true, true) => UcSendLastWithImmediate,
    }
}

fn write_opcode(uc: bool, first: bool, last: bool, imm: bool) -> Opcode {
    use Opcode::*;
    match (uc, first, last, imm) {
        (false, true, true, false) => RcRdmaWriteOnly,
        (false, true, true, true) => RcRdmaWriteOnlyWithImmediate,
        (false, true, false, _) => RcRdmaWriteFirst,
        (false, false, false, _) => RcRdmaWriteMiddle,
        (false, false, true, false) => RcRdmaWriteLast,
        (false, false, true, true) => RcRdmaWriteLastWithImmediate,
        (true, true, true, false) => UcRdmaWriteOnly,
        (true, true, true, true) => UcRdmaWriteOnlyWithImmediate,
        (true, true, false, _) => UcRdmaWriteFirst,
        (true, false, false, _) => UcRdmaWriteMiddle,
        (true, false, true, false) => UcRdmaWriteLast,
        (true, false, true, true) => UcRdmaWriteLastWithImmediate,
    }
}

impl Device {
    /// Executes a decoded WQE: checks, gathers, sends, and completes what needs no ACK.
    pub(crate) fn post_wqe(&mut self, qpn: u32, w: Wqe, now: u64) {
        let Some(qpc) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return;
        };
        let st = QpServiceType::from_raw(qpc.st());
        let keys = LocalKeys {
            pd: qpc.pd(),
            rlky: qpc.rlky(),
        };
        let op = w.ctrl.opcode;
        if op == WqeOpcode::Nop {
            if w.ctrl.signaled {
                self.requester_cqe(qpn, w.ctrl.counter, op, 0, now);
            }
            return;
        }
        let max_msg = if crate::objects::is_datagram_qp(st) {
            ud_mtu(self.fw.port_type() == crate::caps::LinkLayer::InfiniBand)
        } else {
            1u64 << qpc.log_msg_max().max(1)
        };
        let total: u64 = w
            .data
            .iter()
            .map(|p| match p {
                Piece::Sge(s) => s.len as u64,
                Piece::Inline(d) => d.len() as u64,
            })
            .sum();
        if total > max_msg {
            self.local_send_error(
                qpn,
                w.ctrl.counter,
                op.raw(),
                CqeSyndrome::LocalLengthErr,
                now,
            );
            return;
        }
        // Check what will be gathered (SEND, WRITE: each packet reads its part from memory
        // when it is sent, and again when it is sent again, as the hardware does) or the
        // local targets (READ, atomics).
        let mut local = Vec::new();
        let gathers = matches!(
            op,
            WqeOpcode::Send | WqeOpcode::SendImm | WqeOpcode::RdmaWrite | WqeOpcode::RdmaWriteImm
        );
        let mut failed = None;
        for p in &w.data {
            match p {
                Piece::Inline(_) if gathers => {}
                Piece::Inline(_) => failed = Some(CqeSyndrome::LocalQpOpErr),
                Piece::Sge(s) if gathers => {
                    match self.datapath().local_check(
                        s.lkey,
                        keys,
                        s.addr,
                        s.len as u64,
                        Access::LocalRead,
                    ) {
                        Err(e) => failed = Some(gather_syndrome(e)),
                        Ok(span) if !self.datapath().span_mapped(&span, now) => {
                            failed = Some(CqeSyndrome::LocalAccessErr)
                        }
                        Ok(_) => {}
                    }
                }
                Piece::Sge(s) => local.push(*s),
            }
            if failed.is_some() {
                break;
            }
        }
        let len = match op {
            WqeOpcode::RdmaRead => local.iter().map(|s| s.len as u64).sum(),
            WqeOpcode::AtomicCs | WqeOpcode::AtomicFa => 8,
            _ => total,
        };
        if failed.is_none() && !gathers {
            if self.datapath().check_sges_writable(keys, &local).is_err() {
                failed = Some(CqeSyndrome::LocalProtErr);
            } else if w.atomic.is_some() && local.iter().map(|s| s.len as u64).sum::<u64>() < 8 {
                failed = Some(CqeSyndrome::LocalLengthErr);
            }
        }
        if failed.is_none() && len > max_msg {
            failed = Some(CqeSyndrome::LocalLengthErr);
        }
        if let Some(s) = failed {
            self.local_send_error(qpn, w.ctrl.counter, op.raw(), s, now);
            return;
        }
        if crate::objects::is_datagram_qp(st) {
            self.send_ud(qpn, &w, now);
            return;
        }
        let mtu = path_mtu(qpc.mtu());
        let npkts = match op {
            WqeOpcode::AtomicCs | WqeOpcode::AtomicFa => 1,
            _ => len.div_ceil(mtu).max(1) as u32,
        };
        let s = self.engine.qps.entry(qpn).or_default();
        let first_psn = s.next_psn;
        s.next_psn = psn::add(s.next_psn, npkts);
        let sent = SentWqe {
            ctrl: w.ctrl,
            first_psn,
            npkts,
            acked: 0,
            len,
            remote: w.raddr.unwrap_or((0, 0)),
            atomic: w.atomic.unwrap_or((0, 0)),
            data: if gathers { w.data } else { Vec::new() },
            local,
            xrc_srqn: w.xrc_srqn,
        };
        if !self.transmit(qpn, &sent, 0, now) {
            return;
        }
        if st == QpServiceType::Uc {
            if sent.ctrl.signaled {
                self.requester_cqe(qpn, sent.ctrl.counter, op, 0, now);
            }
            return;
        }
        let timeout = super::ack_timeout_ns(qpc.primary_address_path().ack_timeout());
        let s = self.engine.qps.entry(qpn).or_default();
        if s.outstanding.is_empty() && s.rnr_timer.is_none() {
            s.timer = timeout.map(|t| now + t);
        }
        s.outstanding.push_back(sent);
    }

    /// Reads `out.len()` bytes of a message's data, from byte `offset` of its gather list,
    /// checking each memory key again (as the hardware does at every read).
    fn gather_range(
        &mut self,
        keys: LocalKeys,
        data: &[Piece],
        offset: u64,
        out: &mut [u8],
        now: u64,
    ) -> Result<(), KeyError> {
        let mut skip = offset;
        let mut at = 0usize;
        for p in data {
            if at == out.len() {
                break;
            }
            let plen = match p {
                Piece::Sge(s) => s.len as u64,
                Piece::Inline(d) => d.len() as u64,
            };
            if skip >= plen {
                skip -= plen;
                continue;
            }
            let n = ((plen - skip) as usize).min(out.len() - at);
            match p {
                Piece::Inline(d) => {
                    out[at..at + n].copy_from_slice(&d[skip as usize..skip as usize + n])
                }
                Piece::Sge(s) => {
                    let span = self.datapath().local_check(
                        s.lkey,
                        keys,
                        s.addr.wrapping_add(skip),
                        n as u64,
                        Access::LocalRead,
                    )?;
                    self.datapath().span_read(
                        &span,
                        0,
                        &mut out[at..at + n],
                        now,
                        "data (gather)",
                    )?;
                }
            }
            at += n;
            skip = 0;
        }
        Ok(())
    }

    /// Sends the packets of `w` from packet `from` on. Returns false if the message's data
    /// could no longer be read (its key or mapping went away since it was posted): the WQE
    /// then completes with an error and the QP enters the error state.
    pub(crate) fn transmit(&mut self, qpn: u32, w: &SentWqe, from: u32, now: u64) -> bool {
        let Some(qpc) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return false;
        };
        let Some(path) = self.qp_path(qpc.primary_address_path()) else {
            self.note(
                now,
                format!("QP {qpn:#x}: no usable address path (GID index)"),
            );
            return true;
        };
        let uc = QpServiceType::from_raw(qpc.st()) == QpServiceType::Uc;
        let xrc = super::xrc::is_xrc(&qpc).then_some(w.xrc_srqn);
        let dqpn = qpc.remote_qpn();
        let mtu = path_mtu(qpc.mtu());
        let (va, rkey) = w.remote;
        match w.ctrl.opcode {
            WqeOpcode::RdmaRead => {
                let off = from as u64 * mtu;
                let mut bth =
                    BthRepr::new(Opcode::RcRdmaReadRequest, dqpn, psn::add(w.first_psn, from));
                bth.ack_req = true;
                let t = IbTransportRepr::new(bth, &[]).with_reth(
                    va.wrapping_add(off),
                    rkey,
                    w.len.saturating_sub(off) as u32,
                );
                let _ = self.emit_request(&path, &t, xrc, None);
            }
            WqeOpcode::AtomicCs | WqeOpcode::AtomicFa => {
                let opc = if w.ctrl.opcode == WqeOpcode::AtomicCs {
                    Opcode::RcCompareSwap
                } else {
                    Opcode::RcFetchAdd
                };
                let mut bth = BthRepr::new(opc, dqpn, w.first_psn);
                bth.ack_req = true;
                let t = IbTransportRepr::new(bth, &[])
                    .with_atomic_eth(va, rkey, w.atomic.0, w.atomic.1);
                let _ = self.emit_request(&path, &t, xrc, None);
            }
            op => {
                let write = matches!(op, WqeOpcode::RdmaWrite | WqeOpcode::RdmaWriteImm);
                let imm = matches!(op, WqeOpcode::SendImm | WqeOpcode::RdmaWriteImm);
                // Each packet's payload is read from memory into one buffer, reused.
                let mut buf = std::mem::take(&mut self.engine.scratch);
                let mut failed = None;
                // The headers of the first middle packet sent here; the later middle
                // packets are built from them (they differ only in PSN and payload).
                let mut template: Option<HeaderTemplate> = None;
                let keys = LocalKeys {
                    pd: qpc.pd(),
                    rlky: qpc.rlky(),
                };
                for i in from..w.npkts {
                    let first = i == 0;
                    let last = i + 1 == w.npkts;
                    let middle = !first && !last;
                    let a = i as u64 * mtu;
                    let b = ((i as u64 + 1) * mtu).min(w.len).max(a);
                    // Every byte of the part is read (or the gather fails): no zeroing.
                    let n = (b - a) as usize;
                    if middle && let Some(tp) = template.as_ref().filter(|tp| tp.payload_len() == n)
                    {
                        let mut gather = |d: &mut Device, dst: &mut [u8]| {
                            d.gather_range(keys, &w.data, a, dst, now)
                        };
                        let psn = psn::add(w.first_psn, i);
                        if let Err(e) = self.emit_from_template(tp, psn, &mut gather) {
                            failed = Some(gather_syndrome(e));
                            break;
                        }
                        continue;
                    }
                    // The part is read from memory straight into its frame when it fits
                    // the placeholder (any MTU does), else through `buf`.
                    let in_place = n > 0 && n <= PAYLOAD_IN_PLACE.len();
                    if !in_place {
                        if buf.len() < n {
                            buf.resize(n, 0);
                        }
                        if let Err(e) = self.gather_range(keys, &w.data, a, &mut buf[..n], now) {
                            failed = Some(gather_syndrome(e));
                            break;
                        }
                    }
                    let data = if in_place {
                        &PAYLOAD_IN_PLACE[..n]
                    } else {
                        &buf[..n]
                    };
                    let opc = if write {
                        write_opcode(uc, first, last, imm)
                    } else {
                        send_opcode(uc, first, last, imm)
                    };
                    let mut bth = BthRepr::new(opc, dqpn, psn::add(w.first_psn, i));
                    bth.ack_req = last && !uc;
                    bth.solicited = last && w.ctrl.solicited;
                    let mut t = IbTransportRepr::new(bth, data);
                    if write && first {
                        t = t.with_reth(va, rkey, w.len as u32);
                    }
                    if imm && last {
                        t = t.with_imm_dt(w.ctrl.imm);
                    }
                    if !in_place {
                        let _ = self.emit_request(&path, &t, xrc, None);
                        continue;
                    }
                    let mut gather =
                        |d: &mut Device, dst: &mut [u8]| d.gather_range(keys, &w.data, a, dst, now);
                    match self.build_request(&path, &t, xrc, Some(&mut gather)) {
                        Ok(Some(frame)) => {
                            if middle && template.is_none() {
                                template = HeaderTemplate::of(&path, &frame, n);
                            }
                            self.push_frame(frame);
                        }
                        Ok(None) => {}
                        Err(e) => {
                            failed = Some(gather_syndrome(e));
                            break;
                        }
                    }
                }
                self.engine.scratch = buf;
                if let Some(syndrome) = failed {
                    if let Some(s) = self.engine.qps.get_mut(&qpn)
                        && let Some(at) = s
                            .outstanding
                            .iter()
                            .position(|o| o.ctrl.counter == w.ctrl.counter)
                    {
                        s.outstanding.remove(at);
                    }
                    self.local_send_error(qpn, w.ctrl.counter, op.raw(), syndrome, now);
                    return false;
                }
            }
        }
        true
    }

    /// A UD send: one packet with a DETH, completed at once.
    fn send_ud(&mut self, qpn: u32, w: &Wqe, now: u64) {
        let Some(qpc) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return;
        };
        let Some(av) = w.av else {
            self.local_send_error(
                qpn,
                w.ctrl.counter,
                w.ctrl.opcode.raw(),
                CqeSyndrome::LocalQpOpErr,
                now,
            );
            return;
        };
        let Some(path) = self.av_path(&av) else {
            self.note(
                now,
                format!("QP {qpn:#x}: UD address vector with an unusable GID index"),
            );
            self.local_send_error(
                qpn,
                w.ctrl.counter,
                w.ctrl.opcode.raw(),
                CqeSyndrome::LocalQpOpErr,
                now,
            );
            return;
        };
        let imm = w.ctrl.opcode == WqeOpcode::SendImm;
        let opc = if imm {
            Opcode::UdSendOnlyWithImmediate
        } else {
            Opcode::UdSendOnly
        };
        // A Q_Key with bit 31 set means "use the QP's Q_Key".
        let qkey = if av.qkey.get() & 0x8000_0000 != 0 {
            qpc.q_key()
        } else {
            av.qkey.get()
        };
        let len: u64 = w
            .data
            .iter()
            .map(|p| match p {
                Piece::Sge(s) => s.len as u64,
                Piece::Inline(d) => d.len() as u64,
            })
            .sum();
        let mut buf = std::mem::take(&mut self.engine.scratch);
        buf.clear();
        buf.resize(len as usize, 0);
        if let Err(e) = self.gather_range(
            LocalKeys {
                pd: qpc.pd(),
                rlky: qpc.rlky(),
            },
            &w.data,
            0,
            &mut buf,
            now,
        ) {
            self.engine.scratch = buf;
            self.local_send_error(
                qpn,
                w.ctrl.counter,
                w.ctrl.opcode.raw(),
                gather_syndrome(e),
                now,
            );
            return;
        }
        let s = self.engine.qps.entry(qpn).or_default();
        let p = s.next_psn;
        s.next_psn = psn::add(p, 1);
        let mut bth = BthRepr::new(opc, av.dqpn(), p);
        bth.solicited = w.ctrl.solicited;
        // QP0 and QP1 send as QP 0 and QP 1 of the port (their firmware QPN is not on the
        // wire).
        let src_qp = crate::objects::wire_qpn(QpServiceType::from_raw(qpc.st()), qpn);
        let mut t = IbTransportRepr::new(bth, &buf).with_deth(qkey, src_qp);
        if imm {
            t = t.with_imm_dt(w.ctrl.imm);
        }
        self.emit_packet(&path, &t);
        self.engine.scratch = buf;
        if w.ctrl.signaled {
            self.requester_cqe(qpn, w.ctrl.counter, w.ctrl.opcode, 0, now);
        }
    }

    /// A requester (REQ) CQE for a completed WQE. Its `srqn_uidx` carries the QP's
    /// `user_index`, as every CQE of the QP does: with CQE version 1 a driver finds the QP
    /// (and its send queue's consumer index) from it, and libmlx5 does.
    pub(crate) fn requester_cqe(
        &mut self,
        qpn: u32,
        counter: u16,
        op: WqeOpcode,
        byte_cnt: u32,
        now: u64,
    ) {
        let Some((cqn, uidx)) = self
            .objs
            .qps
            .get(&qpn)
            .map(|q| (q.qpc.cqn_snd(), q.qpc.user_index()))
        else {
            return;
        };
        let c = uhca_fwif::cqe::Cqe64 {
            byte_cnt: byte_cnt.into(),
            srqn: uidx.into(),
            sop_drop_qpn: (((op.raw() as u32) << 24) | (qpn & 0x00ff_ffff)).into(),
            wqe_counter: counter.into(),
            ..Default::default()
        };
        self.post_cqe(cqn, c, CqeOpcode::Req, false, now);
    }

    /// A send WQE failed locally: its error CQE, then the QP goes to the error state.
    pub(crate) fn local_send_error(
        &mut self,
        qpn: u32,
        counter: u16,
        opcode: u8,
        syndrome: CqeSyndrome,
        now: u64,
    ) {
        // Earlier WQEs still in flight complete (with a flush) after this one in the model;
        // the error CQE names the failing WQE.
        let Some(q) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return;
        };
        self.post_err_cqe(
            q.cqn_snd(),
            qpn,
            counter,
            opcode,
            syndrome,
            CqeOpcode::ReqErr,
            q.user_index(),
            now,
        );
        if crate::objects::is_datagram_qp(QpServiceType::from_raw(q.st())) {
            // A UD send error stops only the send queue (SQER); SQERR2RTS resumes it.
            if let Some(qp) = self.objs.qps.get_mut(&qpn) {
                qp.qpc.set_state(QpState::Sqer.raw());
            }
            self.flush_qp(qpn, now);
            return;
        }
        self.qp_to_error(qpn, now);
    }

    /// The oldest outstanding WQE failed remotely (or its retries ran out).
    fn requester_error(&mut self, qpn: u32, syndrome: CqeSyndrome, now: u64) {
        let Some(w) = self
            .engine
            .qps
            .get_mut(&qpn)
            .and_then(|s| s.outstanding.pop_front())
        else {
            return;
        };
        // The QP's user index, as on every CQE: with CQE version 1 libmlx5 finds the QP of
        // an error completion by it (`get_req_context`).
        let Some((cqn, uidx)) = self
            .objs
            .qps
            .get(&qpn)
            .map(|q| (q.qpc.cqn_snd(), q.qpc.user_index()))
        else {
            return;
        };
        self.post_err_cqe(
            cqn,
            qpn,
            w.ctrl.counter,
            w.ctrl.opcode.raw(),
            syndrome,
            CqeOpcode::ReqErr,
            uidx,
            now,
        );
        self.qp_to_error(qpn, now);
    }

    /// Completes outstanding SEND and WRITE WQEs acknowledged by `ack_psn`. A READ or an
    /// atomic acknowledged without its response means the response was lost: retransmit
    /// (implied NAK). Returns whether anything progressed.
    fn ack_upto(&mut self, qpn: u32, ack_psn: u32, now: u64) -> bool {
        let mut progressed = false;
        loop {
            let Some(s) = self.engine.qps.get_mut(&qpn) else {
                return progressed;
            };
            let Some(head) = s.outstanding.front_mut() else {
                break;
            };
            let d = psn::diff(ack_psn, head.first_psn);
            if d < 0 {
                break;
            }
            if head.is_read_or_atomic() {
                // Acknowledged past a READ/atomic whose response did not come: resend it.
                if psn::diff(ack_psn, head.last_psn()) >= 0 {
                    let w = head.clone();
                    let from = w.acked;
                    self.engine.counters.retransmitted_packets += 1;
                    self.datapath().count(qpn, |c| c.implied_nak_seq_err += 1);
                    self.transmit(qpn, &w, from, now);
                }
                break;
            }
            let covered = (d as u32 + 1).min(head.npkts);
            if covered > head.acked {
                head.acked = covered;
                progressed = true;
            }
            if head.acked < head.npkts {
                break;
            }
            let w = s.outstanding.pop_front();
            if let Some(w) = w {
                if w.ctrl.signaled {
                    self.requester_cqe(qpn, w.ctrl.counter, w.ctrl.opcode, 0, now);
                }
                self.engine.recycle_gather_list(w.data);
            }
        }
        progressed
    }

    /// Progress resets the retry counters and restarts the timer.
    fn on_progress(&mut self, qpn: u32, now: u64) {
        let Some(qpc) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return;
        };
        let timeout = super::ack_timeout_ns(qpc.primary_address_path().ack_timeout());
        if let Some(s) = self.engine.qps.get_mut(&qpn) {
            s.retry_left = qpc.retry_count();
            s.rnr_left = qpc.rnr_retry();
            s.timer = if s.outstanding.is_empty() {
                None
            } else {
                timeout.map(|t| now + t)
            };
        }
    }

    /// Resends every outstanding WQE from its first unacknowledged packet.
    fn retransmit_all(&mut self, qpn: u32, now: u64) {
        let ws: Vec<SentWqe> = self
            .engine
            .qps
            .get(&qpn)
            .map(|s| s.outstanding.iter().cloned().collect())
            .unwrap_or_default();
        for w in ws {
            let from = w.acked;
            self.engine.counters.retransmitted_packets += (w.npkts - from.min(w.npkts)) as u64;
            if !self.transmit(qpn, &w, from, now) {
                return;
            }
        }
        let timeout = self
            .objs
            .qps
            .get(&qpn)
            .and_then(|q| super::ack_timeout_ns(q.qpc.primary_address_path().ack_timeout()));
        if let Some(s) = self.engine.qps.get_mut(&qpn) {
            s.timer = if s.outstanding.is_empty() {
                None
            } else {
                timeout.map(|t| now + t)
            };
        }
    }

    /// Fires the retransmission and RNR timers of `qpn` if due.
    pub(crate) fn requester_timers(&mut self, qpn: u32, now: u64) {
        let state = self
            .objs
            .qps
            .get(&qpn)
            .map(|q| QpState::from_raw(q.qpc.state()));
        if state != Some(QpState::Rts) {
            if let Some(s) = self.engine.qps.get_mut(&qpn) {
                s.timer = None;
                s.rnr_timer = None;
            }
            return;
        }
        let Some(s) = self.engine.qps.get_mut(&qpn) else {
            return;
        };
        if s.rnr_timer.is_some_and(|t| t <= now) {
            s.rnr_timer = None;
            self.retransmit_all(qpn, now);
            return;
        }
        if s.timer.is_some_and(|t| t <= now) {
            s.timer = None;
            if s.outstanding.is_empty() {
                return;
            }
            self.engine.counters.timeouts += 1;
            self.datapath().count(qpn, |c| c.local_ack_timeout_err += 1);
            let Some(s) = self.engine.qps.get_mut(&qpn) else {
                return;
            };
            if s.retry_left == 0 {
                self.requester_error(qpn, CqeSyndrome::TransportRetryExcErr, now);
                return;
            }
            s.retry_left -= 1;
            self.retransmit_all(qpn, now);
        }
    }

    /// A response (ACK, NAK, READ response, atomic acknowledgement) for a requester QP;
    /// then the SQ continues if it waited for a READ or atomic.
    pub(crate) fn requester_rx(&mut self, qpn: u32, t: &IbTransportRepr<'_>, now: u64) {
        self.requester_response(qpn, t, now);
        let blocked = self
            .engine
            .qps
            .get_mut(&qpn)
            .map(|s| std::mem::take(&mut s.sq_blocked))
            .unwrap_or(false);
        if blocked {
            self.process_sq(qpn, now);
        }
    }

    fn requester_response(&mut self, qpn: u32, t: &IbTransportRepr<'_>, now: u64) {
        let p = t.bth.psn;
        let Some(head_psn) = self
            .engine
            .qps
            .get(&qpn)
            .and_then(|s| s.outstanding.front().map(|w| w.first_psn))
        else {
            return; // nothing outstanding: a stale response
        };
        if psn::diff(p, psn::add(head_psn, 0xff_ffff)) < 0 {
            return; // older than anything outstanding
        }
        let next = self.engine.qps.get(&qpn).map(|s| s.next_psn).unwrap_or(p);
        if psn::diff(p, next) >= 0 {
            return; // a response for a PSN never sent (a ghost ACK)
        }
        match t.bth.opcode {
            Opcode::RcAcknowledge => {
                let Some(aeth) = t.aeth else { return };
                match aeth.syndrome {
                    AethSyndrome::Ack { .. } => {
                        if self.ack_upto(qpn, p, now) {
                            self.on_progress(qpn, now);
                        }
                    }
                    AethSyndrome::RnrNak { timer } => {
                        self.engine.counters.rnr_naks_received += 1;
                        self.datapath().count(qpn, |c| c.rnr_nak_retry_err += 1);
                        if self.ack_upto(qpn, psn::add(p, 0xff_ffff), now) {
                            self.on_progress(qpn, now);
                        }
                        let infinite = self
                            .objs
                            .qps
                            .get(&qpn)
                            .is_some_and(|q| q.qpc.rnr_retry() == 7);
                        let Some(s) = self.engine.qps.get_mut(&qpn) else {
                            return;
                        };
                        if !infinite {
                            if s.rnr_left == 0 {
                                self.requester_error(qpn, CqeSyndrome::RnrRetryExcErr, now);
                                return;
                            }
                            s.rnr_left -= 1;
                        }
                        s.timer = None;
                        s.rnr_timer = Some(now + rnr_timer_micros(timer) as u64 * 1000);
                    }
                    AethSyndrome::Nak(code) => {
                        if self.ack_upto(qpn, psn::add(p, 0xff_ffff), now) {
                            self.on_progress(qpn, now);
                        }
                        match code {
                            NakCode::PsnSequenceError => {
                                self.datapath().count(qpn, |c| c.packet_seq_err += 1);
                                let Some(s) = self.engine.qps.get_mut(&qpn) else {
                                    return;
                                };
                                if s.retry_left == 0 {
                                    self.requester_error(
                                        qpn,
                                        CqeSyndrome::TransportRetryExcErr,
                                        now,
                                    );
                                    return;
                                }
                                s.retry_left -= 1;
                                self.retransmit_all(qpn, now);
                            }
                            NakCode::InvalidRequest => {
                                self.requester_error(qpn, CqeSyndrome::RemoteInvalReqErr, now)
                            }
                            NakCode::RemoteAccessError => {
                                self.requester_error(qpn, CqeSyndrome::RemoteAccessErr, now)
                            }
                            _ => self.requester_error(qpn, CqeSyndrome::RemoteOpErr, now),
                        }
                    }
                    AethSyndrome::Reserved(_) => {}
                }
            }
            Opcode::RcAtomicAcknowledge => {
                if self.ack_upto(qpn, psn::add(p, 0xff_ffff), now) {
                    self.on_progress(qpn, now);
                }
                let Some(orig) = t.atomic_ack_eth.map(|a| a.orig_rem_dt) else {
                    return;
                };
                let Some(s) = self.engine.qps.get_mut(&qpn) else {
                    return;
                };
                let Some(head) = s.outstanding.front() else {
                    return;
                };
                if head.first_psn != p
                    || !matches!(head.ctrl.opcode, WqeOpcode::AtomicCs | WqeOpcode::AtomicFa)
                {
                    return;
                }
                let w = s.outstanding.pop_front();
                if let Some(w) = w {
                    let bytes = self.atomic_result_bytes(orig);
                    self.finish_local_write(qpn, &w, 0, &bytes, true, now);
                }
            }
            Opcode::RcRdmaReadResponseFirst
            | Opcode::RcRdmaReadResponseMiddle
            | Opcode::RcRdmaReadResponseLast
            | Opcode::RcRdmaReadResponseOnly => {
                // Everything before the READ is acknowledged by its response.
                let Some(s) = self.engine.qps.get(&qpn) else {
                    return;
                };
                let Some(read_first) = s
                    .outstanding
                    .iter()
                    .find(|w| {
                        w.ctrl.opcode == WqeOpcode::RdmaRead
                            && psn::diff(p, w.first_psn) >= 0
                            && psn::diff(p, w.last_psn()) <= 0
                    })
                    .map(|w| w.first_psn)
                else {
                    return;
                };
                if self.ack_upto(qpn, psn::add(read_first, 0xff_ffff), now) {
                    self.on_progress(qpn, now);
                }
                let mtu = self
                    .objs
                    .qps
                    .get(&qpn)
                    .map(|q| path_mtu(q.qpc.mtu()))
                    .unwrap_or(256);
                let Some(s) = self.engine.qps.get_mut(&qpn) else {
                    return;
                };
                let Some(head) = s.outstanding.front_mut() else {
                    return;
                };
                if head.first_psn != read_first || psn::add(head.first_psn, head.acked) != p {
                    return; // out of order: the timer resends the rest of the READ
                }
                let offset = head.acked as u64 * mtu;
                head.acked += 1;
                let done = head.acked == head.npkts;
                let w = head.clone();
                if done {
                    s.outstanding.pop_front();
                }
                self.finish_local_write(qpn, &w, offset, t.payload, done, now);
                self.on_progress(qpn, now);
            }
            _ => {}
        }
    }

    /// An 8-byte atomic's original value as the requester writes it into the local buffer,
    /// in the byte order of the device's 8-byte atomic endianness mode
    /// ([`Device::atomic_8b_host_order`]).
    fn atomic_result_bytes(&self, orig: u64) -> [u8; 8] {
        if self.atomic_8b_host_order() {
            orig.to_le_bytes()
        } else {
            orig.to_be_bytes()
        }
    }

    /// Whether this device's 8-byte atomics work on words in the host's byte order rather
    /// than big-endian: the requester's result written into the local buffer, and the
    /// responder's target word (read, changed and written back) and the original value it
    /// returns. Big-endian (network order) while `atomic_req_8B_endianness_mode` is 0, the
    /// power-on value; the host's order once the driver set it to host endianness (1) with
    /// SET_HCA_CAP of the atomic capability (as Linux's `handle_hca_cap_atomic` does when
    /// `supported_atomic_req_8B_endianness_mode_1` is offered; Soft-RoCE likewise works on a
    /// host-order `u64`). The host's order is what the HOST_ENDIANNESS register says (`he`
    /// set: big-endian, so host order is big-endian too).
    pub(crate) fn atomic_8b_host_order(&self) -> bool {
        let mode = self.fw.caps.atomic_cur.atomic_req_8B_endianness_mode();
        mode == ATOMIC_REQ_MODE_HOST_ENDIANNESS && !self.fw.host_endianness_he
    }

    /// Writes READ response data or an atomic result into the WQE's local SGL; completes the
    /// WQE when `complete`.
    fn finish_local_write(
        &mut self,
        qpn: u32,
        w: &SentWqe,
        offset: u64,
        data: &[u8],
        complete: bool,
        now: u64,
    ) {
        let Some(keys) = self.objs.qps.get(&qpn).map(|q| LocalKeys {
            pd: q.qpc.pd(),
            rlky: q.qpc.rlky(),
        }) else {
            return;
        };
        let local: Vec<Sge> = w.local.clone();
        let data = if w.is_read_or_atomic() && w.ctrl.opcode != WqeOpcode::RdmaRead {
            &data[..data.len().min(8)]
        } else {
            data
        };
        match self
            .datapath()
            .scatter_sges(keys, &local, offset, data, now)
        {
            Ok(true) => {}
            Ok(false) => {
                self.post_send_error_for(qpn, w, CqeSyndrome::LocalLengthErr, now);
                return;
            }
            Err(_) => {
                self.post_send_error_for(qpn, w, CqeSyndrome::LocalProtErr, now);
                return;
            }
        }
        if complete {
            if w.ctrl.signaled {
                let n = if w.ctrl.opcode == WqeOpcode::RdmaRead {
                    w.len
                } else {
                    8
                } as u32;
                self.requester_cqe(qpn, w.ctrl.counter, w.ctrl.opcode, n, now);
            }
            self.on_progress(qpn, now);
        }
    }

    fn post_send_error_for(&mut self, qpn: u32, w: &SentWqe, syndrome: CqeSyndrome, now: u64) {
        if let Some(s) = self.engine.qps.get_mut(&qpn)
            && s.outstanding
                .front()
                .is_some_and(|h| h.ctrl.counter == w.ctrl.counter)
        {
            s.outstanding.pop_front();
        }
        self.local_send_error(qpn, w.ctrl.counter, w.ctrl.opcode.raw(), syndrome, now);
    }
}
