//! Work requests and work completions: what [`Qp::post_send`](super::Qp::post_send),
//! [`Qp::post_recv`](super::Qp::post_recv), [`Srq::post_recv`](super::Srq::post_recv) take
//! and what [`Cq::poll`](super::Cq::poll) fills in, shaped like ibverbs' `ibv_send_wr`,
//! `ibv_recv_wr` and `ibv_wc`.

use uhca_fwif::consts::CqeSyndrome;
use uhca_fwif::consts::WqeCtrlFlags;
use uhca_fwif::consts::WqeOpcode;
pub use uhca_hal::wq::Sge;

use super::Ah;

/// What a send work request does (`ibv_wr_opcode` with its operands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendOp {
    /// SEND (RC, UC, UD).
    Send,
    /// SEND with immediate data (RC, UC, UD): the receiver's completion carries `imm`.
    SendWithImm {
        /// The immediate data, as the receiver reads it back.
        imm: u32,
    },
    /// RDMA WRITE (RC, UC).
    RdmaWrite {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA WRITE with immediate data (RC, UC): consumes a receive WQE at the responder.
    RdmaWriteWithImm {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// The immediate data.
        imm: u32,
    },
    /// RDMA READ (RC): the scatter list receives the remote data.
    RdmaRead {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// Atomic compare-and-swap of the 8 bytes at `remote_addr` (RC): if they equal
    /// `compare` they become `swap`; the original value lands in the one 8-byte entry of the
    /// scatter list. Byte order: the remote word is a `u64` in the host's byte order (the
    /// responder compares `compare` with `u64::from_ne_bytes` of its bytes and stores
    /// `swap.to_ne_bytes()`), and so is the original value (read it with
    /// `u64::from_ne_bytes`), as with rdma-core and Linux: at bring-up the driver sets the
    /// HCA's 8-byte atomic endianness mode to host endianness, and atomics are offered only
    /// when the HCA supports that mode (`supported_atomic_req_8B_endianness_mode_1`). Both
    /// ends must be in that mode (Linux's `mlx5_core` sets it too). Only when
    /// [`DeviceCaps::atomic`](crate::caps::DeviceCaps::atomic).
    AtomicCmpSwap {
        /// Remote address, 8-byte aligned.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// The value compared.
        compare: u64,
        /// The value stored on a match.
        swap: u64,
    },
    /// Atomic fetch-and-add on the 8 bytes at `remote_addr` (RC); the original value lands
    /// in the one 8-byte entry of the scatter list. The remote word and the original value
    /// are `u64`s in the host's byte order (as for [`SendOp::AtomicCmpSwap`]).
    AtomicFetchAdd {
        /// Remote address, 8-byte aligned.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// The addend.
        add: u64,
    },
}

impl SendOp {
    /// The completion opcode a successful request reports.
    pub const fn wc_opcode(&self) -> WcOpcode {
        self.lower().wc
    }

    /// The request's lowering to a send WQE: its opcode, its immediate and its remote
    /// address, and the completion opcode it reports. The one mapping from a verbs send
    /// opcode to the WQE's, used by every posting path; the poller maps a CQE's WQE opcode
    /// back with [`wc_opcode_of_wqe`], which agrees (see the test below).
    #[inline(always)]
    pub(crate) const fn lower(&self) -> LoweredOp {
        let (opcode, wc, class, imm, raddr) = match *self {
            SendOp::Send => (WqeOpcode::Send, WcOpcode::Send, OpClass::Send, 0, None),
            SendOp::SendWithImm { imm } => {
                (WqeOpcode::SendImm, WcOpcode::Send, OpClass::Send, imm, None)
            }
            SendOp::RdmaWrite { remote_addr, rkey } => (
                WqeOpcode::RdmaWrite,
                WcOpcode::RdmaWrite,
                OpClass::Write,
                0,
                Some((remote_addr, rkey)),
            ),
            SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => (
                WqeOpcode::RdmaWriteImm,
                WcOpcode::RdmaWrite,
                OpClass::Write,
                imm,
                Some((remote_addr, rkey)),
            ),
            SendOp::RdmaRead { remote_addr, rkey } => (
                WqeOpcode::RdmaRead,
                WcOpcode::RdmaRead,
                OpClass::Read,
                0,
                Some((remote_addr, rkey)),
            ),
            SendOp::AtomicCmpSwap {
                remote_addr, rkey, ..
            } => (
                WqeOpcode::AtomicCs,
                WcOpcode::CompSwap,
                OpClass::Atomic,
                0,
                Some((remote_addr, rkey)),
            ),
            SendOp::AtomicFetchAdd {
                remote_addr, rkey, ..
            } => (
                WqeOpcode::AtomicFa,
                WcOpcode::FetchAdd,
                OpClass::Atomic,
                0,
                Some((remote_addr, rkey)),
            ),
        };
        LoweredOp {
            opcode,
            wc,
            class,
            imm,
            raddr,
        }
    }
}

/// What an opcode needs of the QP and of the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum OpClass {
    /// SEND, SEND with immediate: every transport.
    Send,
    /// RDMA WRITE (with immediate): RC and UC.
    Write,
    /// RDMA READ: RC; reads into local memory (no inline data).
    Read,
    /// Atomics: RC with the device's 8-byte atomics; one 8-byte local buffer.
    Atomic,
}

/// A send request lowered to its WQE ([`SendOp::lower`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LoweredOp {
    /// The WQE opcode.
    pub opcode: WqeOpcode,
    /// The completion opcode it reports ([`wc_opcode_of_wqe`] of `opcode`).
    pub wc: WcOpcode,
    /// What the opcode needs of the QP and of the request.
    pub class: OpClass,
    /// The immediate (0 for an opcode without one).
    pub imm: u32,
    /// The remote-address segment's address and key, for RDMA and atomics.
    pub raddr: Option<(u64, u32)>,
}

/// The completion opcode of a send WQE's opcode (as a requester CQE's `sop` reports it);
/// `None` for opcodes a verbs send queue never posts.
pub(crate) const fn wc_opcode_of_wqe(op: WqeOpcode) -> Option<WcOpcode> {
    Some(match op {
        WqeOpcode::Send | WqeOpcode::SendImm | WqeOpcode::SendInval => WcOpcode::Send,
        WqeOpcode::RdmaWrite | WqeOpcode::RdmaWriteImm => WcOpcode::RdmaWrite,
        WqeOpcode::RdmaRead => WcOpcode::RdmaRead,
        WqeOpcode::AtomicCs | WqeOpcode::AtomicMaskedCs => WcOpcode::CompSwap,
        WqeOpcode::AtomicFa | WqeOpcode::AtomicMaskedFa => WcOpcode::FetchAdd,
        _ => return None,
    })
}

/// Where the data of a send comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendData<'a> {
    /// A gather list of registered memory (at most the QP's `max_send_sge` entries; for
    /// RDMA READ and atomics, the scatter list of the result).
    Sge(&'a [Sge]),
    /// Bytes copied into the WQE (`IBV_SEND_INLINE`; at most the QP's
    /// `max_inline_data`; SEND and RDMA WRITE only). No memory key is needed and the
    /// slice may be reused as soon as the post returns.
    Inline(&'a [u8]),
}

bitflags::bitflags! {
    /// Send flags (`ibv_send_flags`; inline data is [`SendData::Inline`]).
    ///
    /// Each flag's bit is the control-segment bit it turns into (`fm_ce_se`), so posting
    /// copies them without translating.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct SendFlags: u8 {
        /// Generate a completion for this request (`IBV_SEND_SIGNALED`). Unsignalled
        /// requests complete silently when a later signalled one does. (`CQ_UPDATE`.)
        const SIGNALED = WqeCtrlFlags::CQ_UPDATE.bits();
        /// Wait for earlier RDMA READ and atomic requests before starting
        /// (`IBV_SEND_FENCE`; rdma-core's `MLX5_WQE_CTRL_FENCE`, small-and-fence).
        const FENCE = WqeCtrlFlags::FENCE_SMALL_AND_FENCE.bits();
        /// Raise a solicited event at the responder (`IBV_SEND_SOLICITED`).
        const SOLICITED = WqeCtrlFlags::SOLICITED.bits();
    }
}

/// The destination of a UD send: address handle, remote QPN, Q_Key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest<'a> {
    /// The path.
    pub ah: &'a Ah,
    /// The remote QP number (24 bits).
    pub remote_qpn: u32,
    /// The remote Q_Key.
    pub remote_qkey: u32,
}

/// A send work request (`ibv_send_wr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// The data.
    pub data: SendData<'a>,
    /// Signalled, fence, solicited.
    pub flags: SendFlags,
    /// The destination, for UD QPs (and only for them).
    pub ud: Option<UdDest<'a>>,
}

impl<'a> SendWr<'a> {
    /// A signalled request of `op` over `sges`, with no destination (RC, UC).
    pub const fn new(wr_id: u64, op: SendOp, sges: &'a [Sge]) -> Self {
        SendWr {
            wr_id,
            op,
            data: SendData::Sge(sges),
            flags: SendFlags::SIGNALED,
            ud: None,
        }
    }

    /// The same request with these flags.
    pub const fn with_flags(mut self, flags: SendFlags) -> Self {
        self.flags = flags;
        self
    }

    /// The same request with inline data instead of a gather list.
    pub const fn with_inline(mut self, bytes: &'a [u8]) -> Self {
        self.data = SendData::Inline(bytes);
        self
    }

    /// The same request to a UD destination.
    pub const fn with_ud(mut self, dest: UdDest<'a>) -> Self {
        self.ud = Some(dest);
        self
    }
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Where received data goes (at most `max_recv_sge` entries).
    pub sg_list: &'a [Sge],
}

impl<'a> RecvWr<'a> {
    /// A receive request `wr_id` into the buffers of `sg_list`.
    ///
    /// ```
    /// use uhca_driver::verbs::{RecvWr, Sge};
    ///
    /// let sge = [Sge { addr: 0x1000, len: 64, lkey: 5 }];
    /// assert_eq!(RecvWr::new(7, &sge), RecvWr { wr_id: 7, sg_list: &sge });
    /// ```
    pub const fn new(wr_id: u64, sg_list: &'a [Sge]) -> RecvWr<'a> {
        RecvWr { wr_id, sg_list }
    }
}

/// Why one work request was refused (nothing of it was posted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WrError {
    /// The QP is in ERR: it got an error completion, so the device moved it there, or it
    /// was moved with [`Qp::to_err`](super::Qp::to_err). Every outstanding request
    /// completes with [`WcStatus::WrFlushed`]. Move it to RESET
    /// ([`Qp::to_reset`](super::Qp::to_reset)) and bring it up again.
    QpInError {
        /// The QP.
        qpn: u32,
    },
    /// The QP is in a state that does not take this post: sends need RTS, receives INIT,
    /// RTR, RTS or SQER ([`Qp::state`](super::Qp::state)).
    QpState {
        /// The QP.
        qpn: u32,
        /// The state it is in.
        state: uhca_fwif::consts::QpState,
    },
    /// The queue has no room (completions must be polled first; unsignalled requests are
    /// retired only by a later signalled one).
    QueueFull,
    /// More scatter/gather entries than the queue's limit.
    TooManySges {
        /// Entries given.
        given: usize,
        /// The limit (`max_send_sge`, `max_recv_sge`).
        max: u32,
    },
    /// More inline bytes than the QP's `max_inline_data`.
    InlineTooLong {
        /// Bytes given.
        given: usize,
        /// The limit.
        max: u32,
    },
    /// Inline data with an operation that reads into local memory (RDMA READ, atomics).
    InlineNotAllowed,
    /// The operation does not exist on this transport (UC: no READ or atomics; UD:
    /// SEND only), or it is an atomic and the device offers none (`DeviceCaps::atomic`).
    OpNotSupported,
    /// A UD send without a destination, or a connected QP's send with one.
    Destination,
    /// An atomic needs exactly one 8-byte scatter entry for the original value.
    AtomicLocalBuffer,
    /// An atomic's remote address is not 8-byte aligned.
    AtomicAlignment,
    /// A scatter entry's length does not fit the 31-bit byte count.
    SgeTooLong,
    /// The QP has no such queue (no send queue; or it receives from an SRQ).
    NoQueue,
    /// The HAL's work queue refused the request for a reason none of the above names (one
    /// that posting should never meet: a driver bug to report, with the HAL's error).
    Ring(uhca_hal::wq::WqError),
}

impl core::fmt::Display for WrError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WrError::QpInError { qpn } => {
                write!(f, "QP {qpn:#x} is in the error state; move it to RESET")
            }
            WrError::QpState { qpn, state } => {
                write!(
                    f,
                    "QP {qpn:#x} is in {state}, which does not take this post"
                )
            }
            WrError::QueueFull => f.write_str("work queue full: poll completions first"),
            WrError::TooManySges { given, max } => {
                write!(f, "{given} scatter/gather entries, the queue takes {max}")
            }
            WrError::InlineTooLong { given, max } => {
                write!(f, "{given} bytes of inline data, the QP takes {max}")
            }
            WrError::InlineNotAllowed => f.write_str("inline data only with SEND and RDMA WRITE"),
            WrError::OpNotSupported => {
                f.write_str("operation not supported on this transport or device")
            }
            WrError::Destination => f.write_str(
                "UD sends need a destination (address handle, QPN, Q_Key); connected QPs take none",
            ),
            WrError::AtomicLocalBuffer => {
                f.write_str("atomics need exactly one 8-byte scatter entry")
            }
            WrError::AtomicAlignment => f.write_str("atomic remote address not 8-byte aligned"),
            WrError::SgeTooLong => f.write_str("scatter/gather entry longer than 2 GiB - 1"),
            WrError::NoQueue => f.write_str("the QP has no such work queue"),
            WrError::Ring(e) => write!(f, "the work queue refused the request: {e}"),
        }
    }
}

impl core::error::Error for WrError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            WrError::Ring(e) => Some(e),
            _ => None,
        }
    }
}

/// A post stopped at a bad work request (`bad_wr`): the requests before `index` were
/// posted (and the doorbell rung), the one at `index` and those after it were not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadWr {
    /// Index of the refused request in what was given.
    pub index: usize,
    /// Why.
    pub error: WrError,
}

impl core::fmt::Display for BadWr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "work request {}: {}", self.index, self.error)
    }
}

impl core::error::Error for BadWr {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// The status of a work completion (`ibv_wc_status`), from the CQE syndrome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcStatus {
    /// Success.
    #[default]
    Success,
    /// Local length error (`LOCAL_LENGTH_ERR`): a receive buffer too small, or a message
    /// longer than the QP allows.
    LocalLength,
    /// Local QP operation error (`LOCAL_QP_OP_ERR`).
    LocalQpOp,
    /// Local protection error (`LOCAL_PROT_ERR`): an lkey that does not cover the buffer
    /// or lacks the access.
    LocalProtection,
    /// Flushed (`WR_FLUSH_ERR`): the QP was in the error state.
    WrFlushed,
    /// Memory window bind error (`MW_BIND_ERR`).
    MwBind,
    /// Bad response (`BAD_RESP_ERR`).
    BadResponse,
    /// Local access error (`LOCAL_ACCESS_ERR`).
    LocalAccess,
    /// Remote invalid request (`REMOTE_INVAL_REQ_ERR`): for example an operation the
    /// responder does not allow, or a message too long for its receive buffer.
    RemoteInvalidRequest,
    /// Remote access error (`REMOTE_ACCESS_ERR`): bad rkey, bounds or rights.
    RemoteAccess,
    /// Remote operation error (`REMOTE_OP_ERR`).
    RemoteOperation,
    /// Transport retry counter exceeded (`TRANSPORT_RETRY_EXC_ERR`).
    RetryExceeded,
    /// RNR retry counter exceeded (`RNR_RETRY_EXC_ERR`).
    RnrRetryExceeded,
    /// Remote aborted (`REMOTE_ABORTED_ERR`).
    RemoteAborted,
    /// A syndrome this driver does not know (kept).
    Unknown(u8),
}

impl WcStatus {
    /// The status of an error CQE with `syndrome`.
    pub const fn from_syndrome(syndrome: CqeSyndrome) -> Self {
        match syndrome {
            CqeSyndrome::LocalLengthErr => WcStatus::LocalLength,
            CqeSyndrome::LocalQpOpErr => WcStatus::LocalQpOp,
            CqeSyndrome::LocalProtErr => WcStatus::LocalProtection,
            CqeSyndrome::WrFlushErr => WcStatus::WrFlushed,
            CqeSyndrome::MwBindErr => WcStatus::MwBind,
            CqeSyndrome::BadRespErr => WcStatus::BadResponse,
            CqeSyndrome::LocalAccessErr => WcStatus::LocalAccess,
            CqeSyndrome::RemoteInvalReqErr => WcStatus::RemoteInvalidRequest,
            CqeSyndrome::RemoteAccessErr => WcStatus::RemoteAccess,
            CqeSyndrome::RemoteOpErr => WcStatus::RemoteOperation,
            CqeSyndrome::TransportRetryExcErr => WcStatus::RetryExceeded,
            CqeSyndrome::RnrRetryExcErr => WcStatus::RnrRetryExceeded,
            CqeSyndrome::RemoteAbortedErr => WcStatus::RemoteAborted,
            other => WcStatus::Unknown(other.raw()),
        }
    }

    /// Whether the request succeeded.
    pub const fn is_success(&self) -> bool {
        matches!(self, WcStatus::Success)
    }
}

impl core::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let s = match self {
            WcStatus::Success => "success",
            WcStatus::LocalLength => "local length error",
            WcStatus::LocalQpOp => "local QP operation error",
            WcStatus::LocalProtection => "local protection error",
            WcStatus::WrFlushed => "work request flushed",
            WcStatus::MwBind => "memory window bind error",
            WcStatus::BadResponse => "bad response",
            WcStatus::LocalAccess => "local access error",
            WcStatus::RemoteInvalidRequest => "remote invalid request",
            WcStatus::RemoteAccess => "remote access error",
            WcStatus::RemoteOperation => "remote operation error",
            WcStatus::RetryExceeded => "transport retry counter exceeded",
            WcStatus::RnrRetryExceeded => "RNR retry counter exceeded",
            WcStatus::RemoteAborted => "remote aborted",
            WcStatus::Unknown(s) => return write!(f, "unknown syndrome {s:#x}"),
        };
        f.write_str(s)
    }
}

/// What a completion completed (`ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcOpcode {
    /// SEND or SEND with immediate.
    #[default]
    Send,
    /// RDMA WRITE or RDMA WRITE with immediate.
    RdmaWrite,
    /// RDMA READ.
    RdmaRead,
    /// Atomic compare-and-swap.
    CompSwap,
    /// Atomic fetch-and-add.
    FetchAdd,
    /// A receive (of a SEND).
    Recv,
    /// A receive consumed by an RDMA WRITE with immediate.
    RecvRdmaWithImm,
}

impl WcOpcode {
    /// Whether this completes a receive work request.
    pub const fn is_recv(&self) -> bool {
        matches!(self, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
    }

    pub(crate) const fn raw(self) -> u8 {
        match self {
            WcOpcode::Send => 0,
            WcOpcode::RdmaWrite => 1,
            WcOpcode::RdmaRead => 2,
            WcOpcode::CompSwap => 3,
            WcOpcode::FetchAdd => 4,
            WcOpcode::Recv => 5,
            WcOpcode::RecvRdmaWithImm => 6,
        }
    }

    pub(crate) const fn from_raw(v: u8) -> Option<Self> {
        Some(match v {
            0 => WcOpcode::Send,
            1 => WcOpcode::RdmaWrite,
            2 => WcOpcode::RdmaRead,
            3 => WcOpcode::CompSwap,
            4 => WcOpcode::FetchAdd,
            5 => WcOpcode::Recv,
            6 => WcOpcode::RecvRdmaWithImm,
            _ => return None,
        })
    }
}

bitflags::bitflags! {
    /// Completion flags (`ibv_wc_flags`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct WcFlags: u8 {
        /// The received message carried a GRH (UD: the first 40 bytes of the buffer hold it).
        const GRH = 1 << 0;
        /// `imm_data` is valid.
        const WITH_IMM = 1 << 1;
        /// A SEND with invalidate arrived: `invalidated_rkey` is the key it named.
        const WITH_INV = 1 << 2;
    }
}

/// A work completion (`ibv_wc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// Success or why not.
    pub status: WcStatus,
    /// What completed (for error completions, what the work request asked for).
    pub opcode: WcOpcode,
    /// The vendor syndrome of an error completion (firmware-specific; 0 on success).
    pub vendor_err: u8,
    /// Bytes received (receives), read (RDMA READ) or 8 (atomics); 0 otherwise.
    pub byte_len: u32,
    /// Immediate data, when `wc_flags` has [`WcFlags::WITH_IMM`].
    pub imm_data: u32,
    /// The rkey a SEND with invalidate named, when `wc_flags` has [`WcFlags::WITH_INV`]
    /// (uhca registers no memory windows, so nothing is invalidated locally).
    pub invalidated_rkey: u32,
    /// The local QP.
    pub qp_num: u32,
    /// The sender's QP (UD receives).
    pub src_qp: u32,
    /// The sender's LID (InfiniBand receives).
    pub slid: u16,
    /// The destination LID's path bits (InfiniBand receives, with an LMC above 0).
    pub dlid_path_bits: u8,
    /// The service level the CQE reports for a receive (every QP type, as libmlx5 and
    /// Linux report it).
    pub sl: u8,
    /// GRH present, immediate present.
    pub wc_flags: WcFlags,
    /// The WQE counter the device reported (SQ WQE index, RQ or SRQ WQE index).
    pub wqe_counter: u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The poller reads a requester CQE's WQE opcode back through `wc_opcode_of_wqe`: it
    /// must name the completion opcode the post recorded for every request.
    #[test]
    fn lowering_and_poller_agree_on_the_completion_opcode() {
        let (remote_addr, rkey) = (0x1000, 7);
        let ops = [
            SendOp::Send,
            SendOp::SendWithImm { imm: 1 },
            SendOp::RdmaWrite { remote_addr, rkey },
            SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm: 2,
            },
            SendOp::RdmaRead { remote_addr, rkey },
            SendOp::AtomicCmpSwap {
                remote_addr,
                rkey,
                compare: 3,
                swap: 4,
            },
            SendOp::AtomicFetchAdd {
                remote_addr,
                rkey,
                add: 5,
            },
        ];
        for op in ops {
            let l = op.lower();
            assert_eq!(wc_opcode_of_wqe(l.opcode), Some(l.wc), "{op:?}");
            assert_eq!(op.wc_opcode(), l.wc, "{op:?}");
            let has_raddr = !matches!(op, SendOp::Send | SendOp::SendWithImm { .. });
            assert_eq!(l.raddr.is_some(), has_raddr, "{op:?}");
        }
    }
}
