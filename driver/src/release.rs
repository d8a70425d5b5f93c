//! Releasing objects dropped without `destroy`: the release queue.
//!
//! Dropping a verbs object must not send a command (`Drop` has no `Hca` to send it with:
//! objects do not borrow the `Hca`, and they may be dropped on another thread), and must
//! not free DMA memory the device may still use. So dropping an object that was not
//! destroyed *queues* it: "destroy QP n (or SRQ, CQ, MKEY, PD, transport domain), then
//! free this memory". The [`Hca`](crate::Hca) sends those commands before its next command,
//! in [`Hca::process_events`](crate::Hca::process_events) and in
//! [`Hca::close`](crate::Hca::close), and frees each object's memory only once its destroy
//! succeeded.
//!
//! Every object shares one release queue with its HCA (a [`HostArc`] both hold, so no table
//! outside the HCA and no limit on how many HCAs a process opens): a list in host memory of
//! the platform, sized at creation (every object holds a reservation in it, its
//! `Ticket`), so that `Drop` never allocates and always finds room. A slot is the object's
//! number, its one DMA buffer (none for a PD or transport domain) and, for a QP, the handle
//! its CQs share (64 bytes on a 64-bit host); the queue doubles when full, so it holds at
//! most twice as many slots as there are live objects.
//!
//! Order: a QP uses its CQs, its SRQ and its PD; an SRQ its PD; a memory key its PD. The
//! device refuses to destroy an object still in use (command status RES_BUSY, 0x6), so the HCA releases QPs,
//! then SRQs, CQs, memory keys, PDs and transport domains, and an object the device
//! still finds busy (a CQ dropped while the application keeps its QP) stays queued and is
//! tried again after the next object is destroyed. That is how Linux cleans up the
//! objects a process left behind (`drivers/infiniband/core/rdma_core.c`,
//! `uverbs_destroy_ufile_hw` and `__uverbs_cleanup_ufile`: pass over every object, and
//! pass again while the last pass destroyed something), with the dependency order as a
//! first guess so that one pass usually suffices.
//!
//! After the HCA is gone (closed or dropped), bus mastering is off and TEARDOWN_HCA has
//! removed every object the function had: an object dropped then sends nothing, and has its
//! memory freed at once (the device can no longer reach it), or leaked if the HCA could not
//! turn bus mastering off (its `close` then returned that error). The queue itself is freed
//! with the last object that holds a place in it.

use core::sync::atomic::{AtomicBool, Ordering};

use uhca_hal::Platform;
use uhca_hal::cq::CqRing;
use uhca_hal::dma::{DmaBuf, MappedBuf};
use uhca_hal::host::{HostArc, HostArray, SpinLock};

use uhca_hal::wq::QpRings;

use crate::error::Result;
use crate::verbs::dp::QpHandle;

/// A kind of device object, in the order dropped objects are released (users before what
/// they use).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ObjectKind {
    /// A queue pair (DESTROY_QP).
    Qp,
    /// A shared receive queue (DESTROY_RMP).
    Srq,
    /// A completion queue (DESTROY_CQ).
    Cq,
    /// A memory key (DESTROY_MKEY).
    Mr,
    /// A protection domain (DEALLOC_PD).
    Pd,
    /// A transport domain (DEALLOC_TRANSPORT_DOMAIN).
    TransportDomain,
}

/// Memory a dropped object leaves for after its destroy: an MR's registered buffer (one the
/// driver allocated, or a caller's buffer mapped for the device, which is unmapped), an
/// SRQ's queue, a CQ's ring, a QP's rings (each one DMA buffer), or nothing (a PD or
/// transport domain).
pub(crate) enum Held<P: Platform> {
    /// No memory.
    Nothing,
    /// A DMA buffer, freed after the destroy.
    Buf(DmaBuf<P>),
    /// A caller's buffer mapped for the device, unmapped (and freed) after the destroy.
    Mapped(MappedBuf<P>),
}

/// A memory region's buffer ([`Mr`](crate::verbs::Mr)).
impl<P: Platform> From<DmaBuf<P>> for Held<P> {
    fn from(b: DmaBuf<P>) -> Self {
        Held::Buf(b)
    }
}

/// A memory region's caller buffer ([`UserMr`](crate::verbs::UserMr)).
impl<P: Platform> From<MappedBuf<P>> for Held<P> {
    fn from(m: MappedBuf<P>) -> Self {
        Held::Mapped(m)
    }
}

impl<P: Platform> Held<P> {
    /// No memory.
    pub(crate) fn nothing() -> Self {
        Held::Nothing
    }

    /// A buffer.
    pub(crate) fn buf(b: DmaBuf<P>) -> Self {
        Held::Buf(b)
    }

    /// A CQ's ring.
    pub(crate) fn cq(r: CqRing<DmaBuf<P>>) -> Self {
        Held::Buf(r.into_mem())
    }

    /// A QP's rings.
    pub(crate) fn qp(r: QpRings<DmaBuf<P>>) -> Self {
        Held::Buf(r.into_mem())
    }

    /// Never gives the memory back (the device may still use it).
    pub(crate) fn leak(self) {
        core::mem::forget(self);
    }
}

/// A dropped object waiting for its destroy command.
pub(crate) struct Dropped<P: Platform> {
    pub(crate) kind: ObjectKind,
    /// QPN, RMP number, CQN, memory key index, PD or transport domain number.
    pub(crate) number: u32,
    pub(crate) held: Held<P>,
    /// A QP's state shared with its CQs: marked destroyed once DESTROY_QP succeeded.
    pub(crate) qp: Option<QpHandle<P>>,
    /// The destroy was refused as busy when `State::epoch` had this value: not tried again
    /// until another object is destroyed.
    pub(crate) busy_at: Option<u64>,
}

impl<P: Platform> Dropped<P> {
    /// A dropped object with no memory.
    pub(crate) fn number_only(kind: ObjectKind, number: u32) -> Self {
        Dropped {
            kind,
            number,
            held: Held::nothing(),
            qp: None,
            busy_at: None,
        }
    }
}

/// What happens to an object dropped after its HCA is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterClose {
    /// Bus mastering is off: free the memory.
    Free,
    /// Bus mastering could not be turned off: leak the memory.
    Leak,
}

pub(crate) struct State<P: Platform> {
    /// `slots[..len]` hold dropped objects.
    slots: HostArray<Option<Dropped<P>>, P>,
    len: usize,
    /// Reservations: live objects plus queued ones (never above `slots.len()`).
    reserved: usize,
    /// Objects destroyed so far (a busy refusal is retried once it moved).
    pub(crate) epoch: u64,
    /// `Some` once the HCA is torn down.
    closed: Option<AfterClose>,
}

/// What an HCA shares with the objects it created: the dropped-object list, and whether
/// the device is gone (torn down with bus mastering off), which a CQ reads without the
/// lock to flush in software what the device will never complete.
pub(crate) struct Shared<P: Platform> {
    state: SpinLock<State<P>>,
    gone: AtomicBool,
}

impl<P: Platform> Shared<P> {
    fn lock(&self) -> uhca_hal::host::SpinGuard<'_, State<P>> {
        self.state.lock()
    }
}

/// The list of dropped objects an HCA shares with the objects it created.
pub(crate) struct ReleaseQueue<P: Platform> {
    state: HostArc<Shared<P>, P>,
}

impl<P: Platform> ReleaseQueue<P> {
    /// An empty queue with room for `cap` objects.
    pub(crate) fn new(p: &P, cap: usize) -> Result<Self> {
        let slots = HostArray::new(p.clone(), cap, |_| None)?;
        let state = HostArc::new(
            p.clone(),
            Shared {
                state: SpinLock::new(State {
                    slots,
                    len: 0,
                    reserved: 0,
                    epoch: 0,
                    closed: None,
                }),
                gone: AtomicBool::new(false),
            },
        )?;
        Ok(ReleaseQueue { state })
    }

    /// A reservation for one more object, growing the queue first if needed (at creation,
    /// never in `Drop`).
    pub(crate) fn reserve(&self) -> Result<Ticket<P>> {
        loop {
            let cap = {
                let mut s = self.state.lock();
                if s.reserved < s.slots.len() {
                    s.reserved += 1;
                    return Ok(Ticket {
                        state: Some(self.state.clone()),
                    });
                }
                s.slots.len()
            };
            // Allocate outside the lock, then move the entries over.
            let host = self.state.lock().slots.host().clone();
            let mut bigger = HostArray::new(host, (cap * 2).max(16), |_| None)?;
            let mut s = self.state.lock();
            if bigger.len() > s.slots.len() {
                let len = s.len;
                for (dst, src) in bigger.iter_mut().zip(s.slots[..len].iter_mut()) {
                    *dst = src.take();
                }
                // The old array (all `None` now) is freed when the guard's value is replaced.
                core::mem::swap(&mut s.slots, &mut bigger);
            }
            drop(s);
            drop(bigger);
        }
    }

    /// Whether any dropped object waits that may be released now.
    pub(crate) fn has_work(&self) -> bool {
        let s = self.state.lock();
        s.slots[..s.len]
            .iter()
            .flatten()
            .any(|d| d.busy_at != Some(s.epoch))
    }

    /// Takes the next dropped object to release (the first kind in release order not
    /// refused as busy since the last destroy).
    pub(crate) fn take_next(&self) -> Option<Dropped<P>> {
        let mut s = self.state.lock();
        let epoch = s.epoch;
        let len = s.len;
        let i = s.slots[..len]
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.as_ref().map(|d| (i, d)))
            .filter(|(_, d)| d.busy_at != Some(epoch))
            .min_by_key(|(_, d)| d.kind)
            .map(|(i, _)| i)?;
        let d = s.slots[i].take();
        s.slots.swap(i, len - 1);
        s.len -= 1;
        d
    }

    /// Puts back an object the device found busy.
    pub(crate) fn put_back(&self, mut d: Dropped<P>) {
        let mut s = self.state.lock();
        d.busy_at = Some(s.epoch);
        let len = s.len;
        // Room: it was taken out just before, and its reservation is still held.
        s.slots[len] = Some(d);
        s.len += 1;
    }

    /// An object was destroyed (or given up): its reservation goes.
    pub(crate) fn finished(&self) {
        let mut s = self.state.lock();
        s.reserved = s.reserved.saturating_sub(1);
        s.epoch += 1;
    }

    /// The HCA is torn down: what is still queued is freed (`Free`) or leaked, and so is
    /// what is dropped later.
    pub(crate) fn close(&self, after: AfterClose) {
        // Bus mastering is off: the device writes no more CQEs, so what is outstanding
        // can be flushed in software (not when it could not be turned off).
        if matches!(after, AfterClose::Free) {
            self.state.gone.store(true, Ordering::Release);
        }
        let mut s = self.state.lock();
        s.closed = Some(after);
        let len = s.len;
        for slot in s.slots[..len].iter_mut() {
            if let Some(d) = slot.take() {
                dispose(d, after);
            }
        }
        s.len = 0;
    }
}

fn dispose<P: Platform>(d: Dropped<P>, after: AfterClose) {
    match after {
        AfterClose::Free => drop(d),
        AfterClose::Leak => d.held.leak(),
    }
}

/// An object's reservation in its HCA's release queue: dropping the object hands its
/// destroy to the queue ([`Ticket::release`]); dropping the ticket alone (the object was
/// destroyed, or never created) gives the reservation back.
pub(crate) struct Ticket<P: Platform> {
    state: Option<HostArc<Shared<P>, P>>,
}

impl<P: Platform> Ticket<P> {
    /// Whether the HCA was torn down with bus mastering off: the device will write
    /// nothing more for this object.
    #[inline(always)]
    pub(crate) fn hca_gone(&self) -> bool {
        self.state
            .as_ref()
            .is_some_and(|s| s.gone.load(Ordering::Acquire))
    }

    /// Queues the dropped object for its HCA (or frees or leaks its memory if the HCA is
    /// gone). Never allocates.
    pub(crate) fn release(mut self, d: Dropped<P>) {
        let Some(state) = self.state.take() else {
            d.held.leak();
            return;
        };
        let mut s = state.lock();
        if let Some(after) = s.closed {
            s.reserved = s.reserved.saturating_sub(1);
            drop(s);
            dispose(d, after);
            return;
        }
        let len = s.len;
        if len < s.slots.len() {
            s.slots[len] = Some(d);
            s.len += 1;
        } else {
            // Cannot happen (every reservation has a slot); never free what the device
            // may use.
            s.reserved = s.reserved.saturating_sub(1);
            d.held.leak();
        }
    }
}

impl<P: Platform> Drop for Ticket<P> {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            let mut s = state.lock();
            s.reserved = s.reserved.saturating_sub(1);
            s.epoch += 1;
        }
    }
}

impl<P: Platform> core::fmt::Debug for Ticket<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Ticket")
    }
}
