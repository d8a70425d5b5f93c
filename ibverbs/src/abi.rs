//! The structures of rdma-core 44's `<infiniband/verbs.h>` (x86-64) that this library
//! hands out or fills, as `#[repr(C)]` Rust types. [`LAYOUT`] lists every size and offset
//! the C side relies on; `tests/layout.rs` compiles the same list against the installed
//! header with `offsetof`/`sizeof` and compares.

use core::ffi::{c_char, c_int, c_void};
use core::mem::{offset_of, size_of};

/// `IBV_SYSFS_NAME_MAX`.
pub const SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const SYSFS_PATH_MAX: usize = 256;

/// `IBV_NODE_CA`.
pub const NODE_CA: c_int = 1;
/// `IBV_TRANSPORT_IB`.
pub const TRANSPORT_IB: c_int = 0;
/// `IBV_LINK_LAYER_INFINIBAND`.
pub const LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const LINK_LAYER_ETHERNET: u8 = 2;
/// `IBV_ATOMIC_HCA`.
pub const ATOMIC_HCA: c_int = 1;
/// `IBV_PORT_CM_SUP` (in `port_cap_flags`).
pub const PORT_CM_SUP: u32 = 1 << 16;
/// `IBV_DEVICE_RC_RNR_NAK_GEN` (in `device_cap_flags`).
pub const DEVICE_RC_RNR_NAK_GEN: u32 = 1 << 12;
/// `IBV_DEVICE_PORT_ACTIVE_EVENT`.
pub const DEVICE_PORT_ACTIVE_EVENT: u32 = 1 << 14;

/// `struct _ibv_device_ops`: two pointers nobody calls (kept 0; `usize` so that a device is
/// `Send` and `Sync`).
#[repr(C)]
pub struct DeviceOps {
    /// `_dummy1`.
    pub dummy1: usize,
    /// `_dummy2`.
    pub dummy2: usize,
}

/// `struct ibv_device` (664 bytes).
#[repr(C)]
pub struct IbvDevice {
    /// `_ops`.
    pub ops: DeviceOps,
    /// `node_type` (`enum ibv_node_type`).
    pub node_type: c_int,
    /// `transport_type` (`enum ibv_transport_type`).
    pub transport_type: c_int,
    /// `name`: the device name.
    pub name: [c_char; SYSFS_NAME_MAX],
    /// `dev_name`: the uverbs device name ("uverbs0").
    pub dev_name: [c_char; SYSFS_NAME_MAX],
    /// `dev_path`: the uverbs sysfs path.
    pub dev_path: [c_char; SYSFS_PATH_MAX],
    /// `ibdev_path`: the infiniband class sysfs path.
    pub ibdev_path: [c_char; SYSFS_PATH_MAX],
}

/// A slot of `struct ibv_context_ops` that programs never call (a compat entry).
pub type Slot = *mut c_void;

/// `int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *)`.
pub type PollCqFn = unsafe extern "C" fn(*mut IbvCq, c_int, *mut c_void) -> c_int;
/// `int (*req_notify_cq)(struct ibv_cq *, int)`.
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int;
/// `int (*post_*)(queue, wr, bad_wr)` for sends, receives and SRQ receives.
pub type PostFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut *mut c_void) -> c_int;
/// `struct ibv_mw *(*alloc_mw)(struct ibv_pd *, enum ibv_mw_type)`.
pub type AllocMwFn = unsafe extern "C" fn(*mut IbvPd, c_int) -> *mut c_void;
/// `int (*bind_mw)(struct ibv_qp *, struct ibv_mw *, struct ibv_mw_bind *)`.
pub type BindMwFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void) -> c_int;
/// `int (*dealloc_mw)(struct ibv_mw *)`.
pub type DeallocMwFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// `struct ibv_context_ops` (256 bytes, 32 pointers): the datapath the inline verbs call.
#[repr(C)]
pub struct IbvContextOps {
    /// `_compat_query_device` … `_compat_dereg_mr` (7 slots).
    pub compat0: [Slot; 7],
    /// `alloc_mw`.
    pub alloc_mw: Option<AllocMwFn>,
    /// `bind_mw`.
    pub bind_mw: Option<BindMwFn>,
    /// `dealloc_mw`.
    pub dealloc_mw: Option<DeallocMwFn>,
    /// `_compat_create_cq`.
    pub compat1: Slot,
    /// `poll_cq`.
    pub poll_cq: Option<PollCqFn>,
    /// `req_notify_cq`.
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    /// `_compat_cq_event` … `_compat_destroy_srq` (7 slots).
    pub compat2: [Slot; 7],
    /// `post_srq_recv`.
    pub post_srq_recv: Option<PostFn>,
    /// `_compat_create_qp` … `_compat_destroy_qp` (4 slots).
    pub compat3: [Slot; 4],
    /// `post_send`.
    pub post_send: Option<PostFn>,
    /// `post_recv`.
    pub post_recv: Option<PostFn>,
    /// `_compat_create_ah` … `_compat_async_event` (5 slots).
    pub compat4: [Slot; 5],
}

/// `struct ibv_context` (328 bytes).
#[repr(C)]
pub struct IbvContext {
    /// `device`.
    pub device: *mut IbvDevice,
    /// `ops`.
    pub ops: IbvContextOps,
    /// `cmd_fd`.
    pub cmd_fd: c_int,
    /// `async_fd`.
    pub async_fd: c_int,
    /// `num_comp_vectors`.
    pub num_comp_vectors: c_int,
    /// `mutex`.
    pub mutex: libc::pthread_mutex_t,
    /// `abi_compat`: not `UINTPTR_MAX`, so `verbs_get_ctx_op` finds no extended op and the
    /// inline verbs fall back to the exported ones.
    pub abi_compat: *mut c_void,
}

/// `struct ibv_device_attr` (232 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvDeviceAttr {
    pub fw_ver: [c_char; 64],
    /// Big-endian.
    pub node_guid: u64,
    /// Big-endian.
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: u32,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr` (52 bytes). The exported compat `ibv_query_port@IBVERBS_1.1`
/// fills the first [`COMPAT_PORT_ATTR_LEN`] bytes (`struct _compat_ibv_port_attr`).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvPortAttr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// What `ibv_query_port@IBVERBS_1.1` writes: up to and including `link_layer`, padded
/// (`struct _compat_ibv_port_attr`, 48 bytes).
pub const COMPAT_PORT_ATTR_LEN: usize = 48;

/// `struct ibv_pd` (16 bytes).
#[repr(C)]
pub struct IbvPd {
    /// `context`.
    pub context: *mut IbvContext,
    /// `handle`.
    pub handle: u32,
}

/// `struct ibv_mr` (48 bytes).
#[repr(C)]
pub struct IbvMr {
    /// `context`.
    pub context: *mut IbvContext,
    /// `pd`.
    pub pd: *mut IbvPd,
    /// `addr`: the application's address of the region.
    pub addr: *mut c_void,
    /// `length`.
    pub length: usize,
    /// `handle`.
    pub handle: u32,
    /// `lkey`.
    pub lkey: u32,
    /// `rkey`.
    pub rkey: u32,
}

/// `IBV_ACCESS_LOCAL_WRITE` … `IBV_ACCESS_REMOTE_ATOMIC`: the rights uhca's keys carry (the
/// same bits as the PRM's).
pub const ACCESS_BASIC: c_int = 0xf;
/// `IBV_ACCESS_RELAXED_ORDERING` (an optional hint: may be ignored).
pub const ACCESS_RELAXED_ORDERING: c_int = 1 << 20;

/// `struct ibv_cq` (128 bytes).
#[repr(C)]
pub struct IbvCq {
    /// `context`.
    pub context: *mut IbvContext,
    /// `channel`.
    pub channel: *mut c_void,
    /// `cq_context`.
    pub cq_context: *mut c_void,
    /// `handle`.
    pub handle: u32,
    /// `cqe`: the entries the CQ holds.
    pub cqe: c_int,
    /// `mutex`.
    pub mutex: libc::pthread_mutex_t,
    /// `cond`.
    pub cond: libc::pthread_cond_t,
    /// `comp_events_completed`.
    pub comp_events_completed: u32,
    /// `async_events_completed`.
    pub async_events_completed: u32,
}

/// `union ibv_gid` (16 bytes, network order).
#[repr(C)]
pub struct IbvGid {
    /// `raw`.
    pub raw: [u8; 16],
}

macro_rules! layout {
    ($( $t:ident => $c:literal { $($f:ident),* } )*) => {
        /// Every size (`sizeof struct X`) and offset (`offsetof struct X field`) of this
        /// module, by its C name, as `tests/layout.rs` checks against the header.
        pub const LAYOUT: &[(&str, &str, usize)] = &[
            $(
                ($c, "", size_of::<$t>()),
                $( ($c, stringify!($f), offset_of!($t, $f)), )*
            )*
        ];
    };
}

layout! {
    IbvDevice => "ibv_device" { node_type, transport_type, name, dev_name, dev_path, ibdev_path }
    IbvContext => "ibv_context" { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
    IbvContextOps => "ibv_context_ops" { alloc_mw, bind_mw, dealloc_mw, poll_cq, req_notify_cq, post_srq_recv, post_send, post_recv }
    IbvDeviceAttr => "ibv_device_attr" { fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw, max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt }
    IbvPortAttr => "ibv_port_attr" { state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout, init_type_reply, active_width, active_speed, phys_state, link_layer, flags, port_cap_flags2 }
    IbvPd => "ibv_pd" { context, handle }
    IbvMr => "ibv_mr" { context, pd, addr, length, handle, lkey, rkey }
    IbvCq => "ibv_cq" { context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed, async_events_completed }
    IbvGid => "ibv_gid" { raw }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes VERBS-ABI measured (restated in the README), without a compiler.
    #[test]
    fn known_sizes() {
        assert_eq!(size_of::<IbvDevice>(), 664);
        assert_eq!(size_of::<IbvContextOps>(), 256);
        assert_eq!(size_of::<IbvContext>(), 328);
        assert_eq!(offset_of!(IbvContext, abi_compat), 320);
        assert_eq!(offset_of!(IbvContextOps, poll_cq), 88);
        assert_eq!(offset_of!(IbvContextOps, post_send), 200);
        assert_eq!(offset_of!(IbvContextOps, post_recv), 208);
        assert_eq!(offset_of!(IbvContextOps, post_srq_recv), 160);
        assert_eq!(size_of::<IbvPortAttr>(), 52);
        assert_eq!(offset_of!(IbvCq, cqe), 28);
    }
}

/// [`LAYOUT`] against the installed `<infiniband/verbs.h>`: a C program made from the table
/// prints each `sizeof`/`offsetof`, compiled with `cc`. Skipped (with a message) without a
/// compiler or the header, unless `UHCA_REQUIRE_IBVERBS_UTILS=1`.
#[cfg(test)]
mod header {
    use super::LAYOUT;
    use std::path::Path;
    use std::process::Command;

    const HEADER: &str = "/usr/include/infiniband/verbs.h";

    fn skip(why: &str) {
        assert!(
            std::env::var("UHCA_REQUIRE_IBVERBS_UTILS").as_deref() != Ok("1"),
            "UHCA_REQUIRE_IBVERBS_UTILS=1 but {why}"
        );
        eprintln!("skipped: {why} (install libibverbs-dev and a C compiler)");
    }

    #[test]
    fn layouts_match_the_header() {
        if !Path::new(HEADER).exists() {
            return skip(&format!("{HEADER} is absent"));
        }
        let dir = std::env::temp_dir().join(format!("uhca-ibverbs-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n\
             int main(void) {\n",
        );
        for (s, f, _) in LAYOUT {
            let t = if *s == "ibv_gid" { "union" } else { "struct" };
            if f.is_empty() {
                c += &format!("printf(\"{s} . %zu\\n\", sizeof({t} {s}));\n");
            } else {
                c += &format!("printf(\"{s} {f} %zu\\n\", offsetof({t} {s}, {f}));\n");
            }
        }
        c += "return 0;\n}\n";
        let src = dir.join("layout.c");
        let exe = dir.join("layout");
        std::fs::write(&src, c).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let built = match Command::new(&cc).arg(&src).arg("-o").arg(&exe).output() {
            Ok(o) => o,
            Err(e) => return skip(&format!("no C compiler ({cc}: {e})")),
        };
        assert!(
            built.status.success(),
            "{cc} failed:\n{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let out = Command::new(&exe).output().unwrap();
        let out = String::from_utf8(out.stdout).unwrap();
        let mut lines = out.lines();
        let mut checked = 0;
        for (s, f, rust) in LAYOUT {
            let line = lines.next().expect("a line per entry");
            let mut w = line.split(' ');
            assert_eq!(w.next(), Some(*s));
            let field = w.next().unwrap();
            assert_eq!(field, if f.is_empty() { "." } else { f });
            let c: usize = w.next().unwrap().parse().unwrap();
            assert_eq!(c, *rust, "{s}.{field}: C says {c}, Rust {rust}");
            checked += 1;
        }
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!("{checked} sizes and offsets match {HEADER}");
    }
}
