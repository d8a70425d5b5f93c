//! The contexts that commands carry: capabilities (`cmd_hca_cap`, `roce_cap`), queue
//! contexts (`cqc`, `eqc`, `qpc` with its address path `ads`, `srqc`, `xrc_srqc`), the
//! memory key context (`mkc`), vport contexts and the RoCE address layout, plus the
//! host-endianness register.
//!
//! ```
//! use uhca_fwif::ctx::{Qpc, qpc};
//! let mut c = Qpc::default();
//! c.set_log_msg_max(30).set_pd(0x12345);
//! c.primary_address_path_mut().set_vhca_port_num(1);
//! assert_eq!(c.pd(), 0x12345);
//! assert_eq!(qpc::pd.bit_offset, 40); // qpc dword 1, bits 23:0
//! ```

mod layouts;
pub use layouts::*;

/// The size of the `capability` area of QUERY_HCA_CAP/SET_HCA_CAP (`hca_cap_union`), bytes.
pub const HCA_CAP_UNION_BYTES: usize = 4096;

/// Views the start of a `hca_cap_union` byte area as the general capabilities.
pub fn as_cmd_hca_cap(capability: &[u8; HCA_CAP_UNION_BYTES]) -> &CmdHcaCap {
    use zerocopy::FromBytes;
    match CmdHcaCap::ref_from_prefix(capability) {
        Ok((cap, _)) => cap,
        Err(_) => unreachable!("a cmd_hca_cap fits in the capability union"),
    }
}
