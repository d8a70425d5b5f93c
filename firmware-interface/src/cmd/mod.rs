//! Every command's input and output layout, and the [`Command`] trait that ties an input to
//! its opcode and its output type, so one generic `exec` can send any command and hand back
//! the right output.
//!
//! Each input starts with the generic header [`MboxIn`] (opcode, uid, op_mod) and each
//! output with [`MboxOut`] (status, syndrome). Inputs that end in a flexible array of
//! physical addresses (`pas`) declare its descriptor; the caller appends the array.
//!
//! ```
//! use uhca_fwif::cmd::{Command, QueryHcaCapIn, QueryHcaCapOut};
//! use uhca_fwif::consts::CmdOpcode;
//! fn output_len<C: Command>() -> usize { <C::Out as uhca_fwif::PrmLayout>::SIZE }
//! let q = QueryHcaCapIn::new_cmd();
//! assert_eq!(q.opcode(), CmdOpcode::QueryHcaCap.raw());
//! assert_eq!(output_len::<QueryHcaCapIn>(), 0x1010);
//! ```

use crate::consts::CmdOpcode;
use crate::field::PrmLayout;

mod layouts;
pub use layouts::*;

/// A command input: knows its opcode and its output layout.
pub trait Command: PrmLayout {
    /// The command's opcode.
    const OPCODE: CmdOpcode;
    /// The command's output layout.
    type Out: PrmLayout;

    /// A zeroed input with the opcode set.
    fn new_cmd() -> Self {
        let mut s = <Self as zerocopy::FromZeros>::new_zeroed();
        s.set(mbox_in::opcode, Self::OPCODE.raw() as u64);
        s
    }
}

macro_rules! commands {
    ($( $in:ident => $out:ident : $op:ident; )*) => {
        $(
            impl Command for $in {
                const OPCODE: CmdOpcode = CmdOpcode::$op;
                type Out = $out;
            }
        )*
        /// Every (opcode, input layout, output layout) this crate declares.
        pub const COMMANDS: &[(CmdOpcode, &crate::field::LayoutInfo, &crate::field::LayoutInfo)] = &[
            $( (CmdOpcode::$op, &<$in as PrmLayout>::LAYOUT, &<$out as PrmLayout>::LAYOUT), )*
        ];
    };
}

commands! {
    EnableHcaIn => EnableHcaOut : EnableHca;
    DisableHcaIn => DisableHcaOut : DisableHca;
    QueryAdapterIn => QueryAdapterOut : QueryAdapter;
    QueryIssiIn => QueryIssiOut : QueryIssi;
    SetIssiIn => SetIssiOut : SetIssi;
    QueryPagesIn => QueryPagesOut : QueryPages;
    ManagePagesIn => ManagePagesOut : ManagePages;
    QueryHcaCapIn => QueryHcaCapOut : QueryHcaCap;
    SetHcaCapIn => SetHcaCapOut : SetHcaCap;
    InitHcaIn => InitHcaOut : InitHca;
    TeardownHcaIn => TeardownHcaOut : TeardownHca;
    AccessRegisterIn => AccessRegisterOut : AccessReg;
    QuerySpecialContextsIn => QuerySpecialContextsOut : QuerySpecialContexts;
    AllocUarIn => AllocUarOut : AllocUar;
    DeallocUarIn => DeallocUarOut : DeallocUar;
    CreateEqIn => CreateEqOut : CreateEq;
    DestroyEqIn => DestroyEqOut : DestroyEq;
    QueryEqIn => QueryEqOut : QueryEq;
    AllocPdIn => AllocPdOut : AllocPd;
    DeallocPdIn => DeallocPdOut : DeallocPd;
    AllocTransportDomainIn => AllocTransportDomainOut : AllocTransportDomain;
    DeallocTransportDomainIn => DeallocTransportDomainOut : DeallocTransportDomain;
    AllocXrcdIn => AllocXrcdOut : AllocXrcd;
    DeallocXrcdIn => DeallocXrcdOut : DeallocXrcd;
    CreateMkeyIn => CreateMkeyOut : CreateMkey;
    DestroyMkeyIn => DestroyMkeyOut : DestroyMkey;
    QueryMkeyIn => QueryMkeyOut : QueryMkey;
    CreateCqIn => CreateCqOut : CreateCq;
    DestroyCqIn => DestroyCqOut : DestroyCq;
    QueryCqIn => QueryCqOut : QueryCq;
    ModifyCqIn => ModifyCqOut : ModifyCq;
    CreateQpIn => CreateQpOut : CreateQp;
    DestroyQpIn => DestroyQpOut : DestroyQp;
    QueryQpIn => QueryQpOut : QueryQp;
    Rst2initQpIn => Rst2initQpOut : Rst2initQp;
    Init2initQpIn => Init2initQpOut : Init2initQp;
    Init2rtrQpIn => Init2rtrQpOut : Init2rtrQp;
    Rtr2rtsQpIn => Rtr2rtsQpOut : Rtr2rtsQp;
    Rts2rtsQpIn => Rts2rtsQpOut : Rts2rtsQp;
    Sqerr2rtsQpIn => Sqerr2rtsQpOut : Sqerr2rtsQp;
    Qp2errIn => Qp2errOut : Qp2err;
    Qp2rstIn => Qp2rstOut : Qp2rst;
    CreateSrqIn => CreateSrqOut : CreateSrq;
    DestroySrqIn => DestroySrqOut : DestroySrq;
    QuerySrqIn => QuerySrqOut : QuerySrq;
    ArmRqIn => ArmRqOut : ArmRq;
    CreateRmpIn => CreateRmpOut : CreateRmp;
    ModifyRmpIn => ModifyRmpOut : ModifyRmp;
    QueryRmpIn => QueryRmpOut : QueryRmp;
    DestroyRmpIn => DestroyRmpOut : DestroyRmp;
    CreateXrcSrqIn => CreateXrcSrqOut : CreateXrcSrq;
    DestroyXrcSrqIn => DestroyXrcSrqOut : DestroyXrcSrq;
    QueryXrcSrqIn => QueryXrcSrqOut : QueryXrcSrq;
    ArmXrcSrqIn => ArmXrcSrqOut : ArmXrcSrq;
    QueryNicVportContextIn => QueryNicVportContextOut : QueryNicVportContext;
    ModifyNicVportContextIn => ModifyNicVportContextOut : ModifyNicVportContext;
    QueryHcaVportContextIn => QueryHcaVportContextOut : QueryHcaVportContext;
    QueryHcaVportGidIn => QueryHcaVportGidOut : QueryHcaVportGid;
    QueryHcaVportPkeyIn => QueryHcaVportPkeyOut : QueryHcaVportPkey;
    QueryVportStateIn => QueryVportStateOut : QueryVportState;
    SetRoceAddressIn => SetRoceAddressOut : SetRoceAddress;
    QueryRoceAddressIn => QueryRoceAddressOut : QueryRoceAddress;
    MadIfcIn => MadIfcOut : MadIfc;
    AllocQCounterIn => AllocQCounterOut : AllocQCounter;
    DeallocQCounterIn => DeallocQCounterOut : DeallocQCounter;
    QueryQCounterIn => QueryQCounterOut : QueryQCounter;
}

/// The register id of the host-endianness register (`MLX5_REG_HOST_ENDIANNESS`), for
/// ACCESS_REGISTER's `register_id`. Its data is [`crate::ctx::RegisterHostEndianness`].
pub const REG_HOST_ENDIANNESS: u16 = 0x7004;

/// The register id of NODE_DESC, the node description (`MLX5_REG_NODE_DESC`): 64 bytes of
/// text padded with zeros, what a subnet management agent reports as NodeDescription (the
/// PRM's `set_node_in.node_description` has the same 64 bytes).
pub const REG_NODE_DESC: u16 = 0x6001;
/// Size in bytes of the NODE_DESC register's data.
pub const NODE_DESC_BYTES: usize = 64;
/// The register id of MCQS, the management component query status register
/// (`MLX5_REG_MCQS`). Its data is [`crate::ctx::McqsReg`].
pub const REG_MCQS: u16 = 0x9060;
/// The register id of MCQI, the management component query information register
/// (`MLX5_REG_MCQI`). Its data is [`crate::ctx::McqiReg`] followed by the information.
pub const REG_MCQI: u16 = 0x9061;
/// The register id of MCAM, the management capabilities register (`MLX5_REG_MCAM`). Its
/// data is [`crate::ctx::McamReg`].
pub const REG_MCAM: u16 = 0x907f;
/// MCQS `identifier` of the firmware boot image (Linux `MCQS_IDENTIFIER_BOOT_IMG`).
pub const MCQS_IDENTIFIER_BOOT_IMG: u16 = 0x1;
/// MCQS `component_update_state`: no update in progress (Linux `MCQS_UPDATE_STATE_IDLE`).
pub const MCQS_UPDATE_STATE_IDLE: u8 = 0;
/// MCQI `info_type`: the component's version, [`crate::ctx::McqiVersion`] (Linux
/// `MCQI_INFO_TYPE_VERSION`).
pub const MCQI_INFO_TYPE_VERSION: u8 = 0x1;

/// ACCESS_REGISTER op_mod: write the register.
pub const ACCESS_REGISTER_OP_MOD_WRITE: u16 = 0;
/// ACCESS_REGISTER op_mod: read the register.
pub const ACCESS_REGISTER_OP_MOD_READ: u16 = 1;

/// ARM_XRC_SRQ op_mod: arm an XRC SRQ's limit (`MLX5_ARM_XRC_SRQ_IN_OP_MOD_XRC_SRQ`, the
/// only value the PRM lists).
pub const ARM_XRC_SRQ_OP_MOD_XRC_SRQ: u16 = 1;

/// Size in bytes of one `pas` entry (a 64-bit page address) after a command's fixed part.
pub const PAS_ENTRY_BYTES: usize = 8;

impl QueryHcaCapOut {
    /// The general capabilities at the start of the `capability` union (valid when the
    /// query's op_mod asked for [`crate::consts::HcaCapType::General`]).
    pub fn cmd_hca_cap(&self) -> &crate::ctx::CmdHcaCap {
        crate::ctx::as_cmd_hca_cap(self.capability())
    }

    /// The RoCE capabilities (valid when op_mod asked for [`crate::consts::HcaCapType::Roce`]).
    pub fn roce_cap(&self) -> &crate::ctx::RoceCap {
        use zerocopy::FromBytes;
        match crate::ctx::RoceCap::ref_from_prefix(self.capability()) {
            Ok((cap, _)) => cap,
            Err(_) => unreachable!("roce_cap fits in the capability union"),
        }
    }

    /// The atomic capabilities (valid when op_mod asked for
    /// [`crate::consts::HcaCapType::Atomic`]).
    pub fn atomic_caps(&self) -> &crate::ctx::AtomicCaps {
        use zerocopy::FromBytes;
        match crate::ctx::AtomicCaps::ref_from_prefix(self.capability()) {
            Ok((cap, _)) => cap,
            Err(_) => unreachable!("atomic_caps fits in the capability union"),
        }
    }
}

impl SetHcaCapIn {
    /// The general capabilities to set, at the start of the `capability` union.
    pub fn cmd_hca_cap_mut(&mut self) -> &mut crate::ctx::CmdHcaCap {
        use zerocopy::FromBytes;
        match crate::ctx::CmdHcaCap::mut_from_prefix(self.capability_mut()) {
            Ok((cap, _)) => cap,
            Err(_) => unreachable!("cmd_hca_cap fits in the capability union"),
        }
    }
}

/// Composes the op_mod of QUERY_HCA_CAP: capability type in bits 15:1, mode in bit 0.
pub const fn query_hca_cap_op_mod(
    cap: crate::consts::HcaCapType,
    mode: crate::consts::HcaCapMode,
) -> u16 {
    (cap.raw() << 1) | (mode.raw() & 1)
}

/// Composes the op_mod of SET_HCA_CAP: capability type in bits 15:1.
pub const fn set_hca_cap_op_mod(cap: crate::consts::HcaCapType) -> u16 {
    cap.raw() << 1
}
