//! Page accounting: QUERY_PAGES, MANAGE_PAGES, and PAGE_REQUEST events.

use super::{CmdResult, Ctx, Fail, Firmware, HcaState, bad_param, out, pas_list, syndrome};
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

/// The function id of the model's own function, as QUERY_PAGES reports it and as the page
/// requests name it; MANAGE_PAGES must name it (with `embedded_cpu_function` clear: the
/// model is not an embedded-CPU function). Deliberately not 0, so a driver that sends
/// MANAGE_PAGES for function 0 whatever the firmware said is caught: rdma-core gives pages
/// to the `function_id` QUERY_PAGES returned (`providers/mlx5/mlx5_vfio.c:1660`, `:1676`)
/// and to the page request's `func_id` (`:266`), Linux likewise with the request's
/// `ec_function` (`pagealloc.c` `req_pages_handler`).
pub const FUNCTION_ID: u16 = 0x0005;

/// Bit 15 of a page request's `ec_function` word: the request is for the embedded CPU
/// function (Linux `pagealloc.c` `EC_FUNCTION_MASK`).
pub const PAGE_REQ_EC_FUNCTION: u16 = 0x8000;
/// Bit 14 of a page request's `ec_function` word: the firmware released every page of the
/// function at once; the driver frees them without MANAGE_PAGES (Linux `pagealloc.c`
/// `RELEASE_ALL_PAGES_MASK`, `release_all_pages`). Sent only when the driver set the
/// `release_all_pages` capability.
pub const PAGE_REQ_RELEASE_ALL: u16 = 0x4000;

impl Firmware<'_> {
    pub(crate) fn cmd_query_pages(&mut self, _c: &Ctx, i: &QueryPagesIn) -> CmdResult {
        // 0 asks for the calling function; naming it by its id is the same.
        if !matches!(i.function_id(), 0 | FUNCTION_ID) || i.embedded_cpu_function() {
            return Err(bad_param(syndrome::BAD_FUNCTION));
        }
        let p = &self.state.pages;
        let n = match QueryPagesOpMod::from_raw(i.op_mod()) {
            QueryPagesOpMod::BootPages => p.boot_outstanding(),
            QueryPagesOpMod::InitPages => p.init_outstanding(),
            QueryPagesOpMod::RegularPages => p.regular_outstanding(),
            _ => return Err(bad_param(syndrome::BAD_OP_MOD)),
        };
        let mut o = QueryPagesOut::default();
        o.set_function_id(FUNCTION_ID).set_num_pages(n);
        Ok(out(&o))
    }

    pub(crate) fn cmd_manage_pages(&mut self, c: &Ctx, i: &ManagePagesIn) -> CmdResult {
        // Pages belong to the function QUERY_PAGES and the page requests named.
        if i.function_id() != FUNCTION_ID || i.embedded_cpu_function() {
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
                    if self.state.pages.held.contains(&a) || !seen.insert(a) {
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
                let p = &mut self.state.pages;
                p.held.extend(list.iter().copied());
                p.requested = p.requested.saturating_sub(n as u32);
                Ok(out(&ManagePagesOut::default()))
            }
            ManagePagesOpMod::Take => {
                let room = c.outlen.saturating_sub(ManagePagesOut::SIZE) / PAS_ENTRY_BYTES;
                let limit = if self.page_returns.is_empty() {
                    u64::MAX
                } else {
                    self.page_returns.remove(0) as u64
                };
                let p = &mut self.state.pages;
                let k = (n as u64).min(p.surplus()).min(room as u64).min(limit) as usize;
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
                self.state.pages.requested = 0;
                self.state.pages.refused = true;
                Ok(out(&ManagePagesOut::default()))
            }
            _ => Err(bad_param(syndrome::BAD_OP_MOD)),
        }
    }
}

impl Device {
    fn post_page_request(&mut self, num_pages: i32, now: u64) -> bool {
        self.post_page_request_flags(num_pages, 0, now)
    }

    fn post_page_request_flags(&mut self, num_pages: i32, flags: u16, now: u64) -> bool {
        let req = EqePageReq {
            ec_function: flags.into(),
            func_id: FUNCTION_ID.into(),
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

    /// The firmware releases every page it holds at once and says so with a page request
    /// whose `ec_function` word has the release-all bit (and `num_pages` the negative
    /// count). Only when the driver turned `release_all_pages` on, the HCA is initialized
    /// and an EQ takes page requests; returns whether the event was posted. The firmware
    /// then needs no pages any more (as after TEARDOWN_HCA): the function is going away.
    pub(crate) fn release_all_pages(&mut self, now: u64) -> bool {
        if !self.fw.caps.general_cur.release_all_pages()
            || self.fw.state != HcaState::Initialized
            || self.objs.eq_for(EventType::PageRequest.raw()).is_none()
        {
            return false;
        }
        let n = self.fw.pages.held.len() as i32;
        self.fw.pages.held.clear();
        self.fw.pages.released = true;
        self.fw.pages.requested = 0;
        self.fw.pages.to_return = 0;
        self.post_page_request_flags(-n, PAGE_REQ_RELEASE_ALL, now)
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
