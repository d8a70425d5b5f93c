//! The mock's firmware: arbitrary command inputs through its command interface, as a
//! driver (buggy or hostile) may write them. Each run brings a fresh mock HCA up with a
//! small driver written from the PRM (the mock's own test harness, `mock/tests/common`,
//! which uses the fwif layouts only: neither the HAL's command queue nor the driver), so
//! that object commands meet an initialised HCA; then the input is a sequence of commands,
//! each `[len_lo, len_hi, out_sel]` and `len` bytes of input mailbox (opcode, op_mod and
//! everything after, mailbox chains included), rung in slot 0.
//!
//! Properties: nothing panics; every command completes (ownership back to software) with
//! a delivery status, and a delivered command's output header carries a status.
#![no_main]

#[path = "../../mock/tests/common/mod.rs"]
mod common;

use common::{CHAIN_BLOCKS, Harness};
use libfuzzer_sys::fuzz_target;
use uhca_fwif::consts::DeliveryStatus;
use uhca_mock::MockConfig;

/// The longest input and output a command gets (the harness's mailbox chains).
const MAX_LEN: usize = 16 + (CHAIN_BLOCKS - 1) * 512;

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, mut rest)) = data.split_first() else {
        return;
    };
    let config = if cfg & 1 == 0 {
        MockConfig::ethernet()
    } else {
        MockConfig::infiniband()
    };
    let mut h = Harness::ready(config);
    while let [lo, hi, out_sel, tail @ ..] = rest {
        let len = (usize::from(*lo) | usize::from(*hi) << 8)
            .min(tail.len())
            .min(MAX_LEN);
        let (input, next) = tail.split_at(len);
        rest = next;
        // Output lengths around what the commands need: 8 (a bare header) to 16 + 4 KiB,
        // plus the long ones (QUERY_HCA_CAP's 4112 bytes and over).
        let outlen = match out_sel >> 6 {
            0 => 8 + usize::from(*out_sel & 0x3f),
            1 => 16 + usize::from(*out_sel & 0x3f) * 64,
            2 => 0x1000 + 16 + usize::from(*out_sel & 0x3f) * 8,
            _ => usize::from(*out_sel & 0x3f),
        }
        .min(MAX_LEN);
        let r = h.exec_raw(input, outlen);
        assert!(r.completed, "a command the device never completed");
        if r.delivery == DeliveryStatus::Ok && outlen >= 8 {
            let _ = (r.status(), r.syndrome());
        }
    }
});
