//! Queue counters (ALLOC_Q_COUNTER sets, read by QUERY_Q_COUNTER): each QP counts into the
//! set named by its `counter_set_id`.

use super::Engine;
use super::state::QCounters;
use uhca_fwif::consts::{CqeOpcode, CqeSyndrome};

impl Engine<'_> {
    /// Counts an event of QP `qpn` into its counter set (if it has one).
    pub(crate) fn count(&mut self, qpn: u32, f: impl FnOnce(&mut QCounters)) {
        let Some(id) = self.objs.qps.get(&qpn).map(|q| q.qpc.counter_set_id()) else {
            return;
        };
        if id != 0 && self.objs.q_counters.contains(&id) {
            f(self.state.q_counters.entry(id).or_default());
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
}
