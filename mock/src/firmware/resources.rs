//! Simple resources: UAR pages, protection domains, transport domains, XRC domains and
//! queue counters.

use super::{CmdResult, Ctx, bad_res, busy, lim, out, syndrome};
use crate::device::Device;
use uhca_fwif::cmd::*;

/// Most UAR pages BAR0 holds.
const UAR_PAGES: u32 = (crate::pci::BAR0_SIZE / 4096) as u32;
/// Most queue counters (`max_qp_cnt`).
const MAX_Q_COUNTERS: u8 = 128;

impl Device {
    pub(crate) fn cmd_alloc_uar(&mut self, _c: &Ctx, _i: &AllocUarIn) -> CmdResult {
        let Some(uar) = (super::FIRST_UAR..UAR_PAGES).find(|u| !self.fw.uars.contains(u)) else {
            return Err(lim(syndrome::TABLE_FULL));
        };
        self.fw.uars.insert(uar);
        let mut o = AllocUarOut::default();
        o.set_uar(uar);
        Ok(out(&o))
    }

    pub(crate) fn cmd_dealloc_uar(&mut self, _c: &Ctx, i: &DeallocUarIn) -> CmdResult {
        let uar = i.uar();
        if !self.fw.uars.contains(&uar) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        let fw = &self.fw;
        let used = fw.eqs.values().any(|e| e.uar == uar)
            || fw.cqs.values().any(|c| c.cqc.uar_page() == uar)
            || fw.qps.values().any(|q| q.qpc.uar_page() == uar);
        if used {
            return Err(busy(syndrome::OBJECT_IN_USE));
        }
        self.fw.uars.remove(&uar);
        Ok(out(&DeallocUarOut::default()))
    }

    pub(crate) fn cmd_alloc_pd(&mut self, _c: &Ctx, _i: &AllocPdIn) -> CmdResult {
        if self.fw.pds.len() >= 1 << self.fw.caps.general_cur.log_max_pd() {
            return Err(lim(syndrome::TABLE_FULL));
        }
        let pd = self.fw.alloc_id();
        self.fw.pds.insert(pd);
        let mut o = AllocPdOut::default();
        o.set_pd(pd);
        Ok(out(&o))
    }

    pub(crate) fn cmd_dealloc_pd(&mut self, _c: &Ctx, i: &DeallocPdIn) -> CmdResult {
        let pd = i.pd();
        if !self.fw.pds.contains(&pd) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        let fw = &self.fw;
        let used = fw.mkeys.values().any(|m| m.mkc.pd() == pd)
            || fw.qps.values().any(|q| q.qpc.pd() == pd)
            || fw.srqs.values().any(|s| s.pd() == pd);
        if used {
            return Err(busy(syndrome::OBJECT_IN_USE));
        }
        self.fw.pds.remove(&pd);
        Ok(out(&DeallocPdOut::default()))
    }

    pub(crate) fn cmd_alloc_td(&mut self, _c: &Ctx, _i: &AllocTransportDomainIn) -> CmdResult {
        if self.fw.tds.len() >= 1 << self.fw.caps.general_cur.log_max_transport_domain() {
            return Err(lim(syndrome::TABLE_FULL));
        }
        let td = self.fw.alloc_id();
        self.fw.tds.insert(td);
        let mut o = AllocTransportDomainOut::default();
        o.set_transport_domain(td);
        Ok(out(&o))
    }

    pub(crate) fn cmd_dealloc_td(&mut self, _c: &Ctx, i: &DeallocTransportDomainIn) -> CmdResult {
        if !self.fw.tds.remove(&i.transport_domain()) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        Ok(out(&DeallocTransportDomainOut::default()))
    }

    pub(crate) fn cmd_alloc_xrcd(&mut self, _c: &Ctx, _i: &AllocXrcdIn) -> CmdResult {
        if self.fw.xrcds.len() >= 1 << self.fw.caps.general_cur.log_max_xrcd() {
            return Err(lim(syndrome::TABLE_FULL));
        }
        let xrcd = self.fw.alloc_id();
        self.fw.xrcds.insert(xrcd);
        let mut o = AllocXrcdOut::default();
        o.set_xrcd(xrcd);
        Ok(out(&o))
    }

    pub(crate) fn cmd_dealloc_xrcd(&mut self, _c: &Ctx, i: &DeallocXrcdIn) -> CmdResult {
        let xrcd = i.xrcd();
        if !self.fw.xrcds.contains(&xrcd) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        // A domain its XRC SRQs or XRC QPs still name stays.
        self.xrcd_free_check(xrcd)?;
        self.fw.xrcds.remove(&xrcd);
        Ok(out(&DeallocXrcdOut::default()))
    }

    pub(crate) fn cmd_alloc_q_counter(&mut self, _c: &Ctx, _i: &AllocQCounterIn) -> CmdResult {
        let Some(id) = (1..MAX_Q_COUNTERS).find(|n| !self.fw.q_counters.contains(n)) else {
            return Err(lim(syndrome::TABLE_FULL));
        };
        self.fw.q_counters.insert(id);
        let mut o = AllocQCounterOut::default();
        o.set_counter_set_id(id);
        Ok(out(&o))
    }

    /// DEALLOC_Q_COUNTER: frees a counter set; QPs that still name it stop counting.
    pub(crate) fn cmd_dealloc_q_counter(&mut self, _c: &Ctx, i: &DeallocQCounterIn) -> CmdResult {
        let id = i.counter_set_id();
        if !self.fw.q_counters.contains(&id) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        self.fw.q_counters.remove(&id);
        self.engine.q_counters.remove(&id);
        Ok(out(&DeallocQCounterOut::default()))
    }

    pub(crate) fn cmd_query_q_counter(&mut self, _c: &Ctx, i: &QueryQCounterIn) -> CmdResult {
        if i.other_vport() || i.vport_number() != 0 {
            return Err(super::bad_param(syndrome::BAD_FUNCTION));
        }
        if !i.aggregate() && !self.fw.q_counters.contains(&i.counter_set_id()) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        let mut o = QueryQCounterOut::default();
        self.q_counters(i.counter_set_id(), i.aggregate(), i.clear())
            .fill(&mut o);
        Ok(out(&o))
    }
}
