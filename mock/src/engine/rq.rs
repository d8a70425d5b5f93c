//! Receive WQEs: from the QP's own receive queue (at the start of the QP buffer) or from
//! its SRQ (a linked list through each WQE's "next" segment), up to the doorbell record's
//! receive counter; for an XRC target, from the XRC SRQ the request names.

use super::mem::{QueueBuf, Sge};
pub(crate) use super::state::RecvWqe;
use crate::device::Device;
use uhca_fwif::consts::{ADAPTER_PAGE_SIZE, EventType, RCV_DBR};
use uhca_fwif::wqe::{INVALID_LKEY, WqeDataSeg};
use zerocopy::FromBytes;

/// The scatter list of a receive WQE (data segments until [`INVALID_LKEY`]), appended to
/// `out` (empty, reused).
fn parse_sges(raw: &[u8], mut out: Vec<Sge>) -> Vec<Sge> {
    for c in raw.chunks_exact(16) {
        let Ok(d) = WqeDataSeg::read_from_bytes(c) else {
            break;
        };
        if d.lkey.get() == INVALID_LKEY {
            break;
        }
        out.push(Sge {
            lkey: d.lkey.get(),
            addr: d.addr.get(),
            len: d.byte_count.get(),
        });
    }
    out
}

impl Device {
    /// Takes the next receive WQE of `qpn` (`consume`), or only says whether there is one.
    pub(crate) fn recv_wqe(&mut self, qpn: u32, consume: bool, now: u64) -> Option<RecvWqe> {
        let q = self.objs.qps.get(&qpn)?;
        let qpc = q.qpc;
        let xrc = super::xrc::is_xrc(&qpc);
        // An XRC QP's receives come from the XRC SRQ its request names, whatever its
        // `rq_type` and `srqn_rmpn_xrqn` say.
        match if xrc { 1 } else { qpc.rq_type() } {
            0 => {
                let pi =
                    self.datapath()
                        .dbr_dword(qpc.dbr_addr(), RCV_DBR as u64, now)? as u16;
                let ci = self.engine.qps.get(&qpn)?.rq_ci;
                if pi == ci as u16 {
                    return None;
                }
                let size = 1u32 << qpc.log_rq_size();
                if pi.wrapping_sub(ci as u16) as u32 > size {
                    return None;
                }
                let stride = 16u64 << qpc.log_rq_stride();
                let page = (ADAPTER_PAGE_SIZE as u64) << qpc.log_page_size().min(20);
                let off = (ci & (size - 1)) as u64 * stride;
                let mut raw = std::mem::take(&mut self.engine.rq_buf);
                raw.clear();
                raw.resize(stride as usize, 0);
                let read = self.datapath().queue_read(
                    QueueBuf::Qp(qpn),
                    page,
                    off,
                    &mut raw,
                    now,
                    "receive WQE",
                );
                let sges = parse_sges(&raw, self.engine.scatter_list());
                self.engine.rq_buf = raw;
                if !read {
                    return None;
                }
                if consume && let Some(s) = self.engine.qps.get_mut(&qpn) {
                    s.rq_ci = s.rq_ci.wrapping_add(1);
                }
                Some(RecvWqe {
                    counter: ci as u16,
                    sges,
                    rlky: qpc.rlky(),
                })
            }
            1 => {
                // An SRQ (ISSI 0) or an RMP (ISSI 1): the same linked list of WQEs.
                let srqn = if xrc {
                    self.engine.qps.get(&qpn)?.xrc_srqn?
                } else {
                    qpc.srqn_rmpn_xrqn()
                };
                let srq = self.objs.srqs.get(&srqn)?;
                let (size, stride) = (1u32 << srq.log_size(), srq.stride());
                let page = (ADAPTER_PAGE_SIZE as u64) << srq.log_page_size().min(20);
                let lwm = srq.lwm();
                let rlky = srq.rlky();
                let dbr = srq.dbr_addr();
                let pi = self.datapath().dbr_dword(dbr, 0, now)? as u16;
                let (consumed, next) = self.engine.srq_pos.get(&srqn).copied().unwrap_or((0, 0));
                if pi == consumed {
                    return None;
                }
                let idx = (next as u32 & (size - 1)) as u16;
                let mut raw = vec![0u8; stride as usize];
                if !self.datapath().queue_read(
                    QueueBuf::Srq(srqn),
                    page,
                    idx as u64 * stride,
                    &mut raw,
                    now,
                    "SRQ WQE",
                ) {
                    return None;
                }
                if consume {
                    let nxt = u16::from_be_bytes([raw[2], raw[3]]);
                    let consumed = consumed.wrapping_add(1);
                    self.engine.srq_pos.insert(srqn, (consumed, nxt));
                    // The limit: when fewer WQEs than `lwm` remain posted, one SRQ_RQ_LIMIT
                    // event, and the limit is disarmed until armed again.
                    if lwm != 0 && pi.wrapping_sub(consumed) < lwm {
                        if let Some(s) = self.objs.srqs.get_mut(&srqn) {
                            s.set_lwm(0);
                        }
                        self.srq_event(EventType::SrqRqLimit, srqn, now);
                    }
                }
                Some(RecvWqe {
                    counter: idx,
                    sges: parse_sges(raw.get(16..).unwrap_or(&[]), self.engine.scatter_list()),
                    rlky,
                })
            }
            _ => None,
        }
    }
}
