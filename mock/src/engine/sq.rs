//! The send queue: fetching WQEs through the IOMMU between the last processed WQE and the
//! doorbell record's send counter, and decoding their segments by opcode and QP type.

use super::mem::{QueueBuf, Sge};
pub(crate) use super::state::Piece;
use super::state::SendCtrl;
use crate::device::Device;
use uhca_fwif::consts::{
    INLINE_SEG, QpServiceType, QpState, SEND_WQE_BB, SEND_WQE_DS, SEND_WQE_MAX_SIZE, SND_DBR,
    WqeCtrlFlags, WqeOpcode,
};
use uhca_fwif::wqe::{Av, WqeAtomicSeg, WqeCtrlSeg, WqeDataSeg, WqeRaddrSeg, WqeXrcSeg};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// A decoded send WQE.
#[derive(Clone, Debug)]
pub(crate) struct Wqe {
    pub(crate) ctrl: SendCtrl,
    /// Fence: wait until earlier RDMA READs and atomics complete.
    pub(crate) fence: bool,
    pub(crate) av: Option<Av>,
    pub(crate) raddr: Option<(u64, u32)>,
    pub(crate) atomic: Option<(u64, u64)>,
    pub(crate) data: Vec<Piece>,
    /// XRC: the remote XRC SRQ (the WQE's XRC segment), 0 otherwise.
    pub(crate) xrc_srqn: u32,
}

/// Why a WQE could not be decoded: the WQE size in basic blocks and its opcode, for the
/// error CQE (LOCAL_QP_OP_ERR).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BadWqe {
    pub(crate) bbs: u16,
    pub(crate) opcode: u8,
}

impl Device {
    /// The send queue's geometry: (byte offset in the QP buffer, WQEBBs, page size).
    pub(crate) fn sq_geometry(&self, qpn: u32) -> Option<(u64, u16, u64)> {
        let q = &self.objs.qps.get(&qpn)?.qpc;
        if q.no_sq() {
            return None;
        }
        let rq_bytes = if q.rq_type() == 0 {
            (1u64 << q.log_rq_size()) * (16u64 << q.log_rq_stride())
        } else {
            0
        };
        let page = (uhca_fwif::consts::ADAPTER_PAGE_SIZE as u64) << q.log_page_size().min(20);
        Some((rq_bytes, 1u16 << q.log_sq_size().min(15), page))
    }

    /// Reads the raw bytes of the WQE at WQEBB counter `counter`; returns them and the
    /// number of basic blocks.
    pub(crate) fn read_send_wqe(
        &mut self,
        qpn: u32,
        counter: u16,
        now: u64,
    ) -> Result<(Vec<u8>, u16), BadWqe> {
        let mut raw = Vec::new();
        self.read_send_wqe_into(qpn, counter, now, &mut raw)
            .map(|bbs| (raw, bbs))
    }

    /// [`Device::read_send_wqe`] into `raw` (emptied first), reusing its memory.
    pub(crate) fn read_send_wqe_into(
        &mut self,
        qpn: u32,
        counter: u16,
        now: u64,
        raw: &mut Vec<u8>,
    ) -> Result<u16, BadWqe> {
        raw.clear();
        let bad = BadWqe { bbs: 1, opcode: 0 };
        let (base, n, page) = self.sq_geometry(qpn).ok_or(bad)?;
        let bb = |i: u16| base + ((i & (n - 1)) as u64) * SEND_WQE_BB as u64;
        let mut first = [0u8; SEND_WQE_BB];
        if !self.datapath().queue_read(
            QueueBuf::Qp(qpn),
            page,
            bb(counter),
            &mut first,
            now,
            "send WQE",
        ) {
            return Err(bad);
        }
        let Ok((ctrl, _)) = WqeCtrlSeg::read_from_prefix(&first) else {
            return Err(bad);
        };
        let size = ctrl.ds() as usize * SEND_WQE_DS;
        let opcode = ctrl.opmod_idx_opcode.get() as u8;
        if !(SEND_WQE_DS..=SEND_WQE_MAX_SIZE).contains(&size) {
            return Err(BadWqe { bbs: 1, opcode });
        }
        let bbs = size.div_ceil(SEND_WQE_BB) as u16;
        raw.extend_from_slice(&first);
        for k in 1..bbs {
            let mut b = [0u8; SEND_WQE_BB];
            if !self.datapath().queue_read(
                QueueBuf::Qp(qpn),
                page,
                bb(counter.wrapping_add(k)),
                &mut b,
                now,
                "send WQE",
            ) {
                return Err(BadWqe { bbs, opcode });
            }
            raw.extend_from_slice(&b);
        }
        raw.truncate(size);
        Ok(bbs)
    }

    /// Decodes a send WQE's segments.
    pub(crate) fn decode_send_wqe(
        &mut self,
        qpn: u32,
        st: QpServiceType,
        raw: &[u8],
        bbs: u16,
        counter: u16,
        now: u64,
    ) -> Result<Wqe, BadWqe> {
        let Ok((ctrl, _)) = WqeCtrlSeg::read_from_prefix(raw) else {
            return Err(BadWqe { bbs, opcode: 0 });
        };
        let op = ctrl.opcode();
        let bad = BadWqe {
            bbs,
            opcode: op.raw(),
        };
        if ctrl.qpn() != qpn {
            self.note(
                now,
                format!(
                    "send WQE {counter} of QP {qpn:#x} names QP {:#x} in its control segment",
                    ctrl.qpn()
                ),
            );
            return Err(bad);
        }
        if ctrl.wqe_index() != counter {
            self.note(
                now,
                format!(
                    "send WQE at counter {counter} of QP {qpn:#x} carries index {}",
                    ctrl.wqe_index()
                ),
            );
        }
        let flags = ctrl.flags();
        let mut w = Wqe {
            ctrl: SendCtrl {
                counter,
                opcode: op,
                // CE bits 3:2: 0 means a CQE on error only.
                signaled: ctrl.fm_ce_se & WqeCtrlFlags::CQ_UPDATE_AND_EQE.bits() != 0,
                solicited: flags.contains(WqeCtrlFlags::SOLICITED),
                imm: ctrl.imm.get(),
            },
            // Fence mode bits 7:5: any fence waits for earlier READs and atomics.
            fence: ctrl.fm_ce_se & 0xe0 != 0,
            av: None,
            raddr: None,
            atomic: None,
            data: self.engine.gather_list(),
            xrc_srqn: 0,
        };
        let mut off = SEND_WQE_DS;
        let seg = |off: usize, n: usize| raw.get(off..off + n).ok_or(bad);
        // A NOP is its control segment alone (a datagram QP's too: it sends nothing, so
        // it has no address).
        if crate::objects::is_datagram_qp(st) && op != WqeOpcode::Nop {
            // The datagram segment: the extended 48-byte address vector when `dqp_dct`
            // bit 31 is set, else the compact 16-byte one (no MAC, GID or GRH fields),
            // after which the next segment starts. A driver that writes 48 bytes with the
            // bit clear gets its GRH fields read as data segments, as on a ConnectX.
            let head = seg(off, Av::COMPACT_LEN)?;
            let dqp_dct = u32::from_be_bytes([head[8], head[9], head[10], head[11]]);
            let len = if dqp_dct & Av::EXTENDED_UD_AV != 0 {
                size_of::<Av>()
            } else {
                Av::COMPACT_LEN
            };
            let mut av = Av::new_zeroed();
            av.as_mut_bytes()[..len].copy_from_slice(seg(off, len)?);
            w.av = Some(av);
            off += len;
        }
        if st == QpServiceType::Xrc && op != WqeOpcode::Nop {
            // The XRC segment: the remote XRC SRQ, right after the control segment.
            let x =
                WqeXrcSeg::read_from_bytes(seg(off, size_of::<WqeXrcSeg>())?).map_err(|_| bad)?;
            w.xrc_srqn = x.xrc_srqn.get() & 0x00ff_ffff;
            off += size_of::<WqeXrcSeg>();
        }
        match op {
            WqeOpcode::Send | WqeOpcode::SendImm | WqeOpcode::Nop => {}
            WqeOpcode::RdmaWrite | WqeOpcode::RdmaWriteImm | WqeOpcode::RdmaRead
                if !crate::objects::is_datagram_qp(st) =>
            {
                let r = WqeRaddrSeg::read_from_bytes(seg(off, 16)?).map_err(|_| bad)?;
                w.raddr = Some((r.raddr.get(), r.rkey.get()));
                off += 16;
            }
            WqeOpcode::AtomicCs | WqeOpcode::AtomicFa
                if matches!(st, QpServiceType::Rc | QpServiceType::Xrc) =>
            {
                let r = WqeRaddrSeg::read_from_bytes(seg(off, 16)?).map_err(|_| bad)?;
                w.raddr = Some((r.raddr.get(), r.rkey.get()));
                off += 16;
                let a = WqeAtomicSeg::read_from_bytes(seg(off, 16)?).map_err(|_| bad)?;
                w.atomic = Some((a.swap_add.get(), a.compare.get()));
                off += 16;
            }
            _ => return Err(bad),
        }
        if op == WqeOpcode::RdmaRead && st == QpServiceType::Uc {
            return Err(bad);
        }
        while off + 4 <= raw.len() {
            let bc = u32::from_be_bytes([raw[off], raw[off + 1], raw[off + 2], raw[off + 3]]);
            if bc & INLINE_SEG != 0 {
                let len = (bc & !INLINE_SEG) as usize;
                let d = seg(off + 4, len)?;
                w.data.push(Piece::Inline(d.to_vec()));
                off += (4 + len).next_multiple_of(SEND_WQE_DS);
            } else {
                let d = WqeDataSeg::read_from_bytes(seg(off, 16)?).map_err(|_| bad)?;
                // A byte count of 0 means 2 GiB.
                let len = match d.byte_count.get() {
                    0 => 0x8000_0000,
                    n => n,
                };
                w.data.push(Piece::Sge(Sge {
                    lkey: d.lkey.get(),
                    addr: d.addr.get(),
                    len,
                }));
                off += 16;
            }
        }
        Ok(w)
    }

    /// Whether `w` must wait: a fence while READs or atomics are outstanding, or a READ or
    /// atomic beyond `2^log_sra_max` outstanding ones.
    fn must_wait(&self, qpn: u32, w: &Wqe) -> bool {
        let is_read = matches!(
            w.ctrl.opcode,
            WqeOpcode::RdmaRead | WqeOpcode::AtomicCs | WqeOpcode::AtomicFa
        );
        if !w.fence && !is_read {
            // Neither waits for anything: no need to count what is outstanding.
            return false;
        }
        let Some(s) = self.engine.qps.get(&qpn) else {
            return false;
        };
        let reads = s
            .outstanding
            .iter()
            .filter(|o| o.is_read_or_atomic())
            .count();
        if reads == 0 {
            return false;
        }
        let limit = self
            .objs
            .qps
            .get(&qpn)
            .map(|q| 1usize << q.qpc.log_sra_max())
            .unwrap_or(1);
        w.fence || (is_read && reads >= limit)
    }

    /// Processes the send queue of `qpn` up to the doorbell record's send counter.
    pub(crate) fn process_sq(&mut self, qpn: u32, now: u64) {
        let Some(qpc) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return;
        };
        let state = QpState::from_raw(qpc.state());
        match state {
            QpState::Rts => {}
            QpState::Err | QpState::Sqer => {
                self.flush_qp(qpn, now);
                return;
            }
            s => {
                self.note(
                    now,
                    format!("send doorbell for QP {qpn:#x} in state {s:?}: not processed"),
                );
                return;
            }
        }
        let Some((_, n, _)) = self.sq_geometry(qpn) else {
            return;
        };
        let Some(pi) = self
            .datapath()
            .dbr_dword(qpc.dbr_addr(), SND_DBR as u64, now)
        else {
            return;
        };
        let pi = pi as u16;
        let st = QpServiceType::from_raw(qpc.st());
        let mut guard = n as u32 + 1;
        loop {
            let ci = self.engine.qps.entry(qpn).or_default().sq_ci;
            if ci == pi || guard == 0 {
                break;
            }
            guard -= 1;
            if pi.wrapping_sub(ci) > n {
                self.note(
                    now,
                    format!("QP {qpn:#x}: send counter {pi} is more than the SQ ahead of {ci}"),
                );
                break;
            }
            let mut raw = std::mem::take(&mut self.engine.wqe_buf);
            let fetched = self
                .read_send_wqe_into(qpn, ci, now, &mut raw)
                .and_then(|bbs| {
                    self.decode_send_wqe(qpn, st, &raw, bbs, ci, now)
                        .map(|w| (w, bbs))
                });
            self.engine.wqe_buf = raw;
            if let Ok((w, _)) = &fetched
                && self.must_wait(qpn, w)
            {
                if let Some(s) = self.engine.qps.get_mut(&qpn) {
                    s.sq_blocked = true;
                }
                break;
            }
            match fetched {
                Ok((w, bbs)) => {
                    if let Some(s) = self.engine.qps.get_mut(&qpn) {
                        s.sq_ci = ci.wrapping_add(bbs);
                    }
                    self.post_wqe(qpn, w, now);
                }
                Err(b) => {
                    if let Some(s) = self.engine.qps.get_mut(&qpn) {
                        s.sq_ci = ci.wrapping_add(b.bbs);
                    }
                    self.local_send_error(
                        qpn,
                        ci,
                        b.opcode,
                        uhca_fwif::consts::CqeSyndrome::LocalQpOpErr,
                        now,
                    );
                }
            }
            if self
                .objs
                .qps
                .get(&qpn)
                .is_none_or(|q| QpState::from_raw(q.qpc.state()) != QpState::Rts)
            {
                break;
            }
        }
    }
}
