//! The C ABI of asynchronous events: `ibv_get_async_event` and `ibv_ack_async_event` on
//! the context's `async_fd` (see [`crate::events`]), and what the destroy verbs wait for:
//! as rdma-core documents, destroying a QP, SRQ or CQ waits until every event handed out
//! for it was acknowledged.

use core::ffi::{c_int, c_void};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{CCq, CQp, CSrq, Entry, report, set_errno};
use crate::abi::{IbvAsyncEvent, IbvContext};
use crate::events::{Element, kind};

/// An object events may name: the C object handed out, the events reported for it and
/// those acknowledged, and whether its destroy has begun (no event is reported then).
struct Target {
    ptr: usize,
    reported: u32,
    acked: u32,
    retiring: bool,
}

/// The objects by (device, handle): handles are unique within a device.
static TARGETS: Mutex<BTreeMap<(usize, u32), Target>> = Mutex::new(BTreeMap::new());

/// How long a destroy waits for the application to acknowledge the events of the object.
const ACK_WAIT: Duration = Duration::from_secs(30);

fn targets() -> std::sync::MutexGuard<'static, BTreeMap<(usize, u32), Target>> {
    TARGETS.lock().unwrap_or_else(|p| p.into_inner())
}

fn key(entry: &Entry, handle: u32) -> (usize, u32) {
    (entry as *const Entry as usize, handle)
}

/// Events for the object `handle` of `entry` name `ptr` from now on.
pub(super) fn register(entry: &Entry, handle: u32, ptr: *mut c_void) {
    targets().insert(
        key(entry, handle),
        Target {
            ptr: ptr as usize,
            reported: 0,
            acked: 0,
            retiring: false,
        },
    );
}

/// Before destroying `handle`: no more events are reported for it, and this waits (up to
/// [`ACK_WAIT`]) until those reported were acknowledged. `false` if they were not (the
/// object stays as it was, still named by events).
pub(super) fn retire(entry: &Entry, handle: u32) -> bool {
    let k = key(entry, handle);
    let deadline = Instant::now() + ACK_WAIT;
    loop {
        {
            let mut t = targets();
            let Some(o) = t.get_mut(&k) else {
                return true;
            };
            o.retiring = true;
            if o.acked == o.reported {
                return true;
            }
            if Instant::now() > deadline {
                o.retiring = false;
                return false;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// After a destroy: `true` forgets the object, `false` (the destroy failed) lets events
/// name it again.
pub(super) fn retired(entry: &Entry, handle: u32, destroyed: bool) {
    let k = key(entry, handle);
    let mut t = targets();
    if destroyed {
        t.remove(&k);
    } else if let Some(o) = t.get_mut(&k) {
        o.retiring = false;
    }
}

export!("ibv_get_async_event" @ "IBVERBS_1.1" => get_async_event);
/// The next asynchronous event of the context's device into `event`: 0, or -1 with
/// `errno` (EAGAIN when `O_NONBLOCK` is set on `async_fd` and none is waiting). Waits on
/// `async_fd` otherwise.
unsafe extern "C" fn get_async_event(ctx: *mut IbvContext, event: *mut IbvAsyncEvent) -> c_int {
    if ctx.is_null() || event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: ctx is the caller's open context (the ibv_context of a live Ctx); it is not
    // closed while waited on.
    let c = unsafe { &*super::vctx::ctx_of(ctx) };
    let Some(fd) = c.async_events.as_ref() else {
        set_errno(libc::EINVAL);
        return -1;
    };
    loop {
        let ev = match c
            .entry
            .dev
            .wait_async_event(super::fd_nonblocking(fd.raw_fd()))
        {
            Ok(ev) => ev,
            Err(e) => {
                // EAGAIN on a non-blocking fd is what a program expects: no noise for it.
                if e.errno != libc::EAGAIN {
                    report(&e);
                }
                set_errno(e.errno);
                return -1;
            }
        };
        let element = match ev.element {
            // The union's int port_num, in the low bytes of the pointer-sized element.
            Element::Port(p) => usize::from(p),
            Element::Qp(h) | Element::Srq(h) | Element::Cq(h) => {
                let mut t = targets();
                match t.get_mut(&key(c.entry, h)) {
                    Some(o) if !o.retiring => {
                        o.reported += 1;
                        o.ptr
                    }
                    // Being destroyed (or made by no C call): the event is dropped.
                    _ => continue,
                }
            }
        };
        // SAFETY: event is the caller's writable struct ibv_async_event.
        unsafe {
            event.write(IbvAsyncEvent {
                element: element as *mut c_void,
                event_type: ev.kind,
            })
        };
        return 0;
    }
}

export!("ibv_ack_async_event" @ "IBVERBS_1.1" => ack_async_event);
/// Acknowledges an event `ibv_get_async_event` returned: the destroy of its object stops
/// waiting for it.
unsafe extern "C" fn ack_async_event(event: *mut IbvAsyncEvent) {
    if event.is_null() {
        return;
    }
    // SAFETY: event is the caller's struct, filled by get_async_event.
    let e = unsafe { &*event };
    if e.element.is_null() {
        return;
    }
    // SAFETY: per its type, element is the QP, SRQ or CQ get_async_event named, not yet
    // destroyed (its destroy waits for this acknowledgement).
    let (entry, handle) = unsafe {
        match e.event_type {
            kind::CQ_ERR => {
                let c = &*(e.element as *mut CCq);
                (c.entry, c.ibv.handle)
            }
            kind::SRQ_ERR | kind::SRQ_LIMIT_REACHED => {
                let s = &*(e.element as *mut CSrq);
                (s.entry, s.ibv.handle)
            }
            kind::QP_FATAL
            | kind::QP_REQ_ERR
            | kind::QP_ACCESS_ERR
            | kind::COMM_EST
            | kind::PATH_MIG_ERR
            | kind::QP_LAST_WQE_REACHED => {
                let q = &*(e.element as *mut CQp);
                (q.entry, q.ibv.handle)
            }
            // Port events name no object.
            _ => return,
        }
    };
    if let Some(o) = targets().get_mut(&key(entry, handle)) {
        o.acked = o.acked.wrapping_add(1);
    }
}
