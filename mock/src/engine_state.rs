//! The engine's state: what the hardware keeps to itself besides the objects' contexts
//! (per-QP transport state, SRQ consumers, armed CQs, counters, the transmit queue, reused
//! buffers), and the work requests it holds. Device holds an [`EngineState`]; the datapath steps
//! read and change it.

use std::collections::{BTreeMap, VecDeque};
use uhca_fwif::cmd::QueryQCounterOut;
use uhca_fwif::consts::{QpState, WqeOpcode};
use uhca_fwif::ctx::Qpc;

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
    pub(crate) wqe: RecvWqe,
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

impl QpDp {
    /// What QUERY_QP reports of it: the context's counters as the datapath left them (next
    /// PSNs, message sequence number, WQE counters, current retry counts).
    pub(crate) fn report(&self, qpc: &mut Qpc) {
        let state = QpState::from_raw(qpc.state());
        if matches!(
            state,
            QpState::Rts | QpState::Sqer | QpState::Sqd | QpState::Err
        ) {
            qpc.set_next_send_psn(self.next_psn);
            qpc.set_cur_retry_count(self.retry_left & 7)
                .set_cur_rnr_retry(self.rnr_left & 7);
        }
        if !matches!(state, QpState::Rst | QpState::Init) {
            qpc.set_next_rcv_psn(self.epsn).set_rmsn(self.msn);
        }
        qpc.set_hw_sq_wqebb_counter(self.sq_ci)
            .set_hw_rq_counter(self.rq_ci);
    }
}

/// The engine of one HCA.
#[derive(Debug, Default)]
pub(crate) struct EngineState {
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
    pub(crate) spare_pieces: Vec<Vec<Piece>>,
    /// Scatter lists of completed receive WQEs, kept for the next receives.
    pub(crate) spare_sges: Vec<Vec<Sge>>,
    /// The headers of the last RoCEv2 frame received with data, to parse the next ones that
    /// repeat them (see [`crate::wire::roce::RxPrediction`]).
    pub(crate) rx_prediction: Option<crate::wire::roce::RxPrediction>,
    /// The same for native InfiniBand packets (see [`crate::wire::ib::RxPrediction`]).
    pub(crate) ib_rx_prediction: Option<crate::wire::ib::RxPrediction>,
}

/// Most lists [`EngineState::spare_pieces`] and [`EngineState::spare_sges`] keep each.
const SPARE_LISTS: usize = 256;

/// Most frame buffers [`EngineState::spare_frames`] keeps: a doorbell for a hundred 64 KiB
/// messages emits thousands of frames before the fabric delivers any, and a smaller pool
/// left most of them to the allocator. The pool never holds more than was once in flight.
pub(crate) const SPARE_FRAMES: usize = 8192;

impl EngineState {
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
    pub(crate) fn gather_list(&mut self) -> Vec<Piece> {
        self.spare_pieces.pop().unwrap_or_default()
    }

    /// Keeps the gather list of a completed send WQE for the next.
    pub(crate) fn recycle_gather_list(&mut self, mut v: Vec<Piece>) {
        if self.spare_pieces.len() < SPARE_LISTS && v.capacity() > 0 {
            v.clear();
            self.spare_pieces.push(v);
        }
    }

    /// An empty scatter list for a receive WQE, reusing a completed one's.
    pub(crate) fn scatter_list(&mut self) -> Vec<Sge> {
        self.spare_sges.pop().unwrap_or_default()
    }

    /// Keeps the scatter list of a completed receive WQE for the next.
    pub(crate) fn recycle_scatter_list(&mut self, mut v: Vec<Sge>) {
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

/// A scatter/gather entry of a WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sge {
    pub(crate) lkey: u32,
    pub(crate) addr: u64,
    pub(crate) len: u32,
}

/// One piece of a send WQE's data.
#[derive(Clone, Debug)]
pub(crate) enum Piece {
    /// A data segment (gathered through its lkey).
    Sge(Sge),
    /// Inline data.
    Inline(Vec<u8>),
}

/// A receive WQE taken from an RQ or an SRQ.
#[derive(Clone, Debug)]
pub(crate) struct RecvWqe {
    /// The WQE counter the CQE reports (RQ: the consumer counter; SRQ: the WQE index).
    pub(crate) counter: u16,
    pub(crate) sges: Vec<Sge>,
    /// Whether the queue it came from allows the reserved lkey (`qpc.rlky` for the QP's
    /// own receive queue, `srqc.rlky` for an SRQ; an RMP's context has no such bit).
    pub(crate) rlky: bool,
}

/// What a send WQE's control segment says that its packets and its completion need,
/// kept from decoding until the CQE.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendCtrl {
    /// WQEBB counter of its first basic block (the WQE index).
    pub(crate) counter: u16,
    pub(crate) opcode: WqeOpcode,
    /// A CQE is written when it completes, not only on error.
    pub(crate) signaled: bool,
    /// The last packet asks for a solicited event.
    pub(crate) solicited: bool,
    /// Immediate data.
    pub(crate) imm: u32,
}

/// A WQE that was sent and waits for its completion (RC), with what a retransmission or a
/// response needs.
#[derive(Clone, Debug)]
pub(crate) struct SentWqe {
    /// What its control segment said.
    pub(crate) ctrl: SendCtrl,
    pub(crate) first_psn: u32,
    /// PSNs the message uses (packets; for a READ, its response packets).
    pub(crate) npkts: u32,
    /// Packets acknowledged (SEND, WRITE) or responses received (READ).
    pub(crate) acked: u32,
    pub(crate) len: u64,
    pub(crate) remote: (u64, u32),
    pub(crate) atomic: (u64, u64),
    /// The gather list of a SEND or WRITE (data segments and inline data), read again
    /// for each packet sent.
    pub(crate) data: Vec<Piece>,
    /// Where a READ response or an atomic result goes.
    pub(crate) local: Vec<Sge>,
    /// XRC: the remote XRC SRQ every request packet names, 0 otherwise.
    pub(crate) xrc_srqn: u32,
}

impl SentWqe {
    pub(crate) fn last_psn(&self) -> u32 {
        crate::wire::ib::psn::add(self.first_psn, self.npkts.saturating_sub(1))
    }
    pub(crate) fn is_read_or_atomic(&self) -> bool {
        matches!(
            self.ctrl.opcode,
            WqeOpcode::RdmaRead | WqeOpcode::AtomicCs | WqeOpcode::AtomicFa
        )
    }
}

/// The counters of one queue-counter set (names as in `query_q_counter_out`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QCounters {
    /// RDMA WRITE requests received.
    pub rx_write_requests: u32,
    /// RDMA READ requests received.
    pub rx_read_requests: u32,
    /// Atomic requests received.
    pub rx_atomic_requests: u32,
    /// Packets that found no receive WQE (RNR NAK sent or UD datagram dropped).
    pub out_of_buffer: u32,
    /// Requests received with a PSN beyond the expected one.
    pub out_of_sequence: u32,
    /// Duplicate requests received.
    pub duplicate_request: u32,
    /// RNR NAKs received.
    pub rnr_nak_retry_err: u32,
    /// PSN sequence-error NAKs received.
    pub packet_seq_err: u32,
    /// Implied NAKs (an ACK past a READ or atomic without its response).
    pub implied_nak_seq_err: u32,
    /// Retransmission timeouts.
    pub local_ack_timeout_err: u32,
    /// RNR retries exhausted.
    pub req_rnr_retries_exceeded: u32,
    /// Transport retries exhausted.
    pub req_transport_retries_exceeded: u32,
    /// Error CQEs of send WQEs (flushes excluded).
    pub req_cqe_error: u32,
    /// Error CQEs of receive WQEs (flushes excluded).
    pub resp_cqe_error: u32,
    /// Requester local length errors.
    pub req_local_length_error: u32,
    /// Responder local length errors.
    pub resp_local_length_error: u32,
    /// Requester local protection errors.
    pub req_local_protection: u32,
    /// Responder local protection errors.
    pub resp_local_protection: u32,
    /// Remote invalid request errors at the requester.
    pub req_remote_invalid_request: u32,
    /// Remote access errors at the requester.
    pub req_remote_access_errors: u32,
    /// Remote operation errors at the requester.
    pub req_remote_operation_errors: u32,
}

impl QCounters {
    pub(crate) fn add(&mut self, o: &QCounters) {
        macro_rules! sum {
            ($($f:ident),*) => { $( self.$f = self.$f.wrapping_add(o.$f); )* };
        }
        sum!(
            rx_write_requests,
            rx_read_requests,
            rx_atomic_requests,
            out_of_buffer,
            out_of_sequence,
            duplicate_request,
            rnr_nak_retry_err,
            packet_seq_err,
            implied_nak_seq_err,
            local_ack_timeout_err,
            req_rnr_retries_exceeded,
            req_transport_retries_exceeded,
            req_cqe_error,
            resp_cqe_error,
            req_local_length_error,
            resp_local_length_error,
            req_local_protection,
            resp_local_protection,
            req_remote_invalid_request,
            req_remote_access_errors,
            req_remote_operation_errors
        );
    }

    /// Writes the counters into a QUERY_Q_COUNTER output.
    pub(crate) fn fill(&self, o: &mut QueryQCounterOut) {
        o.set_rx_write_requests(self.rx_write_requests)
            .set_rx_read_requests(self.rx_read_requests)
            .set_rx_atomic_requests(self.rx_atomic_requests)
            .set_out_of_buffer(self.out_of_buffer)
            .set_out_of_sequence(self.out_of_sequence)
            .set_duplicate_request(self.duplicate_request)
            .set_rnr_nak_retry_err(self.rnr_nak_retry_err)
            .set_packet_seq_err(self.packet_seq_err)
            .set_implied_nak_seq_err(self.implied_nak_seq_err)
            .set_local_ack_timeout_err(self.local_ack_timeout_err)
            .set_req_rnr_retries_exceeded(self.req_rnr_retries_exceeded)
            .set_req_transport_retries_exceeded(self.req_transport_retries_exceeded)
            .set_req_cqe_error(self.req_cqe_error)
            .set_resp_cqe_error(self.resp_cqe_error)
            .set_req_local_length_error(self.req_local_length_error)
            .set_resp_local_length_error(self.resp_local_length_error)
            .set_req_local_protection(self.req_local_protection)
            .set_resp_local_protection(self.resp_local_protection)
            .set_req_remote_invalid_request(self.req_remote_invalid_request)
            .set_req_remote_access_errors(self.req_remote_access_errors)
            .set_req_remote_operation_errors(self.req_remote_operation_errors);
    }
}

/// The counters of set `id` of `sets` (the engine's), or the sum of every set (`aggregate`); `clear` zeroes them
/// after reading.
pub(crate) fn read_q_counters(
    sets: &mut BTreeMap<u8, QCounters>,
    id: u8,
    aggregate: bool,
    clear: bool,
) -> QCounters {
    let mut out = QCounters::default();
    if aggregate {
        for c in sets.values() {
            out.add(c);
        }
        if clear {
            sets.clear();
        }
    } else {
        out = sets.get(&id).copied().unwrap_or_default();
        if clear {
            sets.remove(&id);
        }
    }
    out
}
