//! Work queue entry segments.
//!
//! A send WQE is a control segment followed by segments that depend on the opcode and the
//! QP type (datagram for UD, XRC for XRC, remote address for RDMA and atomics, atomic, then data or
//! inline segments), in 16-byte units (`ds`), padded to 64-byte basic blocks. A receive WQE
//! is a list of data segments, ended by one with [`INVALID_LKEY`] when it is shorter than the
//! queue's stride.

use crate::consts::{
    INLINE_SEG, WQE_CTRL_DS_MASK, WQE_CTRL_OPCODE_MASK, WQE_CTRL_QPN_MASK, WQE_CTRL_QPN_SHIFT,
    WQE_CTRL_WQE_INDEX_MASK, WQE_CTRL_WQE_INDEX_SHIFT, WqeCtrlFlags, WqeOpcode,
};
use zerocopy::byteorder::big_endian::{U16, U32, U64};

/// The lkey that ends a receive WQE's scatter list (`MLX5_INVALID_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;

crate::dp_struct! {
    /// The control segment that starts every send WQE.
    pub struct WqeCtrlSeg = "mlx5_wqe_ctrl_seg" {
        /// Bits 31:24 opcode modifier, 23:8 WQE index (the producer counter), 7:0 opcode.
        pub opmod_idx_opcode: U32,
        /// Bits 31:8 QP number, 5:0 WQE size in 16-byte units.
        pub qpn_ds: U32,
        /// Signature (unused).
        pub signature: u8,
        /// Reserved (DCI stream channel on DC).
        pub rsvd: [u8; 2],
        /// Fence mode, completion request and solicited event ([`WqeCtrlFlags`]).
        pub fm_ce_se: u8,
        /// Immediate data (network order as the verbs API gives it), or invalidated rkey.
        pub imm: U32,
    }

    /// Remote address segment of RDMA READ, RDMA WRITE and atomics.
    pub struct WqeRaddrSeg = "mlx5_wqe_raddr_seg" {
        /// Remote virtual address.
        pub raddr: U64,
        /// Remote key.
        pub rkey: U32,
        /// Reserved.
        pub reserved: U32,
    }

    /// Atomic segment: swap (or add) and compare operands.
    pub struct WqeAtomicSeg = "mlx5_wqe_atomic_seg" {
        /// Swap value of compare-and-swap, or the addend of fetch-and-add.
        pub swap_add: U64,
        /// Compare value of compare-and-swap.
        pub compare: U64,
    }

    /// A scatter/gather entry.
    pub struct WqeDataSeg = "mlx5_wqe_data_seg" {
        /// Length in bytes (0 means 2 GiB on send; receive lists end with [`INVALID_LKEY`]).
        pub byte_count: U32,
        /// Local key.
        pub lkey: U32,
        /// Address (an IOVA for the device).
        pub addr: U64,
    }

    /// Header of an inline-data segment; the data follows, and the segment is padded to
    /// 16 bytes.
    pub struct WqeInlineSeg = "mlx5_wqe_inline_seg" {
        /// Byte count with [`INLINE_SEG`] set.
        pub byte_count: U32,
    }

    /// The address vector of a UD send (the datagram segment).
    pub struct Av = "mlx5_av" {
        /// Q_Key of the destination QP (the low half of the 8-byte key union).
        pub qkey: U32,
        /// Reserved half of the key union.
        pub reserved_key: U32,
        /// Bit 31: extended address vector ([`Av::EXTENDED_UD_AV`]), 23:0: destination QPN.
        pub dqp_dct: U32,
        /// Bits 7:4 static rate, 3:0 service level (InfiniBand) or 3:1 priority (RoCE).
        pub stat_rate_sl: u8,
        /// Bit 7: force loopback (`fl`), 6:0 source path bits (`mlid`).
        pub fl_mlid: u8,
        /// Destination LID (InfiniBand) or UDP source port (RoCEv2).
        pub rlid: U16,
        /// Reserved.
        pub reserved0: [u8; 4],
        /// Destination MAC (RoCE).
        pub rmac: [u8; 6],
        /// Traffic class.
        pub tclass: u8,
        /// Hop limit.
        pub hop_limit: u8,
        /// Bit 30: send a GRH (InfiniBand), 27:20: source GID index, 19:0: flow label.
        pub grh_gid_fl: U32,
        /// Destination GID.
        pub rgid: [u8; 16],
    }

    /// The datagram segment of a UD send WQE.
    pub struct WqeDatagramSeg = "mlx5_wqe_datagram_seg" {
        /// The address vector.
        pub av: Av,
    }

    /// The Ethernet segment of a raw-packet send (checksum offload, inline headers).
    pub struct WqeEthSeg = "mlx5_wqe_eth_seg" {
        /// Software parser: outer L4 offset.
        pub swp_outer_l4_offset: u8,
        /// Software parser: outer L3 offset.
        pub swp_outer_l3_offset: u8,
        /// Software parser: inner L4 offset.
        pub swp_inner_l4_offset: u8,
        /// Software parser: inner L3 offset.
        pub swp_inner_l3_offset: u8,
        /// Checksum offload flags.
        pub cs_flags: u8,
        /// Software parser flags.
        pub swp_flags: u8,
        /// TCP maximum segment size (LSO).
        pub mss: U16,
        /// Flow table metadata.
        pub flow_table_metadata: U32,
        /// Inline header size (`inline_hdr.sz`).
        pub inline_hdr_sz: U16,
        /// First two bytes of the inline header (`inline_hdr.start`).
        pub inline_hdr_start: [u8; 2],
    }

    /// The XRC segment of an XRC send WQE, right after the control segment: the XRC SRQ
    /// at the responder that the message is for (it becomes the packets' XRCETH).
    pub struct WqeXrcSeg = "mlx5_wqe_xrc_seg" {
        /// The remote XRC SRQ number (bits 23:0).
        pub xrc_srqn: U32,
        /// Reserved.
        pub rsvd: [u8; 12],
    }

    /// The "next" segment of a shared receive queue WQE.
    pub struct WqeSrqNextSeg = "mlx5_wqe_srq_next_seg" {
        /// Reserved.
        pub rsvd0: [u8; 2],
        /// Index of the next WQE in the SRQ's free list.
        pub next_wqe_index: U16,
        /// Signature.
        pub signature: u8,
        /// Reserved.
        pub rsvd1: [u8; 11],
    }
}

/// Names of [`Av`] fields in the reference table where the Rust name differs (the key union
/// is flattened to its Q_Key view).
pub const AV_FIELD_ALIASES: &[(&str, &str)] = &[
    ("qkey", "key.qkey.qkey"),
    ("reserved_key", "key.qkey.reserved"),
];

/// Names of [`WqeEthSeg`] fields in the reference table where the Rust name differs.
pub const ETH_SEG_FIELD_ALIASES: &[(&str, &str)] = &[
    ("inline_hdr_sz", "inline_hdr.sz"),
    ("inline_hdr_start", "inline_hdr.start"),
];

impl WqeCtrlSeg {
    /// Composes `opmod_idx_opcode`.
    #[inline]
    pub const fn opmod_idx_opcode_of(opmod: u8, wqe_index: u16, opcode: WqeOpcode) -> u32 {
        ((opmod as u32) << 24)
            | (((wqe_index as u32) << WQE_CTRL_WQE_INDEX_SHIFT) & WQE_CTRL_WQE_INDEX_MASK)
            | (opcode.raw() as u32 & WQE_CTRL_OPCODE_MASK)
    }

    /// Composes `qpn_ds`.
    #[inline]
    pub const fn qpn_ds_of(qpn: u32, ds: u8) -> u32 {
        ((qpn << WQE_CTRL_QPN_SHIFT) & WQE_CTRL_QPN_MASK) | (ds as u32 & WQE_CTRL_DS_MASK)
    }

    /// The opcode.
    #[inline]
    pub fn opcode(&self) -> WqeOpcode {
        WqeOpcode::from_raw((self.opmod_idx_opcode.get() & WQE_CTRL_OPCODE_MASK) as u8)
    }

    /// The opcode modifier.
    #[inline]
    pub fn opmod(&self) -> u8 {
        (self.opmod_idx_opcode.get() >> 24) as u8
    }

    /// The WQE index (low 16 bits of the producer counter).
    #[inline]
    pub fn wqe_index(&self) -> u16 {
        ((self.opmod_idx_opcode.get() & WQE_CTRL_WQE_INDEX_MASK) >> WQE_CTRL_WQE_INDEX_SHIFT) as u16
    }

    /// The QP number.
    #[inline]
    pub fn qpn(&self) -> u32 {
        (self.qpn_ds.get() & WQE_CTRL_QPN_MASK) >> WQE_CTRL_QPN_SHIFT
    }

    /// WQE size in 16-byte units.
    #[inline]
    pub fn ds(&self) -> u8 {
        (self.qpn_ds.get() & WQE_CTRL_DS_MASK) as u8
    }

    /// The fence, completion and solicited flags (unknown bits kept).
    #[inline]
    pub fn flags(&self) -> WqeCtrlFlags {
        WqeCtrlFlags::from_bits_retain(self.fm_ce_se)
    }
}

impl WqeInlineSeg {
    /// Composes the `byte_count` of an inline segment holding `len` bytes.
    #[inline]
    pub const fn byte_count_of(len: u32) -> u32 {
        INLINE_SEG | len
    }

    /// Whether the segment is an inline segment, and its data length.
    #[inline]
    pub fn inline_len(&self) -> Option<u32> {
        let v = self.byte_count.get();
        (v & INLINE_SEG != 0).then_some(v & !INLINE_SEG)
    }
}

impl Av {
    /// `dqp_dct` bit 31: the address vector is the extended (48-byte) one, with the GRH
    /// fields (`MLX5_EXTENDED_UD_AV`).
    pub const EXTENDED_UD_AV: u32 = 0x8000_0000;
    /// Bytes of the compact address vector, the form a datagram segment has when
    /// [`Av::EXTENDED_UD_AV`] is clear: `qkey` (or `dc_key`), `dqp_dct`, `stat_rate_sl`,
    /// `fl_mlid` and `rlid` only. The WQE's next segment follows it directly.
    pub const COMPACT_LEN: usize = 16;
    /// `fl_mlid` bit 7: force loopback (`fl`, as in the QP address path); bits 6:0 are the
    /// source path bits.
    pub const FL_FORCE_LOOPBACK: u8 = 0x80;
    /// `grh_gid_fl` bit 30: send a GRH (InfiniBand; reserved on RoCE, whose packets always
    /// carry an IP header).
    pub const GRH_GID_FL_GRH: u32 = 1 << 30;
    /// `grh_gid_fl` bits 27:20: the source GID index.
    pub const GRH_GID_FL_SGID_INDEX_SHIFT: u32 = 20;
    /// `grh_gid_fl` bits 19:0: the flow label.
    pub const GRH_GID_FL_FLOW_LABEL_MASK: u32 = 0x000f_ffff;

    /// The destination QPN.
    #[inline]
    pub fn dqpn(&self) -> u32 {
        self.dqp_dct.get() & 0x00ff_ffff
    }

    /// The service level as InfiniBand carries it (`stat_rate_sl` bits 3:0; on RoCE the
    /// priority is in bits 3:1).
    #[inline]
    pub fn sl(&self) -> u8 {
        self.stat_rate_sl & 0xf
    }

    /// The source GID index (`grh_gid_fl` bits 27:20).
    #[inline]
    pub fn sgid_index(&self) -> u8 {
        (self.grh_gid_fl.get() >> Self::GRH_GID_FL_SGID_INDEX_SHIFT) as u8
    }

    /// The flow label (`grh_gid_fl` bits 19:0).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.grh_gid_fl.get() & Self::GRH_GID_FL_FLOW_LABEL_MASK
    }
}

const _: () = assert!(core::mem::size_of::<WqeCtrlSeg>() == 16);
const _: () = assert!(core::mem::size_of::<WqeDataSeg>() == 16);
const _: () = assert!(core::mem::size_of::<WqeDatagramSeg>() == 48);
