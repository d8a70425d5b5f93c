//! Simple resources: UAR pages, protection domains, transport domains, XRC domains and
//! queue counters.

use super::{CmdResult, Ctx, Firmware, bad_res, busy, lim, out, syndrome};
use crate::engine_state::read_q_counters;
use uhca_fwif::cmd::*;

/// Most UAR pages BAR0 holds.
const UAR_PAGES: u32 = (crate::pci::BAR0_SIZE / 4096) as u32;
/// Most queue counters (`max_qp_cnt`).
const MAX_Q_COUNTERS: u8 = 128;

impl Firmware<'_> {
    pub(crate) fn cmd_alloc_uar(&mut self, _c: &Ctx, _i: &AllocUarIn) -> CmdResult {
        let Some(uar) = (super::FIRST_UAR..UAR_PAGES).find(|u| !self.objs.uars.contains(u)) else {
            return Err(lim(syndrome::TABLE_FULL));
        };
        self.objs.uars.insert(uar);
        let mut o = AllocUarOut::default();
        o.set_uar(uar);
        Ok(out(&o))
    }

    pub(crate) fn cmd_dealloc_uar(&mut self, _c: &Ctx, i: &DeallocUarIn) -> CmdResult {
        let uar = i.uar();
        if !self.objs.uars.contains(&uar) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        let objs = &self.objs;
        let used = objs.eqs.values().any(|e| e.uar == uar)
            || objs.cqs.values().any(|c| c.cqc.uar_page() == uar)
            || objs.qps.values().any(|q| q.qpc.uar_page() == uar);
        if used {
            return Err(busy(syndrome::OBJECT_IN_USE));
        }
        self.objs.uars.remove(&uar);
        Ok(out(&DeallocUarOut::default()))
    }

    pub(crate) fn cmd_alloc_pd(&mut self, _c: &Ctx, _i: &AllocPdIn) -> CmdResult {
        if self.objs.pds.len() >= 1 << self.state.caps.general_cur.log_max_pd() {
            return Err(lim(syndrome::TABLE_FULL));
        }
        let pd = self.objs.alloc_id();
        self.objs.pds.insert(pd);
        let mut o = AllocPdOut::default();
        o.set_pd(pd);
        Ok(out(&o))
    }

    pub(crate) fn cmd_dealloc_pd(&mut self, _c: &Ctx, i: &DeallocPdIn) -> CmdResult {
        let pd = i.pd();
        if !self.objs.pds.contains(&pd) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        let objs = &self.objs;
        let used = objs.mkeys.values().any(|m| m.mkc.pd() == pd)
            || objs.qps.values().any(|q| q.qpc.pd() == pd)
            || objs.srqs.values().any(|s| s.pd() == pd);
        if used {
            return Err(busy(syndrome::OBJECT_IN_USE));
        }
        self.objs.pds.remove(&pd);
        Ok(out(&DeallocPdOut::default()))
    }

    pub(crate) fn cmd_alloc_td(&mut self, _c: &Ctx, _i: &AllocTransportDomainIn) -> CmdResult {
        if self.objs.tds.len() >= 1 << self.state.caps.general_cur.log_max_transport_domain() {
            return Err(lim(syndrome::TABLE_FULL));
        }
        let td = self.objs.alloc_id();
        self.objs.tds.insert(td);
        let mut o = AllocTransportDomainOut::default();
        o.set_transport_domain(td);
        Ok(out(&o))
    }

    pub(crate) fn cmd_dealloc_td(&mut self, _c: &Ctx, i: &DeallocTransportDomainIn) -> CmdResult {
        if !self.objs.tds.remove(&i.transport_domain()) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        Ok(out(&DeallocTransportDomainOut::default()))
    }

    pub(crate) fn cmd_alloc_xrcd(&mut self, _c: &Ctx, _i: &AllocXrcdIn) -> CmdResult {
        if self.objs.xrcds.len() >= 1 << self.state.caps.general_cur.log_max_xrcd() {
            return Err(lim(syndrome::TABLE_FULL));
        }
        let xrcd = self.objs.alloc_id();
        self.objs.xrcds.insert(xrcd);
        let mut o = AllocXrcdOut::default();
        o.set_xrcd(xrcd);
        Ok(out(&o))
    }

    pub(crate) fn cmd_dealloc_xrcd(&mut self, _c: &Ctx, i: &DeallocXrcdIn) -> CmdResult {
        let xrcd = i.xrcd();
        if !self.objs.xrcds.contains(&xrcd) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        // A domain its XRC SRQs or XRC QPs still name stays.
        self.xrcd_free_check(xrcd)?;
        self.objs.xrcds.remove(&xrcd);
        Ok(out(&DeallocXrcdOut::default()))
    }

    pub(crate) fn cmd_alloc_q_counter(&mut self, _c: &Ctx, _i: &AllocQCounterIn) -> CmdResult {
        let Some(id) = (1..MAX_Q_COUNTERS).find(|n| !self.objs.q_counters.contains(n)) else {
            return Err(lim(syndrome::TABLE_FULL));
        };
        self.objs.q_counters.insert(id);
        let mut o = AllocQCounterOut::default();
        o.set_counter_set_id(id);
        Ok(out(&o))
    }

    /// DEALLOC_Q_COUNTER: frees a counter set; QPs that still name it stop counting.
    pub(crate) fn cmd_dealloc_q_counter(&mut self, _c: &Ctx, i: &DeallocQCounterIn) -> CmdResult {
        let id = i.counter_set_id();
        if !self.objs.q_counters.contains(&id) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        self.objs.q_counters.remove(&id);
        self.q_counters.remove(&id);
        Ok(out(&DeallocQCounterOut::default()))
    }

    pub(crate) fn cmd_query_q_counter(&mut self, _c: &Ctx, i: &QueryQCounterIn) -> CmdResult {
        if i.other_vport() || i.vport_number() != 0 {
            return Err(super::bad_param(syndrome::BAD_FUNCTION));
        }
        if !i.aggregate() && !self.objs.q_counters.contains(&i.counter_set_id()) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        let mut o = QueryQCounterOut::default();
        read_q_counters(
            self.q_counters,
            i.counter_set_id(),
            i.aggregate(),
            i.clear(),
        )
        .fill(&mut o);
        Ok(out(&o))
    }
}
