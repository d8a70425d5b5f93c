//! Doorbell records (in host memory, read by the device) and the doorbell registers of a UAR
//! page (in BAR0, written by the driver).
//!
//! * QP doorbell record: dword [`RCV_DBR`] is the receive counter, dword [`SND_DBR`] the send
//!   counter, both big-endian, each the low 16 bits of the producer counter.
//! * CQ doorbell record: dword [`CQ_SET_CI`] is the consumer index (24 bits), dword
//!   [`CQ_ARM_DB`] the arm word (sequence number, command, consumer index).
//! * UAR page: the CQ doorbell at [`CQ_DOORBELL`], the EQ doorbells at
//!   [`EQ_DOORBELL_OFFSET`] (arm) and [`EQ_DOORBELL_UPDATE_CI_OFFSET`] (update only), the
//!   send doorbells (BlueFlame registers) from [`BF_OFFSET`].

pub use crate::consts::{
    BF_OFFSET, CQ_ARM_DB, CQ_DB_REQ_NOT, CQ_DB_REQ_NOT_SOL, CQ_DOORBELL, CQ_SET_CI,
    DB_BLUEFLAME_BUFFER_SIZE, EQ_DOORBELL_OFFSET, EQ_DOORBELL_UPDATE_CI_OFFSET, RCV_DBR, SND_DBR,
};
use zerocopy::byteorder::big_endian::U32;

/// A QP doorbell record.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    zerocopy::FromBytes,
    zerocopy::IntoBytes,
    zerocopy::KnownLayout,
    zerocopy::Immutable,
    zerocopy::Unaligned,
)]
#[repr(C)]
pub struct QpDoorbellRecord {
    /// Receive counter (dword [`RCV_DBR`]).
    pub recv_counter: U32,
    /// Send counter (dword [`SND_DBR`]).
    pub send_counter: U32,
}

/// A CQ doorbell record.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    zerocopy::FromBytes,
    zerocopy::IntoBytes,
    zerocopy::KnownLayout,
    zerocopy::Immutable,
    zerocopy::Unaligned,
)]
#[repr(C)]
pub struct CqDoorbellRecord {
    /// Consumer index, 24 bits (dword [`CQ_SET_CI`]).
    pub set_ci: U32,
    /// Arm word (dword [`CQ_ARM_DB`]): sequence number (29:28), command (24), CI (23:0).
    pub arm_db: U32,
}

/// The second BlueFlame register's offset from the first (send doorbells alternate between
/// the two buffers of a register).
pub const BF_BUFFER_STRIDE: usize = DB_BLUEFLAME_BUFFER_SIZE;

/// Composes a CQ arm word: `sn` (2 bits), command and consumer index.
#[inline]
pub const fn cq_arm_word(sn: u32, solicited_only: bool, ci: u32) -> u32 {
    let cmd = if solicited_only {
        CQ_DB_REQ_NOT_SOL
    } else {
        CQ_DB_REQ_NOT
    };
    ((sn & 3) << 28) | cmd | (ci & 0x00ff_ffff)
}

/// Composes the 64-bit CQ doorbell written to the UAR: arm word in the high half, CQN in
/// the low half.
#[inline]
pub const fn cq_uar_doorbell(arm_word: u32, cqn: u32) -> u64 {
    ((arm_word as u64) << 32) | (cqn & 0x00ff_ffff) as u64
}

/// Composes the 32-bit EQ doorbell: EQN in bits 31:24, consumer index in 23:0.
#[inline]
pub const fn eq_doorbell(eqn: u8, ci: u32) -> u32 {
    ((eqn as u32) << 24) | (ci & 0x00ff_ffff)
}

const _: () = assert!(core::mem::offset_of!(QpDoorbellRecord, recv_counter) == RCV_DBR * 4);
const _: () = assert!(core::mem::offset_of!(QpDoorbellRecord, send_counter) == SND_DBR * 4);
const _: () = assert!(core::mem::offset_of!(CqDoorbellRecord, set_ci) == CQ_SET_CI * 4);
const _: () = assert!(core::mem::offset_of!(CqDoorbellRecord, arm_db) == CQ_ARM_DB * 4);
