//! A hostile device: [`HostilePlatform`] wraps a mock HCA's platform and lies to the driver.
//!
//! A userspace driver maps a device that may be broken or malicious, so the driver must
//! survive a device that breaks the PRM's contract. The wrapper sits between the driver and
//! [`MockPlatform`]: it forwards every access, and rewrites what the device shows the driver
//! where a lie is armed ([`HostilePlatform::arm`]):
//!
//! * **CQEs and EQEs.** It learns where every CQ and EQ lives from the CREATE_CQ and
//!   CREATE_EQ commands that pass through it (their PAS lists, sizes and the numbers the
//!   firmware returned), follows each queue's producer as the device writes entries (the
//!   owner bit, PRM "Completion Queue" and "Event Queue" sections), and rewrites a freshly
//!   written entry before the driver can read it: the QPN, the WQE counter, the byte count,
//!   the opcodes, the error syndrome, the owner bit; a whole entry replaced by the one before
//!   it; the event type and the CQ number or page count of an event.
//! * **Command outputs.** After the model completes a command (synchronously, inside the
//!   command doorbell write), it rewrites the output in the command entry and its mailboxes:
//!   a status or delivery status outside its enum, every capability bit set, a page count
//!   of 2^31 - 1, random bytes, an object number that is already in use.
//! * **The initialization segment.** BAR reads of the health buffer and counter, the
//!   firmware revision and the `initializing` bit can be rewritten; and the whole BAR can
//!   read as all ones with writes dropped, as after a surprise removal (configuration
//!   space too).
//!
//! The wrapper looks at device memory only when the driver calls into its platform (a BAR
//! access, a delay) or when the test calls [`HostilePlatform::tamper`]; a test that moves a
//! fabric itself calls `tamper` between moving it and polling, so every new CQE passes the
//! wrapper before the driver sees it. Like the rest of the model it is written from the PRM
//! and never uses the driver or the HAL's builders and parsers: it decodes commands, CQEs and
//! EQEs from `fwif` layouts.
//!
//! What each lie makes the driver do, and the test that shows it, is tabled in the driver's
//! `HOSTILE.md`.

use crate::model::{MockHca, MockPlatform};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};
use uhca_fwif::cmd::{CreateCqIn, CreateEqIn};
use uhca_fwif::cmdq::{CMD_INLINE_IN_BYTES, CMD_INLINE_OUT_BYTES};
use uhca_fwif::consts::{CmdOpcode, CqeOpcode, EventType};
use uhca_fwif::field::{Field, PrmLayout};
use uhca_fwif::init_seg::{health_buffer, initial_seg};
use uhca_hal::{Bar, Clock, ConfigError, Dma, DmaError, DmaRegion, PciConfig};
use zerocopy::FromBytes;

/// One lie the hostile device can tell. Each is told once, at the first chance after it is
/// armed (a lie about a command waits for a command of its opcode, if one is given).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Lie {
    /// The next CQE names a QP number nobody created.
    CqeUnknownQp,
    /// The next CQE's WQE counter is far outside what was posted.
    CqeCounterOutOfRange,
    /// The next CQE is replaced by a copy of the CQE before it on the same CQ: the same
    /// completion twice (its WQE counter was already completed).
    CqeDuplicate,
    /// The next CQE's byte count is near 4 GiB, beyond any posted buffer.
    CqeByteCountTooLarge,
    /// The next CQE reports another WQE opcode (a requester CQE) or the requester opcode (a
    /// responder CQE) than what was posted.
    CqeOpcodeMismatch,
    /// The next CQE carries a CQE opcode the PRM reserves (0x7).
    CqeReservedOpcode,
    /// The next CQE becomes an error CQE with a syndrome outside the PRM's enum (0xee).
    CqeSyndromeOutOfEnum,
    /// The next CQE's owner bit says "hardware" for three looks at the CQ, then flips back.
    CqeOwnerFlap,
    /// The next EQE gets an event type the PRM does not define (0x7e).
    EqeUnknownType,
    /// The next EQE becomes a completion event for a CQ that does not exist.
    EqeCompUnknownCq,
    /// The next EQE becomes a CQ error event for a CQ that does not exist.
    EqeCqErrorUnknownCq,
    /// The next EQE becomes a page request for 2^31 - 1 pages.
    EqePageRequestHuge,
    /// The next EQE becomes a page request returning 2^31 pages (a negative count).
    EqePageReturnHuge,
    /// The next command completes with a status outside the PRM's enum (0x7f) and a
    /// random syndrome.
    CmdStatusOutOfEnum,
    /// The next command's delivery status (the entry's `status_own[7:1]`) is a value the PRM
    /// does not define (0x7e).
    CmdDeliveryStatusGarbage,
    /// The next QUERY_HCA_CAP output has every capability bit set: every `log_max_*` at 31,
    /// every count at its field's maximum.
    CmdCapsAllOnes,
    /// The next QUERY_PAGES answers 2^31 - 1 pages.
    CmdQueryPagesHuge,
    /// The next command's output (status kept 0) is random bytes.
    CmdOutputGarbage,
    /// The next CREATE_CQ or CREATE_QP returns the number of a CQ or QP that exists.
    CmdExistingNumber,
    /// From now on the health buffer reads "recovery flow required" with a syndrome
    /// outside the PRM's list (0xee).
    HealthSyndromeGarbage,
    /// From now on the health counter reads the same value.
    HealthCounterStuck,
    /// From now on the firmware revision reads differently and `initializing` reads 1.
    InitSegChanges,
    /// From now on every BAR and configuration read returns all ones and every write is
    /// dropped: the device was removed.
    SurpriseRemoval,
}

impl Lie {
    /// Every lie, for tables and seeded runs.
    pub const ALL: [Lie; 23] = [
        Lie::CqeUnknownQp,
        Lie::CqeCounterOutOfRange,
        Lie::CqeDuplicate,
        Lie::CqeByteCountTooLarge,
        Lie::CqeOpcodeMismatch,
        Lie::CqeReservedOpcode,
        Lie::CqeSyndromeOutOfEnum,
        Lie::CqeOwnerFlap,
        Lie::EqeUnknownType,
        Lie::EqeCompUnknownCq,
        Lie::EqeCqErrorUnknownCq,
        Lie::EqePageRequestHuge,
        Lie::EqePageReturnHuge,
        Lie::CmdStatusOutOfEnum,
        Lie::CmdDeliveryStatusGarbage,
        Lie::CmdCapsAllOnes,
        Lie::CmdQueryPagesHuge,
        Lie::CmdOutputGarbage,
        Lie::CmdExistingNumber,
        Lie::HealthSyndromeGarbage,
        Lie::HealthCounterStuck,
        Lie::InitSegChanges,
        Lie::SurpriseRemoval,
    ];

    /// Whether the lie rewrites a CQE.
    pub fn is_cqe(self) -> bool {
        matches!(
            self,
            Lie::CqeUnknownQp
                | Lie::CqeCounterOutOfRange
                | Lie::CqeDuplicate
                | Lie::CqeByteCountTooLarge
                | Lie::CqeOpcodeMismatch
                | Lie::CqeReservedOpcode
                | Lie::CqeSyndromeOutOfEnum
                | Lie::CqeOwnerFlap
        )
    }

    /// Whether the lie rewrites an EQE.
    pub fn is_eqe(self) -> bool {
        matches!(
            self,
            Lie::EqeUnknownType
                | Lie::EqeCompUnknownCq
                | Lie::EqeCqErrorUnknownCq
                | Lie::EqePageRequestHuge
                | Lie::EqePageReturnHuge
        )
    }

    /// Whether the lie rewrites a command's output.
    pub fn is_command(self) -> bool {
        matches!(
            self,
            Lie::CmdStatusOutOfEnum
                | Lie::CmdDeliveryStatusGarbage
                | Lie::CmdCapsAllOnes
                | Lie::CmdQueryPagesHuge
                | Lie::CmdOutputGarbage
                | Lie::CmdExistingNumber
        )
    }

    /// Whether the lie changes what BAR (or configuration) reads return, from the moment it
    /// is armed.
    pub fn is_bar(self) -> bool {
        !(self.is_cqe() || self.is_eqe() || self.is_command())
    }
}

/// A lie that was told: what, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Told {
    /// The lie.
    pub lie: Lie,
    /// The CQ or EQ number, or the command's opcode; 0 for the BAR.
    pub object: u32,
    /// For a CQE: the QPN the device had written (before the lie); otherwise 0.
    pub qpn: u32,
    /// For a CQE: the WQE counter the device had written; otherwise 0.
    pub wqe_counter: u16,
}

/// A queue the device writes entries into (a CQ or an EQ), as its CREATE command described
/// it.
#[derive(Debug)]
struct Queue {
    /// Its number.
    n: u32,
    /// Page addresses.
    pas: Vec<u64>,
    /// Bytes per PAS page.
    page_size: u64,
    /// log2 of the number of entries.
    log: u8,
    /// Bytes per entry (64 or 128; the 64-byte entry is at the end).
    stride: u64,
    /// Entries the device wrote that the wrapper has seen.
    pi: u64,
    /// The entry before `pi`, as the driver was shown it.
    last: Option<[u8; 64]>,
    /// An entry whose owner bit the wrapper flipped, and how many more looks until it is
    /// shown.
    hidden: Option<u32>,
}

impl Queue {
    fn iova(&self, index: u64) -> Option<u64> {
        let off = (index & ((1u64 << self.log) - 1)) * self.stride + self.stride - 64;
        let page = (off / self.page_size) as usize;
        Some(self.pas.get(page)? + off % self.page_size)
    }

    fn phase(&self, index: u64) -> u8 {
        ((index >> self.log) & 1) as u8
    }
}

#[derive(Debug, Default)]
struct State {
    rng: u64,
    armed: Vec<(Lie, Option<CmdOpcode>)>,
    told: Vec<Told>,
    cmdq: u64,
    cqs: Vec<Queue>,
    eqs: Vec<Queue>,
    qpns: Vec<u32>,
    /// Command slots rung and not yet seen complete.
    pending: u32,
    /// BAR lies in force.
    health_garbage: bool,
    counter_stuck: Option<u32>,
    init_seg_changes: bool,
    removed: bool,
}

impl State {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Takes the first armed lie `pick` accepts for a command of `opcode` (`None`: not a
    /// command).
    fn take(
        &mut self,
        pick: impl Fn(Lie) -> bool,
        opcode: Option<CmdOpcode>,
    ) -> Option<(Lie, Option<CmdOpcode>)> {
        let i = self
            .armed
            .iter()
            .position(|&(l, op)| pick(l) && (op.is_none() || op == opcode))?;
        Some(self.armed.remove(i))
    }
}

/// A mock HCA's platform that lies to the driver on request (see the module documentation).
/// Cheap to clone; clones share the lies.
#[derive(Clone)]
pub struct HostilePlatform {
    inner: MockPlatform,
    hca: MockHca,
    st: Arc<Mutex<State>>,
}

impl core::fmt::Debug for HostilePlatform {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HostilePlatform").finish_non_exhaustive()
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    ((be32(b, at) as u64) << 32) | be32(b, at + 4) as u64
}

/// Bytes of a mailbox block's data, and where its `next` pointer is.
const BLOCK_DATA: usize = 512;
const BLOCK_NEXT: usize = 560;

/// Command-entry offsets (`mlx5_cmd_layout`).
const ENTRY_INLEN: usize = 4;
const ENTRY_IN_PTR: usize = 8;
const ENTRY_IN: usize = 16;
const ENTRY_OUT: usize = 32;
const ENTRY_OUT_PTR: usize = 48;
const ENTRY_OUTLEN: usize = 56;
const ENTRY_STATUS_OWN: usize = 63;

/// Byte offsets in a CQE (`mlx5_cqe64`) and an EQE (`mlx5_eqe`).
const CQE_BYTE_CNT: usize = 0x2c;
const CQE_SOP_DROP_QPN: usize = 0x38;
const CQE_WQE_COUNTER: usize = 0x3c;
const CQE_OP_OWN: usize = 0x3f;
const ERR_CQE_SYNDROME: usize = 0x37;
const EQE_TYPE: usize = 1;
const EQE_DATA: usize = 0x20;
/// Both entries keep their owner bit in bit 0 of their last byte.
const OWNER: usize = 0x3f;

/// A health-buffer field as a field of `initial_seg` (the buffer is nested in it).
fn health_field(f: Field) -> Field {
    Field {
        name: f.name,
        bit_offset: initial_seg::health_buffer.bit_offset + f.bit_offset,
        bit_width: f.bit_width,
    }
}

impl HostilePlatform {
    /// Wraps `hca`'s platform; `seed` drives every random value a lie needs.
    pub fn new(hca: &MockHca, seed: u64) -> Self {
        HostilePlatform {
            inner: hca.platform(),
            hca: hca.clone(),
            st: Arc::new(Mutex::new(State {
                rng: seed,
                ..State::default()
            })),
        }
    }

    /// The mock HCA behind the wrapper.
    pub fn hca(&self) -> MockHca {
        self.hca.clone()
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Arms a lie: told at the first chance (a BAR lie at once, for good).
    pub fn arm(&self, lie: Lie) {
        self.arm_for(lie, None);
    }

    /// Arms a lie about a command, told only to a command of `opcode` (other lies ignore
    /// the opcode).
    pub fn arm_for(&self, lie: Lie, opcode: Option<CmdOpcode>) {
        let mut st = self.st();
        match lie {
            Lie::HealthSyndromeGarbage => st.health_garbage = true,
            Lie::HealthCounterStuck => st.counter_stuck = Some(0x00c0_ffee),
            Lie::InitSegChanges => st.init_seg_changes = true,
            Lie::SurpriseRemoval => st.removed = true,
            _ => {
                st.armed.push((lie, opcode));
                return;
            }
        }
        st.told.push(Told {
            lie,
            object: 0,
            qpn: 0,
            wqe_counter: 0,
        });
    }

    /// Lies armed and not told yet.
    pub fn armed(&self) -> usize {
        self.st().armed.len()
    }

    /// Drops every armed lie not told yet (BAR lies in force stay).
    pub fn disarm(&self) {
        self.st().armed.clear();
    }

    /// Every lie told so far.
    pub fn told(&self) -> Vec<Told> {
        self.st().told.clone()
    }

    /// Whether the device was removed ([`Lie::SurpriseRemoval`]).
    pub fn removed(&self) -> bool {
        self.st().removed
    }

    /// The CQ numbers the wrapper follows (created and not destroyed).
    pub fn cqs(&self) -> Vec<u32> {
        self.st().cqs.iter().map(|q| q.n).collect()
    }

    /// Looks at the device now: the commands it completed, and every CQ and EQ, and
    /// rewrites what it wrote since the last look where a lie is armed. A test that moves the fabric itself calls this
    /// between moving it and polling.
    pub fn tamper(&self) {
        let mut st = self.st();
        if st.removed {
            return;
        }
        let st = &mut *st;
        self.commands(st);
        for i in 0..st.cqs.len() {
            self.scan(st, i, true);
        }
        for i in 0..st.eqs.len() {
            self.scan(st, i, false);
        }
    }

    fn read(&self, iova: u64, buf: &mut [u8]) -> bool {
        self.hca.host_read(iova, buf)
    }

    fn write(&self, iova: u64, data: &[u8]) -> bool {
        self.hca.host_write(iova, data)
    }

    /// Follows one queue's producer; rewrites new entries where a lie is armed.
    fn scan(&self, st: &mut State, qi: usize, cq: bool) {
        // Bounded by the queue size: the device cannot be more than a lap ahead.
        for _ in 0..(1u64 << (if cq { &st.cqs } else { &st.eqs })[qi].log) {
            let q = if cq { &st.cqs[qi] } else { &st.eqs[qi] };
            let (index, phase) = (q.pi, q.phase(q.pi));
            let Some(iova) = q.iova(index) else { return };
            let mut e = [0u8; 64];
            if !self.read(iova, &mut e) {
                return;
            }
            if let Some(left) = q.hidden {
                let q = if cq { &mut st.cqs[qi] } else { &mut st.eqs[qi] };
                if left > 0 {
                    q.hidden = Some(left - 1);
                    return;
                }
                // Show it: the owner bit back to what the device wrote.
                e[CQE_OP_OWN] = (e[CQE_OP_OWN] & !1) | phase;
                q.hidden = None;
                q.last = Some(e);
                q.pi += 1;
                self.write(iova + OWNER as u64, &e[OWNER..]);
                continue;
            }
            if e[OWNER] & 1 != phase {
                return;
            }
            let n = q.n;
            let before = e;
            let lie = st.take(|l| if cq { l.is_cqe() } else { l.is_eqe() }, None);
            let mut hide = false;
            if let Some((lie, for_op)) = lie {
                let qpn = be32(&e, CQE_SOP_DROP_QPN) & 0x00ff_ffff;
                let counter = u16::from_be_bytes([e[CQE_WQE_COUNTER], e[CQE_WQE_COUNTER + 1]]);
                let r = st.next();
                let q = if cq { &st.cqs[qi] } else { &st.eqs[qi] };
                let told = match lie {
                    Lie::CqeUnknownQp => {
                        // A number in the top half of the 24-bit space, which the mock
                        // never hands out.
                        let fake = 0x00f0_0000 | (r as u32 & 0x000f_ffff);
                        let v = (be32(&e, CQE_SOP_DROP_QPN) & 0xff00_0000) | fake;
                        e[CQE_SOP_DROP_QPN..CQE_SOP_DROP_QPN + 4].copy_from_slice(&v.to_be_bytes());
                        true
                    }
                    Lie::CqeCounterOutOfRange => {
                        let c = counter.wrapping_add(0x4000 + (r as u16 & 0x3fff));
                        e[CQE_WQE_COUNTER..CQE_WQE_COUNTER + 2].copy_from_slice(&c.to_be_bytes());
                        true
                    }
                    Lie::CqeDuplicate => match q.last {
                        Some(prev) => {
                            e = prev;
                            e[CQE_OP_OWN] = (e[CQE_OP_OWN] & !1) | phase;
                            true
                        }
                        None => false,
                    },
                    Lie::CqeByteCountTooLarge => {
                        let v = 0xffff_f000 | (r as u32 & 0xfff);
                        e[CQE_BYTE_CNT..CQE_BYTE_CNT + 4].copy_from_slice(&v.to_be_bytes());
                        true
                    }
                    Lie::CqeOpcodeMismatch => {
                        let op = CqeOpcode::from_raw(e[CQE_OP_OWN] >> 4);
                        if op == CqeOpcode::Req {
                            // Another WQE opcode in `sop`: SEND (0x0a) <-> RDMA WRITE (0x08).
                            let sop = if e[CQE_SOP_DROP_QPN] == 0x0a {
                                0x08
                            } else {
                                0x0a
                            };
                            e[CQE_SOP_DROP_QPN] = sop;
                        } else {
                            e[CQE_OP_OWN] = (CqeOpcode::Req.raw() << 4) | (e[CQE_OP_OWN] & 0xf);
                        }
                        true
                    }
                    Lie::CqeReservedOpcode => {
                        e[CQE_OP_OWN] = (0x7 << 4) | (e[CQE_OP_OWN] & 0xf);
                        true
                    }
                    Lie::CqeSyndromeOutOfEnum => {
                        let op = CqeOpcode::from_raw(e[CQE_OP_OWN] >> 4);
                        let err = if op == CqeOpcode::Req {
                            CqeOpcode::ReqErr
                        } else {
                            CqeOpcode::RespErr
                        };
                        e[CQE_OP_OWN] = (err.raw() << 4) | (e[CQE_OP_OWN] & 0xf);
                        e[ERR_CQE_SYNDROME] = 0xee;
                        true
                    }
                    Lie::CqeOwnerFlap => {
                        hide = true;
                        true
                    }
                    Lie::EqeUnknownType => {
                        e[EQE_TYPE] = 0x7e;
                        true
                    }
                    Lie::EqeCompUnknownCq => {
                        e[EQE_TYPE] = EventType::Comp.raw();
                        let cqn = 0x00f0_0000 | (r as u32 & 0x000f_ffff);
                        e[EQE_DATA + 24..EQE_DATA + 28].copy_from_slice(&cqn.to_be_bytes());
                        true
                    }
                    Lie::EqeCqErrorUnknownCq => {
                        e[EQE_TYPE] = EventType::CqError.raw();
                        let cqn = 0x00f0_0000 | (r as u32 & 0x000f_ffff);
                        e[EQE_DATA..EQE_DATA + 4].copy_from_slice(&cqn.to_be_bytes());
                        e[EQE_DATA + 11] = 1;
                        true
                    }
                    Lie::EqePageRequestHuge | Lie::EqePageReturnHuge => {
                        e[EQE_TYPE] = EventType::PageRequest.raw();
                        let n: i32 = if lie == Lie::EqePageRequestHuge {
                            i32::MAX
                        } else {
                            i32::MIN
                        };
                        e[EQE_DATA..EQE_DATA + 4].fill(0);
                        e[EQE_DATA + 4..EQE_DATA + 8].copy_from_slice(&n.to_be_bytes());
                        true
                    }
                    _ => false,
                };
                if told {
                    st.told.push(Told {
                        lie,
                        object: n,
                        qpn: if cq { qpn } else { 0 },
                        wqe_counter: if cq { counter } else { 0 },
                    });
                } else {
                    // Not tellable here (no earlier CQE to copy): keep it for the next.
                    st.armed.insert(0, (lie, for_op));
                }
            }
            let q = if cq { &mut st.cqs[qi] } else { &mut st.eqs[qi] };
            if hide {
                e[OWNER] ^= 1;
                q.hidden = Some(2);
                self.write(iova, &e);
                return;
            }
            if e != before {
                self.write(iova, &e);
            }
            q.last = Some(e);
            q.pi += 1;
        }
    }

    /// Reads `len` bytes of a command message: the inline part from the entry, the rest
    /// from its mailbox chain.
    fn read_message(&self, inline: &[u8], mut ptr: u64, len: usize) -> Option<Vec<u8>> {
        let mut msg = inline[..len.min(inline.len())].to_vec();
        let mut block = [0u8; 576];
        while msg.len() < len {
            if ptr == 0 || !self.read(ptr, &mut block) {
                return None;
            }
            let take = (len - msg.len()).min(BLOCK_DATA);
            msg.extend_from_slice(&block[..take]);
            ptr = be64(&block, BLOCK_NEXT);
        }
        Some(msg)
    }

    /// Writes a command's output back: the inline part into the entry, the rest into its
    /// mailbox chain.
    fn write_output(&self, entry: u64, e: &[u8; 64], out: &[u8]) {
        let inline = out.len().min(CMD_INLINE_OUT_BYTES);
        self.write(entry + ENTRY_OUT as u64, &out[..inline]);
        let mut ptr = be64(e, ENTRY_OUT_PTR);
        let mut at = inline;
        let mut block = [0u8; 576];
        while at < out.len() {
            if ptr == 0 || !self.read(ptr, &mut block) {
                return;
            }
            let take = (out.len() - at).min(BLOCK_DATA);
            self.write(ptr, &out[at..at + take]);
            at += take;
            ptr = be64(&block, BLOCK_NEXT);
        }
    }

    /// Commands of the slots in `st.pending` that the model completed: learn from them and
    /// lie about them. A command may complete after its doorbell (one waiting for pages
    /// completes when they come), so every look at the device checks the slots still out.
    fn commands(&self, st: &mut State) {
        if st.cmdq == 0 || st.pending == 0 {
            return;
        }
        for slot in 0..32u64 {
            if st.pending & (1 << slot) == 0 {
                continue;
            }
            let entry = st.cmdq + (slot << 6);
            let mut e = [0u8; 64];
            if !self.read(entry, &mut e) {
                st.pending &= !(1 << slot);
                continue;
            }
            if e[ENTRY_STATUS_OWN] & 1 != 0 {
                continue; // Still running (waiting for pages, or hung).
            }
            st.pending &= !(1 << slot);
            self.after_command(st, entry, &e);
        }
    }

    fn after_command(&self, st: &mut State, entry: u64, e: &[u8; 64]) {
        let inlen = be32(e, ENTRY_INLEN) as usize;
        let outlen = be32(e, ENTRY_OUTLEN) as usize;
        let opcode_raw = u16::from_be_bytes([e[ENTRY_IN], e[ENTRY_IN + 1]]);
        let opcode = CmdOpcode::from_raw(opcode_raw);
        let inline_in = &e[ENTRY_IN..ENTRY_IN + CMD_INLINE_IN_BYTES];
        let inline_out = &e[ENTRY_OUT..ENTRY_OUT + CMD_INLINE_OUT_BYTES];
        let Some(mut out) =
            self.read_message(inline_out, be64(e, ENTRY_OUT_PTR), outlen.min(1 << 20))
        else {
            return;
        };
        let ok = e[ENTRY_STATUS_OWN] >> 1 == 0 && out.first() == Some(&0);
        // Learn the queues first (what the device really did).
        if ok {
            let number = if out.len() >= 12 {
                be32(&out, 8) & 0x00ff_ffff
            } else {
                0
            };
            match opcode {
                CmdOpcode::CreateCq | CmdOpcode::CreateEq => {
                    let input =
                        self.read_message(inline_in, be64(e, ENTRY_IN_PTR), inlen.min(1 << 20));
                    if let Some(q) = input.and_then(|i| Self::queue_of(opcode, &i, number)) {
                        if opcode == CmdOpcode::CreateCq {
                            st.cqs.push(q);
                        } else {
                            st.eqs.push(q);
                        }
                    }
                }
                CmdOpcode::DestroyCq => {
                    let n = be32(inline_in, 8) & 0x00ff_ffff;
                    st.cqs.retain(|q| q.n != n);
                }
                CmdOpcode::DestroyEq => {
                    let n = inline_in[11] as u32;
                    st.eqs.retain(|q| q.n != n);
                }
                CmdOpcode::CreateQp => st.qpns.push(number),
                CmdOpcode::DestroyQp => {
                    let n = be32(inline_in, 8) & 0x00ff_ffff;
                    st.qpns.retain(|&q| q != n);
                }
                CmdOpcode::TeardownHca | CmdOpcode::DisableHca => {
                    st.cqs.clear();
                    st.eqs.clear();
                    st.qpns.clear();
                }
                _ => {}
            }
        }
        let Some((lie, for_op)) = st.take(|l| l.is_command(), Some(opcode)) else {
            return;
        };
        let r = st.next();
        let mut status_own = e[ENTRY_STATUS_OWN];
        let told = match lie {
            Lie::CmdStatusOutOfEnum if !out.is_empty() => {
                out[0] = 0x7f;
                if out.len() >= 8 {
                    out[4..8].copy_from_slice(&(r as u32).to_be_bytes());
                }
                true
            }
            Lie::CmdDeliveryStatusGarbage => {
                status_own = (0x7e << 1) | (status_own & 1);
                true
            }
            Lie::CmdCapsAllOnes if opcode == CmdOpcode::QueryHcaCap && ok && out.len() > 16 => {
                out[16..].fill(0xff);
                true
            }
            Lie::CmdQueryPagesHuge if opcode == CmdOpcode::QueryPages && ok && out.len() >= 16 => {
                out[12..16].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
                true
            }
            Lie::CmdOutputGarbage if out.len() > 1 => {
                let mut x = r;
                for b in out[1..].iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x as u8;
                }
                true
            }
            Lie::CmdExistingNumber if ok && out.len() >= 12 => {
                let existing = match opcode {
                    CmdOpcode::CreateCq => st.cqs.iter().rev().nth(1).map(|q| q.n),
                    CmdOpcode::CreateQp => st.qpns.iter().rev().nth(1).copied(),
                    _ => None,
                };
                match existing {
                    Some(n) => {
                        let v = (be32(&out, 8) & 0xff00_0000) | n;
                        out[8..12].copy_from_slice(&v.to_be_bytes());
                        true
                    }
                    None => false,
                }
            }
            _ => false,
        };
        if !told {
            // Not tellable about this command: keep it for the next.
            st.armed.insert(0, (lie, for_op));
            return;
        }
        st.told.push(Told {
            lie,
            object: opcode_raw as u32,
            qpn: 0,
            wqe_counter: 0,
        });
        self.write_output(entry, e, &out);
        if status_own != e[ENTRY_STATUS_OWN] {
            self.write(entry + ENTRY_STATUS_OWN as u64, &[status_own]);
        }
    }

    /// The queue a CREATE_CQ or CREATE_EQ input describes.
    fn queue_of(opcode: CmdOpcode, input: &[u8], n: u32) -> Option<Queue> {
        let (log, log_page, stride, pas_at) = if opcode == CmdOpcode::CreateCq {
            let (i, _) = CreateCqIn::read_from_prefix(input).ok()?;
            let c = i.cq_context();
            (
                c.log_cq_size(),
                c.log_page_size(),
                64u64 << c.cqe_sz().min(1),
                CreateCqIn::SIZE,
            )
        } else {
            let (i, _) = CreateEqIn::read_from_prefix(input).ok()?;
            let c = i.eq_context_entry();
            (c.log_eq_size(), c.log_page_size(), 64, CreateEqIn::SIZE)
        };
        if log > 24 {
            return None;
        }
        let page_size = 4096u64 << log_page.min(20);
        let pages = ((stride << log).div_ceil(page_size)) as usize;
        let pas = input
            .get(pas_at..pas_at + pages * 8)?
            .chunks_exact(8)
            .map(|c| be64(c, 0))
            .collect();
        Some(Queue {
            n,
            pas,
            page_size,
            log,
            stride,
            pi: 0,
            last: None,
            hidden: None,
        })
    }

    /// What a BAR read of `offset` (host-order value `v`, the dword as the BAR holds it)
    /// becomes under the BAR lies in force.
    fn bar_lie32(&self, offset: usize, v: u32) -> u32 {
        let st = self.st();
        if st.removed {
            return u32::MAX;
        }
        let mut d = u32::from_be(v);
        let set = |d: &mut u32, f: Field, value: u32| {
            if f.dword_byte_offset() == offset {
                *d = f.into_dword(*d, value);
            }
        };
        if st.health_garbage {
            set(&mut d, health_field(health_buffer::rfr), 1);
            set(&mut d, health_field(health_buffer::synd), 0xee);
        }
        if let Some(c) = st.counter_stuck {
            set(&mut d, initial_seg::health_counter, c);
        }
        if st.init_seg_changes {
            set(&mut d, initial_seg::fw_rev_major, 0x7777);
            set(&mut d, initial_seg::initializing, 1);
        }
        d.to_be()
    }
}

// SAFETY: every access is forwarded to `MockPlatform`, which upholds the obligations
// (single accesses through its model, no references, out-of-bounds offsets panic); the
// wrapper only changes the values returned and drops writes, and never touches memory
// itself (it reads and writes device memory through the model's IOMMU by IOVA).
unsafe impl Bar for HostilePlatform {
    fn bar_len(&self) -> usize {
        self.inner.bar_len()
    }

    fn read32(&self, offset: usize) -> u32 {
        let v = self.inner.read32(offset);
        self.tamper();
        self.bar_lie32(offset, v)
    }

    fn write32(&self, offset: usize, value: u32) {
        if self.removed() {
            // Dropped, but a bad offset is still the caller's bug.
            assert!(offset.is_multiple_of(4) && offset + 4 <= self.inner.bar_len());
            return;
        }
        self.inner.write32(offset, value);
        let field = u32::from_be(value);
        match offset {
            o if o == initial_seg::cmdq_phy_addr_63_32.dword_byte_offset() => {
                let mut st = self.st();
                st.cmdq = (st.cmdq & 0xffff_ffff) | ((field as u64) << 32);
            }
            o if o == initial_seg::cmdq_phy_addr_31_12.dword_byte_offset() => {
                let mut st = self.st();
                st.cmdq = (st.cmdq & !0xffff_ffff) | (field as u64 & !0xfff);
            }
            o if o == initial_seg::command_doorbell_vector.dword_byte_offset() => {
                self.st().pending |= field;
            }
            _ => {}
        }
        self.tamper();
    }

    fn read64(&self, offset: usize) -> u64 {
        let v = self.inner.read64(offset);
        self.tamper();
        if self.removed() { u64::MAX } else { v }
    }

    fn write64(&self, offset: usize, value: u64) {
        if self.removed() {
            assert!(offset.is_multiple_of(8) && offset + 8 <= self.inner.bar_len());
            return;
        }
        self.inner.write64(offset, value);
        self.tamper();
    }
}

// SAFETY: forwarded unchanged to `MockPlatform`, which upholds the obligations.
unsafe impl Dma for HostilePlatform {
    fn alloc_coherent(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        self.inner.alloc_coherent(len, align)
    }

    unsafe fn free_coherent(&self, region: DmaRegion) {
        // SAFETY: the caller's obligations are those of `MockPlatform::free_coherent`.
        unsafe { self.inner.free_coherent(region) }
    }

    unsafe fn map(&self, cpu: NonNull<u8>, len: usize) -> Result<u64, DmaError> {
        // SAFETY: the caller's obligations are those of `MockPlatform::map`.
        unsafe { self.inner.map(cpu, len) }
    }

    unsafe fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError> {
        // SAFETY: the caller's obligations are those of `MockPlatform::unmap`.
        unsafe { self.inner.unmap(iova, len) }
    }
}

impl PciConfig for HostilePlatform {
    fn config_read8(&self, offset: u16) -> Result<u8, ConfigError> {
        let v = self.inner.config_read8(offset)?;
        Ok(if self.removed() { u8::MAX } else { v })
    }

    fn config_read16(&self, offset: u16) -> Result<u16, ConfigError> {
        let v = self.inner.config_read16(offset)?;
        Ok(if self.removed() { u16::MAX } else { v })
    }

    fn config_read32(&self, offset: u16) -> Result<u32, ConfigError> {
        let v = self.inner.config_read32(offset)?;
        Ok(if self.removed() { u32::MAX } else { v })
    }

    fn config_write16(&self, offset: u16, value: u16) -> Result<(), ConfigError> {
        if self.removed() {
            return Ok(());
        }
        self.inner.config_write16(offset, value)
    }

    fn config_write32(&self, offset: u16, value: u32) -> Result<(), ConfigError> {
        if self.removed() {
            return Ok(());
        }
        self.inner.config_write32(offset, value)
    }
}

// SAFETY: host memory from the global allocator (the trait's default bodies), as for
// `MockPlatform`.
unsafe impl uhca_hal::HostMem for HostilePlatform {}

impl Clock for HostilePlatform {
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }

    fn delay_us(&self, us: u32) {
        self.inner.delay_us(us);
        self.tamper();
    }
}
