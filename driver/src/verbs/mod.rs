//! The verbs objects: protection domains, transport domains, memory regions, completion
//! queues, queue pairs (their transport in the type, their state checked at run time), shared
//! receive queues,
//! address handles, and the port and GID-table queries.
//!
//! Every object is created through the [`Hca`](crate::Hca) that owns the device
//! (`hca.alloc_pd()`, `hca.create_cq(..)`, `hca.create_qp::<Rc>(..)` ...), and every later
//! *command* on it takes that `Hca` again (`cq.query(&mut hca)`, `qp.to_init(&mut hca, ..)`,
//! `mr.destroy(&mut hca)`). Objects do not borrow the `Hca`, so the application keeps
//! `&mut Hca` for commands and event processing. Each object remembers the HCA that made
//! it: handed to another `Hca`, a command is refused with
//! [`Error::WrongHca`] and nothing is sent.
//!
//! The *datapath* needs no `Hca` at all: `qp.post_send(&wrs)`, `qp.post_recv(&wrs)`,
//! `srq.post_recv(&wrs)`, `cq.poll(&mut wc)`, `cq.req_notify(..)` (see below).
//!
//! Scatter/gather entries name memory through a registered region's key ([`Mr::sge`],
//! [`UserMr::sge`]), which bounds every access to that region. The one exception is the
//! firmware's reserved lkey ([`reserved`]: [`Hca::reserved_lkey`](crate::Hca::reserved_lkey),
//! [`ReservedLkey::sge`]), whose addresses are raw IOVAs with no protection but the
//! IOMMU's, honoured only on QPs created with
//! [`Hca::create_qp_with_reserved_lkey`](crate::Hca::create_qp_with_reserved_lkey).

//! # Destroying, and what dropping does
//!
//! `destroy` sends the firmware's destroy command and only then frees the object's DMA
//! memory. If the device refuses (an object still in use, a dead device), `destroy` gives
//! the object back inside [`Failed`], so it can be retried; `?` turns a [`Failed`] into its
//! [`Error`] (dropping the object, see below). Call `destroy` to see the device's answer.
//!
//! Dropping an object that was not destroyed **releases** it, as dropping an `ibverbs`
//! object does, but later: `Drop` has no `Hca` to send a command with, so the object goes
//! on its HCA's release queue ([`crate::release`]), and the [`Hca`](crate::Hca) sends its
//! destroy before its next command, in [`Hca::process_events`](crate::Hca::process_events)
//! and in [`Hca::close`](crate::Hca::close). Dropping sends nothing, allocates nothing and
//! takes no `Hca`, so objects may be dropped on any thread. The HCA destroys what was
//! dropped in an order the device accepts (QPs, then SRQs, CQs, memory keys, PDs,
//! transport domains), whatever order they were dropped in; an object the device still
//! finds in use (a CQ dropped while the application keeps a QP on it) waits until
//! something else is destroyed. Until its destroy, a dropped QP's completions still reach
//! its CQs (after it, they are dropped, as after `destroy`). Its DMA memory (queues, doorbell records, registered
//! buffers) goes back to the platform only once its destroy succeeded: if the device
//! refuses otherwise or times out, the memory is leaked, never freed, and the HCA counts
//! it ([`Hca::objects_leaked`](crate::Hca::objects_leaked)) and reports an
//! [`AsyncEvent::ReleaseFailed`](crate::AsyncEvent::ReleaseFailed).
//!
//! Objects may outlive their `Hca`: once it is closed or dropped, bus mastering is off, and
//! an object dropped afterwards has its memory freed at once (or leaked, if the HCA could
//! not turn bus mastering off). A CQ still alive at [`Hca::close`](crate::Hca::close) is
//! still attached to the driver's EQ and makes DESTROY_EQ fail; `close` reports that
//! error (after finishing the teardown, which removes whatever objects are left).
//!
//! # The datapath
//!
//! A [`Cq`] owns a HAL [`CqRing`](uhca_hal::cq::CqRing) (CQEs initialised invalid with
//! owner 1, doorbell record zeroed) and a [`Qp`] a HAL [`QpRings`](uhca_hal::wq::QpRings)
//! (RQ then SQ in one buffer, doorbell record after them, send doorbell on the HCA's UAR);
//! `cq.ring_mut()` and `qp.rings_mut()` hand them to the datapath (post, doorbell, poll);
//! they are the driver's own (public only with the `raw` feature, for tests): a caller
//! posting on a ring behind the driver's back would break its work-request tables.
//!
//! The verbs datapath sits on top of them:
//!
//! - [`Qp::post_send`] (a QP in RTS; [`SendWr`] with a [`SendOp`]: SEND, SEND with
//!   immediate, RDMA WRITE (with immediate), RDMA READ, compare-and-swap, fetch-and-add;
//!   gather list or inline data; signalled, fenced, solicited; a [`UdDest`] for UD) and
//!   [`Qp::post_recv`] (INIT, RTR or RTS) / [`Srq::post_recv`] ([`RecvWr`]) build one WQE
//!   per request and publish a batch with one doorbell; a bad request stops the batch after
//!   posting the ones before it ([`BadWr`]).
//! - [`Cq::poll`] fills [`WorkCompletion`]s (`wr_id`, typed [`WcStatus`], [`WcOpcode`],
//!   byte count, immediate, QPN, UD source) after checking every CQE against the driver's
//!   tables of what was posted ([`PollError`] otherwise). A signalled completion retires the
//!   unsignalled requests before it. After an error completion the device has the QP in ERR:
//!   posting is refused with [`WrError::QpInError`] until the QP goes through RESET, and
//!   the rest of its requests complete as [`WcStatus::WrFlushed`].
//! - [`Cq::req_notify`] arms a CQ; [`Hca::next_completion_event`](crate::Hca::next_completion_event)
//!   (after [`Hca::process_events`](crate::Hca::process_events)) reports the CQs that
//!   raised an event, and [`Cq::ack_event`] acknowledges one.
//!
//! Each queue owns what the datapath needs: a QP its rings, its UAR page and the tables of
//! the work requests it posted (in host memory the device cannot reach); a CQ its ring and
//! a map of the QPs that complete to it, through which it reads their tables (the
//! protocol between the two sides is [`uhca_hal::wrid`]'s). So [`Qp`], [`Cq`] and [`Srq`]
//! are [`Send`]: N threads can each own QPs and CQs and post and poll with no lock between
//! them, and one thread can poll a CQ while other threads post on its QPs. A QP's own send
//! and receive sides can be driven from two threads too: [`Qp::split`] hands out a
//! [`SendQueue`] and a [`RecvQueue`], each [`Send`], each writing only its own queue, its
//! own word of the doorbell record and its own work-request table (how that is made sound
//! is written in [`uhca_hal::wrid`]). An SRQ's free
//! list is shared by its poster and the pollers of its QPs' CQs under a spin lock (as
//! rdma-core's SRQ lock). Posting and polling allocate nothing; there is no cap on QPs,
//! CQs or SRQs but the device's.
//!
//! CQEs a QP leaves in a CQ when it is destroyed, or moved to RESET and not posted to
//! since, are dropped by the poller (rdma-core removes them from the CQ; see [`Cq::poll`]);
//! to keep its completions, drain a QP (move it to ERR and poll its flushed requests) before
//! moving it to RESET or destroying it. Move a QP to RESET only while no thread polls its
//! CQs.

// A failed destroy hands the object back by value inside `Failed`, so the error variant is
// as large as the object (a few hundred bytes for a QP); without an allocator there is
// nothing to box it in.
#![allow(clippy::result_large_err)]

use uhca_fwif::consts::ADAPTER_PAGE_SIZE;

use crate::error::Error;

mod ah;
mod cq;
pub(crate) mod dp;
mod mr;
mod pd;
mod poll;
mod port;
mod post;
mod qp;
pub mod reserved;
mod srq;
mod user_mr;
mod wr;

pub use ah::Ah;
pub use cq::{Cq, CqAttr, CqModeration};
pub use mr::{Mr, MrAttr};
pub use pd::{Pd, TransportDomain};
pub use port::{GidEntry, GidType, PhysPortState, PortAttr};
pub use qp::{
    Datagram, GSI_Q_KEY, Gsi, InitAttr, InitModifyAttr, Qp, QpAttr, QpCaps, QpInitAttr,
    QpTransport, Rc, RtrAttr, RtsAttr, RtsModifyAttr, Uc, Ud, transition_is_legal,
};
pub use reserved::ReservedLkey;
pub use srq::{Srq, SrqAttr, SrqInitAttr};
pub use user_mr::UserMr;

pub use crate::error::{BadCqe, PollError};
pub use dp::MAX_PENDING_CQ_EVENTS;
pub use post::{RecvQueue, SendQueue};
pub use wr::{
    BadWr, RecvWr, SendData, SendFlags, SendOp, SendWr, Sge, UdDest, WcFlags, WcOpcode, WcStatus,
    WorkCompletion, WrError,
};

/// A verbs operation failed; the object it consumed is given back.
///
/// `?` converts it into its [`Error`] (the object is then dropped, which queues it for
/// release by its HCA: see the [module documentation](self). Match on it to keep the object, for example to move a
/// QP to RESET after a refused transition, or to retry a destroy.
///
/// It is an error (`core::error::Error`, its [`source`](core::error::Error::source) the
/// [`Error`]) and `Debug` for any object, so `?` puts it into a `Box<dyn Error>` and
/// `unwrap` works in code generic over the platform; its `Debug` names the object's type.
pub struct Failed<T> {
    /// The object, unchanged (in the state it was in before the call).
    pub object: T,
    /// What went wrong.
    pub error: Error,
}

impl<T> Failed<T> {
    /// Splits into the object and the error.
    pub fn into_parts(self) -> (T, Error) {
        (self.object, self.error)
    }
}

impl<T> From<Failed<T>> for Error {
    fn from(f: Failed<T>) -> Error {
        f.error
    }
}

impl<T> core::fmt::Display for Failed<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.error.fmt(f)
    }
}

impl<T> core::fmt::Debug for Failed<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Failed")
            .field("object", &core::any::type_name::<T>())
            .field("error", &self.error)
            .finish()
    }
}

impl<T> core::error::Error for Failed<T> {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Whether, after `e`, the device may hold an object made from the memory the failed
/// command named (and so may still write that memory): a command that timed out may yet
/// complete, and what a dead device did with its last command is unknown.
pub(crate) fn device_may_hold(e: &Error) -> bool {
    matches!(
        e,
        Error::Command(uhca_hal::cmdq::CmdError::Timeout { .. }) | Error::Fatal(_)
    )
}

/// Frees `mem` after a failed creation command, unless the device may hold it (then it is
/// leaked: never given back to the allocator while the device might write it).
pub(crate) fn release_unless_held<T>(e: &Error, mem: T) {
    if device_may_hold(e) {
        core::mem::forget(mem);
    } else {
        drop(mem);
    }
}

/// Most `pas` or MTT entries the driver puts in one command: 4 KiB on the stack. Larger
/// buffers are described with larger pages (every buffer is one contiguous IOVA range).
pub(crate) const MAX_PAS: usize = 512;

/// How a contiguous DMA buffer is described to the device in pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PagePlan {
    /// log2 of the page size relative to 4 KiB (the queue contexts' `log_page_size`).
    pub(crate) log_page_size: u8,
    /// Number of pages.
    pub(crate) npages: usize,
}

impl PagePlan {
    /// The smallest page size (4 KiB and up) that describes `bytes` in at most
    /// [`MAX_PAS`] pages.
    pub(crate) fn for_bytes(bytes: usize) -> PagePlan {
        let mut log = 0u8;
        while bytes.div_ceil(ADAPTER_PAGE_SIZE << log) > MAX_PAS {
            log += 1;
        }
        PagePlan {
            log_page_size: log,
            npages: bytes.div_ceil(ADAPTER_PAGE_SIZE << log),
        }
    }

    /// Page size in bytes (also the alignment the buffer needs).
    pub(crate) fn page_bytes(&self) -> usize {
        ADAPTER_PAGE_SIZE << self.log_page_size
    }

    /// Writes the big-endian page addresses of a buffer at `iova` into `out` and returns
    /// the bytes written.
    pub(crate) fn write_pas<'a>(&self, iova: u64, out: &'a mut [u8; MAX_PAS * 8]) -> &'a [u8] {
        let ps = self.page_bytes() as u64;
        for i in 0..self.npages {
            let a = iova + i as u64 * ps;
            out[i * 8..i * 8 + 8].copy_from_slice(&a.to_be_bytes());
        }
        &out[..self.npages * 8]
    }
}

/// `ceil(log2(n))` for `n >= 1`.
pub(crate) const fn log2_ceil(n: u64) -> u8 {
    if n <= 1 {
        0
    } else {
        (64 - (n - 1).leading_zeros()) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_plans_stay_within_one_stack_buffer() {
        assert_eq!(
            PagePlan::for_bytes(64),
            PagePlan {
                log_page_size: 0,
                npages: 1
            }
        );
        assert_eq!(PagePlan::for_bytes(2 << 20).npages, 512);
        let big = PagePlan::for_bytes(256 << 20);
        assert_eq!((big.log_page_size, big.npages), (7, 512));
        let mut out = [0u8; MAX_PAS * 8];
        let p = PagePlan::for_bytes(3 * 4096);
        let pas = p.write_pas(0x10_0000, &mut out);
        assert_eq!(pas.len(), 24);
        assert_eq!(&pas[16..24], &(0x10_2000u64).to_be_bytes());
    }

    #[test]
    fn log2_ceil_rounds_up() {
        assert_eq!(
            [1, 2, 3, 4, 5, 1024, 1025].map(log2_ceil),
            [0, 1, 2, 2, 3, 10, 11]
        );
    }
}
