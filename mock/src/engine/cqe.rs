//! CQEs and the events they raise: the CQE at the producer index with the owner bit the
//! device writes (`(pi >> log_cq_size) & 1`), error CQEs, CQ overrun (a CQ error event),
//! completion events for armed CQs, and the flush of a QP in the error state.

use crate::device::Device;
use uhca_fwif::consts::{
    ADAPTER_PAGE_SIZE, CQ_SET_CI, CqeOpcode, CqeSyndrome, EventType, QpState, RCV_DBR, SND_DBR,
};
use uhca_fwif::cqe::{Cqe64, ErrCqe, op_own_of};
use zerocopy::IntoBytes;

/// `op_own` bit 1: the completion is solicited.
pub const CQE_SOLICITED: u8 = 0x2;
/// CQ error event syndrome: CQ overrun.
pub const CQ_ERROR_OVERRUN: u8 = 1;

impl Device {
    /// Writes a CQE (its `op_own` is set here) to CQ `cqn`. Returns whether it was written.
    pub(crate) fn post_cqe(
        &mut self,
        cqn: u32,
        mut c: Cqe64,
        opcode: CqeOpcode,
        solicited: bool,
        now: u64,
    ) -> bool {
        let Some(cq) = self.objs.cqs.get(&cqn) else {
            return false;
        };
        let cqc = cq.cqc;
        let log = cqc.log_cq_size().min(24);
        let size = 1u32 << log;
        let cqe_size: u64 = if cqc.cqe_sz() == 1 { 128 } else { 64 };
        let page = (ADAPTER_PAGE_SIZE as u64) << cqc.log_page_size().min(20);
        let pi = cq.pi;
        // The slot's IOVA, from the CQ's page list in place, `page_offset` 64ths of a page
        // into the first page: a CQE (64 bytes at a multiple of 64 from a start that is a
        // multiple of 64) never crosses a page of 4 KiB or more.
        let start = cqc.page_offset() as u64 * (page / 64);
        let off = start + (pi & (size - 1)) as u64 * cqe_size + (cqe_size - 64);
        let slot = cq
            .pas
            .get((off / page) as usize)
            .map(|&base| base.wrapping_add(off % page));
        let ci = self
            .datapath()
            .dbr_dword(cqc.dbr_addr(), CQ_SET_CI as u64, now)
            .unwrap_or(0)
            & 0x00ff_ffff;
        if (pi.wrapping_sub(ci) & 0x00ff_ffff) >= size && !cqc.oi() {
            self.engine.counters.cq_overruns += 1;
            let mut data = [0u8; 28];
            data[..4].copy_from_slice(&cqn.to_be_bytes());
            data[11] = CQ_ERROR_OVERRUN;
            self.post_event(EventType::CqError.raw(), 0, data, now, false);
            self.note(now, format!("CQ {cqn:#x} overrun: a CQE was lost"));
            return false;
        }
        if !matches!(opcode, CqeOpcode::ReqErr | CqeOpcode::RespErr) {
            // Free-running timestamp: the internal timer (1 GHz, from firmware start).
            let ts = now.saturating_sub(self.fw.boot_ns);
            c.timestamp_h = ((ts >> 32) as u32).into();
            c.timestamp_l = (ts as u32).into();
        }
        let owner = ((pi >> log) & 1) as u8;
        c.op_own = op_own_of(opcode, owner) | if solicited { CQE_SOLICITED } else { 0 };
        let bytes = c.as_bytes();
        // The body first, then the byte with the owner bit.
        let Some(slot) = slot else {
            return false;
        };
        if self
            .iommu
            .dma_write(slot, &bytes[..63], now, "CQE")
            .is_err()
            || self
                .iommu
                .dma_write(slot.wrapping_add(63), &bytes[63..], now, "CQE")
                .is_err()
        {
            return false;
        }
        if let Some(cq) = self.objs.cqs.get_mut(&cqn) {
            cq.pi = pi.wrapping_add(1);
        }
        self.engine.counters.cqes += 1;
        let error = matches!(opcode, CqeOpcode::ReqErr | CqeOpcode::RespErr);
        if let Some(&sol_only) = self.engine.cq_armed.get(&cqn)
            && (!sol_only || solicited || error)
        {
            self.completion_event(cqn, now);
        }
        true
    }

    /// Posts a completion event (type COMP) for `cqn` to its EQ and disarms the CQ.
    fn completion_event(&mut self, cqn: u32, now: u64) {
        self.engine.cq_armed.remove(&cqn);
        let cq = self.objs.cqs.get(&cqn);
        let Some(eqn) = cq.map(|c| c.cqc.c_eqn_or_apu_element()) else {
            return;
        };
        let Ok(eqn) = u8::try_from(eqn) else {
            return;
        };
        let mut data = [0u8; 28];
        data[24..28].copy_from_slice(&(cqn & 0x00ff_ffff).to_be_bytes());
        if self.write_eqe(eqn, EventType::Comp.raw(), 0, data, now) {
            self.engine.counters.completion_events += 1;
        }
    }

    /// Hook of the CQ doorbell: an arm request. CQEs the consumer has not seen yet (per the
    /// arm word's consumer index) raise the event at once.
    pub(crate) fn engine_arm_cq(&mut self, cqn: u32, now: u64) {
        let Some(cq) = self.objs.cqs.get(&cqn) else {
            return;
        };
        let Some((_, sol, ci)) = cq.arm else {
            return;
        };
        let pending = (cq.pi & 0x00ff_ffff) != (ci & 0x00ff_ffff);
        self.engine.cq_armed.insert(cqn, sol);
        if pending && !sol {
            self.completion_event(cqn, now);
        }
    }

    /// An error CQE.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post_err_cqe(
        &mut self,
        cqn: u32,
        qpn: u32,
        counter: u16,
        wqe_opcode: u8,
        syndrome: CqeSyndrome,
        opcode: CqeOpcode,
        srqn: u32,
        now: u64,
    ) -> bool {
        let e = ErrCqe {
            srqn: srqn.into(),
            syndrome: syndrome.raw(),
            s_wqe_opcode_qpn: (((wqe_opcode as u32) << 24) | (qpn & 0x00ff_ffff)).into(),
            wqe_counter: counter.into(),
            ..Default::default()
        };
        let Ok(c) = zerocopy::FromBytes::read_from_bytes(e.as_bytes()) else {
            return false;
        };
        self.datapath().count_error_cqe(qpn, opcode, syndrome);
        self.post_cqe(cqn, c, opcode, false, now)
    }

    /// Flushes a QP in the error state: every outstanding and posted send WQE and every
    /// posted receive WQE completes with WR_FLUSH_ERR. In SQER only the send WQEs.
    pub(crate) fn flush_qp(&mut self, qpn: u32, now: u64) {
        let Some(qpc) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return;
        };
        let state = QpState::from_raw(qpc.state());
        if state != QpState::Err && state != QpState::Sqer {
            return;
        }
        // SQER (UD): only the send queue is flushed; the receive queue keeps working.
        let sq_only = state == QpState::Sqer;
        let st = self.engine.qps.entry(qpn).or_default();
        st.timer = None;
        st.rnr_timer = None;
        if !sq_only {
            st.recv = None;
            st.write = None;
            st.ack_pending = false;
        }
        let outstanding: Vec<_> = st.outstanding.drain(..).collect();
        let uidx = qpc.user_index();
        for w in outstanding {
            self.post_err_cqe(
                qpc.cqn_snd(),
                qpn,
                w.ctrl.counter,
                w.ctrl.opcode.raw(),
                CqeSyndrome::WrFlushErr,
                CqeOpcode::ReqErr,
                uidx,
                now,
            );
        }
        // Send WQEs posted but not fetched.
        if let Some((_, n, _)) = self.sq_geometry(qpn)
            && let Some(pi) = self
                .datapath()
                .dbr_dword(qpc.dbr_addr(), SND_DBR as u64, now)
        {
            let pi = pi as u16;
            let mut guard = n as u32 + 1;
            loop {
                let ci = self.engine.qps.entry(qpn).or_default().sq_ci;
                if ci == pi || guard == 0 || pi.wrapping_sub(ci) > n {
                    break;
                }
                guard -= 1;
                let (op, bbs) = match self.read_send_wqe(qpn, ci, now) {
                    Ok((raw, bbs)) => (raw.get(3).copied().unwrap_or(0), bbs),
                    Err(b) => (b.opcode, b.bbs),
                };
                if let Some(s) = self.engine.qps.get_mut(&qpn) {
                    s.sq_ci = ci.wrapping_add(bbs);
                }
                self.post_err_cqe(
                    qpc.cqn_snd(),
                    qpn,
                    ci,
                    op,
                    CqeSyndrome::WrFlushErr,
                    CqeOpcode::ReqErr,
                    uidx,
                    now,
                );
            }
        }
        // Receive WQEs of the QP's own RQ (an SRQ is shared and not flushed).
        if !sq_only
            && qpc.rq_type() == 0
            && let Some(pi) = self
                .datapath()
                .dbr_dword(qpc.dbr_addr(), RCV_DBR as u64, now)
        {
            let pi = pi as u16;
            let size = 1u32 << qpc.log_rq_size();
            let mut guard = size + 1;
            loop {
                let ci = self.engine.qps.entry(qpn).or_default().rq_ci;
                if ci as u16 == pi || guard == 0 || pi.wrapping_sub(ci as u16) as u32 > size {
                    break;
                }
                guard -= 1;
                if let Some(s) = self.engine.qps.get_mut(&qpn) {
                    s.rq_ci = ci.wrapping_add(1);
                }
                self.post_err_cqe(
                    qpc.cqn_rcv(),
                    qpn,
                    ci as u16,
                    0,
                    CqeSyndrome::WrFlushErr,
                    CqeOpcode::RespErr,
                    uidx,
                    now,
                );
            }
        }
    }
}
