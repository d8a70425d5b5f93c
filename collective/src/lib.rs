//! Collectives over uhca: all-reduce, all-gather, reduce-scatter and broadcast among N
//! ranks, each rank an HCA (or a share of one) with an RC queue pair to every other rank.
//!
//! The core is `no_std` (it needs `alloc` for the buffers it sets up once per
//! communicator) and uses nothing but the driver's verbs and the platform's clock, so a
//! bare-metal transport can link it. With the `mock` feature, [`mock::MockCluster`] runs
//! N ranks on N mock HCAs of one mock fabric, a thread per rank.
//!
//! # How data moves
//!
//! Every rank registers one memory region holding, for each peer, an *inbox* of `window`
//! slots of `chunk_bytes` and an *outbox* of as many. A chunk goes out as an RDMA WRITE
//! with immediate from the sender's outbox slot into the receiver's inbox slot
//! `seq mod window`; the immediate is the chunk's sequence number on that channel, and
//! the receive completion (opcode "receive RDMA with immediate") tells the receiver that
//! the chunk landed and how long it is. The receiver checks the number (RC delivers in
//! order, so a gap is a protocol error), reduces or copies the chunk into the caller's
//! buffer on the CPU, and gives the slot back: a zero-length SEND with immediate whose
//! immediate is the count of chunks it consumed on that channel (a *credit*). A sender
//! never has more than `window` chunks the receiver has not given back, so no write
//! lands in a slot still in use, and reuses an outbox slot only after its write
//! completed. Each QP keeps 2·window + 4 receives posted (at most `window` data chunks
//! and `window` credits can be in flight towards it) and reposts one per receive
//! completion.
//!
//! # Algorithms
//!
//! * **Ring all-reduce** (NCCL's ring): the buffer is cut into N segments; in N − 1
//!   reduce-scatter steps rank r sends segment r − 1 − t to rank r + 1 and reduces segment
//!   r − 2 − t coming from rank r − 1, so that it ends holding segment r fully reduced; N − 1
//!   all-gather steps pass the reduced segments around the ring. A received chunk is
//!   forwarded as soon as it has been reduced: the steps overlap, chunk by chunk. The
//!   segment order is NCCL's (`runRing` in NCCL's `src/device/all_reduce.h`, lines 60-93
//!   at commit 0e35f5d: send segment r − 1, receive-reduce-send down to segment r, which
//!   ends fully reduced, then receive-copy-send, and receive segment r + 1 last).
//! * **Reduce-scatter** and **all-gather**: the two halves of the ring, on a buffer of N
//!   blocks (block r is rank r's result, or rank r's contribution).
//! * **Broadcast**: a chain from the root around the ring, pipelined by chunks.
//! * **Recursive-doubling all-reduce** (small messages): log₂ P rounds of pairwise exchange
//!   with rank r xor 2ᵏ among the P = 2^⌊log₂ N⌋ first ranks; the N − P others first hand
//!   their data to rank r − P and get the result back at the end.
//!
//! # Bus bandwidth
//!
//! As nccl-tests defines it: algbw = bytes / time, busbw = algbw × factor, with factor
//! 2(N − 1)/N for all-reduce, (N − 1)/N for all-gather and reduce-scatter (whose bytes are
//! the whole N-block buffer) and 1 for broadcast ([`Collective::bus_factor`]). busbw is
//! what each link carries, comparable to the link's speed whatever N.
//!
//! # Errors
//!
//! Every failure ends the collective with an [`Error`] naming the rank, the collective,
//! the step and, where there is one, the peer: a work request refused, an error or flush
//! completion, a protocol violation, or no progress for [`Config::stall_timeout_ns`].
//! After an error the communicator refuses further collectives ([`Error::Broken`]).
#![no_std]
#![deny(unsafe_code)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod comm;
pub mod dtype;
pub mod line;
mod plan;

#[cfg(feature = "mock")]
pub mod mock;

pub use comm::{Communicator, Endpoint, Pending, PortAddr};
pub use dtype::{Bf16, DataType, Element, F16, ReduceOp};

use uhca_driver::verbs::{BadWr, PollError, WcOpcode, WcStatus};

/// Settings of a communicator. Every rank must use the same `chunk_bytes` and `window`.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Bytes per chunk (the slot size); a multiple of 8. Larger chunks mean fewer
    /// messages, smaller ones a finer pipeline.
    pub chunk_bytes: usize,
    /// Slots per channel: how many chunks a sender may have in flight to one peer (the
    /// credit window).
    pub window: usize,
    /// All-reduces of at most this many bytes use recursive doubling; larger ones the
    /// ring ([`Communicator::all_reduce`]).
    pub small_bytes: usize,
    /// A collective that makes no progress (no completion, no chunk moved) for this long,
    /// by the platform's clock, fails with [`Error::Timeout`].
    pub stall_timeout_ns: u64,
    /// The RC QPs' local ACK timeout code (4.096 µs × 2^code) and retry count: how long a
    /// lost packet or a dead peer takes to become an error completion.
    pub ack_timeout: u8,
    /// Retries after an ACK timeout (0..=7).
    pub retry_cnt: u8,
    /// Called each time a wait made no progress, with the number of rounds in a row
    /// without progress (1, 2, …): a hook to yield or sleep when ranks share CPUs. `None`
    /// (the default): pure polling.
    pub idle: Option<fn(u32)>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            chunk_bytes: 128 * 1024,
            window: 4,
            small_bytes: 4096,
            stall_timeout_ns: 5_000_000_000,
            ack_timeout: 12,
            retry_cnt: 7,
            idle: None,
        }
    }
}

/// A collective operation, for errors and bandwidth figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    /// Ring all-reduce.
    AllReduceRing,
    /// Recursive-doubling all-reduce.
    AllReduceRecursiveDoubling,
    /// All-gather.
    AllGather,
    /// Reduce-scatter.
    ReduceScatter,
    /// Broadcast.
    Broadcast,
}

impl Collective {
    /// The name (as nccl-tests' binaries are named, without `_perf`).
    pub const fn name(self) -> &'static str {
        match self {
            Collective::AllReduceRing => "all_reduce (ring)",
            Collective::AllReduceRecursiveDoubling => "all_reduce (recursive doubling)",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Broadcast => "broadcast",
        }
    }

    /// nccl-tests' bus-bandwidth factor for `n` ranks: busbw = algbw × factor.
    pub fn bus_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Collective::AllReduceRing | Collective::AllReduceRecursiveDoubling => {
                2.0 * (n - 1.0) / n
            }
            Collective::AllGather | Collective::ReduceScatter => (n - 1.0) / n,
            Collective::Broadcast => 1.0,
        }
    }
}

/// Where a collective was when it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The collective.
    pub collective: Collective,
    /// Its step: the ring step (0-based; all-reduce has 2(N − 1)), the broadcast's single
    /// step 0, or for recursive doubling 0 for the fold-in, k + 1 for round k, and the
    /// last for the fold-out.
    pub step: u32,
}

impl core::fmt::Display for Step {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} step {}", self.collective.name(), self.step)
    }
}

/// What a collective or its setup failed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Setting up or tearing down the communicator failed (a driver call, named).
    Setup {
        /// The rank.
        rank: usize,
        /// What was being done.
        what: &'static str,
        /// The driver's error.
        error: uhca_driver::Error,
    },
    /// A bad argument: which, the value given and the limit it broke (see
    /// [`InvalidArgument`]).
    InvalidArgument(InvalidArgument),
    /// The driver refused a work request (e.g. the QP is in error).
    Post {
        /// The rank.
        rank: usize,
        /// The peer of the QP.
        peer: usize,
        /// Where the collective was.
        step: Step,
        /// The driver's error.
        error: BadWr,
    },
    /// A work request completed with an error (a flush, retries exceeded, …).
    Completion {
        /// The rank.
        rank: usize,
        /// The peer of the QP.
        peer: usize,
        /// Where the collective was.
        step: Step,
        /// The completion's status.
        status: WcStatus,
        /// What completed.
        opcode: WcOpcode,
        /// The vendor syndrome.
        vendor_err: u8,
    },
    /// The completion queue held a completion the driver refused.
    Poll {
        /// The rank.
        rank: usize,
        /// Where the collective was.
        step: Step,
        /// The driver's error.
        error: PollError,
    },
    /// A peer broke the protocol (a chunk out of sequence or of the wrong length, a
    /// message on an unknown QP).
    Protocol {
        /// The rank.
        rank: usize,
        /// The peer.
        peer: usize,
        /// Where the collective was.
        step: Step,
        /// What was wrong.
        what: &'static str,
    },
    /// Nothing happened for [`Config::stall_timeout_ns`].
    Timeout {
        /// The rank.
        rank: usize,
        /// The peer the rank was waiting for (the one it receives from, or sends to).
        peer: usize,
        /// Where the collective was.
        step: Step,
    },
    /// An earlier collective failed; the communicator's QPs are unusable.
    Broken {
        /// The rank.
        rank: usize,
    },
}

impl Error {
    /// The rank that reported the error, if it is about one.
    pub fn rank(&self) -> Option<usize> {
        match *self {
            Error::Setup { rank, .. }
            | Error::Post { rank, .. }
            | Error::Completion { rank, .. }
            | Error::Poll { rank, .. }
            | Error::Protocol { rank, .. }
            | Error::Timeout { rank, .. }
            | Error::Broken { rank } => Some(rank),
            Error::InvalidArgument(_) => None,
        }
    }

    /// Where the collective was, if the error happened in one.
    pub fn step(&self) -> Option<Step> {
        match *self {
            Error::Post { step, .. }
            | Error::Completion { step, .. }
            | Error::Poll { step, .. }
            | Error::Protocol { step, .. }
            | Error::Timeout { step, .. } => Some(step),
            _ => None,
        }
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Setup { rank, what, error } => write!(f, "rank {rank}: {what}: {error}"),
            Error::InvalidArgument(e) => e.fmt(f),
            Error::Post {
                rank,
                peer,
                step,
                error,
            } => write!(f, "rank {rank}, {step}: posting to rank {peer}: {error}"),
            Error::Completion {
                rank,
                peer,
                step,
                status,
                opcode,
                vendor_err,
            } => write!(
                f,
                "rank {rank}, {step}: {opcode:?} on the QP to rank {peer} completed with \
                 {status} (vendor syndrome {vendor_err:#x})"
            ),
            Error::Poll { rank, step, error } => {
                write!(f, "rank {rank}, {step}: polling: {error}")
            }
            Error::Protocol {
                rank,
                peer,
                step,
                what,
            } => write!(f, "rank {rank}, {step}: from rank {peer}: {what}"),
            Error::Timeout { rank, peer, step } => write!(
                f,
                "rank {rank}, {step}: no progress within the stall timeout (waiting on rank {peer})"
            ),
            Error::Broken { rank } => write!(
                f,
                "rank {rank}: an earlier collective failed; the communicator cannot be used"
            ),
        }
    }
}

impl core::error::Error for Error {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Error::Setup { error, .. } => Some(error),
            Error::InvalidArgument(e) => Some(e),
            Error::Post { error, .. } => Some(error),
            Error::Poll { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Limits of a refused argument, as the driver states them.
pub use uhca_driver::error::Limit;

/// An argument a communicator refused: which ([`Arg`]), the value given, and the limit
/// it broke ([`Limit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidArgument {
    /// The argument.
    pub arg: Arg,
    /// The value given.
    pub given: u64,
    /// What it broke.
    pub limit: Limit,
}

impl InvalidArgument {
    fn new(arg: Arg, given: usize, limit: Limit) -> Self {
        InvalidArgument {
            arg,
            given: given as u64,
            limit,
        }
    }
    pub(crate) fn max(arg: Arg, given: usize, max: usize) -> Self {
        Self::new(arg, given, Limit::Max(max as u64))
    }
    pub(crate) fn min(arg: Arg, given: usize, min: usize) -> Self {
        Self::new(arg, given, Limit::Min(min as u64))
    }
    pub(crate) fn rule(arg: Arg, given: usize, rule: &'static str) -> Self {
        Self::new(arg, given, Limit::Rule(rule))
    }
}

impl From<InvalidArgument> for Error {
    fn from(e: InvalidArgument) -> Self {
        Error::InvalidArgument(e)
    }
}

impl core::fmt::Display for InvalidArgument {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "invalid argument {}: {} given",
            self.arg.name(),
            self.given
        )?;
        match self.limit {
            Limit::Max(max) => write!(f, ", at most {max}"),
            Limit::Min(min) => write!(f, ", at least {min}"),
            Limit::Rule(rule) => write!(f, ": {rule}"),
            _ => Ok(()),
        }
    }
}

impl core::error::Error for InvalidArgument {}

/// The argument an [`InvalidArgument`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Arg {
    /// The communicator's size (its number of ranks).
    Size,
    /// This rank's number: below the size.
    Rank,
    /// [`Config::chunk_bytes`]: a multiple of 8, 8 to 1 GiB.
    ChunkBytes,
    /// [`Config::window`]: 1 to 1024.
    Window,
    /// The endpoints given to connect: one per rank.
    Endpoints,
    /// A collective's buffer length (elements): a multiple of the size.
    BufferLen,
    /// A broadcast's root: below the size.
    Root,
}

impl Arg {
    /// The argument's name.
    pub const fn name(self) -> &'static str {
        match self {
            Arg::Size => "size",
            Arg::Rank => "rank",
            Arg::ChunkBytes => "chunk_bytes",
            Arg::Window => "window",
            Arg::Endpoints => "endpoints",
            Arg::BufferLen => "buf.len()",
            Arg::Root => "root",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_factors_are_nccl_tests() {
        // all_reduce.cu: 2(n-1)/n; all_gather.cu and reduce_scatter.cu: (n-1)/n;
        // broadcast.cu: 1.
        assert_eq!(Collective::AllReduceRing.bus_factor(8), 1.75);
        assert_eq!(Collective::AllReduceRecursiveDoubling.bus_factor(2), 1.0);
        assert_eq!(Collective::AllGather.bus_factor(4), 0.75);
        assert_eq!(Collective::ReduceScatter.bus_factor(8), 0.875);
        assert_eq!(Collective::Broadcast.bus_factor(16), 1.0);
    }
}
