//! The C ABI: the exported verbs, each carried by a trampoline with its rdma-core version
//! (`export!`), and the only `unsafe` of the crate. Every function here checks its pointers
//! against what this library handed out where it can, converts, and calls [`crate::device`].

use core::ffi::{CStr, c_char, c_int, c_void};
use core::ptr;
use std::sync::OnceLock;

use uhca_driver::caps::LinkLayer;
use uhca_driver::verbs::GidType;

use crate::abi::*;
use crate::config::{self, DeviceKind};
use crate::device::{Device, VerbsError};
use crate::qp::{AppSendWr, AppSge, POST_BATCH, POST_BATCH_SGES};

/// Exports `$f` as `$sym@@$ver`: a global trampoline (a jump to the Rust function) that
/// carries the version through `.symver`; the version script (build.rs) declares the nodes
/// and localizes every other name.
macro_rules! export {
    ($sym:literal @ $ver:literal => $f:path) => {
        core::arch::global_asm!(
            ".pushsection .text",
            ".p2align 4",
            concat!(".globl uhca_export_", $sym),
            concat!(".type uhca_export_", $sym, ",@function"),
            concat!("uhca_export_", $sym, ":"),
            "jmp {f}@PLT",
            concat!(".size uhca_export_", $sym, ", . - uhca_export_", $sym),
            concat!(".symver uhca_export_", $sym, ", ", $sym, "@@", $ver),
            ".popsection",
            f = sym $f,
        );
    };
}

mod ah;
mod cq_ex;
mod events;
mod qp_ex;
mod strs;
mod stubs;
mod vctx;

/// One configured device: the core's and the `struct ibv_device` handed out for it.
struct Entry {
    dev: Device,
    c: Box<IbvDevice>,
}

fn registry() -> &'static [Entry] {
    static REG: OnceLock<Vec<Entry>> = OnceLock::new();
    REG.get_or_init(|| {
        let specs = match std::env::var(config::ENV) {
            Err(_) => {
                eprintln!("{}", config::HINT);
                Vec::new()
            }
            Ok(v) => match config::parse(&v) {
                Ok(s) if s.is_empty() => {
                    eprintln!("{}", config::HINT);
                    s
                }
                Ok(s) => s,
                Err(e) => {
                    eprintln!("uhca libibverbs: {e}; no devices offered");
                    Vec::new()
                }
            },
        };
        specs
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                let mut c = Box::new(IbvDevice {
                    ops: DeviceOps {
                        dummy1: 0,
                        dummy2: 0,
                    },
                    node_type: NODE_CA,
                    transport_type: TRANSPORT_IB,
                    name: [0; SYSFS_NAME_MAX],
                    dev_name: [0; SYSFS_NAME_MAX],
                    dev_path: [0; SYSFS_PATH_MAX],
                    ibdev_path: [0; SYSFS_PATH_MAX],
                });
                put_str(&mut c.name, &spec.name);
                // Not the kernel's `uverbsN`: no kernel device stands behind this one, and
                // a program that looks for `/dev/infiniband/<dev_name>` (UCX does) must
                // not find a kernel device's node there (`uhca-dev-nodes.sh` makes ours).
                put_str(&mut c.dev_name, &format!("uhca_uverbs{i}"));
                put_str(
                    &mut c.dev_path,
                    &format!("/sys/class/infiniband_verbs/uhca_uverbs{i}"),
                );
                put_str(
                    &mut c.ibdev_path,
                    &format!("/sys/class/infiniband/{}", spec.name),
                );
                Entry {
                    dev: Device::new(spec),
                    c,
                }
            })
            .collect()
    })
}

fn put_str(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
    dst[n] = 0;
}

/// Whether the program set `O_NONBLOCK` on `fd` (a channel's `fd`, a context's `async_fd`):
/// the verb that would wait answers EAGAIN then, as rdma-core's.
fn fd_nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL reads the descriptor's flags; no memory is passed.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno, valid for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

/// Prints a failure once on stderr (as a provider's debug output would) when
/// `UHCA_VERBS_DEBUG` is set, and returns its errno.
fn report(e: &VerbsError) -> c_int {
    if std::env::var_os("UHCA_VERBS_DEBUG").is_some() {
        eprintln!("uhca libibverbs: {e}");
    }
    e.errno
}

fn entry_of(dev: *const IbvDevice) -> Option<&'static Entry> {
    registry().iter().find(|e| ptr::eq(&*e.c, dev))
}

/// What `ibv_open_device` allocates: the `struct verbs_context` (its `ibv_context`, the
/// program's handle, last), then which device.
#[repr(C)]
struct Ctx {
    vctx: VerbsContext,
    entry: &'static Entry,
    /// The `async_fd`'s socket, woken by the device's interrupts (`ibv_get_async_event`).
    async_events: Option<crate::device::ChannelFd>,
    /// What `cmd_fd` is: `/dev/null`, a descriptor a program may `dup`, `fstat` or close on
    /// exec as rdma-core's command file (no command goes through it here: importing a
    /// context from it is `EOPNOTSUPP`).
    _cmd: Option<std::fs::File>,
}

/// A PD: the `struct ibv_pd`, then the device.
#[repr(C)]
struct CPd {
    ibv: IbvPd,
    entry: &'static Entry,
}

/// An MR: the `struct ibv_mr`, then the device.
#[repr(C)]
struct CMr {
    ibv: IbvMr,
    entry: &'static Entry,
}

/// A CQ: the `struct ibv_cq` and the rest of a `struct ibv_cq_ex`, then the device.
#[repr(C)]
struct CCq {
    ibv: IbvCq,
    /// What `struct ibv_cq_ex` has after its `ibv_cq` (`ffi/cq_ex.rs`).
    ex: crate::abi::IbvCqExOps,
    entry: &'static Entry,
    /// The completion `ibv_start_poll`/`ibv_next_poll` took last.
    cur: cq_ex::Current,
}

/// The device of a context this library made.
///
/// # Safety
///
/// `ctx` is null or a context from `ibv_open_device` not yet closed.
unsafe fn ctx_entry(ctx: *mut IbvContext) -> Option<&'static Entry> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: by the contract, a non-null ctx is the ibv_context of a live Ctx.
    Some(unsafe { (*vctx::ctx_of(ctx)).entry })
}

// ---- The device list --------------------------------------------------------------

export!("ibv_get_device_list" @ "IBVERBS_1.1" => get_device_list);
unsafe extern "C" fn get_device_list(num: *mut c_int) -> *mut *mut IbvDevice {
    let reg = registry();
    let mut v: Vec<*mut IbvDevice> = reg
        .iter()
        .map(|e| &*e.c as *const IbvDevice as *mut IbvDevice)
        .collect();
    let n = v.len();
    v.push(ptr::null_mut());
    if !num.is_null() {
        // SAFETY: the caller passes a writable int or NULL.
        unsafe { *num = n as c_int };
    }
    Box::into_raw(v.into_boxed_slice()) as *mut *mut IbvDevice
}

export!("ibv_free_device_list" @ "IBVERBS_1.1" => free_device_list);
unsafe extern "C" fn free_device_list(list: *mut *mut IbvDevice) {
    if list.is_null() {
        return;
    }
    let mut n = 0;
    // SAFETY: the list came from get_device_list: NULL-terminated.
    while !unsafe { *list.add(n) }.is_null() {
        n += 1;
    }
    // SAFETY: it was a boxed slice of n + 1 pointers, handed back once.
    drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(list, n + 1)) });
}

export!("ibv_get_device_name" @ "IBVERBS_1.1" => get_device_name);
unsafe extern "C" fn get_device_name(dev: *mut IbvDevice) -> *const c_char {
    match entry_of(dev) {
        Some(e) => e.c.name.as_ptr(),
        None => {
            set_errno(libc::EINVAL);
            ptr::null()
        }
    }
}

export!("ibv_get_device_guid" @ "IBVERBS_1.1" => get_device_guid);
unsafe extern "C" fn get_device_guid(dev: *mut IbvDevice) -> u64 {
    match entry_of(dev) {
        Some(e) => e.dev.node_guid().to_be(),
        None => {
            set_errno(libc::EINVAL);
            0
        }
    }
}

// ---- Contexts ---------------------------------------------------------------------

unsafe extern "C" fn alloc_mw(_pd: *mut IbvPd, _t: c_int) -> *mut c_void {
    set_errno(libc::EOPNOTSUPP);
    ptr::null_mut()
}
unsafe extern "C" fn bind_mw(_qp: *mut c_void, _mw: *mut c_void, _b: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}
unsafe extern "C" fn dealloc_mw(_mw: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}
/// The `poll_cq` op: up to `n` completions into `wc`; negative on failure.
unsafe extern "C" fn poll_cq(cq: *mut IbvCq, n: c_int, wc: *mut c_void) -> c_int {
    use uhca_driver::verbs::{WcOpcode, WcStatus};
    if cq.is_null() || n < 0 || (n > 0 && wc.is_null()) {
        return -libc::EINVAL;
    }
    // SAFETY: cq came from create_cq.
    let c = unsafe { &*(cq as *mut CCq) };
    // Polled into the stack, at most 16 a call (a poll asks for a batch; the rest stay on
    // the CQ for the next call), so the datapath allocates nothing.
    let mut got = [uhca_driver::verbs::WorkCompletion::default(); 16];
    let got = match c
        .entry
        .dev
        .poll_cq(c.ibv.handle, &mut got[..(n as usize).min(16)])
    {
        Ok(k) => &got[..k],
        Err(e) => return -report(&e),
    };
    // SAFETY: wc holds n writable struct ibv_wc (the caller's contract), and got.len() <= n.
    let out = unsafe { std::slice::from_raw_parts_mut(wc as *mut IbvWc, got.len()) };
    for (o, w) in out.iter_mut().zip(got) {
        let status = match w.status {
            WcStatus::Success => 0,
            WcStatus::LocalLength => 1,
            WcStatus::LocalQpOp => 2,
            WcStatus::LocalProtection => 4,
            WcStatus::WrFlushed => 5,
            WcStatus::MwBind => 6,
            WcStatus::BadResponse => 7,
            WcStatus::LocalAccess => 8,
            WcStatus::RemoteInvalidRequest => 9,
            WcStatus::RemoteAccess => 10,
            WcStatus::RemoteOperation => 11,
            WcStatus::RetryExceeded => 12,
            WcStatus::RnrRetryExceeded => 13,
            WcStatus::RemoteAborted => 16,
            // IBV_WC_GENERAL_ERR, also for a status added to the driver after this table.
            _ => 21,
        };
        let mut status = status;
        let opcode = match w.opcode {
            WcOpcode::Send => 0,
            WcOpcode::RdmaWrite => 1,
            WcOpcode::RdmaRead => 2,
            WcOpcode::CompSwap => 3,
            WcOpcode::FetchAdd => 4,
            WcOpcode::Recv => 128,
            WcOpcode::RecvRdmaWithImm => 129,
            // An opcode added to the driver after this table: reported as a general error
            // rather than as a completion of the wrong kind.
            _ => {
                status = 21;
                0
            }
        };
        *o = IbvWc {
            wr_id: w.wr_id,
            status,
            opcode,
            vendor_err: u32::from(w.vendor_err),
            byte_len: w.byte_len,
            // __be32 in memory, as verbs says.
            imm_data: w.imm_data.to_be(),
            qp_num: w.qp_num,
            src_qp: w.src_qp,
            // IBV_WC_GRH 1, IBV_WC_WITH_IMM 2, IBV_WC_WITH_INV 8.
            wc_flags: {
                let f = w.wc_flags.bits() as u32;
                (f & 3) | if f & 4 != 0 { 8 } else { 0 }
            },
            pkey_index: 0,
            slid: w.slid,
            sl: w.sl,
            dlid_path_bits: w.dlid_path_bits,
        };
    }
    got.len() as c_int
}
/// The `req_notify_cq` op: arms a CQ that is on a completion channel.
unsafe extern "C" fn req_notify_cq(cq: *mut IbvCq, solicited: c_int) -> c_int {
    if cq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: cq came from create_cq.
    let c = unsafe { &*(cq as *mut CCq) };
    match c.entry.dev.req_notify_cq(c.ibv.handle, solicited != 0) {
        Ok(()) => 0,
        Err(e) => report(&e),
    }
}
export!("ibv_open_device" @ "IBVERBS_1.1" => open_device);
unsafe extern "C" fn open_device(dev: *mut IbvDevice) -> *mut IbvContext {
    let Some(entry) = entry_of(dev) else {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    };
    if let Err(e) = entry.dev.open() {
        eprintln!("uhca libibverbs: {}: {e}", entry.dev.spec().name);
        set_errno(e.errno);
        return ptr::null_mut();
    }
    let ops = IbvContextOps {
        compat0: [ptr::null_mut(); 7],
        alloc_mw: Some(alloc_mw),
        bind_mw: Some(bind_mw),
        dealloc_mw: Some(dealloc_mw),
        compat1: ptr::null_mut(),
        poll_cq: Some(poll_cq),
        req_notify_cq: Some(req_notify_cq),
        compat2: [ptr::null_mut(); 7],
        post_srq_recv: Some(post_srq_recv),
        compat3: [ptr::null_mut(); 4],
        post_send: Some(post_send),
        post_recv: Some(post_recv),
        compat4: [ptr::null_mut(); 5],
    };
    // A socket readable while an asynchronous event waits, as a completion channel's:
    // poll(2) on it wakes when ibv_get_async_event has one.
    let async_events = match entry.dev.create_async_fd() {
        Ok(fd) => Some(fd),
        Err(e) => {
            let _ = entry.dev.close();
            set_errno(report(&e));
            return ptr::null_mut();
        }
    };
    let async_fd = async_events.as_ref().map_or(-1, |f| f.raw_fd());
    let cmd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .ok();
    let cmd_fd = cmd.as_ref().map_or(-1, std::os::fd::AsRawFd::as_raw_fd);
    let ctx = Box::new(Ctx {
        vctx: vctx::verbs_context(IbvContext {
            device: dev,
            ops,
            cmd_fd,
            async_fd,
            num_comp_vectors: 1,
            mutex: libc::PTHREAD_MUTEX_INITIALIZER,
            abi_compat: ptr::null_mut(),
        }),
        entry,
        async_events,
        _cmd: cmd,
    });
    vctx::context_of(Box::into_raw(ctx))
}

export!("ibv_close_device" @ "IBVERBS_1.1" => close_device);
unsafe extern "C" fn close_device(ctx: *mut IbvContext) -> c_int {
    if ctx.is_null() {
        return -1;
    }
    // SAFETY: a context from open_device, closed once (the caller's contract).
    let mut ctx = unsafe { Box::from_raw(vctx::ctx_of(ctx)) };
    if let Some(fd) = ctx.async_events.take() {
        // The interrupts stop waking it; its socket (async_fd) closes here.
        ctx.entry.dev.destroy_channel(fd);
    }
    match ctx.entry.dev.close() {
        Ok(()) => 0,
        Err(e) => {
            set_errno(report(&e));
            -1
        }
    }
}

// ---- Queries ----------------------------------------------------------------------

export!("ibv_query_device" @ "IBVERBS_1.1" => query_device);
unsafe extern "C" fn query_device(ctx: *mut IbvContext, attr: *mut IbvDeviceAttr) -> c_int {
    // SAFETY: ctx is the caller's open context.
    let Some(entry) = (unsafe { ctx_entry(ctx) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    let d = match entry.dev.query_device() {
        Ok(d) => d,
        Err(e) => return report(&e),
    };
    let c = &d.caps;
    let i = |v: u32| v.min(i32::MAX as u32) as c_int;
    // SAFETY: attr points to a writable struct ibv_device_attr (the caller's contract);
    // every field is plain data, so zeroing first is a valid value.
    let a = unsafe {
        ptr::write_bytes(attr, 0, 1);
        &mut *attr
    };
    put_str(
        &mut a.fw_ver,
        &format!("{}.{}.{}", d.fw_version.0, d.fw_version.1, d.fw_version.2),
    );
    a.node_guid = d.node_guid.to_be();
    a.sys_image_guid = d.sys_image_guid.to_be();
    a.max_mr_size = if d.log_max_mr_size >= 64 {
        u64::MAX
    } else {
        1u64 << d.log_max_mr_size
    };
    a.page_size_cap = 4096;
    a.vendor_id = u32::from(d.vendor_id);
    a.vendor_part_id = u32::from(d.vendor_part_id);
    a.max_qp = i(c.max_qp);
    a.max_qp_wr = i(c.max_qp_wr);
    a.device_cap_flags = DEVICE_RC_RNR_NAK_GEN | DEVICE_PORT_ACTIVE_EVENT;
    a.max_sge = i(d.max_sge);
    a.max_sge_rd = i(d.max_sge);
    a.max_cq = i(c.max_cq);
    a.max_cqe = i(c.max_cqe.saturating_sub(1));
    a.max_mr = i(c.max_mr);
    a.max_pd = i(c.max_pd);
    a.max_qp_rd_atom = i(c.max_qp_rd_atom);
    a.max_res_rd_atom = i(c.max_qp_rd_atom.saturating_mul(c.max_qp));
    a.max_qp_init_rd_atom = i(c.max_qp_init_rd_atom);
    a.atomic_cap = if c.atomic { ATOMIC_HCA } else { 0 };
    a.max_srq = i(c.max_srq);
    a.max_srq_wr = i(c.max_srq_wr.saturating_sub(1));
    a.max_srq_sge = i((u32::from(c.max_recv_wqe_bytes) / 16).saturating_sub(1));
    a.max_pkeys = c.pkey_table_len.min(u16::MAX as u32) as u16;
    a.phys_port_cnt = c.num_ports;
    0
}

export!("ibv_query_port" @ "IBVERBS_1.1" => query_port);
/// The exported compat `ibv_query_port`: fills `struct _compat_ibv_port_attr` (the first
/// 48 bytes); the inline `ibv_query_port` of `verbs.h` zeroes the rest first.
unsafe extern "C" fn query_port(ctx: *mut IbvContext, port: u8, out: *mut c_void) -> c_int {
    // SAFETY: ctx is the caller's open context.
    let Some(entry) = (unsafe { ctx_entry(ctx) }) else {
        return libc::EINVAL;
    };
    if out.is_null() {
        return libc::EINVAL;
    }
    let p = match entry.dev.query_port(port) {
        Ok(p) => p,
        Err(e) => return report(&e),
    };
    let caps_max_msg = entry
        .dev
        .query_device()
        .map(|d| d.caps.max_msg_sz)
        .unwrap_or(1 << 30);
    let mtu = |m: uhca_fwif::consts::IbMtu| c_int::from(m.raw());
    let a = IbvPortAttr {
        state: c_int::from(p.state.raw()),
        max_mtu: mtu(p.max_mtu),
        active_mtu: mtu(p.active_mtu),
        gid_tbl_len: p.gid_table_len.min(i32::MAX as u32) as c_int,
        port_cap_flags: if p.link_layer == LinkLayer::Ethernet {
            PORT_CM_SUP
        } else {
            0
        },
        max_msg_sz: caps_max_msg.min(u64::from(u32::MAX)) as u32,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: p.pkey_table_len.min(u16::MAX as u32) as u16,
        lid: p.lid,
        sm_lid: p.sm_lid,
        lmc: p.lmc,
        max_vl_num: 1,
        sm_sl: p.sm_sl,
        subnet_timeout: 0,
        init_type_reply: 0,
        // 4X, 25 Gb/s (EDR): what the model's link is not modelled as; reported as a
        // plausible ConnectX link.
        active_width: 2,
        active_speed: 32,
        phys_state: p.phys_state.raw(),
        link_layer: if p.link_layer == LinkLayer::Ethernet {
            LINK_LAYER_ETHERNET
        } else {
            LINK_LAYER_INFINIBAND
        },
        flags: 0,
        port_cap_flags2: 0,
    };
    // SAFETY: out points to at least COMPAT_PORT_ATTR_LEN writable bytes (the compat
    // struct's size), and a is a plain struct of at least that size.
    unsafe {
        ptr::copy_nonoverlapping(
            &a as *const IbvPortAttr as *const u8,
            out as *mut u8,
            COMPAT_PORT_ATTR_LEN,
        )
    };
    0
}

export!("ibv_query_gid" @ "IBVERBS_1.1" => query_gid);
unsafe extern "C" fn query_gid(
    ctx: *mut IbvContext,
    port: u8,
    index: c_int,
    gid: *mut IbvGid,
) -> c_int {
    // SAFETY: ctx is the caller's open context.
    let Some(entry) = (unsafe { ctx_entry(ctx) }) else {
        return -1;
    };
    if gid.is_null() || index < 0 {
        return -1;
    }
    match entry.dev.query_gid(port, index as u32) {
        Ok(g) => {
            // SAFETY: gid points to a writable union ibv_gid.
            unsafe { (*gid).raw = g.gid.0 };
            0
        }
        Err(e) => {
            set_errno(report(&e));
            -1
        }
    }
}

export!("ibv_query_gid_type" @ "IBVERBS_PRIVATE_34" => query_gid_type);
/// rdma-core's private `ibv_query_gid_type`: 0 (`IBV_GID_TYPE_SYSFS_IB_ROCE_V1`) for an
/// InfiniBand or RoCE v1 entry, 1 (`IBV_GID_TYPE_SYSFS_ROCE_V2`) for RoCE v2.
unsafe extern "C" fn query_gid_type(
    ctx: *mut IbvContext,
    port: u8,
    index: u32,
    kind: *mut c_int,
) -> c_int {
    // SAFETY: ctx is the caller's open context.
    let Some(entry) = (unsafe { ctx_entry(ctx) }) else {
        return libc::EINVAL;
    };
    if kind.is_null() {
        return libc::EINVAL;
    }
    match entry.dev.query_gid(port, index) {
        Ok(g) => {
            let t = match g.kind {
                GidType::RoceV2Ipv4 | GidType::RoceV2Ipv6 => 1,
                GidType::Empty => return libc::ENODATA,
                _ => 0,
            };
            // SAFETY: kind points to a writable enum (an int).
            unsafe { *kind = t };
            0
        }
        Err(e) => report(&e),
    }
}

export!("ibv_query_pkey" @ "IBVERBS_1.1" => query_pkey);
unsafe extern "C" fn query_pkey(
    ctx: *mut IbvContext,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: ctx is the caller's open context.
    let Some(entry) = (unsafe { ctx_entry(ctx) }) else {
        return -1;
    };
    if pkey.is_null() || !(0..=u16::MAX as c_int).contains(&index) {
        return -1;
    }
    match entry.dev.query_pkey(port, index as u16) {
        Ok(k) => {
            // SAFETY: pkey points to a writable __be16.
            unsafe { *pkey = k.to_be() };
            0
        }
        Err(e) => {
            set_errno(report(&e));
            -1
        }
    }
}

export!("ibv_read_sysfs_file" @ "IBVERBS_1.0" => read_sysfs_file);
/// No sysfs stands behind these devices: every read fails (ENOENT), as for a missing file.
unsafe extern "C" fn read_sysfs_file(
    _dir: *const c_char,
    _file: *const c_char,
    _buf: *mut c_char,
    _size: usize,
) -> c_int {
    set_errno(libc::ENOENT);
    -1
}

export!("ibv_get_sysfs_path" @ "IBVERBS_1.0" => get_sysfs_path);
/// Where sysfs is mounted, as rdma-core answers (`/sys`, or `$SYSFS_PATH`): 0, or -1 when
/// `size` cannot hold it with its NUL. Open MPI's verbs helper imports it; none of these
/// devices is found below it (their `ibdev_path` names no existing directory).
unsafe extern "C" fn get_sysfs_path(buf: *mut c_char, size: usize) -> c_int {
    let path = std::env::var("SYSFS_PATH").unwrap_or_else(|_| "/sys".into());
    let path = path.trim_end_matches('/');
    let path = if path.is_empty() { "/sys" } else { path };
    if buf.is_null() || path.len() >= size {
        return -1;
    }
    // SAFETY: buf is the caller's writable buffer of `size` bytes, more than path's length.
    let dst = unsafe { core::slice::from_raw_parts_mut(buf, size) };
    put_str(dst, path);
    0
}

// ---- PD and CQ --------------------------------------------------------------------

export!("ibv_alloc_pd" @ "IBVERBS_1.1" => alloc_pd);
unsafe extern "C" fn alloc_pd(ctx: *mut IbvContext) -> *mut IbvPd {
    // SAFETY: ctx is the caller's open context.
    let Some(entry) = (unsafe { ctx_entry(ctx) }) else {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    };
    match entry.dev.alloc_pd() {
        Ok(handle) => Box::into_raw(Box::new(CPd {
            ibv: IbvPd {
                context: ctx,
                handle,
            },
            entry,
        })) as *mut IbvPd,
        Err(e) => {
            set_errno(report(&e));
            ptr::null_mut()
        }
    }
}

export!("ibv_dealloc_pd" @ "IBVERBS_1.1" => dealloc_pd);
unsafe extern "C" fn dealloc_pd(pd: *mut IbvPd) -> c_int {
    if pd.is_null() {
        return libc::EINVAL;
    }
    let p = pd as *mut CPd;
    // SAFETY: pd came from alloc_pd and is still allocated (the caller's contract).
    let (entry, handle) = unsafe { ((*p).entry, (*p).ibv.handle) };
    match entry.dev.dealloc_pd(handle) {
        Ok(()) => {
            // SAFETY: as above; freed once, after the device let it go.
            drop(unsafe { Box::from_raw(p) });
            0
        }
        Err(e) => report(&e),
    }
}

export!("ibv_create_cq" @ "IBVERBS_1.1" => create_cq);
unsafe extern "C" fn create_cq(
    ctx: *mut IbvContext,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut c_void,
    comp_vector: c_int,
) -> *mut IbvCq {
    // SAFETY: ctx is the caller's open context.
    let Some(entry) = (unsafe { ctx_entry(ctx) }) else {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    };
    // SAFETY: ctx_entry found ctx to be one of this library's open contexts.
    let vectors = unsafe { (*ctx).num_comp_vectors };
    // A completion vector the context does not have is refused (as mlx5_ib does), not
    // silently taken as vector 0.
    if cqe <= 0 || !(0..vectors).contains(&comp_vector) {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    let made = entry.dev.create_cq(cqe as u32).map(|(handle, n)| {
        Box::into_raw(Box::new(CCq {
            ibv: IbvCq {
                context: ctx,
                channel,
                cq_context,
                handle,
                cqe: n.min(i32::MAX as u32) as c_int,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                comp_events_completed: 0,
                async_events_completed: 0,
            },
            ex: cq_ex::OPS,
            entry,
            cur: cq_ex::Current::new(),
        })) as *mut IbvCq
    });
    let cq = match made {
        Ok(cq) => cq,
        Err(e) => {
            set_errno(report(&e));
            return ptr::null_mut();
        }
    };
    if !channel.is_null() {
        // SAFETY: cq was just made here; channel came from ibv_create_comp_channel.
        let handle = unsafe { (*cq).handle };
        // SAFETY: channel came from ibv_create_comp_channel (a CChannel) and is alive.
        let channel_id = unsafe { (*(channel as *mut CChannel)).fd.id() };
        if let Err(e) = entry.dev.attach_channel(handle, channel_id, cq as usize) {
            // SAFETY: cq is ours and not yet handed out.
            unsafe { destroy_cq(cq) };
            set_errno(report(&e));
            return ptr::null_mut();
        }
        // SAFETY: as above: a live channel of the caller's.
        unsafe { (*(channel as *mut IbvCompChannel)).refcnt += 1 };
    }
    // SAFETY: cq was just made here.
    events::register(entry, unsafe { (*cq).handle }, cq as *mut c_void);
    cq
}

export!("ibv_destroy_cq" @ "IBVERBS_1.1" => destroy_cq);
unsafe extern "C" fn destroy_cq(cq: *mut IbvCq) -> c_int {
    if cq.is_null() {
        return libc::EINVAL;
    }
    let p = cq as *mut CCq;
    // SAFETY: cq came from create_cq and is still allocated (the caller's contract).
    let (entry, handle, channel) = unsafe { ((*p).entry, (*p).ibv.handle, (*p).ibv.channel) };
    destroy_evented(
        entry,
        handle,
        || entry.dev.destroy_cq(handle),
        || {
            if !channel.is_null() {
                // SAFETY: the CQ's channel outlives its CQs (destroy_comp_channel refuses while
                // refcnt > 0).
                unsafe { (*(channel as *mut IbvCompChannel)).refcnt -= 1 };
            }
            // SAFETY: as above; freed once, after the device let it go.
            drop(unsafe { Box::from_raw(p) });
        },
    )
}

/// The destroy of an object events may name (QP, CQ, SRQ): waits until every event handed
/// out for `handle` was acknowledged (`EBUSY` after 30 s), destroys it on the device, then
/// runs `freed` (which frees the C object: the device let it go). The errno, or 0.
fn destroy_evented(
    entry: &'static Entry,
    handle: u32,
    destroy: impl FnOnce() -> crate::device::VResult<()>,
    freed: impl FnOnce(),
) -> c_int {
    if !events::retire(entry, handle) {
        return libc::EBUSY;
    }
    let done = destroy();
    events::retired(entry, handle, done.is_ok());
    match done {
        Ok(()) => {
            freed();
            0
        }
        Err(e) => report(&e),
    }
}

export!("ibv_reg_mr" @ "IBVERBS_1.1" => reg_mr);
/// Registers `len` bytes the application owns at `addr`, addressed by `addr` (see
/// [`Device::reg_mr`]).
unsafe extern "C" fn reg_mr(
    pd: *mut IbvPd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut IbvMr {
    // SAFETY: the caller's contract is ibv_reg_mr's, which reg_mr_at's is.
    unsafe { reg_mr_at(pd, addr, len, addr as u64, access) }
}

export!("ibv_reg_mr_iova" @ "IBVERBS_1.7" => reg_mr_iova);
/// As [`reg_mr_iova2`] (the older name, with a signed `access`).
unsafe extern "C" fn reg_mr_iova(
    pd: *mut IbvPd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut IbvMr {
    // SAFETY: the caller's contract is ibv_reg_mr_iova's, which reg_mr_at's is.
    unsafe { reg_mr_at(pd, addr, len, iova, access) }
}

export!("ibv_reg_mr_iova2" @ "IBVERBS_1.8" => reg_mr_iova2);
/// Registers `len` bytes the application owns at `addr`, addressed from `iova` by the
/// application's SGEs and its peers (what `ibv_reg_mr` calls when its access flags are not
/// a constant, with `iova` = `addr`).
unsafe extern "C" fn reg_mr_iova2(
    pd: *mut IbvPd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: u32,
) -> *mut IbvMr {
    // SAFETY: the caller's contract is ibv_reg_mr_iova2's, which reg_mr_at's is.
    unsafe { reg_mr_at(pd, addr, len, iova, access as c_int) }
}

/// The registrations' common body: `len` bytes at `addr`, key addressed from `iova`.
///
/// # Safety
///
/// `pd` is NULL or a PD of this library; the application owns `len` bytes at `addr` and
/// keeps them valid until `ibv_dereg_mr`.
unsafe fn reg_mr_at(
    pd: *mut IbvPd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut IbvMr {
    if pd.is_null() || addr.is_null() || len == 0 || len > isize::MAX as usize {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    if access & !(ACCESS_BASIC | ACCESS_RELAXED_ORDERING) != 0 {
        // Memory-window binding, zero-based, on-demand paging, huge pages: not offered.
        set_errno(libc::EOPNOTSUPP);
        return ptr::null_mut();
    }
    let p = pd as *mut CPd;
    // SAFETY: pd came from alloc_pd and is still allocated (the caller's contract).
    let (entry, pd_handle, ctx) = unsafe { ((*p).entry, (*p).ibv.handle, (*p).ibv.context) };
    // SAFETY: ibv_reg_mr's contract: the application owns `len` bytes at `addr` and keeps
    // them valid until ibv_dereg_mr. The slice lives only until MappedBuf::new turns it into
    // a raw range (HostBuf::into_raw keeps no reference), and HostBuf::Static is never
    // freed: dereg unmaps and hands the memory back to its owner.
    let buf: &'static mut [u8] = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
    let rights = uhca_fwif::consts::AccessFlags::from_bits_truncate((access & ACCESS_BASIC) as u32);
    match entry.dev.reg_mr(pd_handle, iova, buf.into(), rights) {
        Ok(k) => Box::into_raw(Box::new(CMr {
            ibv: IbvMr {
                context: ctx,
                pd,
                addr,
                length: len,
                handle: k.handle,
                lkey: k.lkey,
                rkey: k.rkey,
            },
            entry,
        })) as *mut IbvMr,
        Err(e) => {
            set_errno(report(&e));
            ptr::null_mut()
        }
    }
}

export!("ibv_dereg_mr" @ "IBVERBS_1.1" => dereg_mr);
unsafe extern "C" fn dereg_mr(mr: *mut IbvMr) -> c_int {
    if mr.is_null() {
        return libc::EINVAL;
    }
    let p = mr as *mut CMr;
    // SAFETY: mr came from reg_mr and is still allocated (the caller's contract).
    let (entry, handle) = unsafe { ((*p).entry, (*p).ibv.handle) };
    match entry.dev.dereg_mr(handle) {
        Ok(()) => {
            // SAFETY: as above; freed once, after the device let it go.
            drop(unsafe { Box::from_raw(p) });
            0
        }
        Err(e) => report(&e),
    }
}

/// A QP: the `struct ibv_qp` and the rest of a `struct ibv_qp_ex`, then the device.
#[repr(C)]
struct CQp {
    ibv: IbvQp,
    /// The rest of a `struct ibv_qp_ex`: `ibv_qp_to_qp_ex` hands out the QP itself
    /// (`ffi/qp_ex.rs`).
    ex: crate::abi::IbvQpExOps,
    entry: &'static Entry,
    /// The `ibv_wr_*` requests being built, for a QP of `ibv_create_qp_ex` with
    /// `send_ops_flags`.
    wr: Option<Box<qp_ex::WrBatch>>,
}

export!("ibv_create_qp" @ "IBVERBS_1.1" => create_qp);
/// RC, UC and UD QPs, on an SRQ or not, with inline data up to what the driver offers;
/// other types: EOPNOTSUPP.
unsafe extern "C" fn create_qp(pd: *mut IbvPd, attr: *mut IbvQpInitAttr) -> *mut IbvQp {
    if pd.is_null() || attr.is_null() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    // SAFETY: pd came from alloc_pd; attr is the caller's readable ibv_qp_init_attr.
    unsafe { create_qp_with(pd, &mut *attr, None) }
}

/// `ibv_create_qp` of `pd` with `a`, and, for `ibv_create_qp_ex` with `send_ops_flags`,
/// the `ibv_wr_*` operations `ops`.
///
/// # Safety
///
/// `pd` came from `ibv_alloc_pd` of this library and is not NULL.
unsafe fn create_qp_with(pd: *mut IbvPd, a: &mut IbvQpInitAttr, ops: Option<u64>) -> *mut IbvQp {
    // SAFETY: the caller's contract.
    let p = unsafe { &*(pd as *mut CPd) };
    let Some(transport) = crate::qp::Transport::from_raw(a.qp_type) else {
        set_errno(libc::EOPNOTSUPP);
        return ptr::null_mut();
    };
    let srq = if a.srq.is_null() {
        None
    } else {
        // SAFETY: a non-NULL srq came from create_srq (the caller's contract).
        let s = unsafe { &*(a.srq as *mut CSrq) };
        if !ptr::eq(s.entry, p.entry) {
            // An SRQ of another device.
            set_errno(libc::EINVAL);
            return ptr::null_mut();
        }
        Some(s.ibv.handle)
    };
    if a.send_cq.is_null() || a.recv_cq.is_null() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    // SAFETY: both CQs came from create_cq (the caller's contract).
    let (scq, rcq) = unsafe { ((*a.send_cq).handle, (*a.recv_cq).handle) };
    let caps = uhca_driver::verbs::QpCaps {
        max_send_wr: a.cap.max_send_wr,
        max_recv_wr: a.cap.max_recv_wr,
        max_send_sge: a.cap.max_send_sge,
        max_recv_sge: a.cap.max_recv_sge,
        max_inline_data: a.cap.max_inline_data,
    };
    match p.entry.dev.create_qp(
        transport,
        p.ibv.handle,
        scq,
        rcq,
        srq,
        caps,
        a.sq_sig_all != 0,
    ) {
        Ok((handle, qpn, got)) => {
            // As rdma-core: the capabilities the QP got go back into the caller's attr.
            a.cap = IbvQpCap {
                max_send_wr: got.max_send_wr,
                max_recv_wr: got.max_recv_wr,
                max_send_sge: got.max_send_sge,
                max_recv_sge: got.max_recv_sge,
                max_inline_data: got.max_inline_data,
            };
            let qp = Box::into_raw(Box::new(CQp {
                ibv: IbvQp {
                    context: p.ibv.context,
                    qp_context: a.qp_context,
                    pd,
                    send_cq: a.send_cq,
                    recv_cq: a.recv_cq,
                    srq: a.srq,
                    handle,
                    qp_num: qpn,
                    state: 0,
                    qp_type: transport as c_int,
                    mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                    cond: libc::PTHREAD_COND_INITIALIZER,
                    events_completed: 0,
                },
                ex: crate::abi::IbvQpExOps {
                    comp_mask: 0,
                    ..qp_ex::OPS
                },
                entry: p.entry,
                wr: ops.map(|o| {
                    qp_ex::WrBatch::new(o, got.max_send_wr, got.max_send_sge, got.max_inline_data)
                }),
            })) as *mut IbvQp;
            events::register(p.entry, handle, qp as *mut c_void);
            qp
        }
        Err(e) => {
            set_errno(report(&e));
            ptr::null_mut()
        }
    }
}

export!("ibv_modify_qp" @ "IBVERBS_1.1" => modify_qp);
unsafe extern "C" fn modify_qp(qp: *mut IbvQp, attr: *mut IbvQpAttr, mask: c_int) -> c_int {
    use crate::abi::qp_mask as m;
    use crate::qp::{Av, Modify, QpState};
    if qp.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: qp came from create_qp; attr is the caller's readable ibv_qp_attr.
    let (q, a) = unsafe { (&mut *(qp as *mut CQp), &*attr) };
    let supported = m::STATE
        | m::CUR_STATE
        | m::ACCESS_FLAGS
        | m::PKEY_INDEX
        | m::PORT
        | m::QKEY
        | m::AV
        | m::PATH_MTU
        | m::TIMEOUT
        | m::RETRY_CNT
        | m::RNR_RETRY
        | m::RQ_PSN
        | m::MAX_QP_RD_ATOMIC
        | m::MIN_RNR_TIMER
        | m::SQ_PSN
        | m::MAX_DEST_RD_ATOMIC
        | m::DEST_QPN;
    if mask & !supported != 0 {
        return report(&VerbsError::new(
            libc::EOPNOTSUPP,
            format!("QP attribute mask bits {:#x}", mask & !supported),
        ));
    }
    let has = |b: c_int| mask & b != 0;
    let state = if has(m::STATE) {
        match QpState::from_raw(a.qp_state) {
            Some(s) => Some(s),
            None => return libc::EINVAL,
        }
    } else {
        None
    };
    let md = Modify {
        state,
        port: has(m::PORT).then_some(a.port_num),
        pkey_index: has(m::PKEY_INDEX).then_some(a.pkey_index),
        access: has(m::ACCESS_FLAGS)
            .then(|| uhca_fwif::consts::AccessFlags::from_bits_truncate(a.qp_access_flags & 0xe)),
        path_mtu: has(m::PATH_MTU).then_some(a.path_mtu as u8),
        dest_qpn: has(m::DEST_QPN).then_some(a.dest_qp_num),
        rq_psn: has(m::RQ_PSN).then_some(a.rq_psn),
        max_dest_rd_atomic: has(m::MAX_DEST_RD_ATOMIC).then_some(a.max_dest_rd_atomic),
        min_rnr_timer: has(m::MIN_RNR_TIMER).then_some(a.min_rnr_timer),
        av: has(m::AV).then_some(Av {
            is_global: a.ah_attr.is_global != 0,
            dgid: a.ah_attr.grh.dgid,
            sgid_index: a.ah_attr.grh.sgid_index,
            hop_limit: a.ah_attr.grh.hop_limit,
            traffic_class: a.ah_attr.grh.traffic_class,
            flow_label: a.ah_attr.grh.flow_label,
            dlid: a.ah_attr.dlid,
            sl: a.ah_attr.sl,
        }),
        sq_psn: has(m::SQ_PSN).then_some(a.sq_psn),
        timeout: has(m::TIMEOUT).then_some(a.timeout),
        retry_cnt: has(m::RETRY_CNT).then_some(a.retry_cnt),
        rnr_retry: has(m::RNR_RETRY).then_some(a.rnr_retry),
        max_rd_atomic: has(m::MAX_QP_RD_ATOMIC).then_some(a.max_rd_atomic),
        qkey: has(m::QKEY).then_some(a.qkey),
    };
    match q.entry.dev.modify_qp(q.ibv.handle, &md) {
        Ok(s) => {
            q.ibv.state = s as c_int;
            0
        }
        Err(e) => report(&e),
    }
}

export!("ibv_query_qp" @ "IBVERBS_1.1" => query_qp);
unsafe extern "C" fn query_qp(
    qp: *mut IbvQp,
    attr: *mut IbvQpAttr,
    _mask: c_int,
    init: *mut IbvQpInitAttr,
) -> c_int {
    if qp.is_null() || attr.is_null() || init.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: qp came from create_qp.
    let q = unsafe { &*(qp as *mut CQp) };
    let got = match q.entry.dev.query_qp(q.ibv.handle) {
        Ok(v) => v,
        Err(e) => return report(&e),
    };
    let caps = got.caps;
    let cap = IbvQpCap {
        max_send_wr: caps.max_send_wr,
        max_recv_wr: caps.max_recv_wr,
        max_send_sge: caps.max_send_sge,
        max_recv_sge: caps.max_recv_sge,
        max_inline_data: caps.max_inline_data,
    };
    // SAFETY: attr and init are the caller's writable structs; all-zero is a valid value of
    // each (integers and null pointers).
    let (a, i) = unsafe {
        ptr::write_bytes(attr, 0, 1);
        ptr::write_bytes(init, 0, 1);
        (&mut *attr, &mut *init)
    };
    // What the library keeps of the QP (state, capabilities, port), and what the device
    // answers of its context (Q_Key, PSNs, destination QP, MTU, P_Key index); the mask is
    // not looked at: every field this library knows is filled, as rdma-core's providers do.
    a.qp_state = got.state as c_int;
    a.cur_qp_state = got.state as c_int;
    a.cap = cap;
    a.port_num = got.port;
    if let Some(d) = &got.device {
        a.qkey = d.qkey;
        a.rq_psn = d.rq_psn;
        a.sq_psn = d.sq_psn;
        a.dest_qp_num = d.dest_qpn;
        a.path_mtu = c_int::from(d.path_mtu.raw());
        a.pkey_index = d.pkey_index;
    }
    i.qp_context = q.ibv.qp_context;
    i.send_cq = q.ibv.send_cq;
    i.recv_cq = q.ibv.recv_cq;
    i.cap = cap;
    i.qp_type = got.transport as c_int;
    i.sq_sig_all = c_int::from(got.sq_sig_all);
    0
}

export!("ibv_destroy_qp" @ "IBVERBS_1.1" => destroy_qp);
unsafe extern "C" fn destroy_qp(qp: *mut IbvQp) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    let p = qp as *mut CQp;
    // SAFETY: qp came from create_qp and is still allocated (the caller's contract).
    let (entry, handle) = unsafe { ((*p).entry, (*p).ibv.handle) };
    destroy_evented(
        entry,
        handle,
        || entry.dev.destroy_qp(handle),
        || {
            // SAFETY: as above; freed once, after the device let it go.
            drop(unsafe { Box::from_raw(p) })
        },
    )
}

/// The application's SGE list, lent as it is (`struct ibv_sge` and [`AppSge`] have one
/// layout).
///
/// # Safety
///
/// `list` points to `n` readable `struct ibv_sge` that stay unchanged while the slice is
/// used (during the post), or `n` is 0.
unsafe fn app_sges<'a>(list: *const IbvSge, n: c_int) -> &'a [AppSge] {
    if n <= 0 || list.is_null() {
        return &[];
    }
    // SAFETY: the caller's contract; AppSge is repr(C) with ibv_sge's fields (checked below).
    unsafe { std::slice::from_raw_parts(list as *const AppSge, n as usize) }
}

const _: () = {
    assert!(size_of::<AppSge>() == size_of::<IbvSge>());
    assert!(core::mem::offset_of!(AppSge, addr) == core::mem::offset_of!(IbvSge, addr));
    assert!(core::mem::offset_of!(AppSge, len) == core::mem::offset_of!(IbvSge, length));
    assert!(core::mem::offset_of!(AppSge, lkey) == core::mem::offset_of!(IbvSge, lkey));
};

/// Inline bytes one batch of a post gathers (past it, the batch is posted and the next
/// begins; a single request with more is beyond any QP's `max_inline_data`).
const INLINE_BATCH_BYTES: usize = 4096;

/// The `post_send` op: SEND, SEND with immediate, RDMA WRITE (with immediate), RDMA READ,
/// compare-and-swap and fetch-and-add, gathered from registered memory or inline
/// (`IBV_SEND_INLINE`: the bytes are copied from the SGEs' addresses, no key needed),
/// signalled or not. Other opcodes: EOPNOTSUPP with `bad_wr`.
unsafe extern "C" fn post_send(qp: *mut c_void, wr: *mut c_void, bad: *mut *mut c_void) -> c_int {
    use uhca_driver::verbs::{SendFlags, SendOp};
    let set_bad = |w: *mut IbvSendWr| {
        if !bad.is_null() {
            // SAFETY: the caller passes a writable pointer or NULL.
            unsafe { *bad = w as *mut c_void };
        }
    };
    if qp.is_null() {
        set_bad(wr as *mut IbvSendWr);
        return libc::EINVAL;
    }
    // SAFETY: qp came from create_qp.
    let q = unsafe { &*(qp as *mut CQp) };
    let mut ptrs = [ptr::null_mut::<IbvSendWr>(); POST_BATCH];
    let mut reqs = [AppSendWr::EMPTY; POST_BATCH];
    let mut inline = [0u8; INLINE_BATCH_BYTES];
    // Requests, inline bytes and SGEs in the batch so far.
    let (mut n, mut used, mut sges_used) = (0, 0, 0);
    // Posts the batch gathered so far; on failure, bad_wr and the errno.
    let flush = |reqs: &[AppSendWr<'_>], ptrs: &[*mut IbvSendWr], inline: &[u8]| {
        q.entry
            .dev
            .post_send(q.ibv.handle, reqs, inline)
            .map_err(|(i, e)| {
                set_bad(ptrs[i]);
                e
            })
    };
    let mut w = wr as *mut IbvSendWr;
    while !w.is_null() {
        // SAFETY: a list of the caller's readable ibv_send_wr, NULL-terminated.
        let r = unsafe { &*w };
        // imm_data is big-endian in memory (__be32); the driver takes the value the wire
        // carries.
        let imm = u32::from_be(r.imm_data);
        let op = match r.opcode {
            WR_SEND => SendOp::Send,
            WR_SEND_WITH_IMM => SendOp::SendWithImm { imm },
            WR_RDMA_WRITE => SendOp::RdmaWrite {
                remote_addr: r.remote_addr(),
                rkey: r.rdma_rkey(),
            },
            WR_RDMA_WRITE_WITH_IMM => SendOp::RdmaWriteWithImm {
                remote_addr: r.remote_addr(),
                rkey: r.rdma_rkey(),
                imm,
            },
            WR_RDMA_READ => SendOp::RdmaRead {
                remote_addr: r.remote_addr(),
                rkey: r.rdma_rkey(),
            },
            WR_ATOMIC_CMP_AND_SWP => SendOp::AtomicCmpSwap {
                remote_addr: r.remote_addr(),
                rkey: r.atomic_rkey(),
                compare: r.compare_add(),
                swap: r.swap(),
            },
            WR_ATOMIC_FETCH_AND_ADD => SendOp::AtomicFetchAdd {
                remote_addr: r.remote_addr(),
                rkey: r.atomic_rkey(),
                add: r.compare_add(),
            },
            _ => {
                if let Err(e) = flush(&reqs[..n], &ptrs[..n], &inline[..used]) {
                    return e;
                }
                set_bad(w);
                return libc::EOPNOTSUPP;
            }
        };
        let mut flags = SendFlags::empty();
        if r.send_flags & SEND_SIGNALED != 0 {
            flags |= SendFlags::SIGNALED;
        }
        if r.send_flags & SEND_FENCE != 0 {
            flags |= SendFlags::FENCE;
        }
        if r.send_flags & SEND_SOLICITED != 0 {
            flags |= SendFlags::SOLICITED;
        }
        // SAFETY: sg_list holds num_sge entries, unchanged during the post (the caller's
        // contract).
        let sges = unsafe { app_sges(r.sg_list, r.num_sge) };
        // A UD QP's destination: the AH (of this device), the remote QP and its Q_Key.
        let ud = if q.ibv.qp_type == crate::qp::Transport::Ud as c_int {
            // SAFETY: wr.ud.ah of a UD QP's request is NULL or an AH of ibv_create_ah, alive
            // during the post (the caller's contract).
            match unsafe { ah::ud_dest(r.ud_ah(), q.entry) } {
                Some(ah) => Some(uhca_driver::verbs::UdDest {
                    ah,
                    remote_qpn: r.ud_remote_qpn(),
                    remote_qkey: r.ud_remote_qkey(),
                }),
                None => {
                    if let Err(e) = flush(&reqs[..n], &ptrs[..n], &inline[..used]) {
                        return e;
                    }
                    set_bad(w);
                    return libc::EINVAL;
                }
            }
        } else {
            None
        };
        let is_inline = r.send_flags & SEND_INLINE != 0;
        if !is_inline && n > 0 && sges_used + sges.len() > POST_BATCH_SGES {
            // The batch's SGEs are full: post it, this request begins the next.
            if let Err(e) = flush(&reqs[..n], &ptrs[..n], &inline[..used]) {
                return e;
            }
            (n, used, sges_used) = (0, 0, 0);
        }
        let mut range = None;
        if is_inline {
            let total: u64 = sges.iter().map(|g| u64::from(g.len)).sum();
            if used as u64 + total > INLINE_BATCH_BYTES as u64 && n > 0 {
                if let Err(e) = flush(&reqs[..n], &ptrs[..n], &inline[..used]) {
                    return e;
                }
                (n, used, sges_used) = (0, 0, 0);
            }
            if total > INLINE_BATCH_BYTES as u64 {
                // More than any QP's max_inline_data: ENOMEM, as libmlx5.
                set_bad(w);
                return libc::ENOMEM;
            }
            let start = used;
            for g in sges {
                if g.len > 0 && g.addr == 0 {
                    if let Err(e) = flush(&reqs[..n], &ptrs[..n], &inline[..start]) {
                        return e;
                    }
                    set_bad(w);
                    return libc::EINVAL;
                }
                // SAFETY: an inline SGE names `len` readable bytes of the caller at `addr`
                // (ibv_post_send's contract for IBV_SEND_INLINE: no key, read at once).
                let b = unsafe { std::slice::from_raw_parts(g.addr as *const u8, g.len as usize) };
                inline[used..used + b.len()].copy_from_slice(b);
                used += b.len();
            }
            range = Some((start, used));
        } else {
            sges_used += sges.len();
        }
        reqs[n] = AppSendWr {
            wr_id: r.wr_id,
            op,
            sges,
            flags,
            inline: range,
            ud,
        };
        ptrs[n] = w;
        n += 1;
        if n == POST_BATCH {
            if let Err(e) = flush(&reqs[..n], &ptrs[..n], &inline[..used]) {
                return e;
            }
            (n, used, sges_used) = (0, 0, 0);
        }
        w = r.next;
    }
    match flush(&reqs[..n], &ptrs[..n], &inline[..used]) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// The `post_recv` op (in batches, allocating nothing).
unsafe extern "C" fn post_recv(qp: *mut c_void, wr: *mut c_void, bad: *mut *mut c_void) -> c_int {
    if qp.is_null() {
        if !bad.is_null() {
            // SAFETY: the caller passes a writable pointer or NULL.
            unsafe { *bad = wr };
        }
        return libc::EINVAL;
    }
    // SAFETY: qp came from create_qp.
    let q = unsafe { &*(qp as *mut CQp) };
    // SAFETY: wr is the caller's NULL-terminated list; bad is writable or NULL.
    unsafe {
        post_recv_list(wr as *mut IbvRecvWr, bad, |l| {
            q.entry.dev.post_recv(q.ibv.handle, l)
        })
    }
}

/// Walks a receive list in batches of [`POST_BATCH`], posting each with `post`; sets
/// `bad` to the request at fault.
///
/// # Safety
///
/// `wr` is a NULL-terminated list of readable `ibv_recv_wr` whose SGE lists stay
/// unchanged during the call; `bad` is writable or NULL.
unsafe fn post_recv_list(
    wr: *mut IbvRecvWr,
    bad: *mut *mut c_void,
    post: impl Fn(&[(u64, &[AppSge])]) -> Result<(), (usize, c_int)>,
) -> c_int {
    let mut ptrs = [ptr::null_mut::<IbvRecvWr>(); POST_BATCH];
    let mut reqs: [(u64, &[AppSge]); POST_BATCH] = [(0, &[]); POST_BATCH];
    let (mut n, mut sges_used) = (0, 0);
    let flush = |reqs: &[(u64, &[AppSge])], ptrs: &[*mut IbvRecvWr]| {
        post(reqs).map_err(|(i, e)| {
            if !bad.is_null() {
                // SAFETY: the caller passes a writable pointer or NULL.
                unsafe { *bad = ptrs[i] as *mut c_void };
            }
            e
        })
    };
    let mut w = wr;
    while !w.is_null() {
        // SAFETY: a list of the caller's readable ibv_recv_wr, NULL-terminated.
        let r = unsafe { &*w };
        // SAFETY: sg_list holds num_sge entries (the caller's contract).
        let sges = unsafe { app_sges(r.sg_list, r.num_sge) };
        if n > 0 && sges_used + sges.len() > POST_BATCH_SGES {
            // The batch's SGEs are full: post it, this request begins the next.
            if let Err(e) = flush(&reqs[..n], &ptrs[..n]) {
                return e;
            }
            (n, sges_used) = (0, 0);
        }
        reqs[n] = (r.wr_id, sges);
        ptrs[n] = w;
        n += 1;
        sges_used += sges.len();
        if n == POST_BATCH {
            if let Err(e) = flush(&reqs[..n], &ptrs[..n]) {
                return e;
            }
            (n, sges_used) = (0, 0);
        }
        w = r.next;
    }
    match flush(&reqs[..n], &ptrs[..n]) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// An SRQ: the `struct ibv_srq`, then the device.
#[repr(C)]
struct CSrq {
    ibv: IbvSrq,
    entry: &'static Entry,
}

export!("ibv_create_srq" @ "IBVERBS_1.1" => create_srq);
/// An SRQ of `attr.max_wr` receives of `attr.max_sge` entries on `pd`; the sizes it got go
/// back into `attr`, as rdma-core.
unsafe extern "C" fn create_srq(pd: *mut IbvPd, attr: *mut IbvSrqInitAttr) -> *mut IbvSrq {
    if pd.is_null() || attr.is_null() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    // SAFETY: pd came from alloc_pd; attr is the caller's ibv_srq_init_attr.
    let (p, a) = unsafe { (&*(pd as *mut CPd), &mut *attr) };
    match p.entry.dev.create_srq(
        p.ibv.handle,
        a.attr.max_wr,
        a.attr.max_sge,
        a.attr.srq_limit,
    ) {
        Ok((handle, max_wr, max_sge)) => {
            a.attr.max_wr = max_wr;
            a.attr.max_sge = max_sge;
            let srq = Box::into_raw(Box::new(CSrq {
                ibv: IbvSrq {
                    context: p.ibv.context,
                    srq_context: a.srq_context,
                    pd,
                    handle,
                    mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                    cond: libc::PTHREAD_COND_INITIALIZER,
                    events_completed: 0,
                },
                entry: p.entry,
            })) as *mut IbvSrq;
            events::register(p.entry, handle, srq as *mut c_void);
            srq
        }
        Err(e) => {
            set_errno(report(&e));
            ptr::null_mut()
        }
    }
}

export!("ibv_modify_srq" @ "IBVERBS_1.1" => modify_srq);
/// `IBV_SRQ_LIMIT` arms the limit; `IBV_SRQ_MAX_WR` (resizing) is EINVAL, as on mlx5.
unsafe extern "C" fn modify_srq(srq: *mut IbvSrq, attr: *mut IbvSrqAttr, mask: c_int) -> c_int {
    if srq.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: srq came from create_srq; attr is the caller's readable ibv_srq_attr.
    let (s, a) = unsafe { (&*(srq as *mut CSrq), *attr) };
    if mask & SRQ_MAX_WR != 0 || mask & !(SRQ_MAX_WR | SRQ_LIMIT) != 0 {
        return libc::EINVAL;
    }
    if mask & SRQ_LIMIT == 0 {
        return 0;
    }
    match s.entry.dev.arm_srq_limit(s.ibv.handle, a.srq_limit) {
        Ok(()) => 0,
        Err(e) => report(&e),
    }
}

export!("ibv_query_srq" @ "IBVERBS_1.1" => query_srq);
unsafe extern "C" fn query_srq(srq: *mut IbvSrq, attr: *mut IbvSrqAttr) -> c_int {
    if srq.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: srq came from create_srq.
    let s = unsafe { &*(srq as *mut CSrq) };
    match s.entry.dev.query_srq(s.ibv.handle) {
        Ok((max_wr, max_sge, srq_limit)) => {
            // SAFETY: attr is the caller's writable ibv_srq_attr.
            unsafe {
                *attr = IbvSrqAttr {
                    max_wr,
                    max_sge,
                    srq_limit,
                }
            };
            0
        }
        Err(e) => report(&e),
    }
}

export!("ibv_destroy_srq" @ "IBVERBS_1.1" => destroy_srq);
unsafe extern "C" fn destroy_srq(srq: *mut IbvSrq) -> c_int {
    if srq.is_null() {
        return libc::EINVAL;
    }
    let p = srq as *mut CSrq;
    // SAFETY: srq came from create_srq and is still allocated.
    let (entry, handle) = unsafe { ((*p).entry, (*p).ibv.handle) };
    destroy_evented(
        entry,
        handle,
        || entry.dev.destroy_srq(handle),
        || {
            // SAFETY: as above; freed once, after the device let it go.
            drop(unsafe { Box::from_raw(p) })
        },
    )
}

/// The `post_srq_recv` op (in batches, allocating nothing).
unsafe extern "C" fn post_srq_recv(
    srq: *mut c_void,
    wr: *mut c_void,
    bad: *mut *mut c_void,
) -> c_int {
    if srq.is_null() {
        if !bad.is_null() {
            // SAFETY: the caller passes a writable pointer or NULL.
            unsafe { *bad = wr };
        }
        return libc::EINVAL;
    }
    // SAFETY: srq came from create_srq.
    let s = unsafe { &*(srq as *mut CSrq) };
    // SAFETY: wr is the caller's NULL-terminated list; bad is writable or NULL.
    unsafe {
        post_recv_list(wr as *mut IbvRecvWr, bad, |l| {
            s.entry.dev.post_srq_recv(s.ibv.handle, l)
        })
    }
}

export!("ibv_qp_to_qp_ex" @ "IBVERBS_1.6" => qp_to_qp_ex);
/// The QP itself (an `ibv_qp_ex`) for a QP of `ibv_create_qp_ex` with `send_ops_flags`;
/// NULL for others, as rdma-core.
unsafe extern "C" fn qp_to_qp_ex(qp: *mut c_void) -> *mut c_void {
    // SAFETY: qp is NULL or came from create_qp (the caller's contract).
    unsafe { qp_ex::to_qp_ex(qp) }
}

/// A completion channel: the `struct ibv_comp_channel`, then the device.
#[repr(C)]
struct CChannel {
    ibv: IbvCompChannel,
    entry: &'static Entry,
    /// The socket whose descriptor is `ibv.fd` (closed with the channel).
    fd: crate::device::ChannelFd,
}

export!("ibv_create_comp_channel" @ "IBVERBS_1.0" => create_comp_channel);
/// Its `fd` becomes readable when the device raises its interrupt (a completion event of an
/// armed CQ among others): `poll(2)` on it waits for `ibv_get_cq_event` to have something.
unsafe extern "C" fn create_comp_channel(ctx: *mut IbvContext) -> *mut IbvCompChannel {
    // SAFETY: ctx is the caller's open context.
    let Some(entry) = (unsafe { ctx_entry(ctx) }) else {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    };
    let fd = match entry.dev.create_channel() {
        Ok(fd) => fd,
        Err(e) => {
            set_errno(report(&e));
            return ptr::null_mut();
        }
    };
    Box::into_raw(Box::new(CChannel {
        ibv: IbvCompChannel {
            context: ctx,
            fd: fd.raw_fd(),
            refcnt: 0,
        },
        entry,
        fd,
    })) as *mut IbvCompChannel
}

export!("ibv_destroy_comp_channel" @ "IBVERBS_1.0" => destroy_comp_channel);
unsafe extern "C" fn destroy_comp_channel(ch: *mut IbvCompChannel) -> c_int {
    if ch.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: ch came from create_comp_channel and is still allocated.
    if unsafe { (*ch).refcnt } > 0 {
        // As rdma-core: CQs still use it.
        return libc::EBUSY;
    }
    // SAFETY: as above; freed once.
    let c = unsafe { Box::from_raw(ch as *mut CChannel) };
    let CChannel { entry, fd, .. } = *c;
    // The socket (the channel's fd) closes here.
    entry.dev.destroy_channel(fd);
    0
}

export!("ibv_get_cq_event" @ "IBVERBS_1.1" => get_cq_event);
/// Waits on the channel's fd until a CQ on `ch` has a completion event (after
/// `ibv_req_notify_cq`); with `O_NONBLOCK` on the fd, -1 and EAGAIN when none has.
unsafe extern "C" fn get_cq_event(
    ch: *mut IbvCompChannel,
    cq: *mut *mut IbvCq,
    cq_ctx: *mut *mut c_void,
) -> c_int {
    if ch.is_null() || cq.is_null() || cq_ctx.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: ch came from create_comp_channel and is still allocated (the caller does not
    // destroy it while waiting on it).
    let c = unsafe { &*(ch as *mut CChannel) };
    match c
        .entry
        .dev
        .wait_cq_event(c.fd.id(), fd_nonblocking(c.fd.raw_fd()))
    {
        Ok(tag) => {
            let got = tag as *mut IbvCq;
            // SAFETY: tag is a CQ of this channel, alive while attached (destroy_cq
            // detaches it); cq and cq_ctx are the caller's writable pointers.
            unsafe {
                *cq = got;
                *cq_ctx = (*got).cq_context;
            }
            0
        }
        Err(e) => {
            // EAGAIN on a non-blocking fd is what a program expects: no noise for it.
            if e.errno != libc::EAGAIN {
                report(&e);
            }
            set_errno(e.errno);
            -1
        }
    }
}

export!("ibv_ack_cq_events" @ "IBVERBS_1.1" => ack_cq_events);
/// Counts the acknowledged events in the CQ (`comp_events_completed`), as rdma-core; the
/// device was acknowledged when the event was taken.
unsafe extern "C" fn ack_cq_events(cq: *mut IbvCq, n: u32) {
    if !cq.is_null() {
        // SAFETY: cq came from create_cq and is still allocated.
        unsafe { (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(n) };
    }
}

export!("ibv_wc_status_str" @ "IBVERBS_1.1" => wc_status_str);
unsafe extern "C" fn wc_status_str(status: c_int) -> *const c_char {
    const S: [&CStr; 23] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
    ];
    usize::try_from(status)
        .ok()
        .and_then(|i| S.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

const _: () = {
    // The kinds are all used above; a VFIO entry is offered through the same table.
    let _ = |k: &DeviceKind| matches!(k, DeviceKind::Vfio { .. });
};

/// `enum ibv_fork_status`: `IBV_FORK_DISABLED`, `IBV_FORK_UNNEEDED`.
const IBV_FORK_DISABLED: c_int = 0;
const IBV_FORK_UNNEEDED: c_int = 2;

/// Whether `fork()` needs no care with every configured device: a mock reaches registered
/// memory through this process's own addresses, so after a fork the parent's copy-on-write
/// pages are still what its device reads and writes. A VFIO function's IOMMU maps the
/// physical pages, which a copy-on-write in the parent would leave behind.
fn fork_unneeded() -> bool {
    registry()
        .iter()
        .all(|e| matches!(e.dev.spec().kind, DeviceKind::MockUdp { .. }))
}

export!("ibv_fork_init" @ "IBVERBS_1.1" => fork_init);
/// 0 when no device needs fork protection (only mock devices: [`fork_unneeded`]), as
/// rdma-core answers on a kernel that copies pinned pages on fork; otherwise `EINVAL`:
/// this library cannot mark registered memory `MADV_DONTFORK` as rdma-core does, and says
/// so rather than pretend.
extern "C" fn fork_init() -> c_int {
    if fork_unneeded() { 0 } else { libc::EINVAL }
}

export!("ibv_is_fork_initialized" @ "IBVERBS_1.13" => is_fork_initialized);
/// `IBV_FORK_UNNEEDED` with only mock devices, `IBV_FORK_DISABLED` otherwise.
extern "C" fn is_fork_initialized() -> c_int {
    if fork_unneeded() {
        IBV_FORK_UNNEEDED
    } else {
        IBV_FORK_DISABLED
    }
}
