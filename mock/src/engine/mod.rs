//! The datapath engine: what the HCA does between a send doorbell and a CQE.
//!
//! Written from the PRM (WQE, CQE and EQE formats, doorbell records, QP and CQ contexts) and
//! the InfiniBand specification (transport protocol), with the layouts of `uhca-fwif` and the
//! packets of [`crate::wire`]. Nothing here uses the HAL's rings or the driver.
//!
//! | file | holds |
//! | --- | --- |
//! | `mod.rs` | the engine's room (`Engine`), the entry points (doorbells, frames, timers) |
//! | `../engine_state.rs` (`state`) | the engine's state: per-HCA and per-QP state, counters, the work requests it holds |
//! | `mem.rs` | queue buffers through their `pas` lists, memory-key checks, gather and scatter |
//! | `path.rs` | addressing: RoCEv2 and native IB headers from an address path or vector, emit; header templates (a message's middle packets built from the first one's headers) |
//! | `sq.rs` | fetching and decoding send WQEs |
//! | `requester.rs` | the send side: packets, ACK/NAK, read and atomic responses, retransmission |
//! | `responder.rs` | the receive side: parsing (with header prediction, `wire::roce::RxPrediction`), PSN checks, SEND/WRITE/READ/atomics, ACK coalescing |
//! | `rq.rs` | receive WQEs of an RQ or an SRQ |
//! | `cqe.rs` | CQEs (owner bit, opcodes, error CQEs), completion and CQ error events, flush |
//! | `xrc.rs` | XRC on RC's machinery: XRC opcodes and the XRCETH, the target's SRQ, CQ and PD |
//! | `counters.rs` | queue counters (QUERY_Q_COUNTER) |
//!
//! Frames the engine emits are queued (see [`crate::MockHca::take_tx_frames`]) and never
//! delivered inside the doorbell write that produced them; a fabric (or a test) moves them.

mod counters;
mod cqe;
mod mem;
mod path;
mod requester;
mod responder;
mod rq;
mod sq;
pub(crate) use crate::engine_state as state;
mod xrc;

use crate::device::Device;
use crate::iommu::Iommu;
use crate::objects::Objects;
use state::EngineState;

use uhca_fwif::consts::{EventType, QpState};

pub(crate) use state::SPARE_FRAMES;
pub use state::{DatapathCounters, QCounters};
pub(crate) use state::{QpDp, RecvProgress, RespResource, WriteProgress};

/// Most frames kept waiting in the transmit queue; beyond it the oldest are dropped (a
/// fabric that is never pumped must not grow memory without bound).
pub const TX_QUEUE_LIMIT: usize = 1 << 20;
/// Responder packets after which an ACK is sent even without AckReq.
pub const ACK_COALESCE_PACKETS: u32 = 16;
/// Responder resources kept for duplicate RDMA READs and atomics.
pub const RESPONDER_RESOURCES: usize = 64;

/// The ACK timeout of an `ack_timeout` encoding: 4.096 µs × 2^n, `None` (no timeout) for 0.
pub fn ack_timeout_ns(code: u8) -> Option<u64> {
    (code != 0).then(|| 4096u64 << code.min(31))
}

/// The engine's room: what a datapath step converted to it may touch, borrowed from the
/// device for one step: the object tables (read: the firmware creates and destroys them),
/// the engine's own state and the IOMMU (the step's DMA). Not the firmware's state, the
/// PCI function, the MSI-X table or the logs.
pub(crate) struct Engine<'a> {
    pub(crate) objs: &'a Objects,
    pub(crate) state: &'a mut EngineState,
    /// The IOMMU, for the DMA a step does (queue buffers, doorbell records, data).
    pub(crate) iommu: &'a mut Iommu,
}

impl Device {
    /// The engine's room over this device's parts, for one step.
    pub(crate) fn datapath(&mut self) -> Engine<'_> {
        Engine {
            objs: &self.objs,
            state: &mut self.engine,
            iommu: &mut self.iommu,
        }
    }

    /// A send doorbell (BlueFlame register write): the first 8 bytes of a control segment.
    pub(crate) fn send_doorbell(&mut self, uar: u32, bytes: &[u8], now: u64) {
        self.engine.now = now;
        if bytes.len() < 8 {
            return;
        }
        let qpn = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) >> 8;
        let Some(qp) = self.objs.qps.get(&qpn) else {
            self.note(
                now,
                format!("send doorbell for QP {qpn:#x}, which does not exist"),
            );
            return;
        };
        if qp.qpc.uar_page() != uar {
            let own = qp.qpc.uar_page();
            self.note(
                now,
                format!("send doorbell for QP {qpn:#x} on UAR {uar}; its UAR is {own}"),
            );
            return;
        }
        if self.faults.hold_send_doorbells {
            return;
        }
        self.process_sq(qpn, now);
    }

    /// Frames received from the wire, in order; ACKs owed are sent (coalesced) after the
    /// batch.
    pub(crate) fn receive_frames(&mut self, frames: &[Vec<u8>], now: u64) {
        self.engine.now = now;
        for f in frames {
            self.receive_frame(f, now);
        }
        self.flush_acks(now);
    }

    /// Fires due timers, flushes QPs in the error state and sends owed ACKs.
    pub(crate) fn engine_service(&mut self, now: u64) {
        self.engine.now = now;
        // Walks the tables by key (no list of keys is built: this runs at every step of a
        // fabric). A QP that runs no timer needs no visit.
        let mut from = 0u32;
        while let Some((&qpn, _)) = self
            .engine
            .qps
            .range(from..)
            .find(|(_, s)| s.timer.is_some() || s.rnr_timer.is_some())
        {
            self.requester_timers(qpn, now);
            match qpn.checked_add(1) {
                Some(n) => from = n,
                None => break,
            }
        }
        let mut from = 0u32;
        while let Some((&qpn, _)) = self.objs.qps.range(from..).find(|(_, q)| {
            matches!(
                QpState::from_raw(q.qpc.state()),
                QpState::Err | QpState::Sqer
            )
        }) {
            self.flush_qp(qpn, now);
            match qpn.checked_add(1) {
                Some(n) => from = n,
                None => break,
            }
        }
        self.flush_acks(now);
    }

    /// The earliest timer of any QP.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.engine
            .qps
            .values()
            .flat_map(|s| [s.timer, s.rnr_timer])
            .flatten()
            .min()
    }

    /// Hook of the modify commands: the datapath state follows the QP's state.
    pub(crate) fn engine_qp_modified(&mut self, qpn: u32, from: QpState, to: QpState) {
        let now = self.engine.now;
        let Some(qpc) = self.objs.qps.get(&qpn).map(|q| q.qpc) else {
            return;
        };
        match to {
            QpState::Rst => {
                self.engine.qps.remove(&qpn);
            }
            QpState::Init if from == QpState::Rst => {
                self.engine.qps.insert(qpn, QpDp::default());
            }
            QpState::Rtr if from == QpState::Init => {
                let st = self.engine.qps.entry(qpn).or_default();
                st.epsn = qpc.next_rcv_psn() & 0x00ff_ffff;
            }
            QpState::Rts if from == QpState::Rtr => {
                let st = self.engine.qps.entry(qpn).or_default();
                st.next_psn = qpc.next_send_psn() & 0x00ff_ffff;
                st.retry_left = qpc.retry_count();
                st.rnr_left = qpc.rnr_retry();
            }
            QpState::Err => {
                self.flush_qp(qpn, now);
                if from != QpState::Err && qpc.rq_type() == 1 {
                    self.qp_event(EventType::SrqLastWqe, qpn, now);
                }
            }
            _ => {}
        }
    }

    /// Puts a QP into the error state from the datapath and flushes it (an SRQ-attached QP
    /// also raises SRQ_LAST_WQE).
    pub(crate) fn qp_to_error(&mut self, qpn: u32, now: u64) {
        let mut srq = false;
        if let Some(q) = self.objs.qps.get_mut(&qpn) {
            if QpState::from_raw(q.qpc.state()) == QpState::Err {
                return;
            }
            q.qpc.set_state(QpState::Err.raw());
            srq = q.qpc.rq_type() == 1;
        }
        self.flush_qp(qpn, now);
        if srq {
            self.qp_event(EventType::SrqLastWqe, qpn, now);
        }
    }

    /// Posts an asynchronous QP event (EQE data: type 0 = QP, the QPN) to a subscribed EQ.
    pub(crate) fn qp_event(&mut self, event: EventType, qpn: u32, now: u64) {
        let mut data = [0u8; 28];
        data[24..28].copy_from_slice(&(qpn & 0x00ff_ffff).to_be_bytes());
        self.post_event(event.raw(), 0, data, now, false);
    }

    /// Posts an asynchronous SRQ event (EQE data: type 1 = SRQ, the SRQ or RMP number) to a
    /// subscribed EQ.
    pub(crate) fn srq_event(&mut self, event: EventType, srqn: u32, now: u64) {
        let mut data = [0u8; 28];
        data[20] = 1;
        data[24..28].copy_from_slice(&(srqn & 0x00ff_ffff).to_be_bytes());
        self.post_event(event.raw(), 0, data, now, false);
    }

    pub(crate) fn push_frame(&mut self, frame: Vec<u8>) {
        if self.fw.port_state != uhca_fwif::consts::PortState::Active {
            self.engine.counters.port_down_drops += 1;
            return;
        }
        if self.engine.tx.len() >= TX_QUEUE_LIMIT {
            self.engine.tx.pop_front();
        }
        self.engine.tx.push_back(frame);
        self.engine.counters.tx_packets += 1;
    }
}
