//! `ibv_create_cq_ex` and the `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll` way of
//! reading completions (`ibv_wc_read_opcode`, `ibv_wc_read_byte_len`, …).
//!
//! `verbs.h`'s inlines call through the pointers of `struct ibv_cq_ex`, which this
//! library's CQs carry right after their `struct ibv_cq` (`CCq::ex`), as rdma-core's
//! providers do; `ibv_cq_ex_to_cq` is a cast. Each `start_poll`/`next_poll` takes one
//! completion through the same code as `ibv_poll_cq` into the CQ's current `ibv_wc`, whose
//! status and `wr_id` go into the `ibv_cq_ex` and whose other fields the `read_*`
//! operations return.
//!
//! From a `start_poll` that found a completion until `end_poll`, the CQ's current
//! completion belongs to that thread (another thread's `start_poll` waits, as rdma-core's
//! providers take the CQ's lock in `start_poll`); a `start_poll` that finds nothing
//! (`ENOENT`) gives it up at once, as the API says `end_poll` is then not called. The
//! `read_*` of any other thread read zeros.

use super::{CCq, IbvContext, IbvCq, create_cq, poll_cq, set_errno};
use crate::abi::{IbvCqExOps, IbvCqInitAttrEx, IbvWc, cq_init};
use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

/// A CQ's current completion and the thread it belongs to.
pub(crate) struct Current {
    /// `pthread_self` of the thread between `start_poll` and `end_poll`, 0 when none.
    owner: AtomicU64,
    /// Touched only by `owner`.
    wc: UnsafeCell<IbvWc>,
}

// SAFETY: `wc` is touched only by the thread recorded in `owner`, which one thread at a time
// becomes (compare-exchange from 0 in `start_poll`) and stops being (store of 0 in
// `end_poll`, or in a `start_poll` that found nothing), after its last access.
unsafe impl Sync for Current {}

impl Current {
    /// No completion, no owner.
    pub(crate) fn new() -> Self {
        Current {
            owner: AtomicU64::new(0),
            wc: UnsafeCell::new(IbvWc {
                wr_id: 0,
                status: 0,
                opcode: 0,
                vendor_err: 0,
                byte_len: 0,
                imm_data: 0,
                qp_num: 0,
                src_qp: 0,
                wc_flags: 0,
                pkey_index: 0,
                slid: 0,
                sl: 0,
                dlid_path_bits: 0,
            }),
        }
    }
}

fn me() -> u64 {
    // SAFETY: pthread_self has no preconditions.
    (unsafe { libc::pthread_self() }) as u64
}

/// The CQ of `cq` (an `ibv_cq_ex` of this library).
///
/// # Safety
///
/// `cq` is a live CQ of this library.
unsafe fn ccq<'a>(cq: *mut c_void) -> &'a CCq {
    // SAFETY: the caller's contract.
    unsafe { &*(cq as *mut CCq) }
}

/// Takes one completion into the current one; its status and `wr_id` into the `ibv_cq_ex`.
/// 0, `ENOENT` (none), or the errno of a failed poll.
///
/// # Safety
///
/// `cq` is a live CQ of this library and the calling thread owns its current completion.
unsafe fn take_one(cq: *mut c_void) -> c_int {
    // SAFETY: the caller's contract.
    let c = unsafe { ccq(cq) };
    let wc = c.cur.wc.get();
    // SAFETY: one writable ibv_wc, this thread's (it owns the current completion).
    match unsafe { poll_cq(cq as *mut IbvCq, 1, wc as *mut c_void) } {
        1 => {
            // SAFETY: as above; the ibv_cq_ex fields are written only by the owner.
            unsafe {
                let ex = ptr::addr_of_mut!((*(cq as *mut CCq)).ex);
                (*ex).status = (*wc).status;
                (*ex).wr_id = (*wc).wr_id;
            }
            0
        }
        0 => libc::ENOENT,
        e => -e,
    }
}

unsafe extern "C" fn start_poll(cq: *mut c_void, _attr: *mut c_void) -> c_int {
    if cq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: cq is the caller's CQ of this library (verbs.h's contract).
    let cur = unsafe { &ccq(cq).cur };
    let me = me();
    // Another thread between its start_poll and end_poll: wait for it, as the providers'
    // lock makes one wait (bounded by that thread's progress, as theirs).
    while cur
        .owner
        .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        if cur.owner.load(Ordering::Relaxed) == me {
            // A second start_poll without end_poll: go on polling.
            break;
        }
        std::thread::yield_now();
    }
    // SAFETY: this thread owns the current completion now.
    let r = unsafe { take_one(cq) };
    if r != 0 {
        // Nothing (or an error): end_poll is not called, so give it up here.
        cur.owner.store(0, Ordering::Release);
    }
    r
}

unsafe extern "C" fn next_poll(cq: *mut c_void) -> c_int {
    // SAFETY: cq is the caller's CQ of this library.
    if cq.is_null() || unsafe { ccq(cq) }.cur.owner.load(Ordering::Acquire) != me() {
        return libc::EINVAL;
    }
    // SAFETY: this thread owns the current completion.
    unsafe { take_one(cq) }
}

unsafe extern "C" fn end_poll(cq: *mut c_void) {
    if cq.is_null() {
        return;
    }
    // SAFETY: cq is the caller's CQ of this library.
    let cur = unsafe { &ccq(cq).cur };
    if cur.owner.load(Ordering::Relaxed) == me() {
        cur.owner.store(0, Ordering::Release);
    }
}

/// `f` of the current completion, or its zero if the calling thread does not own it.
///
/// # Safety
///
/// `cq` is NULL or a live CQ of this library.
unsafe fn read<T: Default>(cq: *mut c_void, f: impl FnOnce(&IbvWc) -> T) -> T {
    if cq.is_null() {
        return T::default();
    }
    // SAFETY: the caller's contract.
    let cur = unsafe { &ccq(cq).cur };
    if cur.owner.load(Ordering::Acquire) != me() {
        return T::default();
    }
    // SAFETY: this thread owns the current completion.
    f(unsafe { &*cur.wc.get() })
}

macro_rules! readers {
    ($($name:ident -> $t:ty = |$w:ident| $e:expr;)*) => {$(
        unsafe extern "C" fn $name(cq: *mut c_void) -> $t {
            // SAFETY: cq is the caller's CQ of this library (verbs.h's contract).
            unsafe { read(cq, |$w: &IbvWc| $e) }
        }
    )*};
}

readers! {
    read_opcode -> c_int = |w| w.opcode;
    read_vendor_err -> u32 = |w| w.vendor_err;
    read_byte_len -> u32 = |w| w.byte_len;
    read_imm_data -> u32 = |w| w.imm_data;
    read_qp_num -> u32 = |w| w.qp_num;
    read_src_qp -> u32 = |w| w.src_qp;
    read_wc_flags -> u32 = |w| w.wc_flags;
    read_slid -> u32 = |w| w.slid.into();
    read_sl -> u8 = |w| w.sl;
    read_dlid_path_bits -> u8 = |w| w.dlid_path_bits;
}

/// The fields `ibv_create_cq_ex` refuses to be asked for (no timestamps, VLANs, flow tags or
/// tag matching here): zero, should a program read them anyway.
unsafe extern "C" fn read_zero_u64(_cq: *mut c_void) -> u64 {
    0
}
unsafe extern "C" fn read_zero_u16(_cq: *mut c_void) -> u16 {
    0
}
unsafe extern "C" fn read_zero_u32(_cq: *mut c_void) -> u32 {
    0
}
unsafe extern "C" fn read_tm_info(_cq: *mut c_void, _info: *mut c_void) {}

/// `struct ibv_cq_ex`'s fields and operations (after the `ibv_cq`) as a CQ starts.
pub(crate) const OPS: IbvCqExOps = IbvCqExOps {
    comp_mask: 0,
    status: 0,
    wr_id: 0,
    start_poll,
    next_poll,
    end_poll,
    read_opcode,
    read_vendor_err,
    read_byte_len,
    read_imm_data,
    read_qp_num,
    read_src_qp,
    read_wc_flags,
    read_slid,
    read_sl,
    read_dlid_path_bits,
    read_completion_ts: read_zero_u64,
    read_cvlan: read_zero_u16,
    read_flow_tag: read_zero_u32,
    read_tm_info,
    read_completion_wallclock_ns: read_zero_u64,
};

/// `verbs_context.create_cq_ex` (what `ibv_create_cq_ex` calls): a CQ as `ibv_create_cq`
/// makes, for the standard completion fields (`IBV_WC_STANDARD_FLAGS`), with
/// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED` taken as the hint it is; timestamps and the other
/// fields, a parent domain, `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`: `EOPNOTSUPP`.
pub(crate) unsafe extern "C" fn create_cq_ex(
    ctx: *mut IbvContext,
    attr: *mut IbvCqInitAttrEx,
) -> *mut IbvCq {
    if attr.is_null() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    // SAFETY: the caller's readable ibv_cq_init_attr_ex.
    let a = unsafe { &*attr };
    let flags = if a.comp_mask & cq_init::MASK_FLAGS != 0 {
        a.flags
    } else {
        0
    };
    if a.wc_flags & !cq_init::STANDARD_WC_FLAGS != 0
        || a.comp_mask & !(cq_init::MASK_FLAGS | cq_init::MASK_PD) != 0
        || (a.comp_mask & cq_init::MASK_PD != 0 && !a.parent_domain.is_null())
        || flags & !cq_init::SINGLE_THREADED != 0
    {
        set_errno(libc::EOPNOTSUPP);
        return ptr::null_mut();
    }
    if a.cqe > i32::MAX as u32 || a.comp_vector > i32::MAX as u32 {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    // SAFETY: ctx is the caller's open context (create_cq checks it is one of ours).
    unsafe {
        create_cq(
            ctx,
            a.cqe as c_int,
            a.cq_context,
            a.channel,
            a.comp_vector as c_int,
        )
    }
}
