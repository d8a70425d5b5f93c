//! Completion queues: CREATE_CQ, DESTROY_CQ, QUERY_CQ, MODIFY_CQ and the CQ doorbell.

use super::{
    CmdResult, Cq, Ctx, Firmware, bad_param, bad_res, busy, lim, out, pages_for, pas_list, syndrome,
};
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::{ADAPTER_PAGE_SIZE, CQ_DB_REQ_NOT_SOL};

/// MODIFY_CQ field select: `cq_period`.
pub const CQ_MODIFY_PERIOD: u32 = 1 << 0;
/// MODIFY_CQ field select: `cq_max_count`.
pub const CQ_MODIFY_COUNT: u32 = 1 << 1;
/// MODIFY_CQ field select: `oi` (overrun ignore).
pub const CQ_MODIFY_OVERRUN: u32 = 1 << 2;
/// MODIFY_CQ op_mod: modify moderation fields.
pub const CQ_OP_MOD_MODIFY: u16 = 0;
/// MODIFY_CQ op_mod: resize (not offered: `cq_resize` is 0).
pub const CQ_OP_MOD_RESIZE: u16 = 1;

impl Firmware<'_> {
    pub(crate) fn cmd_create_cq(&mut self, c: &Ctx, i: &CreateCqIn) -> CmdResult {
        let cqc = *i.cq_context();
        let caps = &self.state.caps.general_cur;
        if i.cq_umem_valid() || cqc.dbr_umem_valid() || cqc.cqe_comp_en() {
            return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
        }
        let cqe_size: u64 = match cqc.cqe_sz() {
            0 => 64,
            1 => 128,
            _ => return Err(bad_param(syndrome::BAD_CQE_SIZE)),
        };
        if cqc.log_cq_size() > caps.log_max_cq_sz() {
            return Err(bad_param(syndrome::BAD_QUEUE_SIZE));
        }
        if !self.objs.uars.contains(&cqc.uar_page()) {
            return Err(bad_param(syndrome::BAD_UAR));
        }
        let eqn = cqc.c_eqn_or_apu_element();
        if eqn > u8::MAX as u32 || !self.objs.eqs.contains_key(&(eqn as u8)) {
            return Err(bad_param(syndrome::BAD_EQ));
        }
        if !cqc.dbr_addr().is_multiple_of(8) {
            return Err(bad_param(syndrome::BAD_DBR_ADDR));
        }
        let page_size = (ADAPTER_PAGE_SIZE as u64) << cqc.log_page_size().min(20);
        // `page_offset`: the CQ starts that many 64ths of a page into its first page (Linux
        // computes one for a user buffer, `mlx5_umem_find_best_cq_quantized_pgoff`); the page
        // list covers the offset and the CQEs.
        let start = cqc.page_offset() as u64 * (page_size / 64);
        let npages = pages_for(start + (cqe_size << cqc.log_cq_size()), page_size) as usize;
        let pas = pas_list(c.raw, CreateCqIn::SIZE, npages)?;
        self.need_regular_pages()?;
        if self.objs.cqs.len() >= 1 << self.state.caps.general_cur.log_max_cq() {
            return Err(lim(syndrome::TABLE_FULL));
        }
        let cqn = self.objs.alloc_id();
        let mut stored = cqc;
        stored
            .set_status(0)
            .set_producer_counter(0)
            .set_consumer_counter(0);
        self.objs.cqs.insert(
            cqn,
            Cq {
                cqc: stored,
                pas,
                pi: 0,
                arm: None,
            },
        );
        let mut o = CreateCqOut::default();
        o.set_cqn(cqn);
        Ok(out(&o))
    }

    pub(crate) fn cmd_destroy_cq(&mut self, _c: &Ctx, i: &DestroyCqIn) -> CmdResult {
        let cqn = i.cqn();
        if !self.objs.cqs.contains_key(&cqn) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        let objs = &self.objs;
        let used = objs
            .qps
            .values()
            .any(|q| q.qpc.cqn_snd() == cqn || q.qpc.cqn_rcv() == cqn)
            || objs.srqs.values().any(|s| s.xrc_cqn() == Some(cqn));
        if used {
            return Err(busy(syndrome::OBJECT_IN_USE));
        }
        self.objs.cqs.remove(&cqn);
        Ok(out(&DestroyCqOut::default()))
    }

    pub(crate) fn cmd_query_cq(&mut self, c: &Ctx, i: &QueryCqIn) -> CmdResult {
        let Some(cq) = self.objs.cqs.get(&i.cqn()) else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        let mut ctx = cq.cqc;
        let pi = cq.pi;
        let dbr = cq.cqc.dbr_addr();
        // The consumer counter lives in the CQ doorbell record (dword 0).
        let mut ci = [0u8; 4];
        let _ = self
            .iommu
            .dma_read(dbr, &mut ci, c.now, "CQ doorbell record");
        ctx.set_producer_counter(pi & 0x00ff_ffff)
            .set_consumer_counter(u32::from_be_bytes(ci) & 0x00ff_ffff);
        let mut o = QueryCqOut::default();
        *o.cq_context_mut() = ctx;
        Ok(out(&o))
    }

    pub(crate) fn cmd_modify_cq(&mut self, _c: &Ctx, i: &ModifyCqIn) -> CmdResult {
        let cqn = i.cqn();
        if !self.objs.cqs.contains_key(&cqn) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        match i.op_mod() {
            CQ_OP_MOD_MODIFY => {}
            CQ_OP_MOD_RESIZE => return Err(bad_param(syndrome::UNSUPPORTED_FEATURE)),
            _ => return Err(bad_param(syndrome::BAD_OP_MOD)),
        }
        let sel = i.modify_field_select_resize_field_select();
        let known = CQ_MODIFY_PERIOD | CQ_MODIFY_COUNT | CQ_MODIFY_OVERRUN;
        if sel & !known != 0 {
            return Err(bad_param(syndrome::BAD_FIELD_SELECT));
        }
        let req = *i.cq_context();
        if sel & CQ_MODIFY_OVERRUN != 0 && req.oi() && !self.state.caps.general_cur.cq_oi() {
            return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
        }
        let Some(cq) = self.objs.cqs.get_mut(&cqn) else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        if sel & CQ_MODIFY_PERIOD != 0 {
            cq.cqc.set_cq_period(req.cq_period());
        }
        if sel & CQ_MODIFY_COUNT != 0 {
            cq.cqc.set_cq_max_count(req.cq_max_count());
        }
        if sel & CQ_MODIFY_OVERRUN != 0 {
            cq.cqc.set_oi(req.oi());
        }
        Ok(out(&ModifyCqOut::default()))
    }

    /// The CQ doorbell: arm word (sequence number, command, consumer index) and CQN.
    pub(crate) fn cq_doorbell(&mut self, uar: u32, v: u64, now: u64) {
        let arm = (v >> 32) as u32;
        let cqn = (v as u32) & 0x00ff_ffff;
        let Some(cq) = self.objs.cqs.get_mut(&cqn) else {
            self.note(
                now,
                format!("CQ doorbell for CQ {cqn:#x}, which does not exist"),
            );
            return;
        };
        if cq.cqc.uar_page() != uar {
            let own = cq.cqc.uar_page();
            self.note(
                now,
                format!("CQ doorbell for CQ {cqn:#x} on UAR {uar}; its UAR is {own}"),
            );
            return;
        }
        let sn = ((arm >> 28) & 3) as u8;
        let solicited = arm & CQ_DB_REQ_NOT_SOL != 0;
        cq.arm = Some((sn, solicited, arm & 0x00ff_ffff));
    }
}
