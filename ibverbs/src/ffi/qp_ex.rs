//! `ibv_create_qp_ex` and the `ibv_wr_*` way of posting sends (`ibv_qp_to_qp_ex`).
//!
//! `verbs.h`'s `ibv_wr_start`, `ibv_wr_send`, `ibv_wr_set_sge`, `ibv_wr_complete`, … are
//! inline functions that call through the pointers of `struct ibv_qp_ex`, which this
//! library's QPs carry right after their `struct ibv_qp` (`CQp::ex`), as rdma-core's
//! providers do. Between `wr_start` and `wr_complete` the requests are gathered as
//! `struct ibv_send_wr`s in the QP's [`WrBatch`] (allocated when the QP is created, never
//! grown); `wr_complete` posts them through the same code as `ibv_post_send`, one doorbell
//! per batch of that path. Inline data is copied when `wr_set_inline_data` is called, as
//! the API allows the application to reuse its buffer at once.
//!
//! Errors follow rdma-core's providers: a builder that cannot take its request (an
//! operation the QP was not created for, more requests or inline bytes than the QP holds, a
//! builder called outside `wr_start`/`wr_complete`) records the first error, and
//! `wr_complete` then posts nothing and returns it.
//!
//! The batch belongs to the thread that called `wr_start` until `wr_complete` or
//! `wr_abort` (another thread's `wr_start` waits for it, as rdma-core's providers take the
//! send queue's lock in `wr_start`); builders called from any other thread are refused.

use super::{CQp, IbvQp, IbvQpInitAttr, post_send, set_errno};
use crate::abi::{
    IbvAh, IbvDataBuf, IbvQpExOps, IbvQpInitAttrEx, IbvSendWr, IbvSge, SEND_INLINE,
    WR_ATOMIC_CMP_AND_SWP, WR_ATOMIC_FETCH_AND_ADD, WR_RDMA_READ, WR_RDMA_WRITE,
    WR_RDMA_WRITE_WITH_IMM, WR_SEND, WR_SEND_WITH_IMM, qp_init_attr_mask as mask, send_ops,
};
use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

/// The requests gathered between `wr_start` and `wr_complete`, in storage sized at creation.
pub(crate) struct WrBatch {
    /// The thread that owns the batch (`pthread_self` of its `wr_start`), 0 when none.
    owner: AtomicU64,
    /// The operations the QP was created for (`send_ops_flags`).
    ops: u64,
    /// Owned by `owner` (see the module's doc).
    state: UnsafeCell<State>,
}

// SAFETY: `state` is touched only by the thread recorded in `owner`, which one thread at a
// time becomes (compare-exchange from 0 in `wr_start`) and stops being (store of 0 in
// `wr_complete`/`wr_abort`, after its last access); the pointers inside `State` point into
// its own vectors or into memory the application lends for the batch's duration.
unsafe impl Send for WrBatch {}
// SAFETY: as above.
unsafe impl Sync for WrBatch {}

struct State {
    /// The requests; never grown past the capacity set at creation (their `next` and
    /// `sg_list` point into these vectors).
    wrs: Vec<IbvSendWr>,
    sges: Vec<IbvSge>,
    inline: Vec<u8>,
    /// Scatter/gather entries one request may carry.
    max_sge: usize,
    /// The first error of the batch.
    err: c_int,
}

impl WrBatch {
    /// Storage for `max_wr` requests of at most `max_sge` entries and `max_inline` inline
    /// bytes each (what the QP was created with), for the operations `ops`.
    pub(crate) fn new(ops: u64, max_wr: u32, max_sge: u32, max_inline: u32) -> Box<Self> {
        let (wr, sge) = (max_wr.max(1) as usize, max_sge.max(1) as usize);
        Box::new(WrBatch {
            owner: AtomicU64::new(0),
            ops,
            state: UnsafeCell::new(State {
                wrs: Vec::with_capacity(wr),
                sges: Vec::with_capacity(wr * sge),
                inline: Vec::with_capacity(wr * max_inline as usize),
                max_sge: sge,
                err: 0,
            }),
        })
    }
}

/// This thread's identity for [`WrBatch::owner`] (never 0: `pthread_self` is an address).
fn me() -> u64 {
    // SAFETY: pthread_self has no preconditions.
    (unsafe { libc::pthread_self() }) as u64
}

/// The batch of `qp` if the calling thread owns it (between its `wr_start` and
/// `wr_complete`).
///
/// # Safety
///
/// `qp` is a QP of this library (the `ibv_qp_ex` that `ibv_qp_to_qp_ex` returned).
unsafe fn owned<'a>(qp: *mut c_void) -> Option<&'a mut State> {
    if qp.is_null() {
        return None;
    }
    // SAFETY: the caller's contract; the QP lives until ibv_destroy_qp.
    let b = unsafe { (*(qp as *mut CQp)).wr.as_deref()? };
    if b.owner.load(Ordering::Acquire) != me() {
        return None;
    }
    // SAFETY: this thread owns the batch (see `WrBatch`'s Sync).
    Some(unsafe { &mut *b.state.get() })
}

/// Starts a request of `opcode` (needing the `send_ops` bit `op`) with the QP's `wr_id`
/// and `wr_flags`; the setter `set` fills its operation's fields.
///
/// # Safety
///
/// As [`owned`].
unsafe fn begin(qp: *mut c_void, op: u64, opcode: c_int, set: impl FnOnce(&mut IbvSendWr)) {
    // SAFETY: the caller's contract.
    let Some(s) = (unsafe { owned(qp) }) else {
        return;
    };
    // SAFETY: as above.
    let (ops, ex) = unsafe {
        let q = &*(qp as *mut CQp);
        (q.wr.as_ref().map_or(0, |b| b.ops), &q.ex)
    };
    if s.err != 0 {
        return;
    }
    if ops & op == 0 {
        s.err = libc::EOPNOTSUPP;
        return;
    }
    if s.wrs.len() == s.wrs.capacity() {
        s.err = libc::ENOMEM;
        return;
    }
    let mut w = IbvSendWr::ZERO;
    w.wr_id = ex.wr_id;
    // Inline is chosen by wr_set_inline_data, not by the flag.
    w.send_flags = ex.wr_flags & !SEND_INLINE;
    w.opcode = opcode;
    set(&mut w);
    s.wrs.push(w);
}

/// The request being built, if the calling thread owns the batch and it has one.
///
/// # Safety
///
/// As [`owned`].
unsafe fn current<'a>(qp: *mut c_void) -> Option<(&'a mut State, usize)> {
    // SAFETY: the caller's contract.
    let s = unsafe { owned(qp) }?;
    if s.err != 0 {
        return None;
    }
    if s.wrs.is_empty() {
        // A setter before any operation.
        s.err = libc::EINVAL;
        return None;
    }
    let i = s.wrs.len() - 1;
    Some((s, i))
}

/// Gives the current request the entries `list` (copied into the batch).
fn set_sges(s: &mut State, i: usize, list: impl ExactSizeIterator<Item = IbvSge>) {
    let n = list.len();
    if n > s.max_sge || s.sges.len() + n > s.sges.capacity() {
        s.err = libc::EINVAL;
        return;
    }
    let at = s.sges.len();
    s.sges.extend(list);
    let w = &mut s.wrs[i];
    w.send_flags &= !SEND_INLINE;
    w.sg_list = s.sges[at..].as_mut_ptr();
    w.num_sge = n as c_int;
}

/// Copies `parts` into the batch as the current request's inline data.
fn set_inline<'a>(s: &mut State, i: usize, parts: impl Iterator<Item = &'a [u8]> + Clone) {
    let total: usize = parts.clone().map(<[u8]>::len).sum();
    if s.inline.len() + total > s.inline.capacity() || s.sges.len() == s.sges.capacity() {
        s.err = libc::ENOMEM;
        return;
    }
    let at = s.inline.len();
    for p in parts {
        s.inline.extend_from_slice(p);
    }
    // One SGE over the copy; ibv_post_send's inline path reads it when the batch is posted
    // (the vector does not move: it never grows past its capacity).
    let addr = s.inline[at..].as_ptr() as u64;
    s.sges.push(IbvSge {
        addr,
        length: total as u32,
        lkey: 0,
    });
    let w = &mut s.wrs[i];
    w.send_flags |= SEND_INLINE;
    w.sg_list = s
        .sges
        .last_mut()
        .map_or(ptr::null_mut(), |g| g as *mut IbvSge);
    w.num_sge = 1;
}

/// Clears the batch and gives it up.
fn release(b: &WrBatch, s: &mut State) {
    s.wrs.clear();
    s.sges.clear();
    s.inline.clear();
    s.err = 0;
    b.owner.store(0, Ordering::Release);
}

unsafe extern "C" fn wr_start(qp: *mut c_void) {
    if qp.is_null() {
        return;
    }
    // SAFETY: qp is a QP of this library (verbs.h's contract for ibv_wr_start).
    let Some(b) = (unsafe { (*(qp as *mut CQp)).wr.as_deref() }) else {
        return;
    };
    let me = me();
    if b.owner.load(Ordering::Relaxed) == me {
        // A second wr_start without wr_complete: the batch goes on.
        return;
    }
    // Another thread's batch: wait for it to complete, as the providers' lock makes one
    // wait. Bounded by that thread's progress, as theirs.
    while b
        .owner
        .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
}

unsafe extern "C" fn wr_complete(qp: *mut c_void) -> c_int {
    // SAFETY: qp is a QP of this library (the caller's contract).
    let Some(s) = (unsafe { owned(qp) }) else {
        return libc::EINVAL;
    };
    // SAFETY: as above; owned() found the batch.
    let b = unsafe { (*(qp as *mut CQp)).wr.as_deref().expect("a batch") };
    let err = s.err;
    if err != 0 || s.wrs.is_empty() {
        release(b, s);
        return err;
    }
    let n = s.wrs.len();
    let base = s.wrs.as_mut_ptr();
    for i in 0..n {
        // SAFETY: i and i + 1 are within the vector's n requests.
        unsafe {
            (*base.add(i)).next = if i + 1 < n {
                base.add(i + 1)
            } else {
                ptr::null_mut()
            }
        };
    }
    let mut bad = ptr::null_mut();
    // SAFETY: a NULL-terminated list of requests whose SGEs and inline bytes are in this
    // batch (or the application's registered memory), alive during the call.
    let r = unsafe { post_send(qp, base as *mut c_void, &mut bad) };
    release(b, s);
    r
}

unsafe extern "C" fn wr_abort(qp: *mut c_void) {
    // SAFETY: qp is a QP of this library (the caller's contract).
    if let Some(s) = unsafe { owned(qp) } {
        // SAFETY: as above.
        let b = unsafe { (*(qp as *mut CQp)).wr.as_deref().expect("a batch") };
        release(b, s);
    }
}

unsafe extern "C" fn wr_send(qp: *mut c_void) {
    // SAFETY: verbs.h's contract: qp is the ibv_qp_ex of ibv_qp_to_qp_ex.
    unsafe { begin(qp, send_ops::SEND, WR_SEND, |_| ()) }
}

unsafe extern "C" fn wr_send_imm(qp: *mut c_void, imm: u32) {
    // SAFETY: as wr_send. `imm` is __be32, stored as ibv_send_wr.imm_data stores it.
    unsafe {
        begin(qp, send_ops::SEND_WITH_IMM, WR_SEND_WITH_IMM, |w| {
            w.imm_data = imm
        })
    }
}

unsafe extern "C" fn wr_rdma_write(qp: *mut c_void, rkey: u32, addr: u64) {
    // SAFETY: as wr_send.
    unsafe {
        begin(qp, send_ops::RDMA_WRITE, WR_RDMA_WRITE, |w| {
            w.set_rdma(addr, rkey)
        })
    }
}

unsafe extern "C" fn wr_rdma_write_imm(qp: *mut c_void, rkey: u32, addr: u64, imm: u32) {
    // SAFETY: as wr_send.
    unsafe {
        begin(
            qp,
            send_ops::RDMA_WRITE_WITH_IMM,
            WR_RDMA_WRITE_WITH_IMM,
            |w| {
                w.set_rdma(addr, rkey);
                w.imm_data = imm;
            },
        )
    }
}

unsafe extern "C" fn wr_rdma_read(qp: *mut c_void, rkey: u32, addr: u64) {
    // SAFETY: as wr_send.
    unsafe {
        begin(qp, send_ops::RDMA_READ, WR_RDMA_READ, |w| {
            w.set_rdma(addr, rkey)
        })
    }
}

unsafe extern "C" fn wr_atomic_cmp_swp(qp: *mut c_void, rkey: u32, addr: u64, cmp: u64, swp: u64) {
    // SAFETY: as wr_send.
    unsafe {
        begin(
            qp,
            send_ops::ATOMIC_CMP_AND_SWP,
            WR_ATOMIC_CMP_AND_SWP,
            |w| w.set_atomic(addr, rkey, cmp, swp),
        )
    }
}

unsafe extern "C" fn wr_atomic_fetch_add(qp: *mut c_void, rkey: u32, addr: u64, add: u64) {
    // SAFETY: as wr_send.
    unsafe {
        begin(
            qp,
            send_ops::ATOMIC_FETCH_AND_ADD,
            WR_ATOMIC_FETCH_AND_ADD,
            |w| w.set_atomic(addr, rkey, add, 0),
        )
    }
}

unsafe extern "C" fn wr_set_sge(qp: *mut c_void, lkey: u32, addr: u64, length: u32) {
    // SAFETY: as wr_send.
    if let Some((s, i)) = unsafe { current(qp) } {
        set_sges(s, i, core::iter::once(IbvSge { addr, length, lkey }));
    }
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut c_void, n: usize, list: *const IbvSge) {
    // SAFETY: as wr_send.
    let Some((s, i)) = (unsafe { current(qp) }) else {
        return;
    };
    if n > 0 && list.is_null() {
        s.err = libc::EINVAL;
        return;
    }
    let l = if n == 0 {
        &[][..]
    } else {
        // SAFETY: `list` holds `n` readable entries (the caller's contract); copied here.
        unsafe { std::slice::from_raw_parts(list, n) }
    };
    set_sges(s, i, l.iter().map(|g| IbvSge { ..*g }));
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut c_void, addr: *mut c_void, length: usize) {
    // SAFETY: as wr_send.
    let Some((s, i)) = (unsafe { current(qp) }) else {
        return;
    };
    if length > 0 && addr.is_null() {
        s.err = libc::EINVAL;
        return;
    }
    let data = if length == 0 {
        &[][..]
    } else {
        // SAFETY: `length` readable bytes at `addr` (the caller's contract), copied now.
        unsafe { std::slice::from_raw_parts(addr as *const u8, length) }
    };
    set_inline(s, i, core::iter::once(data));
}

unsafe extern "C" fn wr_set_inline_data_list(qp: *mut c_void, n: usize, list: *const IbvDataBuf) {
    // SAFETY: as wr_send.
    let Some((s, i)) = (unsafe { current(qp) }) else {
        return;
    };
    if n > 0 && list.is_null() {
        s.err = libc::EINVAL;
        return;
    }
    let bufs = if n == 0 {
        &[][..]
    } else {
        // SAFETY: `n` readable ibv_data_buf (the caller's contract).
        unsafe { std::slice::from_raw_parts(list, n) }
    };
    if bufs.iter().any(|b| b.length > 0 && b.addr.is_null()) {
        s.err = libc::EINVAL;
        return;
    }
    let parts = bufs.iter().map(|b| {
        if b.length == 0 {
            &[][..]
        } else {
            // SAFETY: each buffer names `length` readable bytes (the caller's contract),
            // copied now.
            unsafe { std::slice::from_raw_parts(b.addr as *const u8, b.length) }
        }
    });
    set_inline(s, i, parts);
}

unsafe extern "C" fn wr_set_ud_addr(qp: *mut c_void, ah: *mut IbvAh, qpn: u32, qkey: u32) {
    // SAFETY: as wr_send.
    if let Some((s, i)) = unsafe { current(qp) } {
        s.wrs[i].set_ud(ah, qpn, qkey);
    }
}

/// The operations this library does not offer: the batch fails with `EOPNOTSUPP` (and
/// `ibv_create_qp_ex` refuses QPs that ask for them).
unsafe extern "C" fn refuse(qp: *mut c_void) {
    // SAFETY: as wr_send.
    if let Some(s) = unsafe { owned(qp) }
        && s.err == 0
    {
        s.err = libc::EOPNOTSUPP;
    }
}
unsafe extern "C" fn wr_bind_mw(qp: *mut c_void, _: *mut c_void, _: u32, _: *const c_void) {
    // SAFETY: as wr_send.
    unsafe { refuse(qp) }
}
unsafe extern "C" fn wr_u32_refused(qp: *mut c_void, _: u32) {
    // SAFETY: as wr_send.
    unsafe { refuse(qp) }
}
unsafe extern "C" fn wr_send_tso(qp: *mut c_void, _: *mut c_void, _: u16, _: u16) {
    // SAFETY: as wr_send.
    unsafe { refuse(qp) }
}
unsafe extern "C" fn wr_atomic_write(qp: *mut c_void, _: u32, _: u64, _: *const c_void) {
    // SAFETY: as wr_send.
    unsafe { refuse(qp) }
}

/// `struct ibv_qp_ex`'s operations (after `qp_base`) as a QP starts: no request, every
/// pointer set.
pub(crate) const OPS: IbvQpExOps = IbvQpExOps {
    comp_mask: 0,
    wr_id: 0,
    wr_flags: 0,
    wr_atomic_cmp_swp,
    wr_atomic_fetch_add,
    wr_bind_mw,
    wr_local_inv: wr_u32_refused,
    wr_rdma_read,
    wr_rdma_write,
    wr_rdma_write_imm,
    wr_send,
    wr_send_imm,
    wr_send_inv: wr_u32_refused,
    wr_send_tso,
    wr_set_ud_addr,
    wr_set_xrc_srqn: wr_u32_refused,
    wr_set_inline_data,
    wr_set_inline_data_list,
    wr_set_sge,
    wr_set_sge_list,
    wr_start,
    wr_complete,
    wr_abort,
    wr_atomic_write,
};

/// `verbs_context.create_qp_ex` (what `ibv_create_qp_ex` calls unless only `pd` is set):
/// `pd`, and optionally `create_flags` of 0 and `send_ops_flags` within what
/// `ibv_post_send` offers; anything else `EOPNOTSUPP` (`EINVAL` without a PD).
pub(crate) unsafe extern "C" fn create_qp_ex(
    _context: *mut c_void,
    attr: *mut IbvQpInitAttrEx,
) -> *mut IbvQp {
    if attr.is_null() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    // SAFETY: the caller's readable and writable ibv_qp_init_attr_ex.
    let a = unsafe { &mut *attr };
    let known = mask::PD | mask::CREATE_FLAGS | mask::SEND_OPS_FLAGS;
    if a.comp_mask & !known != 0
        || (a.comp_mask & mask::CREATE_FLAGS != 0 && a.create_flags != 0)
        || (a.comp_mask & mask::SEND_OPS_FLAGS != 0 && a.send_ops_flags & !send_ops::OFFERED != 0)
    {
        set_errno(libc::EOPNOTSUPP);
        return ptr::null_mut();
    }
    if a.comp_mask & mask::PD == 0 || a.pd.is_null() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    let ops = (a.comp_mask & mask::SEND_OPS_FLAGS != 0).then_some(a.send_ops_flags);
    // SAFETY: ibv_qp_init_attr_ex begins with ibv_qp_init_attr's fields, in its layout (as
    // verbs.h's own ibv_create_qp_ex relies on).
    let base = unsafe { &mut *(attr as *mut IbvQpInitAttr) };
    // SAFETY: pd is the caller's PD of this library.
    unsafe { super::create_qp_with(a.pd, base, ops) }
}

/// `ibv_qp_to_qp_ex`: the QP itself for a QP created with `send_ops_flags`, else NULL (as
/// rdma-core).
///
/// # Safety
///
/// `qp` is NULL or a QP of this library.
pub(crate) unsafe fn to_qp_ex(qp: *mut c_void) -> *mut c_void {
    if qp.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: the caller's contract.
    match unsafe { (*(qp as *mut CQp)).wr.is_some() } {
        true => qp,
        false => ptr::null_mut(),
    }
}
