//! The names libibverbs gives its enumerations (`ibv_node_type_str`, `ibv_port_state_str`,
//! `ibv_event_type_str`; `ibv_wc_status_str` is beside the completions in `ffi.rs`): static
//! strings, "unknown" for a value outside the enumeration. UCX imports the node-type and
//! event-type names and prints them in its logs.

use core::ffi::{CStr, c_char, c_int};

/// The entry `i` of `names`, or "unknown".
fn name_of(names: &[&'static CStr], i: c_int) -> *const c_char {
    usize::try_from(i)
        .ok()
        .and_then(|i| names.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

export!("ibv_node_type_str" @ "IBVERBS_1.1" => node_type_str);
/// `enum ibv_node_type`: `IBV_NODE_CA` is 1 … `IBV_NODE_UNSPECIFIED` 7 (`IBV_NODE_UNKNOWN`,
/// -1, is "unknown").
extern "C" fn node_type_str(t: c_int) -> *const c_char {
    const S: [&CStr; 8] = [
        c"unknown",
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
        c"unspecified",
    ];
    name_of(&S, t)
}

export!("ibv_port_state_str" @ "IBVERBS_1.1" => port_state_str);
/// `enum ibv_port_state`: `IBV_PORT_NOP` 0 … `IBV_PORT_ACTIVE_DEFER` 5.
extern "C" fn port_state_str(s: c_int) -> *const c_char {
    const S: [&CStr; 6] = [
        c"no state change (NOP)",
        c"down",
        c"init",
        c"armed",
        c"active",
        c"active defer",
    ];
    name_of(&S, s)
}

export!("ibv_event_type_str" @ "IBVERBS_1.1" => event_type_str);
/// `enum ibv_event_type`: `IBV_EVENT_CQ_ERR` 0 … `IBV_EVENT_WQ_FATAL` 19.
extern "C" fn event_type_str(e: c_int) -> *const c_char {
    const S: [&CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    name_of(&S, e)
}
