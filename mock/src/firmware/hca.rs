//! HCA life cycle: ENABLE_HCA, DISABLE_HCA, ISSI, capabilities, INIT_HCA, TEARDOWN_HCA,
//! ACCESS_REGISTER (host endianness, the node description; the firmware component
//! registers MCAM, MCQS and MCQI, read only), QUERY_ADAPTER and QUERY_SPECIAL_CONTEXTS.

use super::{
    CmdResult, Ctx, Fail, Firmware, HcaState, bad_param, bad_state, no_res, out, syndrome,
};
use crate::caps::{LinkLayer, SETTABLE_ATOMIC, SETTABLE_GENERAL, SETTABLE_ROCE, apply_settable};
use crate::objects::RESERVED_LKEY;
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::{CmdStatus, HcaCapType};
use uhca_fwif::ctx::{
    AtomicCaps, CmdHcaCap, McamReg, McqiReg, McqiVersion, McqsReg, RegisterHostEndianness, RoceCap,
};
use zerocopy::{FromBytes, IntoBytes};

/// The ISSI values the firmware supports (bit n: ISSI n).
pub const SUPPORTED_ISSI: u32 = 0b11;

/// QUERY_ADAPTER's `ieee_vendor_id`: the IEEE OUI of the adapter's vendor (Mellanox,
/// 00-02-c9, the vendor of PCI vendor ID 0x15b3 the function reports).
pub const ADAPTER_IEEE_VENDOR_ID: u32 = 0x00_02c9;
/// QUERY_ADAPTER's `vsd_vendor_id`: the PCI vendor ID of whoever wrote the vendor-specific
/// data (`vsd`, left empty here).
pub const ADAPTER_VSD_VENDOR_ID: u16 = 0x15b3;
/// QUERY_ADAPTER's `vsd_contd_psid`: the board's PSID (parameter-set identification), an
/// ASCII string of at most 16 bytes padded with zeros. The model names itself rather than
/// borrow a real board's.
pub const ADAPTER_PSID: &[u8] = b"UHCA_MOCK_0001";

/// TEARDOWN_HCA profile: graceful close.
pub const TEARDOWN_GRACEFUL: u16 = 0;
/// TEARDOWN_HCA profile: force close.
pub const TEARDOWN_FORCE: u16 = 1;
/// TEARDOWN_HCA profile: prepare fast teardown (then `nic_interface = DISABLED`).
pub const TEARDOWN_PREPARE_FAST: u16 = 2;

fn own_function(function_id: u16, other: bool) -> Result<(), Fail> {
    if function_id != 0 || other {
        return Err(bad_param(syndrome::BAD_FUNCTION));
    }
    Ok(())
}

/// Decodes a register's data from the start of `data`.
fn read_reg<T: FromBytes>(data: &[u8]) -> Result<T, Fail> {
    T::read_from_prefix(data)
        .map(|(r, _)| r)
        .map_err(|_| Fail::Cmd(CmdStatus::BadInpLenErr, syndrome::BAD_INPUT_LEN))
}

/// MCAM: the management registers the model offers, MCQS and MCQI, both in the first
/// group (registers 0x9000 to 0x907f); the next three groups exist and are empty; no
/// enhanced features.
fn reg_mcam(data: &[u8]) -> Result<Vec<u8>, Fail> {
    let req: McamReg = read_reg(data)?;
    if req.feature_group() != 0 || req.access_reg_group() > 3 {
        return Err(bad_param(syndrome::BAD_REGISTER_INDEX));
    }
    let mut reg = McamReg::default();
    reg.set_access_reg_group(req.access_reg_group());
    if req.access_reg_group() == 0 {
        reg.mng_access_reg_cap_mask__access_regs_mut()
            .set_mcqi(true)
            .set_mcqs(true);
    }
    Ok(reg.as_bytes().to_vec())
}

/// MCQS: one component, the boot image, idle (no update in progress or pending).
fn reg_mcqs(data: &[u8]) -> Result<Vec<u8>, Fail> {
    let req: McqsReg = read_reg(data)?;
    if req.component_index() != 0 {
        return Err(bad_param(syndrome::BAD_REGISTER_INDEX));
    }
    let mut reg = McqsReg::default();
    reg.set_last_index_flag(true)
        .set_identifier(MCQS_IDENTIFIER_BOOT_IMG)
        .set_component_update_state(MCQS_UPDATE_STATE_IDLE);
    Ok(reg.as_bytes().to_vec())
}

impl Firmware<'_> {
    pub(crate) fn cmd_enable_hca(&mut self, _c: &Ctx, i: &EnableHcaIn) -> CmdResult {
        own_function(i.function_id(), i.embedded_cpu_function())?;
        self.state.state = HcaState::Enabled;
        Ok(out(&EnableHcaOut::default()))
    }

    pub(crate) fn cmd_disable_hca(&mut self, c: &Ctx, i: &DisableHcaIn) -> CmdResult {
        own_function(i.function_id(), i.embedded_cpu_function())?;
        if self.state.state == HcaState::Disabled {
            return Err(bad_state(syndrome::HCA_NOT_ENABLED));
        }
        if !self.state.pages.held.is_empty() {
            let n = self.state.pages.held.len();
            self.note(
                c.now,
                format!("DISABLE_HCA with {n} firmware pages not reclaimed"),
            );
        }
        self.objs.clear();
        self.state.drop_objects();
        let p = &mut self.state.pages;
        p.held.clear();
        p.requested = 0;
        p.to_return = 0;
        p.released = false;
        p.refused = false;
        p.regular = self.config.regular_pages;
        self.state.state = HcaState::Disabled;
        self.state.issi = 0;
        self.state.fast_teardown_prepared = false;
        Ok(out(&DisableHcaOut::default()))
    }

    pub(crate) fn cmd_query_issi(&mut self, _c: &Ctx, _i: &QueryIssiIn) -> CmdResult {
        let mut o = QueryIssiOut::default();
        o.set_current_issi(self.state.issi)
            .set_supported_issi_dw0(SUPPORTED_ISSI);
        Ok(out(&o))
    }

    pub(crate) fn cmd_set_issi(&mut self, _c: &Ctx, i: &SetIssiIn) -> CmdResult {
        let issi = i.current_issi();
        if issi >= 32 || SUPPORTED_ISSI & (1 << issi) == 0 {
            return Err(bad_param(syndrome::BAD_ISSI));
        }
        self.state.issi = issi;
        Ok(out(&SetIssiOut::default()))
    }

    pub(crate) fn cmd_query_hca_cap(&mut self, c: &Ctx, i: &QueryHcaCapIn) -> CmdResult {
        own_function(i.function_id(), i.other_function())?;
        let op_mod = i.op_mod();
        let cur = op_mod & 1 == 1;
        let mut o = QueryHcaCapOut::default();
        let cap = o.capability_mut();
        // The output must hold the page asked for, not the whole union (the answer is cut
        // to the output's length).
        let need = |size: usize| {
            if c.outlen < super::QUERY_HCA_CAP_OUT_FIXED + size {
                Err(Fail::Cmd(
                    CmdStatus::BadOutpLenErr,
                    syndrome::BAD_OUTPUT_LEN,
                ))
            } else {
                Ok(())
            }
        };
        match HcaCapType::from_raw(op_mod >> 1) {
            HcaCapType::General => {
                let g = if cur {
                    &self.state.caps.general_cur
                } else {
                    &self.state.caps.general_max
                };
                need(CmdHcaCap::SIZE)?;
                cap[..CmdHcaCap::SIZE].copy_from_slice(g.as_bytes());
            }
            HcaCapType::Roce if self.state.port_type() == LinkLayer::Ethernet => {
                let r = if cur {
                    &self.state.caps.roce_cur
                } else {
                    &self.state.caps.roce_max
                };
                need(RoceCap::SIZE)?;
                cap[..RoceCap::SIZE].copy_from_slice(r.as_bytes());
            }
            HcaCapType::Atomic if self.state.caps.general_max.atomic() => {
                let a = if cur {
                    &self.state.caps.atomic_cur
                } else {
                    &self.state.caps.atomic_max
                };
                need(AtomicCaps::SIZE)?;
                cap[..AtomicCaps::SIZE].copy_from_slice(a.as_bytes());
            }
            _ => return Err(bad_param(syndrome::BAD_CAP_TYPE)),
        }
        Ok(out(&o))
    }

    pub(crate) fn cmd_set_hca_cap(&mut self, _c: &Ctx, i: &SetHcaCapIn) -> CmdResult {
        own_function(i.function_id(), i.other_function())?;
        let op_mod = i.op_mod();
        if op_mod & 1 != 0 {
            return Err(bad_param(syndrome::BAD_OP_MOD));
        }
        let caps = &mut self.state.caps;
        let res = match HcaCapType::from_raw(op_mod >> 1) {
            HcaCapType::General => {
                let (req, _) = CmdHcaCap::read_from_prefix(i.capability())
                    .map_err(|_| bad_param(syndrome::BAD_INPUT_LEN))?;
                apply_settable(
                    &mut caps.general_cur,
                    &caps.general_max,
                    &req,
                    SETTABLE_GENERAL,
                )
            }
            HcaCapType::Roce if caps.port_type() == LinkLayer::Ethernet => {
                let (req, _) = RoceCap::read_from_prefix(i.capability())
                    .map_err(|_| bad_param(syndrome::BAD_INPUT_LEN))?;
                apply_settable(&mut caps.roce_cur, &caps.roce_max, &req, SETTABLE_ROCE)
            }
            HcaCapType::Atomic if caps.general_max.atomic() => {
                let (req, _) = AtomicCaps::read_from_prefix(i.capability())
                    .map_err(|_| bad_param(syndrome::BAD_INPUT_LEN))?;
                apply_settable(
                    &mut caps.atomic_cur,
                    &caps.atomic_max,
                    &req,
                    SETTABLE_ATOMIC,
                )
            }
            _ => return Err(bad_param(syndrome::BAD_CAP_TYPE)),
        };
        res.map_err(|_| bad_param(syndrome::CAP_ABOVE_MAX))?;
        Ok(out(&SetHcaCapOut::default()))
    }

    pub(crate) fn cmd_init_hca(&mut self, _c: &Ctx, _i: &InitHcaIn) -> CmdResult {
        if self.state.pages.init_outstanding() > 0 {
            return Err(no_res(syndrome::NO_INIT_PAGES));
        }
        self.state.state = HcaState::Initialized;
        Ok(out(&InitHcaOut::default()))
    }

    pub(crate) fn cmd_teardown_hca(&mut self, _c: &Ctx, i: &TeardownHcaIn) -> CmdResult {
        let profile = i.profile();
        if !matches!(
            profile,
            TEARDOWN_GRACEFUL | TEARDOWN_FORCE | TEARDOWN_PREPARE_FAST
        ) {
            return Err(bad_param(syndrome::BAD_TEARDOWN_PROFILE));
        }
        if self.state.state != HcaState::Initialized {
            let s = if self.state.state == HcaState::TornDown {
                syndrome::HCA_TORN_DOWN
            } else {
                syndrome::HCA_NOT_INITIALIZED
            };
            return Err(bad_state(s));
        }
        let mut o = TeardownHcaOut::default();
        if profile == TEARDOWN_PREPARE_FAST {
            if !self.state.caps.general_cur.fast_teardown() {
                return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
            }
            self.state.fast_teardown_prepared = true;
            o.set_state(false);
            return Ok(out(&o));
        }
        if profile == TEARDOWN_FORCE && !self.state.caps.general_cur.force_teardown() {
            return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
        }
        self.objs.clear();
        self.state.drop_objects();
        self.state.state = HcaState::TornDown;
        self.state.pages.released = true;
        self.state.pages.requested = 0;
        o.set_state(false);
        Ok(out(&o))
    }

    pub(crate) fn cmd_access_register(&mut self, c: &Ctx, i: &AccessRegisterIn) -> CmdResult {
        let write = match i.op_mod() {
            ACCESS_REGISTER_OP_MOD_WRITE => true,
            ACCESS_REGISTER_OP_MOD_READ => false,
            _ => return Err(bad_param(syndrome::BAD_OP_MOD)),
        };
        let data = &c.raw[AccessRegisterIn::SIZE.min(c.raw.len())..];
        let reg = match i.register_id() {
            REG_HOST_ENDIANNESS => self.reg_host_endianness(write, data)?,
            REG_NODE_DESC => self.reg_node_desc(write, data)?,
            REG_MCAM | REG_MCQS | REG_MCQI if write => {
                return Err(bad_param(syndrome::READ_ONLY_REGISTER));
            }
            REG_MCAM => reg_mcam(data)?,
            REG_MCQS => reg_mcqs(data)?,
            REG_MCQI => self.reg_mcqi(data, c.outlen)?,
            _ => return Err(bad_param(syndrome::BAD_REGISTER)),
        };
        // A read needs room for the register; what a write echoes is cut to the room given.
        if !write && c.outlen < AccessRegisterOut::SIZE + reg.len() {
            return Err(Fail::Cmd(
                CmdStatus::BadOutpLenErr,
                syndrome::BAD_OUTPUT_LEN,
            ));
        }
        let mut o = out(&AccessRegisterOut::default());
        o.extend_from_slice(&reg);
        Ok(o)
    }

    /// HOST_ENDIANNESS: the `he` bit, written or read.
    fn reg_host_endianness(&mut self, write: bool, data: &[u8]) -> Result<Vec<u8>, Fail> {
        let mut reg = RegisterHostEndianness::default();
        if write {
            reg = read_reg(data)?;
            self.state.host_endianness_he = reg.he();
        } else {
            reg.set_he(self.state.host_endianness_he);
        }
        Ok(reg.as_bytes().to_vec())
    }

    /// NODE_DESC: the node description, written or read.
    fn reg_node_desc(&mut self, write: bool, data: &[u8]) -> Result<Vec<u8>, Fail> {
        if write {
            let Some(d) = data.get(..NODE_DESC_BYTES) else {
                return Err(Fail::Cmd(CmdStatus::BadInpLenErr, syndrome::BAD_INPUT_LEN));
            };
            self.state.node_desc.copy_from_slice(d);
        }
        Ok(self.state.node_desc.to_vec())
    }

    /// MCQI: the version of the boot image (component 0), as the initialization segment
    /// reports it, or as much of it as the driver asked for (`data_size`) and left room for.
    fn reg_mcqi(&self, data: &[u8], outlen: usize) -> Result<Vec<u8>, Fail> {
        let req: McqiReg = read_reg(data)?;
        if req.component_index() != 0
            || req.read_pending_component()
            || req.info_type() != MCQI_INFO_TYPE_VERSION
        {
            return Err(bad_param(syndrome::BAD_REGISTER_INDEX));
        }
        let (major, minor, subminor) = self.config.fw_rev;
        let text = format!("{major}.{minor}.{subminor}");
        let mut v = McqiVersion::default();
        v.set_version(
            ((major as u32 & 0xff) << 24) | ((minor as u32 & 0xff) << 16) | subminor as u32,
        )
        .set_version_string_length(text.len() as u8);
        v.version_string_mut()[..text.len()].copy_from_slice(text.as_bytes());
        let room = outlen.saturating_sub(AccessRegisterOut::SIZE + McqiReg::SIZE);
        let n = (req.data_size() as usize).min(McqiVersion::SIZE).min(room);
        let mut reg = req;
        reg.set_info_size(McqiVersion::SIZE as u32)
            .set_data_size(n as u16);
        let mut bytes = reg.as_bytes().to_vec();
        bytes.extend_from_slice(&v.as_bytes()[..n]);
        Ok(bytes)
    }

    pub(crate) fn cmd_query_adapter(&mut self, _c: &Ctx, _i: &QueryAdapterIn) -> CmdResult {
        let mut o = QueryAdapterOut::default();
        let a = o.query_adapter_struct_mut();
        a.set_ieee_vendor_id(ADAPTER_IEEE_VENDOR_ID)
            .set_vsd_vendor_id(ADAPTER_VSD_VENDOR_ID);
        a.vsd_contd_psid_mut()[..ADAPTER_PSID.len()].copy_from_slice(ADAPTER_PSID);
        Ok(out(&o))
    }

    pub(crate) fn cmd_query_special_contexts(
        &mut self,
        _c: &Ctx,
        _i: &QuerySpecialContextsIn,
    ) -> CmdResult {
        let mut o = QuerySpecialContextsOut::default();
        o.set_resd_lkey(RESERVED_LKEY);
        Ok(out(&o))
    }
}
