//! Event queues: CREATE_EQ, DESTROY_EQ, QUERY_EQ, the EQ doorbells and event posting.

use super::{
    CmdResult, Ctx, Eq, Firmware, bad_param, bad_res, busy, lim, out, pages_for, pas_list, syndrome,
};
use crate::device::Device;
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::ADAPTER_PAGE_SIZE;
use uhca_fwif::eqe::Eqe;
use zerocopy::IntoBytes;

/// Size of an EQE in bytes.
pub const EQE_SIZE: u64 = 64;

/// Health syndrome (`health_buffer.synd`) of an overrun of an EQ that takes asynchronous
/// events: "async EQ buffer overrun". The PRM reference tables have no row for health
/// syndromes; the value is the one Linux (`health.c`, `MLX5_HEALTH_SYNDR_ASYNC_EQ_OVERRUN_ERR`)
/// and rdma-core (`providers/mlx5/mlx5_vfio.c:2066`) decode.
pub const HEALTH_SYNDR_ASYNC_EQ_OVERRUN: u8 = 0xc;

impl Firmware<'_> {
    pub(crate) fn cmd_create_eq(&mut self, c: &Ctx, i: &CreateEqIn) -> CmdResult {
        let eqc = *i.eq_context_entry();
        let caps = &self.state.caps.general_cur;
        let log_size = eqc.log_eq_size();
        if log_size > caps.log_max_eq_sz() {
            return Err(bad_param(syndrome::BAD_QUEUE_SIZE));
        }
        if eqc.ec() {
            return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
        }
        if eqc.page_offset() != 0 {
            return Err(bad_param(syndrome::BAD_PAGE_SIZE));
        }
        let uar = eqc.uar_page();
        if !self.objs.uars.contains(&uar) {
            return Err(bad_param(syndrome::BAD_UAR));
        }
        if eqc.intr() >= crate::caps::MSIX_VECTORS {
            return Err(bad_param(syndrome::BAD_VECTOR));
        }
        if self.objs.eqs.len() >= 1 << caps.log_max_eq() {
            return Err(lim(syndrome::TABLE_FULL));
        }
        let page_size = (ADAPTER_PAGE_SIZE as u64) << eqc.log_page_size().min(20);
        let npages = pages_for(EQE_SIZE << log_size, page_size) as usize;
        let pas = pas_list(c.raw, CreateEqIn::SIZE, npages)?;
        let mask_bytes = i.event_bitmask();
        let mask = u64::from_be_bytes([
            mask_bytes[0],
            mask_bytes[1],
            mask_bytes[2],
            mask_bytes[3],
            mask_bytes[4],
            mask_bytes[5],
            mask_bytes[6],
            mask_bytes[7],
        ]);
        let Some(eqn) = (0..=u8::MAX).find(|n| !self.objs.eqs.contains_key(n)) else {
            return Err(lim(syndrome::TABLE_FULL));
        };
        let mut stored = eqc;
        stored
            .set_status(0)
            .set_consumer_counter(0)
            .set_producer_counter(0);
        self.objs.eqs.insert(
            eqn,
            Eq {
                eqc: stored,
                mask,
                pas,
                page_size,
                log_size,
                uar,
                intr: eqc.intr(),
                pi: 0,
                ci: 0,
                armed: false,
                overruns: 0,
            },
        );
        let mut o = CreateEqOut::default();
        o.set_eq_number(eqn);
        Ok(out(&o))
    }

    pub(crate) fn cmd_destroy_eq(&mut self, _c: &Ctx, i: &DestroyEqIn) -> CmdResult {
        let eqn = i.eq_number();
        if !self.objs.eqs.contains_key(&eqn) {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        if self
            .objs
            .cqs
            .values()
            .any(|cq| cq.cqc.c_eqn_or_apu_element() == eqn as u32)
        {
            return Err(busy(syndrome::OBJECT_IN_USE));
        }
        self.objs.eqs.remove(&eqn);
        Ok(out(&DestroyEqOut::default()))
    }

    pub(crate) fn cmd_query_eq(&mut self, _c: &Ctx, i: &QueryEqIn) -> CmdResult {
        let Some(eq) = self.objs.eqs.get(&i.eq_number()) else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        let mut o = QueryEqOut::default();
        let mut ctx = eq.eqc;
        ctx.set_consumer_counter(eq.ci & 0x00ff_ffff)
            .set_producer_counter(eq.pi & 0x00ff_ffff);
        *o.eq_context_entry_mut() = ctx;
        o.set_event_bitmask(eq.mask);
        Ok(out(&o))
    }
}

impl Device {
    /// An EQ doorbell: `(eqn << 24) | ci`, with or without arming.
    pub(crate) fn eq_doorbell(&mut self, uar: u32, v: u32, arm: bool, now: u64) {
        let eqn = (v >> 24) as u8;
        let ci = v & 0x00ff_ffff;
        let Some(eq) = self.objs.eqs.get_mut(&eqn) else {
            self.note(
                now,
                format!("EQ doorbell for EQ {eqn}, which does not exist"),
            );
            return;
        };
        if eq.uar != uar {
            let own = eq.uar;
            self.note(
                now,
                format!("EQ doorbell for EQ {eqn} on UAR {uar}; its UAR is {own}"),
            );
            return;
        }
        // The consumer counter is 24 bits; keep the producer's high bits.
        let pi = eq.pi;
        let mut full = (pi & !0x00ff_ffff) | ci;
        if full > pi {
            full = full.wrapping_sub(1 << 24);
        }
        eq.ci = full;
        if arm {
            // An EQ armed while it holds EQEs past the consumer counter the doorbell names
            // (written after the driver's last read, while it was disarmed) interrupts at
            // once; otherwise the next EQE does.
            if eq.ci != eq.pi {
                eq.armed = false;
                let v = eq.intr;
                self.raise_interrupt(v);
            } else {
                eq.armed = true;
            }
        }
    }

    /// Posts an event to the lowest-numbered EQ subscribed to its type. Without such an EQ
    /// the event is dropped, or kept until one exists if `keep`. Returns whether it was
    /// written.
    pub(crate) fn post_event(
        &mut self,
        event_type: u8,
        sub_type: u8,
        data: [u8; 28],
        now: u64,
        keep: bool,
    ) -> bool {
        let Some(eqn) = self.objs.eq_for(event_type) else {
            if keep {
                self.fw.pending_events.push((event_type, sub_type, data));
            }
            return false;
        };
        self.write_eqe(eqn, event_type, sub_type, data, now)
    }

    /// Posts the events kept for lack of an EQ, in order, where an EQ now takes them.
    pub(crate) fn flush_pending_events(&mut self, now: u64) {
        let pending = std::mem::take(&mut self.fw.pending_events);
        for (t, s, d) in pending {
            if self.objs.eq_for(t).is_some() {
                self.post_event(t, s, d, now, false);
            } else {
                self.fw.pending_events.push((t, s, d));
            }
        }
    }

    pub(crate) fn write_eqe(
        &mut self,
        eqn: u8,
        event_type: u8,
        sub_type: u8,
        data: [u8; 28],
        now: u64,
    ) -> bool {
        let Some(eq) = self.objs.eqs.get_mut(&eqn) else {
            return false;
        };
        let size = 1u32 << eq.log_size;
        // The entry at the producer counter is still the consumer's until its consumer
        // counter (from the EQ doorbell) has moved past it: writing there is an overrun.
        if eq.pi.wrapping_sub(eq.ci) >= size && !eq.eqc.oi() {
            eq.overruns += 1;
            let asynchronous = eq.mask != 0;
            self.note(
                now,
                format!("EQ {eqn} overrun: event type {event_type:#x} lost"),
            );
            // An EQ that takes asynchronous events (command completions, page requests,
            // port and QP events) cannot lose one: the firmware stops with the health
            // syndrome "async EQ buffer overrun". A completion-only EQ loses the event.
            if asynchronous && self.fw.fatal.is_none() {
                self.enter_fatal(HEALTH_SYNDR_ASYNC_EQ_OVERRUN, 0, now);
            }
            return false;
        }
        let idx = (eq.pi & (size - 1)) as u64;
        let off = idx * EQE_SIZE;
        let page = (off / eq.page_size) as usize;
        let Some(&base) = eq.pas.get(page) else {
            return false;
        };
        let iova = base + off % eq.page_size;
        let owner = ((eq.pi >> eq.log_size) & 1) as u8;
        let eqe = Eqe {
            r#type: event_type,
            sub_type,
            data,
            owner,
            ..Default::default()
        };
        let bytes = eqe.as_bytes();
        // The body first, the owner byte last, as the hardware orders its writes.
        let ok = self.iommu.dma_write(iova, &bytes[..63], now, "EQE").is_ok()
            && self
                .iommu
                .dma_write(iova + 63, &bytes[63..], now, "EQE")
                .is_ok();
        if !ok {
            return false;
        }
        let Some(eq) = self.objs.eqs.get_mut(&eqn) else {
            return false;
        };
        eq.pi = eq.pi.wrapping_add(1);
        if eq.armed {
            eq.armed = false;
            let v = eq.intr;
            self.raise_interrupt(v);
        }
        true
    }
}
