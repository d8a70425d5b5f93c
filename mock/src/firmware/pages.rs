//! Page accounting: QUERY_PAGES, MANAGE_PAGES, and PAGE_REQUEST events.

use super::{CmdResult, Ctx, Fail, HcaState, bad_param, no_res, out, pas_list, syndrome};
use crate::device::Device;
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::{
    ADAPTER_PAGE_SIZE, CmdStatus, EventType, ManagePagesOpMod, QueryPagesOpMod,
};
use uhca_fwif::eqe::EqePageReq;
use zerocopy::IntoBytes;

/// The byte the firmware fills a page with when it takes it (so a driver that keeps using a
/// page it gave away reads garbage, as it would on hardware).
pub const FW_PAGE_FILL: u8 = 0x5a;

impl Device {
    pub(crate) fn cmd_query_pages(&mut self, _c: &Ctx, i: &QueryPagesIn) -> CmdResult {
        if i.function_id() != 0 || i.embedded_cpu_function() {
            return Err(bad_param(syndrome::BAD_FUNCTION));
        }
        let p = &self.fw.pages;
        let n = match QueryPagesOpMod::from_raw(i.op_mod()) {
            QueryPagesOpMod::BootPages => p.boot_outstanding(),
            QueryPagesOpMod::InitPages => p.init_outstanding(),
            QueryPagesOpMod::RegularPages => p.regular_outstanding(),
            _ => return Err(bad_param(syndrome::BAD_OP_MOD)),
        };
        let mut o = QueryPagesOut::default();
        o.set_function_id(0).set_num_pages(n);
        Ok(out(&o))
    }

    pub(crate) fn cmd_manage_pages(&mut self, c: &Ctx, i: &ManagePagesIn) -> CmdResult {
        if i.function_id() != 0 || i.embedded_cpu_function() {
            return Err(bad_param(syndrome::BAD_FUNCTION));
        }
        let n = i.input_num_entries() as usize;
        match ManagePagesOpMod::from_raw(i.op_mod()) {
            ManagePagesOpMod::Give => {
                let list = pas_list(c.raw, ManagePagesIn::SIZE, n)?;
                let mut seen = std::collections::BTreeSet::new();
                for &a in &list {
                    if a % ADAPTER_PAGE_SIZE as u64 != 0 {
                        return Err(bad_param(syndrome::PAGE_NOT_ALIGNED));
                    }
                    if self.fw.pages.held.contains(&a) || !seen.insert(a) {
                        return Err(bad_param(syndrome::PAGE_DUPLICATE));
                    }
                }
                let fill = [FW_PAGE_FILL; ADAPTER_PAGE_SIZE];
                for &a in &list {
                    if self
                        .iommu
                        .dma_write(a, &fill, c.now, "firmware page")
                        .is_err()
                    {
                        return Err(Fail::Cmd(CmdStatus::IntErr, syndrome::PAGE_NOT_MAPPED));
                    }
                }
                let p = &mut self.fw.pages;
                p.held.extend(list.iter().copied());
                p.requested = p.requested.saturating_sub(n as u32);
                Ok(out(&ManagePagesOut::default()))
            }
            ManagePagesOpMod::Take => {
                let room = c.outlen.saturating_sub(ManagePagesOut::SIZE) / PAS_ENTRY_BYTES;
                let p = &mut self.fw.pages;
                let k = (n as u64).min(p.surplus()).min(room as u64) as usize;
                let taken: Vec<u64> = p.held.iter().rev().take(k).copied().collect();
                for a in &taken {
                    p.held.remove(a);
                }
                let mut o = ManagePagesOut::default();
                o.set_output_num_entries(k as u32);
                let mut bytes = out(&o);
                for a in taken {
                    bytes.extend_from_slice(&a.to_be_bytes());
                }
                Ok(bytes)
            }
            ManagePagesOpMod::CantGive => {
                self.fw.pages.requested = 0;
                self.fw.pages.refused = true;
                Ok(out(&ManagePagesOut::default()))
            }
            _ => Err(bad_param(syndrome::BAD_OP_MOD)),
        }
    }

    /// Object creation needs the regular pages: waits for them (page request) if an event
    /// queue receives page requests, fails otherwise.
    pub(crate) fn need_regular_pages(&self) -> Result<(), Fail> {
        if self.fw.pages.regular_outstanding() == 0 {
            Ok(())
        } else if self.fw.eq_for(EventType::PageRequest.raw()).is_some() {
            Err(Fail::Defer)
        } else {
            Err(no_res(syndrome::NO_REGULAR_PAGES))
        }
    }

    fn post_page_request(&mut self, num_pages: i32, now: u64) -> bool {
        let req = EqePageReq {
            num_pages: (num_pages as u32).into(),
            ..Default::default()
        };
        let mut data = [0u8; 28];
        data[..core::mem::size_of::<EqePageReq>()].copy_from_slice(req.as_bytes());
        self.post_event(EventType::PageRequest.raw(), 0, data, now, false)
    }

    /// After each batch of commands: refused pages, page requests, pending events, and the
    /// commands waiting for pages.
    pub(crate) fn service(&mut self, now: u64) {
        if self.fw.pages.refused {
            self.fw.pages.refused = false;
            self.fail_deferred(now);
        }
        self.flush_pending_events(now);
        if self.fw.state == HcaState::Initialized {
            let p = &self.fw.pages;
            let want = p.regular_outstanding().saturating_sub(p.requested);
            if want > 0 && self.post_page_request(want as i32, now) {
                self.fw.pages.requested += want;
            }
            let ret = self.fw.pages.to_return;
            if ret > 0 && self.post_page_request(-(ret as i32), now) {
                self.fw.pages.to_return = 0;
            }
        }
        // Waiting commands run again once the pages are there, or when the HCA left the
        // initialized state (they then fail with the state's error).
        let waiting = !self.fw.deferred.is_empty();
        if waiting
            && (self.fw.pages.regular_outstanding() == 0 || self.fw.state != HcaState::Initialized)
        {
            self.retry_deferred(now);
        }
    }

    /// A run-time page request: positive, the firmware wants `n` more pages; negative, it
    /// returns `-n` pages.
    pub(crate) fn request_pages(&mut self, n: i32, now: u64) {
        let p = &mut self.fw.pages;
        if n > 0 {
            p.regular = p.regular.saturating_add(n as u32);
        } else if n < 0 {
            let k = n.unsigned_abs().min(p.regular);
            p.regular -= k;
            p.to_return += k;
        }
        self.service(now);
    }
}
