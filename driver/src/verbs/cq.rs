//! Completion queues: CREATE_CQ, QUERY_CQ, MODIFY_CQ (moderation), DESTROY_CQ.

use uhca_fwif::cmd::{Command, CreateCqIn, ModifyCqIn, QueryCqIn};
use uhca_fwif::consts::{ADAPTER_PAGE_SIZE, CqeOpcode};
use uhca_fwif::cqe::op_own_of;
use uhca_hal::Platform;
use uhca_hal::cq::{CqLayout, CqRing};
use uhca_hal::dma::{DmaBuf, DmaMem};

use super::dp::{QpHandle, QpMap};
use super::{Failed, MAX_PAS, PagePlan, log2_ceil, release_unless_held};
use crate::error::{Arg, Error, InvalidArgument, Result};
use crate::hca::Hca;
use crate::release::{Dropped, Held, ObjectKind, Ticket};

/// MODIFY_CQ `modify_field_select`: `cq_period`.
const MODIFY_CQ_PERIOD: u32 = 1 << 0;
/// MODIFY_CQ `modify_field_select`: `cq_max_count`.
const MODIFY_CQ_COUNT: u32 = 1 << 1;
/// Largest `cq_period` (12 bits, microseconds).
const MAX_CQ_PERIOD: u16 = 0xfff;
/// Bytes of a CQE (the driver uses 64-byte CQEs).
const CQE_BYTES: usize = 64;
/// Byte offset of `op_own` in a 64-byte CQE.
const OP_OWN_OFF: usize = 63;

/// Completion moderation: the device raises a completion event after `max_count` CQEs or
/// `period_us` microseconds after the first unreported one, whichever comes first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqModeration {
    /// `cq_period`, microseconds (at most 4095; 0: no time limit).
    pub period_us: u16,
    /// `cq_max_count` (0: no count limit).
    pub max_count: u16,
}

/// What QUERY_CQ reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqAttr {
    /// `status` (0 OK, 9 overflow, 10 write failure).
    pub status: u8,
    /// log2 of the number of CQEs.
    pub log_cq_size: u8,
    /// The UAR page its doorbells use.
    pub uar_page: u32,
    /// The EQ its completion events go to.
    pub eqn: u32,
    /// The moderation in force.
    pub moderation: CqModeration,
    /// The consumer counter the device has seen (from the doorbell record).
    pub consumer_counter: u32,
    /// The producer counter (CQEs the device wrote).
    pub producer_counter: u32,
    /// The doorbell record's address.
    pub dbr_addr: u64,
}

/// A completion queue with its ring (CQEs and doorbell record in one DMA buffer) and the
/// map of the QPs that complete to it.
///
/// A `Cq` is [`Send`]: it can be polled on another thread than the one that created it,
/// while its QPs post on theirs. Polling ([`Cq::poll`]) and arming ([`Cq::req_notify`])
/// need only the CQ.
#[derive(Debug)]
pub struct Cq<P: Platform> {
    ring: Option<CqRing<DmaBuf<P>>>,
    cqn: u32,
    cqe: u32,
    uar_page: usize,
    /// The platform, for the arm doorbell.
    p: P,
    /// The QPs that complete here (filled when they are created; see `verbs::dp`).
    map: core::cell::RefCell<QpMap<P>>,
    hca_id: u64,
    /// Its place in the HCA's release queue (`None` once destroyed).
    ticket: Option<Ticket<P>>,
}

impl<P: Platform> Cq<P> {
    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// How many completions it holds (`ibv_cq.cqe`: the entries minus one, as verbs
    /// providers report it).
    pub fn cqe(&self) -> u32 {
        self.cqe
    }

    /// BAR0 offset of the UAR page whose CQ doorbell arms this CQ (for
    /// [`CqRing::arm`]).
    pub fn uar_page_offset(&self) -> usize {
        self.uar_page
    }

    /// The ring: poll CQEs, publish the consumer index, arm.
    pub fn ring(&self) -> &CqRing<DmaBuf<P>> {
        match &self.ring {
            Some(r) => r,
            None => unreachable!("the ring is only taken by destroy and drop"),
        }
    }

    raw_pub! {
        /// The ring, for polling.
        fn ring_mut(&mut self) -> &mut CqRing<DmaBuf<P>> {
            match &mut self.ring {
                Some(r) => r,
                None => unreachable!("the ring is only taken by destroy and drop"),
            }
        }
    }

    /// Notes a QP that completes to this CQ.
    pub(crate) fn attach(&self, qp: QpHandle<P>) -> Result<()> {
        self.map.borrow_mut().insert(qp)
    }

    /// The map of QPs and the ring, for polling.
    pub(crate) fn poll_parts(&mut self) -> (&mut QpMap<P>, &mut CqRing<DmaBuf<P>>) {
        match &mut self.ring {
            Some(r) => (self.map.get_mut(), r),
            None => unreachable!("the ring is only taken by destroy and drop"),
        }
    }

    /// The platform handle and the ring, for arming.
    pub(crate) fn arm_parts(&mut self) -> (&P, usize, &mut CqRing<DmaBuf<P>>) {
        match &mut self.ring {
            Some(r) => (&self.p, self.uar_page, r),
            None => unreachable!("the ring is only taken by destroy and drop"),
        }
    }

    /// Whether its HCA was torn down with bus mastering off (the device writes no more).
    #[inline(always)]
    pub(crate) fn hca_gone(&self) -> bool {
        self.ticket.as_ref().is_some_and(|t| t.hca_gone())
    }

    /// The platform (its clock, for [`Cq::poll_timeout`]).
    pub(crate) fn platform(&self) -> &P {
        &self.p
    }

    /// The identity of the HCA that created it.
    pub(crate) fn hca_id(&self) -> u64 {
        self.hca_id
    }

    /// QPs (and recently destroyed QPs) in the CQ's map, and the map's capacity.
    pub fn qp_map_occupancy(&self) -> (usize, usize) {
        self.map.borrow().occupancy()
    }

    /// QUERY_CQ.
    ///
    /// # Errors
    ///
    /// The command's error.
    pub fn query(&self, hca: &mut Hca<P>) -> Result<CqAttr> {
        hca.check_owner(self.hca_id)?;
        let mut q = QueryCqIn::new_cmd();
        q.set_cqn(self.cqn);
        let out = hca.cmd(&q)?;
        let c = out.cq_context();
        Ok(CqAttr {
            status: c.status(),
            log_cq_size: c.log_cq_size(),
            uar_page: c.uar_page(),
            eqn: c.c_eqn_or_apu_element(),
            moderation: CqModeration {
                period_us: c.cq_period(),
                max_count: c.cq_max_count(),
            },
            consumer_counter: c.consumer_counter(),
            producer_counter: c.producer_counter(),
            dbr_addr: c.dbr_addr(),
        })
    }

    /// MODIFY_CQ: sets the completion moderation (`ibv_modify_cq`).
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] without the `cq_moderation` capability and
    /// [`Error::InvalidArgument`] for a period above 4095 µs (no command is sent); the
    /// command's error.
    pub fn modify_moderation(&mut self, hca: &mut Hca<P>, m: CqModeration) -> Result<()> {
        hca.check_owner(self.hca_id)?;
        if !hca.hca_cap().cq_moderation() {
            return Err(Error::Unsupported("CQ moderation"));
        }
        if m.period_us > MAX_CQ_PERIOD {
            return Err(InvalidArgument::max(
                Arg::CqPeriod,
                m.period_us.into(),
                MAX_CQ_PERIOD.into(),
            )
            .into());
        }
        let mut c = ModifyCqIn::new_cmd();
        c.set_cqn(self.cqn)
            .set_modify_field_select_resize_field_select(MODIFY_CQ_PERIOD | MODIFY_CQ_COUNT);
        c.cq_context_mut()
            .set_cq_period(m.period_us)
            .set_cq_max_count(m.max_count);
        hca.cmd(&c)?;
        Ok(())
    }

    /// DESTROY_CQ, then frees the ring.
    ///
    /// # Errors
    ///
    /// The CQ back with the error (RES_BUSY while a QP uses it).
    pub fn destroy(mut self, hca: &mut Hca<P>) -> core::result::Result<(), Failed<Self>> {
        if let Err(error) = hca.check_owner(self.hca_id) {
            return Err(Failed {
                object: self,
                error,
            });
        }
        match hca.destroy_object(ObjectKind::Cq, self.cqn) {
            Ok(()) => {
                // Completion events still waiting for this CQ go with it.
                while hca.take_completion_event(self.cqn) {}
                hca.cq_destroyed(self.cqn);
                drop(self.ring.take());
                Ok(())
            }
            Err(error) => Err(Failed {
                object: self,
                error,
            }),
        }
    }
}

impl<P: Platform> Drop for Cq<P> {
    fn drop(&mut self) {
        // Not destroyed: the device may still write CQEs and read the doorbell record, so
        // the ring is freed only after the HCA's DESTROY_CQ (`crate::release`).
        if let Some(r) = self.ring.take() {
            match self.ticket.take() {
                Some(t) => t.release(Dropped {
                    kind: ObjectKind::Cq,
                    number: self.cqn,
                    held: Held::cq(r),
                    qp: None,
                    busy_at: None,
                }),
                None => core::mem::forget(r),
            }
        }
    }
}

impl<P: Platform> Hca<P> {
    /// Creates a completion queue for at least `cqe` completions (`ibv_create_cq`): the
    /// size is rounded up to a power of two (one entry is kept spare, as verbs providers
    /// do), the CQ uses the HCA's UAR and reports completion events to the HCA's EQ.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for 0 or more completions than the device's largest CQ
    /// holds (no command is sent); [`Error::Dma`]; the command's error.
    pub fn create_cq(&mut self, cqe: u32) -> Result<Cq<P>> {
        if cqe == 0 {
            return Err(InvalidArgument::min(Arg::Cqe, 0, 1).into());
        }
        let entries = (cqe as u64 + 1).next_power_of_two();
        if entries > self.caps().max_cqe as u64 {
            // One entry stays free (the ring holds `cqe + 1` rounded up to a power of two).
            let max = u64::from(self.caps().max_cqe).saturating_sub(1);
            return Err(InvalidArgument::max(Arg::Cqe, cqe.into(), max).into());
        }
        let log = log2_ceil(entries);
        let ticket = self.release_ticket()?;
        self.reserve_cq_number()?;
        let map = QpMap::new(self.platform().clone(), 16)?;
        let layout = CqLayout::new(0, log);
        let plan = PagePlan::for_bytes(layout.cqe_bytes());
        let mut buf = self.alloc_dma(
            layout.buffer_len(),
            plan.page_bytes().max(ADAPTER_PAGE_SIZE),
        )?;
        // Every CQE invalid with owner 1 and the doorbell record zero before the device
        // knows the buffer (the HAL ring does the same again below; it is cheap).
        let invalid = op_own_of(CqeOpcode::Invalid, 1);
        for i in 0..entries as usize {
            buf.write_u8(i * CQE_BYTES + OP_OWN_OFF, invalid);
        }
        buf.write_be64(layout.dbr_offset, 0);

        let uar = self.uar();
        let mut c = CreateCqIn::new_cmd();
        c.cq_context_mut()
            .set_cqe_sz(0)
            .set_log_cq_size(log)
            .set_uar_page(uar)
            .set_c_eqn_or_apu_element(self.eqn() as u32)
            .set_log_page_size(plan.log_page_size)
            .set_dbr_addr(buf.iova() + layout.dbr_offset as u64);
        let mut pas = [0u8; MAX_PAS * 8];
        let pas = plan.write_pas(buf.iova(), &mut pas);
        let out = match self.exec(&c, pas, &mut []) {
            Ok(o) => o,
            Err(e) => {
                release_unless_held(&e, buf);
                return Err(e);
            }
        };
        let cqn = out.cqn();
        let ring = match CqRing::new(buf, CqLayout::new(cqn, log)) {
            Ok(r) => r,
            Err(_) => {
                // Cannot happen (the layout came from CqLayout::new); do not leave the
                // firmware object behind.
                self.roll_back(ObjectKind::Cq, cqn, ());
                return Err(InvalidArgument::rule(
                    Arg::Cqe,
                    cqe.into(),
                    "the HAL refused the CQ's layout (a driver bug)",
                )
                .into());
            }
        };
        self.cq_created(cqn);
        Ok(Cq {
            ring: Some(ring),
            cqn,
            cqe: (entries - 1) as u32,
            uar_page: uar as usize * ADAPTER_PAGE_SIZE,
            p: self.platform().clone(),
            map: core::cell::RefCell::new(map),
            hca_id: self.id(),
            ticket: Some(ticket),
        })
    }
}
