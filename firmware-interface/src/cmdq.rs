//! The command queue: the 64-byte command-queue entry (`mlx5_cmd_layout`) the driver writes
//! into the command-queue page, and the 576-byte mailbox block (`mlx5_cmd_prot_block`) that
//! carries inputs and outputs longer than the 16 inline bytes.
//!
//! The generic command headers are [`crate::cmd::MboxIn`] (opcode, op_mod) and
//! [`crate::cmd::MboxOut`] (status, syndrome).

use zerocopy::byteorder::big_endian::{U32, U64};

/// Bytes of input carried inline in the entry (`in[4]`).
pub const CMD_INLINE_IN_BYTES: usize = 16;
/// Bytes of output carried inline in the entry (`out[4]`).
pub const CMD_INLINE_OUT_BYTES: usize = 16;
/// Mailbox blocks must be aligned to this many bytes (the low 10 bits of `next` and of
/// `in_ptr`/`out_ptr` are zero).
pub const MAILBOX_ALIGN: usize = 1024;
/// log2 of the command-queue entry size; the initialization segment's `log_cmdq_stride`
/// reports it.
pub const CMD_ENTRY_LOG_STRIDE: u8 = 6;

crate::dp_struct! {
    /// A command-queue entry. The driver fills it, sets `status_own` to hardware ownership
    /// and rings the command doorbell; the firmware writes the output and gives it back.
    pub struct CmdLayout = "mlx5_cmd_layout" {
        /// Transport type; [`crate::consts::PCI_CMD_XPORT`] for PCIe.
        pub r#type: u8,
        /// Reserved.
        pub rsvd0: [u8; 3],
        /// Input length in bytes (inline part included).
        pub inlen: U32,
        /// IOVA of the first input mailbox block (1 KiB aligned), or 0.
        pub in_ptr: U64,
        /// The first 16 bytes of the input.
        pub r#in: [U32; 4],
        /// The first 16 bytes of the output.
        pub out: [U32; 4],
        /// IOVA of the first output mailbox block, or 0.
        pub out_ptr: U64,
        /// Output length in bytes.
        pub outlen: U32,
        /// Token the driver chose; echoed in every mailbox block.
        pub token: u8,
        /// Signature (unused when signatures are off).
        pub sig: u8,
        /// Reserved.
        pub rsvd1: u8,
        /// Bit 0: ownership ([`crate::consts::CMD_OWNER_HW`] while the firmware has it);
        /// bits 7:1: delivery status.
        pub status_own: u8,
    }

    /// A mailbox block: 512 data bytes and a trailer chaining to the next block.
    pub struct CmdProtBlock = "mlx5_cmd_prot_block" {
        /// Data bytes.
        pub data: [u8; 512],
        /// Reserved.
        pub rsvd0: [u8; 48],
        /// IOVA of the next block, or 0.
        pub next: U64,
        /// Index of this block in its chain, from 0.
        pub block_num: U32,
        /// Reserved.
        pub rsvd1: u8,
        /// The command's token.
        pub token: u8,
        /// Control signature.
        pub ctrl_sig: u8,
        /// Signature.
        pub sig: u8,
    }
}

impl CmdLayout {
    /// The ownership bit of `status_own`.
    #[inline]
    pub const fn owner(&self) -> u8 {
        self.status_own & 1
    }

    /// The delivery status (`status_own >> 1`).
    #[inline]
    pub const fn delivery_status(&self) -> crate::consts::DeliveryStatus {
        crate::consts::DeliveryStatus::from_raw(self.status_own >> 1)
    }
}

/// Number of mailbox blocks needed for a message of `len` bytes (inline part included).
#[inline]
pub const fn mailbox_blocks(len: usize) -> usize {
    if len <= CMD_INLINE_IN_BYTES {
        0
    } else {
        (len - CMD_INLINE_IN_BYTES).div_ceil(crate::consts::CMD_DATA_BLOCK_SIZE)
    }
}

const _: () = assert!(core::mem::size_of::<CmdLayout>() == 64);
const _: () = assert!(core::mem::size_of::<CmdProtBlock>() == 576);
