//! The command-queue engine: slots, tokens, mailbox chains, the doorbell, completion,
//! timeouts, and typed errors.
//!
//! The command queue is one 4 KiB page of `1 << log_cmdq_size` entries
//! ([`uhca_fwif::cmdq::CmdLayout`]). A command's first 16 input bytes and first 16 output
//! bytes travel in its entry; longer inputs and outputs go through chains of 1 KiB-aligned
//! mailbox blocks ([`uhca_fwif::cmdq::CmdProtBlock`]: 512 data bytes, the next block's
//! address, the block number and the command's token). Each slot gets its own mailboxes,
//! allocated on first use and grown when a longer command needs them.
//!
//! Posting: entry and mailboxes, owner bit to hardware, store barrier, then the big-endian
//! doorbell `1 << slot` at the initialization segment's `command_doorbell_vector`.
//! Completion: the owner bit returning to software ([`CompletionMode::Polling`]), or the
//! caller reporting the slot from a command-completion EQE ([`CompletionMode::Events`],
//! through [`WaitContext::report_completions`] or [`CmdQueue::report_completions`]).
//!
//! While a command is outstanding, [`CmdQueue::exec_with`] calls the caller's hook between
//! checks, so the caller can poll its event queue and answer page requests with
//! [`WaitContext::manage_pages`], which uses the last slot, kept for MANAGE_PAGES (as
//! Linux does). A command that times out leaves its slot quarantined (and its mailboxes
//! allocated) until the device gives the slot back.
//!
//! ```
//! # use uhca_hal::testing::FakePlatform;
//! # use uhca_fwif::init_seg::initial_seg;
//! use uhca_hal::cmdq::{CmdQueue, CmdQueueConfig};
//! let p = FakePlatform::new();
//! # p.bar.set_field(initial_seg::cmd_interface_rev, 5);
//! # p.bar.set_field(initial_seg::log_cmdq_size, 5);
//! # p.bar.set_field(initial_seg::log_cmdq_stride, 6);
//! let cmdq = CmdQueue::new(&p, CmdQueueConfig::default()).unwrap();
//! assert_eq!(cmdq.slots(), 32);
//! ```

use crate::barriers;
use crate::dma::{DmaBuf, DmaMem};
use crate::init_seg::{InitSeg, InitSegError};
use crate::platform::{Bar, Clock, Dma, DmaError};
use uhca_fwif::cmd::{Command, ManagePagesIn, ManagePagesOut, mbox_out};
use uhca_fwif::cmdq::{
    CMD_INLINE_IN_BYTES, CMD_INLINE_OUT_BYTES, CmdLayout, CmdProtBlock, MAILBOX_ALIGN,
    mailbox_blocks,
};
use uhca_fwif::consts::{
    ADAPTER_PAGE_SIZE, CMD_DATA_BLOCK_SIZE, CMD_OWNER_HW, CMD_OWNER_SW, CmdOpcode, CmdStatus,
    DeliveryStatus, MAX_COMMANDS, PCI_CMD_XPORT,
};
use zerocopy::{FromZeros, IntoBytes};

const ENTRY: usize = core::mem::size_of::<CmdLayout>();
const STATUS_OWN_OFF: usize = core::mem::offset_of!(CmdLayout, status_own);
const IN_OFF: usize = core::mem::offset_of!(CmdLayout, r#in);
const OUT_OFF: usize = core::mem::offset_of!(CmdLayout, out);
const BLOCK: usize = core::mem::size_of::<CmdProtBlock>();

/// Default command timeout (Linux `CMD` timeout: 60 s).
pub const CMD_TIMEOUT_NS: u64 = 60_000_000_000;

/// How the engine learns that a command completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionMode {
    /// Poll the entry's owner bit.
    Polling,
    /// Wait until the caller reports the slot from a command-completion EQE (and the owner
    /// bit is back with software). Page commands issued from the wait hook are always
    /// polled.
    Events,
}

/// Settings of the command queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdQueueConfig {
    /// How long a command may take ([`CMD_TIMEOUT_NS`]).
    pub timeout_ns: u64,
    /// Delay between checks of an outstanding command, microseconds.
    pub poll_us: u32,
    /// Completion by polling or by events.
    pub completion: CompletionMode,
}

impl Default for CmdQueueConfig {
    fn default() -> Self {
        CmdQueueConfig {
            timeout_ns: CMD_TIMEOUT_NS,
            poll_us: 10,
            completion: CompletionMode::Polling,
        }
    }
}

/// A failed command. Every variant names the command's opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmdError {
    /// The firmware executed the command and reported an error status.
    Status {
        /// The command.
        opcode: CmdOpcode,
        /// `mbox_out.status`.
        status: CmdStatus,
        /// `mbox_out.syndrome` (firmware-internal code).
        syndrome: u32,
    },
    /// The firmware could not take the command (`status_own` delivery status).
    Delivery {
        /// The command.
        opcode: CmdOpcode,
        /// The delivery status.
        status: DeliveryStatus,
    },
    /// No completion within the timeout; the slot stays quarantined until the device
    /// gives it back.
    Timeout {
        /// The command.
        opcode: CmdOpcode,
        /// The quarantined slot.
        slot: u8,
        /// Nanoseconds waited.
        waited_ns: u64,
    },
    /// Every usable slot is busy or quarantined (or, for a page command, the page slot).
    NoFreeSlot {
        /// The command.
        opcode: CmdOpcode,
    },
    /// Mailbox memory could not be allocated.
    Dma {
        /// The command.
        opcode: CmdOpcode,
        /// The platform's error.
        error: DmaError,
    },
    /// A page command was issued from a hook while another page command was outstanding.
    Reentered {
        /// The command.
        opcode: CmdOpcode,
    },
    /// The wait hook gave the command up before it completed (for example because the
    /// device reported a fatal error); the slot stays quarantined as after a timeout.
    Abandoned {
        /// The command.
        opcode: CmdOpcode,
        /// The quarantined slot.
        slot: u8,
    },
}

/// The PRM name without its `MLX5_*_` prefix, or `None`.
fn short(name: Option<&'static str>, prefix: &str) -> Option<&'static str> {
    name.map(|n| n.strip_prefix(prefix).unwrap_or(n))
}

struct Op(CmdOpcode);

impl core::fmt::Display for Op {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match short(self.0.prm_name(), "MLX5_CMD_OP_") {
            Some(n) => write!(f, "{n} ({:#x})", self.0.raw()),
            None => write!(f, "command {:#x}", self.0.raw()),
        }
    }
}

impl CmdError {
    /// The opcode of the failed command.
    pub fn opcode(&self) -> CmdOpcode {
        match *self {
            CmdError::Status { opcode, .. }
            | CmdError::Delivery { opcode, .. }
            | CmdError::Timeout { opcode, .. }
            | CmdError::NoFreeSlot { opcode }
            | CmdError::Dma { opcode, .. }
            | CmdError::Reentered { opcode }
            | CmdError::Abandoned { opcode, .. } => opcode,
        }
    }
}

impl core::fmt::Display for CmdError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let op = Op(self.opcode());
        match *self {
            CmdError::Status {
                status, syndrome, ..
            } => {
                let name = short(status.prm_name(), "MLX5_CMD_STAT_").unwrap_or("UNKNOWN_STATUS");
                write!(
                    f,
                    "{op} failed: {name} ({:#x}), syndrome {syndrome:#x}",
                    status.raw()
                )
            }
            CmdError::Delivery { status, .. } => {
                let name = short(status.prm_name(), "MLX5_CMD_DELIVERY_STAT_").unwrap_or("UNKNOWN");
                write!(f, "{op} not delivered: {name} ({:#x})", status.raw())
            }
            CmdError::Timeout {
                slot, waited_ns, ..
            } => write!(
                f,
                "{op} timed out after {} ms; slot {slot} quarantined until the device returns it",
                waited_ns / 1_000_000
            ),
            CmdError::NoFreeSlot { .. } => write!(f, "{op}: no free command slot"),
            CmdError::Dma { error, .. } => write!(f, "{op}: mailbox allocation failed: {error}"),
            CmdError::Reentered { .. } => {
                write!(f, "{op}: page command issued while one is outstanding")
            }
            CmdError::Abandoned { slot, .. } => write!(
                f,
                "{op} given up while outstanding; slot {slot} quarantined until the device returns it"
            ),
        }
    }
}

impl core::error::Error for CmdError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            CmdError::Dma { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Why the command queue could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmdInitError {
    /// Revision, geometry or address rejected.
    InitSeg(InitSegError),
    /// The queue page could not be allocated.
    Dma(DmaError),
}

impl core::fmt::Display for CmdInitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CmdInitError::InitSeg(e) => write!(f, "command queue set-up: {e}"),
            CmdInitError::Dma(e) => write!(f, "command queue set-up: {e}"),
        }
    }
}

impl core::error::Error for CmdInitError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            CmdInitError::InitSeg(e) => Some(e),
            CmdInitError::Dma(e) => Some(e),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Free,
    Busy,
    Quarantined,
}

/// The command queue of one device. `H` is a handle to the platform (for example `&P`),
/// used for the doorbell, the clock and mailbox allocation.
///
/// Dropping it frees the queue page and the mailboxes (except those of quarantined slots,
/// which are leaked because the device may still write them): drop it only after the
/// device is disabled or no longer has a command outstanding.
pub struct CmdQueue<H: Bar + Dma + Clock + Clone> {
    h: H,
    page: Option<DmaBuf<H>>,
    log_stride: u8,
    nslots: u8,
    state: [Slot; MAX_COMMANDS],
    mbox_in: [Option<DmaBuf<H>>; MAX_COMMANDS],
    mbox_out: [Option<DmaBuf<H>>; MAX_COMMANDS],
    token: u8,
    cfg: CmdQueueConfig,
    reported: u32,
    in_page_cmd: bool,
    /// Set by [`WaitContext::abandon`]: the command being waited for is given up.
    abandon: bool,
}

impl<H: Bar + Dma + Clock + Clone> core::fmt::Debug for CmdQueue<H> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CmdQueue")
            .field("slots", &self.nslots)
            .field("quarantined", &format_args!("{:#x}", self.quarantined()))
            .finish_non_exhaustive()
    }
}

/// The hook [`CmdQueue::exec_with`] runs while a command is outstanding.
pub type WaitHook<'a, H> = dyn FnMut(&mut WaitContext<'_, H>) + 'a;

/// What the wait hook can do while a command is outstanding.
pub struct WaitContext<'a, H: Bar + Dma + Clock + Clone> {
    q: &'a mut CmdQueue<H>,
}

impl<H: Bar + Dma + Clock + Clone> WaitContext<'_, H> {
    /// The platform handle (to poll an event queue, allocate pages, ...).
    pub fn platform(&self) -> &H {
        &self.q.h
    }

    /// Reports slots completed according to a command-completion EQE (its `vector`).
    pub fn report_completions(&mut self, vector: u32) {
        self.q.report_completions(vector);
    }

    /// Gives the outstanding command up: unless it completed meanwhile, the wait ends with
    /// [`CmdError::Abandoned`] and its slot is quarantined, as after a timeout. For a hook
    /// that learns the device will never answer (its health turned fatal).
    pub fn abandon(&mut self) {
        self.q.abandon = true;
    }

    /// Answers a page request with MANAGE_PAGES on the page slot (`pas` holds the 8-byte
    /// big-endian page addresses; `out_pas` receives the addresses the firmware returns).
    /// Completion is polled, whatever the queue's mode.
    ///
    /// # Errors
    ///
    /// As [`CmdQueue::exec`]; [`CmdError::Reentered`] if called from inside another page
    /// command's wait.
    pub fn manage_pages(
        &mut self,
        input: &ManagePagesIn,
        pas: &[u8],
        out_pas: &mut [u8],
    ) -> Result<ManagePagesOut, CmdError> {
        self.q.manage_pages(input, pas, out_pas)
    }
}

impl<H: Bar + Dma + Clock + Clone> CmdQueue<H> {
    /// Checks the command interface (`cmd_interface_rev` = 5, geometry), allocates the queue
    /// page and writes its address to the initialization segment. Wait for firmware
    /// readiness afterwards ([`InitSeg::wait_ready`] with
    /// [`crate::init_seg::FW_INIT_TIMEOUT_NS`]).
    ///
    /// # Errors
    ///
    /// [`CmdInitError::InitSeg`] or [`CmdInitError::Dma`].
    pub fn new(h: H, cfg: CmdQueueConfig) -> Result<Self, CmdInitError> {
        let (log_size, log_stride) = InitSeg::new(&h)
            .check_cmd_interface()
            .map_err(CmdInitError::InitSeg)?;
        let page = DmaBuf::alloc(h.clone(), ADAPTER_PAGE_SIZE, ADAPTER_PAGE_SIZE)
            .map_err(CmdInitError::Dma)?;
        InitSeg::new(&h)
            .set_cmdq_address(page.iova())
            .map_err(CmdInitError::InitSeg)?;
        Ok(CmdQueue {
            page: Some(page),
            log_stride,
            nslots: 1 << log_size,
            state: [Slot::Free; MAX_COMMANDS],
            mbox_in: core::array::from_fn(|_| None),
            mbox_out: core::array::from_fn(|_| None),
            token: 0,
            cfg,
            reported: 0,
            in_page_cmd: false,
            abandon: false,
            h,
        })
    }

    /// Number of slots the device offers.
    pub fn slots(&self) -> usize {
        self.nslots as usize
    }

    /// The slot kept for page commands (the last one).
    pub fn page_slot(&self) -> usize {
        self.nslots as usize - 1
    }

    /// Bit mask of quarantined slots.
    pub fn quarantined(&self) -> u32 {
        self.state
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == Slot::Quarantined)
            .fold(0, |m, (i, _)| m | 1 << i)
    }

    /// Changes the completion mode (switch to [`CompletionMode::Events`] once the EQ for
    /// command completions exists).
    pub fn set_completion_mode(&mut self, mode: CompletionMode) {
        self.cfg.completion = mode;
    }

    /// The platform handle.
    pub fn platform(&self) -> &H {
        &self.h
    }

    fn page(&self) -> &DmaBuf<H> {
        match &self.page {
            Some(p) => p,
            None => unreachable!("the page is only taken in drop"),
        }
    }

    fn owner_is_sw(&self, slot: usize) -> bool {
        self.page()
            .read_u8((slot << self.log_stride) + STATUS_OWN_OFF)
            & 1
            == CMD_OWNER_SW
    }

    /// Reports slots completed according to a command-completion EQE's `vector`;
    /// quarantined slots among them whose owner bit is back are released.
    pub fn report_completions(&mut self, vector: u32) {
        let mask = if self.nslots >= 32 {
            u32::MAX
        } else {
            (1u32 << self.nslots) - 1
        };
        self.reported |= vector & mask;
        self.reclaim();
    }

    /// Releases quarantined slots the device has given back.
    fn reclaim(&mut self) {
        for s in 0..self.nslots as usize {
            if self.state[s] == Slot::Quarantined && self.owner_is_sw(s) {
                self.state[s] = Slot::Free;
                self.reported &= !(1 << s);
            }
        }
    }

    fn next_token(&mut self) -> u8 {
        self.token = self.token.wrapping_add(1);
        if self.token == 0 {
            self.token = 1;
        }
        self.token
    }

    /// Executes a command and waits for it by polling (or, in event mode, for a report),
    /// with no hook. See [`CmdQueue::exec_with`].
    ///
    /// # Errors
    ///
    /// See [`CmdError`].
    pub fn exec<C: Command>(
        &mut self,
        input: &C,
        extra_in: &[u8],
        out_extra: &mut [u8],
    ) -> Result<C::Out, CmdError> {
        self.exec_inner(input, extra_in, out_extra, None)
    }

    /// Executes a command: `input`, then `extra_in` appended (a flexible array such as
    /// `pas`); the output is `C::Out`, and `out_extra` receives the output bytes after it
    /// (for outputs with a flexible array). `hook` runs between checks while the command
    /// is outstanding; it may report completions and issue page commands.
    ///
    /// # Errors
    ///
    /// [`CmdError::Status`] for an error status in the output, [`CmdError::Delivery`] for a
    /// delivery error, [`CmdError::Timeout`] (the slot is then quarantined),
    /// [`CmdError::NoFreeSlot`], [`CmdError::Dma`].
    pub fn exec_with<C: Command>(
        &mut self,
        input: &C,
        extra_in: &[u8],
        out_extra: &mut [u8],
        hook: &mut WaitHook<'_, H>,
    ) -> Result<C::Out, CmdError> {
        self.exec_inner(input, extra_in, out_extra, Some(hook))
    }

    /// MANAGE_PAGES on the page slot (for page requests served outside a command's wait).
    ///
    /// # Errors
    ///
    /// As [`CmdQueue::exec`]; [`CmdError::Reentered`] if a page command is outstanding.
    pub fn manage_pages(
        &mut self,
        input: &ManagePagesIn,
        pas: &[u8],
        out_pas: &mut [u8],
    ) -> Result<ManagePagesOut, CmdError> {
        let opcode = ManagePagesIn::OPCODE;
        if self.in_page_cmd {
            return Err(CmdError::Reentered { opcode });
        }
        self.reclaim();
        let slot = self.page_slot();
        if self.state[slot] != Slot::Free {
            return Err(CmdError::NoFreeSlot { opcode });
        }
        let mut out = ManagePagesOut::new_zeroed();
        self.in_page_cmd = true;
        let r = self.run(
            slot,
            opcode,
            [input.as_bytes(), pas],
            [out.as_mut_bytes(), out_pas],
            None,
            true,
        );
        self.in_page_cmd = false;
        r.map(|()| out)
    }

    fn exec_inner<C: Command>(
        &mut self,
        input: &C,
        extra_in: &[u8],
        out_extra: &mut [u8],
        hook: Option<&mut WaitHook<'_, H>>,
    ) -> Result<C::Out, CmdError> {
        let opcode = C::OPCODE;
        self.reclaim();
        let usable = if self.nslots > 1 {
            self.nslots as usize - 1
        } else {
            1
        };
        let slot = (0..usable)
            .find(|&s| self.state[s] == Slot::Free)
            .ok_or(CmdError::NoFreeSlot { opcode })?;
        let mut out = <C::Out as FromZeros>::new_zeroed();
        self.run(
            slot,
            opcode,
            [input.as_bytes(), extra_in],
            [out.as_mut_bytes(), out_extra],
            hook,
            false,
        )?;
        Ok(out)
    }

    /// Makes sure slot `slot` has a mailbox chain of at least `blocks` blocks.
    fn ensure_mailbox(
        &mut self,
        slot: usize,
        blocks: usize,
        output: bool,
        opcode: CmdOpcode,
    ) -> Result<(), CmdError> {
        let cur = if output {
            &mut self.mbox_out[slot]
        } else {
            &mut self.mbox_in[slot]
        };
        let have = cur.as_ref().map_or(0, |b| b.len() / MAILBOX_ALIGN);
        if blocks > have {
            // The slot is free, so the device no longer reads its old mailboxes.
            *cur = None;
            let len = (blocks * MAILBOX_ALIGN).next_multiple_of(ADAPTER_PAGE_SIZE);
            *cur = Some(
                DmaBuf::alloc(self.h.clone(), len, ADAPTER_PAGE_SIZE)
                    .map_err(|error| CmdError::Dma { opcode, error })?,
            );
        }
        Ok(())
    }

    /// Runs one command in slot `slot`: mailboxes, entry, doorbell, wait, output.
    fn run(
        &mut self,
        slot: usize,
        opcode: CmdOpcode,
        inp: [&[u8]; 2],
        out: [&mut [u8]; 2],
        hook: Option<&mut WaitHook<'_, H>>,
        page_cmd: bool,
    ) -> Result<(), CmdError> {
        let inlen = inp[0].len() + inp[1].len();
        let outlen = out[0].len() + out[1].len();
        let in_blocks = mailbox_blocks(inlen);
        let out_blocks = mailbox_blocks(outlen.max(CMD_INLINE_OUT_BYTES));
        self.ensure_mailbox(slot, in_blocks, false, opcode)?;
        self.ensure_mailbox(slot, out_blocks, true, opcode)?;
        let token = self.next_token();
        let (in_ptr, out_ptr) = self.write_mailboxes(slot, inp, in_blocks, out_blocks, token);
        let mut e = CmdLayout::new_zeroed();
        e.r#type = PCI_CMD_XPORT;
        e.inlen.set(inlen as u32);
        e.in_ptr.set(in_ptr);
        gather(
            inp,
            0,
            &mut e.as_mut_bytes()[IN_OFF..IN_OFF + CMD_INLINE_IN_BYTES],
        );
        e.out_ptr.set(out_ptr);
        e.outlen.set(outlen as u32);
        e.token = token;
        e.status_own = CMD_OWNER_HW;
        self.post(slot, &e);
        self.wait(slot, opcode, hook, page_cmd)?;
        self.read_output(slot, opcode, out, outlen)
    }

    /// Writes the input mailboxes (data, chain pointer, block number, token in every
    /// block) and the empty output ones of slot `slot`; their addresses (0 for none).
    fn write_mailboxes(
        &mut self,
        slot: usize,
        inp: [&[u8]; 2],
        in_blocks: usize,
        out_blocks: usize,
        token: u8,
    ) -> (u64, u64) {
        let mut block = CmdProtBlock::new_zeroed();
        let in_ptr = if let Some(mb) = self.mbox_in[slot].as_mut().filter(|_| in_blocks > 0) {
            let base = mb.iova();
            for i in 0..in_blocks {
                block.data.fill(0);
                gather(
                    inp,
                    CMD_INLINE_IN_BYTES + i * CMD_DATA_BLOCK_SIZE,
                    &mut block.data,
                );
                fill_trailer(&mut block, base, i, in_blocks, token);
                mb.write_bytes(i * MAILBOX_ALIGN, block.as_bytes());
            }
            base
        } else {
            0
        };
        let out_ptr = if let Some(mb) = self.mbox_out[slot].as_mut().filter(|_| out_blocks > 0) {
            let base = mb.iova();
            block.data.fill(0);
            for i in 0..out_blocks {
                fill_trailer(&mut block, base, i, out_blocks, token);
                mb.write_bytes(i * MAILBOX_ALIGN, block.as_bytes());
            }
            base
        } else {
            0
        };
        (in_ptr, out_ptr)
    }

    /// Writes entry `e` into slot `slot` and rings the command doorbell.
    fn post(&mut self, slot: usize, e: &CmdLayout) {
        let entry_off = slot << self.log_stride;
        let Some(page) = self.page.as_mut() else {
            unreachable!()
        };
        page.write_bytes(entry_off, e.as_bytes());
        self.state[slot] = Slot::Busy;
        self.reported &= !(1 << slot);

        // The entry and its mailboxes must be in memory before the firmware is told.
        barriers::cmd_entry_before_doorbell();
        InitSeg::new(&self.h).ring_cmd_doorbell(1 << slot);
    }

    /// Waits for slot `slot` to complete, running `hook` between checks; a slot that
    /// timed out or was abandoned is quarantined.
    fn wait(
        &mut self,
        slot: usize,
        opcode: CmdOpcode,
        mut hook: Option<&mut WaitHook<'_, H>>,
        page_cmd: bool,
    ) -> Result<(), CmdError> {
        let start = self.h.now_ns();
        loop {
            if self.completed(slot, page_cmd) {
                return Ok(());
            }
            if let Some(h) = hook.as_mut() {
                self.abandon = false;
                h(&mut WaitContext { q: self });
                if self.completed(slot, page_cmd) {
                    return Ok(());
                }
                if core::mem::take(&mut self.abandon) {
                    self.state[slot] = Slot::Quarantined;
                    return Err(CmdError::Abandoned {
                        opcode,
                        slot: slot as u8,
                    });
                }
            }
            let waited_ns = self.h.now_ns().saturating_sub(start);
            if waited_ns >= self.cfg.timeout_ns {
                self.state[slot] = Slot::Quarantined;
                return Err(CmdError::Timeout {
                    opcode,
                    slot: slot as u8,
                    waited_ns,
                });
            }
            self.h.delay_us(self.cfg.poll_us.max(1));
        }
    }

    /// Reads the completed entry of slot `slot` (freeing the slot) and its output into
    /// `out`; the delivery status and the command status as errors.
    fn read_output(
        &mut self,
        slot: usize,
        opcode: CmdOpcode,
        out: [&mut [u8]; 2],
        outlen: usize,
    ) -> Result<(), CmdError> {
        // The owner bit is back: read the output only after it.
        barriers::cmd_owner_before_output_read();
        let mut e = CmdLayout::new_zeroed();
        self.page()
            .read_bytes(slot << self.log_stride, e.as_mut_bytes());
        self.state[slot] = Slot::Free;
        self.reported &= !(1 << slot);
        let delivery = e.delivery_status();
        if delivery != DeliveryStatus::Ok {
            return Err(CmdError::Delivery {
                opcode,
                status: delivery,
            });
        }
        let mut outs = out;
        scatter(
            &mut outs,
            0,
            &e.as_bytes()[OUT_OFF..OUT_OFF + CMD_INLINE_OUT_BYTES],
        );
        if let Some(mb) = self.mbox_out[slot].as_ref() {
            for i in 0..mailbox_blocks(outlen) {
                let mut data = [0u8; CMD_DATA_BLOCK_SIZE];
                mb.read_bytes(i * MAILBOX_ALIGN, &mut data);
                scatter(
                    &mut outs,
                    CMD_INLINE_OUT_BYTES + i * CMD_DATA_BLOCK_SIZE,
                    &data,
                );
            }
        }
        check_status(&outs, opcode)
    }

    fn completed(&self, slot: usize, page_cmd: bool) -> bool {
        let owner_back = self.owner_is_sw(slot);
        match self.cfg.completion {
            CompletionMode::Events if !page_cmd => owner_back && self.reported & (1 << slot) != 0,
            _ => owner_back,
        }
    }
}

/// The status and syndrome of a command's output (the generic output header,
/// `mbox_out`), as an error unless the status is OK.
fn check_status(outs: &[&mut [u8]; 2], opcode: CmdOpcode) -> Result<(), CmdError> {
    let mut hdr = [0u8; 8];
    gather([&*outs[0], &*outs[1]], 0, &mut hdr);
    let status = uhca_fwif::field::get_bits(
        &hdr,
        mbox_out::status.bit_offset as usize,
        mbox_out::status.bit_width as usize,
    ) as u8;
    let syndrome = uhca_fwif::field::get_bits(
        &hdr,
        mbox_out::syndrome.bit_offset as usize,
        mbox_out::syndrome.bit_width as usize,
    ) as u32;
    if status != CmdStatus::Ok.raw() {
        return Err(CmdError::Status {
            opcode,
            status: CmdStatus::from_raw(status),
            syndrome,
        });
    }
    Ok(())
}

/// Copies bytes `at..at + dst.len()` of the concatenation of `src` into `dst` (zeros past
/// the end).
fn gather(src: [&[u8]; 2], at: usize, dst: &mut [u8]) {
    for (i, d) in dst.iter_mut().enumerate() {
        let k = at + i;
        *d = if k < src[0].len() {
            src[0][k]
        } else {
            src[1].get(k - src[0].len()).copied().unwrap_or(0)
        };
    }
}

/// Copies `src` to bytes `at..` of the concatenation of `dst` (dropping what lies past
/// its end).
fn scatter(dst: &mut [&mut [u8]; 2], at: usize, src: &[u8]) {
    let l0 = dst[0].len();
    for (i, s) in src.iter().enumerate() {
        let k = at + i;
        if k < l0 {
            dst[0][k] = *s;
        } else if let Some(d) = dst[1].get_mut(k - l0) {
            *d = *s;
        } else {
            break;
        }
    }
}

fn fill_trailer(block: &mut CmdProtBlock, base: u64, i: usize, n: usize, token: u8) {
    block.next.set(if i + 1 < n {
        base + ((i + 1) * MAILBOX_ALIGN) as u64
    } else {
        0
    });
    block.block_num.set(i as u32);
    block.token = token;
}

const _: () = assert!(BLOCK <= MAILBOX_ALIGN && ENTRY == 64);

impl<H: Bar + Dma + Clock + Clone> Drop for CmdQueue<H> {
    fn drop(&mut self) {
        // The device may still write the entry and the mailboxes of a quarantined slot:
        // leak them rather than free memory it may write.
        let q = self.quarantined();
        if q != 0 {
            for s in 0..MAX_COMMANDS {
                if q & (1 << s) != 0 {
                    core::mem::forget(self.mbox_in[s].take());
                    core::mem::forget(self.mbox_out[s].take());
                }
            }
            core::mem::forget(self.page.take());
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
