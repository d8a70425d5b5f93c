//! The `struct verbs_context` around every `ibv_context` this library hands out, and the
//! extended ops it offers through it.
//!
//! `verbs.h`'s inline extended verbs (`ibv_query_device_ex`, `ibv_create_cq_ex`,
//! `ibv_create_qp_ex`, …) reach their op by stepping back from the `ibv_context` to the
//! `verbs_context` that ends with it, once `abi_compat` says the context is extended; `sz`
//! says how far back the ops reach, and a NULL op means "not supported" (`EOPNOTSUPP`, or
//! the inline's own fallback). So every slot stays NULL except the ops implemented here:
//! `query_device_ex`.

use core::ffi::c_int;
use core::mem::{offset_of, size_of};
use core::ptr;

use super::{Ctx, query_device};
use crate::abi::*;

/// The `verbs_context` of a new context: `ibv` last, every op NULL but `query_device_ex`,
/// `sz` its own size, and `ibv.abi_compat` the extended marker.
pub(super) fn verbs_context(mut ibv: IbvContext) -> VerbsContext {
    let null = ptr::null_mut();
    ibv.abi_compat = VERBS_ABI_IS_EXTENDED;
    VerbsContext {
        query_port: null,
        advise_mr: null,
        alloc_null_mr: null,
        read_counters: null,
        attach_counters_point_flow: null,
        create_counters: null,
        destroy_counters: null,
        reg_dm_mr: null,
        alloc_dm: null,
        free_dm: null,
        modify_flow_action_esp: null,
        destroy_flow_action: null,
        create_flow_action_esp: null,
        modify_qp_rate_limit: null,
        alloc_parent_domain: null,
        dealloc_td: null,
        alloc_td: null,
        modify_cq: null,
        post_srq_ops: null,
        destroy_rwq_ind_table: null,
        create_rwq_ind_table: null,
        destroy_wq: null,
        modify_wq: null,
        create_wq: null,
        query_rt_values: null,
        create_cq_ex: Some(super::cq_ex::create_cq_ex),
        priv_: null,
        query_device_ex: Some(query_device_ex),
        ibv_destroy_flow: null,
        ABI_placeholder2: null,
        ibv_create_flow: null,
        ABI_placeholder1: null,
        open_qp: null,
        create_qp_ex: Some(super::qp_ex::create_qp_ex),
        get_srq_num: null,
        create_srq_ex: null,
        open_xrcd: null,
        close_xrcd: null,
        _ABI_placeholder3: 0,
        sz: size_of::<VerbsContext>(),
        context: ibv,
    }
}

/// Where the `ibv_context` of a [`Ctx`] sits inside it (`container_of` backwards).
const CONTEXT_IN_CTX: usize = offset_of!(Ctx, vctx) + offset_of!(VerbsContext, context);

/// The [`Ctx`] whose `ibv_context` `ctx` is.
///
/// # Safety
///
/// `ctx` is a context from `ibv_open_device` not yet closed (so it lies `CONTEXT_IN_CTX`
/// bytes into a live `Ctx`).
pub(super) unsafe fn ctx_of(ctx: *mut IbvContext) -> *mut Ctx {
    // SAFETY: by the contract, stepping back stays inside the same allocation (the Ctx).
    unsafe { ctx.byte_sub(CONTEXT_IN_CTX) as *mut Ctx }
}

/// The `ibv_context` of a [`Ctx`], as handed to the program.
pub(super) fn context_of(ctx: *mut Ctx) -> *mut IbvContext {
    ctx.wrapping_byte_add(CONTEXT_IN_CTX) as *mut IbvContext
}

/// The `query_device_ex` op, as rdma-core's providers answer it: a non-zero input
/// `comp_mask` or an `attr_size` short of `orig_attr` is `EINVAL`; the first `attr_size`
/// bytes are zeroed, `orig_attr` is what `ibv_query_device` gives, and each extended field
/// that lies wholly within `attr_size` is filled (the device offers none of the optional
/// capabilities, so only `device_cap_flags_ex` and `phys_port_cnt_ex` are non-zero). A
/// program built against a shorter structure is never written past its end.
unsafe extern "C" fn query_device_ex(
    ctx: *mut IbvContext,
    input: *const IbvQueryDeviceExInput,
    attr: *mut IbvDeviceAttrEx,
    attr_size: usize,
) -> c_int {
    // SAFETY: input is NULL or the caller's readable input structure.
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return libc::EINVAL;
    }
    if ctx.is_null() || attr.is_null() || attr_size < size_of::<IbvDeviceAttr>() {
        return libc::EINVAL;
    }
    // SAFETY: attr holds attr_size writable bytes (the caller's contract).
    unsafe { ptr::write_bytes(attr as *mut u8, 0, attr_size) };
    // SAFETY: ctx is the caller's open context; orig_attr, the first field, lies within
    // attr_size (checked above).
    let rc = unsafe { query_device(ctx, ptr::addr_of_mut!((*attr).orig_attr)) };
    if rc != 0 {
        return rc;
    }
    let fits = |off: usize, len: usize| off + len <= attr_size;
    // SAFETY: orig_attr was just filled in the caller's structure.
    let (flags, ports) = unsafe {
        (
            (*attr).orig_attr.device_cap_flags,
            (*attr).orig_attr.phys_port_cnt,
        )
    };
    if fits(
        offset_of!(IbvDeviceAttrEx, device_cap_flags_ex),
        size_of::<u64>(),
    ) {
        // SAFETY: the field lies within the caller's attr_size bytes. The full 64 bits of
        // the capability flags: the low 32 are orig_attr's, none of the extended ones.
        unsafe { ptr::addr_of_mut!((*attr).device_cap_flags_ex).write(u64::from(flags)) };
    }
    if fits(
        offset_of!(IbvDeviceAttrEx, phys_port_cnt_ex),
        size_of::<u32>(),
    ) {
        // SAFETY: as above.
        unsafe { ptr::addr_of_mut!((*attr).phys_port_cnt_ex).write(u32::from(ports)) };
    }
    0
}
