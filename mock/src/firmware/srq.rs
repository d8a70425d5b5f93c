//! Shared receive queues: at ISSI 0 CREATE_SRQ, DESTROY_SRQ, QUERY_SRQ and ARM_RQ; at ISSI 1
//! their replacement, the receive memory pool (RMP): CREATE_RMP, MODIFY_RMP (the limit,
//! through `rmp_bitmask.lwm`), QUERY_RMP, DESTROY_RMP. The dispatcher refuses each family
//! at the other interface step; both kinds live in one table, since a QP names either in
//! `qpc.srqn_rmpn_xrqn`. XRC SRQs (CREATE_XRC_SRQ and friends) are in `xrc.rs`.

use super::{
    CmdResult, Ctx, Fail, Firmware, Srq, SrqCtx, bad_param, bad_res, busy, lim, out, pages_for,
    pas_list, syndrome,
};
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::{ADAPTER_PAGE_SIZE, CmdStatus, RmpcState};
use zerocopy::IntoBytes;

/// ARM_RQ op_mod for an SRQ.
pub const ARM_RQ_OP_MOD_SRQ: u16 = 1;
/// `wq.wq_type` of a linked-list work queue (the only kind of RMP modelled).
const WQ_TYPE_LINKED_LIST: u8 = 0;
/// Smallest receive WQE stride, log2 of bytes (a "next" segment and one data segment would
/// not fit in less than 16 bytes).
const MIN_LOG_WQ_STRIDE: u8 = 4;

impl Firmware<'_> {
    /// The checks CREATE_SRQ and CREATE_RMP share; returns the page list.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn check_new_srq(
        &mut self,
        c: &Ctx,
        in_size: usize,
        log_size: u8,
        stride: u64,
        log_page_size: u8,
        pd: u32,
        page_offset: u8,
        dbr_addr: u64,
        lwm: u16,
        log_max: u8,
    ) -> Result<Vec<u64>, Fail> {
        let caps = &self.state.caps.general_cur;
        if log_size > caps.log_max_srq_sz().min(15) {
            return Err(bad_param(syndrome::BAD_QUEUE_SIZE));
        }
        if !self.objs.pds.contains(&pd) {
            return Err(bad_param(syndrome::BAD_PD));
        }
        if !dbr_addr.is_multiple_of(8) {
            return Err(bad_param(syndrome::BAD_DBR_ADDR));
        }
        if lwm as u64 >= 1u64 << log_size {
            return Err(bad_param(syndrome::BAD_LWM));
        }
        let bytes = (1u64 << log_size) * stride;
        let page_size = (ADAPTER_PAGE_SIZE as u64) << log_page_size.min(20);
        // `page_offset`: the queue starts that many 64ths of a page into its first page
        // (Linux computes one for a user buffer not aligned to the page size it picked,
        // `srq_cmd.c` `get_pas_size`); the page list covers the offset and the queue.
        let start = page_offset as u64 * (page_size / 64);
        let npages = pages_for(start + bytes, page_size) as usize;
        let pas = pas_list(c.raw, in_size, npages)?;
        self.need_regular_pages()?;
        if self.objs.srqs.len() >= 1 << log_max {
            return Err(lim(syndrome::TABLE_FULL));
        }
        Ok(pas)
    }

    /// Refuses DESTROY of a shared receive queue a QP still receives from.
    pub(super) fn srq_unused(&self, n: u32) -> Result<(), Fail> {
        if self
            .objs
            .qps
            .values()
            .any(|q| q.qpc.rq_type() == 1 && q.qpc.srqn_rmpn_xrqn() == n)
        {
            return Err(busy(syndrome::OBJECT_IN_USE));
        }
        Ok(())
    }

    pub(crate) fn cmd_create_srq(&mut self, c: &Ctx, i: &CreateSrqIn) -> CmdResult {
        let s = *i.srq_context_entry();
        // At ISSI 0 an SRQ created in an XRC domain is an XRC SRQ: it must name an allocated
        // domain and an existing CQ, where XRC receives complete.
        if s.xrcd() != 0 {
            self.check_xrc_srq_refs(s.xrcd(), s.cqn())?;
        }
        let log_max = self.state.caps.general_cur.log_max_srq();
        let pas = self.check_new_srq(
            c,
            CreateSrqIn::SIZE,
            s.log_srq_size(),
            16u64 << s.log_rq_stride(),
            s.log_page_size(),
            s.pd(),
            s.page_offset(),
            s.dbr_addr(),
            s.lwm(),
            log_max,
        )?;
        let srqn = self.objs.alloc_id();
        let mut stored = s;
        stored.set_state(0).set_wqe_cnt(0);
        self.objs.srqs.insert(
            srqn,
            Srq {
                ctx: SrqCtx::Srq(stored),
                pas,
            },
        );
        let mut o = CreateSrqOut::default();
        o.set_srqn(srqn);
        Ok(out(&o))
    }

    pub(crate) fn cmd_destroy_srq(&mut self, _c: &Ctx, i: &DestroySrqIn) -> CmdResult {
        let n = i.srqn();
        if !matches!(
            self.objs.srqs.get(&n),
            Some(Srq {
                ctx: SrqCtx::Srq(_),
                ..
            })
        ) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        self.srq_unused(n)?;
        self.objs.srqs.remove(&n);
        self.srq_pos.remove(&n);
        Ok(out(&DestroySrqOut::default()))
    }

    pub(crate) fn cmd_query_srq(&mut self, _c: &Ctx, i: &QuerySrqIn) -> CmdResult {
        let Some(Srq {
            ctx: SrqCtx::Srq(s),
            ..
        }) = self.objs.srqs.get(&i.srqn())
        else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        let mut o = QuerySrqOut::default();
        *o.srq_context_entry_mut() = *s;
        Ok(out(&o))
    }

    pub(crate) fn cmd_arm_rq(&mut self, _c: &Ctx, i: &ArmRqIn) -> CmdResult {
        if i.op_mod() != ARM_RQ_OP_MOD_SRQ {
            return Err(bad_param(syndrome::BAD_OP_MOD));
        }
        let Some(s) = self.objs.srqs.get_mut(&i.srq_number()) else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        if !matches!(s.ctx, SrqCtx::Srq(_)) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        if i.lwm() as u64 >= 1u64 << s.log_size() {
            return Err(bad_param(syndrome::BAD_LWM));
        }
        s.set_lwm(i.lwm());
        Ok(out(&ArmRqOut::default()))
    }

    pub(crate) fn cmd_create_rmp(&mut self, c: &Ctx, i: &CreateRmpIn) -> CmdResult {
        let r = *i.ctx();
        let wq = *r.wq();
        if r.state() != RmpcState::Rdy.raw() {
            return Err(bad_param(syndrome::BAD_RMP_STATE));
        }
        if r.basic_cyclic_rcv_wqe()
            || wq.wq_type() != WQ_TYPE_LINKED_LIST
            || wq.wq_umem_valid()
            || wq.dbr_umem_valid()
            || wq.wq_signature()
        {
            return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
        }
        if wq.log_wq_stride() < MIN_LOG_WQ_STRIDE {
            return Err(bad_param(syndrome::BAD_QUEUE_SIZE));
        }
        let log_max = self.state.caps.general_cur.log_max_rmp();
        let pas = self.check_new_srq(
            c,
            CreateRmpIn::SIZE,
            wq.log_wq_sz(),
            1u64 << wq.log_wq_stride(),
            wq.log_wq_pg_sz(),
            wq.pd(),
            wq.page_offset(),
            wq.dbr_addr(),
            wq.lwm(),
            log_max,
        )?;
        let rmpn = self.objs.alloc_id();
        let mut stored = r;
        stored.wq_mut().set_hw_counter(0).set_sw_counter(0);
        self.objs.srqs.insert(
            rmpn,
            Srq {
                ctx: SrqCtx::Rmp(stored),
                pas,
            },
        );
        let mut o = CreateRmpOut::default();
        o.set_rmpn(rmpn);
        Ok(out(&o))
    }

    pub(crate) fn cmd_modify_rmp(&mut self, _c: &Ctx, i: &ModifyRmpIn) -> CmdResult {
        let Some(s) = self.objs.srqs.get_mut(&i.rmpn()) else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        let SrqCtx::Rmp(cur) = &mut s.ctx else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        // `rmp_state` is the state the caller believes the RMP is in; `ctx.state` the next.
        if i.rmp_state() != cur.state() {
            return Err(Fail::Cmd(
                CmdStatus::BadResStateErr,
                syndrome::BAD_RMP_STATE,
            ));
        }
        let next = i.ctx().state();
        if next != RmpcState::Rdy.raw() && next != RmpcState::Err.raw() {
            return Err(bad_param(syndrome::BAD_RMP_STATE));
        }
        // Of the modifiable fields the bitmask names, only `lwm` exists.
        let bitmask = i.bitmask().as_bytes();
        if bitmask[..7].iter().any(|&b| b != 0) || bitmask[7] & 0xfe != 0 {
            return Err(bad_param(syndrome::BAD_FIELD_SELECT));
        }
        if i.bitmask().lwm() {
            let lwm = i.ctx().wq().lwm();
            if lwm as u64 >= 1u64 << cur.wq().log_wq_sz() {
                return Err(bad_param(syndrome::BAD_LWM));
            }
            cur.wq_mut().set_lwm(lwm);
        }
        cur.set_state(next);
        Ok(out(&ModifyRmpOut::default()))
    }

    pub(crate) fn cmd_query_rmp(&mut self, _c: &Ctx, i: &QueryRmpIn) -> CmdResult {
        let n = i.rmpn();
        let Some(Srq {
            ctx: SrqCtx::Rmp(r),
            ..
        }) = self.objs.srqs.get(&n)
        else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        let mut ctx = *r;
        // The WQEs the device has taken so far.
        let consumed = self.srq_pos.get(&n).map_or(0, |&(c, _)| c);
        ctx.wq_mut().set_hw_counter(consumed as u32);
        let mut o = QueryRmpOut::default();
        *o.rmp_context_mut() = ctx;
        Ok(out(&o))
    }

    pub(crate) fn cmd_destroy_rmp(&mut self, _c: &Ctx, i: &DestroyRmpIn) -> CmdResult {
        let n = i.rmpn();
        if !matches!(
            self.objs.srqs.get(&n),
            Some(Srq {
                ctx: SrqCtx::Rmp(_),
                ..
            })
        ) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        self.srq_unused(n)?;
        self.objs.srqs.remove(&n);
        self.srq_pos.remove(&n);
        Ok(out(&DestroyRmpOut::default()))
    }
}
