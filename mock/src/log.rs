//! What the model records for tests and users: the command log, the doorbell log (which the
//! datapath engine consumes) and notes about driver behaviour that hardware would silently
//! ignore.

use std::collections::VecDeque;
use uhca_fwif::consts::{CmdOpcode, CmdStatus, DeliveryStatus};

/// Most records each log keeps; older records are dropped first.
pub const LOG_CAPACITY: usize = 65_536;

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandOutcome {
    /// The firmware executed it and gave the entry back.
    Completed,
    /// The entry was refused at delivery (the delivery status says why); nothing was executed.
    DeliveryError,
    /// The firmware is holding it: waiting for pages it asked for with a PAGE_REQUEST event.
    /// A later record with the same slot tells how it ended.
    Deferred,
    /// An injected fault: it will never complete (until the test releases it).
    Hung,
    /// An injected fault: it completed with a chosen status and syndrome without executing.
    Injected,
}

/// One command the firmware saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandRecord {
    /// Model time when the firmware processed it, in nanoseconds.
    pub time_ns: u64,
    /// Command-queue slot.
    pub slot: u8,
    /// The token of the entry.
    pub token: u8,
    /// Opcode (from the input header; `Unknown(0)` if the input could not be read).
    pub opcode: CmdOpcode,
    /// op_mod from the input header.
    pub op_mod: u16,
    /// ACCESS_REGISTER's `register_id` (0 for every other command).
    pub register_id: u16,
    /// Delivery status written to `status_own`.
    pub delivery: DeliveryStatus,
    /// Command status written to the output header.
    pub status: CmdStatus,
    /// Syndrome written to the output header.
    pub syndrome: u32,
    /// How it ended.
    pub outcome: CommandOutcome,
}

/// One command with its bytes: the record of [`CommandRecord`] and the command's whole input
/// (inline part and mailboxes, as long as the entry's `inlen`) and output (as the firmware
/// wrote it, `outlen` bytes). Kept only when asked
/// ([`MockHca::record_command_bytes`](crate::MockHca::record_command_bytes)), since the
/// bytes cost an allocation per command; a tool that compares what two drivers sent reads
/// them field by field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandBytes {
    /// The command's record, as in the command log.
    pub record: CommandRecord,
    /// The input as the firmware read it (empty when the entry was refused before the input
    /// could be read).
    pub input: Vec<u8>,
    /// The output the firmware wrote (empty when none was written: a delivery error, a hung
    /// or deferred command).
    pub output: Vec<u8>,
}

/// One write to a UAR page (doorbells), in the order the driver made them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DoorbellRecord {
    /// Model time of the write, in nanoseconds.
    pub time_ns: u64,
    /// UAR page index (`bar offset / 4096`).
    pub uar: u32,
    /// Offset within the UAR page (0x20 CQ, 0x40/0x48 EQ, 0x800.. send doorbells).
    pub offset: u32,
    /// Width of the write in bytes (4 or 8).
    pub width: u8,
    /// The bytes written, in memory order (the first `width` bytes are meaningful).
    pub bytes: [u8; 8],
    /// Whether the UAR page was allocated (ALLOC_UAR) when written.
    pub allocated: bool,
}

impl DoorbellRecord {
    /// The written bytes read as a big-endian number of the write's width (how mlx5
    /// doorbells are defined).
    pub fn value_be(&self) -> u64 {
        if self.width == 4 {
            u32::from_be_bytes([self.bytes[0], self.bytes[1], self.bytes[2], self.bytes[3]]) as u64
        } else {
            u64::from_be_bytes(self.bytes)
        }
    }

    /// Whether the write hit a send doorbell (a BlueFlame register, offset 0x800 and up).
    pub fn is_send_doorbell(&self) -> bool {
        self.offset as usize >= uhca_fwif::consts::BF_OFFSET
    }
}

/// Something the driver did that the model accepted or ignored, as hardware would, but that
/// is probably a bug (a doorbell while the firmware initializes, a write to a read-only
/// register, an EQ doorbell on the wrong UAR page ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Model time, in nanoseconds.
    pub time_ns: u64,
    /// What happened.
    pub text: String,
}

/// A bounded record list.
#[derive(Debug)]
pub(crate) struct Ring<T> {
    items: VecDeque<T>,
    total: u64,
}

impl<T: Clone> Ring<T> {
    pub(crate) fn new() -> Self {
        Ring {
            items: VecDeque::new(),
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, item: T) {
        if self.items.len() == LOG_CAPACITY {
            self.items.pop_front();
        }
        self.items.push_back(item);
        self.total += 1;
    }

    pub(crate) fn snapshot(&self) -> Vec<T> {
        self.items.iter().cloned().collect()
    }

    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.items.drain(..).collect()
    }

    pub(crate) fn clear(&mut self) {
        self.items.clear();
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }
}
