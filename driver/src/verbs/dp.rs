//! The datapath's bookkeeping, owned by the queues: what each QP and SRQ posted, shared with
//! the CQs that complete it, and the completion events waiting for the user.
//!
//! The device tells the driver which work request finished only by a QP number and a WQE
//! counter in the CQE. The driver never believes those numbers blindly: every QP keeps, in
//! host memory the device cannot reach, a table of what it posted on each of its queues
//! ([`SqTable`], [`RqTable`] of the HAL, whose poster–poller protocol is written down and
//! modelled there), and each CQ checks every CQE against the table of the QP it names. A CQE
//! naming a QP that is not on this CQ, or a WQE that is not outstanding, is refused with an
//! error and nothing changes.
//!
//! # How a CQ finds the QP of a CQE
//!
//! Each CQ owns a map from QP number to the QP's shared state ([`QpShared`]), filled when a
//! QP that completes to it is created: an open-addressing hash table in host memory, at most
//! half full, so a look-up is one multiplication and, on average, under two probes (and the
//! last QP found is tried first, which is what a CQ polled for one busy QP hits). It was
//! chosen over the QP's `user_index` (which CQE format 1 reports and rdma-core's
//! `mlx5_poll_cq_v1` looks up in a context-wide table) because a map per CQ needs no table
//! shared by all CQs of the HCA, works for any pairing of send and receive CQs, and keeps
//! each CQ's memory proportional to the QPs on it. No per-HCA table is left: posting and
//! polling need only the objects they touch, and there is no cap on QPs but the device's.
//!
//! A QP that is destroyed stays in the map as a tombstone (its CQEs still in the CQ are
//! dropped, as rdma-core removes them from the CQ at destroy; a receive from an SRQ gives its
//! WQE back) until a new QP takes its number or the map is rebuilt, which keeps the 16 most
//! recent tombstones.
//!
//! Everything here is allocated when an object is created and freed when it goes; posting and
//! polling allocate nothing.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::qp::QpStateCell;

use uhca_fwif::consts::QpServiceType;
use uhca_hal::Platform;
use uhca_hal::host::{HostArc, HostArray, SpinLock};
use uhca_hal::wrid::{RqTable, SqTable};

use crate::error::Result;

/// Most CQs with completion events waiting at once; beyond, events are counted as
/// dropped ([`Hca::completion_events_dropped`](crate::Hca::completion_events_dropped)).
pub const MAX_PENDING_CQ_EVENTS: usize = 64;

/// Destroyed QPs a CQ's map keeps when it is rebuilt.
const KEPT_TOMBSTONES: usize = 16;

/// Order of destruction, so a rebuilt map keeps the most recent tombstones.
static DESTROY_SEQ: AtomicU64 = AtomicU64::new(1);

/// What a QP's poster and its CQs' pollers share.
pub(crate) struct QpShared<P: Platform> {
    pub(crate) qpn: u32,
    pub(crate) st: QpServiceType,
    pub(crate) send_cqn: u32,
    pub(crate) recv_cqn: u32,
    /// The SRQ it receives from.
    pub(crate) srq: Option<SrqHandle<P>>,
    pub(crate) sq: Option<SqTable<P>>,
    pub(crate) rq: Option<RqTable<P>>,
    /// The QP's state as the driver believes it: set by each transition and by QUERY_QP,
    /// moved to ERR by an error completion (`error.store(true, ..)`), read once per post.
    pub(crate) error: QpStateCell,
    /// The QP went through RESET and nothing was posted to the SQ (`sq_stale`) or to its
    /// own RQ (`rq_stale`) since: CQEs of that queue still in the CQ are the old
    /// incarnation's (rdma-core removes them from the CQ at RESET) and are dropped. No new
    /// CQE of a queue can exist before something is posted to it.
    pub(crate) sq_stale: AtomicBool,
    /// See `sq_stale`.
    pub(crate) rq_stale: AtomicBool,
    /// 0 while the QP exists; its place in the order of destruction after.
    destroyed: AtomicU64,
}

/// A handle on a QP's shared state.
pub(crate) type QpHandle<P> = HostArc<QpShared<P>, P>;

impl<P: Platform> QpShared<P> {
    /// The shared state of a new QP.
    pub(crate) fn new(
        qpn: u32,
        st: QpServiceType,
        cqns: (u32, u32),
        srq: Option<SrqHandle<P>>,
        sq: Option<SqTable<P>>,
        rq: Option<RqTable<P>>,
    ) -> Self {
        QpShared {
            qpn,
            st,
            send_cqn: cqns.0,
            recv_cqn: cqns.1,
            srq,
            sq,
            rq,
            error: QpStateCell::new(),
            sq_stale: AtomicBool::new(false),
            rq_stale: AtomicBool::new(false),
            destroyed: AtomicU64::new(0),
        }
    }

    /// Starts over (the QP went back to RESET): nothing outstanding, no error, and the
    /// CQEs of the old incarnation dropped. The stale marks go first, so a poller that
    /// sees the counters start over also sees them.
    pub(crate) fn reset(&self) {
        self.sq_stale.store(true, Ordering::SeqCst);
        self.rq_stale.store(true, Ordering::SeqCst);
        if let Some(sq) = &self.sq {
            sq.reset();
        }
        if let Some(rq) = &self.rq {
            rq.reset();
        }
        self.error.store(false, Ordering::SeqCst);
    }

    /// Marks the QP destroyed: its CQEs left in a CQ are dropped from now on.
    pub(crate) fn mark_destroyed(&self) {
        let seq = DESTROY_SEQ.fetch_add(1, Ordering::Relaxed);
        self.destroyed.store(seq, Ordering::Release);
    }

    /// Whether the QP was destroyed.
    #[inline(always)]
    pub(crate) fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire) != 0
    }

    /// Host memory of the work-request tables.
    pub(crate) fn host_bytes(&self) -> usize {
        core::mem::size_of::<Self>()
            + self.sq.as_ref().map_or(0, |t| t.host_bytes())
            + self.rq.as_ref().map_or(0, |t| t.host_bytes())
    }
}

impl<P: Platform> core::fmt::Debug for QpShared<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QpShared")
            .field("qpn", &self.qpn)
            .field("sq", &self.sq)
            .field("rq", &self.rq)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

/// One SRQ WQE as the driver sees it.
#[derive(Clone, Copy, Debug, Default)]
struct SrqSlot {
    wr_id: u64,
    /// Bytes its scatter list can take.
    len: u32,
    /// The next WQE in the free list (the driver's copy of the "next" segment's link).
    next: u32,
    /// Posted and not completed.
    busy: bool,
}

/// The shadow of one SRQ: its `wr_id`s and the free list of its WQEs.
///
/// As in rdma-core, the free WQEs form a list through each WQE's "next" segment; the
/// driver keeps its own copy of the links (it never reads back what the device could
/// change). `head` is the next WQE to post; `tail` the last free one, kept spare.
pub(crate) struct SrqShadow<P: Platform> {
    slots: HostArray<SrqSlot, P>,
    mask: u32,
    pub(crate) head: u32,
    pub(crate) tail: u32,
    /// WQEs posted (wrapping): the doorbell record's counter.
    pub(crate) counter: u32,
    /// The tail when the links were last written to the SRQ buffer.
    synced_tail: u32,
}

impl<P: Platform> core::fmt::Debug for SrqShadow<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SrqShadow")
            .field("head", &self.head)
            .field("tail", &self.tail)
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}

impl<P: Platform> SrqShadow<P> {
    /// The slots of an SRQ of `2^log` WQEs linked in order (WQE i to i + 1, the last to
    /// the first), as the SRQ buffer is linked at creation.
    pub(crate) fn new(host: P, log: u8) -> Result<Self> {
        let cnt = 1u32 << log;
        let slots = HostArray::new(host, cnt as usize, |i| SrqSlot {
            wr_id: 0,
            len: 0,
            next: (i as u32 + 1) % cnt,
            busy: false,
        })?;
        Ok(SrqShadow {
            slots,
            mask: cnt - 1,
            head: 0,
            tail: cnt - 1,
            counter: 0,
            synced_tail: cnt - 1,
        })
    }

    /// Takes the next free WQE for a receive of `wr_id`; `None` when full (one WQE is
    /// kept spare).
    #[inline]
    pub(crate) fn take_free(&mut self, wr_id: u64, len: u32) -> Option<u32> {
        if self.head == self.tail {
            return None;
        }
        let ind = self.head;
        let s = &mut self.slots[(ind & self.mask) as usize];
        s.wr_id = wr_id;
        s.len = len;
        s.busy = true;
        self.head = s.next & self.mask;
        Some(ind)
    }

    /// The bytes posted WQE `index` can take; `None` if it is not a posted WQE.
    #[inline]
    pub(crate) fn posted_len(&self, index: u16) -> Option<u32> {
        let s = self.slots.get(index as usize)?;
        s.busy.then_some(s.len)
    }

    /// Gives back a WQE the device completed and returns its `wr_id`; `None` if `index`
    /// is not a posted WQE. The freed WQE is linked after the old tail in the shadow; the
    /// link reaches the SRQ buffer at the next post ([`SrqShadow::flush_links`]), before
    /// the WQE can be posted again.
    #[inline]
    pub(crate) fn complete(&mut self, index: u16) -> Option<u64> {
        let index = index as u32;
        if index > self.mask {
            return None;
        }
        let s = &mut self.slots[index as usize];
        if !s.busy {
            return None;
        }
        s.busy = false;
        let wr_id = s.wr_id;
        self.slots[(self.tail & self.mask) as usize].next = index;
        self.tail = index;
        Some(wr_id)
    }

    /// Hands every link made since the last call to `write(wqe, next)` (for the "next"
    /// segments in the SRQ buffer). The frees since then form one chain from the tail of
    /// the last call to the current tail.
    pub(crate) fn flush_links(&mut self, mut write: impl FnMut(u32, u32)) {
        let mut t = self.synced_tail;
        // At most one link per WQE: the bound only guards against a broken chain.
        for _ in 0..=self.mask {
            if t == self.tail {
                break;
            }
            let next = self.slots[(t & self.mask) as usize].next & self.mask;
            write(t, next);
            t = next;
        }
        self.synced_tail = self.tail;
    }
}

/// What an SRQ's poster and the pollers of the CQs of its QPs share: the free list, under a
/// lock (rdma-core takes the SRQ's lock on both sides too).
pub(crate) struct SrqShared<P: Platform> {
    pub(crate) srqn: u32,
    pub(crate) shadow: SpinLock<SrqShadow<P>>,
}

/// A handle on an SRQ's shared state.
pub(crate) type SrqHandle<P> = HostArc<SrqShared<P>, P>;

impl<P: Platform> core::fmt::Debug for SrqShared<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SrqShared")
            .field("srqn", &self.srqn)
            .finish_non_exhaustive()
    }
}

/// No QP at this place of a [`QpMap`].
const EMPTY: u32 = u32::MAX;

/// A CQ's map from QP number to the QP's shared state (see the module documentation).
pub(crate) struct QpMap<P: Platform> {
    host: P,
    keys: HostArray<u32, P>,
    vals: HostArray<Option<QpHandle<P>>, P>,
    /// Places in use (QPs and tombstones).
    used: usize,
    /// The place of the QP found last.
    last: usize,
}

impl<P: Platform> core::fmt::Debug for QpMap<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("QpMap")
            .field("capacity", &self.keys.len())
            .field("used", &self.used)
            .finish()
    }
}

/// The home place of `qpn` in a map of `mask + 1` places (Fibonacci hashing).
#[inline(always)]
fn home(qpn: u32, mask: usize) -> usize {
    (qpn.wrapping_mul(0x9e37_79b9) >> 8) as usize & mask
}

impl<P: Platform> QpMap<P> {
    /// An empty map with room for `cap` (a power of two) places.
    pub(crate) fn new(host: P, cap: usize) -> Result<Self> {
        Ok(QpMap {
            keys: HostArray::new(host.clone(), cap, |_| EMPTY)?,
            vals: HostArray::new(host.clone(), cap, |_| None)?,
            host,
            used: 0,
            last: 0,
        })
    }

    /// The QP numbered `qpn` (or its tombstone), without the datapath's cache of the last
    /// place found: for a look-up off the datapath through a shared map (a QP event).
    pub(crate) fn find(&self, qpn: u32) -> Option<&QpHandle<P>> {
        let mask = self.keys.len() - 1;
        let mut i = home(qpn, mask);
        // At most half full: the probe ends at an empty place.
        loop {
            match self.keys[i] {
                k if k == qpn => return self.vals[i].as_ref(),
                EMPTY => return None,
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// The QP numbered `qpn`, if it completes to this CQ (or did, for a tombstone).
    #[inline(always)]
    pub(crate) fn get(&mut self, qpn: u32) -> Option<&QpHandle<P>> {
        let mask = self.keys.len() - 1;
        if self.keys[self.last] != qpn {
            let mut i = home(qpn, mask);
            // At most half full: the probe ends at an empty place.
            loop {
                let k = self.keys[i];
                if k == qpn {
                    break;
                }
                if k == EMPTY {
                    return None;
                }
                i = (i + 1) & mask;
            }
            self.last = i;
        }
        self.vals[self.last].as_ref()
    }

    /// Adds a QP (or replaces the tombstone of a destroyed QP of the same number).
    pub(crate) fn insert(&mut self, qp: QpHandle<P>) -> Result<()> {
        let qpn = qp.qpn;
        if (self.used + 1) * 2 > self.keys.len() {
            self.rebuild()?;
        }
        let mask = self.keys.len() - 1;
        let mut i = home(qpn, mask);
        loop {
            let k = self.keys[i];
            if k == qpn || k == EMPTY {
                if k == EMPTY {
                    self.used += 1;
                }
                self.keys[i] = qpn;
                self.vals[i] = Some(qp);
                return Ok(());
            }
            i = (i + 1) & mask;
        }
    }

    /// Re-hashes into a map at most a quarter full with what it keeps: every live QP and
    /// the most recent [`KEPT_TOMBSTONES`] tombstones (so growth is amortised: the next
    /// rebuild comes only after the map has filled to half again).
    fn rebuild(&mut self) -> Result<()> {
        // The destruction order of the tombstones, newest first, up to the number kept.
        let mut newest = [0u64; KEPT_TOMBSTONES];
        let mut live = 0usize;
        for v in self.vals.iter().flatten() {
            let d = v.destroyed.load(Ordering::Acquire);
            if d == 0 {
                live += 1;
            } else if d > newest[KEPT_TOMBSTONES - 1] {
                newest[KEPT_TOMBSTONES - 1] = d;
                newest.sort_unstable_by(|a, b| b.cmp(a));
            }
        }
        let cutoff = newest[KEPT_TOMBSTONES - 1].max(1);
        let kept = live + newest.iter().filter(|&&d| d != 0).count();
        let cap = ((kept + 1) * 4).next_power_of_two().max(16);
        let mut fresh = QpMap::new(self.host.clone(), cap)?;
        for v in self.vals.iter_mut() {
            if let Some(h) = v.take() {
                let d = h.destroyed.load(Ordering::Acquire);
                if d == 0 || d >= cutoff {
                    let mask = fresh.keys.len() - 1;
                    let mut i = home(h.qpn, mask);
                    while fresh.keys[i] != EMPTY {
                        i = (i + 1) & mask;
                    }
                    fresh.keys[i] = h.qpn;
                    fresh.vals[i] = Some(h);
                    fresh.used += 1;
                }
            }
        }
        *self = fresh;
        Ok(())
    }

    /// Calls `f` for every QP in the map that was not destroyed.
    pub(crate) fn for_each_live(&self, mut f: impl FnMut(&QpHandle<P>)) {
        for v in self.vals.iter().flatten() {
            if !v.is_destroyed() {
                f(v);
            }
        }
    }

    /// Places in use (QPs and tombstones) and the capacity.
    pub(crate) fn occupancy(&self) -> (usize, usize) {
        (self.used, self.keys.len())
    }
}

/// The numbers of an HCA's live CQs, sorted: an event naming a CQ that does not exist is
/// told apart and dropped (Linux's `mlx5_eq_cq_get` looks CQs up the same way). Grown at
/// CQ creation, never on the datapath.
pub(crate) struct CqNumbers<P: Platform> {
    host: P,
    list: Option<HostArray<u32, P>>,
    len: usize,
}

impl<P: Platform> core::fmt::Debug for CqNumbers<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CqNumbers").field("len", &self.len).finish()
    }
}

impl<P: Platform> CqNumbers<P> {
    pub(crate) fn new(host: P) -> Self {
        CqNumbers {
            host,
            list: None,
            len: 0,
        }
    }

    fn slice(&self) -> &[u32] {
        self.list.as_ref().map_or(&[], |l| &l[..self.len])
    }

    /// Makes room for one more number (before the CQ is created, so that noting it after
    /// cannot fail).
    pub(crate) fn reserve_one(&mut self) -> Result<()> {
        let cap = self.list.as_ref().map_or(0, |l| l.len());
        if self.len < cap {
            return Ok(());
        }
        let mut bigger = HostArray::new(self.host.clone(), (cap * 2).max(16), |_| 0u32)?;
        bigger[..self.len].copy_from_slice(self.slice());
        self.list = Some(bigger);
        Ok(())
    }

    /// Notes a new CQ (after [`reserve_one`](Self::reserve_one)).
    pub(crate) fn insert(&mut self, cqn: u32) {
        let Err(at) = self.slice().binary_search(&cqn) else {
            return;
        };
        let len = self.len;
        if let Some(l) = self.list.as_mut()
            && len < l.len()
        {
            l.copy_within(at..len, at + 1);
            l[at] = cqn;
            self.len += 1;
        }
    }

    /// Forgets a destroyed CQ.
    pub(crate) fn remove(&mut self, cqn: u32) {
        let Ok(at) = self.slice().binary_search(&cqn) else {
            return;
        };
        let len = self.len;
        if let Some(l) = self.list.as_mut() {
            l.copy_within(at + 1..len, at);
            self.len -= 1;
        }
    }

    /// Whether `cqn` is a live CQ of the HCA.
    pub(crate) fn contains(&self, cqn: u32) -> bool {
        self.slice().binary_search(&cqn).is_ok()
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

    /// Whether an event of `cqn` is waiting.
    pub(crate) fn has(&self, cqn: u32) -> bool {
        self.pending.iter().any(|e| e.0 == cqn)
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

#[cfg(test)]
mod tests {
    use super::*;
    use uhca_hal::testing::FakePlatform;

    fn qp(p: &FakePlatform, qpn: u32) -> QpHandle<&FakePlatform> {
        HostArc::new(
            p,
            QpShared::new(qpn, QpServiceType::Rc, (1, 1), None, None, None),
        )
        .unwrap()
    }

    #[test]
    fn srq_free_list_hands_out_every_wqe_but_one_and_relinks_frees() {
        let p = FakePlatform::new();
        let mut srq = SrqShadow::new(&p, 3).unwrap();
        let taken: Vec<u32> = (0..7).map(|i| srq.take_free(10 + i, 0).unwrap()).collect();
        assert_eq!(taken, [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(srq.take_free(99, 0), None, "one WQE kept spare");
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
            (
                srq.take_free(20, 0),
                srq.take_free(21, 0),
                srq.take_free(22, 0)
            ),
            (Some(7), Some(3), None)
        );
    }

    #[test]
    fn the_map_finds_every_qp_and_only_those() {
        let p = FakePlatform::new();
        let mut m = QpMap::new(&p, 16).unwrap();
        // QP numbers as a device hands them out, and a few that collide in a small map.
        let qpns: Vec<u32> = (0..3000u32).map(|i| 0x100 + i * 7).collect();
        for &n in &qpns {
            m.insert(qp(&p, n)).unwrap();
        }
        for &n in &qpns {
            assert_eq!(m.get(n).map(|h| h.qpn), Some(n));
        }
        assert!(m.get(0x101).is_none() && m.get(0xff_ffff).is_none());
        let (used, cap) = m.occupancy();
        assert_eq!(used, 3000);
        assert!(cap >= 2 * used && cap <= 8 * used, "{used} in {cap}");
    }

    #[test]
    fn a_rebuild_keeps_live_qps_and_the_newest_tombstones() {
        let p = FakePlatform::new();
        let mut m = QpMap::new(&p, 16).unwrap();
        let mut handles = Vec::new();
        for n in 0..40u32 {
            let h = qp(&p, 0x200 + n);
            m.insert(h.clone()).unwrap();
            handles.push(h);
        }
        // Destroy 30 in order: 0x200.. first.
        for h in &handles[..30] {
            h.mark_destroyed();
        }
        // Growth rebuilds the map.
        for n in 0..100u32 {
            m.insert(qp(&p, 0x1000 + n)).unwrap();
        }
        for (i, h) in handles.iter().enumerate() {
            let found = m.get(h.qpn).is_some();
            let want = i >= 30 - KEPT_TOMBSTONES;
            assert_eq!(found, want, "QP {:#x}", h.qpn);
        }
        // A new QP of a tombstone's number replaces it.
        let again = qp(&p, 0x21d);
        m.insert(again).unwrap();
        assert!(!m.get(0x21d).unwrap().is_destroyed());
    }
}
