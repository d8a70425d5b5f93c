//! Shared receive queues: CREATE_SRQ, QUERY_SRQ, ARM_RQ (limit), DESTROY_SRQ.
//!
//! An SRQ's buffer holds `2^log_srq_size` receive WQEs, each a "next" segment (the index
//! of the following free WQE, a linked list the device follows) and data segments; the
//! doorbell record (the WQE counter in its first dword) sits after the WQEs in the same
//! buffer. The driver links every WQE to the next one at creation, as rdma-core's mlx5
//! provider does.

use uhca_fwif::cmd::{ArmRqIn, Command, CreateSrqIn, DestroySrqIn, QuerySrqIn};
use uhca_fwif::consts::SEND_WQE_DS;
use uhca_hal::Platform;
use uhca_hal::dma::{DmaBuf, DmaMem};

use super::{Failed, MAX_PAS, PagePlan, Pd, log2_ceil, release_unless_held};
use crate::error::{Error, Result};
use crate::hca::Hca;

/// ARM_RQ `op_mod` for an SRQ.
const ARM_RQ_OP_MOD_SRQ: u16 = 1;
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

/// What QUERY_SRQ reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqAttr {
    /// `state` (0 good, 1 error).
    pub state: u8,
    /// log2 of the number of WQEs.
    pub log_srq_size: u8,
    /// log2 of the WQE stride in 16-byte units.
    pub log_rq_stride: u8,
    /// The PD.
    pub pdn: u32,
    /// The armed limit (`lwm`).
    pub limit: u16,
    /// WQEs the device has seen posted (`wqe_cnt`).
    pub wqe_cnt: u16,
    /// The doorbell record's address.
    pub dbr_addr: u64,
}

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq<P: Platform + Clone> {
    buf: Option<DmaBuf<P>>,
    srqn: u32,
    log_size: u8,
    log_stride: u8,
    dbr_offset: usize,
    max_wr: u32,
    max_sge: u32,
}

impl<P: Platform + Clone> Srq<P> {
    /// The SRQ number.
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

    /// The buffer, for posting.
    pub fn mem_mut(&mut self) -> &mut DmaBuf<P> {
        match &mut self.buf {
            Some(b) => b,
            None => unreachable!("the buffer is only taken by destroy and drop"),
        }
    }

    /// QUERY_SRQ.
    ///
    /// # Errors
    ///
    /// The command's error.
    pub fn query(&self, hca: &mut Hca<P>) -> Result<SrqAttr> {
        let mut q = QuerySrqIn::new_cmd();
        q.set_srqn(self.srqn);
        let out = hca.exec(&q, &[], &mut [])?;
        let s = out.srq_context_entry();
        Ok(SrqAttr {
            state: s.state(),
            log_srq_size: s.log_srq_size(),
            log_rq_stride: s.log_rq_stride(),
            pdn: s.pd(),
            limit: s.lwm(),
            wqe_cnt: s.wqe_cnt(),
            dbr_addr: s.dbr_addr(),
        })
    }

    /// ARM_RQ: arms the SRQ limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): the device
    /// raises an SRQ_LIMIT event when fewer than `limit` WQEs remain.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a limit not below the SRQ size (no command is
    /// sent); the command's error.
    pub fn arm_limit(&mut self, hca: &mut Hca<P>, limit: u16) -> Result<()> {
        if limit as u32 >= 1u32 << self.log_size {
            return Err(Error::InvalidArgument("SRQ limit not below the SRQ size"));
        }
        let mut a = ArmRqIn::new_cmd();
        a.set_op_mod(ARM_RQ_OP_MOD_SRQ);
        a.set_srq_number(self.srqn).set_lwm(limit);
        hca.exec(&a, &[], &mut [])?;
        Ok(())
    }

    /// DESTROY_SRQ, then frees the buffer.
    ///
    /// # Errors
    ///
    /// The SRQ back with the error (RES_BUSY while a QP receives from it).
    pub fn destroy(mut self, hca: &mut Hca<P>) -> core::result::Result<(), Failed<Self>> {
        let mut d = DestroySrqIn::new_cmd();
        d.set_srqn(self.srqn);
        match hca.exec(&d, &[], &mut []) {
            Ok(_) => {
                hca.datapath_mut().1.remove_srq(self.srqn);
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

impl<P: Platform + Clone> Drop for Srq<P> {
    fn drop(&mut self) {
        // Not destroyed: the device may still read WQEs and the doorbell record.
        if let Some(b) = self.buf.take() {
            core::mem::forget(b);
        }
    }
}

impl<P: Platform + Clone> Hca<P> {
    /// Creates a shared receive queue (`ibv_create_srq`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for 0 or too many work requests or scatter/gather
    /// entries, or a limit not below the size (no command is sent); [`Error::Dma`]; the
    /// command's error.
    pub fn create_srq(&mut self, pd: &Pd, attr: SrqInitAttr) -> Result<Srq<P>> {
        let caps = self.caps();
        if attr.max_wr == 0 || attr.max_wr >= caps.max_srq_wr {
            return Err(Error::InvalidArgument(
                "SRQ max_wr must be between 1 and the device's largest SRQ",
            ));
        }
        let stride = (SEND_WQE_DS * (1 + attr.max_sge.max(1) as usize))
            .max(MIN_SRQ_STRIDE)
            .next_power_of_two();
        if stride > caps.max_recv_wqe_bytes as usize {
            return Err(Error::InvalidArgument(
                "SRQ max_sge: more scatter/gather entries than a receive WQE holds",
            ));
        }
        let cnt = (attr.max_wr as u64 + 1).next_power_of_two();
        let log_size = log2_ceil(cnt);
        if log_size > 15 || cnt > caps.max_srq_wr as u64 {
            return Err(Error::InvalidArgument("SRQ max_wr too large"));
        }
        if attr.srq_limit as u64 >= cnt {
            return Err(Error::InvalidArgument("SRQ limit not below the SRQ size"));
        }
        let log_stride = log2_ceil(stride as u64);
        let wq_bytes = (cnt as usize) << log_stride;
        let dbr_offset = wq_bytes.next_multiple_of(64);
        let plan = PagePlan::for_bytes(wq_bytes);
        // The datapath's shadow of the WQEs (`verbs::dp`).
        let shadow = super::dp::SrqShadow::new(self, log_size)?;
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

        let mut c = CreateSrqIn::new_cmd();
        c.srq_context_entry_mut()
            .set_log_srq_size(log_size)
            .set_log_rq_stride(log_stride - 4)
            .set_pd(pd.pdn())
            .set_lwm(attr.srq_limit)
            .set_log_page_size(plan.log_page_size)
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
        self.datapath_mut().1.insert_srq(out.srqn(), shadow);
        Ok(Srq {
            buf: Some(buf),
            srqn: out.srqn(),
            log_size,
            log_stride,
            dbr_offset,
            max_wr: (cnt - 1) as u32,
            max_sge: (stride / SEND_WQE_DS - 1) as u32,
        })
    }
}
