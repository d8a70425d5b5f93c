//! Vport and port commands: NIC and HCA vport contexts, GID and P_Key tables, vport state,
//! the RoCE address (GID) table, and MAD_IFC for InfiniBand ports.

use super::{CmdResult, Ctx, Fail, Firmware, bad_param, out, syndrome};
use crate::caps::{DEFAULT_PKEY, GID_PREFIX, IB_GID_TABLE_ENTRIES, LinkLayer, PKEY_TABLE_ENTRIES};
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::{CmdStatus, PortState};
use uhca_fwif::ctx::{HcaVportContext, ModifyNicVportFieldSelect, RoceAddrLayout};
use zerocopy::IntoBytes;

/// "All entries" for QUERY_HCA_VPORT_GID/PKEY.
pub const ALL_ENTRIES: u16 = 0xffff;
/// MAD status: unsupported method or attribute.
pub const MAD_STATUS_UNSUPPORTED: u16 = 0x000c;
/// MAD status: bad version, or a management class the agent does not support.
pub const MAD_STATUS_BAD_CLASS: u16 = 0x0004;
/// MAD status: an invalid attribute or attribute modifier value.
pub const MAD_STATUS_BAD_ATTRIBUTE_VALUE: u16 = 0x001c;

fn out_len_err() -> Fail {
    Fail::Cmd(CmdStatus::BadOutpLenErr, syndrome::BAD_OUTPUT_LEN)
}

impl Firmware<'_> {
    fn own_vport(&self, other: bool, vport: u16) -> Result<(), Fail> {
        if other || vport != 0 {
            return Err(bad_param(syndrome::BAD_FUNCTION));
        }
        Ok(())
    }

    /// `port_num` of QUERY_HCA_VPORT_CONTEXT, _GID and _PKEY: it names a port only on a
    /// dual-port function (`num_ports` 2, when Linux's `mlx5_query_hca_vport_*` fill it);
    /// on a single-port function it is reserved and must be 0.
    fn vport_port(&self, port: u8) -> Result<(), Fail> {
        let ports = self.state.caps.general_cur.num_ports();
        if port != 0 && (ports < 2 || port > ports) {
            return Err(bad_param(syndrome::BAD_PORT));
        }
        Ok(())
    }

    /// `vhca_port_num` of SET_ROCE_ADDRESS and QUERY_ROCE_ADDRESS: it names a port of the
    /// vHCA only when the function has vHCA ports (`num_vhca_ports` > 0, when Linux's
    /// `mlx5_core_roce_gid_set` fills it); without them it is reserved and must be 0.
    fn roce_port(&self, port: u8) -> Result<(), Fail> {
        if port > self.state.caps.general_cur.num_vhca_ports() {
            return Err(bad_param(syndrome::BAD_PORT));
        }
        Ok(())
    }

    fn port_up(&self) -> bool {
        self.state.port_state == PortState::Active
    }

    pub(crate) fn cmd_query_nic_vport(
        &mut self,
        _c: &Ctx,
        i: &QueryNicVportContextIn,
    ) -> CmdResult {
        self.own_vport(i.other_vport(), i.vport_number())?;
        let mut o = QueryNicVportContextOut::default();
        *o.nic_vport_context_mut() = self.state.nic_vport;
        Ok(out(&o))
    }

    pub(crate) fn cmd_modify_nic_vport(
        &mut self,
        _c: &Ctx,
        i: &ModifyNicVportContextIn,
    ) -> CmdResult {
        self.own_vport(i.other_vport(), i.vport_number())?;
        let sel = *i.field_select();
        let mut allowed = ModifyNicVportFieldSelect::default();
        allowed
            .set_roce_en(true)
            .set_mtu(true)
            .set_promisc(true)
            .set_change_event(true)
            .set_disable_uc_local_lb(true)
            .set_disable_mc_local_lb(true)
            .set_min_inline(true);
        let extra = sel.0.iter().zip(allowed.0.iter()).any(|(s, a)| s & !a != 0);
        if extra {
            return Err(bad_param(syndrome::BAD_FIELD_SELECT));
        }
        let req = i.nic_vport_context();
        if sel.roce_en() && self.state.port_type() != LinkLayer::Ethernet && req.roce_en() {
            return Err(bad_param(syndrome::WRONG_PORT_TYPE));
        }
        let v = &mut self.state.nic_vport;
        if sel.roce_en() {
            v.set_roce_en(req.roce_en());
        }
        if sel.mtu() {
            v.set_mtu(req.mtu());
        }
        if sel.promisc() {
            v.set_promisc_uc(req.promisc_uc())
                .set_promisc_mc(req.promisc_mc())
                .set_promisc_all(req.promisc_all());
        }
        if sel.change_event() {
            v.set_arm_change_event(req.arm_change_event());
        }
        if sel.disable_uc_local_lb() {
            v.set_disable_uc_local_lb(req.disable_uc_local_lb());
        }
        if sel.disable_mc_local_lb() {
            v.set_disable_mc_local_lb(req.disable_mc_local_lb());
        }
        if sel.min_inline() {
            v.set_min_wqe_inline_mode(req.min_wqe_inline_mode());
        }
        Ok(out(&ModifyNicVportContextOut::default()))
    }

    pub(crate) fn cmd_query_hca_vport(
        &mut self,
        _c: &Ctx,
        i: &QueryHcaVportContextIn,
    ) -> CmdResult {
        self.own_vport(i.other_vport(), i.vport_number())?;
        self.vport_port(i.port_num())?;
        let guid = self.config.node_guid();
        let up = self.port_up();
        let mut ctx = HcaVportContext::default();
        ctx.set_has_smi(self.state.port_type() == LinkLayer::InfiniBand)
            .set_grh_required(self.state.port_type() == LinkLayer::Ethernet)
            .set_port_physical_state(if up { 5 } else { 2 })
            .set_port_state(self.state.port_state.raw())
            .set_vport_state(self.state.port_state.raw())
            .set_system_image_guid(guid)
            .set_port_guid(guid)
            .set_node_guid(guid);
        if self.state.port_type() == LinkLayer::InfiniBand {
            ctx.set_lid(self.state.lid)
                .set_sm_lid(self.state.sm_lid)
                .set_lmc(0)
                .set_subnet_timeout(18);
        }
        let mut o = QueryHcaVportContextOut::default();
        *o.hca_vport_context_mut() = ctx;
        Ok(out(&o))
    }

    /// The GID at `index` of this port's table, if the index exists.
    fn gid(&self, index: usize) -> Option<[u8; 16]> {
        match self.state.port_type() {
            LinkLayer::InfiniBand => {
                if index >= IB_GID_TABLE_ENTRIES {
                    return None;
                }
                let mut g = [0u8; 16];
                if index == 0 {
                    g[..8].copy_from_slice(&GID_PREFIX.to_be_bytes());
                    g[8..].copy_from_slice(&self.config.node_guid().to_be_bytes());
                }
                Some(g)
            }
            LinkLayer::Ethernet => {
                let e = self.state.roce_addrs.get(index)?;
                Some(e.map(|a| *a.source_l3_address()).unwrap_or([0; 16]))
            }
        }
    }

    fn gid_table_len(&self) -> usize {
        match self.state.port_type() {
            LinkLayer::InfiniBand => IB_GID_TABLE_ENTRIES,
            LinkLayer::Ethernet => self.state.roce_addrs.len(),
        }
    }

    pub(crate) fn cmd_query_hca_vport_gid(&mut self, c: &Ctx, i: &QueryHcaVportGidIn) -> CmdResult {
        self.own_vport(i.other_vport(), i.vport_number())?;
        self.vport_port(i.port_num())?;
        let indices: Vec<usize> = if i.gid_index() == ALL_ENTRIES {
            (0..self.gid_table_len()).collect()
        } else {
            vec![i.gid_index() as usize]
        };
        if c.outlen < QueryHcaVportGidOut::SIZE + 16 * indices.len() {
            return Err(out_len_err());
        }
        let mut o = QueryHcaVportGidOut::default();
        o.set_gids_num(indices.len() as u16);
        let mut bytes = out(&o);
        for idx in indices {
            let g = self
                .gid(idx)
                .ok_or(bad_param(syndrome::BAD_ADDRESS_INDEX))?;
            bytes.extend_from_slice(&g);
        }
        Ok(bytes)
    }

    pub(crate) fn cmd_query_hca_vport_pkey(
        &mut self,
        c: &Ctx,
        i: &QueryHcaVportPkeyIn,
    ) -> CmdResult {
        self.own_vport(i.other_vport(), i.vport_number())?;
        self.vport_port(i.port_num())?;
        let indices: Vec<usize> = if i.pkey_index() == ALL_ENTRIES {
            (0..PKEY_TABLE_ENTRIES).collect()
        } else {
            vec![i.pkey_index() as usize]
        };
        if indices.iter().any(|&x| x >= PKEY_TABLE_ENTRIES) {
            return Err(bad_param(syndrome::BAD_PKEY_INDEX));
        }
        if c.outlen < QueryHcaVportPkeyOut::SIZE + 4 * indices.len() {
            return Err(out_len_err());
        }
        let mut bytes = out(&QueryHcaVportPkeyOut::default());
        for idx in indices {
            let pkey: u32 = if idx == 0 { DEFAULT_PKEY as u32 } else { 0 };
            bytes.extend_from_slice(&pkey.to_be_bytes());
        }
        Ok(bytes)
    }

    pub(crate) fn cmd_query_vport_state(&mut self, _c: &Ctx, i: &QueryVportStateIn) -> CmdResult {
        if i.op_mod() > 2 {
            return Err(bad_param(syndrome::BAD_OP_MOD));
        }
        self.own_vport(i.other_vport(), i.vport_number())?;
        let mut o = QueryVportStateOut::default();
        o.set_admin_state(1)
            .set_state(self.port_up() as u8)
            .set_max_tx_speed(1000);
        Ok(out(&o))
    }

    pub(crate) fn cmd_set_roce_address(&mut self, _c: &Ctx, i: &SetRoceAddressIn) -> CmdResult {
        if self.state.port_type() != LinkLayer::Ethernet {
            return Err(bad_param(syndrome::WRONG_PORT_TYPE));
        }
        self.roce_port(i.vhca_port_num())?;
        let idx = i.roce_address_index() as usize;
        if idx >= self.state.roce_addrs.len() {
            return Err(bad_param(syndrome::BAD_ADDRESS_INDEX));
        }
        let a = *i.roce_address();
        let entry = if a.as_bytes().iter().all(|&b| b == 0) {
            None
        } else {
            if !matches!(a.roce_version(), 0 | 2) || a.roce_l3_type() > 1 {
                return Err(bad_param(syndrome::BAD_ROCE_VERSION));
            }
            Some(a)
        };
        self.state.roce_addrs[idx] = entry;
        Ok(out(&SetRoceAddressOut::default()))
    }

    pub(crate) fn cmd_query_roce_address(&mut self, _c: &Ctx, i: &QueryRoceAddressIn) -> CmdResult {
        if self.state.port_type() != LinkLayer::Ethernet {
            return Err(bad_param(syndrome::WRONG_PORT_TYPE));
        }
        self.roce_port(i.vhca_port_num())?;
        let Some(e) = self.state.roce_addrs.get(i.roce_address_index() as usize) else {
            return Err(bad_param(syndrome::BAD_ADDRESS_INDEX));
        };
        let mut o = QueryRoceAddressOut::default();
        *o.roce_address_mut() = e.unwrap_or(RoceAddrLayout::default());
        Ok(out(&o))
    }

    /// MAD_IFC: the firmware's subnet management agent answers SubnGet(NodeDescription),
    /// SubnGet(NodeInfo), SubnGet(GUIDInfo), SubnGet(PortInfo) and SubnGet(P_KeyTable);
    /// other subnet management MADs get the "unsupported" MAD status, MADs of other
    /// management classes (performance management, vendor classes) the "unsupported class"
    /// one: the model has no agent for them.
    pub(crate) fn cmd_mad_ifc(&mut self, _c: &Ctx, i: &MadIfcIn) -> CmdResult {
        if self.state.port_type() != LinkLayer::InfiniBand {
            return Err(bad_param(syndrome::WRONG_PORT_TYPE));
        }
        if i.port() != 1 {
            return Err(bad_param(syndrome::BAD_PORT));
        }
        if i.op_mod() > 3 {
            return Err(bad_param(syndrome::BAD_OP_MOD));
        }
        let mad = i.mad();
        let class = mad[1];
        if mad[0] != 1 {
            return Err(bad_param(syndrome::BAD_MAD));
        }
        let mut resp = *mad;
        resp[3] = 0x81; // GetResp
        let attr = u16::from_be_bytes([mad[16], mad[17]]);
        let modifier = u32::from_be_bytes([mad[20], mad[21], mad[22], mad[23]]);
        let mut status = if !matches!(class, 0x01 | 0x81) {
            MAD_STATUS_BAD_CLASS
        } else if mad[3] != 0x01 {
            MAD_STATUS_UNSUPPORTED
        } else {
            self.smp_get(attr, modifier, &mut resp[64..128])
        };
        if class == 0x81 {
            status |= 0x8000; // direction: response
        }
        resp[4..6].copy_from_slice(&status.to_be_bytes());
        let mut o = MadIfcOut::default();
        o.response_mad_packet_mut().copy_from_slice(&resp);
        Ok(out(&o))
    }

    /// The subnet management agent's answer to SubnGet(`attr`, `modifier`): fills the
    /// 64-byte SMP data and returns the MAD status. Layouts: IBA volume 1, 14.2.5.
    fn smp_get(&self, attr: u16, modifier: u32, data: &mut [u8]) -> u16 {
        let guid = self.config.node_guid();
        match attr {
            SMP_NODE_DESCRIPTION => {
                // 64 bytes of UTF-8, padded with zeros.
                data.copy_from_slice(&self.state.node_desc);
            }
            SMP_NODE_INFO => {
                data.fill(0);
                data[0] = 1; // base version
                data[1] = 1; // class version
                data[2] = 1; // node type: channel adapter
                data[3] = 1; // ports
                data[4..12].copy_from_slice(&guid.to_be_bytes()); // system image GUID
                data[12..20].copy_from_slice(&guid.to_be_bytes()); // node GUID
                data[20..28].copy_from_slice(&guid.to_be_bytes()); // port GUID
                data[28..30].copy_from_slice(&(PKEY_TABLE_ENTRIES as u16).to_be_bytes());
                data[30..32].copy_from_slice(&crate::pci::DEVICE_ID.to_be_bytes());
                data[36] = 1; // local port number
                data[37..40].copy_from_slice(&[0x00, 0x02, 0xc9]); // vendor id
            }
            SMP_GUID_INFO => {
                // Blocks of 8 GUIDs; the port GUID is entry 0 (the GID table's index 0 is
                // the subnet prefix and it), the others are unassigned.
                if modifier as usize >= IB_GID_TABLE_ENTRIES.div_ceil(8) {
                    return MAD_STATUS_BAD_ATTRIBUTE_VALUE;
                }
                data.fill(0);
                if modifier == 0 {
                    data[0..8].copy_from_slice(&guid.to_be_bytes());
                }
            }
            SMP_PORT_INFO => {
                if modifier > 1 {
                    return MAD_STATUS_BAD_ATTRIBUTE_VALUE;
                }
                self.port_info(data);
            }
            SMP_PKEY_TABLE => {
                // Blocks of 32 P_Keys; entry 0 is the default P_Key, the others invalid (0).
                if (modifier & 0xffff) as usize >= PKEY_TABLE_ENTRIES / 32 {
                    return MAD_STATUS_BAD_ATTRIBUTE_VALUE;
                }
                data.fill(0);
                if modifier & 0xffff == 0 {
                    data[0..2].copy_from_slice(&DEFAULT_PKEY.to_be_bytes());
                }
            }
            _ => return MAD_STATUS_UNSUPPORTED,
        }
        0
    }

    /// PortInfo (IBA 14.2.5.6): the port as the subnet manager configured it (LID, SM LID,
    /// state), 4X wide at EDR (an extended speed: 25.78125 Gb/s a lane), MTU 4096, one
    /// data VL, as many GUIDs as the GID table has entries.
    fn port_info(&self, data: &mut [u8]) {
        data.fill(0);
        data[8..16].copy_from_slice(&GID_PREFIX.to_be_bytes());
        data[16..18].copy_from_slice(&self.state.lid.to_be_bytes());
        data[18..20].copy_from_slice(&self.state.sm_lid.to_be_bytes());
        data[20..24].copy_from_slice(&PORT_CAPABILITY_MASK.to_be_bytes());
        data[28] = 1; // local port number
        data[29] = LINK_WIDTH_4X; // enabled
        data[30] = LINK_WIDTH_1X | LINK_WIDTH_4X; // supported
        data[31] = LINK_WIDTH_4X; // active
        let phys = if self.port_up() { 5 } else { 2 }; // LinkUp, Polling
        // LinkSpeedSupported (SDR, DDR, QDR) and the port state.
        data[32] = (0x7 << 4) | self.state.port_state.raw();
        data[33] = phys << 4;
        // LinkSpeedActive: SDR, overridden by LinkSpeedExtActive; LinkSpeedEnabled all.
        data[35] = (0x1 << 4) | 0x7;
        data[36] = 5 << 4; // neighbour MTU 4096, master SM SL 0
        data[37] = 1 << 4; // VLCap: VL0
        data[41] = 5; // MTUCap 4096
        data[43] = 1 << 4; // operational VLs: VL0
        data[50] = IB_GID_TABLE_ENTRIES as u8; // GUIDCap
        // LinkSpeedExtActive EDR, LinkSpeedExtSupported FDR and EDR; ext enabled the same.
        data[62] = (0x2 << 4) | 0x3;
        data[63] = 0x3;
    }
}

/// SMP attribute NodeDescription.
const SMP_NODE_DESCRIPTION: u16 = 0x0010;
/// SMP attribute NodeInfo.
const SMP_NODE_INFO: u16 = 0x0011;
/// SMP attribute GUIDInfo.
const SMP_GUID_INFO: u16 = 0x0014;
/// SMP attribute PortInfo.
const SMP_PORT_INFO: u16 = 0x0015;
/// SMP attribute P_KeyTable.
const SMP_PKEY_TABLE: u16 = 0x0016;
/// PortInfo link widths.
const LINK_WIDTH_1X: u8 = 1;
const LINK_WIDTH_4X: u8 = 2;
/// PortInfo's CapabilityMask: IsSystemImageGUIDSupported (bit 11) and
/// IsExtendedSpeedsSupported (bit 14).
pub const PORT_CAPABILITY_MASK: u32 = (1 << 11) | (1 << 14);
