//! XRC (eXtended Reliable Connected transport): XRC SRQs, the receive queues of an XRC
//! domain — CREATE_XRC_SRQ, DESTROY_XRC_SRQ, QUERY_XRC_SRQ, ARM_XRC_SRQ — and the checks
//! that tie XRC SRQs and XRC QPs to their domain (ALLOC_XRCD and DEALLOC_XRCD are in
//! `resources.rs`, CREATE_QP in `qp.rs` calls `check_xrc_qp`; the transport is
//! the engine's `xrc.rs`).
//!
//! An XRC SRQ differs from a plain SRQ in what names it and where it completes: no QP
//! attaches to it; an XRC sender names it in each message's XRCETH, the receiving XRC target
//! QP checks that it is in the target's domain, and the receive completes on the SRQ's own
//! CQ (`xrc_srqc.cqn`) with the SRQ's `user_index` in the CQE. Its WQEs are the same
//! linked list as any SRQ's, so the engine takes them the same way.

use super::{CmdResult, Ctx, Firmware, Srq, SrqCtx, bad_param, bad_res, busy, out, syndrome};
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::QpServiceType;
use uhca_fwif::ctx::XrcSrqc;

/// `xrc_srqc.state`: the XRC SRQ works (`MLX5_XRC_SRQC_STATE_GOOD`).
pub const XRC_SRQC_STATE_GOOD: u8 = 0;

impl Firmware<'_> {
    /// The references an XRC SRQ makes: an allocated XRC domain and an existing CQ.
    pub(super) fn check_xrc_srq_refs(&self, xrcd: u32, cqn: u32) -> Result<(), super::Fail> {
        if !self.objs.xrcds.contains(&xrcd) {
            return Err(bad_param(syndrome::BAD_XRCD));
        }
        if !self.objs.cqs.contains_key(&cqn) {
            return Err(bad_param(syndrome::BAD_CQ));
        }
        Ok(())
    }

    /// Whether an XRC SRQ or an XRC QP still belongs to the domain `xrcd`.
    pub(super) fn xrcd_in_use(&self, xrcd: u32) -> bool {
        self.objs.srqs.values().any(|s| s.xrcd() == Some(xrcd))
            || self
                .objs
                .qps
                .values()
                .any(|q| q.qpc.st() == QpServiceType::Xrc.raw() && q.qpc.xrcd() == xrcd)
    }

    pub(crate) fn cmd_create_xrc_srq(&mut self, c: &Ctx, i: &CreateXrcSrqIn) -> CmdResult {
        let s = *i.xrc_srq_context_entry();
        // Neither user memory (umem) for the queue or its doorbell record, nor the cyclic
        // receive queue, nor WQE signatures are modelled.
        if i.xrc_srq_umem_valid() || s.dbr_umem_valid() || s.basic_cyclic_rcv_wqe() {
            return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
        }
        if s.wq_signature() {
            return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
        }
        self.check_xrc_srq_refs(s.xrcd(), s.cqn())?;
        let log_max = self.state.caps.general_cur.log_max_srq();
        let pas = self.check_new_srq(
            c,
            CreateXrcSrqIn::SIZE,
            s.log_xrc_srq_size(),
            16u64 << s.log_rq_stride(),
            s.log_page_size(),
            s.pd(),
            s.page_offset(),
            crate::objects::xrc_srq_dbr_addr(&s),
            s.lwm(),
            log_max,
        )?;
        let srqn = self.objs.alloc_id();
        let mut stored = s;
        stored.set_state(XRC_SRQC_STATE_GOOD).set_wqe_cnt(0);
        if s.user_index_equal_xrc_srqn() {
            stored.set_user_index(srqn);
        }
        self.objs.srqs.insert(
            srqn,
            Srq {
                ctx: SrqCtx::Xrc(stored),
                pas,
            },
        );
        let mut o = CreateXrcSrqOut::default();
        o.set_xrc_srqn(srqn);
        Ok(out(&o))
    }

    /// The context of XRC SRQ `n`, if `n` is one.
    fn xrc_srq(&self, n: u32) -> Option<&XrcSrqc> {
        match self.objs.srqs.get(&n) {
            Some(Srq {
                ctx: SrqCtx::Xrc(c),
                ..
            }) => Some(c),
            _ => None,
        }
    }

    pub(crate) fn cmd_destroy_xrc_srq(&mut self, _c: &Ctx, i: &DestroyXrcSrqIn) -> CmdResult {
        let n = i.xrc_srqn();
        if self.xrc_srq(n).is_none() {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        self.srq_unused(n)?;
        self.objs.srqs.remove(&n);
        self.srq_pos.remove(&n);
        Ok(out(&DestroyXrcSrqOut::default()))
    }

    pub(crate) fn cmd_query_xrc_srq(&mut self, _c: &Ctx, i: &QueryXrcSrqIn) -> CmdResult {
        let Some(s) = self.xrc_srq(i.xrc_srqn()) else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        let mut o = QueryXrcSrqOut::default();
        *o.xrc_srq_context_entry_mut() = *s;
        Ok(out(&o))
    }

    pub(crate) fn cmd_arm_xrc_srq(&mut self, _c: &Ctx, i: &ArmXrcSrqIn) -> CmdResult {
        if i.op_mod() != ARM_XRC_SRQ_OP_MOD_XRC_SRQ {
            return Err(bad_param(syndrome::BAD_OP_MOD));
        }
        let n = i.xrc_srqn();
        if self.xrc_srq(n).is_none() {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        let Some(s) = self.objs.srqs.get_mut(&n) else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        if i.lwm() as u64 >= 1u64 << s.log_size() {
            return Err(bad_param(syndrome::BAD_LWM));
        }
        s.set_lwm(i.lwm());
        Ok(out(&ArmXrcSrqOut::default()))
    }

    /// DEALLOC_XRCD's check: a domain with XRC SRQs or XRC QPs stays.
    pub(super) fn xrcd_free_check(&self, xrcd: u32) -> Result<(), super::Fail> {
        if self.xrcd_in_use(xrcd) {
            return Err(busy(syndrome::OBJECT_IN_USE));
        }
        Ok(())
    }
}

/// CREATE_QP's checks of an XRC QP (`st` XRC): an initiator has a send queue, a target
/// none (`no_sq`), and neither has a receive queue of its own (`rq_type` SRQ, as Linux
/// sets it with a placeholder SRQ, or zero-length); both name an allocated XRC domain,
/// the domain a target takes requests for.
pub(super) fn check_xrc_qp(
    objs: &crate::objects::Objects,
    q: &uhca_fwif::ctx::Qpc,
) -> Result<(), super::Fail> {
    if !objs.xrcds.contains(&q.xrcd()) {
        return Err(bad_param(syndrome::BAD_XRCD));
    }
    if !matches!(q.rq_type(), 1 | 3) {
        return Err(bad_param(syndrome::BAD_RQ_TYPE));
    }
    Ok(())
}
