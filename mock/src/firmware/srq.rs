//! Shared receive queues: CREATE_SRQ, DESTROY_SRQ, QUERY_SRQ, ARM_RQ.

use super::{
    CmdResult, Ctx, Srq, bad_param, bad_res, busy, lim, out, pages_for, pas_list, syndrome,
};
use crate::device::Device;
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::ADAPTER_PAGE_SIZE;

/// ARM_RQ op_mod for an SRQ.
pub const ARM_RQ_OP_MOD_SRQ: u16 = 1;

impl Device {
    pub(crate) fn cmd_create_srq(&mut self, c: &Ctx, i: &CreateSrqIn) -> CmdResult {
        let s = *i.srq_context_entry();
        let caps = &self.fw.caps.general_cur;
        if s.log_srq_size() > caps.log_max_srq_sz().min(15) {
            return Err(bad_param(syndrome::BAD_QUEUE_SIZE));
        }
        if !self.fw.pds.contains(&s.pd()) {
            return Err(bad_param(syndrome::BAD_PD));
        }
        if s.xrcd() != 0 {
            return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
        }
        if s.page_offset() != 0 {
            return Err(bad_param(syndrome::BAD_PAGE_SIZE));
        }
        if !s.dbr_addr().is_multiple_of(8) {
            return Err(bad_param(syndrome::BAD_DBR_ADDR));
        }
        if s.lwm() as u64 >= 1u64 << s.log_srq_size() {
            return Err(bad_param(syndrome::BAD_LWM));
        }
        let bytes = (1u64 << s.log_srq_size()) * (16u64 << s.log_rq_stride());
        let page_size = (ADAPTER_PAGE_SIZE as u64) << s.log_page_size().min(20);
        let npages = pages_for(bytes, page_size) as usize;
        let pas = pas_list(c.raw, CreateSrqIn::SIZE, npages)?;
        self.need_regular_pages()?;
        if self.fw.srqs.len() >= 1 << self.fw.caps.general_cur.log_max_srq() {
            return Err(lim(syndrome::TABLE_FULL));
        }
        let srqn = self.fw.alloc_id();
        let mut stored = s;
        stored.set_state(0).set_wqe_cnt(0);
        self.fw.srqs.insert(srqn, Srq { srqc: stored, pas });
        let mut o = CreateSrqOut::default();
        o.set_srqn(srqn);
        Ok(out(&o))
    }

    pub(crate) fn cmd_destroy_srq(&mut self, _c: &Ctx, i: &DestroySrqIn) -> CmdResult {
        let n = i.srqn();
        if !self.fw.srqs.contains_key(&n) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        if self
            .fw
            .qps
            .values()
            .any(|q| q.qpc.rq_type() == 1 && q.qpc.srqn_rmpn_xrqn() == n)
        {
            return Err(busy(syndrome::OBJECT_IN_USE));
        }
        self.fw.srqs.remove(&n);
        Ok(out(&DestroySrqOut::default()))
    }

    pub(crate) fn cmd_query_srq(&mut self, _c: &Ctx, i: &QuerySrqIn) -> CmdResult {
        let Some(s) = self.fw.srqs.get(&i.srqn()) else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        let mut o = QuerySrqOut::default();
        *o.srq_context_entry_mut() = s.srqc;
        Ok(out(&o))
    }

    pub(crate) fn cmd_arm_rq(&mut self, _c: &Ctx, i: &ArmRqIn) -> CmdResult {
        if i.op_mod() != ARM_RQ_OP_MOD_SRQ {
            return Err(bad_param(syndrome::BAD_OP_MOD));
        }
        let Some(s) = self.fw.srqs.get_mut(&i.srq_number()) else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        if i.lwm() as u64 >= 1u64 << s.srqc.log_srq_size() {
            return Err(bad_param(syndrome::BAD_LWM));
        }
        s.srqc.set_lwm(i.lwm());
        Ok(out(&ArmRqOut::default()))
    }
}
