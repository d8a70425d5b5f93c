//! Queue pairs: CREATE_QP, the state machine checked at run time, QUERY_QP, DESTROY_QP.
//!
//! See [`Qp`] for the state machine.
//!
//! The sizes follow rdma-core's mlx5 provider: a send WQE holds the transport's fixed
//! segments (RC: control, remote address, atomic; UC: control, remote address; UD:
//! control, datagram) plus `max_send_sge` data segments or `max_inline_data` inline bytes,
//! rounded up to 64-byte basic blocks; the SQ holds `max_send_wr` of them rounded up to a
//! power of two; a receive WQE holds `max_recv_sge` data segments rounded up to a power of
//! two. The RQ sits at offset 0 of the QP buffer, the SQ after it, the doorbell record
//! after both.

use core::marker::PhantomData;
use core::sync::atomic::{AtomicU8, Ordering};

use uhca_fwif::cmd::{
    Command, CreateQpIn, Init2initQpIn, Init2rtrQpIn, Qp2errIn, Qp2rstIn, QueryQpIn, Rst2initQpIn,
    Rtr2rtsQpIn, Rts2rtsQpIn, Sqerr2rtsQpIn,
};
use uhca_fwif::consts::{
    ADAPTER_PAGE_SIZE, AccessFlags, CmdStatus, IbMtu, QpServiceType, QpState, SEND_WQE_BB,
    SEND_WQE_DS,
};
use uhca_fwif::ctx::{CmdHcaCap, Qpc, RoceCap};
use uhca_hal::Platform;
use uhca_hal::cmdq::CmdError;
use uhca_hal::dma::{DmaBuf, DmaMem};
use uhca_hal::host::HostArc;
use uhca_hal::wq::{QpLayout, QpRings, SqDoorbell};
use uhca_hal::wrid::{RqTable, SqTable};

use super::dp::{QpHandle, QpShared};
use super::{Cq, Failed, MAX_PAS, PagePlan, Pd, ReservedLkey, Srq, log2_ceil, release_unless_held};
use crate::addr::{AhAttr, StaticRate};
use crate::caps::LinkLayer;
use crate::error::{Arg, Error, InvalidArgument, Result};
use crate::hca::Hca;
use crate::release::{Dropped, Held, ObjectKind, Ticket};

mod sealed {
    pub trait Sealed {}
}

/// The QP's state as the driver believes it, shared by the QP (which sets it at each
/// transition and QUERY_QP), its posters (which read it once per call), its CQs'
/// pollers (which move it to ERR on an error completion: `store(true, ..)`, the one thing
/// they know about states) and the HCA's event service (the same, on a QP-fatal event).
pub(crate) struct QpStateCell(AtomicU8);

impl core::fmt::Debug for QpStateCell {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.get().fmt(f)
    }
}

impl QpStateCell {
    /// A new QP: RESET.
    pub(crate) const fn new() -> Self {
        QpStateCell(AtomicU8::new(QpState::Rst.raw()))
    }

    /// `true`: an error completion was seen, the device has the QP in ERR. `false`: the QP
    /// went back to RESET.
    #[inline(always)]
    pub(crate) fn store(&self, error: bool, order: Ordering) {
        let s = if error { QpState::Err } else { QpState::Rst };
        self.0.store(s.raw(), order);
    }

    /// Whether the driver has the QP in ERR.
    #[inline(always)]
    pub(crate) fn load(&self, order: Ordering) -> bool {
        self.0.load(order) == QpState::Err.raw()
    }

    /// The state.
    #[inline(always)]
    pub(crate) fn get(&self) -> QpState {
        QpState::from_raw(self.0.load(Ordering::Relaxed))
    }

    /// Sets the state (a transition or QUERY_QP).
    pub(crate) fn set(&self, s: QpState) {
        self.0.store(s.raw(), Ordering::Relaxed);
    }

    /// Sends may be posted: RTS. One compare.
    #[inline(always)]
    pub(crate) fn can_send(&self) -> bool {
        self.0.load(Ordering::Relaxed) == QpState::Rts.raw()
    }

    /// Receives may be posted: INIT, RTR, RTS or SQER (the receive queue works on in
    /// SQER). One compare: their codes are 1 to 4.
    #[inline(always)]
    pub(crate) fn can_recv(&self) -> bool {
        const _: () = assert!(
            QpState::Init.raw() == 1
                && QpState::Rtr.raw() == 2
                && QpState::Rts.raw() == 3
                && QpState::Sqer.raw() == 4
        );
        self.0.load(Ordering::Relaxed).wrapping_sub(1) < 4
    }
}

/// Whether the IB state table (IBA 11.2.1, `ibv_modify_qp(3)`) has a transition from
/// `from` to `to`.
pub fn transition_is_legal(from: QpState, to: QpState) -> bool {
    use QpState::{Err, Init, Rst, Rtr, Rts, Sqd, Sqer};
    matches!(
        (from, to),
        (_, Rst | Err)
            | (Rst | Init, Init)
            | (Init, Rtr)
            | (Rtr | Rts | Sqer | Sqd, Rts)
            | (Rts | Sqd, Sqd)
    )
}

/// A QP transport.
pub trait QpTransport: sealed::Sealed {
    /// The PRM service type (`qpc.st`).
    const ST: QpServiceType;
    /// Bytes of a send WQE before its data segments: the control segment and the
    /// largest fixed segments the transport's opcodes use.
    const SQ_OVERHEAD: usize;
}

/// Reliable connected.
#[derive(Debug)]
pub struct Rc;
/// Unreliable connected.
#[derive(Debug)]
pub struct Uc;
/// Unreliable datagram.
#[derive(Debug)]
pub struct Ud;
/// The port's general services interface QP, QP1 (`qpc.st` QP1, IBA 13.5.1): a datagram
/// QP that the fabric addresses as QP 1 of the port whatever its firmware QPN, with the
/// well-known Q_Key [`GSI_Q_KEY`]; one per port. Management datagrams (MADs) to and from
/// the port's agents go through it, the communication manager's among them
/// ([`crate::cm`]). Posting and polling are those of [`Ud`].
#[derive(Debug)]
pub struct Gsi;

/// QP1's Q_Key, the general services interface's well-known Q_Key (IBA 13.5.1): a
/// controlled Q_Key (bit 31 set), which no unprivileged UD QP may send with.
pub const GSI_Q_KEY: u32 = 0x8001_0000;

/// The datagram transports ([`Ud`], [`Gsi`]): no path in the QP, a destination per send.
pub trait Datagram: QpTransport {}
impl Datagram for Ud {}
impl Datagram for Gsi {}

/// Whether QPs of service type `st` are datagram QPs (UD or QP1).
pub(crate) fn is_datagram(st: QpServiceType) -> bool {
    matches!(st, QpServiceType::Ud | QpServiceType::Qp1)
}

impl sealed::Sealed for Rc {}
impl sealed::Sealed for Uc {}
impl sealed::Sealed for Ud {}
impl sealed::Sealed for Gsi {}
impl QpTransport for Rc {
    const ST: QpServiceType = QpServiceType::Rc;
    // Control, remote address, atomic.
    const SQ_OVERHEAD: usize = 48;
}
impl QpTransport for Uc {
    const ST: QpServiceType = QpServiceType::Uc;
    // Control, remote address.
    const SQ_OVERHEAD: usize = 32;
}
impl QpTransport for Ud {
    const ST: QpServiceType = QpServiceType::Ud;
    // Control, datagram (address vector).
    const SQ_OVERHEAD: usize = 64;
}
impl QpTransport for Gsi {
    const ST: QpServiceType = QpServiceType::Qp1;
    // As UD: control, datagram (address vector).
    const SQ_OVERHEAD: usize = 64;
}

/// Work-queue capabilities (`ibv_qp_cap`): asked for at creation, and the actual values
/// after rounding ([`Qp::caps`]), which are at least what was asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCaps {
    /// Send work requests outstanding at once (0: no send queue).
    pub max_send_wr: u32,
    /// Receive work requests outstanding at once (0 with no SRQ: no receive queue).
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive work request.
    pub max_recv_sge: u32,
    /// Inline data bytes per send work request.
    pub max_inline_data: u32,
}

/// What a QP is created with.
#[derive(Debug)]
pub struct QpInitAttr<'a, P: Platform> {
    /// The CQ for send completions.
    pub send_cq: &'a Cq<P>,
    /// The CQ for receive completions.
    pub recv_cq: &'a Cq<P>,
    /// Receive from this SRQ instead of an own receive queue.
    pub srq: Option<&'a Srq<P>>,
    /// Work-queue capabilities.
    pub cap: QpCaps,
}

impl QpCaps {
    /// `max_send_wr` send and `max_recv_wr` receive work requests, one scatter/gather
    /// entry each and no inline data: what a QP that posts one buffer per request needs.
    ///
    /// ```
    /// use uhca_driver::verbs::QpCaps;
    ///
    /// let caps = QpCaps::new(4, 8);
    /// assert_eq!((caps.max_send_wr, caps.max_recv_wr), (4, 8));
    /// assert_eq!((caps.max_send_sge, caps.max_recv_sge, caps.max_inline_data), (1, 1, 0));
    /// // More of either: the fields are public.
    /// let caps = QpCaps { max_inline_data: 64, ..QpCaps::new(4, 8) };
    /// # assert_eq!(caps.max_send_sge, 1);
    /// ```
    pub const fn new(max_send_wr: u32, max_recv_wr: u32) -> QpCaps {
        QpCaps {
            max_send_wr,
            max_recv_wr,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

impl<'a, P: Platform> QpInitAttr<'a, P> {
    /// Both queues complete to `cq`, with an own receive queue (no SRQ) and capabilities
    /// `cap`.
    ///
    /// ```no_run
    /// use uhca_driver::verbs::{QpCaps, QpInitAttr, Rc};
    /// # fn f<P: uhca_hal::Platform>(hca: &mut uhca_driver::Hca<P>) -> uhca_driver::Result<()> {
    /// let pd = hca.alloc_pd()?;
    /// let cq = hca.create_cq(16)?;
    /// let qp = hca.create_qp::<Rc>(&pd, &QpInitAttr::new(&cq, QpCaps::new(4, 4)))?;
    /// # Ok(()) }
    /// ```
    pub const fn new(cq: &'a Cq<P>, cap: QpCaps) -> QpInitAttr<'a, P> {
        QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
        }
    }
}

/// RESET → INIT attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitAttr {
    /// The HCA port (from 1).
    pub port: u8,
    /// Index of the P_Key in the port's P_Key table.
    pub pkey_index: u16,
    /// What remote peers may do (RC: read, write, atomic; UC: write only; ignored for UD).
    pub access: AccessFlags,
    /// The Q_Key (UD only).
    pub qkey: u32,
}

impl Default for InitAttr {
    fn default() -> Self {
        InitAttr {
            port: 1,
            pkey_index: 0,
            access: AccessFlags::empty(),
            qkey: 0,
        }
    }
}

impl InitAttr {
    /// Port 1, P_Key index 0, and `access` for what remote peers may do (the rest as
    /// [`InitAttr::default`]).
    ///
    /// ```
    /// use uhca_driver::verbs::InitAttr;
    /// use uhca_fwif::consts::AccessFlags;
    ///
    /// let init = InitAttr::new(AccessFlags::REMOTE_WRITE);
    /// assert_eq!((init.port, init.pkey_index), (1, 0));
    /// assert_eq!(init, InitAttr { access: AccessFlags::REMOTE_WRITE, ..InitAttr::default() });
    /// ```
    pub fn new(access: AccessFlags) -> InitAttr {
        InitAttr {
            access,
            ..InitAttr::default()
        }
    }
}

/// INIT → RTR attributes of a connected QP (RC, UC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtrAttr {
    /// The path MTU.
    pub path_mtu: IbMtu,
    /// The remote QP number.
    pub dest_qpn: u32,
    /// The first PSN expected from the remote QP (24 bits).
    pub rq_psn: u32,
    /// RDMA READ and atomic requests the QP answers at once (RC; rounded up to a power
    /// of two).
    pub max_dest_rd_atomic: u8,
    /// The RNR NAK timer code (RC, 5 bits; IB spec table: 12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// The path to the remote QP.
    pub ah: AhAttr,
}

impl Default for RtrAttr {
    fn default() -> Self {
        RtrAttr {
            path_mtu: IbMtu::Mtu1024,
            dest_qpn: 0,
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah: AhAttr::Ib {
                dlid: 0,
                sl: 0,
                src_path_bits: 0,
                static_rate: StaticRate::PortCurrent,
                grh: None,
            },
        }
    }
}

impl RtrAttr {
    /// The path `ah` to the remote QP `dest_qpn`, whose first PSN is `rq_psn`; the path
    /// MTU, RDMA READ/atomic depth and RNR timer as [`RtrAttr::default`].
    ///
    /// ```
    /// use uhca_driver::addr::AhAttr;
    /// use uhca_driver::verbs::RtrAttr;
    ///
    /// let rtr = RtrAttr::new(AhAttr::ib(7), 0x105, 0x1105);
    /// assert_eq!((rtr.dest_qpn, rtr.rq_psn, rtr.ah), (0x105, 0x1105, AhAttr::ib(7)));
    /// assert_eq!(rtr.path_mtu, RtrAttr::default().path_mtu);
    /// ```
    pub fn new(ah: AhAttr, dest_qpn: u32, rq_psn: u32) -> RtrAttr {
        RtrAttr {
            dest_qpn,
            rq_psn,
            ah,
            ..RtrAttr::default()
        }
    }
}

/// RTR → RTS attributes of an RC QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtsAttr {
    /// The first PSN to send (24 bits).
    pub sq_psn: u32,
    /// The local ACK timeout code (5 bits: 4.096 µs × 2^timeout; 14 ≈ 67 ms).
    pub timeout: u8,
    /// Retries after a timeout or NAK (0..=7).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK (0..=7; 7 = forever).
    pub rnr_retry: u8,
    /// RDMA READ and atomic requests the QP issues at once (rounded up to a power of two).
    pub max_rd_atomic: u8,
}

impl Default for RtsAttr {
    fn default() -> Self {
        RtsAttr {
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        }
    }
}

impl RtsAttr {
    /// `sq_psn` as the first PSN to send; the timeout and retries as [`RtsAttr::default`].
    ///
    /// ```
    /// use uhca_driver::verbs::RtsAttr;
    ///
    /// let rts = RtsAttr::new(0x1104);
    /// assert_eq!(rts, RtsAttr { sq_psn: 0x1104, ..RtsAttr::default() });
    /// ```
    pub fn new(sq_psn: u32) -> RtsAttr {
        RtsAttr {
            sq_psn,
            ..RtsAttr::default()
        }
    }
}

/// INIT → INIT attributes (INIT2INIT_QP): what may change while the QP is in INIT. Each
/// `None` stays as it is; the port stays the one RESET → INIT gave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InitModifyAttr {
    /// Index of the P_Key in the port's P_Key table.
    pub pkey_index: Option<u16>,
    /// What remote peers may do (RC: read, write, atomic; UC: write only; not for UD).
    pub access: Option<AccessFlags>,
    /// The Q_Key (UD only).
    pub qkey: Option<u32>,
}

/// RTS → RTS attributes (RTS2RTS_QP): what may change while the QP sends. Each `None`
/// stays as it is. The send PSN, the retry counts and the depths are fixed at RTR → RTS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtsModifyAttr {
    /// What remote peers may do (RC: read, write, atomic; UC: write only; not for UD).
    pub access: Option<AccessFlags>,
    /// The RNR NAK timer code the responder sends (RC only, 5 bits).
    pub min_rnr_timer: Option<u8>,
    /// The local ACK timeout code (RC only, 5 bits: 4.096 µs × 2^timeout).
    pub timeout: Option<u8>,
    /// The Q_Key (UD only).
    pub qkey: Option<u32>,
}

/// What QUERY_QP reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// The state the device has the QP in (it may differ from the type's: the device
    /// moves QPs to ERR or SQER on its own).
    pub state: QpState,
    /// The service type.
    pub service_type: QpServiceType,
    /// The PD.
    pub pdn: u32,
    /// The port.
    pub port: u8,
    /// The P_Key index.
    pub pkey_index: u16,
    /// The path MTU (connected QPs, after RTR).
    pub path_mtu: IbMtu,
    /// The remote QP (connected QPs, after RTR).
    pub dest_qpn: u32,
    /// Next PSN to send.
    pub sq_psn: u32,
    /// Next PSN expected.
    pub rq_psn: u32,
    /// The Q_Key (UD).
    pub qkey: u32,
    /// The raw context, for everything else.
    pub qpc: Qpc,
}

/// Sizes of the work queues, computed from the capabilities asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QueueSizes {
    /// RQ: (log2 WQE count, log2 stride in bytes).
    pub(crate) rq: Option<(u8, u8)>,
    /// SQ: (log2 WQEBB count, WQE size in WQEBBs).
    pub(crate) sq: Option<(u8, u8)>,
    /// The capabilities the QP really has.
    pub(crate) actual: QpCaps,
}

/// Largest send WQE the rings build: 63 16-byte units (`qpn_ds[5:0]`).
const MAX_SEND_WQE_BYTES: usize = 63 * SEND_WQE_DS;
/// Inline segment header bytes.
const INLINE_HDR_BYTES: usize = 4;
/// `qpc.pm_state` MIGRATED (Linux `MLX5_QP_PM_MIGRATED`): no alternate path is loaded. Set
/// in CREATE_QP and in every modify that carries a QP context, as Linux's
/// `__mlx5_ib_modify_qp` does when the caller does not ask for path migration; left 0 the
/// field says ARMED, a migration armed towards an alternate path this driver never loads.
const PM_STATE_MIGRATED: u8 = 3;
/// `qpc.user_index` for QPs without one (Linux `MLX5_IB_DEFAULT_UIDX`).
const DEFAULT_USER_INDEX: u32 = 0x00ff_ffff;
/// `qpc.rq_type`: regular RQ, SRQ, zero-length RQ.
const RQ_TYPE_REGULAR: u8 = 0;
const RQ_TYPE_SRQ: u8 = 1;
const RQ_TYPE_ZERO: u8 = 3;
/// `qpc.atomic_mode` IB-compatible atomics (Linux `MLX5_ATOMIC_MODE_IB_COMP`).
const ATOMIC_MODE_IB_COMP: u8 = 1;
/// UD QPs: path MTU 4096 and 4 KiB messages, as Linux's mlx5 sets them.
const UD_LOG_MSG_MAX: u8 = 12;
/// QP1's largest message, log2 bytes: a MAD (256 bytes).
const GSI_LOG_MSG_MAX: u8 = 8;
/// `log_ack_req_freq` of an RC QP: the requester asks for an ACK at least every 2^8
/// packets (and on the last packet of each message). 0 would ask on every packet, so the
/// responder would answer every packet of a long message with its own ACK. Linux's
/// `mlx5_ib` writes 8 (`MLX5_IB_ACK_REQ_FREQ`) into every transition's context; so does uhca
/// in the RC transitions (`mock/MODEL.md`, "uhca's commands beside Linux's").
const RC_LOG_ACK_REQ_FREQ: u8 = 8;
/// Mask of a 24-bit QPN or PSN.
const MASK24: u32 = 0x00ff_ffff;

/// The bits of a modify command's `opt_param_mask` (Linux `enum mlx5_qp_optpar`): which
/// fields of the QP context the command changes besides those its transition always sets.
mod optpar {
    /// `rre`: responder RDMA read.
    pub(super) const RRE: u32 = 1 << 1;
    /// `rae`: responder atomics.
    pub(super) const RAE: u32 = 1 << 2;
    /// `rwe`: responder RDMA write.
    pub(super) const RWE: u32 = 1 << 3;
    /// The primary path's `pkey_index`.
    pub(super) const PKEY_INDEX: u32 = 1 << 4;
    /// `q_key`.
    pub(super) const Q_KEY: u32 = 1 << 5;
    /// `min_rnr_nak`.
    pub(super) const RNR_TIMEOUT: u32 = 1 << 6;
    /// The primary path's `ack_timeout`.
    pub(super) const ACK_TIMEOUT: u32 = 1 << 14;
    /// The three responder rights.
    pub(super) const ACCESS: u32 = RRE | RAE | RWE;
}

/// Computes the queue sizes for transport overhead `overhead` (see [`QpTransport`]).
pub(crate) fn queue_sizes(
    overhead: usize,
    cap: &QpCaps,
    hca: &CmdHcaCap,
    srq: bool,
) -> Result<QueueSizes> {
    let log_max = hca.log_max_qp_sz().min(15);
    let mut actual = QpCaps::default();
    let sq = if cap.max_send_wr == 0 {
        None
    } else {
        Some(sq_size(overhead, cap, hca, log_max, &mut actual)?)
    };
    let rq = rq_size(cap, hca, srq, log_max, &mut actual)?;
    Ok(QueueSizes { rq, sq, actual })
}

/// The SQ's `(log2 of its WQEBBs, WQEBBs per WQE)` for `cap` (which asks for sends) on a
/// transport of `overhead` bytes per WQE, with what it holds written into `actual`.
fn sq_size(
    overhead: usize,
    cap: &QpCaps,
    hca: &CmdHcaCap,
    log_max: u8,
    actual: &mut QpCaps,
) -> Result<(u8, u8)> {
    let max_wr = 1u64 << log_max;
    let desc_max = (hca.max_wqe_sz_sq() as usize).min(MAX_SEND_WQE_BYTES);
    if overhead + SEND_WQE_DS > desc_max {
        return Err(Error::Unsupported("send WQEs of this transport"));
    }
    let max_sge = (desc_max - overhead) / SEND_WQE_DS;
    if cap.max_send_sge as usize > max_sge {
        return Err(
            InvalidArgument::max(Arg::MaxSendSge, cap.max_send_sge.into(), max_sge as u64).into(),
        );
    }
    let sge_bytes = overhead + cap.max_send_sge as usize * SEND_WQE_DS;
    let inline_bytes = if cap.max_inline_data > 0 {
        overhead + (INLINE_HDR_BYTES + cap.max_inline_data as usize).next_multiple_of(16)
    } else {
        0
    };
    let tot = sge_bytes.max(inline_bytes).max(overhead + SEND_WQE_DS);
    if tot > desc_max {
        let max_inline = ((desc_max - overhead) / 16 * 16).saturating_sub(INLINE_HDR_BYTES);
        return Err(InvalidArgument::max(
            Arg::MaxInlineData,
            cap.max_inline_data.into(),
            max_inline as u64,
        )
        .into());
    }
    let wqe = tot.next_multiple_of(SEND_WQE_BB);
    // Send WQEs of `wqe` bytes: the largest queue holds this many.
    let max_wr_of_size = max_wr * SEND_WQE_BB as u64 / wqe as u64;
    if cap.max_send_wr as u64 > max_wr_of_size {
        return Err(
            InvalidArgument::max(Arg::MaxSendWr, cap.max_send_wr.into(), max_wr_of_size).into(),
        );
    }
    let bytes = (cap.max_send_wr as u64 * wqe as u64).next_power_of_two();
    let wqebbs = bytes / SEND_WQE_BB as u64;
    let log = log2_ceil(wqebbs);
    if log > log_max {
        // Cannot happen after the check above; the device's bound all the same.
        return Err(
            InvalidArgument::max(Arg::MaxSendWr, cap.max_send_wr.into(), max_wr_of_size).into(),
        );
    }
    let usable = wqe.min(desc_max);
    actual.max_send_wr = (bytes / wqe as u64) as u32;
    actual.max_send_sge = ((usable - overhead) / SEND_WQE_DS) as u32;
    actual.max_inline_data = (usable - overhead - INLINE_HDR_BYTES) as u32;
    Ok((log, (wqe / SEND_WQE_BB) as u8))
}

/// The RQ's `(log2 of its WQEs, log2 of its stride)` for `cap`, `None` without an RQ (no
/// receives asked for, or an SRQ instead), with what it holds written into `actual`.
fn rq_size(
    cap: &QpCaps,
    hca: &CmdHcaCap,
    srq: bool,
    log_max: u8,
    actual: &mut QpCaps,
) -> Result<Option<(u8, u8)>> {
    let max_wr = 1u64 << log_max;
    if srq {
        if cap.max_recv_wr != 0 {
            return Err(InvalidArgument::max(Arg::MaxRecvWr, cap.max_recv_wr.into(), 0).into());
        }
        if cap.max_recv_sge != 0 {
            return Err(InvalidArgument::max(Arg::MaxRecvSge, cap.max_recv_sge.into(), 0).into());
        }
        return Ok(None);
    }
    if cap.max_recv_wr == 0 {
        return Ok(None);
    }
    if cap.max_recv_wr as u64 > max_wr {
        return Err(InvalidArgument::max(Arg::MaxRecvWr, cap.max_recv_wr.into(), max_wr).into());
    }
    let stride = (SEND_WQE_DS * cap.max_recv_sge.max(1) as usize).next_power_of_two();
    let max_rq_wqe = hca.max_wqe_sz_rq() as usize;
    if stride > max_rq_wqe {
        // Receive WQEs are a power of two of 16-byte entries.
        let max_sge = match max_rq_wqe.checked_ilog2() {
            Some(l) => (1usize << l) / SEND_WQE_DS,
            None => 0,
        };
        return Err(
            InvalidArgument::max(Arg::MaxRecvSge, cap.max_recv_sge.into(), max_sge as u64).into(),
        );
    }
    // At least one 64-byte basic block of receive queue.
    let cnt = (cap.max_recv_wr as u64)
        .next_power_of_two()
        .max((SEND_WQE_BB / stride).max(1) as u64);
    let log = log2_ceil(cnt);
    if log > log_max {
        return Err(InvalidArgument::max(Arg::MaxRecvWr, cap.max_recv_wr.into(), max_wr).into());
    }
    actual.max_recv_wr = cnt as u32;
    actual.max_recv_sge = (stride / SEND_WQE_DS) as u32;
    Ok(Some((log, log2_ceil(stride as u64))))
}

struct QpInner<P: Platform> {
    rings: QpRings<DmaBuf<P>>,
    /// The platform, for the send doorbell.
    bar: P,
    /// What the QP's CQs read: its work-request tables and error state (`verbs::dp`).
    shared: QpHandle<P>,
    /// Every send is signalled (`sq_sig_all`).
    sig_all: bool,
    /// The device offers the 8-byte atomics the QP may post (`DeviceCaps::atomic`).
    atomics: bool,
    hca_id: u64,
    layout: QpLayout,
    doorbell: SqDoorbell,
    qpn: u32,
    pdn: u32,
    port: u8,
    pkey_index: u16,
    caps: QpCaps,
    send_cqn: u32,
    recv_cqn: u32,
    srqn: Option<u32>,
    /// Its place in the HCA's release queue.
    ticket: Ticket<P>,
}

/// What posting needs of a QP, borrowed apart.
pub(crate) struct QpDatapath<'a, P: Platform> {
    pub(crate) rings: &'a mut QpRings<DmaBuf<P>>,
    pub(crate) bar: &'a P,
    pub(crate) shared: &'a QpHandle<P>,
    pub(crate) caps: &'a QpCaps,
    pub(crate) sig_all: &'a mut bool,
    pub(crate) atomics: bool,
}

/// A queue pair of transport `T`, with its work-queue rings.
///
/// A [`Qp<P, T>`](Qp) is a QP of transport `T` ([`Rc`], [`Uc`], [`Ud`]) on platform `P`.
/// The transport is in the type, so each transport's transitions take its own attributes
/// (a UD QP has no path: its [`Qp::to_rtr`] takes none). The state is a run-time value,
/// [`Qp::state`], so a QP can live in a struct field and go through its states there:
/// every transition takes `&mut self`, is checked against the IB state table (IBA 11.2,
/// as `ibv_modify_qp` documents it) and refuses an illegal one with
/// [`Error::IllegalTransition`] naming the state it is in and the one asked for. A refused
/// transition sends nothing and changes nothing; a command the device fails leaves the
/// state what it was.
///
/// The transitions the driver makes:
///
/// | from | to | method |
/// |------|----|--------|
/// | RESET | INIT | [`Qp::to_init`] |
/// | INIT | INIT | [`Qp::init_to_init`] (or [`Qp::to_init`] with every attribute) |
/// | INIT | RTR | [`Qp::to_rtr`] |
/// | RTR | RTS | [`Qp::to_rts`] |
/// | RTS | RTS | [`Qp::rts_to_rts`] |
/// | SQER | RTS | [`Qp::recover_sq`] |
/// | any | ERR | [`Qp::to_err`] |
/// | any | RESET | [`Qp::to_reset`] |
///
/// SQD is not made by this driver. [`Qp::connect`] makes RESET → INIT → RTR → RTS in one
/// call:
///
/// ```no_run
/// # use uhca_driver::verbs::{Cq, InitAttr, Qp, QpCaps, QpInitAttr, Rc, RtrAttr, RtsAttr};
/// # use uhca_fwif::consts::QpState;
/// # fn f<P: uhca_hal::Platform>(hca: &mut uhca_driver::Hca<P>, pd: &uhca_driver::verbs::Pd<P>,
/// #     cq: &Cq<P>, peer_qpn: u32) -> uhca_driver::Result<()> {
/// struct Conn<P: uhca_hal::Platform> {
///     qp: Qp<P, Rc>,
/// }
/// let attr = QpInitAttr { send_cq: cq, recv_cq: cq, srq: None, cap: QpCaps::default() };
/// let mut conn = Conn { qp: hca.create_qp::<Rc>(pd, &attr)? };
/// let rtr = RtrAttr { dest_qpn: peer_qpn, ..RtrAttr::default() };
/// conn.qp.connect(hca, &InitAttr::default(), &rtr, &RtsAttr::default())?;
/// assert_eq!(conn.qp.state(), QpState::Rts);
/// // RTS -> INIT is not in the IB state table: refused, nothing sent, still in RTS.
/// assert!(conn.qp.to_init(hca, InitAttr::default()).is_err());
/// assert_eq!(conn.qp.state(), QpState::Rts);
/// # Ok(()) }
/// ```
///
/// What only the device knows is reconciled where it shows: an error completion moves the
/// driver's view to ERR (the CQ's poller marks the QP's shared state, which posting reads
/// once per call), so does a QP-fatal asynchronous event (WQ catastrophic, invalid request
/// or access error) once the HCA serves its event queue (while a command waits, or in
/// [`Hca::process_events`]), and [`Qp::query`] (QUERY_QP) takes the device's state as the driver's.
/// A transition the device refuses because the QP is not where the driver believed (it
/// moved to SQER, say) is [`Error::BadQpState`] naming the state the device reports.
///
/// A `Qp` is [`Send`]: each thread can own its QPs and post on them with no lock and no
/// [`Hca`]; the CQs they complete to can be polled on other threads.
pub struct Qp<P: Platform, T: QpTransport> {
    inner: Option<QpInner<P>>,
    _marker: PhantomData<fn() -> T>,
}

impl<P: Platform, T: QpTransport> core::fmt::Debug for Qp<P, T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &self.qpn())
            .field("type", &T::ST)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl<P: Platform, T: QpTransport> Drop for Qp<P, T> {
    fn drop(&mut self) {
        // Not destroyed: the device may still use the queues and the doorbell record, so
        // the rings are freed only after the HCA's DESTROY_QP (`crate::release`).
        if let Some(i) = self.inner.take() {
            i.ticket.release(Dropped {
                kind: ObjectKind::Qp,
                number: i.qpn,
                held: Held::qp(i.rings),
                qp: Some(i.shared),
                busy_at: None,
            });
        }
    }
}

impl<P: Platform, T: QpTransport> Qp<P, T> {
    fn inner(&self) -> &QpInner<P> {
        match &self.inner {
            Some(i) => i,
            None => unreachable!("the QP's parts are only taken by destroy and drop"),
        }
    }

    fn inner_mut(&mut self) -> &mut QpInner<P> {
        match &mut self.inner {
            Some(i) => i,
            None => unreachable!("the QP's parts are only taken by destroy and drop"),
        }
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.inner().qpn
    }

    /// The state as the driver believes it: where the last transition moved the QP, ERR
    /// once an error completion of the QP was polled or a QP-fatal event served, or what
    /// the last [`Qp::query`] found the device has it in.
    pub fn state(&self) -> QpState {
        self.shared().error.get()
    }

    /// The work-queue capabilities the QP really has.
    pub fn caps(&self) -> QpCaps {
        self.inner().caps
    }

    /// The PD.
    pub fn pdn(&self) -> u32 {
        self.inner().pdn
    }

    /// The send and receive CQs.
    pub fn cqns(&self) -> (u32, u32) {
        (self.inner().send_cqn, self.inner().recv_cqn)
    }

    /// The SRQ it receives from, if any.
    pub fn srqn(&self) -> Option<u32> {
        self.inner().srqn
    }

    /// The port (set at INIT; 0 before).
    pub fn port(&self) -> u8 {
        self.inner().port
    }

    /// What posting needs, borrowed apart.
    pub(crate) fn datapath(&mut self) -> QpDatapath<'_, P> {
        let i = self.inner_mut();
        QpDatapath {
            rings: &mut i.rings,
            bar: &i.bar,
            shared: &i.shared,
            caps: &i.caps,
            sig_all: &mut i.sig_all,
            atomics: i.atomics,
        }
    }

    /// The state the QP shares with its CQs.
    pub(crate) fn shared(&self) -> &QpShared<P> {
        &self.inner().shared
    }

    /// Host memory the driver keeps for this QP's work-request tables, in bytes (besides
    /// the DMA memory of its queues, [`Qp::rings`]).
    pub fn host_bytes(&self) -> usize {
        self.inner().shared.host_bytes()
    }

    /// The work-queue rings: post send and receive WQEs, ring doorbells.
    pub fn rings(&self) -> &QpRings<DmaBuf<P>> {
        &self.inner().rings
    }

    raw_pub! {
        /// The work-queue rings, for posting.
        fn rings_mut(&mut self) -> &mut QpRings<DmaBuf<P>> {
            &mut self.inner_mut().rings
        }
    }

    /// QUERY_QP. The state the device reports becomes the driver's ([`Qp::state`]): the
    /// device moves QPs to ERR or SQER on its own.
    ///
    /// # Errors
    ///
    /// [`Error::WrongHca`]; the command's error.
    pub fn query(&self, hca: &mut Hca<P>) -> Result<QpAttr> {
        hca.check_owner(self.inner().hca_id)?;
        let attr = query_qp(hca, self.qpn())?;
        self.shared().error.set(attr.state);
        Ok(attr)
    }

    /// Checks `to` against the state table: [`Error::IllegalTransition`] if the IB state
    /// table has no such transition (nothing is sent).
    fn check_transition(&self, to: QpState) -> Result<()> {
        let from = self.state();
        if transition_is_legal(from, to) {
            Ok(())
        } else {
            Err(Error::IllegalTransition { from, to })
        }
    }

    /// Sends a modify command towards `to`; on success the driver's state is `to`. A
    /// BAD_QP_STATE refusal becomes [`Error::BadQpState`] with the state the device
    /// reports (which becomes the driver's); any other failure leaves the state as it was.
    fn modify<C: Command>(&self, hca: &mut Hca<P>, to: QpState, cmd: &C) -> Result<()> {
        hca.check_owner(self.inner().hca_id)?;
        match hca.cmd(cmd) {
            Ok(_) => {
                self.shared().error.set(to);
                Ok(())
            }
            Err(Error::Command(
                cause @ CmdError::Status {
                    status: CmdStatus::BadQpStateErr,
                    ..
                },
            )) => {
                let device_state = query_qp(hca, self.qpn()).ok().map(|a| a.state);
                if let Some(s) = device_state {
                    self.shared().error.set(s);
                }
                Err(Error::BadQpState {
                    qpn: self.qpn(),
                    command: C::OPCODE,
                    device_state,
                    cause,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Moves the QP to ERR (2ERR_QP) from any state: outstanding work requests complete
    /// with flush errors.
    ///
    /// # Errors
    ///
    /// The command's error (the state stays what it was).
    pub fn to_err(&mut self, hca: &mut Hca<P>) -> Result<()> {
        let mut c = Qp2errIn::new_cmd();
        c.set_qpn(self.qpn());
        self.check_transition(QpState::Err)?;
        self.modify(hca, QpState::Err, &c)
    }

    /// Moves the QP to RESET (2RST_QP) from any state and resets its rings (counters and
    /// doorbell record zero, as the device's are).
    ///
    /// # Errors
    ///
    /// The command's error (the state stays what it was).
    pub fn to_reset(&mut self, hca: &mut Hca<P>) -> Result<()> {
        let mut c = Qp2rstIn::new_cmd();
        c.set_qpn(self.qpn());
        self.check_transition(QpState::Rst)?;
        self.modify(hca, QpState::Rst, &c)?;
        self.shared().reset();
        let inner = self.inner_mut();
        let layout = inner.layout;
        let doorbell = inner.doorbell;
        // The device no longer uses the queues: start them over.
        if let Some(mut i) = self.inner.take() {
            let mem = i.rings.into_mem();
            match QpRings::new(mem, layout, doorbell) {
                Ok(r) => {
                    i.rings = r;
                    self.inner = Some(i);
                }
                Err(_) => unreachable!("the layout was accepted at creation"),
            }
        }
        Ok(())
    }

    /// SQER → RTS (SQERR2RTS_QP): resumes a send queue the device stopped after a send
    /// error on an unreliable QP. Allowed while the driver believes the QP is in RTS or
    /// SQER (only the device knows it moved to SQER, unless [`Qp::query`] asked): if the
    /// device has it elsewhere, this is [`Error::BadQpState`].
    ///
    /// # Errors
    ///
    /// [`Error::IllegalTransition`] from any other state; the command's error.
    pub fn recover_sq(&mut self, hca: &mut Hca<P>) -> Result<()> {
        let from = self.state();
        if from != QpState::Rts && from != QpState::Sqer {
            return Err(Error::IllegalTransition {
                from,
                to: QpState::Rts,
            });
        }
        let mut c = Sqerr2rtsQpIn::new_cmd();
        c.set_qpn(self.qpn());
        c.qpc_mut().set_pm_state(PM_STATE_MIGRATED);
        self.modify(hca, QpState::Rts, &c)
    }

    /// RESET → INIT (RST2INIT_QP): port, P_Key index, and the remote access rights (RC,
    /// UC) or the Q_Key (UD). From INIT it is INIT → INIT ([`Qp::init_to_init`]) with
    /// every attribute given: the P_Key index and the rights or the Q_Key change, the port
    /// stays.
    ///
    /// # Errors
    ///
    /// [`Error::IllegalTransition`] from a state other than RESET or INIT;
    /// [`Error::InvalidArgument`] for a port the HCA does not have, a P_Key index outside
    /// the table, or access a UC QP cannot give; [`Error::Unsupported`] for remote atomics
    /// on a device without them, or from INIT for another port than the QP's (no command
    /// is sent for any of these); the command's error.
    pub fn to_init(&mut self, hca: &mut Hca<P>, attr: InitAttr) -> Result<()> {
        self.check_transition(QpState::Init)?;
        if self.state() == QpState::Init {
            check_port(hca, attr.port)?;
            if attr.port != self.inner().port {
                return Err(Error::Unsupported(
                    "moving a QP to another port in INIT to INIT",
                ));
            }
            let ud = is_datagram(T::ST);
            return self.init_to_init(
                hca,
                InitModifyAttr {
                    pkey_index: Some(attr.pkey_index),
                    access: (!ud).then_some(attr.access),
                    qkey: ud.then_some(attr.qkey),
                },
            );
        }
        let mut c = Rst2initQpIn::new_cmd();
        c.set_qpn(self.qpn());
        fill_init(hca, T::ST, &attr, c.qpc_mut())?;
        self.modify(hca, QpState::Init, &c)?;
        let i = self.inner_mut();
        i.port = attr.port;
        i.pkey_index = attr.pkey_index;
        Ok(())
    }

    /// INIT → INIT (INIT2INIT_QP): changes the P_Key index, the remote access rights (RC,
    /// UC) or the Q_Key (UD) of a QP still in INIT; what is `None` stays.
    ///
    /// # Errors
    ///
    /// [`Error::IllegalTransition`] from a state other than INIT; [`Error::InvalidArgument`]
    /// for a P_Key index outside the table, access rights on a UD QP or a UC QP's rights
    /// other than remote write, a Q_Key on a connected QP; [`Error::Unsupported`] for
    /// remote atomics on a device without them (no command is sent for any of these);
    /// [`Error::BadQpState`]; the command's error.
    pub fn init_to_init(&mut self, hca: &mut Hca<P>, attr: InitModifyAttr) -> Result<()> {
        self.check_same_state(QpState::Init)?;
        let mut c = Init2initQpIn::new_cmd();
        c.set_qpn(self.qpn());
        let q = c.qpc_mut();
        let mut mask = modify_rights(hca, T::ST, attr.access, attr.qkey, q)?;
        if let Some(i) = attr.pkey_index {
            let pkeys = hca.caps().pkey_table_len.max(1);
            if u32::from(i) >= pkeys {
                return Err(
                    InvalidArgument::max(Arg::PkeyIndex, i.into(), u64::from(pkeys) - 1).into(),
                );
            }
            q.primary_address_path_mut().set_pkey_index(i);
            mask |= optpar::PKEY_INDEX;
        }
        c.set_opt_param_mask(mask);
        self.modify(hca, QpState::Init, &c)?;
        if let Some(i) = attr.pkey_index {
            self.inner_mut().pkey_index = i;
        }
        Ok(())
    }

    /// RTS → RTS (RTS2RTS_QP): changes, while the QP sends, the remote access rights (RC,
    /// UC), the RNR NAK timer and the ACK timeout (RC) or the Q_Key (UD); what is `None`
    /// stays. Work requests already posted go on.
    ///
    /// # Errors
    ///
    /// [`Error::IllegalTransition`] from a state other than RTS; [`Error::InvalidArgument`]
    /// for an attribute the transport does not have in RTS → RTS or an out-of-range code;
    /// [`Error::Unsupported`] for remote atomics on a device without them (no command is
    /// sent for any of these); [`Error::BadQpState`] (the device moved the QP on its own);
    /// the command's error.
    pub fn rts_to_rts(&mut self, hca: &mut Hca<P>, attr: RtsModifyAttr) -> Result<()> {
        self.check_same_state(QpState::Rts)?;
        let rc = T::ST == QpServiceType::Rc;
        let mut c = Rts2rtsQpIn::new_cmd();
        c.set_qpn(self.qpn());
        let q = c.qpc_mut();
        let mut mask = modify_rights(hca, T::ST, attr.access, attr.qkey, q)?;
        let rnr = rc_timer_code(rc, Arg::MinRnrTimer, attr.min_rnr_timer)?;
        if let Some(t) = rnr {
            q.set_min_rnr_nak(t);
            mask |= optpar::RNR_TIMEOUT;
        }
        if let Some(t) = rc_timer_code(rc, Arg::Timeout, attr.timeout)? {
            q.primary_address_path_mut().set_ack_timeout(t);
            mask |= optpar::ACK_TIMEOUT;
        }
        c.set_opt_param_mask(mask);
        self.modify(hca, QpState::Rts, &c)
    }

    /// `to` → `to` (INIT → INIT, RTS → RTS): the driver has the QP in `to`, else
    /// [`Error::IllegalTransition`] (nothing is sent).
    fn check_same_state(&self, to: QpState) -> Result<()> {
        match self.state() {
            s if s == to => Ok(()),
            from => Err(Error::IllegalTransition { from, to }),
        }
    }

    /// Destroys the QP (DESTROY_QP), then frees the rings.
    ///
    /// # Errors
    ///
    /// The QP back with the error.
    pub fn destroy(mut self, hca: &mut Hca<P>) -> core::result::Result<(), Failed<Self>> {
        if let Err(error) = hca.check_owner(self.inner().hca_id) {
            return Err(Failed {
                object: self,
                error,
            });
        }
        match hca.destroy_object(ObjectKind::Qp, self.qpn()) {
            Ok(()) => {
                // Its CQEs still in a CQ are dropped from now on.
                self.shared().mark_destroyed();
                drop(self.inner.take());
                Ok(())
            }
            Err(error) => Err(Failed {
                object: self,
                error,
            }),
        }
    }
}
fn query_qp<P: Platform>(hca: &mut Hca<P>, qpn: u32) -> Result<QpAttr> {
    let mut q = QueryQpIn::new_cmd();
    q.set_qpn(qpn);
    let out = hca.cmd(&q)?;
    let c = *out.qpc();
    let path = c.primary_address_path();
    Ok(QpAttr {
        state: QpState::from_raw(c.state()),
        service_type: QpServiceType::from_raw(c.st()),
        pdn: c.pd(),
        port: path.vhca_port_num(),
        pkey_index: path.pkey_index(),
        path_mtu: IbMtu::from_raw(c.mtu()),
        dest_qpn: c.remote_qpn(),
        sq_psn: c.next_send_psn(),
        rq_psn: c.next_rcv_psn(),
        qkey: c.q_key(),
        qpc: c,
    })
}

fn fill_init<P: Platform>(
    hca: &Hca<P>,
    st: QpServiceType,
    attr: &InitAttr,
    q: &mut Qpc,
) -> Result<()> {
    check_port(hca, attr.port)?;
    let pkeys = hca.caps().pkey_table_len.max(1);
    if attr.pkey_index as u32 >= pkeys {
        return Err(InvalidArgument::max(
            Arg::PkeyIndex,
            attr.pkey_index.into(),
            u64::from(pkeys) - 1,
        )
        .into());
    }
    q.set_pm_state(PM_STATE_MIGRATED);
    q.primary_address_path_mut()
        .set_vhca_port_num(attr.port)
        .set_pkey_index(attr.pkey_index);
    match st {
        QpServiceType::Ud => {
            q.set_q_key(attr.qkey);
        }
        QpServiceType::Qp1 => {
            check_gsi_q_key(attr.qkey)?;
            q.set_q_key(GSI_Q_KEY);
        }
        _ => fill_access(hca, st, attr.access, q)?,
    }
    Ok(())
}

/// The responder's rights of a connected QP (`rre`, `rwe`, `rae`): UC takes remote write
/// only, atomics need the device's `atomic` capability.
fn fill_access<P: Platform>(
    hca: &Hca<P>,
    st: QpServiceType,
    a: AccessFlags,
    q: &mut Qpc,
) -> Result<()> {
    if st == QpServiceType::Uc
        && a.intersects(AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC)
    {
        return Err(InvalidArgument::rule(
            Arg::AccessFlags,
            a.bits().into(),
            "UC QPs allow remote write only (no remote read or atomic)",
        )
        .into());
    }
    if a.contains(AccessFlags::REMOTE_ATOMIC) {
        if !hca.caps().atomic {
            return Err(Error::Unsupported("remote atomics"));
        }
        q.set_rae(true).set_atomic_mode(ATOMIC_MODE_IB_COMP);
    }
    q.set_rre(a.contains(AccessFlags::REMOTE_READ))
        .set_rwe(a.contains(AccessFlags::REMOTE_WRITE));
    if st == QpServiceType::Rc {
        q.set_log_ack_req_freq(RC_LOG_ACK_REQ_FREQ);
    }
    Ok(())
}

/// The refusal of an attribute transport `st` does not take in this transition.
fn not_for(arg: Arg, given: u64, rule: &'static str) -> Error {
    InvalidArgument::rule(arg, given, rule).into()
}

/// What INIT2INIT and RTS2RTS both may change, into `q` (with the migration state every
/// modify carries): the access rights of a connected QP, the Q_Key of a UD QP. Returns
/// their mask bits (none for `None`).
fn modify_rights<P: Platform>(
    hca: &Hca<P>,
    st: QpServiceType,
    access: Option<AccessFlags>,
    qkey: Option<u32>,
    q: &mut Qpc,
) -> Result<u32> {
    q.set_pm_state(PM_STATE_MIGRATED);
    let mask = modify_qkey(st, qkey, q)?;
    let Some(a) = access else { return Ok(mask) };
    if is_datagram(st) {
        return Err(not_for(
            Arg::AccessFlags,
            a.bits().into(),
            "a UD QP has no remote access rights",
        ));
    }
    fill_access(hca, st, a, q)?;
    Ok(mask | optpar::ACCESS)
}

/// A 5-bit timer code of RTS2RTS (the RNR NAK timer, the ACK timeout): RC QPs only.
fn rc_timer_code(rc: bool, arg: Arg, code: Option<u8>) -> Result<Option<u8>> {
    match code {
        Some(t) if !rc => Err(not_for(arg, t.into(), "only an RC QP has this timer")),
        Some(t) if t > 31 => Err(InvalidArgument::max(arg, t.into(), 31).into()),
        c => Ok(c),
    }
}

/// The Q_Key of INIT2INIT or RTS2RTS into `q`, with its mask bit: UD only.
fn modify_qkey(st: QpServiceType, qkey: Option<u32>, q: &mut Qpc) -> Result<u32> {
    let Some(k) = qkey else { return Ok(0) };
    if !is_datagram(st) {
        return Err(not_for(Arg::Qkey, k.into(), "only a UD QP has a Q_Key"));
    }
    if st == QpServiceType::Qp1 {
        check_gsi_q_key(k)?;
    }
    q.set_q_key(k);
    Ok(optpar::Q_KEY)
}

/// QP1 takes its well-known Q_Key only (0, "not given", stands for it).
fn check_gsi_q_key(k: u32) -> Result<()> {
    if k != 0 && k != GSI_Q_KEY {
        return Err(not_for(
            Arg::Qkey,
            k.into(),
            "QP1's Q_Key is the well-known 0x80010000",
        ));
    }
    Ok(())
}

fn check_port<P: Platform>(hca: &Hca<P>, port: u8) -> Result<()> {
    port_in_range(port, hca.caps().num_ports)
}

/// The refusal of an address handle of the other link layer than the port's.
pub(crate) fn ah_link_layer(ah: &AhAttr) -> InvalidArgument {
    let roce = matches!(ah, AhAttr::RoceV2 { .. });
    InvalidArgument::rule(
        Arg::AhAttr,
        roce.into(),
        "the address handle's kind (given: 0 InfiniBand, 1 RoCEv2) does not match the port's link layer",
    )
}

/// `port` is 1 to `num_ports` (at least 1).
pub(crate) fn port_in_range(port: u8, num_ports: u8) -> Result<()> {
    if port == 0 {
        return Err(InvalidArgument::min(Arg::Port, 0, 1).into());
    }
    if port > num_ports.max(1) {
        return Err(InvalidArgument::max(Arg::Port, port.into(), num_ports.max(1).into()).into());
    }
    Ok(())
}

/// INIT2RTR context of a connected QP.
fn fill_rtr<P: Platform>(
    hca: &Hca<P>,
    rc: bool,
    port: u8,
    pkey_index: u16,
    attr: &RtrAttr,
    q: &mut Qpc,
) -> Result<()> {
    if attr.path_mtu.bytes().is_none() {
        return Err(InvalidArgument::rule(
            Arg::PathMtu,
            attr.path_mtu.raw().into(),
            "not an IB MTU code (1 to 5: 256 to 4096 bytes)",
        )
        .into());
    }
    if attr.dest_qpn > MASK24 {
        return Err(InvalidArgument::max(Arg::DestQpn, attr.dest_qpn.into(), MASK24.into()).into());
    }
    if attr.rq_psn > MASK24 {
        return Err(InvalidArgument::max(Arg::RqPsn, attr.rq_psn.into(), MASK24.into()).into());
    }
    if attr.min_rnr_timer > 31 {
        return Err(InvalidArgument::max(Arg::MinRnrTimer, attr.min_rnr_timer.into(), 31).into());
    }
    let max_res = 1u32 << hca.hca_cap().log_max_ra_res_qp();
    if rc && attr.max_dest_rd_atomic as u32 > max_res {
        return Err(InvalidArgument::max(
            Arg::MaxDestRdAtomic,
            attr.max_dest_rd_atomic.into(),
            max_res.into(),
        )
        .into());
    }
    match (attr.ah, hca.caps().link_layer) {
        (AhAttr::Ib { .. }, LinkLayer::InfiniBand)
        | (AhAttr::RoceV2 { .. }, LinkLayer::Ethernet) => {}
        (ah, _) => return Err(ah_link_layer(&ah).into()),
    }
    q.set_pm_state(PM_STATE_MIGRATED)
        .set_mtu(attr.path_mtu.raw())
        .set_log_msg_max(hca.hca_cap().log_max_msg())
        .set_remote_qpn(attr.dest_qpn)
        .set_next_rcv_psn(attr.rq_psn);
    if rc {
        q.set_log_ack_req_freq(RC_LOG_ACK_REQ_FREQ)
            .set_min_rnr_nak(attr.min_rnr_timer);
        if attr.max_dest_rd_atomic > 0 {
            q.set_log_rra_max(log2_ceil(attr.max_dest_rd_atomic as u64));
        }
    }
    let path = q.primary_address_path_mut();
    attr.ah
        .write_ads(path, port, hca.hca_cap().stat_rate_support());
    path.set_pkey_index(pkey_index);
    Ok(())
}

impl<P: Platform> Qp<P, Rc> {
    /// INIT → RTR (INIT2RTR_QP): path MTU, remote QPN, receive PSN, responder depth, RNR
    /// timer and the path.
    ///
    /// # Errors
    ///
    /// [`Error::IllegalTransition`] from a state other than INIT; [`Error::InvalidArgument`]
    /// for out-of-range numbers or an address of the wrong link layer (no command is sent
    /// for either); [`Error::BadQpState`]; the command's error.
    pub fn to_rtr(&mut self, hca: &mut Hca<P>, attr: RtrAttr) -> Result<()> {
        self.connected_to_rtr(hca, true, &attr)
    }

    /// RTR → RTS (RTR2RTS_QP): send PSN, ACK timeout, retry counts and requester depth.
    ///
    /// # Errors
    ///
    /// [`Error::IllegalTransition`] from a state other than RTR or RTS;
    /// [`Error::Unsupported`] from RTS (RTS → RTS cannot change these: see
    /// [`Qp::rts_to_rts`]); [`Error::InvalidArgument`] for out-of-range values (no command
    /// is sent for any of these); [`Error::BadQpState`]; the command's error.
    pub fn to_rts(&mut self, hca: &mut Hca<P>, attr: RtsAttr) -> Result<()> {
        self.check_rtr_to_rts()?;
        if attr.sq_psn > MASK24 {
            return Err(InvalidArgument::max(Arg::SqPsn, attr.sq_psn.into(), MASK24.into()).into());
        }
        if attr.timeout > 31 {
            return Err(InvalidArgument::max(Arg::Timeout, attr.timeout.into(), 31).into());
        }
        if attr.retry_cnt > 7 {
            return Err(InvalidArgument::max(Arg::RetryCnt, attr.retry_cnt.into(), 7).into());
        }
        if attr.rnr_retry > 7 {
            return Err(InvalidArgument::max(Arg::RnrRetry, attr.rnr_retry.into(), 7).into());
        }
        let max_rd = 1u32 << hca.hca_cap().log_max_ra_req_qp();
        if attr.max_rd_atomic as u32 > max_rd {
            return Err(InvalidArgument::max(
                Arg::MaxRdAtomic,
                attr.max_rd_atomic.into(),
                max_rd.into(),
            )
            .into());
        }
        let mut c = Rtr2rtsQpIn::new_cmd();
        c.set_qpn(self.qpn());
        let q = c.qpc_mut();
        q.set_pm_state(PM_STATE_MIGRATED)
            .set_next_send_psn(attr.sq_psn)
            .set_retry_count(attr.retry_cnt)
            .set_rnr_retry(attr.rnr_retry)
            .set_log_ack_req_freq(RC_LOG_ACK_REQ_FREQ);
        if attr.max_rd_atomic > 0 {
            q.set_log_sra_max(log2_ceil(attr.max_rd_atomic as u64));
        }
        q.primary_address_path_mut().set_ack_timeout(attr.timeout);
        self.modify(hca, QpState::Rts, &c)
    }

    /// RESET → INIT → RTR → RTS in one call, the common bring-up of a connected QP. It
    /// stops at the first transition that fails and returns its error; the QP is then in
    /// the last state it reached ([`Qp::state`]), and [`Qp::to_reset`] starts it over.
    ///
    /// # Errors
    ///
    /// [`Error::IllegalTransition`] if the QP is not in RESET (nothing is sent); the
    /// errors of [`Qp::to_init`], [`Qp::to_rtr`] and [`Qp::to_rts`].
    pub fn connect(
        &mut self,
        hca: &mut Hca<P>,
        init: &InitAttr,
        rtr: &RtrAttr,
        rts: &RtsAttr,
    ) -> Result<()> {
        self.check_in_reset()?;
        self.to_init(hca, *init)?;
        self.to_rtr(hca, *rtr)?;
        self.to_rts(hca, *rts)
    }
}

impl<P: Platform> Qp<P, Uc> {
    /// INIT → RTR (INIT2RTR_QP): path MTU, remote QPN, receive PSN and the path
    /// (`max_dest_rd_atomic` and `min_rnr_timer` do not apply to UC and are ignored).
    ///
    /// # Errors
    ///
    /// As for RC.
    pub fn to_rtr(&mut self, hca: &mut Hca<P>, attr: RtrAttr) -> Result<()> {
        self.connected_to_rtr(hca, false, &attr)
    }

    /// RTR → RTS (RTR2RTS_QP): the first PSN to send.
    ///
    /// # Errors
    ///
    /// As for RC.
    pub fn to_rts(&mut self, hca: &mut Hca<P>, sq_psn: u32) -> Result<()> {
        self.psn_to_rts(hca, sq_psn)
    }

    /// RESET → INIT → RTR → RTS in one call (as [`Qp::connect`] of an RC QP).
    ///
    /// # Errors
    ///
    /// As for RC.
    pub fn connect(
        &mut self,
        hca: &mut Hca<P>,
        init: &InitAttr,
        rtr: &RtrAttr,
        sq_psn: u32,
    ) -> Result<()> {
        self.check_in_reset()?;
        self.to_init(hca, *init)?;
        self.to_rtr(hca, *rtr)?;
        self.to_rts(hca, sq_psn)
    }
}

impl<P: Platform, T: Datagram> Qp<P, T> {
    /// INIT → RTR (INIT2RTR_QP). A UD QP has no path: destinations come with each send.
    /// QP1 gets a path MTU of 256 bytes and messages of at most 256 bytes (a MAD), as
    /// Linux's `mlx5_ib` gives its special QPs.
    ///
    /// # Errors
    ///
    /// [`Error::IllegalTransition`] from a state other than INIT; [`Error::BadQpState`];
    /// the command's error.
    pub fn to_rtr(&mut self, hca: &mut Hca<P>) -> Result<()> {
        self.check_transition(QpState::Rtr)?;
        let mut c = Init2rtrQpIn::new_cmd();
        c.set_qpn(self.qpn());
        let (mtu, log_msg_max) = if T::ST == QpServiceType::Qp1 {
            (IbMtu::Mtu256, GSI_LOG_MSG_MAX)
        } else {
            (IbMtu::Mtu4096, UD_LOG_MSG_MAX)
        };
        c.qpc_mut()
            .set_pm_state(PM_STATE_MIGRATED)
            .set_mtu(mtu.raw())
            .set_log_msg_max(log_msg_max);
        self.modify(hca, QpState::Rtr, &c)
    }

    /// RTR → RTS (RTR2RTS_QP): the first PSN to send.
    ///
    /// # Errors
    ///
    /// As for RC.
    pub fn to_rts(&mut self, hca: &mut Hca<P>, sq_psn: u32) -> Result<()> {
        self.psn_to_rts(hca, sq_psn)
    }

    /// RESET → INIT → RTR → RTS in one call: a UD QP has no peer, only its Q_Key
    /// (`init.qkey`) and first PSN.
    ///
    /// # Errors
    ///
    /// As [`Qp::connect`] of an RC QP.
    pub fn connect(&mut self, hca: &mut Hca<P>, init: &InitAttr, sq_psn: u32) -> Result<()> {
        self.check_in_reset()?;
        self.to_init(hca, *init)?;
        self.to_rtr(hca)?;
        self.to_rts(hca, sq_psn)
    }
}

impl<P: Platform, T: QpTransport> Qp<P, T> {
    fn check_in_reset(&self) -> Result<()> {
        match self.state() {
            QpState::Rst => Ok(()),
            from => Err(Error::IllegalTransition {
                from,
                to: QpState::Init,
            }),
        }
    }

    fn check_rtr_to_rts(&self) -> Result<()> {
        self.check_transition(QpState::Rts)?;
        match self.state() {
            QpState::Rtr => Ok(()),
            QpState::Rts => Err(Error::Unsupported(
                "the send PSN, retry counts and depth in RTS to RTS (Qp::rts_to_rts changes what may change)",
            )),
            from => Err(Error::IllegalTransition {
                from,
                to: QpState::Rts,
            }),
        }
    }

    fn connected_to_rtr(&mut self, hca: &mut Hca<P>, rc: bool, attr: &RtrAttr) -> Result<()> {
        self.check_transition(QpState::Rtr)?;
        let mut c = Init2rtrQpIn::new_cmd();
        c.set_qpn(self.qpn());
        let (port, pkey) = (self.inner().port, self.inner().pkey_index);
        fill_rtr(hca, rc, port, pkey, attr, c.qpc_mut())?;
        self.modify(hca, QpState::Rtr, &c)
    }

    fn psn_to_rts(&mut self, hca: &mut Hca<P>, sq_psn: u32) -> Result<()> {
        self.check_rtr_to_rts()?;
        if sq_psn > MASK24 {
            return Err(InvalidArgument::max(Arg::SqPsn, sq_psn.into(), MASK24.into()).into());
        }
        let mut c = Rtr2rtsQpIn::new_cmd();
        c.set_qpn(self.qpn());
        c.qpc_mut()
            .set_pm_state(PM_STATE_MIGRATED)
            .set_next_send_psn(sq_psn);
        self.modify(hca, QpState::Rts, &c)
    }
}
impl<P: Platform> Hca<P> {
    /// Creates a QP of transport `T` in RESET (`ibv_create_qp`): the work queues sized
    /// from `attr.cap` (see [`Qp::caps`] for what it got), one DMA buffer for the RQ, the
    /// SQ and the doorbell record, the HCA's UAR for send doorbells.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for capabilities the device cannot give (too many work
    /// requests, scatter/gather entries or inline bytes; no command is sent);
    /// [`Error::Unsupported`] for a transport the device lacks; [`Error::Dma`]; the
    /// command's error.
    pub fn create_qp<T: QpTransport>(
        &mut self,
        pd: &Pd<P>,
        attr: &QpInitAttr<'_, P>,
    ) -> Result<Qp<P, T>> {
        self.create_qp_rlky(pd, attr, false)
    }

    /// [`Hca::create_qp`] for a QP on which the reserved lkey works (the QP context's
    /// `rlky` bit): its work requests may carry [`ReservedLkey::sge`] entries, which name
    /// raw IOVAs with no protection but the IOMMU's (see
    /// [`verbs::reserved`](super::reserved)). On a QP made by [`Hca::create_qp`] such an
    /// entry completes with [`WcStatus::LocalProtection`](super::WcStatus::LocalProtection).
    ///
    /// # Errors
    ///
    /// As [`Hca::create_qp`]; [`Error::WrongHca`] for a key asked of another HCA.
    pub fn create_qp_with_reserved_lkey<T: QpTransport>(
        &mut self,
        pd: &Pd<P>,
        attr: &QpInitAttr<'_, P>,
        key: &ReservedLkey,
    ) -> Result<Qp<P, T>> {
        self.check_reserved_lkey(key)?;
        self.create_qp_rlky(pd, attr, true)
    }

    fn create_qp_rlky<T: QpTransport>(
        &mut self,
        pd: &Pd<P>,
        attr: &QpInitAttr<'_, P>,
        rlky: bool,
    ) -> Result<Qp<P, T>> {
        let sizes = self.check_new_qp::<T>(pd, attr)?;
        let mut layout = QpLayout::new(0, sizes.rq, sizes.sq.map(|s| s.0));
        if let Some((_, bbs)) = sizes.sq {
            layout.max_sq_wqebbs = bbs;
        }
        // The work-request tables the CQs read (`verbs::dp`) and the place in the release
        // queue, before the command so a lack of memory sends nothing.
        let ticket = self.release_ticket()?;
        let host = self.platform().clone();
        let sq_table = sizes
            .sq
            .map(|(log, _)| SqTable::new(host.clone(), log))
            .transpose()?;
        let rq_table = sizes
            .rq
            .map(|(log, _)| RqTable::new(host.clone(), log))
            .transpose()?;
        let plan = PagePlan::for_bytes(layout.wq_len());
        let mut buf = self.alloc_dma(layout.buffer_len(), plan.page_bytes())?;
        // The doorbell record must read zero when the device first looks (the memory
        // comes zeroed; say it anyway).
        buf.write_be64(layout.dbr_offset, 0);

        let uar = self.uar();
        let dbr_iova = buf.iova() + layout.dbr_offset as u64;
        let c = self.create_qp_cmd::<T>(pd, attr, &sizes, plan.log_page_size, dbr_iova, rlky);
        let mut pas = [0u8; MAX_PAS * 8];
        let pas = plan.write_pas(buf.iova(), &mut pas);
        let qpn = match self.exec(&c, pas, &mut []) {
            Ok(o) => o.qpn(),
            Err(e) => {
                release_unless_held(&e, buf);
                return Err(e);
            }
        };
        layout.qpn = qpn;
        let shared = QpShared::new(
            qpn,
            T::ST,
            (attr.send_cq.cqn(), attr.recv_cq.cqn()),
            attr.srq.map(|s| s.shared().clone()),
            sq_table,
            rq_table,
        );
        let attached = self.attach_qp_shared(attr, HostArc::new(host.clone(), shared));
        let shared = match attached {
            Ok(h) => h,
            Err(e) => {
                // No memory for the tables: the QP goes again (its buffer is freed only if
                // the device let go of it).
                self.roll_back(ObjectKind::Qp, qpn, buf);
                return Err(e);
            }
        };
        let doorbell = SqDoorbell::new(uar as usize * ADAPTER_PAGE_SIZE);
        let rings = match QpRings::new(buf, layout, doorbell) {
            Ok(r) => r,
            Err(_) => unreachable!("QpLayout::new with sizes the HAL accepts"),
        };
        Ok(Qp {
            inner: Some(QpInner {
                rings,
                layout,
                doorbell,
                qpn,
                pdn: pd.pdn(),
                port: 0,
                pkey_index: 0,
                caps: sizes.actual,
                send_cqn: attr.send_cq.cqn(),
                recv_cqn: attr.recv_cq.cqn(),
                srqn: attr.srq.map(|s| s.srqn()),
                bar: host,
                shared,
                sig_all: false,
                atomics: self.caps().atomic,
                hca_id: self.id(),
                ticket,
            }),
            _marker: PhantomData,
        })
    }

    /// Checks that this HCA offers transport `T` and owns `pd`, the CQs and the SRQ of
    /// `attr`, and computes the queues `attr.cap` asks for.
    fn check_new_qp<T: QpTransport>(
        &self,
        pd: &Pd<P>,
        attr: &QpInitAttr<'_, P>,
    ) -> Result<QueueSizes> {
        let caps = self.caps();
        let supported = match T::ST {
            QpServiceType::Rc => caps.rc,
            QpServiceType::Uc => caps.uc,
            QpServiceType::Ud | QpServiceType::Qp1 => caps.ud,
            _ => false,
        };
        if !supported {
            return Err(Error::Unsupported("this QP transport"));
        }
        let sizes = queue_sizes(
            T::SQ_OVERHEAD,
            &attr.cap,
            self.hca_cap(),
            attr.srq.is_some(),
        )?;
        for owner in [attr.send_cq.hca_id(), attr.recv_cq.hca_id(), pd.hca_id()]
            .into_iter()
            .chain(attr.srq.map(|s| s.hca_id()))
        {
            self.check_owner(owner)?;
        }
        Ok(sizes)
    }

    /// The CREATE_QP command of a QP of transport `T` in `pd` with the queues `sizes`, its
    /// buffer in pages of `2^log_page_size` 4 KiB and its doorbell record at `dbr_iova`;
    /// `rlky`: it may use the reserved lkey.
    fn create_qp_cmd<T: QpTransport>(
        &self,
        pd: &Pd<P>,
        attr: &QpInitAttr<'_, P>,
        sizes: &QueueSizes,
        log_page_size: u8,
        dbr_iova: u64,
        rlky: bool,
    ) -> CreateQpIn {
        let mut c = CreateQpIn::new_cmd();
        let q = c.qpc_mut();
        q.set_st(T::ST.raw())
            .set_pm_state(PM_STATE_MIGRATED)
            .set_pd(pd.pdn())
            .set_uar_page(self.uar())
            .set_user_index(DEFAULT_USER_INDEX)
            .set_log_page_size(log_page_size)
            .set_cqn_snd(attr.send_cq.cqn())
            .set_cqn_rcv(attr.recv_cq.cqn())
            .set_dbr_addr(dbr_iova)
            .set_ts_format(default_ts_format(self.hca_cap(), self.roce_cap()))
            .set_rlky(rlky);
        match sizes.sq {
            Some((log, _)) => {
                q.set_log_sq_size(log);
            }
            None => {
                q.set_no_sq(true);
            }
        }
        match (attr.srq, sizes.rq) {
            (Some(srq), _) => {
                q.set_rq_type(RQ_TYPE_SRQ).set_srqn_rmpn_xrqn(srq.srqn());
            }
            (None, Some((log, log_stride))) => {
                q.set_rq_type(RQ_TYPE_REGULAR)
                    .set_log_rq_size(log)
                    .set_log_rq_stride(log_stride - 4);
            }
            (None, None) => {
                q.set_rq_type(RQ_TYPE_ZERO);
            }
        }
        c
    }

    /// Notes a new QP's shared half (`shared`, as allocated) with its CQs and the HCA; on a
    /// failure the CQs that noted it keep a tombstone (which drops nothing: the QP never
    /// posted).
    fn attach_qp_shared(
        &mut self,
        attr: &QpInitAttr<'_, P>,
        shared: core::result::Result<QpHandle<P>, uhca_hal::platform::DmaError>,
    ) -> Result<QpHandle<P>> {
        shared.map_err(Error::from).and_then(|h| {
            let noted = attr.send_cq.attach(h.clone()).and_then(|()| {
                if attr.recv_cq.cqn() != attr.send_cq.cqn() {
                    attr.recv_cq.attach(h.clone())?;
                }
                self.qp_created(h.clone())
            });
            match noted {
                Ok(()) => Ok(h),
                Err(e) => {
                    // A CQ that noted it keeps a tombstone (which drops nothing: the
                    // QP never posted).
                    h.mark_destroyed();
                    Err(e)
                }
            }
        })
    }
}

/// `qpc.ts_format` for an RC, UC or UD QP: free-running (0) when the QP timestamp
/// capability offers it (capability 0, free-running, or 2, free-running and real time),
/// the device's default format (1) otherwise, as Linux chooses for a QP whose CQs ask for
/// no particular timestamps (`mlx5_ib` `qp.c` `get_qp_ts_format`).
///
/// The QP capability is the RoCE page's `qp_ts_format` on a device with RoCE (what
/// `get_qp_ts_format` reads); without RoCE it is the general `sq_ts_format`, as Linux's
/// `mlx5_get_qp_default_ts` (`include/linux/mlx5/qp.h`) falls back to when RoCE is off.
fn default_ts_format(cap: &CmdHcaCap, roce: Option<&RoceCap>) -> u8 {
    let qp_cap = match roce {
        Some(r) => r.qp_ts_format(),
        None => cap.sq_ts_format(),
    };
    match qp_cap {
        0 | 2 => 0,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap() -> CmdHcaCap {
        let mut c = CmdHcaCap::default();
        c.set_log_max_qp_sz(15)
            .set_max_wqe_sz_sq(1024)
            .set_max_wqe_sz_rq(512);
        c
    }

    #[test]
    fn rc_sizes_follow_the_mlx5_provider() {
        let s = queue_sizes(
            Rc::SQ_OVERHEAD,
            &QpCaps {
                max_send_wr: 100,
                max_recv_wr: 100,
                max_send_sge: 2,
                max_recv_sge: 3,
                max_inline_data: 64,
            },
            &cap(),
            false,
        )
        .unwrap();
        // Send WQE: 48 + max(2 × 16, 4 + 64 → 80) = 128 bytes = 2 WQEBBs; 100 × 128
        // rounded up to 16 KiB = 256 WQEBBs.
        assert_eq!(s.sq, Some((8, 2)));
        assert_eq!(s.actual.max_send_wr, 128);
        assert_eq!(s.actual.max_inline_data, 128 - 48 - 4);
        assert_eq!(s.actual.max_send_sge, 5);
        // Receive WQE: 3 entries → 64-byte stride; 128 WQEs.
        assert_eq!(s.rq, Some((7, 6)));
        assert_eq!((s.actual.max_recv_wr, s.actual.max_recv_sge), (128, 4));
    }

    #[test]
    fn ud_and_limits() {
        let s = queue_sizes(
            Ud::SQ_OVERHEAD,
            &QpCaps {
                max_send_wr: 1,
                max_recv_wr: 1,
                max_send_sge: 1,
                ..QpCaps::default()
            },
            &cap(),
            false,
        )
        .unwrap();
        // 64 + 16 = 80 → 128 bytes = 2 WQEBBs; one 16-byte receive WQE padded to 4.
        assert_eq!(s.sq, Some((1, 2)));
        assert_eq!(s.rq, Some((2, 4)));
        let too_many = QpCaps {
            max_send_wr: 1,
            max_send_sge: 61,
            ..QpCaps::default()
        };
        assert!(matches!(
            queue_sizes(Rc::SQ_OVERHEAD, &too_many, &cap(), false),
            Err(Error::InvalidArgument(_))
        ));
        let srq_and_rq = QpCaps {
            max_recv_wr: 4,
            ..QpCaps::default()
        };
        assert!(queue_sizes(Rc::SQ_OVERHEAD, &srq_and_rq, &cap(), true).is_err());
        let none = queue_sizes(Uc::SQ_OVERHEAD, &QpCaps::default(), &cap(), false).unwrap();
        assert_eq!((none.sq, none.rq), (None, None));
    }
}
