//! The firmware: the command interface and every command the model implements, page
//! accounting and events. The object tables it creates live in `objects.rs`; its own
//! state is `FwState` (`mock/src/fw_state.rs`, `state` here); a handler converted to the firmware's room is a method of
//! `Firmware`, which borrows only what a command may touch.
//!
//! One file per command family. Handlers decode their input from `uhca-fwif` layouts and
//! encode their output the same way; a bad input gets the PRM status and one of the
//! [`syndrome`]s, never a panic.

pub mod syndrome;

mod cmdq;
mod cq;
mod eq;
mod hca;
mod mkey;
mod pages;
mod qp;
mod resources;
mod special_qp;
mod srq;
pub(crate) use crate::fw_state as state;
mod vport;
mod xrc;

pub use crate::caps::{DEFAULT_PKEY, GID_PREFIX};
pub use crate::objects::RESERVED_LKEY;
pub(crate) use crate::objects::{Cq, Eq, Mkey, Qp, Srq, SrqCtx};
pub use cmdq::MAX_CMD_LEN;
pub use cq::{
    CQ_MODIFY_COUNT, CQ_MODIFY_OVERRUN, CQ_MODIFY_PERIOD, CQ_OP_MOD_MODIFY, CQ_OP_MOD_RESIZE,
};
pub use eq::{EQE_SIZE, HEALTH_SYNDR_ASYNC_EQ_OVERRUN};
pub use hca::{
    ADAPTER_IEEE_VENDOR_ID, ADAPTER_PSID, ADAPTER_VSD_VENDOR_ID, SUPPORTED_ISSI, TEARDOWN_FORCE,
    TEARDOWN_GRACEFUL, TEARDOWN_PREPARE_FAST,
};
pub use mkey::{FIRST_MKEY_INDEX, MAX_MTT};
pub use pages::{FUNCTION_ID, FW_PAGE_FILL, PAGE_REQ_EC_FUNCTION, PAGE_REQ_RELEASE_ALL};
pub use qp::optpar;
pub use special_qp::QP1_Q_KEY;
pub use srq::ARM_RQ_OP_MOD_SRQ;
pub use state::{FIRST_QPN, FIRST_UAR, HcaState, NODE_DESCRIPTION};
pub use vport::{
    ALL_ENTRIES, MAD_STATUS_BAD_ATTRIBUTE_VALUE, MAD_STATUS_BAD_CLASS, MAD_STATUS_UNSUPPORTED,
    PORT_CAPABILITY_MASK,
};

use crate::MockConfig;
use crate::device::Device;
use crate::engine_state::{QCounters, QpDp};
use crate::iommu::Iommu;
use crate::log::{Note, Ring};
use crate::objects::Objects;
use state::{FwState, Pages};
use std::collections::BTreeMap;
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::{CmdOpcode, CmdStatus, QpState};

/// Why a command did not produce an output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fail {
    /// A command status and syndrome.
    Cmd(CmdStatus, u32),
    /// The firmware waits for pages: the command stays with hardware.
    Defer,
}

pub(crate) type CmdResult = Result<Vec<u8>, Fail>;

/// QUERY_QP's output up to its trailing page list: status, syndrome, `opt_param_mask`,
/// `ece`, the QP context (`qp_pas_or_qpc_ext_and_pas` starts at bit 2176).
pub const QUERY_QP_OUT_FIXED: usize =
    uhca_fwif::cmd::query_qp_out::qp_pas_or_qpc_ext_and_pas.bit_offset as usize / 8;

/// QUERY_HCA_CAP's output before its capability union (status, syndrome, reserved): the
/// output need reach only as far as the capability page asked for (the union is as large
/// as the largest page; rdma-core's DevX tests, run on ConnectX, read a 2048-byte
/// capability, `tests/mlx5_prm_structs.py` `QueryCmdHcaCapOut`).
pub const QUERY_HCA_CAP_OUT_FIXED: usize =
    uhca_fwif::cmd::query_hca_cap_out::capability.bit_offset as usize / 8;

pub(crate) fn bad_param(s: u32) -> Fail {
    Fail::Cmd(CmdStatus::BadParamErr, s)
}
pub(crate) fn bad_state(s: u32) -> Fail {
    Fail::Cmd(CmdStatus::BadSysStateErr, s)
}
pub(crate) fn bad_res(s: u32) -> Fail {
    Fail::Cmd(CmdStatus::BadResErr, s)
}
pub(crate) fn busy(s: u32) -> Fail {
    Fail::Cmd(CmdStatus::ResBusy, s)
}
pub(crate) fn no_res(s: u32) -> Fail {
    Fail::Cmd(CmdStatus::NoResErr, s)
}
pub(crate) fn lim(s: u32) -> Fail {
    Fail::Cmd(CmdStatus::LimErr, s)
}

/// The bytes of an output layout.
pub(crate) fn out<T: PrmLayout>(v: &T) -> Vec<u8> {
    v.as_bytes().to_vec()
}

/// Decodes an input layout from the start of the input.
pub(crate) fn parse<T: PrmLayout>(input: &[u8]) -> Result<T, Fail> {
    match T::read_from_prefix(input) {
        Ok((v, _)) => Ok(v),
        Err(_) => Err(Fail::Cmd(CmdStatus::BadInpLenErr, syndrome::BAD_INPUT_LEN)),
    }
}

/// The 8-byte page addresses of a flexible `pas` array at `offset` of the input.
pub(crate) fn pas_list(input: &[u8], offset: usize, count: usize) -> Result<Vec<u64>, Fail> {
    let need = count
        .checked_mul(PAS_ENTRY_BYTES)
        .and_then(|n| n.checked_add(offset));
    match need {
        Some(end) if end <= input.len() => Ok(input[offset..end]
            .chunks_exact(PAS_ENTRY_BYTES)
            .map(|c| u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect()),
        _ => Err(Fail::Cmd(CmdStatus::BadInpLenErr, syndrome::BAD_INPUT_LEN)),
    }
}

/// The firmware's room: what a command handler converted to it may touch, borrowed from
/// the device for one command (or one doorbell) and nothing more: the object tables, the
/// firmware's own state, the configuration, the IOMMU (for the DMA a command does), the
/// notes, the engine's per-QP transport state, SRQ positions and queue counters, and the
/// page-return limits the fault injector sets.
/// Not the PCI function, the MSI-X table, the command log or the rest of the engine.
pub(crate) struct Firmware<'a> {
    pub(crate) objs: &'a mut Objects,
    /// The firmware's own state: capabilities, page accounting, the port, the vport.
    pub(crate) state: &'a mut FwState,
    /// The device's configuration (its GUIDs, for the port's answers).
    pub(crate) config: &'a MockConfig,
    pub(crate) iommu: &'a mut Iommu,
    pub(crate) notes: &'a mut Ring<Note>,
    /// The engine's SRQ consumers (srqn -> WQEs consumed, next WQE): QUERY_RMP reports
    /// one, destroying an SRQ forgets it.
    pub(crate) srq_pos: &'a mut BTreeMap<u32, (u16, u16)>,
    /// The engine's queue counters: QUERY_Q_COUNTER reads (and clears) them,
    /// DEALLOC_Q_COUNTER forgets a set's.
    pub(crate) q_counters: &'a mut BTreeMap<u8, QCounters>,
    /// The fault injector's limits on the pages each MANAGE_PAGES "take" returns (the
    /// first is used up by the next one).
    pub(crate) page_returns: &'a mut Vec<u32>,
    /// The engine's per-QP transport state: QUERY_QP reports its counters, DESTROY_QP
    /// forgets it.
    pub(crate) qp_dp: &'a mut BTreeMap<u32, QpDp>,
}

/// A QP's move from one state to another by a modify command, which the device hands to
/// the engine after the command (the datapath follows the state; ERR flushes the queues and
/// may raise an event).
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpMoved {
    pub(crate) qpn: u32,
    pub(crate) from: QpState,
    pub(crate) to: QpState,
}

impl Firmware<'_> {
    /// Records a note about something the driver probably did wrong.
    pub(crate) fn note(&mut self, now: u64, text: String) {
        self.notes.push(Note { time_ns: now, text });
    }

    /// Whether the firmware has the regular pages a new object needs (see
    /// [`need_regular_pages`]).
    pub(crate) fn need_regular_pages(&self) -> Result<(), Fail> {
        need_regular_pages(&self.state.pages, self.objs)
    }
}

/// Whether the firmware has every regular page it asked for: if not, a command that
/// creates an object waits for them (deferred) when an EQ takes page requests, and fails
/// otherwise.
pub(crate) fn need_regular_pages(pages: &Pages, objs: &Objects) -> Result<(), Fail> {
    if pages.regular_outstanding() == 0 {
        Ok(())
    } else if objs
        .eq_for(uhca_fwif::consts::EventType::PageRequest.raw())
        .is_some()
    {
        Err(Fail::Defer)
    } else {
        Err(no_res(syndrome::NO_REGULAR_PAGES))
    }
}

/// What a handler gets besides its decoded input.
pub(crate) struct Ctx<'a> {
    /// The whole input, for flexible arrays.
    pub(crate) raw: &'a [u8],
    /// The output length the driver provided.
    pub(crate) outlen: usize,
    /// Model time.
    pub(crate) now: u64,
}

/// Which HCA state a command needs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Disabled (ENABLE_HCA).
    Disabled,
    /// Enabled, initialized or torn down.
    Enabled,
    /// Enabled (not yet initialized), with boot pages.
    BeforeInit,
    /// Enabled or initialized, with boot pages.
    Booted,
    /// Initialized.
    Initialized,
    /// Any state.
    Any,
}

fn need_of(op: CmdOpcode) -> Need {
    use CmdOpcode as O;
    match op {
        O::EnableHca => Need::Disabled,
        O::DisableHca | O::Nop => Need::Any,
        O::QueryIssi | O::QueryPages | O::ManagePages | O::TeardownHca => Need::Enabled,
        O::SetIssi | O::SetHcaCap | O::InitHca => Need::BeforeInit,
        O::QueryHcaCap | O::AccessReg => Need::Booted,
        _ => Need::Initialized,
    }
}

impl Device {
    /// The firmware's room over this device's parts, for one command or doorbell.
    pub(crate) fn firmware(&mut self) -> Firmware<'_> {
        Firmware {
            objs: &mut self.objs,
            state: &mut self.fw,
            config: &self.config,
            iommu: &mut self.iommu,
            notes: &mut self.notes,
            srq_pos: &mut self.engine.srq_pos,
            q_counters: &mut self.engine.q_counters,
            page_returns: &mut self.faults.page_returns,
            qp_dp: &mut self.engine.qps,
        }
    }

    fn check_state(&self, op: CmdOpcode) -> Result<(), Fail> {
        let st = self.fw.state;
        let boot_ok = self.fw.pages.boot_outstanding() == 0;
        match (need_of(op), st) {
            (Need::Any, _) => Ok(()),
            (Need::Disabled, HcaState::Disabled) => Ok(()),
            (Need::Disabled, _) => Err(bad_state(syndrome::HCA_ALREADY_ENABLED)),
            (_, HcaState::Disabled) => Err(bad_state(syndrome::HCA_NOT_ENABLED)),
            (Need::Enabled, _) => Ok(()),
            (_, HcaState::TornDown) => Err(bad_state(syndrome::HCA_TORN_DOWN)),
            (Need::BeforeInit, HcaState::Initialized) => {
                Err(bad_state(syndrome::HCA_ALREADY_INITIALIZED))
            }
            (Need::BeforeInit | Need::Booted, _) if !boot_ok && op != CmdOpcode::SetIssi => {
                Err(no_res(syndrome::NO_BOOT_PAGES))
            }
            (Need::BeforeInit | Need::Booted, _) => Ok(()),
            (Need::Initialized, HcaState::Initialized) => Ok(()),
            (Need::Initialized, _) => Err(bad_state(syndrome::HCA_NOT_INITIALIZED)),
        }
    }

    /// Executes one command's input and returns its output (status OK) or why not.
    pub(crate) fn execute(&mut self, input: &[u8], outlen: usize, now: u64) -> CmdResult {
        let hdr: MboxIn = parse(input)?;
        let op = CmdOpcode::from_raw(hdr.opcode());
        // INIT_HCA's input grew from the 16-byte header to 32 bytes (`sw_vhca_id`,
        // `sw_owner_id`, which matter only with the `sw_owner_id` capability, not offered).
        // Drivers written before that send 16 bytes (rdma-core 44's VFIO provider does)
        // and firmware takes them: the missing bytes read as zero.
        let grown;
        let input = if op == CmdOpcode::InitHca && input.len() < InitHcaIn::SIZE {
            grown = [input, &[0u8; InitHcaIn::SIZE][input.len()..]].concat();
            &grown[..]
        } else {
            input
        };
        let ctx = Ctx {
            raw: input,
            outlen,
            now,
        };

        macro_rules! run {
            // `@fw`: a handler of the firmware's room ([`Firmware`]).
            (@fw $in:ty, $($rest:tt)*) => {
                run!(@on firmware, $in, $($rest)*)
            };
            // `@moved`: a QP modify command of the firmware's room; the engine follows the
            // QP's move afterwards.
            (@moved $in:ty, $handler:ident) => {{
                let (o, m) = run!(@on firmware, $in, $handler)?;
                self.engine_qp_modified(m.qpn, m.from, m.to);
                Ok(o)
            }};
            (@on $room:ident, $in:ty, $handler:ident) => {
                run!(@on $room, $in, $handler, op_mod_zero)
            };
            (@on $room:ident, $in:ty, $handler:ident, $opm:ident) => {
                run!(@on $room, $in, $handler, $opm, <<$in as Command>::Out as PrmLayout>::SIZE)
            };
            // `$min`: the shortest output the command takes (its layout's size, or the part
            // before a trailing list the firmware writes only as far as the output reaches).
            (@on $room:ident, $in:ty, $handler:ident, $opm:ident, $min:expr) => {{
                if outlen < $min {
                    return Err(Fail::Cmd(CmdStatus::BadOutpLenErr, syndrome::BAD_OUTPUT_LEN));
                }
                let inp: $in = parse(input)?;
                run!(@opm $opm, hdr);
                if hdr.uid() != 0 {
                    return Err(bad_param(syndrome::BAD_UID));
                }
                self.check_state(op)?;
                run!(@room $room).$handler(&ctx, &inp)
            }};
            (@room firmware) => { self.firmware() };
            (@opm op_mod_zero, $hdr:ident) => {
                if $hdr.op_mod() != 0 {
                    return Err(bad_param(syndrome::BAD_OP_MOD));
                }
            };
            (@opm op_mod_any, $hdr:ident) => {};
        }

        use CmdOpcode as O;
        match op {
            O::EnableHca => run!(@fw EnableHcaIn, cmd_enable_hca),
            O::DisableHca => run!(@fw DisableHcaIn, cmd_disable_hca),
            O::QueryIssi => run!(@fw QueryIssiIn, cmd_query_issi),
            O::SetIssi => run!(@fw SetIssiIn, cmd_set_issi),
            O::QueryPages => run!(@fw QueryPagesIn, cmd_query_pages, op_mod_any),
            O::ManagePages => run!(@fw ManagePagesIn, cmd_manage_pages, op_mod_any),
            O::QueryHcaCap => run!(
                @fw QueryHcaCapIn,
                cmd_query_hca_cap,
                op_mod_any,
                QUERY_HCA_CAP_OUT_FIXED
            ),
            O::SetHcaCap => run!(@fw SetHcaCapIn, cmd_set_hca_cap, op_mod_any),
            O::InitHca => run!(@fw InitHcaIn, cmd_init_hca),
            O::TeardownHca => run!(@fw TeardownHcaIn, cmd_teardown_hca),
            O::AccessReg => run!(@fw AccessRegisterIn, cmd_access_register, op_mod_any),
            O::QuerySpecialContexts => run!(@fw QuerySpecialContextsIn, cmd_query_special_contexts),
            O::QueryAdapter => run!(@fw QueryAdapterIn, cmd_query_adapter),
            O::Nop => {
                self.check_state(op)?;
                Ok(vec![0; 16])
            }
            O::AllocUar => run!(@fw AllocUarIn, cmd_alloc_uar),
            O::DeallocUar => run!(@fw DeallocUarIn, cmd_dealloc_uar),
            O::AllocPd => run!(@fw AllocPdIn, cmd_alloc_pd),
            O::DeallocPd => run!(@fw DeallocPdIn, cmd_dealloc_pd),
            O::AllocTransportDomain => run!(@fw AllocTransportDomainIn, cmd_alloc_td),
            O::DeallocTransportDomain => run!(@fw DeallocTransportDomainIn, cmd_dealloc_td),
            O::AllocXrcd => run!(@fw AllocXrcdIn, cmd_alloc_xrcd),
            O::DeallocXrcd => run!(@fw DeallocXrcdIn, cmd_dealloc_xrcd),
            O::AllocQCounter => run!(@fw AllocQCounterIn, cmd_alloc_q_counter),
            O::DeallocQCounter => run!(@fw DeallocQCounterIn, cmd_dealloc_q_counter),
            O::QueryQCounter => run!(@fw QueryQCounterIn, cmd_query_q_counter),
            O::CreateEq => run!(@fw CreateEqIn, cmd_create_eq),
            O::DestroyEq => run!(@fw DestroyEqIn, cmd_destroy_eq),
            O::QueryEq => run!(@fw QueryEqIn, cmd_query_eq),
            O::CreateMkey => run!(@fw CreateMkeyIn, cmd_create_mkey),
            O::DestroyMkey => run!(@fw DestroyMkeyIn, cmd_destroy_mkey),
            O::QueryMkey => run!(@fw QueryMkeyIn, cmd_query_mkey),
            O::CreateCq => run!(@fw CreateCqIn, cmd_create_cq),
            O::DestroyCq => run!(@fw DestroyCqIn, cmd_destroy_cq),
            O::QueryCq => run!(@fw QueryCqIn, cmd_query_cq),
            O::ModifyCq => run!(@fw ModifyCqIn, cmd_modify_cq, op_mod_any),
            O::CreateQp => run!(@fw CreateQpIn, cmd_create_qp),
            O::DestroyQp => run!(@fw DestroyQpIn, cmd_destroy_qp),
            // QUERY_QP's output ends with the QP's page list (or the extended context and the
            // list), written as far as the output reaches: Linux 6.1 reads the context only
            // (272 bytes).
            O::QueryQp => run!(@fw QueryQpIn, cmd_query_qp, op_mod_zero, QUERY_QP_OUT_FIXED),
            O::Rst2initQp => run!(@moved Rst2initQpIn, cmd_rst2init),
            O::Init2initQp => run!(@moved Init2initQpIn, cmd_init2init),
            O::Init2rtrQp => run!(@moved Init2rtrQpIn, cmd_init2rtr),
            O::Rtr2rtsQp => run!(@moved Rtr2rtsQpIn, cmd_rtr2rts),
            O::Rts2rtsQp => run!(@moved Rts2rtsQpIn, cmd_rts2rts),
            O::Sqerr2rtsQp => run!(@moved Sqerr2rtsQpIn, cmd_sqerr2rts),
            O::Qp2err => run!(@moved Qp2errIn, cmd_2err),
            O::Qp2rst => run!(@moved Qp2rstIn, cmd_2rst),
            // The ISSI-0 shared receive queue commands and their ISSI-1 replacement, the
            // RMP commands: each family only at its interface step.
            O::CreateSrq | O::DestroySrq | O::QuerySrq | O::ArmRq if self.fw.issi != 0 => {
                Err(Fail::Cmd(CmdStatus::BadOpErr, syndrome::OPCODE_NOT_AT_ISSI))
            }
            O::CreateRmp | O::ModifyRmp | O::QueryRmp | O::DestroyRmp if self.fw.issi == 0 => {
                Err(Fail::Cmd(CmdStatus::BadOpErr, syndrome::OPCODE_NOT_AT_ISSI))
            }
            O::CreateSrq => run!(@fw CreateSrqIn, cmd_create_srq),
            O::DestroySrq => run!(@fw DestroySrqIn, cmd_destroy_srq),
            O::QuerySrq => run!(@fw QuerySrqIn, cmd_query_srq),
            O::ArmRq => run!(@fw ArmRqIn, cmd_arm_rq, op_mod_any),
            O::CreateRmp => run!(@fw CreateRmpIn, cmd_create_rmp),
            O::ModifyRmp => run!(@fw ModifyRmpIn, cmd_modify_rmp),
            O::QueryRmp => run!(@fw QueryRmpIn, cmd_query_rmp),
            O::DestroyRmp => run!(@fw DestroyRmpIn, cmd_destroy_rmp),
            O::CreateXrcSrq => run!(@fw CreateXrcSrqIn, cmd_create_xrc_srq),
            O::DestroyXrcSrq => run!(@fw DestroyXrcSrqIn, cmd_destroy_xrc_srq),
            O::QueryXrcSrq => run!(@fw QueryXrcSrqIn, cmd_query_xrc_srq),
            O::ArmXrcSrq => run!(@fw ArmXrcSrqIn, cmd_arm_xrc_srq, op_mod_any),
            O::QueryNicVportContext => run!(@fw QueryNicVportContextIn, cmd_query_nic_vport),
            O::ModifyNicVportContext => run!(@fw ModifyNicVportContextIn, cmd_modify_nic_vport),
            O::QueryHcaVportContext => run!(@fw QueryHcaVportContextIn, cmd_query_hca_vport),
            O::QueryHcaVportGid => run!(@fw QueryHcaVportGidIn, cmd_query_hca_vport_gid),
            O::QueryHcaVportPkey => run!(@fw QueryHcaVportPkeyIn, cmd_query_hca_vport_pkey),
            O::QueryVportState => run!(@fw QueryVportStateIn, cmd_query_vport_state, op_mod_any),
            O::SetRoceAddress => run!(@fw SetRoceAddressIn, cmd_set_roce_address),
            O::QueryRoceAddress => run!(@fw QueryRoceAddressIn, cmd_query_roce_address),
            O::MadIfc => run!(@fw MadIfcIn, cmd_mad_ifc, op_mod_any),
            _ => Err(Fail::Cmd(CmdStatus::BadOpErr, syndrome::BAD_OPCODE)),
        }
    }
}

/// Copies one field from `src` to `dst` (both images of the same layout, or of layouts that
/// nest `field` at `base_bits`).
pub(crate) fn copy_field(dst: &mut [u8], src: &[u8], base_bits: u32, f: uhca_fwif::Field) {
    let off = (base_bits + f.bit_offset) as usize;
    let w = f.bit_width as usize;
    if w == 0 {
        return;
    }
    if w <= 64 {
        let v = uhca_fwif::field::get_bits(src, off, w);
        uhca_fwif::field::set_bits(dst, off, w, v);
    } else {
        // Byte strings (GIDs): byte aligned by declaration.
        let (a, b) = (off / 8, (off + w) / 8);
        dst[a..b].copy_from_slice(&src[a..b]);
    }
}

/// Number of pages a buffer of `bytes` needs with pages of `page_size` bytes.
pub(crate) fn pages_for(bytes: u64, page_size: u64) -> u64 {
    bytes.div_ceil(page_size)
}
