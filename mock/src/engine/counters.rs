//! Queue counters (ALLOC_Q_COUNTER sets, read by QUERY_Q_COUNTER): each QP counts into the
//! set named by its `counter_set_id`.

use crate::device::Device;
use uhca_fwif::cmd::QueryQCounterOut;
use uhca_fwif::consts::{CqeOpcode, CqeSyndrome};

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
    fn add(&mut self, o: &QCounters) {
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

impl Device {
    /// Counts an event of QP `qpn` into its counter set (if it has one).
    pub(crate) fn count(&mut self, qpn: u32, f: impl FnOnce(&mut QCounters)) {
        let Some(id) = self.objs.qps.get(&qpn).map(|q| q.qpc.counter_set_id()) else {
            return;
        };
        if id != 0 && self.objs.q_counters.contains(&id) {
            f(self.engine.q_counters.entry(id).or_default());
        }
    }

    /// Counts an error CQE.
    pub(crate) fn count_error_cqe(&mut self, qpn: u32, opcode: CqeOpcode, s: CqeSyndrome) {
        if s == CqeSyndrome::WrFlushErr {
            return;
        }
        let req = opcode == CqeOpcode::ReqErr;
        self.count(qpn, |c| {
            if req {
                c.req_cqe_error += 1;
            } else {
                c.resp_cqe_error += 1;
            }
            match (req, s) {
                (true, CqeSyndrome::LocalLengthErr) => c.req_local_length_error += 1,
                (false, CqeSyndrome::LocalLengthErr) => c.resp_local_length_error += 1,
                (true, CqeSyndrome::LocalProtErr) => c.req_local_protection += 1,
                (false, CqeSyndrome::LocalProtErr) => c.resp_local_protection += 1,
                (_, CqeSyndrome::RemoteInvalReqErr) => c.req_remote_invalid_request += 1,
                (_, CqeSyndrome::RemoteAccessErr) => c.req_remote_access_errors += 1,
                (_, CqeSyndrome::RemoteOpErr) => c.req_remote_operation_errors += 1,
                (_, CqeSyndrome::RnrRetryExcErr) => c.req_rnr_retries_exceeded += 1,
                (_, CqeSyndrome::TransportRetryExcErr) => c.req_transport_retries_exceeded += 1,
                _ => {}
            }
        });
    }

    /// The counters of set `id`, or the sum of every set (`aggregate`); `clear` zeroes them
    /// after reading.
    pub(crate) fn q_counters(&mut self, id: u8, aggregate: bool, clear: bool) -> QCounters {
        let mut out = QCounters::default();
        if aggregate {
            for c in self.engine.q_counters.values() {
                out.add(c);
            }
            if clear {
                self.engine.q_counters.clear();
            }
        } else {
            out = self.engine.q_counters.get(&id).copied().unwrap_or_default();
            if clear {
                self.engine.q_counters.remove(&id);
            }
        }
        out
    }
}
