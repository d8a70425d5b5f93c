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
    /// A caller's argument is invalid (named).
    InvalidArgument(&'static str),
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
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
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
            _ => None,
        }
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
