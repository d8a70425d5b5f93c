//! The driver's event queue, served: command completions go to the command queue, page
//! requests are answered (through [`crate::pages`]), completion events are noted per CQ,
//! and asynchronous events wait for the user ([`Hca::next_event`](crate::Hca::next_event)(crate::Hca::next_event)).
//!
//! The HCA serves the EQ while a command waits and in
//! [`Hca::process_events`](crate::Hca::process_events); this module is what it does with
//! each entry.

use core::sync::atomic::Ordering;

use crate::verbs::dp::QpMap;
use heapless::Deque;
use uhca_fwif::consts::{EventType, PortChangeSubtype};
use uhca_fwif::eqe::{Eqe, EqeCmd, EqeComp, EqeCqErr, EqePageReq, EqePortState, EqeQpSrq};
use uhca_hal::Platform;
use uhca_hal::dma::DmaBuf;
use uhca_hal::eq::EqRing;

use crate::error::Result;
use crate::pages::{
    ManagePagesFn, PAGE_REQ_EC_FUNCTION, PAGE_REQ_RELEASE_ALL, PageFunction, PageOwners, PagePool,
    give_pages, release_all_pages, take_pages,
};
use crate::release::ObjectKind;
use crate::verbs::dp::{CompletionEvents, CqNumbers};

/// Most pending asynchronous events kept for the user; older ones are dropped (and counted).
pub const MAX_PENDING_EVENTS: usize = 64;
/// Entries the EQ has beyond the events it is sized for, and the most EQEs the driver
/// consumes before it gives them back with an EQ doorbell. The device overruns the EQ when
/// it would write an entry the driver has not given back (consumer index + size), so while
/// draining a long burst the driver updates the consumer index at least this often (Linux
/// `eq.c` `MLX5_NUM_SPARE_EQE` 0x80 and its `mlx5_eq_int` loop; rdma-core
/// `providers/mlx5/mlx5_vfio.c:372` `mlx5_eq_update_cc`, `:1390` for the size).
pub const NUM_SPARE_EQE: u32 = 0x80;

/// The event types the driver's EQ subscribes to: command completions and page requests
/// (rdma-core's VFIO provider, `mlx5_vfio.c:1484`) and the asynchronous events of Linux's
/// `MLX5_ASYNC_EVENT_MASK` (`mlx5/core/eq.c`) that a verbs user acts on.
///
/// INTERNAL_ERROR (type 0x8) is left out, as both NVIDIA drivers leave it out: a fatal
/// device error is found from the health buffer ([`Hca::poll_health`](crate::Hca::poll_health), and every command
/// checks it), which is how Linux's `health.c` finds it too.
pub(crate) const EQ_EVENTS: [EventType; 12] = [
    EventType::Cmd,
    EventType::PageRequest,
    EventType::PortChange,
    EventType::CqError,
    EventType::WqCatasError,
    EventType::WqInvalReqError,
    EventType::WqAccessError,
    EventType::PathMigFailed,
    EventType::SrqCatasError,
    EventType::SrqLastWqe,
    EventType::SrqRqLimit,
    EventType::CommEst,
];

/// The QP-affiliated events after which the device has the QP in ERR (IBA 11.6.3.1: a
/// local work queue catastrophic error, an invalid request or an access violation on the
/// QP's work queue): the driver's view of the QP moves to ERR when it serves one, so
/// posting answers at once instead of after a flush. PATH_MIG_FAILED is not among them:
/// a failed migration leaves the QP on its path (and this driver loads no alternate path).
pub(crate) const QP_FATAL_EVENTS: [EventType; 3] = [
    EventType::WqCatasError,
    EventType::WqInvalReqError,
    EventType::WqAccessError,
];

/// An asynchronous event the device reported, for the user to read with
/// [`Hca::next_event`](crate::Hca::next_event).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// A port changed state.
    PortChange {
        /// The port (from 1).
        port: u8,
        /// What changed.
        subtype: PortChangeSubtype,
    },
    /// A CQ overran or suffered an access error.
    CqError {
        /// The CQ.
        cqn: u32,
        /// The syndrome (1: overrun, 2: access violation).
        syndrome: u8,
    },
    /// A QP or SRQ event (communication established, last WQE reached, catastrophic,
    /// invalid request or access error, SRQ limit).
    QpSrq {
        /// The event.
        event: EventType,
        /// The QP or SRQ number.
        number: u32,
        /// Whether `number` is an SRQ.
        srq: bool,
    },
    /// The device refused to destroy an object that was dropped without `destroy` (or
    /// the command timed out): its memory is leaked, never freed, since the device may
    /// still use it ([`Hca::objects_leaked`](crate::Hca::objects_leaked) counts them).
    ReleaseFailed {
        /// What the object was.
        object: ObjectKind,
        /// Its number (QPN, SRQ number, CQN, memory key index, PD or transport domain).
        number: u32,
    },
}

pub(crate) struct EventQueue<P: Platform> {
    pub(crate) ring: EqRing<DmaBuf<P>>,
    /// Byte offset of the UAR page whose EQ doorbells this queue uses.
    pub(crate) uar_offset: usize,
}

/// Where asynchronous events wait for the user.
#[derive(Debug, Default)]
pub(crate) struct EventLog {
    pub(crate) pending: Deque<AsyncEvent, MAX_PENDING_EVENTS>,
    pub(crate) dropped: u64,
    /// Completion events (EQE type COMP), per CQ.
    pub(crate) completions: CompletionEvents,
    /// Completion and CQ error events naming a CQ the HCA does not have (dropped).
    pub(crate) unknown_cq: u64,
}

impl EventLog {
    pub(crate) fn push(&mut self, ev: AsyncEvent) {
        if self.pending.is_full() {
            self.pending.pop_front();
            self.dropped += 1;
        }
        // Room was made above.
        let _ = self.pending.push_back(ev);
    }
}

/// The HCA's event service: its EQ and what serving it changes (the firmware pages and
/// who holds them, the events waiting for the user, the CQs events may name). It is served
/// while a command waits (the command queue is borrowed apart from it) and from
/// [`Hca::process_events`](crate::Hca::process_events).
pub(crate) struct EventService<P: Platform> {
    // Field order matters for drop: the EQ memory is freed before the page pool.
    /// The EQ, once created.
    pub(crate) eq: Option<EventQueue<P>>,
    /// The pages given to the firmware.
    pub(crate) pages: PagePool<P>,
    /// How many of the pool's given pages each function holds.
    pub(crate) owners: PageOwners,
    /// Events waiting for the user.
    pub(crate) log: EventLog,
    /// The numbers of the live CQs (events naming another are dropped).
    pub(crate) cq_numbers: CqNumbers<P>,
    /// The HCA's QPs, whose state a QP-fatal event moves to ERR: a map as each CQ keeps
    /// (destroyed QPs stay in it as tombstones, which an event passes over), made with the
    /// first QP.
    pub(crate) qps: Option<QpMap<P>>,
}

impl<P: Platform> EventService<P> {
    /// No EQ yet, no pages given, at most `max_pages` for the firmware.
    pub(crate) fn new(p: &P, max_pages: u32) -> Self {
        EventService {
            eq: None,
            pages: PagePool::with_budget(p.clone(), max_pages),
            owners: PageOwners::default(),
            log: EventLog::default(),
            cq_numbers: CqNumbers::new(p.clone()),
            qps: None,
        }
    }

    /// Serves the EQ (nothing before it exists): reports command completions through
    /// `report` (a bitmask of command-queue slots), answers page requests through
    /// `manage_pages`, and queues everything else for the user.
    pub(crate) fn serve(
        &mut self,
        p: &P,
        report: &mut dyn FnMut(u32),
        manage_pages: &mut ManagePagesFn<'_>,
    ) -> Result<()> {
        let EventService {
            eq,
            pages,
            owners,
            log,
            cq_numbers,
            qps,
        } = self;
        let Some(eq) = eq.as_mut() else {
            return Ok(());
        };
        let mut seen = false;
        // EQEs consumed and not yet given back to the device.
        let mut unreleased = 0u32;
        let mut result = Ok(());
        // At most one lap of the queue per call: a device that posts events as fast as they
        // are served (a page request answered with "can't give" is asked again at once) must
        // not keep the driver here; the rest waits for the next call, and a command's wait
        // keeps its timeout.
        let mut budget = eq.ring.entries();
        let objects = Live {
            cqs: cq_numbers,
            qps,
        };
        while budget > 0
            && let Some(eqe) = eq.ring.poll_one()
        {
            budget -= 1;
            seen = true;
            unreleased += 1;
            // A page request makes the driver issue MANAGE_PAGES, whose completion the
            // device posts to this EQ: give back what was consumed first, so those entries
            // are free.
            if unreleased >= NUM_SPARE_EQE || eqe.event_type() == EventType::PageRequest {
                eq.ring.update_ci(p, eq.uar_offset);
                unreleased = 0;
            }
            if let Err(e) = handle_eqe(&eqe, pages, owners, log, report, manage_pages, &objects) {
                result = Err(e);
            }
        }
        if seen {
            eq.ring.arm(p, eq.uar_offset);
        }
        result
    }
}

/// The live objects events may name.
struct Live<'a, P: Platform> {
    /// Events naming another CQ are dropped.
    cqs: &'a CqNumbers<P>,
    /// A QP-fatal event moves its QP to ERR.
    qps: &'a Option<QpMap<P>>,
}

fn handle_eqe<P: Platform>(
    eqe: &Eqe,
    pages: &mut PagePool<P>,
    owners: &mut PageOwners,
    log: &mut EventLog,
    report: &mut dyn FnMut(u32),
    manage_pages: &mut ManagePagesFn<'_>,
    live: &Live<'_, P>,
) -> Result<()> {
    match eqe.event_type() {
        // A CQ armed with `Cq::req_notify` got a completion: note it for the user (an
        // event for a CQ that does not exist is the device's error: counted, dropped).
        EventType::Comp => {
            let cqn = eqe.data_as::<EqeComp>().cqn.get() & 0x00ff_ffff;
            if live.cqs.contains(cqn) {
                log.completions.push(cqn);
            } else {
                log.unknown_cq += 1;
            }
        }
        EventType::Cmd => report(eqe.data_as::<EqeCmd>().vector.get()),
        EventType::PageRequest => {
            let req = eqe.data_as::<EqePageReq>();
            let flags = req.ec_function.get();
            let function = PageFunction {
                id: req.func_id.get(),
                ec: flags & PAGE_REQ_EC_FUNCTION != 0,
            };
            let n = req.num_pages_signed();
            if flags & PAGE_REQ_RELEASE_ALL != 0 {
                release_all_pages(pages, owners, function)?;
            } else if n > 0 {
                give_pages(pages, owners, function, n as u32, manage_pages)?;
            } else if n < 0 {
                take_pages(pages, owners, function, n.unsigned_abs(), manage_pages)?;
            }
        }
        EventType::PortChange => {
            let port = eqe.data_as::<EqePortState>().port_num();
            let subtype = PortChangeSubtype::from_raw(eqe.sub_type);
            log.push(AsyncEvent::PortChange { port, subtype });
        }
        EventType::CqError => {
            let e = eqe.data_as::<EqeCqErr>();
            let cqn = e.cqn.get() & 0x00ff_ffff;
            if live.cqs.contains(cqn) {
                log.push(AsyncEvent::CqError {
                    cqn,
                    syndrome: e.syndrome,
                });
            } else {
                log.unknown_cq += 1;
            }
        }
        // The QP and SRQ events subscribed to; anything else (not asked for) is ignored.
        event if EQ_EVENTS.contains(&event) => {
            let e = eqe.data_as::<EqeQpSrq>();
            let number = e.qp_srq_n.get() & 0x00ff_ffff;
            let srq = e.r#type == 1;
            if !srq
                && QP_FATAL_EVENTS.contains(&event)
                && let Some(qp) = live.qps.as_ref().and_then(|m| m.find(number))
                && !qp.is_destroyed()
            {
                // The device has the QP in ERR: so does the driver, before the user
                // reads the event (an error completion does the same on the poller's
                // side).
                qp.error.store(true, Ordering::Release);
            }
            log.push(AsyncEvent::QpSrq { event, number, srq });
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use uhca_fwif::consts::ADAPTER_PAGE_SIZE;
    use uhca_fwif::doorbell::{EQ_DOORBELL_OFFSET, EQ_DOORBELL_UPDATE_CI_OFFSET};
    use uhca_fwif::eqe::EQE_DATA_OFFSET;
    use uhca_fwif::zerocopy::IntoBytes;
    use uhca_hal::dma::DmaMem;
    use uhca_hal::testing::{FAKE_UAR, FakePlatform};

    /// The QPs events look up: each found through the map's growth, a destroyed one (its
    /// tombstone) told apart, an unknown number not found.
    #[test]
    fn event_qps_find_each_qp_through_growth_and_destruction() {
        use crate::verbs::dp::{QpMap, QpShared};
        use uhca_fwif::consts::QpServiceType;
        use uhca_hal::host::HostArc;
        let p = FakePlatform::new();
        let mut map = QpMap::new(&p, 16).unwrap();
        let qpn = |i: u32| (i * 7919) % 1000 + 0x100;
        let mut handles = Vec::new();
        for i in 0..40 {
            let h = HostArc::new(
                &p,
                QpShared::new(qpn(i), QpServiceType::Rc, (1, 1), None, None, None),
            )
            .unwrap();
            map.insert(h.clone()).unwrap();
            handles.push(h);
        }
        for i in 0..40 {
            assert_eq!(map.find(qpn(i)).map(|h| h.qpn), Some(qpn(i)));
        }
        for i in (0..40).step_by(3) {
            handles[i as usize].mark_destroyed();
        }
        for i in 0..40 {
            let live = map
                .find(qpn(i))
                .filter(|h| !h.is_destroyed())
                .map(|h| h.qpn);
            assert_eq!(live, (i % 3 != 0).then_some(qpn(i)), "QP {i}");
        }
        assert!(map.find(0x99).is_none());
    }

    /// A long drain gives the consumed entries back at least every `NUM_SPARE_EQE` EQEs
    /// (update only), then arms once at the end: the device may keep writing during the
    /// drain and must find released entries.
    #[test]
    fn a_long_drain_updates_the_consumer_index_every_spare_count() {
        let p = FakePlatform::new();
        let log = 9u8;
        let buf = DmaBuf::alloc(&p, 64 << log, ADAPTER_PAGE_SIZE).unwrap();
        let base = buf.iova();
        let mut ev = EventService::new(&&p, 1024);
        ev.eq = Some(EventQueue {
            ring: EqRing::new(buf, 5, log).unwrap(),
            uar_offset: FAKE_UAR,
        });
        const N: u32 = 300;
        for i in 0..N as u64 {
            let e = Eqe {
                r#type: EventType::PortChange.raw(),
                sub_type: PortChangeSubtype::Active.raw(),
                ..Default::default()
            };
            let mut bytes = [0u8; 64];
            bytes.copy_from_slice(e.as_bytes());
            bytes[EQE_DATA_OFFSET + 8] = 1 << 4;
            // First pass over the ring: owner bit 0 is software's.
            bytes[63] = 0;
            p.dma.device_write(base + i * 64, &bytes);
        }
        p.bar.clear_log();
        ev.serve(&&p, &mut |_| {}, &mut |_, _, _| {
            unreachable!("no page request")
        })
        .unwrap();
        let doorbells: Vec<(usize, u64)> = p
            .bar
            .write_log()
            .into_iter()
            .filter(|&(off, _)| (FAKE_UAR + EQ_DOORBELL_OFFSET..FAKE_UAR + 0x50).contains(&off))
            .collect();
        let db = |off: usize, ci: u32| (FAKE_UAR + off, ((5u32 << 24) | ci) as u64);
        assert_eq!(
            doorbells,
            vec![
                db(EQ_DOORBELL_UPDATE_CI_OFFSET, 128),
                db(EQ_DOORBELL_UPDATE_CI_OFFSET, 256),
                db(EQ_DOORBELL_OFFSET, N),
            ]
        );
    }
}
