//! Port queries and the GID table.
//!
//! InfiniBand ports are described by QUERY_HCA_VPORT_CONTEXT (state, physical state, LID,
//! SM LID and SL, LMC, GUIDs) and the subnet management agent's PortInfo through MAD_IFC
//! (MTUs); their GIDs by QUERY_HCA_VPORT_GID. Ethernet ports by QUERY_NIC_VPORT_CONTEXT
//! (MAC, MTU, GUIDs) and QUERY_VPORT_STATE (link), their GIDs by the RoCE address table
//! (QUERY_ROCE_ADDRESS), which the driver fills with SET_ROCE_ADDRESS: a standalone driver
//! has no IP stack doing it, so the application installs an entry per IP address it uses
//! ([`Hca::add_roce_gid`]).

use core::net::IpAddr;

use uhca_fwif::cmd::{
    Command, MadIfcIn, QueryHcaVportContextIn, QueryHcaVportGidIn, QueryNicVportContextIn,
    QueryRoceAddressIn, QueryVportStateIn, SetRoceAddressIn,
};
use uhca_fwif::consts::{IbMtu, PortState};
use uhca_fwif::ctx::RoceAddrLayout;
use uhca_hal::Platform;

use crate::addr::{Endpoint, Gid, Mac};
use crate::caps::LinkLayer;
use crate::error::{Arg, Error, InvalidArgument, Result};
use crate::hca::Hca;

/// `roce_version` of a RoCE address entry: RoCE v2.
const ROCE_VERSION_2: u8 = 2;
/// `roce_l3_type`: IPv4.
const ROCE_L3_IPV4: u8 = 0;
/// `roce_l3_type`: IPv6.
const ROCE_L3_IPV6: u8 = 1;
/// QUERY_VPORT_STATE `state`: up.
const VPORT_STATE_UP: u8 = 1;
/// MAD_IFC `op_mod`: ignore M_Key and B_Key (as rdma-core's tests use it).
const MAD_IFC_IGNORE_KEYS: u16 = 3;
/// Subnet management class (LID routed), SubnGet, PortInfo.
const MAD_BASE_VERSION: u8 = 1;
const MGMT_CLASS_SUBN_LID_ROUTED: u8 = 0x01;
const MAD_CLASS_VERSION: u8 = 1;
const MAD_METHOD_GET: u8 = 0x01;
const ATTR_PORT_INFO: u16 = 0x0015;
/// Offset of the attribute data in an SMP.
const SMP_DATA: usize = 64;
/// Bytes of headers a RoCEv2 packet adds beyond the IB payload MTU (GRH-sized IP header,
/// UDP, BTH, the largest extended transport header and ICRC), as Linux's `iboe_get_mtu`
/// counts them.
const ROCE_HEADERS: u32 = 40 + 8 + 12 + 4 + 28 + 4;

/// The physical port state (InfiniBand PortInfo `PortPhysicalState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhysPortState {
    /// Sleep (1).
    Sleep,
    /// Polling (2).
    Polling,
    /// Disabled (3).
    Disabled,
    /// Port configuration training (4).
    Training,
    /// Link up (5).
    LinkUp,
    /// Link error recovery (6).
    LinkErrorRecovery,
    /// PHY test (7).
    PhyTest,
    /// Another value.
    Other(u8),
}

impl PhysPortState {
    /// Decodes the 4-bit field.
    pub fn from_raw(v: u8) -> Self {
        match v {
            1 => PhysPortState::Sleep,
            2 => PhysPortState::Polling,
            3 => PhysPortState::Disabled,
            4 => PhysPortState::Training,
            5 => PhysPortState::LinkUp,
            6 => PhysPortState::LinkErrorRecovery,
            7 => PhysPortState::PhyTest,
            o => PhysPortState::Other(o),
        }
    }

    /// The raw value.
    pub fn raw(self) -> u8 {
        match self {
            PhysPortState::Sleep => 1,
            PhysPortState::Polling => 2,
            PhysPortState::Disabled => 3,
            PhysPortState::Training => 4,
            PhysPortState::LinkUp => 5,
            PhysPortState::LinkErrorRecovery => 6,
            PhysPortState::PhyTest => 7,
            PhysPortState::Other(o) => o,
        }
    }
}

impl core::fmt::Display for PhysPortState {
    /// As `ibv_devinfo` prints it.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let s = match self {
            PhysPortState::Sleep => "SLEEP",
            PhysPortState::Polling => "POLLING",
            PhysPortState::Disabled => "DISABLED",
            PhysPortState::Training => "PORT_CONFIGURATION TRAINNING",
            PhysPortState::LinkUp => "LINK_UP",
            PhysPortState::LinkErrorRecovery => "LINK_ERROR_RECOVERY",
            PhysPortState::PhyTest => "PHY TEST",
            PhysPortState::Other(v) => return write!(f, "invalid physical state ({v})"),
        };
        f.write_str(s)
    }
}

/// A port's attributes (`ibv_query_port`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// The port number.
    pub port: u8,
    /// The logical state.
    pub state: PortState,
    /// The physical state.
    pub phys_state: PhysPortState,
    /// The link layer.
    pub link_layer: LinkLayer,
    /// The port's LID (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// The subnet manager's LID (InfiniBand).
    pub sm_lid: u16,
    /// The subnet manager's service level (InfiniBand).
    pub sm_sl: u8,
    /// LID mask control (InfiniBand).
    pub lmc: u8,
    /// The active path MTU.
    pub active_mtu: IbMtu,
    /// The largest MTU the port supports.
    pub max_mtu: IbMtu,
    /// GID table entries.
    pub gid_table_len: u32,
    /// P_Key table entries.
    pub pkey_table_len: u32,
    /// The port GUID (0 if the device does not report it).
    pub port_guid: u64,
    /// The node GUID (0 if the device does not report it).
    pub node_guid: u64,
    /// The system image GUID (0 if the device does not report it).
    pub system_image_guid: u64,
    /// The MAC address (Ethernet).
    pub mac: Option<Mac>,
    /// The Ethernet MTU in bytes (Ethernet).
    pub eth_mtu: Option<u16>,
}

/// What kind of entry a GID-table entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GidType {
    /// An InfiniBand GID.
    Ib,
    /// A RoCE v1 entry.
    RoceV1,
    /// A RoCE v2 entry for an IPv4 address (the GID is IPv4-mapped).
    RoceV2Ipv4,
    /// A RoCE v2 entry for an IPv6 address.
    RoceV2Ipv6,
    /// An empty entry.
    Empty,
}

impl core::fmt::Display for GidType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            GidType::Ib => "IB",
            GidType::RoceV1 => "RoCE v1",
            GidType::RoceV2Ipv4 => "RoCE v2, IPv4",
            GidType::RoceV2Ipv6 => "RoCE v2, IPv6",
            GidType::Empty => "empty",
        })
    }
}

/// One GID-table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its kind.
    pub kind: GidType,
    /// The source MAC (RoCE).
    pub mac: Option<Mac>,
    /// The VLAN (RoCE).
    pub vlan: Option<u16>,
}

/// The largest IB MTU that fits an Ethernet MTU once RoCE's headers are taken off.
fn ib_mtu_for_eth(eth_mtu: u32) -> IbMtu {
    let payload = eth_mtu.saturating_sub(ROCE_HEADERS);
    [4096, 2048, 1024, 512]
        .into_iter()
        .find(|&m| m <= payload)
        .and_then(IbMtu::from_bytes)
        .unwrap_or(IbMtu::Mtu256)
}

impl<P: Platform> Hca<P> {
    fn check_port(&self, port: u8) -> Result<()> {
        crate::verbs::qp::port_in_range(port, self.caps().num_ports)
    }

    /// Queries a port (`ibv_query_port`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a port the HCA does not have; the commands' errors.
    pub fn query_port(&mut self, port: u8) -> Result<PortAttr> {
        self.check_port(port)?;
        match self.caps().link_layer {
            LinkLayer::InfiniBand => self.query_ib_port(port),
            LinkLayer::Ethernet => self.query_eth_port(port),
        }
    }

    /// `port_num` for QUERY_HCA_VPORT_CONTEXT, _GID and _PKEY: the port on a dual-port
    /// function, 0 (the field is reserved) on a single-port one, as Linux's
    /// `mlx5_query_hca_vport_*` (`mlx5/core/vport.c`) fill it only when `num_ports` is 2.
    fn hca_vport_port_num(&self, port: u8) -> u8 {
        if self.hca_cap().num_ports() == 2 {
            port
        } else {
            0
        }
    }

    /// `vhca_port_num` for SET_ROCE_ADDRESS and QUERY_ROCE_ADDRESS: the port on a function
    /// with vHCA ports, 0 (the field is reserved) without them, as Linux's
    /// `mlx5_core_roce_gid_set` (`mlx5/core/lib/gid.c`) fills it only when
    /// `num_vhca_ports` > 0.
    fn roce_vhca_port_num(&self, port: u8) -> u8 {
        if self.hca_cap().num_vhca_ports() > 0 {
            port
        } else {
            0
        }
    }

    fn query_ib_port(&mut self, port: u8) -> Result<PortAttr> {
        let mut q = QueryHcaVportContextIn::new_cmd();
        q.set_port_num(self.hca_vport_port_num(port));
        let out = self.cmd(&q)?;
        let c = out.hca_vport_context();
        let (active_mtu, max_mtu) = self
            .port_info_mtus(port)
            .unwrap_or((IbMtu::Mtu4096, IbMtu::Mtu4096));
        Ok(PortAttr {
            port,
            state: PortState::from_raw(c.port_state()),
            phys_state: PhysPortState::from_raw(c.port_physical_state()),
            link_layer: LinkLayer::InfiniBand,
            lid: c.lid(),
            sm_lid: c.sm_lid(),
            sm_sl: c.sm_sl(),
            lmc: c.lmc(),
            active_mtu,
            max_mtu,
            gid_table_len: self.caps().gid_table_len,
            pkey_table_len: self.caps().pkey_table_len,
            port_guid: c.port_guid(),
            node_guid: c.node_guid(),
            system_image_guid: c.system_image_guid(),
            mac: None,
            eth_mtu: None,
        })
    }

    /// NeighborMTU and MTUCap from the firmware SMA's PortInfo.
    fn port_info_mtus(&mut self, port: u8) -> Result<(IbMtu, IbMtu)> {
        let mut m = MadIfcIn::new_cmd();
        m.set_op_mod(MAD_IFC_IGNORE_KEYS);
        m.set_port(port);
        let mad = m.mad_mut();
        mad[0] = MAD_BASE_VERSION;
        mad[1] = MGMT_CLASS_SUBN_LID_ROUTED;
        mad[2] = MAD_CLASS_VERSION;
        mad[3] = MAD_METHOD_GET;
        mad[16..18].copy_from_slice(&ATTR_PORT_INFO.to_be_bytes());
        mad[20..24].copy_from_slice(&(port as u32).to_be_bytes());
        let out = self.cmd(&m)?;
        let r = out.response_mad_packet();
        let status = u16::from_be_bytes([r[4], r[5]]) & 0x7fff;
        if status != 0 {
            return Err(Error::DeviceMisbehaved("PortInfo MAD refused"));
        }
        let d = &r[SMP_DATA..];
        let neighbor = IbMtu::from_raw(d[36] >> 4);
        let cap = IbMtu::from_raw(d[41] & 0xf);
        let active = if neighbor.bytes().is_some() {
            neighbor
        } else {
            IbMtu::Mtu4096
        };
        let max = if cap.bytes().is_some() { cap } else { active };
        Ok((active, max))
    }

    fn query_eth_port(&mut self, port: u8) -> Result<PortAttr> {
        let out = self.cmd(&QueryNicVportContextIn::new_cmd())?;
        let n = out.nic_vport_context();
        let mac_hi = n.permanent_address().mac_addr_47_32().to_be_bytes();
        let mac_lo = n.permanent_address().mac_addr_31_0().to_be_bytes();
        let mac = Mac([
            mac_hi[0], mac_hi[1], mac_lo[0], mac_lo[1], mac_lo[2], mac_lo[3],
        ]);
        let eth_mtu = n.mtu();
        let (port_guid, node_guid, system_image_guid) =
            (n.port_guid(), n.node_guid(), n.system_image_guid());
        let up = self.cmd(&QueryVportStateIn::new_cmd())?.state() == VPORT_STATE_UP;
        let gid_table_len = self
            .roce_caps()
            .map_or(self.caps().gid_table_len, |r| r.address_table_len as u32);
        Ok(PortAttr {
            port,
            state: if up {
                PortState::Active
            } else {
                PortState::Down
            },
            phys_state: if up {
                PhysPortState::LinkUp
            } else {
                PhysPortState::Disabled
            },
            link_layer: LinkLayer::Ethernet,
            lid: 0,
            sm_lid: 0,
            sm_sl: 0,
            lmc: 0,
            active_mtu: ib_mtu_for_eth(eth_mtu as u32),
            max_mtu: IbMtu::Mtu4096,
            gid_table_len,
            pkey_table_len: 1,
            port_guid,
            node_guid,
            system_image_guid,
            mac: Some(mac),
            eth_mtu: Some(eth_mtu),
        })
    }

    /// Reads one GID-table entry (`ibv_query_gid`, `ibv_query_gid_ex`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a port the HCA does not have; the command's error
    /// (an index outside the table is BAD_PARAM).
    pub fn query_gid(&mut self, port: u8, index: u16) -> Result<GidEntry> {
        self.check_port(port)?;
        match self.caps().link_layer {
            LinkLayer::InfiniBand => {
                let mut q = QueryHcaVportGidIn::new_cmd();
                q.set_port_num(self.hca_vport_port_num(port));
                q.set_gid_index(index);
                let mut gid = [0u8; 16];
                self.exec(&q, &[], &mut gid)?;
                let gid = Gid(gid);
                Ok(GidEntry {
                    gid,
                    kind: if gid.is_zero() {
                        GidType::Empty
                    } else {
                        GidType::Ib
                    },
                    mac: None,
                    vlan: None,
                })
            }
            LinkLayer::Ethernet => {
                let mut q = QueryRoceAddressIn::new_cmd();
                q.set_roce_address_index(index);
                q.set_vhca_port_num(self.roce_vhca_port_num(port));
                let out = self.cmd(&q)?;
                let a = out.roce_address();
                let mut gid = [0u8; 16];
                gid.copy_from_slice(a.source_l3_address());
                let gid = Gid(gid);
                if gid.is_zero() {
                    return Ok(GidEntry {
                        gid,
                        kind: GidType::Empty,
                        mac: None,
                        vlan: None,
                    });
                }
                let kind = match (a.roce_version(), a.roce_l3_type()) {
                    (ROCE_VERSION_2, ROCE_L3_IPV4) => GidType::RoceV2Ipv4,
                    (ROCE_VERSION_2, _) => GidType::RoceV2Ipv6,
                    // Version 0: RoCE v1 (reported, never installed by this driver).
                    _ => GidType::RoceV1,
                };
                let hi = a.source_mac_47_32().to_be_bytes();
                let lo = a.source_mac_31_0().to_be_bytes();
                Ok(GidEntry {
                    gid,
                    kind,
                    mac: Some(Mac([hi[0], hi[1], lo[0], lo[1], lo[2], lo[3]])),
                    vlan: a.vlan_valid().then(|| a.vlan_id()),
                })
            }
        }
    }

    /// Installs a RoCEv2 GID-table entry for `ip` at `index` (SET_ROCE_ADDRESS, version 2,
    /// L3 type IPv4 or IPv6; an IPv4 address becomes the IPv4-mapped GID
    /// `::ffff:a.b.c.d`). `mac` is the port's source MAC, `vlan` the VLAN the address
    /// lives on. Returns the GID.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a port the HCA does not have, an index outside the
    /// table, a VLAN id above 4095 or an unspecified address, and [`Error::Unsupported`]
    /// on InfiniBand ports or devices without RoCEv2 (no command is sent); the command's
    /// error.
    pub fn add_roce_gid(
        &mut self,
        port: u8,
        index: u16,
        ip: IpAddr,
        mac: Mac,
        vlan: Option<u16>,
    ) -> Result<Gid> {
        self.check_port(port)?;
        let Some(roce) = self.roce_caps() else {
            return Err(Error::Unsupported("RoCE (no RoCE capabilities)"));
        };
        if self.caps().link_layer != LinkLayer::Ethernet {
            return Err(Error::Unsupported("RoCE GIDs on an InfiniBand port"));
        }
        if !roce.v2() {
            return Err(Error::Unsupported("RoCE v2"));
        }
        if index >= roce.address_table_len {
            return Err(InvalidArgument::max(
                Arg::GidIndex,
                index.into(),
                u64::from(roce.address_table_len).saturating_sub(1),
            )
            .into());
        }
        if let Some(v) = vlan.filter(|&v| v > 0xfff) {
            return Err(InvalidArgument::max(Arg::VlanId, v.into(), 0xfff).into());
        }
        if ip.is_unspecified() {
            return Err(InvalidArgument::rule(
                Arg::IpAddress,
                0,
                "the unspecified address (0.0.0.0 or ::) names no interface",
            )
            .into());
        }
        let (gid, l3) = match ip {
            IpAddr::V4(v4) => (Gid::from_ipv4(v4.octets()), ROCE_L3_IPV4),
            IpAddr::V6(v6) => (Gid(v6.octets()), ROCE_L3_IPV6),
        };
        let mut a = RoceAddrLayout::default();
        a.source_l3_address_mut().copy_from_slice(&gid.0);
        let m = mac.0;
        a.set_source_mac_47_32(u16::from_be_bytes([m[0], m[1]]))
            .set_source_mac_31_0(u32::from_be_bytes([m[2], m[3], m[4], m[5]]))
            .set_roce_l3_type(l3)
            .set_roce_version(ROCE_VERSION_2);
        if let Some(v) = vlan {
            a.set_vlan_valid(true).set_vlan_id(v);
        }
        self.set_roce_address(port, index, a)?;
        Ok(gid)
    }

    /// Installs the RoCEv2 GID of `ip` at `index` on `port` with the port's own MAC address
    /// and no VLAN: [`Hca::add_roce_gid`] for the common case of an address on the port
    /// itself. Under VFIO no kernel driver fills the GID table, so a RoCE application
    /// installs the address it uses before it connects. Returns the GID.
    ///
    /// ```no_run
    /// # fn f<P: uhca_driver::Platform>(hca: &mut uhca_driver::Hca<P>) -> uhca_driver::Result<()> {
    /// let gid = hca.add_roce_ip(1, 0, "10.0.0.1".parse().unwrap())?;
    /// assert_eq!(gid.ipv4(), Some([10, 0, 0, 1]));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Hca::add_roce_gid`]; [`Error::DeviceMisbehaved`] if the Ethernet port reports
    /// no MAC address.
    pub fn add_roce_ip(&mut self, port: u8, index: u16, ip: IpAddr) -> Result<Gid> {
        self.check_port(port)?;
        if self.caps().link_layer != LinkLayer::Ethernet {
            return Err(Error::Unsupported("RoCE GIDs on an InfiniBand port"));
        }
        let mac = self.query_port(port)?.mac.ok_or(Error::DeviceMisbehaved(
            "an Ethernet port reported no MAC address",
        ))?;
        self.add_roce_gid(port, index, ip, mac, None)
    }

    /// What a peer needs to reach `port` ([`Endpoint`]): its link layer, LID, MAC, and the
    /// GID at `gid_index` (the source GID of this side's paths). Send it to the peer, and
    /// build the path to the peer with [`Endpoint::path_to`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a port the HCA does not have, and on Ethernet for an
    /// empty GID entry (install one with [`Hca::add_roce_ip`] first: no kernel driver fills
    /// the table under VFIO); the query commands' errors.
    pub fn endpoint(&mut self, port: u8, gid_index: u8) -> Result<Endpoint> {
        let attr = self.query_port(port)?;
        let gid = self.query_gid(port, u16::from(gid_index))?.gid;
        if attr.link_layer == LinkLayer::Ethernet && gid.is_zero() {
            return Err(InvalidArgument::rule(
                Arg::GidIndex,
                gid_index.into(),
                "the RoCE GID entry is empty: install the port's IP address first (Hca::add_roce_ip)",
            )
            .into());
        }
        Ok(Endpoint {
            link_layer: attr.link_layer,
            lid: attr.lid,
            gid,
            mac: attr.mac.unwrap_or_default(),
            gid_index,
        })
    }

    /// Clears a RoCE GID-table entry (SET_ROCE_ADDRESS with an all-zero address).
    ///
    /// # Errors
    ///
    /// As [`Hca::add_roce_gid`].
    pub fn del_roce_gid(&mut self, port: u8, index: u16) -> Result<()> {
        self.check_port(port)?;
        if self.caps().link_layer != LinkLayer::Ethernet {
            return Err(Error::Unsupported("RoCE GIDs on an InfiniBand port"));
        }
        self.set_roce_address(port, index, RoceAddrLayout::default())
    }

    fn set_roce_address(&mut self, port: u8, index: u16, a: RoceAddrLayout) -> Result<()> {
        let mut s = SetRoceAddressIn::new_cmd();
        s.set_roce_address_index(index);
        s.set_vhca_port_num(self.roce_vhca_port_num(port));
        *s.roce_address_mut() = a;
        self.cmd(&s)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roce_mtu_from_ethernet_mtu() {
        assert_eq!(ib_mtu_for_eth(1500), IbMtu::Mtu1024);
        assert_eq!(ib_mtu_for_eth(9000), IbMtu::Mtu4096);
        assert_eq!(ib_mtu_for_eth(4200), IbMtu::Mtu4096);
        assert_eq!(ib_mtu_for_eth(4000), IbMtu::Mtu2048);
    }
}
