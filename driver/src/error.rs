//! The driver's error type.

use uhca_fwif::consts::CqeOpcode;
use uhca_hal::cmdq::{CmdError, CmdInitError};
use uhca_hal::init_seg::{FatalHealth, InitSegError};
use uhca_hal::{ConfigError, DmaError};

/// Everything that can go wrong in the driver. Each variant keeps its context: the command
/// and its status and syndrome, the health state, the platform's error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A firmware command failed (status, delivery or timeout); it names the opcode.
    Command(CmdError),
    /// The command queue could not be set up.
    CommandQueue(CmdInitError),
    /// The initialization segment refused: firmware never ready, unsupported revision.
    InitSeg(InitSegError),
    /// The device is dead; every call fails with this until the device is torn down.
    Fatal(FatalHealth),
    /// DMA memory or a mapping could not be had.
    Dma(DmaError),
    /// A PCI configuration-space access failed.
    Config(ConfigError),
    /// The PCI function is not a ConnectX (mlx5) device.
    NotAConnectX {
        /// The vendor id read from configuration space.
        vendor: u16,
        /// The device id.
        device: u16,
    },
    /// The device lacks something the driver needs (named).
    Unsupported(&'static str),
    /// A caller's argument is invalid: which one, the value given and the limit it broke
    /// (see [`InvalidArgument`]). Nothing was sent to the device.
    InvalidArgument(InvalidArgument),
    /// The firmware asked for more pages than the driver's page pool can hold.
    OutOfPages,
    /// The firmware asked for more pages than the configuration's budget
    /// ([`HcaConfig::max_firmware_pages`](crate::HcaConfig)) leaves: nothing was allocated,
    /// and the firmware was told it cannot have them (MANAGE_PAGES "can't give").
    PageBudget {
        /// Pages the firmware asked for.
        requested: u32,
        /// Pages it held already.
        held: u32,
        /// The budget.
        budget: u32,
    },
    /// The device broke the PRM's contract (named); the driver refused to believe it.
    DeviceMisbehaved(&'static str),
    /// The HCA was already torn down.
    TornDown,
    /// An object created by another [`Hca`](crate::Hca) was handed to this one (its number
    /// would name a different object of this device); nothing was sent.
    WrongHca,
    /// The device wrote a CQE that does not match what was posted (see [`PollError`]).
    BadCompletion(PollError),
    /// The device refused a QP state transition because the QP is not in the state the
    /// transition starts from (BAD_QP_STATE): the device moved it on its own, for example
    /// to ERR after an error completion, or to SQER.
    BadQpState {
        /// The QP.
        qpn: u32,
        /// The modify command that was refused.
        command: uhca_fwif::consts::CmdOpcode,
        /// The state the device reports for the QP now, if it could be queried.
        device_state: Option<uhca_fwif::consts::QpState>,
        /// The command error as the device reported it.
        cause: CmdError,
    },
    /// The IB state table (IBA 11.2.1, `ibv_modify_qp(3)`) has no transition from the
    /// state the driver has the QP in to the one asked for. Nothing was sent and nothing
    /// changed.
    IllegalTransition {
        /// The state the QP is in ([`Qp::state`](crate::verbs::Qp::state)).
        from: uhca_fwif::consts::QpState,
        /// The state asked for.
        to: uhca_fwif::consts::QpState,
    },
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Command(e) => e.fmt(f),
            Error::CommandQueue(e) => write!(f, "command queue: {e}"),
            Error::InitSeg(e) => e.fmt(f),
            Error::Fatal(e) => write!(f, "device is in a fatal state: {e}"),
            Error::Dma(e) => write!(f, "DMA: {e}"),
            Error::Config(e) => e.fmt(f),
            Error::NotAConnectX { vendor, device } => write!(
                f,
                "PCI function {vendor:04x}:{device:04x} is not a ConnectX (vendor 15b3)"
            ),
            Error::Unsupported(what) => write!(f, "not supported by this device: {what}"),
            Error::InvalidArgument(e) => e.fmt(f),
            Error::OutOfPages => f.write_str("firmware page pool exhausted"),
            Error::PageBudget {
                requested,
                held,
                budget,
            } => write!(
                f,
                "firmware asked for {requested} pages holding {held}; the budget is {budget}"
            ),
            Error::DeviceMisbehaved(what) => write!(f, "device misbehaved: {what}"),
            Error::TornDown => f.write_str("the HCA was torn down"),
            Error::WrongHca => f.write_str("the object belongs to another HCA"),
            Error::BadCompletion(e) => e.fmt(f),
            Error::BadQpState {
                qpn,
                command,
                device_state,
                cause,
            } => {
                write!(
                    f,
                    "QP {qpn:#x}: {command} refused, the QP is not in its source state"
                )?;
                if let Some(s) = device_state {
                    write!(f, " (the device has it in {s})")?;
                }
                write!(f, ": {cause}")
            }
            Error::IllegalTransition { from, to } => {
                write!(
                    f,
                    "no QP transition from {from} to {to} in the IB state table"
                )
            }
        }
    }
}

impl core::error::Error for Error {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Error::Command(e) | Error::BadQpState { cause: e, .. } => Some(e),
            Error::CommandQueue(e) => Some(e),
            Error::InitSeg(e) => Some(e),
            Error::Fatal(e) => Some(e),
            Error::Dma(e) => Some(e),
            Error::Config(e) => Some(e),
            Error::BadCompletion(e) => Some(e),
            Error::InvalidArgument(e) => Some(e),
            _ => None,
        }
    }
}

impl From<InvalidArgument> for Error {
    fn from(e: InvalidArgument) -> Self {
        Error::InvalidArgument(e)
    }
}

impl From<CmdError> for Error {
    fn from(e: CmdError) -> Self {
        Error::Command(e)
    }
}

impl From<CmdInitError> for Error {
    fn from(e: CmdInitError) -> Self {
        Error::CommandQueue(e)
    }
}

impl From<InitSegError> for Error {
    fn from(e: InitSegError) -> Self {
        Error::InitSeg(e)
    }
}

impl From<DmaError> for Error {
    fn from(e: DmaError) -> Self {
        Error::Dma(e)
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Error::Config(e)
    }
}

impl From<FatalHealth> for Error {
    fn from(e: FatalHealth) -> Self {
        Error::Fatal(e)
    }
}

impl Error {
    /// The command status, if this is a command that the firmware executed and failed.
    pub fn command_status(&self) -> Option<uhca_fwif::consts::CmdStatus> {
        match self {
            Error::Command(CmdError::Status { status, .. })
            | Error::BadQpState {
                cause: CmdError::Status { status, .. },
                ..
            } => Some(*status),
            _ => None,
        }
    }
}

/// The driver's result type.
pub type Result<T> = core::result::Result<T, Error>;

/// An argument the driver refused before sending anything: which argument ([`Arg`]), the
/// value given, and the limit it broke ([`Limit`]).
///
/// ```
/// use uhca_driver::error::{Arg, InvalidArgument, Limit};
/// use uhca_driver::Error;
///
/// fn explain(e: &Error) -> Option<String> {
///     match e {
///         Error::InvalidArgument(InvalidArgument { arg, given, limit: Limit::Max(max), .. }) => {
///             Some(format!("{arg} is {given}, at most {max}"))
///         }
///         _ => None,
///     }
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidArgument {
    /// The argument (a field of the attributes given, or a parameter), by its verbs name.
    pub arg: Arg,
    /// The value given (a flag set as its bits, a range as its end, a code as its number).
    pub given: u64,
    /// What it broke.
    pub limit: Limit,
}

impl InvalidArgument {
    /// `given` is above `max`, the largest value accepted.
    pub const fn max(arg: Arg, given: u64, max: u64) -> Self {
        InvalidArgument {
            arg,
            given,
            limit: Limit::Max(max),
        }
    }

    /// `given` is below `min`, the smallest value accepted (a zero where one is needed).
    pub const fn min(arg: Arg, given: u64, min: u64) -> Self {
        InvalidArgument {
            arg,
            given,
            limit: Limit::Min(min),
        }
    }

    /// `given` breaks a rule that no single number states (named by `rule`).
    pub const fn rule(arg: Arg, given: u64, rule: &'static str) -> Self {
        InvalidArgument {
            arg,
            given,
            limit: Limit::Rule(rule),
        }
    }

    /// `given` as a `u64` (saturating: a value too large for it is `u64::MAX`).
    pub(crate) fn wide<T: TryInto<u64>>(given: T) -> u64 {
        given.try_into().unwrap_or(u64::MAX)
    }
}

impl core::fmt::Display for InvalidArgument {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "invalid argument {}: {} given", self.arg, self.given)?;
        match self.limit {
            Limit::Max(max) => write!(f, ", at most {max}"),
            Limit::Min(min) => write!(f, ", at least {min}"),
            Limit::Rule(rule) => write!(f, ": {rule}"),
        }
    }
}

impl core::error::Error for InvalidArgument {}

/// The limit an [`InvalidArgument`] broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// The largest value accepted (the device's capability, the width of the field, or
    /// another argument's value, as the [`Arg`] documents).
    Max(u64),
    /// The smallest value accepted.
    Min(u64),
    /// A rule no single number states (for example remote write without local write, or
    /// an address of the other link layer); the text says which.
    Rule(&'static str),
}

macro_rules! args {
    ($($(#[$doc:meta])* $name:ident => $verbs:literal,)*) => {
        /// The argument an [`InvalidArgument`] names, after its verbs (`ibv_*`) or PRM name,
        /// which [`Display`](core::fmt::Display) prints.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Arg {
            $($(#[$doc])* $name,)*
        }

        impl Arg {
            /// The verbs (or PRM) name of the argument, as [`Display`](core::fmt::Display)
            /// prints it.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Arg::$name => $verbs,)*
                }
            }
        }
    };
}

args! {
    /// A port number (`port_num`): 1 to the HCA's port count.
    Port => "port_num",
    /// A QP's `max_send_wr` (limit: the device's largest queue, `log_max_qp_sz`).
    MaxSendWr => "max_send_wr",
    /// A QP's `max_send_sge` (limit: what a send WQE holds).
    MaxSendSge => "max_send_sge",
    /// A QP's `max_inline_data` (limit: what a send WQE holds).
    MaxInlineData => "max_inline_data",
    /// A QP's `max_recv_wr` (limit: the device's largest queue; 0 with an SRQ).
    MaxRecvWr => "max_recv_wr",
    /// A QP's `max_recv_sge` (limit: what a receive WQE holds; 0 with an SRQ).
    MaxRecvSge => "max_recv_sge",
    /// A P_Key index (`pkey_index`): inside the port's P_Key table.
    PkeyIndex => "pkey_index",
    /// The access rights (`qp_access_flags`, `access` of an MR), as their bits.
    AccessFlags => "access_flags",
    /// `path_mtu`, as its IB MTU code.
    PathMtu => "path_mtu",
    /// `dest_qp_num`: a 24-bit number.
    DestQpn => "dest_qp_num",
    /// `rq_psn`: a 24-bit number.
    RqPsn => "rq_psn",
    /// `sq_psn`: a 24-bit number.
    SqPsn => "sq_psn",
    /// `min_rnr_timer`: a 5-bit code.
    MinRnrTimer => "min_rnr_timer",
    /// `max_dest_rd_atomic` (limit: `log_max_ra_res_qp`).
    MaxDestRdAtomic => "max_dest_rd_atomic",
    /// `max_rd_atomic` (limit: `log_max_ra_req_qp`).
    MaxRdAtomic => "max_rd_atomic",
    /// `timeout`: a 5-bit code.
    Timeout => "timeout",
    /// `qkey`: a datagram QP's Q_Key (a connected QP has none).
    Qkey => "qkey",
    /// `retry_cnt`: 3 bits.
    RetryCnt => "retry_cnt",
    /// `rnr_retry`: 3 bits.
    RnrRetry => "rnr_retry",
    /// An address handle (`ah_attr`) of the other link layer than the port's.
    AhAttr => "ah_attr",
    /// A destination LID (`dlid`): not 0.
    Dlid => "dlid",
    /// A service level (`sl`): 4 bits on InfiniBand, 3 (the Ethernet priority) on RoCE.
    ServiceLevel => "sl",
    /// A source GID index (`sgid_index`) of an address handle: inside the GID table.
    SgidIndex => "sgid_index",
    /// A GID index of the RoCE address table.
    GidIndex => "gid_index",
    /// A VLAN id: 12 bits.
    VlanId => "vlan_id",
    /// An IP address: not the unspecified address.
    IpAddress => "ip_address",
    /// The number of completions a CQ holds (`cqe`; limit: `log_max_cq_sz`).
    Cqe => "cqe",
    /// A CQ's moderation period (`cq_period`, µs): 12 bits.
    CqPeriod => "cq_period",
    /// A memory region's length (limit: `log_max_mrw_sz`, or the buffer it is in).
    MrLength => "length",
    /// The end of a range (`offset + len`) inside a memory region or a buffer.
    RangeEnd => "offset + len",
    /// The address a memory key starts at (`iova` of `ibv_reg_mr_iova2`): its offset
    /// within a page must be the memory's.
    MrIova => "iova",
    /// A scatter/gather entry's length: 32 bits.
    SgeLength => "sge.length",
    /// An SRQ's `max_wr` (limit: the device's largest SRQ).
    SrqMaxWr => "max_wr",
    /// An SRQ's `max_sge` (limit: what a receive WQE holds).
    SrqMaxSge => "max_sge",
    /// An SRQ's `srq_limit` (limit: below the SRQ's size).
    SrqLimit => "srq_limit",
    /// The EQ's size (`HcaConfig::log_eq_size`).
    LogEqSize => "log_eq_size",
}

impl core::fmt::Display for Arg {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// A CQE the driver refused to believe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BadCqe {
    /// It names a QP that does not complete to this CQ (nor did lately).
    UnknownQp {
        /// The QPN in the CQE.
        qpn: u32,
    },
    /// It names a QP whose send (requester CQE) or receive (responder CQE) queue does not
    /// complete to this CQ, or that has no such queue.
    WrongCq {
        /// The QP.
        qpn: u32,
        /// This CQ.
        cqn: u32,
    },
    /// Its WQE counter names no outstanding WQE of the QP (or SRQ).
    NotOutstanding {
        /// The QP.
        qpn: u32,
        /// The counter.
        wqe_counter: u16,
    },
    /// A successful requester CQE whose WQE opcode is not the one posted there.
    OpcodeMismatch {
        /// The QP.
        qpn: u32,
        /// The counter.
        wqe_counter: u16,
        /// The raw WQE opcode the CQE reports.
        reported: u8,
    },
    /// A receive CQE whose byte count is larger than the oldest receive WQE of the QP
    /// (the one it names) can take: the sum of its scatter entries. (Two fields only: a
    /// larger error would slow every poll, which returns it by value.)
    ByteCountTooLarge {
        /// The QP.
        qpn: u32,
        /// The byte count the CQE reports.
        byte_cnt: u32,
    },
    /// A CQE opcode the driver does not expect on a verbs CQ (resize, signature error, no
    /// packet, reserved values).
    UnexpectedOpcode {
        /// The QP.
        qpn: u32,
        /// The CQE opcode.
        opcode: CqeOpcode,
    },
}

impl core::fmt::Display for BadCqe {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BadCqe::UnknownQp { qpn } => write!(f, "CQE for unknown QP {qpn:#x}"),
            BadCqe::WrongCq { qpn, cqn } => {
                write!(
                    f,
                    "CQE for QP {qpn:#x}, which does not complete to CQ {cqn:#x}"
                )
            }
            BadCqe::NotOutstanding { qpn, wqe_counter } => write!(
                f,
                "CQE for QP {qpn:#x} names WQE {wqe_counter}, which is not outstanding"
            ),
            BadCqe::OpcodeMismatch {
                qpn,
                wqe_counter,
                reported,
            } => write!(
                f,
                "CQE for QP {qpn:#x} WQE {wqe_counter} reports WQE opcode {reported:#x}, not the one posted"
            ),
            BadCqe::ByteCountTooLarge { qpn, byte_cnt } => write!(
                f,
                "CQE for QP {qpn:#x} reports {byte_cnt} bytes, more than its receive can take"
            ),
            BadCqe::UnexpectedOpcode { qpn, opcode } => {
                write!(f, "unexpected {opcode} for QP {qpn:#x}")
            }
        }
    }
}

impl core::error::Error for BadCqe {}

/// [`Cq::poll`](crate::verbs::Cq::poll) met a CQE it refused (it is consumed); the `polled` completions before it
/// are valid and in the caller's slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollError {
    /// Completions written to the slice before the bad CQE.
    pub polled: usize,
    /// The CQ.
    pub cqn: u32,
    /// What was wrong with it.
    pub cqe: BadCqe,
}

impl core::fmt::Display for PollError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "device wrote a bad CQE to CQ {:#x} (after {} good ones): {}",
            self.cqn, self.polled, self.cqe
        )
    }
}

impl core::error::Error for PollError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.cqe)
    }
}

impl From<PollError> for Error {
    fn from(e: PollError) -> Error {
        Error::BadCompletion(e)
    }
}
