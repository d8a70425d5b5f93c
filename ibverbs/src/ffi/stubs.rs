//! Verbs this library does not offer, exported so that programs importing them load (rdma-core's
//! Python bindings, pyverbs, import nearly the whole API): each answers as rdma-core's
//! libibverbs does when a device's provider lacks the operation — `EOPNOTSUPP`, returned or as
//! `errno` beside a NULL or `-1` — and never succeeds silently. A program that asks is told at
//! once; rdma-core's own test suite skips on that answer.
//!
//! The symbol versions are rdma-core 44's (`libibverbs.map`). When one of these becomes real,
//! its `export!` moves to the file that implements it and leaves this one.

use core::ffi::{c_int, c_void};
use core::ptr;

use super::set_errno;
use crate::abi::{IbvContext, IbvCq, IbvPd};

/// Sets `errno` to `EOPNOTSUPP` and returns NULL, as rdma-core for a missing provider op.
fn refuse_ptr<T>() -> *mut T {
    set_errno(libc::EOPNOTSUPP);
    ptr::null_mut()
}

export!("ibv_resize_cq" @ "IBVERBS_1.1" => resize_cq);
extern "C" fn resize_cq(_cq: *mut IbvCq, _cqe: c_int) -> c_int {
    libc::EOPNOTSUPP
}

/// `IBV_REREG_MR_ERR_INPUT`: what `ibv_rereg_mr` returns when the request is refused before
/// anything changed (the MR stays as it was).
const IBV_REREG_MR_ERR_INPUT: c_int = -1;

export!("ibv_rereg_mr" @ "IBVERBS_1.1" => rereg_mr);
extern "C" fn rereg_mr(
    _mr: *mut c_void,
    _flags: c_int,
    _pd: *mut IbvPd,
    _addr: *mut c_void,
    _length: usize,
    _access: c_int,
) -> c_int {
    set_errno(libc::EOPNOTSUPP);
    IBV_REREG_MR_ERR_INPUT
}

export!("ibv_reg_dmabuf_mr" @ "IBVERBS_1.12" => reg_dmabuf_mr);
extern "C" fn reg_dmabuf_mr(
    _pd: *mut IbvPd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut c_void {
    refuse_ptr()
}

export!("ibv_get_device_index" @ "IBVERBS_1.9" => get_device_index);
/// `-1`: the device has no kernel index (rdma-core answers so for a device sysfs numbers not).
extern "C" fn get_device_index(_device: *mut c_void) -> c_int {
    -1
}

// Sharing objects between processes through the kernel's command file: there is none.

export!("ibv_import_device" @ "IBVERBS_1.10" => import_device);
extern "C" fn import_device(_cmd_fd: c_int) -> *mut IbvContext {
    refuse_ptr()
}

export!("ibv_import_pd" @ "IBVERBS_1.10" => import_pd);
extern "C" fn import_pd(_context: *mut IbvContext, _pd_handle: u32) -> *mut IbvPd {
    refuse_ptr()
}

export!("ibv_unimport_pd" @ "IBVERBS_1.10" => unimport_pd);
/// Nothing is ever imported.
extern "C" fn unimport_pd(_pd: *mut IbvPd) {}

export!("ibv_import_mr" @ "IBVERBS_1.10" => import_mr);
extern "C" fn import_mr(_pd: *mut IbvPd, _mr_handle: u32) -> *mut c_void {
    refuse_ptr()
}

export!("ibv_unimport_mr" @ "IBVERBS_1.10" => unimport_mr);
/// Nothing is ever imported.
extern "C" fn unimport_mr(_mr: *mut c_void) {}

export!("ibv_import_dm" @ "IBVERBS_1.13" => import_dm);
extern "C" fn import_dm(_context: *mut IbvContext, _dm_handle: u32) -> *mut c_void {
    refuse_ptr()
}

export!("ibv_unimport_dm" @ "IBVERBS_1.13" => unimport_dm);
/// Nothing is ever imported.
extern "C" fn unimport_dm(_dm: *mut c_void) {}

// Enhanced connection establishment (ECE): negotiated through rdma_cm, which uhca lacks.

export!("ibv_query_ece" @ "IBVERBS_1.10" => query_ece);
extern "C" fn query_ece(_qp: *mut c_void, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

export!("ibv_set_ece" @ "IBVERBS_1.10" => set_ece);
extern "C" fn set_ece(_qp: *mut c_void, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

export!("ibv_query_qp_data_in_order" @ "IBVERBS_1.14" => query_qp_data_in_order);
/// `0`: no promise that data lands in order, rdma-core's answer when the provider gives none.
extern "C" fn query_qp_data_in_order(_qp: *mut c_void, _op: c_int, _flags: u32) -> c_int {
    0
}
