//! Shared receive queues. At ISSI 1, the interface step the driver speaks, a basic SRQ is
//! a receive memory pool (RMP): CREATE_RMP, MODIFY_RMP (the limit), QUERY_RMP, DESTROY_RMP,
//! as Linux does whenever the ISSI is not 0 (`mlx5_ib` `srq_cmd.c`: `create_srq_split`,
//! `arm_rmp_cmd`, `query_rmp_cmd`, `destroy_rmp_cmd`); the CREATE_SRQ family is ISSI 0's.
//!
//! The RMP's work queue is a linked list (`wq_type` 0, as Linux leaves it): its buffer
//! holds `2^log_wq_sz` receive WQEs, each a "next" segment (the index of the following
//! free WQE, which the device follows) and data segments; the doorbell record (the WQE
//! counter in its first dword) sits after the WQEs in the same buffer. The driver links
//! every WQE to the next one at creation, as rdma-core's mlx5 provider does. A QP receives
//! from it with `rq_type` 1 and the RMP number in `srqn_rmpn_xrqn`, as Linux attaches one.

use uhca_fwif::cmd::{Command, CreateRmpIn, ModifyRmpIn, QueryRmpIn};
use uhca_fwif::consts::{RmpcState, SEND_WQE_DS};
use uhca_hal::Platform;
use uhca_hal::dma::{DmaBuf, DmaMem};

use uhca_hal::host::{HostArc, SpinLock};

use super::dp::{SrqHandle, SrqShadow, SrqShared};
use super::{Failed, MAX_PAS, PagePlan, Pd, log2_ceil, release_unless_held};
#[cfg(doc)]
use crate::error::Error;
use crate::error::{Arg, InvalidArgument, Result};
use crate::hca::Hca;
use crate::release::{Dropped, Held, ObjectKind, Ticket};

/// `wq.wq_type` of a linked-list work queue.
const WQ_TYPE_LINKED_LIST: u8 = 0;
/// Byte offset of `next_wqe_index` in the SRQ "next" segment.
const NEXT_WQE_INDEX_OFF: usize = 2;
/// Smallest SRQ WQE (rdma-core: 32 bytes).
const MIN_SRQ_STRIDE: usize = 32;

/// What an SRQ is created with (`ibv_srq_init_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqInitAttr {
    /// Receive work requests outstanding at once.
    pub max_wr: u32,
    /// Scatter/gather entries per receive work request.
    pub max_sge: u32,
    /// The limit: an SRQ_LIMIT event when fewer WQEs remain (0: not armed).
    pub srq_limit: u16,
}

/// What QUERY_RMP reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqAttr {
    /// `rmpc.state`: ready, or error.
    pub state: RmpcState,
    /// log2 of the number of WQEs (`wq.log_wq_sz`).
    pub log_srq_size: u8,
    /// log2 of the WQE stride in 16-byte units (`wq.log_wq_stride` less 4).
    pub log_rq_stride: u8,
    /// The PD.
    pub pdn: u32,
    /// The armed limit (`wq.lwm`; 0 once an SRQ_LIMIT event fired, until armed again).
    pub limit: u16,
    /// WQEs the device has taken (`wq.hw_counter`).
    pub hw_counter: u32,
    /// The doorbell record's address.
    pub dbr_addr: u64,
}

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq<P: Platform> {
    buf: Option<DmaBuf<P>>,
    /// The free list, shared with the CQs of the QPs that receive from it (`verbs::dp`).
    shared: SrqHandle<P>,
    hca_id: u64,
    srqn: u32,
    log_size: u8,
    log_stride: u8,
    dbr_offset: usize,
    max_wr: u32,
    max_sge: u32,
    /// Its place in the HCA's release queue (`None` once destroyed).
    ticket: Option<Ticket<P>>,
}

impl<P: Platform> Srq<P> {
    /// The SRQ's number: its RMP number, which a QP names to receive from it and SRQ
    /// events carry.
    pub fn srqn(&self) -> u32 {
        self.srqn
    }

    /// Receive work requests it holds (one WQE is kept spare, as verbs providers do).
    pub fn max_wr(&self) -> u32 {
        self.max_wr
    }

    /// Scatter/gather entries per WQE.
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// log2 of the WQE count.
    pub fn log_size(&self) -> u8 {
        self.log_size
    }

    /// log2 of the WQE stride in bytes.
    pub fn log_stride(&self) -> u8 {
        self.log_stride
    }

    /// Byte offset of the doorbell record in [`Srq::mem`].
    pub fn dbr_offset(&self) -> usize {
        self.dbr_offset
    }

    /// The buffer (WQEs at offset 0, doorbell record at [`Srq::dbr_offset`]), for the
    /// datapath.
    pub fn mem(&self) -> &DmaBuf<P> {
        match &self.buf {
            Some(b) => b,
            None => unreachable!("the buffer is only taken by destroy and drop"),
        }
    }

    raw_pub! {
        /// The buffer, for posting.
        fn mem_mut(&mut self) -> &mut DmaBuf<P> {
            match &mut self.buf {
                Some(b) => b,
                None => unreachable!("the buffer is only taken by destroy and drop"),
            }
        }
    }

    /// The buffer and the shared free list, for posting.
    pub(crate) fn post_parts(&mut self) -> (&mut DmaBuf<P>, &SrqShared<P>) {
        match &mut self.buf {
            Some(b) => (b, &self.shared),
            None => unreachable!("the buffer is only taken by destroy and drop"),
        }
    }

    /// The shared free list.
    pub(crate) fn shared(&self) -> &SrqHandle<P> {
        &self.shared
    }

    /// The identity of the HCA that created it.
    pub(crate) fn hca_id(&self) -> u64 {
        self.hca_id
    }

    /// QUERY_RMP.
    ///
    /// # Errors
    ///
    /// The command's error.
    pub fn query(&self, hca: &mut Hca<P>) -> Result<SrqAttr> {
        hca.check_owner(self.hca_id)?;
        let mut q = QueryRmpIn::new_cmd();
        q.set_rmpn(self.srqn);
        let out = hca.cmd(&q)?;
        let r = out.rmp_context();
        let wq = r.wq();
        Ok(SrqAttr {
            state: RmpcState::from_raw(r.state()),
            log_srq_size: wq.log_wq_sz(),
            log_rq_stride: wq.log_wq_stride().saturating_sub(4),
            pdn: wq.pd(),
            limit: wq.lwm(),
            hw_counter: wq.hw_counter(),
            dbr_addr: wq.dbr_addr(),
        })
    }

    /// Arms the SRQ limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): the device raises one
    /// SRQ_LIMIT event when fewer than `limit` WQEs remain posted. MODIFY_RMP from ready
    /// to ready with the `lwm` bit of its bitmask, as Linux's `arm_rmp_cmd`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a limit not below the SRQ size (no command is
    /// sent); the command's error.
    pub fn arm_limit(&mut self, hca: &mut Hca<P>, limit: u16) -> Result<()> {
        hca.check_owner(self.hca_id)?;
        if limit as u32 >= 1u32 << self.log_size {
            return Err(InvalidArgument::max(
                Arg::SrqLimit,
                limit.into(),
                (1u64 << self.log_size) - 1,
            )
            .into());
        }
        let mut m = ModifyRmpIn::new_cmd();
        m.set_rmp_state(RmpcState::Rdy.raw()).set_rmpn(self.srqn);
        m.bitmask_mut().set_lwm(true);
        m.ctx_mut().set_state(RmpcState::Rdy.raw());
        m.ctx_mut().wq_mut().set_lwm(limit);
        hca.cmd(&m)?;
        Ok(())
    }

    /// DESTROY_RMP, then frees the buffer.
    ///
    /// # Errors
    ///
    /// The SRQ back with the error (RES_BUSY while a QP receives from it).
    pub fn destroy(mut self, hca: &mut Hca<P>) -> core::result::Result<(), Failed<Self>> {
        if let Err(error) = hca.check_owner(self.hca_id) {
            return Err(Failed {
                object: self,
                error,
            });
        }
        match hca.destroy_object(ObjectKind::Srq, self.srqn) {
            Ok(_) => {
                drop(self.buf.take());
                Ok(())
            }
            Err(error) => Err(Failed {
                object: self,
                error,
            }),
        }
    }
}

impl<P: Platform> Drop for Srq<P> {
    fn drop(&mut self) {
        // Not destroyed: the device may still read WQEs and the doorbell record, so the
        // buffer is freed only after the HCA's DESTROY_RMP (`crate::release`).
        if let Some(b) = self.buf.take() {
            match self.ticket.take() {
                Some(t) => t.release(Dropped {
                    kind: ObjectKind::Srq,
                    number: self.srqn,
                    held: Held::buf(b),
                    qp: None,
                    busy_at: None,
                }),
                None => core::mem::forget(b),
            }
        }
    }
}

impl<P: Platform> Hca<P> {
    /// Creates a shared receive queue (`ibv_create_srq`): CREATE_RMP.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for 0 or too many work requests or scatter/gather
    /// entries, or a limit not below the size (no command is sent); [`Error::Dma`]; the
    /// command's error.
    pub fn create_srq(&mut self, pd: &Pd<P>, attr: SrqInitAttr) -> Result<Srq<P>> {
        self.check_owner(pd.hca_id())?;
        let (cnt, log_size, log_stride) = srq_sizes(self.caps(), &attr)?;
        let stride = 1usize << log_stride;
        let wq_bytes = (cnt as usize) << log_stride;
        let dbr_offset = wq_bytes.next_multiple_of(64);
        let plan = PagePlan::for_bytes(wq_bytes);
        let ticket = self.release_ticket()?;
        // The datapath's shadow of the WQEs (`verbs::dp`).
        let shadow = SrqShadow::new(self.platform().clone(), log_size)?;
        let mut buf = self.alloc_dma(dbr_offset + 64, plan.page_bytes())?;
        // Link every WQE to the next one; the record starts at zero.
        for i in 0..cnt as usize {
            let next = ((i + 1) % cnt as usize) as u32;
            // `next_wqe_index` is the low half of the segment's first big-endian dword.
            let off = (i << log_stride) + NEXT_WQE_INDEX_OFF - 2;
            let word = (buf.read_be32(off) & 0xffff_0000) | next;
            buf.write_be32(off, word);
        }
        buf.write_be64(dbr_offset, 0);

        let mut c = CreateRmpIn::new_cmd();
        c.ctx_mut().set_state(RmpcState::Rdy.raw());
        c.ctx_mut()
            .wq_mut()
            .set_wq_type(WQ_TYPE_LINKED_LIST)
            .set_log_wq_sz(log_size)
            .set_log_wq_stride(log_stride)
            .set_pd(pd.pdn())
            .set_lwm(attr.srq_limit)
            .set_log_wq_pg_sz(plan.log_page_size)
            .set_dbr_addr(buf.iova() + dbr_offset as u64);
        let mut pas = [0u8; MAX_PAS * 8];
        let pas = plan.write_pas(buf.iova(), &mut pas);
        let out = match self.exec(&c, pas, &mut []) {
            Ok(o) => o,
            Err(e) => {
                release_unless_held(&e, buf);
                return Err(e);
            }
        };
        let shared = match HostArc::new(
            self.platform().clone(),
            SrqShared {
                srqn: out.rmpn(),
                shadow: SpinLock::new(shadow),
            },
        ) {
            Ok(h) => h,
            Err(e) => {
                self.roll_back(ObjectKind::Srq, out.rmpn(), buf);
                return Err(e.into());
            }
        };
        Ok(Srq {
            buf: Some(buf),
            shared,
            hca_id: self.id(),
            srqn: out.rmpn(),
            log_size,
            log_stride,
            dbr_offset,
            max_wr: (cnt - 1) as u32,
            max_sge: (stride / SEND_WQE_DS - 1) as u32,
            ticket: Some(ticket),
        })
    }
}

/// The SRQ's `(WQEs, log2 of them, log2 of its stride)` for `attr` on a device of `caps`:
/// `max_wr + 1` WQEs (one stays unused) rounded up to a power of two, each a next-WQE
/// segment and `max_sge` entries.
fn srq_sizes(caps: &crate::caps::DeviceCaps, attr: &SrqInitAttr) -> Result<(u64, u8, u8)> {
    if attr.max_wr == 0 {
        return Err(InvalidArgument::min(Arg::SrqMaxWr, 0, 1).into());
    }
    // The ring holds `max_wr + 1` rounded up to a power of two, at most 2^15.
    let max_wr = match caps.max_srq_wr.checked_ilog2() {
        Some(l) => (1u64 << l.min(15)) - 1,
        None => 0,
    };
    if u64::from(attr.max_wr) > max_wr {
        return Err(InvalidArgument::max(Arg::SrqMaxWr, attr.max_wr.into(), max_wr).into());
    }
    let stride = (SEND_WQE_DS * (1 + attr.max_sge.max(1) as usize))
        .max(MIN_SRQ_STRIDE)
        .next_power_of_two();
    if stride > caps.max_recv_wqe_bytes as usize {
        // A power of two of 16-byte entries, the first the SRQ's next-WQE segment.
        let max_sge = match (caps.max_recv_wqe_bytes as usize).checked_ilog2() {
            Some(l) => ((1usize << l) / SEND_WQE_DS).saturating_sub(1),
            None => 0,
        };
        return Err(
            InvalidArgument::max(Arg::SrqMaxSge, attr.max_sge.into(), max_sge as u64).into(),
        );
    }
    let cnt = (attr.max_wr as u64 + 1).next_power_of_two();
    let log_size = log2_ceil(cnt);
    if log_size > 15 || cnt > caps.max_srq_wr as u64 {
        return Err(InvalidArgument::max(Arg::SrqMaxWr, attr.max_wr.into(), max_wr).into());
    }
    if attr.srq_limit as u64 >= cnt {
        return Err(InvalidArgument::max(Arg::SrqLimit, attr.srq_limit.into(), cnt - 1).into());
    }
    let log_stride = log2_ceil(stride as u64);
    Ok((cnt, log_size, log_stride))
}
