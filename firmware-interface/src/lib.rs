//! # uhca-fwif: the mlx5 firmware interface
//!
//! The hardware contract between a ConnectX ("mlx5") HCA and its driver, and nothing else:
//! every byte layout the two share and every constant, with no behaviour.
//!
//! * [`field`]: the PRM's big-endian bit-field model and the declaration macros;
//! * [`init_seg`]: the initialization segment at the start of BAR0 and the health buffer;
//! * [`cmdq`]: the command-queue entry, the mailbox block and the command headers;
//! * [`cmd`]: every command's input and output layout, linked by the [`cmd::Command`] trait;
//! * [`ctx`]: the contexts the commands carry (`cmd_hca_cap`, `qpc`, `cqc`, ...);
//! * [`wqe`], [`cqe`], [`eqe`], [`doorbell`]: the datapath layouts;
//! * [`consts`]: opcodes, statuses, syndromes, event types, states, as enums that keep
//!   unknown values.
//!
//! Names follow the PRM (and Linux's `mlx5_ifc.h`), so `cqc::log_cq_size` is the field
//! Linux writes with `MLX5_SET(cqc, cqc, log_cq_size, v)`. Every layout and constant is
//! checked against the PRM reference tables by this crate's conformance test.
//!
//! ```
//! use uhca_fwif::cmd::{Command, CreateCqIn};
//! let mut inp = CreateCqIn::default();
//! inp.set_opcode(CreateCqIn::OPCODE.raw());
//! inp.cq_context_mut().set_log_cq_size(10);
//! assert_eq!(inp.cq_context().log_cq_size(), 10);
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod field;

pub mod cmd;
pub mod cmdq;
pub mod consts;
pub mod cqe;
pub mod ctx;
pub mod doorbell;
pub mod eqe;
pub mod init_seg;
pub mod wqe;

pub use field::{Field, LayoutInfo, PrmLayout};
/// The zerocopy crate, re-exported for users of the byte layouts (`IntoBytes`, `FromBytes`).
pub use zerocopy;
