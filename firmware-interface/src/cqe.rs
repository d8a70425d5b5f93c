//! Completion queue entries: the 64-byte CQE and the error CQE that overlays it.
//!
//! The last byte, `op_own`, holds the opcode (bits 7:4), the solicited-event and format bits
//! and the owner bit (bit 0). Software owns a CQE when its owner bit equals the parity of the
//! number of times the consumer index has wrapped the queue; a fresh queue is initialised
//! with opcode [`CqeOpcode::Invalid`] and owner 1 in every entry.

use crate::consts::{CQE_OWNER_MASK, CqeOpcode, CqeSyndrome};
use zerocopy::byteorder::big_endian::{U16, U32};

crate::dp_struct! {
    /// A 64-byte completion queue entry.
    pub struct Cqe64 = "mlx5_cqe64" {
        /// Bit 0: TLS outer L3 tunnelled.
        pub tls_outer_l3_tunneled: u8,
        /// Reserved.
        pub rsvd0: u8,
        /// WQE id (striding RQ).
        pub wqe_id: U16,
        /// LRO / SHAMPO fields.
        pub lro: [u8; 8],
        /// RSS hash.
        pub rss_hash_result: U32,
        /// RSS hash type.
        pub rss_hash_type: u8,
        /// ML path.
        pub ml_path: u8,
        /// Reserved.
        pub rsvd20: [u8; 2],
        /// Checksum.
        pub check_sum: U16,
        /// Source LID (InfiniBand receive).
        pub slid: U16,
        /// Bits 29:28 `g` (GRH present when not 0), 27:24 service level, 23:0 remote QPN
        /// (UD receive).
        pub flags_rqpn: U32,
        /// Header split, IP extension.
        pub hds_ip_ext: u8,
        /// Bits 6:4 L4 header type, 3:2 L3 header type (RoCE: GRH, IPv6, IPv4).
        pub l4_l3_hdr_type: u8,
        /// VLAN.
        pub vlan_info: U16,
        /// SRQ number (or user index).
        pub srqn: U32,
        /// Immediate data, invalidated rkey or P_Key.
        pub immediate: U32,
        /// Reserved.
        pub rsvd40: [u8; 4],
        /// Bytes transferred (receive) or length (RDMA READ/atomic response).
        pub byte_cnt: U32,
        /// Timestamp, high half.
        pub timestamp_h: U32,
        /// Timestamp, low half.
        pub timestamp_l: U32,
        /// Bits 31:24 dropped-packet count, 23:0 QPN.
        pub sop_drop_qpn: U32,
        /// Counter of the WQE this completes.
        pub wqe_counter: U16,
        /// Signature / validity iteration count.
        pub signature: u8,
        /// Opcode (7:4), flags, owner (0).
        pub op_own: u8,
    }

    /// An error CQE (opcode [`CqeOpcode::ReqErr`] or [`CqeOpcode::RespErr`]).
    pub struct ErrCqe = "mlx5_err_cqe" {
        /// Reserved.
        pub rsvd0: [u8; 32],
        /// SRQ number.
        pub srqn: U32,
        /// Reserved.
        pub rsvd1: [u8; 18],
        /// Vendor-specific syndrome.
        pub vendor_err_synd: u8,
        /// The syndrome ([`CqeSyndrome`]).
        pub syndrome: u8,
        /// Bits 31:24 opcode of the failed WQE, 23:0 QPN.
        pub s_wqe_opcode_qpn: U32,
        /// Counter of the failed WQE.
        pub wqe_counter: U16,
        /// Signature.
        pub signature: u8,
        /// Opcode (7:4) and owner (0).
        pub op_own: u8,
    }
}

/// `flags_rqpn` with `g` (bits 29:28) = 1: the received packet carried a GRH, placed in the
/// receive buffer. A reader must take any non-zero `g` as "a GRH" (2 puts it in the second
/// half of a 128-byte CQE).
pub const CQE_FLAGS_GRH: u32 = 1 << 28;

impl Cqe64 {
    /// The opcode (`op_own >> 4`).
    #[inline]
    pub const fn opcode(&self) -> CqeOpcode {
        CqeOpcode::from_raw(self.op_own >> 4)
    }

    /// The owner bit.
    #[inline]
    pub const fn owner(&self) -> u8 {
        self.op_own & CQE_OWNER_MASK
    }

    /// The QPN (`sop_drop_qpn[23:0]`).
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.sop_drop_qpn.get() & 0x00ff_ffff
    }

    /// The remote QPN of a UD receive (`flags_rqpn[23:0]`).
    #[inline]
    pub fn remote_qpn(&self) -> u32 {
        self.flags_rqpn.get() & 0x00ff_ffff
    }

    /// The RoCE L3 header type (`l4_l3_hdr_type[3:2]`).
    #[inline]
    pub const fn roce_l3_hdr_type(&self) -> u8 {
        (self.l4_l3_hdr_type >> 2) & 0x3
    }

    /// The timestamp.
    #[inline]
    pub fn timestamp(&self) -> u64 {
        ((self.timestamp_h.get() as u64) << 32) | self.timestamp_l.get() as u64
    }
}

impl ErrCqe {
    /// The syndrome.
    #[inline]
    pub const fn syndrome(&self) -> CqeSyndrome {
        CqeSyndrome::from_raw(self.syndrome)
    }

    /// The QPN.
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.s_wqe_opcode_qpn.get() & 0x00ff_ffff
    }

    /// The opcode of the failed WQE.
    #[inline]
    pub fn wqe_opcode(&self) -> u8 {
        (self.s_wqe_opcode_qpn.get() >> 24) as u8
    }
}

/// Composes `op_own` from an opcode and an owner bit (as the device writes it).
#[inline]
pub const fn op_own_of(opcode: CqeOpcode, owner: u8) -> u8 {
    (opcode.raw() << 4) | (owner & CQE_OWNER_MASK)
}

const _: () = assert!(core::mem::size_of::<Cqe64>() == 64);
const _: () = assert!(core::mem::size_of::<ErrCqe>() == 64);
