//! The datapath engine: what the HCA does between a send doorbell and a CQE.
//!
//! Written from the PRM (WQE, CQE and EQE formats, doorbell records, QP and CQ contexts) and
//! the InfiniBand specification (transport protocol), with the layouts of `uhca-fwif` and the
//! packets of [`crate::wire`]. Nothing here uses the HAL's rings or the driver.
//!
//! | file | holds |
//! | --- | --- |
//! | `mod.rs` | per-HCA and per-QP state, counters, the entry points (doorbells, frames, timers) |
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
mod xrc;

use crate::device::Device;
use std::collections::{BTreeMap, VecDeque};
use uhca_fwif::consts::{EventType, QpState};

pub use counters::QCounters;
pub(crate) use sq::SentWqe;

/// Datapath counters of one HCA (what the port saw and did).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatapathCounters {
    /// Frames (packets) the HCA sent.
    pub tx_packets: u64,
    /// Frames the HCA received.
    pub rx_packets: u64,
    /// Received frames that did not parse (bad length, checksum, ICRC or VCRC, unknown
    /// opcode): dropped.
    pub rx_malformed: u64,
    /// Received frames for another LID, an unknown QP, a QP in a state that does not
    /// receive, or of the wrong transport: dropped.
    pub rx_discarded: u64,
    /// Received frames whose P_Key does not match the QP's: dropped.
    pub rx_pkey_violations: u64,
    /// UD datagrams whose Q_Key does not match the QP's: dropped.
    pub rx_qkey_violations: u64,
    /// UD datagrams that found no receive WQE: dropped.
    pub rx_ud_no_wqe: u64,
    /// RC requests with a PSN beyond the expected one (sequence error).
    pub rx_out_of_sequence: u64,
    /// RC requests with an already executed PSN (duplicates).
    pub rx_duplicates: u64,
    /// UC packets dropped for a PSN gap.
    pub rx_uc_dropped: u64,
    /// ACKs sent (coalesced: one ACK may acknowledge many packets).
    pub acks_sent: u64,
    /// NAKs sent (sequence error, invalid request, remote access, remote operational).
    pub naks_sent: u64,
    /// RNR NAKs sent (no receive WQE).
    pub rnr_naks_sent: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Packets sent again (timeout, sequence NAK, RNR retry, implied NAK).
    pub retransmitted_packets: u64,
    /// Retransmission timer expirations.
    pub timeouts: u64,
    /// CQEs written.
    pub cqes: u64,
    /// CQEs lost because the CQ was full (CQ error event posted).
    pub cq_overruns: u64,
    /// Completion events (EQEs) posted.
    pub completion_events: u64,
    /// Frames not sent or not received because the port was down.
    pub port_down_drops: u64,
}

/// A receive in progress at a responder (a multi-packet SEND).
#[derive(Clone, Debug)]
pub(crate) struct RecvProgress {
    pub(crate) wqe: rq::RecvWqe,
    pub(crate) offset: u64,
}

/// An RDMA WRITE in progress at a responder.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriteProgress {
    pub(crate) va: u64,
    pub(crate) rkey: u32,
    pub(crate) len: u64,
    pub(crate) offset: u64,
}

/// A responder resource: what an executed RDMA READ or atomic needs to answer a duplicate.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RespResource {
    pub(crate) psn: u32,
    /// The original value returned by an atomic (None for a read).
    pub(crate) atomic_orig: Option<u64>,
}

/// Per-QP datapath state (the parts of the QP context the hardware keeps to itself).
#[derive(Clone, Debug, Default)]
pub(crate) struct QpDp {
    // ---- send queue / requester
    /// WQEBB counter of the next WQE to fetch.
    pub(crate) sq_ci: u16,
    /// Next PSN to send.
    pub(crate) next_psn: u32,
    /// WQEs sent and not yet completed, oldest first.
    pub(crate) outstanding: VecDeque<SentWqe>,
    /// Retries left (transport timeouts and sequence NAKs) since the last progress.
    pub(crate) retry_left: u8,
    /// RNR retries left since the last progress.
    pub(crate) rnr_left: u8,
    /// Retransmission deadline.
    pub(crate) timer: Option<u64>,
    /// RNR retry deadline (after an RNR NAK).
    pub(crate) rnr_timer: Option<u64>,
    /// The SQ stopped at a WQE that waits for READs or atomics (fence, `log_sra_max`).
    pub(crate) sq_blocked: bool,
    // ---- receive queue / responder
    /// Receive WQEs consumed (a 32-bit counter; the doorbell record holds its low 16 bits).
    pub(crate) rq_ci: u32,
    /// Expected PSN.
    pub(crate) epsn: u32,
    /// Message sequence number (messages completed at the responder).
    pub(crate) msn: u32,
    pub(crate) recv: Option<RecvProgress>,
    pub(crate) write: Option<WriteProgress>,
    pub(crate) resources: VecDeque<RespResource>,
    /// An ACK is owed (a packet with AckReq arrived).
    pub(crate) ack_pending: bool,
    /// Packets received since the last ACK.
    pub(crate) unacked: u32,
    /// A sequence-error NAK was sent for the current gap.
    pub(crate) nak_sent: bool,
    /// A packet arrived (COMM_EST was raised if in RTR).
    pub(crate) established: bool,
    /// XRC target: the XRC SRQ the request being executed names (its XRCETH, in the QP's
    /// XRC domain), where receive WQEs come from and completions go.
    pub(crate) xrc_srqn: Option<u32>,
}

/// The engine of one HCA.
#[derive(Debug, Default)]
pub(crate) struct Engine {
    pub(crate) qps: BTreeMap<u32, QpDp>,
    /// Frames to the wire, oldest first.
    pub(crate) tx: VecDeque<Vec<u8>>,
    pub(crate) counters: DatapathCounters,
    /// CQs armed for a completion event: cqn -> solicited only.
    pub(crate) cq_armed: BTreeMap<u32, bool>,
    /// SRQ consumers: srqn -> (WQEs consumed, index of the next WQE in the list).
    pub(crate) srq_pos: BTreeMap<u32, (u16, u16)>,
    /// Model time of the last entry into the engine (for hooks called without a time).
    pub(crate) now: u64,
    /// Queue counters by counter set id.
    pub(crate) q_counters: BTreeMap<u8, QCounters>,
    /// The payload of the packet being built, read from memory (reused for every packet).
    pub(crate) scratch: Vec<u8>,
    /// The bytes of the send WQE being decoded (reused).
    pub(crate) wqe_buf: Vec<u8>,
    /// The bytes of the receive WQE being read (reused).
    pub(crate) rq_buf: Vec<u8>,
    /// Buffers of frames the fabric delivered, kept for the next frames (an allocation,
    /// zeroing and page faults per packet otherwise).
    pub(crate) spare_frames: Vec<Vec<u8>>,
    /// Gather lists of completed send WQEs, kept for the next WQEs (an allocation per
    /// message otherwise).
    pub(crate) spare_pieces: Vec<Vec<sq::Piece>>,
    /// Scatter lists of completed receive WQEs, kept for the next receives.
    pub(crate) spare_sges: Vec<Vec<mem::Sge>>,
    /// The headers of the last RoCEv2 frame received with data, to parse the next ones that
    /// repeat them (see [`crate::wire::roce::RxPrediction`]).
    pub(crate) rx_prediction: Option<crate::wire::roce::RxPrediction>,
    /// The same for native InfiniBand packets (see [`crate::wire::ib::RxPrediction`]).
    pub(crate) ib_rx_prediction: Option<crate::wire::ib::RxPrediction>,
}

/// Most lists [`Engine::spare_pieces`] and [`Engine::spare_sges`] keep each.
const SPARE_LISTS: usize = 256;

/// Most frame buffers [`Engine::spare_frames`] keeps: a doorbell for a hundred 64 KiB
/// messages emits thousands of frames before the fabric delivers any, and a smaller pool
/// left most of them to the allocator. The pool never holds more than was once in flight.
pub(crate) const SPARE_FRAMES: usize = 8192;

impl Engine {
    /// A buffer of `len` bytes for a frame, reusing a delivered frame's buffer: zero but for
    /// its last `tail` bytes, which the caller's emitter writes whole (payload, pad, CRCs),
    /// so they are not zeroed first.
    pub(crate) fn frame_buffer(&mut self, len: usize, tail: usize) -> Vec<u8> {
        match self.spare_frames.pop() {
            Some(mut f) => {
                f.resize(len, 0);
                f[..len - tail.min(len)].fill(0);
                f
            }
            None => vec![0u8; len],
        }
    }

    /// An empty gather list for a send WQE, reusing a completed one's.
    pub(crate) fn gather_list(&mut self) -> Vec<sq::Piece> {
        self.spare_pieces.pop().unwrap_or_default()
    }

    /// Keeps the gather list of a completed send WQE for the next.
    pub(crate) fn recycle_gather_list(&mut self, mut v: Vec<sq::Piece>) {
        if self.spare_pieces.len() < SPARE_LISTS && v.capacity() > 0 {
            v.clear();
            self.spare_pieces.push(v);
        }
    }

    /// An empty scatter list for a receive WQE, reusing a completed one's.
    pub(crate) fn scatter_list(&mut self) -> Vec<mem::Sge> {
        self.spare_sges.pop().unwrap_or_default()
    }

    /// Keeps the scatter list of a completed receive WQE for the next.
    pub(crate) fn recycle_scatter_list(&mut self, mut v: Vec<mem::Sge>) {
        if self.spare_sges.len() < SPARE_LISTS && v.capacity() > 0 {
            v.clear();
            self.spare_sges.push(v);
        }
    }

    /// Takes the buffers of delivered frames (up to [`SPARE_FRAMES`] kept); empties `bufs`.
    pub(crate) fn recycle_frames(&mut self, bufs: &mut Vec<Vec<u8>>) {
        let room = SPARE_FRAMES.saturating_sub(self.spare_frames.len());
        let n = bufs.len().min(room);
        self.spare_frames.extend(bufs.drain(..n));
        bufs.clear();
    }
}

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

impl Device {
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

    /// Hook of QUERY_QP: the context's counters as the datapath left them (next PSNs,
    /// message sequence number, WQE counters, current retry counts).
    pub(crate) fn engine_query_qp(&self, qpn: u32, qpc: &mut uhca_fwif::ctx::Qpc) {
        let Some(s) = self.engine.qps.get(&qpn) else {
            return;
        };
        let state = QpState::from_raw(qpc.state());
        if matches!(
            state,
            QpState::Rts | QpState::Sqer | QpState::Sqd | QpState::Err
        ) {
            qpc.set_next_send_psn(s.next_psn);
            qpc.set_cur_retry_count(s.retry_left & 7)
                .set_cur_rnr_retry(s.rnr_left & 7);
        }
        if !matches!(state, QpState::Rst | QpState::Init) {
            qpc.set_next_rcv_psn(s.epsn).set_rmsn(s.msn);
        }
        qpc.set_hw_sq_wqebb_counter(s.sq_ci)
            .set_hw_rq_counter(s.rq_ci);
    }

    /// Hook of DESTROY_QP.
    pub(crate) fn engine_qp_destroyed(&mut self, qpn: u32) {
        self.engine.qps.remove(&qpn);
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
