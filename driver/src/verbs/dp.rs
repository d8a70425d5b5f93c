//! The datapath's shadow state: the per-HCA table of QPs and SRQs (rdma-core keeps the
//! same table per context) with each queue's work-request ids, and the completion events
//! waiting for the user.
//!
//! The device tells the driver which work request finished only by a QP number and a WQE
//! counter in the CQE. The driver never believes those numbers blindly (STYLE practice 7):
//! it keeps, for every QP it created, what it posted — the producer and consumer counters
//! of each queue and one slot per send WQEBB or receive WQE with the `wr_id`, the WQE's
//! size, opcode and a start marker — and checks each CQE against it. A CQE naming a QP the
//! driver does not know, a CQ the QP does not use, or a WQE that is not outstanding is
//! refused with an error, and the state is left as it was.
//!
//! The slots live in platform memory allocated when the QP or SRQ is created (through
//! [`Hca::alloc_dma`]; the device never sees it) and are read and written through
//! [`DmaMem`], so the datapath allocates nothing and the driver needs no `unsafe`.

use heapless::index_map::FnvIndexMap;
use uhca_fwif::consts::QpServiceType;
use uhca_hal::Platform;
use uhca_hal::dma::{DmaBuf, DmaMem};

use super::wr::WcOpcode;
use crate::error::Result;
use crate::hca::Hca;

/// Most QPs one [`Hca`] keeps datapath state for (a power of two).
pub const MAX_DATAPATH_QPS: usize = 256;
/// Most SRQs one [`Hca`] keeps datapath state for (a power of two).
pub const MAX_DATAPATH_SRQS: usize = 64;
/// Most CQs with completion events waiting at once; beyond, events are counted as
/// dropped ([`Hca::completion_events_dropped`]).
pub const MAX_PENDING_CQ_EVENTS: usize = 64;

/// Destroyed QPs whose leftover CQEs are recognised and dropped.
const DESTROYED_QPS: usize = 16;

/// Bytes of one send-queue slot (per WQEBB): `wr_id`, then the descriptor word.
pub(crate) const SQ_SLOT: usize = 16;
/// Bytes of one receive-queue slot: `wr_id`.
pub(crate) const RQ_SLOT: usize = 8;
/// Bytes of one SRQ slot: `wr_id`, next free index, busy flag.
pub(crate) const SRQ_SLOT: usize = 16;

/// Descriptor word of a send slot: bit 0 set on the first WQEBB of a WQE.
const DESC_START: u64 = 1 << 0;
/// Descriptor word: the WQE asked for a completion.
const DESC_SIGNALED: u64 = 1 << 1;

/// What a send slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SendSlot {
    pub(crate) wr_id: u64,
    pub(crate) wqe_index: u16,
    pub(crate) wqebbs: u8,
    pub(crate) opcode: WcOpcode,
    pub(crate) signaled: bool,
}

/// The shadow of one QP's work queues.
pub(crate) struct QpShadow<P: Platform + Clone> {
    mem: DmaBuf<P>,
    pub(crate) st: QpServiceType,
    pub(crate) send_cqn: u32,
    pub(crate) recv_cqn: u32,
    pub(crate) srqn: Option<u32>,
    /// log2 of the SQ size in WQEBBs.
    pub(crate) sq_log: Option<u8>,
    /// SQ size in WQEBBs − 1 (0 without an SQ).
    sq_mask: u32,
    /// WQEBBs posted (wrapping), as the rings count them.
    pub(crate) sq_pi: u32,
    /// WQEBBs retired by completions (wrapping).
    pub(crate) sq_ci: u32,
    /// log2 of the RQ size in WQEs.
    pub(crate) rq_log: Option<u8>,
    rq_off: usize,
    /// Receive WQEs posted and retired (wrapping).
    pub(crate) rq_head: u32,
    pub(crate) rq_tail: u32,
    /// Every send is signalled (`sq_sig_all`).
    pub(crate) sq_sig_all: bool,
    /// The device offers the 8-byte atomics the QP may post (`DeviceCaps::atomic`).
    pub(crate) atomics: bool,
    /// An error completion was seen: the device has the QP in ERR.
    pub(crate) error: bool,
    /// The QP went through RESET and nothing was posted to the SQ (`sq_stale`) or to its
    /// own RQ (`rq_stale`) since: CQEs of that queue still in the CQ are the old
    /// incarnation's (rdma-core removes them from the CQ at RESET) and are dropped. No new
    /// CQE of a queue can exist before something is posted to it.
    pub(crate) sq_stale: bool,
    /// See `sq_stale`.
    pub(crate) rq_stale: bool,
}

impl<P: Platform + Clone> core::fmt::Debug for QpShadow<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QpShadow")
            .field("st", &self.st)
            .field("sq", &(self.sq_pi, self.sq_ci))
            .field("rq", &(self.rq_head, self.rq_tail))
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<P: Platform + Clone> QpShadow<P> {
    /// Allocates the slots of a QP with an SQ of `2^sq_log` WQEBBs and an RQ of `2^rq_log`
    /// WQEs.
    pub(crate) fn new(
        hca: &Hca<P>,
        st: QpServiceType,
        sq_log: Option<u8>,
        rq_log: Option<u8>,
        cqns: (u32, u32),
        srqn: Option<u32>,
    ) -> Result<Self> {
        if hca.datapath().qps.len() >= MAX_DATAPATH_QPS {
            return Err(crate::Error::InvalidArgument(
                "too many QPs for the datapath table (MAX_DATAPATH_QPS)",
            ));
        }
        let sq_bytes = sq_log.map_or(0, |l| SQ_SLOT << l);
        let rq_bytes = rq_log.map_or(0, |l| RQ_SLOT << l);
        let mem = hca.alloc_dma((sq_bytes + rq_bytes).max(64), 64)?;
        Ok(QpShadow {
            mem,
            st,
            send_cqn: cqns.0,
            recv_cqn: cqns.1,
            srqn,
            sq_log,
            sq_mask: sq_log.map_or(0, |l| (1u32 << l) - 1),
            sq_pi: 0,
            sq_ci: 0,
            rq_log,
            rq_off: sq_bytes,
            rq_head: 0,
            rq_tail: 0,
            sq_sig_all: false,
            atomics: hca.caps().atomic,
            error: false,
            sq_stale: false,
            rq_stale: false,
        })
    }

    /// Starts over (the QP went back to RESET): nothing outstanding, no error.
    pub(crate) fn reset(&mut self) {
        self.sq_pi = 0;
        self.sq_ci = 0;
        self.rq_head = 0;
        self.rq_tail = 0;
        self.error = false;
        self.sq_stale = true;
        self.rq_stale = true;
    }

    #[inline(always)]
    fn sq_slot_off(&self, wqe_index: u32) -> usize {
        (wqe_index & self.sq_mask) as usize * SQ_SLOT
    }

    /// Records a posted send WQE (and clears the descriptors of its other WQEBBs, so a
    /// CQE cannot name the middle of a WQE).
    #[inline(always)]
    pub(crate) fn record_send(&mut self, s: &SendSlot) {
        let off = self.sq_slot_off(s.wqe_index as u32);
        let desc = ((s.wqe_index as u64) << 48)
            | ((s.wqebbs as u64) << 40)
            | ((s.opcode.raw() as u64) << 32)
            | DESC_START
            | if s.signaled { DESC_SIGNALED } else { 0 };
        let slot = [s.wr_id, desc];
        self.mem.write_be64_run(off, 2, |i| slot[i]);
        for bb in 1..s.wqebbs as u32 {
            let o = self.sq_slot_off(s.wqe_index as u32 + bb);
            self.mem.write_be64(o + 8, 0);
        }
    }

    /// The send WQE starting at `wqe_index`, if one is outstanding there.
    #[inline(always)]
    pub(crate) fn outstanding_send(&self, wqe_index: u16) -> Option<SendSlot> {
        self.sq_log?;
        let ahead = wqe_index.wrapping_sub(self.sq_ci as u16) as u32;
        if ahead >= self.sq_pi.wrapping_sub(self.sq_ci) {
            return None;
        }
        let off = self.sq_slot_off(wqe_index as u32);
        let desc = self.mem.read_be64(off + 8);
        if desc & DESC_START == 0 || (desc >> 48) as u16 != wqe_index {
            return None;
        }
        let wqebbs = (desc >> 40) as u8;
        // The WQE must lie entirely inside what was posted.
        if wqebbs == 0 || ahead + wqebbs as u32 > self.sq_pi.wrapping_sub(self.sq_ci) {
            return None;
        }
        Some(SendSlot {
            wr_id: self.mem.read_be64(off),
            wqe_index,
            wqebbs,
            opcode: WcOpcode::from_raw((desc >> 32) as u8)?,
            signaled: desc & DESC_SIGNALED != 0,
        })
    }

    /// Retires every send WQE up to and including `s` (earlier unsignalled WQEs complete
    /// with it).
    #[inline(always)]
    pub(crate) fn retire_send(&mut self, s: &SendSlot) {
        let ahead = s.wqe_index.wrapping_sub(self.sq_ci as u16) as u32;
        self.sq_ci = self.sq_ci.wrapping_add(ahead + s.wqebbs as u32);
    }

    /// Records a posted receive WQE at `index`.
    #[inline(always)]
    pub(crate) fn record_recv(&mut self, index: u32, wr_id: u64) {
        let mask = (1u32 << self.rq_log.unwrap_or(0)) - 1;
        let off = self.rq_off + (index & mask) as usize * RQ_SLOT;
        self.mem.write_be64(off, wr_id);
    }

    /// Takes the oldest outstanding receive WQE if the device's counter names it.
    #[inline(always)]
    pub(crate) fn take_recv(&mut self, wqe_counter: u16) -> Option<u64> {
        let log = self.rq_log?;
        if self.rq_head == self.rq_tail || wqe_counter != self.rq_tail as u16 {
            return None;
        }
        let mask = (1u32 << log) - 1;
        let off = self.rq_off + (self.rq_tail & mask) as usize * RQ_SLOT;
        let wr_id = self.mem.read_be64(off);
        self.rq_tail = self.rq_tail.wrapping_add(1);
        Some(wr_id)
    }
}

/// The shadow of one SRQ: its `wr_id`s and the free list of its WQEs.
///
/// As in rdma-core, the free WQEs form a list through each WQE's "next" segment; the
/// driver keeps its own copy of the links (it never reads back what the device could
/// change). `head` is the next WQE to post; `tail` the last free one, kept spare.
pub(crate) struct SrqShadow<P: Platform + Clone> {
    mem: DmaBuf<P>,
    pub(crate) log: u8,
    pub(crate) head: u32,
    pub(crate) tail: u32,
    /// WQEs posted (wrapping): the doorbell record's counter.
    pub(crate) counter: u32,
    /// The tail when the links were last written to the SRQ buffer.
    synced_tail: u32,
}

impl<P: Platform + Clone> core::fmt::Debug for SrqShadow<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SrqShadow")
            .field("head", &self.head)
            .field("tail", &self.tail)
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}

impl<P: Platform + Clone> SrqShadow<P> {
    /// Allocates the slots of an SRQ of `2^log` WQEs linked in order (WQE i to i + 1, the
    /// last to the first), as the SRQ buffer is linked at creation.
    pub(crate) fn new(hca: &Hca<P>, log: u8) -> Result<Self> {
        if hca.datapath().srqs.len() >= MAX_DATAPATH_SRQS {
            return Err(crate::Error::InvalidArgument(
                "too many SRQs for the datapath table (MAX_DATAPATH_SRQS)",
            ));
        }
        let cnt = 1u32 << log;
        let mut mem = hca.alloc_dma((SRQ_SLOT << log).max(64), 64)?;
        for i in 0..cnt {
            let off = i as usize * SRQ_SLOT;
            mem.write_be64(off, 0);
            mem.write_be64(off + 8, ((i + 1) % cnt) as u64);
        }
        Ok(SrqShadow {
            mem,
            log,
            head: 0,
            tail: cnt - 1,
            counter: 0,
            synced_tail: cnt - 1,
        })
    }

    fn slot(&self, index: u32) -> usize {
        (index & ((1u32 << self.log) - 1)) as usize * SRQ_SLOT
    }

    /// Takes the next free WQE for a receive of `wr_id`; `None` when full (one WQE is
    /// kept spare).
    pub(crate) fn take_free(&mut self, wr_id: u64) -> Option<u32> {
        if self.head == self.tail {
            return None;
        }
        let ind = self.head;
        let off = self.slot(ind);
        let next = self.mem.read_be64(off + 8) as u32 & ((1u32 << self.log) - 1);
        self.mem.write_be64(off, wr_id);
        // Busy (bit 32), the link kept.
        self.mem.write_be64(off + 8, (1 << 32) | next as u64);
        self.head = next;
        Some(ind)
    }

    /// Gives back a WQE the device completed and returns its `wr_id`; `None` if `index`
    /// is not a posted WQE. The freed WQE is linked after the old tail in the shadow; the
    /// link reaches the SRQ buffer at the next post ([`SrqShadow::flush_links`]), before
    /// the WQE can be posted again.
    pub(crate) fn complete(&mut self, index: u16) -> Option<u64> {
        let index = index as u32;
        if index >= 1u32 << self.log {
            return None;
        }
        let off = self.slot(index);
        let desc = self.mem.read_be64(off + 8);
        if desc & (1 << 32) == 0 {
            return None;
        }
        let wr_id = self.mem.read_be64(off);
        self.mem.write_be64(off + 8, desc & 0xffff_ffff);
        let toff = self.slot(self.tail);
        let tdesc = self.mem.read_be64(toff + 8);
        self.mem
            .write_be64(toff + 8, (tdesc & !0xffff_ffff) | index as u64);
        self.tail = index;
        Some(wr_id)
    }

    /// Hands every link made since the last call to `write(wqe, next)` (for the "next"
    /// segments in the SRQ buffer). The frees since then form one chain from the tail of
    /// the last call to the current tail.
    pub(crate) fn flush_links(&mut self, mut write: impl FnMut(u32, u32)) {
        let mask = (1u32 << self.log) - 1;
        let mut t = self.synced_tail;
        // At most one link per WQE: the bound only guards against a broken chain.
        for _ in 0..=mask {
            if t == self.tail {
                break;
            }
            let next = self.mem.read_be64(self.slot(t) + 8) as u32 & mask;
            write(t, next);
            t = next;
        }
        self.synced_tail = self.tail;
    }
}

/// Completion events (EQE type COMP) waiting for the user, counted per CQ.
#[derive(Debug, Default)]
pub(crate) struct CompletionEvents {
    pending: heapless::Vec<(u32, u32), MAX_PENDING_CQ_EVENTS>,
    pub(crate) dropped: u64,
}

impl CompletionEvents {
    /// Notes one event for `cqn`.
    pub(crate) fn push(&mut self, cqn: u32) {
        if let Some(e) = self.pending.iter_mut().find(|e| e.0 == cqn) {
            e.1 = e.1.saturating_add(1);
        } else if self.pending.push((cqn, 1)).is_err() {
            self.dropped += 1;
        }
    }

    /// Takes one event, oldest CQ first.
    pub(crate) fn pop(&mut self) -> Option<u32> {
        let first = self.pending.first_mut()?;
        let cqn = first.0;
        first.1 -= 1;
        if first.1 == 0 {
            self.pending.remove(0);
        }
        Some(cqn)
    }

    /// Takes one event of `cqn`, if there is one.
    pub(crate) fn take(&mut self, cqn: u32) -> bool {
        let Some(i) = self.pending.iter().position(|e| e.0 == cqn) else {
            return false;
        };
        self.pending[i].1 -= 1;
        if self.pending[i].1 == 0 {
            self.pending.remove(i);
        }
        true
    }
}

/// The datapath table of one [`Hca`]: the shadow of every QP and SRQ it created.
pub(crate) struct Datapath<P: Platform + Clone> {
    pub(crate) qps: FnvIndexMap<u32, QpShadow<P>, MAX_DATAPATH_QPS>,
    pub(crate) srqs: FnvIndexMap<u32, SrqShadow<P>, MAX_DATAPATH_SRQS>,
    /// QPs destroyed lately, whose CQEs may still sit in a CQ (rdma-core removes them from
    /// the CQ at destroy): their CQEs are dropped until the number is used again.
    /// With each, the SRQ it received from (its leftover receives give their SRQ WQEs back).
    pub(crate) destroyed: heapless::Deque<(u32, Option<u32>), DESTROYED_QPS>,
}

impl<P: Platform + Clone> core::fmt::Debug for Datapath<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Datapath")
            .field("qps", &self.qps.len())
            .field("srqs", &self.srqs.len())
            .finish()
    }
}

impl<P: Platform + Clone> Default for Datapath<P> {
    fn default() -> Self {
        Datapath {
            qps: FnvIndexMap::new(),
            srqs: FnvIndexMap::new(),
            destroyed: heapless::Deque::new(),
        }
    }
}

impl<P: Platform + Clone> Datapath<P> {
    /// Adds a QP (its number is new: the firmware just created it).
    pub(crate) fn insert_qp(&mut self, qpn: u32, s: QpShadow<P>) {
        // Room was checked when the shadow was made, and the caller holds `&mut Hca`.
        let _ = self.qps.insert(qpn, s);
        // The number is in use again: its CQEs are the new QP's.
        if self.destroyed.iter().any(|d| d.0 == qpn) {
            let n = self.destroyed.len();
            for _ in 0..n {
                if let Some(d) = self.destroyed.pop_front()
                    && d.0 != qpn
                {
                    let _ = self.destroyed.push_back(d);
                }
            }
        }
    }

    /// Forgets a destroyed QP.
    pub(crate) fn remove_qp(&mut self, qpn: u32) {
        let srqn = self.qps.swap_remove(&qpn).and_then(|q| q.srqn);
        if self.destroyed.is_full() {
            self.destroyed.pop_front();
        }
        let _ = self.destroyed.push_back((qpn, srqn));
    }

    /// The QP went back to RESET.
    pub(crate) fn reset_qp(&mut self, qpn: u32) {
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.reset();
        }
    }

    /// Adds an SRQ.
    pub(crate) fn insert_srq(&mut self, srqn: u32, s: SrqShadow<P>) {
        let _ = self.srqs.insert(srqn, s);
    }

    /// Forgets a destroyed SRQ.
    pub(crate) fn remove_srq(&mut self, srqn: u32) {
        self.srqs.swap_remove(&srqn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use uhca_hal::testing::FakePlatform;

    fn shadow(p: &FakePlatform, sq_log: u8, rq_log: u8) -> QpShadow<&FakePlatform> {
        let sq_bytes = SQ_SLOT << sq_log;
        QpShadow {
            mem: DmaBuf::alloc(p, sq_bytes + (RQ_SLOT << rq_log), 64).unwrap(),
            st: QpServiceType::Rc,
            send_cqn: 1,
            recv_cqn: 1,
            srqn: None,
            sq_log: Some(sq_log),
            sq_mask: (1 << sq_log) - 1,
            sq_pi: 0,
            sq_ci: 0,
            rq_log: Some(rq_log),
            rq_off: sq_bytes,
            rq_head: 0,
            rq_tail: 0,
            sq_sig_all: false,
            atomics: true,
            error: false,
            sq_stale: false,
            rq_stale: false,
        }
    }

    /// A small deterministic generator (xorshift).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Random posts of 1..=4-WQEBB WQEs around a 16-WQEBB ring, completions at random
    /// outstanding WQEs (retiring everything before them) and random garbage counters: the
    /// shadow agrees with a plain model, and garbage is refused without changing anything.
    #[test]
    fn send_shadow_matches_a_model_and_refuses_garbage() {
        let p = FakePlatform::new();
        let mut sh = shadow(&p, 4, 3);
        let mut model: VecDeque<(u16, u8, u64)> = VecDeque::new();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut next_id = 0u64;
        for _ in 0..20_000 {
            match rng.next() % 3 {
                0 => {
                    let bbs = (rng.next() % 4 + 1) as u8;
                    if sh.sq_pi.wrapping_sub(sh.sq_ci) + bbs as u32 > 16 {
                        continue;
                    }
                    let s = SendSlot {
                        wr_id: next_id,
                        wqe_index: sh.sq_pi as u16,
                        wqebbs: bbs,
                        opcode: WcOpcode::Send,
                        signaled: rng.next().is_multiple_of(2),
                    };
                    sh.record_send(&s);
                    sh.sq_pi = sh.sq_pi.wrapping_add(bbs as u32);
                    model.push_back((s.wqe_index, bbs, next_id));
                    next_id += 1;
                }
                1 if !model.is_empty() => {
                    let k = (rng.next() % model.len() as u64) as usize;
                    let (idx, bbs, id) = model[k];
                    let got = sh.outstanding_send(idx).expect("an outstanding WQE");
                    assert_eq!((got.wr_id, got.wqebbs), (id, bbs));
                    sh.retire_send(&got);
                    model.drain(..=k);
                }
                _ => {
                    let c = rng.next() as u16;
                    let want = model.iter().find(|w| w.0 == c).map(|w| w.2);
                    let (pi, ci) = (sh.sq_pi, sh.sq_ci);
                    assert_eq!(sh.outstanding_send(c).map(|s| s.wr_id), want, "counter {c}");
                    assert_eq!((sh.sq_pi, sh.sq_ci), (pi, ci));
                }
            }
            let outstanding: u32 = model.iter().map(|w| w.1 as u32).sum();
            assert_eq!(sh.sq_pi.wrapping_sub(sh.sq_ci), outstanding);
        }
        assert!(next_id > 1000);
    }

    #[test]
    fn receive_shadow_takes_wqes_in_order_only() {
        let p = FakePlatform::new();
        let mut sh = shadow(&p, 2, 2);
        for id in 0..4 {
            sh.record_recv(sh.rq_head, 100 + id);
            sh.rq_head += 1;
        }
        assert_eq!(sh.take_recv(1), None, "not the oldest");
        assert_eq!(sh.take_recv(0), Some(100));
        assert_eq!(sh.take_recv(1), Some(101));
        sh.record_recv(sh.rq_head, 104);
        sh.rq_head += 1;
        assert_eq!(
            (sh.take_recv(2), sh.take_recv(3), sh.take_recv(4)),
            (Some(102), Some(103), Some(104))
        );
        assert_eq!(sh.take_recv(5), None, "nothing outstanding");
    }

    #[test]
    fn srq_free_list_hands_out_every_wqe_but_one_and_relinks_frees() {
        let p = FakePlatform::new();
        let mut srq = SrqShadow {
            mem: DmaBuf::alloc(&p, SRQ_SLOT << 3, 64).unwrap(),
            log: 3,
            head: 0,
            tail: 7,
            counter: 0,
            synced_tail: 7,
        };
        for i in 0..8u32 {
            srq.mem
                .write_be64(i as usize * SRQ_SLOT + 8, ((i + 1) % 8) as u64);
        }
        let taken: Vec<u32> = (0..7).map(|i| srq.take_free(10 + i).unwrap()).collect();
        assert_eq!(taken, [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(srq.take_free(99), None, "one WQE kept spare");
        assert_eq!(srq.complete(7), None, "the spare was never posted");
        assert_eq!(srq.complete(3), Some(13));
        assert_eq!(srq.complete(3), None, "already given back");
        assert_eq!(srq.complete(5), Some(15));
        assert_eq!(srq.complete(200), None);
        let mut links = Vec::new();
        srq.flush_links(|w, n| links.push((w, n)));
        assert_eq!(links, [(7, 3), (3, 5)]);
        srq.flush_links(|w, n| links.push((w, n)));
        assert_eq!(links.len(), 2, "each link written once");
        assert_eq!(
            (srq.take_free(20), srq.take_free(21), srq.take_free(22)),
            (Some(7), Some(3), None)
        );
    }

    #[test]
    fn completion_events_count_per_cq_in_order() {
        let mut e = CompletionEvents::default();
        e.push(5);
        e.push(7);
        e.push(5);
        assert!(e.take(7));
        assert!(!e.take(7));
        assert_eq!(e.pop(), Some(5));
        assert_eq!(e.pop(), Some(5));
        assert_eq!(e.pop(), None);
        for i in 0..MAX_PENDING_CQ_EVENTS as u32 + 3 {
            e.push(i);
        }
        assert_eq!(e.dropped, 3);
    }
}
