//! The receive side: frames are parsed (malformed ones dropped and counted), matched to a
//! QP by BTH:DestQP, checked (state, P_Key, transport, PSN) and executed. RC responders
//! ACK (coalesced), NAK sequence errors once per gap, answer duplicates (re-ACK, READ
//! re-executed, an atomic's saved result returned without executing it again), RNR NAK
//! when no receive WQE is posted, and NAK remote access errors without writing anything.
//! UC drops packets after a PSN gap; UD checks the Q_Key and places the GRH (or the IP
//! header) in the first 40 bytes of the receive buffer.

use super::mem::{Access, KeyError, LocalKeys};
use super::requester::{path_mtu, ud_mtu};
use super::{ACK_COALESCE_PACKETS, RESPONDER_RESOURCES, RecvProgress, RespResource, WriteProgress};
use crate::caps::DEFAULT_PKEY;
use crate::caps::LinkLayer;
use crate::device::Device;
use crate::wire::ib::RxPrediction as IbRxPrediction;
use crate::wire::ib::psn;
use crate::wire::roce::RxPrediction;
use crate::wire::{
    AethSyndrome, BthRepr, IbTransportRepr, IpRepr, MessagePosition, NakCode, Opcode,
    TransportService,
};
use uhca_fwif::consts::{
    CQE_ROCE_L3_HEADER_TYPE_IPV4, CQE_ROCE_L3_HEADER_TYPE_IPV6, CqeOpcode, CqeSyndrome,
    QpServiceType, QpState,
};
use uhca_fwif::cqe::{CQE_FLAGS_GRH, Cqe64};
use uhca_fwif::ctx::Qpc;

/// The bytes in front of the payload of a UD receive (the GRH, or the IP header).
pub const UD_GRH_BYTES: usize = 40;

/// The RoCE packet type's UDP bit in a UD CQE's service-level field (RoCEv2).
const ROCE_PKT_UDP: u8 = 0x8;

/// What the link and network headers of a received packet said.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RxInfo {
    pub(crate) slid: u16,
    /// The 40 bytes a UD receive places first (GRH, or an IPv4 header in the last 20).
    pub(crate) grh: Option<[u8; UD_GRH_BYTES]>,
    /// RoCE L3 header type for the CQE (`l4_l3_hdr_type[3:2]`).
    pub(crate) l3: Option<u8>,
}

/// How a responder operation failed.
enum Fail {
    /// NAK with this code and put the QP in the error state (a CQE for the receive WQE
    /// in progress with the syndrome, if any).
    Nak(NakCode, Option<CqeSyndrome>),
    /// RNR NAK (no receive WQE).
    Rnr,
    /// Drop silently (UC).
    Drop,
}

fn is_send(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        RcSendFirst
            | RcSendMiddle
            | RcSendLast
            | RcSendLastWithImmediate
            | RcSendOnly
            | RcSendOnlyWithImmediate
            | UcSendFirst
            | UcSendMiddle
            | UcSendLast
            | UcSendLastWithImmediate
            | UcSendOnly
            | UcSendOnlyWithImmediate
    )
}

fn is_write(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        RcRdmaWriteFirst
            | RcRdmaWriteMiddle
            | RcRdmaWriteLast
            | RcRdmaWriteLastWithImmediate
            | RcRdmaWriteOnly
            | RcRdmaWriteOnlyWithImmediate
            | UcRdmaWriteFirst
            | UcRdmaWriteMiddle
            | UcRdmaWriteLast
            | UcRdmaWriteLastWithImmediate
            | UcRdmaWriteOnly
            | UcRdmaWriteOnlyWithImmediate
    )
}

/// The length check of a SEND or WRITE request packet (IB spec vol. 1, 9.7.5.1): a FIRST
/// or MIDDLE carries exactly the path MTU (the QP context's `mtu`), an ONLY or LAST at most
/// that. A packet failing it is a malformed request (NAK Invalid Request on RC), whatever
/// its RETH length says.
fn fits_path_mtu(qpc: &Qpc, t: &IbTransportRepr<'_>) -> bool {
    let mtu = path_mtu(qpc.mtu());
    let n = t.payload.len() as u64;
    match t.bth.opcode.position() {
        Some(MessagePosition::First | MessagePosition::Middle) => n == mtu,
        _ => n <= mtu,
    }
}

impl Device {
    /// One frame from the wire.
    pub(crate) fn receive_frame(&mut self, f: &[u8], now: u64) {
        if self.fw.port_state != uhca_fwif::consts::PortState::Active {
            self.engine.counters.port_down_drops += 1;
            return;
        }
        self.engine.counters.rx_packets += 1;
        match self.fw.port_type() {
            LinkLayer::Ethernet => {
                // The next packets of a message carry the same headers but the PSN: they
                // are parsed as predicted (the ICRC is still checked).
                let Ok(r) = RxPrediction::parse_keeping(&mut self.engine.rx_prediction, f) else {
                    self.engine.counters.rx_malformed += 1;
                    return;
                };
                let at = r.eth.buffer_len();
                let mut grh = [0u8; UD_GRH_BYTES];
                let l3 = match r.ip {
                    IpRepr::Ipv4(_) => {
                        if let Some(h) = f.get(at..at + 20) {
                            grh[20..].copy_from_slice(h);
                        }
                        CQE_ROCE_L3_HEADER_TYPE_IPV4
                    }
                    IpRepr::Ipv6(_) => {
                        if let Some(h) = f.get(at..at + 40) {
                            grh.copy_from_slice(h);
                        }
                        CQE_ROCE_L3_HEADER_TYPE_IPV6
                    }
                };
                let info = RxInfo {
                    slid: 0,
                    grh: Some(grh),
                    l3: Some(l3),
                };
                self.dispatch(&r.transport, &info, now);
            }
            LinkLayer::InfiniBand => {
                let Ok(p) = IbRxPrediction::parse_keeping(&mut self.engine.ib_rx_prediction, f)
                else {
                    self.engine.counters.rx_malformed += 1;
                    return;
                };
                if p.lrh.dlid != self.fw.lid && p.lrh.dlid != 0xffff {
                    self.engine.counters.rx_discarded += 1;
                    return;
                }
                let grh = p.grh.and_then(|_| {
                    let mut g = [0u8; UD_GRH_BYTES];
                    g.copy_from_slice(f.get(8..48)?);
                    Some(g)
                });
                let info = RxInfo {
                    slid: p.lrh.slid,
                    grh,
                    l3: None,
                };
                self.dispatch(&p.transport, &info, now);
            }
        }
    }

    fn dispatch(&mut self, t: &IbTransportRepr<'_>, info: &RxInfo, now: u64) {
        if t.bth.opcode == Opcode::Cnp {
            return;
        }
        // Destination QP 0 and 1 are the port's QP0 and QP1, whatever their firmware QPNs.
        let qpn = match t.bth.dest_qp {
            0 => self.objs.special_qpn(QpServiceType::Qp0),
            1 => self.objs.special_qpn(QpServiceType::Qp1),
            n => Some(n),
        };
        let Some((qpn, qpc)) = qpn.and_then(|n| self.objs.qps.get(&n).map(|q| (n, q.qpc))) else {
            self.engine.counters.rx_discarded += 1;
            return;
        };
        let state = QpState::from_raw(qpc.state());
        let st = QpServiceType::from_raw(qpc.st());
        let want = match st {
            QpServiceType::Rc => TransportService::Rc,
            QpServiceType::Uc => TransportService::Uc,
            QpServiceType::Ud | QpServiceType::Qp0 | QpServiceType::Qp1 => TransportService::Ud,
            QpServiceType::Xrc => TransportService::Xrc,
            _ => {
                self.engine.counters.rx_discarded += 1;
                return;
            }
        };
        let response = t.bth.opcode.is_response();
        let ok_state = if response {
            state == QpState::Rts
        } else {
            matches!(state, QpState::Rtr | QpState::Rts | QpState::Sqer)
        };
        if !ok_state || t.bth.opcode.transport() != want {
            self.engine.counters.rx_discarded += 1;
            return;
        }
        // P_Key table: entry 0 is the default P_Key, every other entry is invalid.
        let pkey = if qpc.primary_address_path().pkey_index() == 0 {
            DEFAULT_PKEY
        } else {
            0
        };
        if pkey & 0x7fff == 0 || t.bth.pkey & 0x7fff != pkey & 0x7fff {
            self.engine.counters.rx_pkey_violations += 1;
            return;
        }
        if matches!(
            st,
            QpServiceType::Rc | QpServiceType::Uc | QpServiceType::Xrc
        ) && !self.sent_by_connected_peer(&qpc, info)
        {
            self.engine.counters.rx_discarded += 1;
            return;
        }
        self.engine.qps.entry(qpn).or_default();
        if state == QpState::Rtr && !crate::objects::is_datagram_qp(st) {
            let first = self
                .engine
                .qps
                .get_mut(&qpn)
                .is_some_and(|s| !std::mem::replace(&mut s.established, true));
            if first {
                // The first packet in RTR: communication established.
                self.qp_event(uhca_fwif::consts::EventType::CommEst, qpn, now);
            }
        }
        match st {
            QpServiceType::Ud | QpServiceType::Qp0 | QpServiceType::Qp1 => {
                self.ud_rx(qpn, t, info, now)
            }
            QpServiceType::Rc if response => self.requester_rx(qpn, t, now),
            QpServiceType::Rc => self.connected_rx(qpn, &qpc, t, false, now),
            QpServiceType::Xrc => self.xrc_rx(qpn, t, response, now),
            _ => self.connected_rx(qpn, &qpc, t, true, now),
        }
    }

    /// Whether a packet for a connected (RC, UC) QP comes from the peer it is connected to:
    /// on RoCE, its source IP is the QP's remote GID. A connected QP accepts packets from
    /// that peer only; the others are dropped silently, like any packet failing a header
    /// check (IB spec vol. 1, 9.6, header validation).
    fn sent_by_connected_peer(&self, qpc: &uhca_fwif::ctx::Qpc, info: &RxInfo) -> bool {
        let (Some(grh), Some(l3)) = (info.grh, info.l3) else {
            return true;
        };
        let Some(dip) = self.qp_remote_ip(qpc.primary_address_path()) else {
            return true;
        };
        if l3 == CQE_ROCE_L3_HEADER_TYPE_IPV4 {
            // The IPv4 header sits in the last 20 bytes; its source address at offset 12.
            super::path::is_v4_mapped(&dip) && grh[32..36] == dip[12..16]
        } else {
            grh[8..24] == dip
        }
    }

    /// Sends an ACK, NAK or RNR NAK from responder `qpn`.
    pub(super) fn send_aeth(&mut self, qpn: u32, p: u32, syndrome: AethSyndrome) {
        let Some(qpc) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return;
        };
        let Some(path) = self.qp_path(qpc.primary_address_path()) else {
            return;
        };
        let msn = self.engine.qps.get(&qpn).map(|s| s.msn).unwrap_or(0);
        let t = IbTransportRepr::new(
            BthRepr::new(Opcode::RcAcknowledge, qpc.remote_qpn(), p),
            &[],
        )
        .with_aeth(syndrome, msn);
        self.emit_response(&qpc, &path, &t);
        match syndrome {
            AethSyndrome::Ack { .. } => self.engine.counters.acks_sent += 1,
            AethSyndrome::RnrNak { .. } => self.engine.counters.rnr_naks_sent += 1,
            _ => self.engine.counters.naks_sent += 1,
        }
    }

    fn send_ack_now(&mut self, qpn: u32) {
        let Some(s) = self.engine.qps.get_mut(&qpn) else {
            return;
        };
        s.ack_pending = false;
        s.unacked = 0;
        let p = psn::add(s.epsn, 0xff_ffff);
        self.send_aeth(qpn, p, AethSyndrome::Ack { credit_count: 0x1f });
    }

    /// Sends the ACKs owed (one per QP, for everything received so far).
    pub(crate) fn flush_acks(&mut self, _now: u64) {
        let mut from = 0u32;
        while let Some((&qpn, _)) = self.engine.qps.range(from..).find(|(_, s)| s.ack_pending) {
            self.send_ack_now(qpn);
            match qpn.checked_add(1) {
                Some(n) => from = n,
                None => break,
            }
        }
    }

    /// RC and UC requests (and XRC's, as RC). `qpc` is the QP's context as the packet's
    /// dispatch read it (nothing on the way here changes it): the checks and the placement
    /// below read it instead of looking the QP up again.
    pub(super) fn connected_rx(
        &mut self,
        qpn: u32,
        qpc: &Qpc,
        t: &IbTransportRepr<'_>,
        uc: bool,
        now: u64,
    ) {
        let p = t.bth.psn;
        let Some(s) = self.engine.qps.get_mut(&qpn) else {
            return;
        };
        let d = psn::diff(p, s.epsn);
        let pos = t.bth.opcode.position();
        if uc {
            if d != 0 {
                self.engine.counters.rx_uc_dropped += 1;
                // Abandon the message in progress; resynchronise on a First or Only.
                s.write = None;
                if let Some(r) = s.recv.as_mut() {
                    r.offset = 0;
                }
                if !matches!(pos, Some(MessagePosition::First | MessagePosition::Only)) {
                    return;
                }
                s.epsn = p;
            }
        } else if d > 0 {
            self.engine.counters.rx_out_of_sequence += 1;
            self.datapath().count(qpn, |c| c.out_of_sequence += 1);
            let Some(s) = self.engine.qps.get_mut(&qpn) else {
                return;
            };
            if !s.nak_sent {
                s.nak_sent = true;
                let e = s.epsn;
                self.send_aeth(qpn, e, AethSyndrome::Nak(NakCode::PsnSequenceError));
            }
            return;
        } else if d < 0 {
            self.engine.counters.rx_duplicates += 1;
            self.datapath().count(qpn, |c| c.duplicate_request += 1);
            self.duplicate_rx(qpn, t, now);
            return;
        } else {
            s.nak_sent = false;
        }
        match t.bth.opcode {
            op if is_write(op)
                && matches!(pos, Some(MessagePosition::First | MessagePosition::Only)) =>
            {
                self.datapath().count(qpn, |c| c.rx_write_requests += 1)
            }
            Opcode::RcRdmaReadRequest => self.datapath().count(qpn, |c| c.rx_read_requests += 1),
            Opcode::RcCompareSwap | Opcode::RcFetchAdd => {
                self.datapath().count(qpn, |c| c.rx_atomic_requests += 1)
            }
            _ => {}
        }
        let res = match t.bth.opcode {
            op if (is_send(op) || is_write(op)) && !fits_path_mtu(qpc, t) => Err(if uc {
                Fail::Drop
            } else {
                Fail::Nak(NakCode::InvalidRequest, None)
            }),
            op if is_send(op) => self.send_rx(qpn, qpc, t, uc, now),
            op if is_write(op) => self.write_rx(qpn, qpc, t, uc, now),
            Opcode::RcRdmaReadRequest => self.read_rx(qpn, t, p, false, now),
            Opcode::RcCompareSwap | Opcode::RcFetchAdd => self.atomic_rx(qpn, t, now),
            _ => Err(Fail::Nak(NakCode::InvalidRequest, None)),
        };
        match res {
            Ok(()) => {
                if uc {
                    return;
                }
                let Some(s) = self.engine.qps.get_mut(&qpn) else {
                    return;
                };
                if is_send(t.bth.opcode) || is_write(t.bth.opcode) {
                    s.unacked += 1;
                    if t.bth.ack_req {
                        s.ack_pending = true;
                    }
                    if s.unacked >= ACK_COALESCE_PACKETS {
                        self.send_ack_now(qpn);
                    }
                } else {
                    s.ack_pending = false;
                    s.unacked = 0;
                }
            }
            Err(Fail::Drop) => {}
            Err(_) if uc => {}
            Err(Fail::Rnr) => {
                self.datapath().count(qpn, |c| c.out_of_buffer += 1);
                let timer = self
                    .objs
                    .qps
                    .get(&qpn)
                    .map(|q| q.qpc.min_rnr_nak())
                    .unwrap_or(0);
                // Like a sequence NAK, an RNR NAK puts the responder in the NAK state:
                // the requests the requester pipelined behind this one arrive out of
                // sequence and are dropped silently until it retries this PSN. Answering
                // them with a sequence NAK would cost the
                // requester a transport retry per RNR round, and a slow receiver would
                // end the connection with "retry exceeded".
                let e = match self.engine.qps.get_mut(&qpn) {
                    Some(s) => {
                        s.nak_sent = true;
                        s.epsn
                    }
                    None => p,
                };
                self.send_aeth(qpn, e, AethSyndrome::RnrNak { timer });
            }
            Err(Fail::Nak(code, syndrome)) => {
                let e = self.engine.qps.get(&qpn).map(|s| s.epsn).unwrap_or(p);
                self.send_aeth(qpn, e, AethSyndrome::Nak(code));
                // The responder's QP reports the error asynchronously too.
                let event = match code {
                    NakCode::RemoteAccessError => Some(uhca_fwif::consts::EventType::WqAccessError),
                    NakCode::InvalidRequest => Some(uhca_fwif::consts::EventType::WqInvalReqError),
                    _ => None,
                };
                if let Some(ev) = event {
                    self.qp_event(ev, qpn, now);
                }
                self.responder_error(qpn, syndrome, now);
            }
        }
    }

    /// The responder failed: a CQE for the receive WQE in progress, then the error state.
    pub(super) fn responder_error(&mut self, qpn: u32, syndrome: Option<CqeSyndrome>, now: u64) {
        let recv = self.engine.qps.get_mut(&qpn).and_then(|s| s.recv.take());
        if let (Some(r), Some(syn)) = (recv, syndrome)
            && let Some(q) = self.objs.qps.get(&qpn).map(|q| q.qpc)
        {
            let (cqn, uidx) = self.rx_cq(qpn, &q);
            self.post_err_cqe(
                cqn,
                qpn,
                r.wqe.counter,
                0,
                syn,
                CqeOpcode::RespErr,
                uidx,
                now,
            );
        }
        self.qp_to_error(qpn, now);
    }

    /// A receive CQE.
    #[allow(clippy::too_many_arguments)]
    fn responder_cqe(
        &mut self,
        qpn: u32,
        counter: u16,
        opcode: CqeOpcode,
        byte_cnt: u32,
        imm: Option<u32>,
        solicited: bool,
        info: Option<(&RxInfo, u32)>,
        now: u64,
    ) {
        let Some(q) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return;
        };
        let (cqn, uidx) = self.rx_cq(qpn, &q);
        let mut c = Cqe64 {
            byte_cnt: byte_cnt.into(),
            sop_drop_qpn: (qpn & 0x00ff_ffff).into(),
            wqe_counter: counter.into(),
            srqn: uidx.into(),
            ..Default::default()
        };
        if let Some(v) = imm {
            c.immediate = v.into();
        }
        if let Some((i, src_qp)) = info {
            // A RoCE packet always carries its L3 header, which stands in for the GRH (the
            // receive buffer's first 40 bytes hold it): the CQE says a GRH is present.
            let g = if i.grh.is_some() || i.l3.is_some() {
                CQE_FLAGS_GRH
            } else {
                0
            };
            // Over RoCE the CQE's service-level field (`flags_rqpn[27:24]`) carries the
            // packet's type instead, as ConnectX reports it for a responder's UD CQE: bit 3
            // when the frame had a UDP header (RoCEv2, all the model sends), bits 2:0 its
            // L3 header (1 IPv6, 2 IPv4). libmlx5 hands it out as `ibv_wc.sl`; UCX's UD
            // transport reads the packet's destination address from the 40 bytes before the
            // data as it says (the last 4 bytes for IPv4, 16 for IPv6).
            let sl_or_type = i.l3.map_or(0, |l3| u32::from(ROCE_PKT_UDP | l3) << 24);
            c.flags_rqpn = ((src_qp & 0x00ff_ffff) | g | sl_or_type).into();
            c.slid = i.slid.into();
            if let Some(l3) = i.l3 {
                c.l4_l3_hdr_type = l3 << 2;
            }
        }
        self.post_cqe(cqn, c, opcode, solicited, now);
    }

    fn send_rx(
        &mut self,
        qpn: u32,
        qpc: &Qpc,
        t: &IbTransportRepr<'_>,
        uc: bool,
        now: u64,
    ) -> Result<(), Fail> {
        let pd = self.rx_pd(qpn, qpc);
        let pos = t.bth.opcode.position();
        let first = matches!(pos, Some(MessagePosition::First | MessagePosition::Only));
        let last = matches!(pos, Some(MessagePosition::Last | MessagePosition::Only));
        let s = self.engine.qps.get_mut(&qpn).ok_or(Fail::Drop)?;
        if s.write.is_some() || (!first && s.recv.is_none()) {
            return Err(if uc {
                Fail::Drop
            } else {
                Fail::Nak(NakCode::InvalidRequest, None)
            });
        }
        if first && s.recv.as_ref().is_some_and(|r| r.offset != 0) {
            return Err(Fail::Nak(NakCode::InvalidRequest, None));
        }
        if s.recv.is_none() {
            let Some(wqe) = self.recv_wqe(qpn, true, now) else {
                return Err(if uc { Fail::Drop } else { Fail::Rnr });
            };
            if let Some(s) = self.engine.qps.get_mut(&qpn) {
                s.recv = Some(RecvProgress { wqe, offset: 0 });
            }
        }
        // The receive in progress is borrowed out of the QP's state for the scatter (not
        // copied) and put back before anything else looks at it.
        let Some(r) = self.engine.qps.get_mut(&qpn).and_then(|s| s.recv.take()) else {
            return Err(Fail::Drop);
        };
        let placed = self.datapath().scatter_sges(
            LocalKeys {
                pd,
                rlky: r.wqe.rlky,
            },
            &r.wqe.sges,
            r.offset,
            t.payload,
            now,
        );
        let (counter, offset) = (r.wqe.counter, r.offset);
        if let Some(s) = self.engine.qps.get_mut(&qpn) {
            s.recv = Some(r);
        }
        match placed {
            Ok(true) => {}
            Ok(false) => {
                return Err(Fail::Nak(
                    NakCode::InvalidRequest,
                    Some(CqeSyndrome::LocalLengthErr),
                ));
            }
            Err(KeyError::Protection) => {
                return Err(Fail::Nak(
                    NakCode::RemoteOperationalError,
                    Some(CqeSyndrome::LocalProtErr),
                ));
            }
            Err(KeyError::Dma) => {
                return Err(Fail::Nak(
                    NakCode::RemoteOperationalError,
                    Some(CqeSyndrome::LocalAccessErr),
                ));
            }
        }
        let s = self.engine.qps.get_mut(&qpn).ok_or(Fail::Drop)?;
        s.epsn = psn::add(s.epsn, 1);
        let total = offset + t.payload.len() as u64;
        if last {
            if let Some(r) = s.recv.take() {
                self.engine.recycle_scatter_list(r.wqe.sges);
            }
            let s = self.engine.qps.get_mut(&qpn).ok_or(Fail::Drop)?;
            s.msn = (s.msn + 1) & 0x00ff_ffff;
            let (op, imm) = match t.imm_dt {
                Some(v) => (CqeOpcode::RespSendImm, Some(v)),
                None => (CqeOpcode::RespSend, None),
            };
            self.responder_cqe(
                qpn,
                counter,
                op,
                total as u32,
                imm,
                t.bth.solicited,
                None,
                now,
            );
        } else if let Some(rr) = s.recv.as_mut() {
            rr.offset = total;
        }
        Ok(())
    }

    fn write_rx(
        &mut self,
        qpn: u32,
        qpc: &Qpc,
        t: &IbTransportRepr<'_>,
        uc: bool,
        now: u64,
    ) -> Result<(), Fail> {
        let pos = t.bth.opcode.position();
        let first = matches!(pos, Some(MessagePosition::First | MessagePosition::Only));
        let last = matches!(pos, Some(MessagePosition::Last | MessagePosition::Only));
        let invalid = if uc {
            Fail::Drop
        } else {
            Fail::Nak(NakCode::InvalidRequest, None)
        };
        let pd = self.rx_pd(qpn, qpc);
        let s = self.engine.qps.get(&qpn).ok_or(Fail::Drop)?;
        // A receive WQE kept from an abandoned UC message (offset 0) does not count.
        let sending = s.recv.as_ref().is_some_and(|r| r.offset != 0);
        if sending || (first && s.write.is_some()) || (!first && s.write.is_none()) {
            return Err(invalid);
        }
        let mut w = match (first, t.reth) {
            (true, Some(reth)) => {
                let ok = (uc || qpc.rwe())
                    && self
                        .datapath()
                        .key_check(
                            reth.rkey,
                            pd,
                            reth.va,
                            reth.dma_len as u64,
                            Access::RemoteWrite,
                        )
                        .is_ok();
                if !ok {
                    return Err(if uc {
                        Fail::Drop
                    } else {
                        Fail::Nak(NakCode::RemoteAccessError, None)
                    });
                }
                WriteProgress {
                    va: reth.va,
                    rkey: reth.rkey,
                    len: reth.dma_len as u64,
                    offset: 0,
                }
            }
            (true, None) => return Err(invalid),
            (false, _) => s.write.ok_or(Fail::Drop)?,
        };
        let n = t.payload.len() as u64;
        if w.offset + n > w.len || (last && w.offset + n != w.len) {
            return Err(invalid);
        }
        // WRITE with immediate consumes a receive WQE: make sure there is one first.
        if last && t.imm_dt.is_some() && self.recv_wqe(qpn, false, now).is_none() {
            return Err(if uc { Fail::Drop } else { Fail::Rnr });
        }
        if n > 0 {
            let span = self
                .datapath()
                .key_check(w.rkey, pd, w.va + w.offset, n, Access::RemoteWrite)
                .map_err(|_| Fail::Nak(NakCode::RemoteAccessError, None))?;
            self.datapath()
                .span_write(&span, 0, t.payload, now, "data (scatter)")
                .map_err(|_| Fail::Nak(NakCode::RemoteOperationalError, None))?;
        }
        w.offset += n;
        let s = self.engine.qps.get_mut(&qpn).ok_or(Fail::Drop)?;
        s.epsn = psn::add(s.epsn, 1);
        if last {
            s.write = None;
            s.msn = (s.msn + 1) & 0x00ff_ffff;
            if let Some(imm) = t.imm_dt
                && let Some(wqe) = self.recv_wqe(qpn, true, now)
            {
                self.responder_cqe(
                    qpn,
                    wqe.counter,
                    CqeOpcode::RespWrImm,
                    w.len as u32,
                    Some(imm),
                    t.bth.solicited,
                    None,
                    now,
                );
            }
        } else {
            s.write = Some(w);
        }
        Ok(())
    }

    /// An RDMA READ request at PSN `p` (new, or a duplicate executed again).
    fn read_rx(
        &mut self,
        qpn: u32,
        t: &IbTransportRepr<'_>,
        p: u32,
        duplicate: bool,
        now: u64,
    ) -> Result<(), Fail> {
        let Some(qpc) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return Err(Fail::Drop);
        };
        let s = self.engine.qps.get(&qpn).ok_or(Fail::Drop)?;
        if s.recv.is_some() || s.write.is_some() {
            return Err(Fail::Nak(NakCode::InvalidRequest, None));
        }
        let reth = t.reth.ok_or(Fail::Nak(NakCode::InvalidRequest, None))?;
        let len = reth.dma_len as u64;
        let pieces = if qpc.rre() {
            let pd = self.rx_pd(qpn, &qpc);
            self.datapath()
                .key_translate(reth.rkey, pd, reth.va, len, Access::RemoteRead)
                .map_err(|_| Fail::Nak(NakCode::RemoteAccessError, None))?
        } else {
            return Err(Fail::Nak(NakCode::RemoteAccessError, None));
        };
        let mut data = Vec::new();
        self.datapath()
            .dma_gather(&pieces, &mut data, now)
            .map_err(|_| Fail::Nak(NakCode::RemoteOperationalError, None))?;
        let mtu = path_mtu(qpc.mtu());
        let n = len.div_ceil(mtu).max(1) as u32;
        let Some(path) = self.qp_path(qpc.primary_address_path()) else {
            return Err(Fail::Drop);
        };
        let s = self.engine.qps.get_mut(&qpn).ok_or(Fail::Drop)?;
        if !duplicate {
            s.msn = (s.msn + 1) & 0x00ff_ffff;
            s.epsn = psn::add(s.epsn, n);
            s.resources.push_back(RespResource {
                psn: p,
                atomic_orig: None,
            });
            if s.resources.len() > RESPONDER_RESOURCES {
                s.resources.pop_front();
            }
        }
        let msn = s.msn;
        for i in 0..n {
            let op = match (i == 0, i + 1 == n) {
                (true, true) => Opcode::RcRdmaReadResponseOnly,
                (true, false) => Opcode::RcRdmaReadResponseFirst,
                (false, false) => Opcode::RcRdmaReadResponseMiddle,
                (false, true) => Opcode::RcRdmaReadResponseLast,
            };
            let a = (i as u64 * mtu) as usize;
            let b = ((i as u64 + 1) * mtu).min(len) as usize;
            let mut tt = IbTransportRepr::new(
                BthRepr::new(op, qpc.remote_qpn(), psn::add(p, i)),
                data.get(a..b).unwrap_or(&[]),
            );
            if op != Opcode::RcRdmaReadResponseMiddle {
                tt = tt.with_aeth(AethSyndrome::Ack { credit_count: 0x1f }, msn);
            }
            self.emit_response(&qpc, &path, &tt);
        }
        Ok(())
    }

    fn atomic_rx(&mut self, qpn: u32, t: &IbTransportRepr<'_>, now: u64) -> Result<(), Fail> {
        let Some(qpc) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return Err(Fail::Drop);
        };
        let s = self.engine.qps.get(&qpn).ok_or(Fail::Drop)?;
        if s.recv.is_some() || s.write.is_some() {
            return Err(Fail::Nak(NakCode::InvalidRequest, None));
        }
        let a = t
            .atomic_eth
            .ok_or(Fail::Nak(NakCode::InvalidRequest, None))?;
        if !a.va.is_multiple_of(8) {
            return Err(Fail::Nak(NakCode::InvalidRequest, None));
        }
        if !qpc.rae() {
            return Err(Fail::Nak(NakCode::RemoteAccessError, None));
        }
        let pd = self.rx_pd(qpn, &qpc);
        let pieces = self
            .datapath()
            .key_translate(a.rkey, pd, a.va, 8, Access::RemoteAtomic)
            .map_err(|_| Fail::Nak(NakCode::RemoteAccessError, None))?;
        let mut cur = Vec::with_capacity(8);
        self.datapath()
            .dma_gather(&pieces, &mut cur, now)
            .map_err(|_| Fail::Nak(NakCode::RemoteOperationalError, None))?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&cur[..8]);
        // The target word in the byte order of the 8-byte atomic endianness mode the driver
        // set (big-endian by default, the host's with mode 1).
        let host_order = self.atomic_8b_host_order();
        let orig = if host_order {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        };
        let new = if t.bth.opcode == Opcode::RcCompareSwap {
            if orig == a.compare {
                a.swap_or_add
            } else {
                orig
            }
        } else {
            orig.wrapping_add(a.swap_or_add)
        };
        let new = if host_order {
            new.to_le_bytes()
        } else {
            new.to_be_bytes()
        };
        self.datapath()
            .dma_scatter(&pieces, &new, now)
            .map_err(|_| Fail::Nak(NakCode::RemoteOperationalError, None))?;
        let p = t.bth.psn;
        let s = self.engine.qps.get_mut(&qpn).ok_or(Fail::Drop)?;
        s.msn = (s.msn + 1) & 0x00ff_ffff;
        s.epsn = psn::add(s.epsn, 1);
        s.resources.push_back(RespResource {
            psn: p,
            atomic_orig: Some(orig),
        });
        if s.resources.len() > RESPONDER_RESOURCES {
            s.resources.pop_front();
        }
        self.send_atomic_ack(qpn, p, orig);
        Ok(())
    }

    fn send_atomic_ack(&mut self, qpn: u32, p: u32, orig: u64) {
        let Some(qpc) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return;
        };
        let Some(path) = self.qp_path(qpc.primary_address_path()) else {
            return;
        };
        let msn = self.engine.qps.get(&qpn).map(|s| s.msn).unwrap_or(0);
        let t = IbTransportRepr::new(
            BthRepr::new(Opcode::RcAtomicAcknowledge, qpc.remote_qpn(), p),
            &[],
        )
        .with_aeth(AethSyndrome::Ack { credit_count: 0x1f }, msn)
        .with_atomic_ack_eth(orig);
        self.emit_response(&qpc, &path, &t);
    }

    /// A request whose PSN was already executed.
    fn duplicate_rx(&mut self, qpn: u32, t: &IbTransportRepr<'_>, now: u64) {
        let p = t.bth.psn;
        match t.bth.opcode {
            Opcode::RcRdmaReadRequest => {
                // Reads have no side effects: execute again from the requested PSN.
                let _ = self.read_rx_dup(qpn, t, p, now);
            }
            Opcode::RcCompareSwap | Opcode::RcFetchAdd => {
                // Never execute an atomic twice: answer with the saved result.
                let saved = self.engine.qps.get(&qpn).and_then(|s| {
                    s.resources
                        .iter()
                        .rev()
                        .find(|r| r.psn == p && r.atomic_orig.is_some())
                        .and_then(|r| r.atomic_orig)
                });
                if let Some(orig) = saved {
                    self.send_atomic_ack(qpn, p, orig);
                }
            }
            _ => {
                // Acknowledge again (coalesced with the rest of the burst).
                if let Some(s) = self.engine.qps.get_mut(&qpn) {
                    s.ack_pending = true;
                }
            }
        }
    }

    fn read_rx_dup(
        &mut self,
        qpn: u32,
        t: &IbTransportRepr<'_>,
        p: u32,
        now: u64,
    ) -> Result<(), Fail> {
        // A duplicate READ is answered even in the middle of another message.
        let saved = self
            .engine
            .qps
            .get_mut(&qpn)
            .map(|s| (s.recv.take(), s.write.take()));
        let r = self.read_rx(qpn, t, p, true, now);
        if let (Some(s), Some((rv, wr))) = (self.engine.qps.get_mut(&qpn), saved) {
            s.recv = rv;
            s.write = wr;
        }
        r
    }

    /// A UD datagram.
    fn ud_rx(&mut self, qpn: u32, t: &IbTransportRepr<'_>, info: &RxInfo, now: u64) {
        let Some(qpc) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return;
        };
        let Some(deth) = t.deth else {
            self.engine.counters.rx_discarded += 1;
            return;
        };
        // Subnet management packets (QP0) carry no Q_Key that anyone checks; QP1's is the
        // well-known one its context holds.
        let qp0 = QpServiceType::from_raw(qpc.st()) == QpServiceType::Qp0;
        if !qp0 && deth.qkey != qpc.q_key() {
            self.engine.counters.rx_qkey_violations += 1;
            return;
        }
        let ib = self.fw.port_type() == LinkLayer::InfiniBand;
        if t.payload.len() as u64 > ud_mtu(ib) {
            self.engine.counters.rx_discarded += 1;
            return;
        }
        let Some(wqe) = self.recv_wqe(qpn, true, now) else {
            self.engine.counters.rx_ud_no_wqe += 1;
            self.datapath().count(qpn, |c| c.out_of_buffer += 1);
            return;
        };
        let mut data = Vec::with_capacity(UD_GRH_BYTES + t.payload.len());
        data.extend_from_slice(&info.grh.unwrap_or([0; UD_GRH_BYTES]));
        data.extend_from_slice(t.payload);
        match self.datapath().scatter_sges(
            LocalKeys {
                pd: qpc.pd(),
                rlky: wqe.rlky,
            },
            &wqe.sges,
            0,
            &data,
            now,
        ) {
            Ok(true) => {
                let (op, imm) = match t.imm_dt {
                    Some(v) => (CqeOpcode::RespSendImm, Some(v)),
                    None => (CqeOpcode::RespSend, None),
                };
                self.responder_cqe(
                    qpn,
                    wqe.counter,
                    op,
                    data.len() as u32,
                    imm,
                    t.bth.solicited,
                    Some((info, deth.src_qp)),
                    now,
                );
            }
            Ok(false) | Err(_) => {
                let syn = if self.scatter_fits(&wqe.sges, data.len()) {
                    CqeSyndrome::LocalProtErr
                } else {
                    CqeSyndrome::LocalLengthErr
                };
                self.post_err_cqe(
                    qpc.cqn_rcv(),
                    qpn,
                    wqe.counter,
                    0,
                    syn,
                    CqeOpcode::RespErr,
                    qpc.user_index(),
                    now,
                );
                self.qp_to_error(qpn, now);
            }
        }
    }

    fn scatter_fits(&self, sges: &[super::mem::Sge], n: usize) -> bool {
        sges.iter().map(|s| s.len as u64).sum::<u64>() >= n as u64
    }
}
