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
pub const DEVICE_PORT_ACTIVE_EVENT: u32 = 1 << 10;

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
    /// `abi_compat`: [`VERBS_ABI_IS_EXTENDED`], as this library's contexts are the last
    /// field of a [`VerbsContext`] that `verbs_get_ctx_op` finds.
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

/// `struct ibv_qp_cap` (20 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr` (64 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub cap: IbvQpCap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

/// `struct ibv_qp_init_attr_ex` (136 bytes): `ibv_qp_init_attr`'s fields, then what
/// `comp_mask` says is set (`IBV_QP_INIT_ATTR_*`). The RSS hash configuration, which this
/// library refuses, is opaque.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQpInitAttrEx {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub cap: IbvQpCap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut IbvPd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: [u64; 3],
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `ibv_qp_init_attr_ex.comp_mask` bits (`enum ibv_qp_init_attr_mask`).
pub mod qp_init_attr_mask {
    /// `pd` is set (required).
    pub const PD: u32 = 1 << 0;
    /// `create_flags` is set.
    pub const CREATE_FLAGS: u32 = 1 << 2;
    /// `send_ops_flags` is set: the QP is posted to with `ibv_wr_*` (`ibv_qp_to_qp_ex`).
    pub const SEND_OPS_FLAGS: u32 = 1 << 6;
}

/// `ibv_qp_init_attr_ex.send_ops_flags` bits (`enum ibv_qp_create_send_ops_flags`).
pub mod send_ops {
    /// `IBV_QP_EX_WITH_RDMA_WRITE`.
    pub const RDMA_WRITE: u64 = 1 << 0;
    /// `IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM`.
    pub const RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
    /// `IBV_QP_EX_WITH_SEND`.
    pub const SEND: u64 = 1 << 2;
    /// `IBV_QP_EX_WITH_SEND_WITH_IMM`.
    pub const SEND_WITH_IMM: u64 = 1 << 3;
    /// `IBV_QP_EX_WITH_RDMA_READ`.
    pub const RDMA_READ: u64 = 1 << 4;
    /// `IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP`.
    pub const ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
    /// `IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD`.
    pub const ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
    /// What this library's `ibv_wr_*` post: what its `ibv_post_send` offers.
    pub const OFFERED: u64 = RDMA_WRITE
        | RDMA_WRITE_WITH_IMM
        | SEND
        | SEND_WITH_IMM
        | RDMA_READ
        | ATOMIC_CMP_AND_SWP
        | ATOMIC_FETCH_AND_ADD;
}

/// The part of `struct ibv_qp_ex` after its `ibv_qp` (`qp_base`): the request being built
/// (`wr_id`, `wr_flags`) and the `ibv_wr_*` operations, which `verbs.h`'s inline functions
/// call through these pointers.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQpExOps {
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: u32,
    pub wr_atomic_cmp_swp: unsafe extern "C" fn(*mut c_void, u32, u64, u64, u64),
    pub wr_atomic_fetch_add: unsafe extern "C" fn(*mut c_void, u32, u64, u64),
    pub wr_bind_mw: unsafe extern "C" fn(*mut c_void, *mut c_void, u32, *const c_void),
    pub wr_local_inv: unsafe extern "C" fn(*mut c_void, u32),
    pub wr_rdma_read: unsafe extern "C" fn(*mut c_void, u32, u64),
    pub wr_rdma_write: unsafe extern "C" fn(*mut c_void, u32, u64),
    pub wr_rdma_write_imm: unsafe extern "C" fn(*mut c_void, u32, u64, u32),
    pub wr_send: unsafe extern "C" fn(*mut c_void),
    pub wr_send_imm: unsafe extern "C" fn(*mut c_void, u32),
    pub wr_send_inv: unsafe extern "C" fn(*mut c_void, u32),
    pub wr_send_tso: unsafe extern "C" fn(*mut c_void, *mut c_void, u16, u16),
    pub wr_set_ud_addr: unsafe extern "C" fn(*mut c_void, *mut IbvAh, u32, u32),
    pub wr_set_xrc_srqn: unsafe extern "C" fn(*mut c_void, u32),
    pub wr_set_inline_data: unsafe extern "C" fn(*mut c_void, *mut c_void, usize),
    pub wr_set_inline_data_list: unsafe extern "C" fn(*mut c_void, usize, *const IbvDataBuf),
    pub wr_set_sge: unsafe extern "C" fn(*mut c_void, u32, u64, u32),
    pub wr_set_sge_list: unsafe extern "C" fn(*mut c_void, usize, *const IbvSge),
    pub wr_start: unsafe extern "C" fn(*mut c_void),
    pub wr_complete: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub wr_abort: unsafe extern "C" fn(*mut c_void),
    pub wr_atomic_write: unsafe extern "C" fn(*mut c_void, u32, u64, *const c_void),
}

/// `struct ibv_qp_ex`, for the layout check (this library's QPs are an [`IbvQp`] followed
/// by an [`IbvQpExOps`], `ffi.rs` `CQp`).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQpEx {
    pub qp_base: IbvQp,
    pub ops: IbvQpExOps,
}

/// `struct ibv_cq_init_attr_ex` (56 bytes): what `ibv_create_cq_ex` asks for.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvCqInitAttrEx {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut c_void,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut IbvPd,
}

/// `ibv_cq_init_attr_ex` bits: `comp_mask` (`enum ibv_cq_init_attr_mask`), `flags`
/// (`enum ibv_create_cq_attr_flags`) and `wc_flags` (`enum ibv_create_cq_wc_flags`).
pub mod cq_init {
    /// `comp_mask`: `flags` is set.
    pub const MASK_FLAGS: u32 = 1 << 0;
    /// `comp_mask`: `parent_domain` is set.
    pub const MASK_PD: u32 = 1 << 1;
    /// `flags`: the CQ is polled from one thread only (a hint).
    pub const SINGLE_THREADED: u32 = 1 << 0;
    /// `wc_flags`: `IBV_WC_STANDARD_FLAGS`, the fields of an `ibv_wc` (byte count,
    /// immediate, QP number, source QP, SLID, SL, DLID path bits).
    pub const STANDARD_WC_FLAGS: u64 = 0x7f;
}

/// The part of `struct ibv_cq_ex` after its `ibv_cq`: the current completion's status
/// and `wr_id`, and the `ibv_start_poll`/`ibv_next_poll`/`ibv_wc_read_*` operations that
/// `verbs.h`'s inlines call.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvCqExOps {
    pub comp_mask: u32,
    pub status: c_int,
    pub wr_id: u64,
    pub start_poll: unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int,
    pub next_poll: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub end_poll: unsafe extern "C" fn(*mut c_void),
    pub read_opcode: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub read_vendor_err: unsafe extern "C" fn(*mut c_void) -> u32,
    pub read_byte_len: unsafe extern "C" fn(*mut c_void) -> u32,
    pub read_imm_data: unsafe extern "C" fn(*mut c_void) -> u32,
    pub read_qp_num: unsafe extern "C" fn(*mut c_void) -> u32,
    pub read_src_qp: unsafe extern "C" fn(*mut c_void) -> u32,
    pub read_wc_flags: unsafe extern "C" fn(*mut c_void) -> u32,
    pub read_slid: unsafe extern "C" fn(*mut c_void) -> u32,
    pub read_sl: unsafe extern "C" fn(*mut c_void) -> u8,
    pub read_dlid_path_bits: unsafe extern "C" fn(*mut c_void) -> u8,
    pub read_completion_ts: unsafe extern "C" fn(*mut c_void) -> u64,
    pub read_cvlan: unsafe extern "C" fn(*mut c_void) -> u16,
    pub read_flow_tag: unsafe extern "C" fn(*mut c_void) -> u32,
    pub read_tm_info: unsafe extern "C" fn(*mut c_void, *mut c_void),
    pub read_completion_wallclock_ns: unsafe extern "C" fn(*mut c_void) -> u64,
}

/// `struct ibv_cq_ex`, for the layout check (this library's CQs are an [`IbvCq`] followed
/// by an [`IbvCqExOps`], `ffi.rs` `CCq`).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvCqEx {
    pub base: IbvCq,
    pub ops: IbvCqExOps,
}

/// `struct ibv_data_buf` (16 bytes): one buffer of `ibv_wr_set_inline_data_list`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvDataBuf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `struct ibv_global_route` (24 bytes; 8-byte aligned, as `union ibv_gid` holds `__be64`s).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvGlobalRoute {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvAhAttr {
    pub grh: IbvGlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr` (144 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQpAttr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: IbvQpCap,
    pub ah_attr: IbvAhAttr,
    pub alt_ah_attr: IbvAhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `enum ibv_qp_attr_mask` bits.
#[allow(missing_docs)]
pub mod qp_mask {
    pub const STATE: i32 = 1 << 0;
    pub const CUR_STATE: i32 = 1 << 1;
    pub const EN_SQD_ASYNC_NOTIFY: i32 = 1 << 2;
    pub const ACCESS_FLAGS: i32 = 1 << 3;
    pub const PKEY_INDEX: i32 = 1 << 4;
    pub const PORT: i32 = 1 << 5;
    pub const QKEY: i32 = 1 << 6;
    pub const AV: i32 = 1 << 7;
    pub const PATH_MTU: i32 = 1 << 8;
    pub const TIMEOUT: i32 = 1 << 9;
    pub const RETRY_CNT: i32 = 1 << 10;
    pub const RNR_RETRY: i32 = 1 << 11;
    pub const RQ_PSN: i32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: i32 = 1 << 13;
    pub const ALT_PATH: i32 = 1 << 14;
    pub const MIN_RNR_TIMER: i32 = 1 << 15;
    pub const SQ_PSN: i32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: i32 = 1 << 17;
    pub const PATH_MIG_STATE: i32 = 1 << 18;
    pub const CAP: i32 = 1 << 19;
    pub const DEST_QPN: i32 = 1 << 20;
}

/// `struct ibv_qp` (160 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQp {
    pub context: *mut IbvContext,
    pub qp_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_srq` (128 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvSrq {
    pub context: *mut IbvContext,
    pub srq_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub handle: u32,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_srq_attr` (12 bytes).
#[repr(C)]
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IbvSrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr` (24 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvSrqInitAttr {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
}

/// `IBV_SRQ_MAX_WR` of `enum ibv_srq_attr_mask`.
pub const SRQ_MAX_WR: c_int = 1;
/// `IBV_SRQ_LIMIT`.
pub const SRQ_LIMIT: c_int = 2;

/// `struct ibv_sge` (16 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr` (128 bytes): the common head; the unions after it (RDMA, atomic,
/// UD, XRC, bind, TSO) are opaque here since only SEND is offered.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: u32,
    pub imm_data: u32,
    pub rest: [u64; 11],
}

impl IbvSendWr {
    /// `wr.rdma.remote_addr` and `wr.atomic.remote_addr` (offset 40).
    pub fn remote_addr(&self) -> u64 {
        self.rest[0]
    }

    /// `wr.rdma.rkey` (offset 48).
    pub fn rdma_rkey(&self) -> u32 {
        self.rest[1] as u32
    }

    /// `wr.atomic.compare_add` (offset 48).
    pub fn compare_add(&self) -> u64 {
        self.rest[1]
    }

    /// `wr.atomic.swap` (offset 56).
    pub fn swap(&self) -> u64 {
        self.rest[2]
    }

    /// `wr.atomic.rkey` (offset 64).
    pub fn atomic_rkey(&self) -> u32 {
        self.rest[3] as u32
    }

    /// `wr.ud.ah` (offset 40).
    pub fn ud_ah(&self) -> *mut IbvAh {
        self.rest[0] as usize as *mut IbvAh
    }

    /// `wr.ud.remote_qpn` (offset 48: the low half of the word, x86_64 being little-endian).
    pub fn ud_remote_qpn(&self) -> u32 {
        self.rest[1] as u32
    }

    /// `wr.ud.remote_qkey` (offset 52).
    pub fn ud_remote_qkey(&self) -> u32 {
        (self.rest[1] >> 32) as u32
    }

    /// Sets `wr.rdma`: the remote address and key.
    pub fn set_rdma(&mut self, remote_addr: u64, rkey: u32) {
        self.rest[0] = remote_addr;
        self.rest[1] = rkey.into();
    }

    /// Sets `wr.atomic`: the remote address and key, compare (or add) and swap.
    pub fn set_atomic(&mut self, remote_addr: u64, rkey: u32, compare_add: u64, swap: u64) {
        self.rest[0] = remote_addr;
        self.rest[1] = compare_add;
        self.rest[2] = swap;
        self.rest[3] = rkey.into();
    }

    /// Sets `wr.ud`: the address handle, remote QP and Q_Key.
    pub fn set_ud(&mut self, ah: *mut IbvAh, remote_qpn: u32, remote_qkey: u32) {
        self.rest[0] = ah as usize as u64;
        self.rest[1] = u64::from(remote_qpn) | (u64::from(remote_qkey) << 32);
    }

    /// A request of nothing (every field zero).
    pub const ZERO: IbvSendWr = IbvSendWr {
        wr_id: 0,
        next: core::ptr::null_mut(),
        sg_list: core::ptr::null_mut(),
        num_sge: 0,
        opcode: 0,
        send_flags: 0,
        imm_data: 0,
        rest: [0; 11],
    };
}

/// `struct ibv_async_event` (16 bytes): the object (`element`, a union of pointers and the
/// `int port_num`) and `event_type`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvAsyncEvent {
    /// `element.cq`, `.qp`, `.srq`, or `.port_num` in its low bytes.
    pub element: *mut c_void,
    /// `event_type` (`enum ibv_event_type`).
    pub event_type: c_int,
}

/// `IBV_WR_RDMA_WRITE`.
pub const WR_RDMA_WRITE: c_int = 0;
/// `IBV_WR_RDMA_WRITE_WITH_IMM`.
pub const WR_RDMA_WRITE_WITH_IMM: c_int = 1;
/// `IBV_WR_SEND`.
pub const WR_SEND: c_int = 2;
/// `IBV_WR_SEND_WITH_IMM`.
pub const WR_SEND_WITH_IMM: c_int = 3;
/// `IBV_WR_RDMA_READ`.
pub const WR_RDMA_READ: c_int = 4;
/// `IBV_WR_ATOMIC_CMP_AND_SWP`.
pub const WR_ATOMIC_CMP_AND_SWP: c_int = 5;
/// `IBV_WR_ATOMIC_FETCH_AND_ADD`.
pub const WR_ATOMIC_FETCH_AND_ADD: c_int = 6;
/// `IBV_SEND_FENCE`.
pub const SEND_FENCE: u32 = 1;
/// `IBV_SEND_SIGNALED`.
pub const SEND_SIGNALED: u32 = 1 << 1;
/// `IBV_SEND_SOLICITED`.
pub const SEND_SOLICITED: u32 = 1 << 2;
/// `IBV_SEND_INLINE`.
pub const SEND_INLINE: u32 = 1 << 3;

/// `struct ibv_recv_wr` (32 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
}

/// `struct ibv_wc` (48 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvWc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_comp_channel` (16 bytes).
#[repr(C)]
pub struct IbvCompChannel {
    /// `context`.
    pub context: *mut IbvContext,
    /// `fd`.
    pub fd: c_int,
    /// `refcnt`: the CQs on it.
    pub refcnt: c_int,
}

/// `union ibv_gid` (16 bytes, network order).
#[repr(C)]
pub struct IbvGid {
    /// `raw`.
    pub raw: [u8; 16],
}

/// `struct ibv_ah` (24 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvAh {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub handle: u32,
}

/// `struct ibv_grh` (40 bytes): the global route header a UD receive finds before its data
/// (for RoCEv2 over IPv4, the IPv4 header in its last 20 bytes instead).
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvGrh {
    pub version_tclass_flow: u32,
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
}

/// `struct ibv_gid_entry` (32 bytes), what `ibv_query_gid_ex` fills.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvGidEntry {
    pub gid: [u8; 16],
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` of a context that a [`VerbsContext`] holds.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = core::ptr::without_provenance_mut(usize::MAX);

/// `int (*query_device_ex)(struct ibv_context *, const struct ibv_query_device_ex_input *,
/// struct ibv_device_attr_ex *, size_t attr_size)`.
pub type QueryDeviceExFn = unsafe extern "C" fn(
    *mut IbvContext,
    *const IbvQueryDeviceExInput,
    *mut IbvDeviceAttrEx,
    usize,
) -> c_int;

/// `struct verbs_context` (648 bytes): the extended ops in front ("growing up" towards
/// lower addresses as rdma-core adds them), `sz`, then the [`IbvContext`] last. `verbs.h`'s
/// inline extended verbs find it from the `ibv_context` with `container_of` once
/// `abi_compat` is [`VERBS_ABI_IS_EXTENDED`], and treat a NULL op (or one that `sz` does not
/// cover) as unsupported. Every slot is a bare pointer except the ops this library offers.
#[repr(C)]
#[allow(missing_docs, non_snake_case)]
pub struct VerbsContext {
    pub query_port: Slot,
    pub advise_mr: Slot,
    pub alloc_null_mr: Slot,
    pub read_counters: Slot,
    pub attach_counters_point_flow: Slot,
    pub create_counters: Slot,
    pub destroy_counters: Slot,
    pub reg_dm_mr: Slot,
    pub alloc_dm: Slot,
    pub free_dm: Slot,
    pub modify_flow_action_esp: Slot,
    pub destroy_flow_action: Slot,
    pub create_flow_action_esp: Slot,
    pub modify_qp_rate_limit: Slot,
    pub alloc_parent_domain: Slot,
    pub dealloc_td: Slot,
    pub alloc_td: Slot,
    pub modify_cq: Slot,
    pub post_srq_ops: Slot,
    pub destroy_rwq_ind_table: Slot,
    pub create_rwq_ind_table: Slot,
    pub destroy_wq: Slot,
    pub modify_wq: Slot,
    pub create_wq: Slot,
    pub query_rt_values: Slot,
    pub create_cq_ex: Option<CreateCqExFn>,
    /// `priv`: rdma-core's own bookkeeping; NULL here.
    pub priv_: Slot,
    pub query_device_ex: Option<QueryDeviceExFn>,
    pub ibv_destroy_flow: Slot,
    pub ABI_placeholder2: Slot,
    pub ibv_create_flow: Slot,
    pub ABI_placeholder1: Slot,
    pub open_qp: Slot,
    pub create_qp_ex: Option<CreateQpExFn>,
    pub get_srq_num: Slot,
    pub create_srq_ex: Slot,
    pub open_xrcd: Slot,
    pub close_xrcd: Slot,
    pub _ABI_placeholder3: u64,
    /// `sz`: `sizeof(struct verbs_context)`, how far the ops reach back from `context`.
    pub sz: usize,
    /// `context`: what the program holds; must stay the last field.
    pub context: IbvContext,
}

/// `struct ibv_cq_ex *(*create_cq_ex)(struct ibv_context *, struct ibv_cq_init_attr_ex *)`.
pub type CreateCqExFn = unsafe extern "C" fn(*mut IbvContext, *mut IbvCqInitAttrEx) -> *mut IbvCq;

/// `struct ibv_qp *(*create_qp_ex)(struct ibv_context *, struct ibv_qp_init_attr_ex *)`.
pub type CreateQpExFn = unsafe extern "C" fn(*mut c_void, *mut IbvQpInitAttrEx) -> *mut IbvQp;

/// `struct ibv_query_device_ex_input` (4 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQueryDeviceExInput {
    pub comp_mask: u32,
}

/// `struct ibv_odp_caps` (24 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvOdpCaps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// `struct ibv_tso_caps` (8 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvTsoCaps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_rss_caps` (32 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvRssCaps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `struct ibv_packet_pacing_caps` (12 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvPacketPacingCaps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_tm_caps` (20 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvTmCaps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

/// `struct ibv_cq_moderation_caps` (4 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvCqModerationCaps {
    pub max_cq_count: u16,
    pub max_cq_period: u16,
}

/// `struct ibv_pci_atomic_caps` (6 bytes).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvPciAtomicCaps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

/// `struct ibv_device_attr_ex` (400 bytes): what `ibv_query_device_ex` fills, the
/// [`IbvDeviceAttr`] first.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvDeviceAttrEx {
    pub orig_attr: IbvDeviceAttr,
    pub comp_mask: u32,
    pub odp_caps: IbvOdpCaps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: IbvTsoCaps,
    pub rss_caps: IbvRssCaps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: IbvPacketPacingCaps,
    pub raw_packet_caps: u32,
    pub tm_caps: IbvTmCaps,
    pub cq_mod_caps: IbvCqModerationCaps,
    pub max_dm_size: u64,
    pub pci_atomic_caps: IbvPciAtomicCaps,
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

macro_rules! layout {
    ($( $t:ident => $c:literal { $($f:ident),* } )* ; $( ($ec:literal, $ef:literal, $eo:expr) )*) => {
        /// Every size (`sizeof struct X`) and offset (`offsetof struct X field`) of this
        /// module, by its C name, as `tests/layout.rs` checks against the header.
        pub const LAYOUT: &[(&str, &str, usize)] = &[
            $(
                ($c, "", size_of::<$t>()),
                $( ($c, stringify!($f), offset_of!($t, $f)), )*
            )*
            $( ($ec, $ef, $eo), )*
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
    IbvCompChannel => "ibv_comp_channel" { context, fd, refcnt }
    IbvQpCap => "ibv_qp_cap" { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
    IbvQpInitAttr => "ibv_qp_init_attr" { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
    IbvGlobalRoute => "ibv_global_route" { dgid, flow_label, sgid_index, hop_limit, traffic_class }
    IbvAhAttr => "ibv_ah_attr" { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
    IbvQpAttr => "ibv_qp_attr" { qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit }
    IbvQp => "ibv_qp" { context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type, mutex, cond, events_completed }
    IbvQpInitAttrEx => "ibv_qp_init_attr_ex" { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd, create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags }
    IbvQpEx => "ibv_qp_ex" { qp_base }
    IbvDataBuf => "ibv_data_buf" { addr, length }
    IbvCqInitAttrEx => "ibv_cq_init_attr_ex" { cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain }
    IbvCqEx => "ibv_cq_ex" { }
    IbvSge => "ibv_sge" { addr, length, lkey }
    IbvSrq => "ibv_srq" { context, srq_context, pd, handle, mutex, cond, events_completed }
    IbvSrqAttr => "ibv_srq_attr" { max_wr, max_sge, srq_limit }
    IbvSrqInitAttr => "ibv_srq_init_attr" { srq_context, attr }
    IbvSendWr => "ibv_send_wr" { wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data }
    IbvRecvWr => "ibv_recv_wr" { wr_id, next, sg_list, num_sge }
    IbvAh => "ibv_ah" { context, pd, handle }
    IbvGrh => "ibv_grh" { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid }
    IbvGidEntry => "ibv_gid_entry" { gid, gid_index, port_num, gid_type, ndev_ifindex }
    IbvAsyncEvent => "ibv_async_event" { element, event_type }
    IbvWc => "ibv_wc" { wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits }
    VerbsContext => "verbs_context" { query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow, create_counters, destroy_counters, reg_dm_mr, alloc_dm, free_dm, modify_flow_action_esp, destroy_flow_action, create_flow_action_esp, modify_qp_rate_limit, alloc_parent_domain, dealloc_td, alloc_td, modify_cq, post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table, destroy_wq, modify_wq, create_wq, query_rt_values, create_cq_ex, query_device_ex, ibv_destroy_flow, ABI_placeholder2, ibv_create_flow, ABI_placeholder1, open_qp, create_qp_ex, get_srq_num, create_srq_ex, open_xrcd, close_xrcd, _ABI_placeholder3, sz, context }
    IbvQueryDeviceExInput => "ibv_query_device_ex_input" { comp_mask }
    IbvOdpCaps => "ibv_odp_caps" { general_caps }
    IbvTsoCaps => "ibv_tso_caps" { max_tso, supported_qpts }
    IbvRssCaps => "ibv_rss_caps" { supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size, rx_hash_fields_mask, rx_hash_function }
    IbvPacketPacingCaps => "ibv_packet_pacing_caps" { qp_rate_limit_min, qp_rate_limit_max, supported_qpts }
    IbvTmCaps => "ibv_tm_caps" { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge }
    IbvCqModerationCaps => "ibv_cq_moderation_caps" { max_cq_count, max_cq_period }
    IbvPciAtomicCaps => "ibv_pci_atomic_caps" { fetch_add, swap, compare_swap }
    IbvDeviceAttrEx => "ibv_device_attr_ex" { orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock, device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps, raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps, xrc_odp_caps, phys_port_cnt_ex }
    ;
    // What the accessors of IbvSendWr read out of `rest` (8-byte words from offset 40).
    ("ibv_send_wr", "wr.rdma.remote_addr", offset_of!(IbvSendWr, rest))
    ("ibv_send_wr", "wr.rdma.rkey", offset_of!(IbvSendWr, rest) + 8)
    ("ibv_send_wr", "wr.atomic.remote_addr", offset_of!(IbvSendWr, rest))
    ("ibv_send_wr", "wr.atomic.compare_add", offset_of!(IbvSendWr, rest) + 8)
    ("ibv_send_wr", "wr.atomic.swap", offset_of!(IbvSendWr, rest) + 16)
    ("ibv_send_wr", "wr.atomic.rkey", offset_of!(IbvSendWr, rest) + 24)
    ("ibv_send_wr", "wr.ud.ah", offset_of!(IbvSendWr, rest))
    ("ibv_send_wr", "wr.ud.remote_qpn", offset_of!(IbvSendWr, rest) + 8)
    ("ibv_send_wr", "wr.ud.remote_qkey", offset_of!(IbvSendWr, rest) + 12)
    ("verbs_context", "priv", offset_of!(VerbsContext, priv_))
    // The fields and operations of `ibv_cq_ex`, after its `ibv_cq`.
    ("ibv_cq_ex", "comp_mask", offset_of!(IbvCqEx, ops) + offset_of!(IbvCqExOps, comp_mask))
    ("ibv_cq_ex", "status", offset_of!(IbvCqEx, ops) + offset_of!(IbvCqExOps, status))
    ("ibv_cq_ex", "wr_id", offset_of!(IbvCqEx, ops) + offset_of!(IbvCqExOps, wr_id))
    ("ibv_cq_ex", "start_poll", offset_of!(IbvCqEx, ops) + offset_of!(IbvCqExOps, start_poll))
    ("ibv_cq_ex", "read_opcode", offset_of!(IbvCqEx, ops) + offset_of!(IbvCqExOps, read_opcode))
    ("ibv_cq_ex", "read_wc_flags", offset_of!(IbvCqEx, ops) + offset_of!(IbvCqExOps, read_wc_flags))
    ("ibv_cq_ex", "read_sl", offset_of!(IbvCqEx, ops) + offset_of!(IbvCqExOps, read_sl))
    ("ibv_cq_ex", "read_completion_ts", offset_of!(IbvCqEx, ops) + offset_of!(IbvCqExOps, read_completion_ts))
    ("ibv_cq_ex", "read_completion_wallclock_ns", offset_of!(IbvCqEx, ops) + offset_of!(IbvCqExOps, read_completion_wallclock_ns))
    ("ibv_cq_ex", "mutex", offset_of!(IbvCqEx, base) + offset_of!(IbvCq, mutex))
    // The operations of `ibv_qp_ex`, after its `ibv_qp`.
    ("ibv_qp_ex", "comp_mask", offset_of!(IbvQpEx, ops) + offset_of!(IbvQpExOps, comp_mask))
    ("ibv_qp_ex", "wr_id", offset_of!(IbvQpEx, ops) + offset_of!(IbvQpExOps, wr_id))
    ("ibv_qp_ex", "wr_flags", offset_of!(IbvQpEx, ops) + offset_of!(IbvQpExOps, wr_flags))
    ("ibv_qp_ex", "wr_atomic_cmp_swp", offset_of!(IbvQpEx, ops) + offset_of!(IbvQpExOps, wr_atomic_cmp_swp))
    ("ibv_qp_ex", "wr_rdma_write", offset_of!(IbvQpEx, ops) + offset_of!(IbvQpExOps, wr_rdma_write))
    ("ibv_qp_ex", "wr_send", offset_of!(IbvQpEx, ops) + offset_of!(IbvQpExOps, wr_send))
    ("ibv_qp_ex", "wr_set_ud_addr", offset_of!(IbvQpEx, ops) + offset_of!(IbvQpExOps, wr_set_ud_addr))
    ("ibv_qp_ex", "wr_set_inline_data", offset_of!(IbvQpEx, ops) + offset_of!(IbvQpExOps, wr_set_inline_data))
    ("ibv_qp_ex", "wr_set_sge", offset_of!(IbvQpEx, ops) + offset_of!(IbvQpExOps, wr_set_sge))
    ("ibv_qp_ex", "wr_set_sge_list", offset_of!(IbvQpEx, ops) + offset_of!(IbvQpExOps, wr_set_sge_list))
    ("ibv_qp_ex", "wr_start", offset_of!(IbvQpEx, ops) + offset_of!(IbvQpExOps, wr_start))
    ("ibv_qp_ex", "wr_complete", offset_of!(IbvQpEx, ops) + offset_of!(IbvQpExOps, wr_complete))
    ("ibv_qp_ex", "wr_abort", offset_of!(IbvQpEx, ops) + offset_of!(IbvQpExOps, wr_abort))
    ("ibv_qp_ex", "wr_atomic_write", offset_of!(IbvQpEx, ops) + offset_of!(IbvQpExOps, wr_atomic_write))
    ("ibv_odp_caps", "per_transport_caps.rc_odp_caps", offset_of!(IbvOdpCaps, rc_odp_caps))
    ("ibv_odp_caps", "per_transport_caps.uc_odp_caps", offset_of!(IbvOdpCaps, uc_odp_caps))
    ("ibv_odp_caps", "per_transport_caps.ud_odp_caps", offset_of!(IbvOdpCaps, ud_odp_caps))
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
        assert_eq!(size_of::<VerbsContext>(), 648);
        assert_eq!(offset_of!(VerbsContext, sz), 312);
        assert_eq!(offset_of!(VerbsContext, context), 320);
        assert_eq!(offset_of!(VerbsContext, query_device_ex), 216);
        assert_eq!(size_of::<IbvDeviceAttrEx>(), 400);
        assert_eq!(offset_of!(IbvDeviceAttrEx, phys_port_cnt_ex), 396);
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
