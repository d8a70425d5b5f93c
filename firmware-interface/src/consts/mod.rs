//! Constants of the firmware interface.
//!
//! Value groups are enums that keep unknown values ([`CmdOpcode::Unknown`] and so on), so a
//! value read from the device is never lost or misread; single constants are `pub const`s.
//! Everything here is checked against the PRM constants table, except the few values the
//! InfiniBand specification defines rather than the PRM ([`PortState`], [`IbMtu`]), which
//! are checked against the specification's tables in this crate's tests.

use crate::prm_enum;

mod enums;
pub use enums::*;

/// Declares single PRM constants and a table of them for the conformance test.
macro_rules! prm_consts {
    ($( $(#[$m:meta])* $name:ident : $ty:ty = $value:literal => $cname:literal; )*) => {
        $( $(#[$m])* #[doc = concat!("\n\nPRM `", $cname, "`.")] pub const $name: $ty = $value; )*
        /// Every single constant declared here: (PRM name, value).
        pub const PRM_CONSTS: &[(&str, u64)] = &[ $( ($cname, $name as u64), )* ];
    };
}

prm_consts! {
    /// The command interface revision this crate speaks (`cmdif_rev` in the init segment).
    CMD_IF_REV: u16 = 5 => "CMD_IF_REV";
    /// `status_own` bit 0 when software owns a command-queue entry.
    CMD_OWNER_SW: u8 = 0 => "CMD_OWNER_SW";
    /// `status_own` bit 0 when hardware owns a command-queue entry.
    CMD_OWNER_HW: u8 = 1 => "CMD_OWNER_HW";
    /// `cmd_layout.type` for PCIe command transport.
    PCI_CMD_XPORT: u8 = 7 => "MLX5_PCI_CMD_XPORT";
    /// Data bytes per command mailbox block.
    CMD_DATA_BLOCK_SIZE: usize = 0x200 => "MLX5_CMD_DATA_BLOCK_SIZE";
    /// Most command-queue entries a device offers.
    MAX_COMMANDS: usize = 32 => "MLX5_MAX_COMMANDS";
    /// Send WQE basic block size, bytes.
    SEND_WQE_BB: usize = 64 => "MLX5_SEND_WQE_BB";
    /// Send WQE data segment granule (`ds` unit), bytes.
    SEND_WQE_DS: usize = 16 => "MLX5_SEND_WQE_DS";
    /// log2 of [`SEND_WQE_BB`].
    SEND_WQE_SHIFT: u32 = 6 => "MLX5_SEND_WQE_SHIFT";
    /// Data segments per basic block.
    SEND_WQEBB_NUM_DS: usize = 4 => "MLX5_SEND_WQEBB_NUM_DS";
    /// Largest send WQE, bytes.
    SEND_WQE_MAX_SIZE: usize = 0x400 => "MLX5_SEND_WQE_MAX_SIZE";
    /// Most basic blocks in one send WQE.
    SEND_WQE_MAX_WQEBBS: usize = 16 => "MLX5_SEND_WQE_MAX_WQEBBS";
    /// Bit 31 of an inline segment's `byte_count`: the segment holds inline data.
    INLINE_SEG: u32 = 0x8000_0000 => "MLX5_INLINE_SEG";
    /// Mask of an inline segment's byte count.
    WQE_INLINE_SEG_BYTE_COUNT_MASK: u32 = 0x3ff => "MLX5_WQE_INLINE_SEG_BYTE_COUNT_MASK";
    /// `qpn_ds` mask of the DS count.
    WQE_CTRL_DS_MASK: u32 = 0x3f => "MLX5_WQE_CTRL_DS_MASK";
    /// `qpn_ds` mask of the QPN.
    WQE_CTRL_QPN_MASK: u32 = 0xffff_ff00 => "MLX5_WQE_CTRL_QPN_MASK";
    /// `qpn_ds` shift of the QPN.
    WQE_CTRL_QPN_SHIFT: u32 = 8 => "MLX5_WQE_CTRL_QPN_SHIFT";
    /// `opmod_idx_opcode` mask of the opcode.
    WQE_CTRL_OPCODE_MASK: u32 = 0xff => "MLX5_WQE_CTRL_OPCODE_MASK";
    /// `opmod_idx_opcode` mask of the WQE index.
    WQE_CTRL_WQE_INDEX_MASK: u32 = 0x00ff_ff00 => "MLX5_WQE_CTRL_WQE_INDEX_MASK";
    /// `opmod_idx_opcode` shift of the WQE index.
    WQE_CTRL_WQE_INDEX_SHIFT: u32 = 8 => "MLX5_WQE_CTRL_WQE_INDEX_SHIFT";
    /// `op_own` bit 0: the owner bit of a CQE.
    CQE_OWNER_MASK: u8 = 1 => "MLX5_CQE_OWNER_MASK";
    /// Vendor syndrome of an ODP page fault.
    CQE_VENDOR_SYNDROME_ODP_PFAULT: u8 = 0x93 => "MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT";
    /// CQE `l3_hdr`: RoCE packet carried a GRH (RoCEv1 or IB).
    CQE_ROCE_L3_HEADER_TYPE_GRH: u8 = 0 => "MLX5_CQE_ROCE_L3_HEADER_TYPE_GRH";
    /// CQE `l3_hdr`: RoCEv2 over IPv6.
    CQE_ROCE_L3_HEADER_TYPE_IPV6: u8 = 1 => "MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV6";
    /// CQE `l3_hdr`: RoCEv2 over IPv4.
    CQE_ROCE_L3_HEADER_TYPE_IPV4: u8 = 2 => "MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV4";
    /// Dword index of the receive counter in a QP doorbell record.
    RCV_DBR: usize = 0 => "MLX5_RCV_DBR";
    /// Dword index of the send counter in a QP doorbell record.
    SND_DBR: usize = 1 => "MLX5_SND_DBR";
    /// Dword index of the consumer index in a CQ doorbell record.
    CQ_SET_CI: usize = 0 => "MLX5_CQ_SET_CI";
    /// Dword index of the arm word in a CQ doorbell record.
    CQ_ARM_DB: usize = 1 => "MLX5_CQ_ARM_DB";
    /// CQ arm command: next completion (bits 31:24 of the arm word).
    CQ_DB_REQ_NOT: u32 = 0 => "MLX5_CQ_DB_REQ_NOT";
    /// CQ arm command: next solicited completion.
    CQ_DB_REQ_NOT_SOL: u32 = 0x0100_0000 => "MLX5_CQ_DB_REQ_NOT_SOL";
    /// Byte offset of the first BlueFlame register (send doorbell) in a UAR page.
    BF_OFFSET: usize = 0x800 => "MLX5_BF_OFFSET";
    /// Byte offset of the CQ doorbell in a UAR page.
    CQ_DOORBELL: usize = 0x20 => "MLX5_CQ_DOORBELL";
    /// Byte offset of the EQ arm doorbell in a UAR page (the update-only doorbell is 8
    /// bytes after it).
    EQ_DOORBELL_OFFSET: usize = 0x40 => "MLX5_EQ_DOORBEL_OFFSET";
    /// Bytes per BlueFlame buffer (each register has two that alternate).
    DB_BLUEFLAME_BUFFER_SIZE: usize = 0x100 => "MLX5_DB_BLUEFLAME_BUFFER_SIZE";
    /// The device's page size, bytes: UARs, firmware pages and `log_page_size` units.
    ADAPTER_PAGE_SIZE: usize = 0x1000 => "MLX5_ADAPTER_PAGE_SIZE";
    /// log2 of [`ADAPTER_PAGE_SIZE`].
    ADAPTER_PAGE_SHIFT: u32 = 12 => "MLX5_ADAPTER_PAGE_SHIFT";
    /// BlueFlame registers per UAR page.
    BFREGS_PER_UAR: usize = 4 => "MLX5_BFREGS_PER_UAR";
}

/// Byte offset of the EQ doorbell that updates the consumer index without arming (rdma-core's
/// VFIO provider writes `MLX5_EQ_DOORBEL_OFFSET + 8`).
pub const EQ_DOORBELL_UPDATE_CI_OFFSET: usize = EQ_DOORBELL_OFFSET + 8;

/// Every enum group declared here: (reference-table group, (name, value) rows).
pub const PRM_ENUMS: &[(&str, &[(&str, u64)])] = &[
    (CmdOpcode::PRM_GROUP, CmdOpcode::PRM_VALUES),
    (CmdStatus::PRM_GROUP, CmdStatus::PRM_VALUES),
    (DeliveryStatus::PRM_GROUP, DeliveryStatus::PRM_VALUES),
    (WqeOpcode::PRM_GROUP, WqeOpcode::PRM_VALUES),
    (CqeOpcode::PRM_GROUP, CqeOpcode::PRM_VALUES),
    (CqeSyndrome::PRM_GROUP, CqeSyndrome::PRM_VALUES),
    (EventType::PRM_GROUP, EventType::PRM_VALUES),
    (PortChangeSubtype::PRM_GROUP, PortChangeSubtype::PRM_VALUES),
    (QpState::PRM_GROUP, QpState::PRM_VALUES),
    (RmpcState::PRM_GROUP, RmpcState::PRM_VALUES),
    (QpServiceType::PRM_GROUP, QpServiceType::PRM_VALUES),
    (MkcAccessMode::PRM_GROUP, MkcAccessMode::PRM_VALUES),
    (QueryPagesOpMod::PRM_GROUP, QueryPagesOpMod::PRM_VALUES),
    (ManagePagesOpMod::PRM_GROUP, ManagePagesOpMod::PRM_VALUES),
    (HcaCapType::PRM_GROUP, HcaCapType::PRM_VALUES),
    (HcaCapMode::PRM_GROUP, HcaCapMode::PRM_VALUES),
    (PortTypeCap::PRM_GROUP, PortTypeCap::PRM_VALUES),
];

bitflags::bitflags! {
    /// The `fm_ce_se` byte of a WQE control segment: fence mode, completion and solicited
    /// event requests.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct WqeCtrlFlags: u8 {
        /// Ask for a CQE for this WQE (`MLX5_WQE_CTRL_CQ_UPDATE`).
        const CQ_UPDATE = 0x08;
        /// Ask for a CQE and an EQE (`MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE`).
        const CQ_UPDATE_AND_EQE = 0x0c;
        /// Solicited event at the responder (`MLX5_WQE_CTRL_SOLICITED`).
        const SOLICITED = 0x02;
        /// Initiator small fence (`MLX5_FENCE_MODE_INITIATOR_SMALL`).
        const FENCE_INITIATOR_SMALL = 0x20;
        /// Fence: wait for prior RDMA READ and atomic WQEs (`MLX5_FENCE_MODE_FENCE`).
        const FENCE = 0x40;
        /// Strong ordering (`MLX5_FENCE_MODE_STRONG_ORDERING`).
        const FENCE_STRONG_ORDERING = 0x60;
        /// Small-and-fence (`MLX5_FENCE_MODE_SMALL_AND_FENCE`).
        const FENCE_SMALL_AND_FENCE = 0x80;
    }
}

impl WqeCtrlFlags {
    /// PRM names and values of the flags, for the conformance test.
    pub const PRM_VALUES: &'static [(&'static str, u64)] = &[
        ("MLX5_WQE_CTRL_CQ_UPDATE", 0x08),
        ("MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE", 0x0c),
        ("MLX5_WQE_CTRL_SOLICITED", 0x02),
        ("MLX5_FENCE_MODE_INITIATOR_SMALL", 0x20),
        ("MLX5_FENCE_MODE_FENCE", 0x40),
        ("MLX5_FENCE_MODE_STRONG_ORDERING", 0x60),
        ("MLX5_FENCE_MODE_SMALL_AND_FENCE", 0x80),
    ];
}

bitflags::bitflags! {
    /// Memory and QP access rights, as the verbs API names them (`IBV_ACCESS_*`). The PRM
    /// carries them as separate bits: `mkc.lw`, `mkc.rr`, `mkc.rw`, `mkc.a` for a memory
    /// key and `qpc.rre`, `qpc.rwe`, `qpc.rae` for a QP's responder.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// The HCA may write local memory (needed for receives and RDMA READ targets).
        const LOCAL_WRITE = 1 << 0;
        /// Remote peers may RDMA WRITE.
        const REMOTE_WRITE = 1 << 1;
        /// Remote peers may RDMA READ.
        const REMOTE_READ = 1 << 2;
        /// Remote peers may perform atomics.
        const REMOTE_ATOMIC = 1 << 3;
    }
}

prm_enum! {
    /// Logical port state, InfiniBand Architecture Specification vol. 1, PortInfo
    /// `PortState` (also `hca_vport_context.vport_state`).
    pub enum PortState : u8 = "ibta" {
        /// No state change requested.
        Nop = 0 => "NOP",
        /// The link is down.
        Down = 1 => "DOWN",
        /// Link up, not yet configured by the subnet manager.
        Init = 2 => "INIT",
        /// Configured, data traffic not yet enabled.
        Armed = 3 => "ARMED",
        /// Ready for traffic.
        Active = 4 => "ACTIVE",
        /// Active, deferring.
        ActiveDefer = 5 => "ACTIVE_DEFER",
    }
}

prm_enum! {
    /// Path and port MTU encodings, InfiniBand Architecture Specification vol. 1 (PortInfo
    /// `NeighborMTU`, `qpc.mtu`).
    pub enum IbMtu : u8 = "ibta" {
        /// 256 bytes.
        Mtu256 = 1 => "IB_MTU_256",
        /// 512 bytes.
        Mtu512 = 2 => "IB_MTU_512",
        /// 1024 bytes.
        Mtu1024 = 3 => "IB_MTU_1024",
        /// 2048 bytes.
        Mtu2048 = 4 => "IB_MTU_2048",
        /// 4096 bytes.
        Mtu4096 = 5 => "IB_MTU_4096",
    }
}

impl IbMtu {
    /// The MTU in bytes, if the encoding is known.
    pub const fn bytes(self) -> Option<u32> {
        match self {
            IbMtu::Unknown(_) => None,
            other => Some(128 << other.raw()),
        }
    }

    /// The encoding for an MTU in bytes, if it is one of the five IB MTUs.
    pub const fn from_bytes(bytes: u32) -> Option<Self> {
        match bytes {
            256 => Some(IbMtu::Mtu256),
            512 => Some(IbMtu::Mtu512),
            1024 => Some(IbMtu::Mtu1024),
            2048 => Some(IbMtu::Mtu2048),
            4096 => Some(IbMtu::Mtu4096),
            _ => None,
        }
    }
}
