//! XRC, the extended reliable connected transport (IBTA Vol 1 annex A14), on top of the RC
//! machinery.
//!
//! An XRC QP is an RC connection whose requests name, in an XRCETH after the BTH, the XRC
//! SRQ at the responder that takes them. The requester side (an XRC initiator, a QP with a
//! send queue) is RC's: its WQEs carry an XRC segment after the control segment
//! (`mlx5_wqe_xrc_seg`, read by `sq.rs`), and each request packet leaves with the XRC
//! opcode (OpCode bits 7:5 = 101, the RC operation in bits 4:0) and the XRCETH
//! ([`Device::emit_request`]). Responses (ACK, NAK, READ responses, atomic ACKs) are RC's
//! with XRC opcodes and no XRCETH.
//!
//! The responder side (an XRC target, a QP without a send queue) is RC's too, with the
//! differences the annex makes ([`Device::xrc_rx`]):
//!
//! * the XRCETH must name an XRC SRQ of the target QP's XRC domain (`qpc.xrcd`); a request
//!   that names anything else is a remote access violation: NAK Remote Access Error, the
//!   target QP's WQ_ACCESS_ERROR event and the error state;
//! * receive WQEs come from that SRQ, and their completions go to the SRQ's CQ
//!   (`xrc_srqc.cqn`) with the SRQ's `user_index` in the CQE's `srqn_uidx` and the target
//!   QP's number in `qpn`;
//! * memory keys (the receive WQEs' lkeys, the requests' rkeys) are checked against the
//!   SRQ's PD: the target QP has no PD of its own for the data.
//!
//! PSNs, ACK coalescing, duplicates, sequence NAKs, RNR NAKs (an empty SRQ) and the
//! requester's retries are RC's code, unchanged.

use super::mem::KeyError;
use super::path::{Path, PayloadFill};
use crate::device::Device;
use crate::objects::SrqCtx;
use crate::wire::{AethSyndrome, BthRepr, IbTransportRepr, NakCode, Opcode};
use uhca_fwif::consts::{EventType, QpServiceType};
use uhca_fwif::ctx::Qpc;

/// OpCode bits 7:5 of the XRC transport.
const XRC_TRANSPORT: u8 = 0b101 << 5;
/// OpCode bits 4:0: the operation, the same for RC and XRC.
const OPERATION_MASK: u8 = 0x1f;

/// The XRC opcode of an RC operation (RC SEND Only → XRC SEND Only).
pub(crate) fn xrc_opcode(rc: Opcode) -> Opcode {
    Opcode::from(XRC_TRANSPORT | (u8::from(rc) & OPERATION_MASK))
}

/// The RC opcode of an XRC operation (XRC Acknowledge → RC Acknowledge).
pub(crate) fn rc_opcode(xrc: Opcode) -> Opcode {
    Opcode::from(u8::from(xrc) & OPERATION_MASK)
}

/// Whether `qpc` is an XRC QP.
#[inline]
pub(crate) fn is_xrc(qpc: &Qpc) -> bool {
    qpc.st() == QpServiceType::Xrc.raw()
}

impl Device {
    /// Emits a request packet the requester built with an RC opcode: as it is, or, for an
    /// XRC QP (`xrc_srqn` given), with the XRC opcode and an XRCETH naming the remote SRQ.
    /// `fill`, if given, writes the payload straight into the frame
    /// ([`Device::emit_packet_filled`]); its error is returned and nothing is sent.
    #[inline]
    pub(crate) fn emit_request(
        &mut self,
        path: &Path,
        t: &IbTransportRepr<'_>,
        xrc_srqn: Option<u32>,
        fill: Option<&mut PayloadFill<'_>>,
    ) -> Result<(), KeyError> {
        if let Some(frame) = self.build_request(path, t, xrc_srqn, fill)? {
            self.push_frame(frame);
        }
        Ok(())
    }

    /// Builds the request packet [`Device::emit_request`] sends, without queueing it.
    #[inline]
    pub(crate) fn build_request(
        &mut self,
        path: &Path,
        t: &IbTransportRepr<'_>,
        xrc_srqn: Option<u32>,
        fill: Option<&mut PayloadFill<'_>>,
    ) -> Result<Option<Vec<u8>>, KeyError> {
        match xrc_srqn {
            None => self.build_packet(path, t, fill),
            Some(n) => {
                let mut x = t.with_xrceth(n);
                x.bth.opcode = xrc_opcode(t.bth.opcode);
                self.build_packet(path, &x, fill)
            }
        }
    }

    /// Emits a response packet the responder (context `qpc`) built with an RC opcode: for
    /// an XRC QP with the XRC opcode (responses carry no XRCETH).
    #[inline]
    pub(crate) fn emit_response(&mut self, qpc: &Qpc, path: &Path, t: &IbTransportRepr<'_>) {
        if is_xrc(qpc) {
            let mut x = *t;
            x.bth.opcode = xrc_opcode(t.bth.opcode);
            self.emit_packet(path, &x);
        } else {
            self.emit_packet(path, t);
        }
    }

    /// The XRC SRQ the request being executed at XRC target `qpn` names (its XRCETH,
    /// checked against the QP's domain).
    fn xrc_target_srq(&self, qpn: u32) -> Option<u32> {
        self.engine.qps.get(&qpn).and_then(|s| s.xrc_srqn)
    }

    /// The PD a responder (`qpn`, context `qpc`) checks memory keys against: the QP's, or
    /// for an XRC target the PD of the XRC SRQ the request names.
    #[inline]
    pub(crate) fn rx_pd(&self, qpn: u32, qpc: &Qpc) -> u32 {
        if is_xrc(qpc)
            && let Some(s) = self
                .xrc_target_srq(qpn)
                .and_then(|n| self.objs.srqs.get(&n))
        {
            return s.pd();
        }
        qpc.pd()
    }

    /// Where a responder's completions go: (CQ, the CQE's `srqn_uidx`). The QP's receive
    /// CQ and user index, or for an XRC target the CQ and user index of the XRC SRQ the
    /// request names.
    #[inline]
    pub(crate) fn rx_cq(&self, qpn: u32, qpc: &Qpc) -> (u32, u32) {
        if is_xrc(qpc)
            && let Some(n) = self.xrc_target_srq(qpn)
            && let Some(s) = self.objs.srqs.get(&n)
        {
            match &s.ctx {
                SrqCtx::Xrc(c) => return (c.cqn(), c.user_index()),
                // An ISSI-0 SRQ created in an XRC domain has no user index: its number.
                SrqCtx::Srq(c) if c.xrcd() != 0 => return (c.cqn(), n),
                _ => {}
            }
        }
        (qpc.cqn_rcv(), qpc.user_index())
    }

    /// A packet for XRC QP `qpn` that passed the header checks (state, P_Key, peer).
    pub(crate) fn xrc_rx(&mut self, qpn: u32, t: &IbTransportRepr<'_>, response: bool, now: u64) {
        let Some(qpc) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return;
        };
        let mut rc = *t;
        rc.bth = BthRepr {
            opcode: rc_opcode(t.bth.opcode),
            ..t.bth
        };
        rc.xrceth = None;
        if response {
            self.requester_rx(qpn, &rc, now);
            return;
        }
        let Some(x) = t.xrceth else {
            self.engine.counters.rx_discarded += 1;
            return;
        };
        let srqn = x.xrc_srq;
        let same_domain = self
            .objs
            .srqs
            .get(&srqn)
            .and_then(|s| s.xrcd())
            .is_some_and(|d| d == qpc.xrcd());
        let Some(s) = self.engine.qps.get_mut(&qpn) else {
            return;
        };
        s.xrc_srqn = same_domain.then_some(srqn);
        // A duplicate or an out-of-sequence request is answered by the PSN rules alone
        // (re-ACK, sequence NAK); the expected one naming an SRQ outside the domain is a
        // remote access violation.
        if !same_domain && s.epsn == t.bth.psn {
            let e = s.epsn;
            self.note(
                now,
                format!(
                    "XRC QP {qpn:#x}: request PSN {e:#x} names SRQ {srqn:#x}, not an XRC SRQ \
                     of its domain {:#x}",
                    qpc.xrcd()
                ),
            );
            self.send_aeth(qpn, e, AethSyndrome::Nak(NakCode::RemoteAccessError));
            self.qp_event(EventType::WqAccessError, qpn, now);
            self.responder_error(qpn, None, now);
            return;
        }
        self.connected_rx(qpn, &qpc, &rc, false, now);
    }
}
