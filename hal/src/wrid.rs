//! What was posted where: the work-request tables of a send and a receive queue, shared
//! by the thread that posts and the thread that polls.
//!
//! The device names a finished work request only by a QP number and a WQE counter in the
//! CQE. To give the user back the `wr_id` (and to refuse a CQE that names nothing posted),
//! the poster records every WQE in a table beside its queue, in host memory the device
//! cannot reach ([`crate::host::HostMem`] of the platform): for the SQ one slot per 64-byte basic
//! block (the `wr_id`, then a descriptor word: the WQE index, its size in basic blocks, a
//! caller's tag such as the opcode, whether it is signalled, a start mark), for the RQ one
//! `wr_id` per WQE.
//!
//! # The protocol between poster and poller
//!
//! One thread posts ([`SqTable::record`], [`SqTable::publish`]) and one polls
//! ([`SqTable::outstanding`], [`SqTable::retire`]); they may be different threads, with no
//! lock between them. Two counters, each written by one side only:
//!
//! * `pi`, written by the poster: basic blocks recorded so far. The poster writes a slot's
//!   words (relaxed), then stores `pi` with **release** (once per batch, before it rings the
//!   doorbell); the poller loads `pi` with **acquire** and believes a CQE only if the WQE it
//!   names lies in `ci..pi`. So every slot the poller reads was written before the `pi` it
//!   loaded, and is complete.
//! * `ci`, written by the poller: basic blocks retired. The poller reads the slot, then
//!   stores `ci` with **release**; the poster loads `ci` with **acquire** before it reuses a
//!   slot (the queue's free room is `size − (pi − ci)`). So a slot is never overwritten while
//!   the poller may still read it.
//!
//! The receive table is the same with `head` and `tail`. Both are modelled in loom
//! (`loom_models.rs`): a poster records and publishes WQEs around a two-slot table while a
//! poller takes them, and each of the two edges (`pi` published to the poller, `ci` to the
//! poster) has a twin in which its two orderings are relaxed and which must fail: without
//! the publish edge the poller reads a stale `wr_id`; without the retire edge the poster
//! rewrites a slot the poller may still be reading, which loom reports as a race.
//!
//! # Posting on two threads: the split
//!
//! A QP's send and receive sides may be posted from two threads at once
//! ([`QpRings::split`](crate::wq::QpRings::split) in the HAL, `Qp::split` in the driver),
//! while a third polls. What that guarantees, and why it is sound:
//!
//! * The two posters share nothing they write. The send side writes the SQ, the send
//!   counter of the doorbell record, the UAR doorbell and the [`SqTable`]; the receive side
//!   the RQ, the receive counter and the [`RqTable`]. Their ring state (producer and
//!   consumer counters, doorbell toggle) is split into two `&mut` borrows.
//! * The SQ, the RQ and the doorbell record are one DMA buffer, written through volatile
//!   accesses that need `&mut` of the buffer. The split borrows the buffer mutably once and
//!   lends each side a view of it ([`DmaView`](crate::dma::DmaView)) that reaches only
//!   its own bytes: its queue and its 4-byte word of the record. The windows are checked
//!   disjoint when the views are made, every access is checked inside its view's windows
//!   (an access outside panics, as one outside the buffer does), and the views borrow the
//!   buffer, so nothing else touches it while they live. Two threads therefore never access
//!   the same byte, which is what makes the views `Send` without a lock.
//! * Each table still has one poster and one poller, with the protocol above: the split
//!   adds a second poster only on the *other* table.
//! * The halves run the same posting code as the unsplit rings (the HAL's `SendRing` and
//!   `RecvRing`), so a WQE posted through a half is byte for byte the one the whole rings
//!   would post; when the halves are dropped the rings carry on from their counters.
//!
//! The WQE counter in a CQE is only 16 bits; the tables keep 32-bit counters (the rings'
//! own) and compare the low bits within the outstanding window.

use crate::host::{HostArray, HostMem};
use crate::platform::DmaError;

#[cfg(not(loom))]
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The two edges of the protocol between poster and poller (see the module documentation),
/// each a release store on one side and an acquire load on the other; a loom model can
/// weaken one of them ([`loom_weaken`]).
#[cfg(loom)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    /// The poster's release of the producer counter (`pi`, `head`) and the poller's
    /// acquire of it: what the poller reads of a slot was written before.
    Publish,
    /// The poller's release of the consumer counter (`ci`, `tail`) and the poster's acquire
    /// of it: a slot is rewritten only after the poller is done reading it.
    Retire,
}

/// The protocol's edges, for the orderings below (a plain name outside loom builds).
#[cfg(not(loom))]
#[derive(Clone, Copy)]
enum Edge {
    Publish,
    Retire,
}

/// The release ordering of `edge`, relaxed in a loom twin that weakens it.
#[inline(always)]
fn release(edge: Edge) -> Ordering {
    #[cfg(loom)]
    if weakened() == Some(edge) {
        return Ordering::Relaxed;
    }
    let _ = edge;
    Ordering::Release
}

/// The acquire ordering of `edge`, relaxed in a loom twin that weakens it.
#[inline(always)]
fn acquire(edge: Edge) -> Ordering {
    #[cfg(loom)]
    if weakened() == Some(edge) {
        return Ordering::Relaxed;
    }
    let _ = edge;
    Ordering::Acquire
}

#[cfg(loom)]
std::thread_local! {
    static WEAK: core::cell::Cell<Option<Edge>> = const { core::cell::Cell::new(None) };
}

#[cfg(loom)]
fn weakened() -> Option<Edge> {
    WEAK.with(|w| w.get())
}

/// Loom builds only: on the calling thread, makes both orderings of `edge` (its release
/// store and its acquire load) relaxed, so a model can show that loom finds the bug they
/// prevent; `None` restores them.
#[cfg(loom)]
pub fn loom_weaken(edge: Option<Edge>) {
    WEAK.with(|w| w.set(edge));
}

/// Descriptor word: bit 0 marks the first basic block of a WQE.
const DESC_START: u64 = 1 << 0;
/// Descriptor word: the WQE asked for a completion.
const DESC_SIGNALED: u64 = 1 << 1;

/// What the poster recorded for one send WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendEntry {
    /// The user's work-request id.
    pub wr_id: u64,
    /// The WQE index (low 16 bits of the producer counter at its first basic block).
    pub wqe_index: u16,
    /// Basic blocks it occupies (1..=16 on mlx5).
    pub wqebbs: u8,
    /// The caller's tag (the driver keeps the completion opcode here).
    pub tag: u8,
    /// Whether the WQE asked for a completion.
    pub signaled: bool,
}

/// One send slot: the `wr_id` and the descriptor word.
struct SqSlot {
    wr_id: AtomicU64,
    desc: AtomicU64,
}

/// The work-request table of a send queue of `2^log` basic blocks.
pub struct SqTable<H: HostMem> {
    slots: HostArray<SqSlot, H>,
    mask: u32,
    pi: AtomicU32,
    ci: AtomicU32,
}

impl<H: HostMem> core::fmt::Debug for SqTable<H> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SqTable")
            .field("size", &(self.mask + 1))
            .field("pi", &self.pi.load(Ordering::Relaxed))
            .field("ci", &self.ci.load(Ordering::Relaxed))
            .finish()
    }
}

impl<H: HostMem> SqTable<H> {
    /// A table for an SQ of `2^log` basic blocks (`log` ≤ 16).
    ///
    /// # Errors
    ///
    /// The platform's, when it has no memory; [`DmaError::InvalidRequest`] for `log` > 16.
    pub fn new(host: H, log: u8) -> Result<Self, DmaError> {
        if log > 16 {
            return Err(DmaError::InvalidRequest);
        }
        let slots = HostArray::new(host, 1 << log, |_| SqSlot {
            wr_id: AtomicU64::new(0),
            desc: AtomicU64::new(0),
        })?;
        Ok(SqTable {
            slots,
            mask: (1u32 << log) - 1,
            pi: AtomicU32::new(0),
            ci: AtomicU32::new(0),
        })
    }

    /// Bytes of host memory the table takes.
    pub fn host_bytes(&self) -> usize {
        self.slots.len() * core::mem::size_of::<SqSlot>()
    }

    #[inline(always)]
    fn slot(&self, index: u32) -> &SqSlot {
        &self.slots[(index & self.mask) as usize]
    }

    /// Poster: the consumer counter (basic blocks the poller retired), to know which slots
    /// are free again.
    #[inline(always)]
    pub fn consumer(&self) -> u32 {
        self.ci.load(acquire(Edge::Retire))
    }

    /// Poster: records the WQE `e` (at basic blocks `e.wqe_index ..+ e.wqebbs`, which the
    /// poster has checked are free). Visible to the poller after the next
    /// [`publish`](Self::publish).
    #[inline(always)]
    pub fn record(&self, e: &SendEntry) {
        let desc = ((e.wqe_index as u64) << 48)
            | ((e.wqebbs as u64) << 40)
            | ((e.tag as u64) << 32)
            | DESC_START
            | if e.signaled { DESC_SIGNALED } else { 0 };
        let s = self.slot(e.wqe_index as u32);
        s.wr_id.store(e.wr_id, Ordering::Relaxed);
        s.desc.store(desc, Ordering::Relaxed);
        // A CQE must not be able to name the middle of a WQE.
        for bb in 1..e.wqebbs as u32 {
            self.slot(e.wqe_index as u32 + bb)
                .desc
                .store(0, Ordering::Relaxed);
        }
    }

    /// Poster: publishes every WQE recorded up to producer counter `pi` (basic blocks).
    #[inline(always)]
    pub fn publish(&self, pi: u32) {
        self.pi.store(pi, release(Edge::Publish));
    }

    /// Poller: the send WQE starting at `wqe_index`, if one is outstanding there (recorded,
    /// published and not retired). Changes nothing.
    #[inline(always)]
    pub fn outstanding(&self, wqe_index: u16) -> Option<SendEntry> {
        let pi = self.pi.load(acquire(Edge::Publish));
        // Only this thread stores `ci`.
        let ci = self.ci.load(Ordering::Relaxed);
        let live = pi.wrapping_sub(ci);
        let ahead = wqe_index.wrapping_sub(ci as u16) as u32;
        if ahead >= live {
            return None;
        }
        let s = self.slot(wqe_index as u32);
        let desc = s.desc.load(Ordering::Relaxed);
        if desc & DESC_START == 0 || (desc >> 48) as u16 != wqe_index {
            return None;
        }
        let wqebbs = (desc >> 40) as u8;
        // The WQE must lie entirely inside what was posted.
        if wqebbs == 0 || ahead + wqebbs as u32 > live {
            return None;
        }
        Some(SendEntry {
            wr_id: s.wr_id.load(Ordering::Relaxed),
            wqe_index,
            wqebbs,
            tag: (desc >> 32) as u8,
            signaled: desc & DESC_SIGNALED != 0,
        })
    }

    /// Poller: retires every WQE up to and including `e` (earlier unsignalled WQEs complete
    /// with it), as [`outstanding`](Self::outstanding) returned it.
    #[inline(always)]
    pub fn retire(&self, e: &SendEntry) {
        let ci = self.ci.load(Ordering::Relaxed);
        let ahead = e.wqe_index.wrapping_sub(ci as u16) as u32;
        self.ci.store(
            ci.wrapping_add(ahead + e.wqebbs as u32),
            release(Edge::Retire),
        );
    }

    /// Basic blocks posted and not yet retired.
    pub fn in_flight(&self) -> u32 {
        self.pi
            .load(Ordering::Acquire)
            .wrapping_sub(self.ci.load(Ordering::Acquire))
    }

    /// Starts over with nothing outstanding (the QP went back to RESET). Call it only when
    /// no poller is reading the table at the same time.
    pub fn reset(&self) {
        self.pi.store(0, Ordering::SeqCst);
        self.ci.store(0, Ordering::SeqCst);
    }
}

/// The work-request table of a receive queue of `2^log` WQEs, consumed in order.
pub struct RqTable<H: HostMem> {
    slots: HostArray<AtomicU64, H>,
    /// Bytes each WQE's scatter list can take (so a CQE claiming more is refused).
    lens: HostArray<AtomicU32, H>,
    mask: u32,
    head: AtomicU32,
    tail: AtomicU32,
}

impl<H: HostMem> core::fmt::Debug for RqTable<H> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RqTable")
            .field("size", &(self.mask + 1))
            .field("head", &self.head.load(Ordering::Relaxed))
            .field("tail", &self.tail.load(Ordering::Relaxed))
            .finish()
    }
}

impl<H: HostMem + Clone> RqTable<H> {
    /// A table for an RQ of `2^log` WQEs (`log` ≤ 16).
    ///
    /// # Errors
    ///
    /// The platform's, when it has no memory; [`DmaError::InvalidRequest`] for `log` > 16.
    pub fn new(host: H, log: u8) -> Result<Self, DmaError> {
        if log > 16 {
            return Err(DmaError::InvalidRequest);
        }
        Ok(RqTable {
            slots: HostArray::new(host.clone(), 1 << log, |_| AtomicU64::new(0))?,
            lens: HostArray::new(host, 1 << log, |_| AtomicU32::new(u32::MAX))?,
            mask: (1u32 << log) - 1,
            head: AtomicU32::new(0),
            tail: AtomicU32::new(0),
        })
    }
}

impl<H: HostMem> RqTable<H> {
    /// Bytes of host memory the table takes.
    pub fn host_bytes(&self) -> usize {
        self.slots.len() * 12
    }

    /// Poster: the WQEs the poller retired (the RQ's consumer counter).
    #[inline(always)]
    pub fn consumer(&self) -> u32 {
        self.tail.load(acquire(Edge::Retire))
    }

    /// Poster: records the WQE at producer counter `index`.
    #[inline(always)]
    pub fn record(&self, index: u32, wr_id: u64) {
        self.slots[(index & self.mask) as usize].store(wr_id, Ordering::Relaxed);
    }

    /// Poster: records how many bytes the WQE at producer counter `index` can take (the
    /// sum of its scatter entries), before [`publish`](Self::publish). Unrecorded, a WQE
    /// takes any length.
    #[inline(always)]
    pub fn record_len(&self, index: u32, len: u32) {
        self.lens[(index & self.mask) as usize].store(len, Ordering::Relaxed);
    }

    /// Poster: [`record`](Self::record) and [`record_len`](Self::record_len) in one.
    #[inline(always)]
    pub fn record_with_len(&self, index: u32, wr_id: u64, len: u32) {
        let i = (index & self.mask) as usize;
        self.slots[i].store(wr_id, Ordering::Relaxed);
        self.lens[i].store(len, Ordering::Relaxed);
    }

    /// Poller: the bytes the oldest outstanding WQE can take, if `wqe_counter` names it
    /// (as [`take`](Self::take) would). Changes nothing.
    #[inline(always)]
    pub fn posted_len(&self, wqe_counter: u16) -> Option<u32> {
        let head = self.head.load(acquire(Edge::Publish));
        let tail = self.tail.load(Ordering::Relaxed);
        if head == tail || wqe_counter != tail as u16 {
            return None;
        }
        Some(self.lens[(tail & self.mask) as usize].load(Ordering::Relaxed))
    }

    /// Poster: publishes the WQEs recorded below producer counter `head`.
    #[inline(always)]
    pub fn publish(&self, head: u32) {
        self.head.store(head, release(Edge::Publish));
    }

    /// Poller: takes the oldest outstanding WQE if `wqe_counter` names it, and returns its
    /// `wr_id`; `None` (nothing changed) otherwise.
    #[inline(always)]
    pub fn take(&self, wqe_counter: u16) -> Option<u64> {
        let head = self.head.load(acquire(Edge::Publish));
        let tail = self.tail.load(Ordering::Relaxed);
        if head == tail || wqe_counter != tail as u16 {
            return None;
        }
        let wr_id = self.slots[(tail & self.mask) as usize].load(Ordering::Relaxed);
        self.tail.store(tail.wrapping_add(1), release(Edge::Retire));
        Some(wr_id)
    }

    /// Poller: [`take`](Self::take) with [`posted_len`](Self::posted_len)'s check in the
    /// same look at the counters: `None` if `wqe_counter` does not name the oldest
    /// outstanding WQE, `Some(Err(()))` (nothing changed) if `byte_cnt` is more than that
    /// WQE can take, else its `wr_id` (taken).
    #[inline(always)]
    pub fn take_within(&self, wqe_counter: u16, byte_cnt: u32) -> Option<Result<u64, ()>> {
        let head = self.head.load(acquire(Edge::Publish));
        let tail = self.tail.load(Ordering::Relaxed);
        if head == tail || wqe_counter != tail as u16 {
            return None;
        }
        let i = (tail & self.mask) as usize;
        if byte_cnt > self.lens[i].load(Ordering::Relaxed) {
            return Some(Err(()));
        }
        let wr_id = self.slots[i].load(Ordering::Relaxed);
        self.tail.store(tail.wrapping_add(1), release(Edge::Retire));
        Some(Ok(wr_id))
    }

    /// WQEs posted and not yet retired.
    pub fn in_flight(&self) -> u32 {
        self.head
            .load(Ordering::Acquire)
            .wrapping_sub(self.tail.load(Ordering::Acquire))
    }

    /// Starts over with nothing outstanding (the QP went back to RESET). Call it only when
    /// no poller is reading the table at the same time.
    pub fn reset(&self) {
        self.head.store(0, Ordering::SeqCst);
        self.tail.store(0, Ordering::SeqCst);
    }
}

#[cfg(all(test, feature = "alloc", not(loom)))]
mod tests {
    use super::*;
    use crate::host::GlobalHostMem;
    use std::collections::VecDeque;

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

    /// Random posts of 1..=4-block WQEs around a 16-block ring, completions at random
    /// outstanding WQEs (retiring everything before them) and random garbage counters: the
    /// table agrees with a plain model, and garbage is refused without changing anything.
    #[test]
    fn send_table_matches_a_model_and_refuses_garbage() {
        let t = SqTable::new(GlobalHostMem, 4).unwrap();
        let mut pi = 0u32;
        let mut model: VecDeque<(u16, u8, u64)> = VecDeque::new();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut next_id = 0u64;
        for _ in 0..20_000 {
            match rng.next() % 3 {
                0 => {
                    let bbs = (rng.next() % 4 + 1) as u8;
                    if pi.wrapping_sub(t.consumer()) + bbs as u32 > 16 {
                        continue;
                    }
                    t.record(&SendEntry {
                        wr_id: next_id,
                        wqe_index: pi as u16,
                        wqebbs: bbs,
                        tag: 3,
                        signaled: rng.next().is_multiple_of(2),
                    });
                    model.push_back((pi as u16, bbs, next_id));
                    pi = pi.wrapping_add(bbs as u32);
                    t.publish(pi);
                    next_id += 1;
                }
                1 if !model.is_empty() => {
                    let k = (rng.next() % model.len() as u64) as usize;
                    let (idx, bbs, id) = model[k];
                    let got = t.outstanding(idx).expect("an outstanding WQE");
                    assert_eq!((got.wr_id, got.wqebbs, got.tag), (id, bbs, 3));
                    t.retire(&got);
                    model.drain(..=k);
                }
                _ => {
                    let c = rng.next() as u16;
                    let want = model.iter().find(|w| w.0 == c).map(|w| w.2);
                    let before = t.in_flight();
                    assert_eq!(t.outstanding(c).map(|s| s.wr_id), want, "counter {c}");
                    assert_eq!(t.in_flight(), before);
                }
            }
            let outstanding: u32 = model.iter().map(|w| w.1 as u32).sum();
            assert_eq!(t.in_flight(), outstanding);
        }
        assert!(next_id > 1000);
    }

    #[test]
    fn an_unpublished_wqe_is_not_outstanding() {
        let t = SqTable::new(GlobalHostMem, 2).unwrap();
        let e = SendEntry {
            wr_id: 9,
            wqe_index: 0,
            wqebbs: 1,
            tag: 0,
            signaled: true,
        };
        t.record(&e);
        assert_eq!(t.outstanding(0), None, "recorded, not published");
        t.publish(1);
        assert_eq!(t.outstanding(0), Some(e));
    }

    #[test]
    fn receive_table_takes_wqes_in_order_only() {
        let t = RqTable::new(GlobalHostMem, 2).unwrap();
        for id in 0..4u32 {
            t.record(id, 100 + id as u64);
        }
        t.publish(4);
        assert_eq!(t.take(1), None, "not the oldest");
        assert_eq!(t.take(0), Some(100));
        assert_eq!(t.take(1), Some(101));
        t.record(4, 104);
        t.publish(5);
        assert_eq!(
            (t.take(2), t.take(3), t.take(4)),
            (Some(102), Some(103), Some(104))
        );
        assert_eq!(t.take(5), None, "nothing outstanding");
        assert_eq!(t.consumer(), 5);
    }

    #[test]
    fn receive_table_keeps_what_each_wqe_can_take() {
        let t = RqTable::new(GlobalHostMem, 2).unwrap();
        t.record(0, 100);
        assert_eq!(t.posted_len(0), None, "not published");
        t.publish(1);
        assert_eq!(t.posted_len(0), Some(u32::MAX), "unrecorded: any length");
        t.record(1, 101);
        t.record_len(1, 512);
        t.publish(2);
        assert_eq!(t.posted_len(1), None, "not the oldest");
        assert_eq!(t.take(0), Some(100));
        assert_eq!(t.posted_len(1), Some(512));
        assert_eq!(t.posted_len(2), None);
        assert_eq!(t.take(1), Some(101));
    }
}
