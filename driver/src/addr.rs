//! Addressing: GIDs, MAC addresses and address handles for InfiniBand and RoCEv2, and their
//! encoding into the two places the PRM carries a path: the QP context's address path
//! (`ads`, for RC and UC) and the UD address vector (`mlx5_av`, per send WQE).

use uhca_fwif::ctx::Ads;
use uhca_fwif::wqe::Av;

/// A 128-bit global identifier (an IPv6 address for RoCEv2; an IPv4 address is carried as an
/// IPv4-mapped IPv6 address, `::ffff:a.b.c.d`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The all-zero GID (an empty GID-table entry).
    pub const ZERO: Gid = Gid([0; 16]);

    /// The IPv4-mapped GID of an IPv4 address.
    pub const fn from_ipv4(ip: [u8; 4]) -> Gid {
        Gid([
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ip[0], ip[1], ip[2], ip[3],
        ])
    }

    /// The IPv4 address if this is an IPv4-mapped GID.
    pub fn ipv4(&self) -> Option<[u8; 4]> {
        let g = &self.0;
        (g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff)
            .then(|| [g[12], g[13], g[14], g[15]])
    }

    /// A GID from its subnet prefix and interface id (InfiniBand).
    pub const fn from_parts(subnet_prefix: u64, interface_id: u64) -> Gid {
        let p = subnet_prefix.to_be_bytes();
        let i = interface_id.to_be_bytes();
        Gid([
            p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], i[0], i[1], i[2], i[3], i[4], i[5],
            i[6], i[7],
        ])
    }

    /// Whether this is the all-zero GID.
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|&b| b == 0)
    }
}

impl core::fmt::Display for Gid {
    /// Formats like `ibv_devinfo`: eight colon-separated groups of four hex digits.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

/// An Ethernet MAC address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Mac(pub [u8; 6]);

impl core::fmt::Display for Mac {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let m = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// The global route header fields of an InfiniBand path that leaves the subnet (or that
/// the peer requires).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grh {
    /// Destination GID.
    pub dgid: Gid,
    /// Index of the source GID in the local port's GID table.
    pub sgid_index: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// Where a packet goes: the verbs address handle, for InfiniBand or RoCEv2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressHandle {
    /// A native InfiniBand destination.
    Ib {
        /// Destination LID.
        dlid: u16,
        /// Service level (4 bits).
        sl: u8,
        /// Source path bits (the low LMC bits of the source LID, 7 bits).
        src_path_bits: u8,
        /// Static rate (4 bits, 0 = port rate).
        static_rate: u8,
        /// Global route header, if the path needs one.
        grh: Option<Grh>,
    },
    /// A RoCEv2 destination (UDP/IP, always with a GRH-equivalent IP header).
    RoceV2 {
        /// Index of the source GID (whose entry is a RoCEv2 entry for the local IP).
        sgid_index: u8,
        /// Destination GID (an IPv6 address or an IPv4-mapped one).
        dgid: Gid,
        /// Destination MAC (the next hop's).
        dmac: Mac,
        /// UDP source port (ECMP entropy; 49152–65535 is usual).
        udp_sport: u16,
        /// IP traffic class: DSCP in bits 7:2, ECN in 1:0.
        traffic_class: u8,
        /// IP hop limit / TTL.
        hop_limit: u8,
        /// IPv6 flow label (20 bits).
        flow_label: u32,
        /// Service level, carried as the Ethernet priority (3 bits).
        sl: u8,
    },
}

/// `mlx5_av.rlid`/`ads` carries the UDP source port of a RoCEv2 path in the same 16 bits as
/// the LID.
const FLOW_LABEL_MASK: u32 = 0x000f_ffff;

impl AddressHandle {
    /// Writes this path into a QP context's address path (`ads`), as INIT2RTR wants it.
    /// `port` is the HCA port number (from 1).
    pub fn write_ads(&self, ads: &mut Ads, port: u8) {
        ads.set_vhca_port_num(port);
        match *self {
            AddressHandle::Ib {
                dlid,
                sl,
                src_path_bits,
                static_rate,
                grh,
            } => {
                ads.set_rlid(dlid)
                    .set_sl(sl)
                    .set_mlid(src_path_bits)
                    .set_stat_rate(static_rate);
                if let Some(g) = grh {
                    ads.set_grh(true)
                        .set_src_addr_index(g.sgid_index)
                        .set_hop_limit(g.hop_limit)
                        .set_tclass(g.traffic_class)
                        .set_flow_label(g.flow_label & FLOW_LABEL_MASK);
                    *ads.rgid_rip_mut() = g.dgid.0;
                }
            }
            AddressHandle::RoceV2 {
                sgid_index,
                dgid,
                dmac,
                udp_sport,
                traffic_class,
                hop_limit,
                flow_label,
                sl,
            } => {
                // RoCE packets always carry an IP header: the `grh` bit is for InfiniBand
                // only. DSCP comes from the traffic class; ECN is the HCA's to set.
                ads.set_src_addr_index(sgid_index)
                    .set_hop_limit(hop_limit)
                    .set_tclass(traffic_class)
                    .set_flow_label(flow_label & FLOW_LABEL_MASK)
                    .set_udp_sport(udp_sport)
                    .set_dscp(traffic_class >> 2)
                    .set_eth_prio(sl & 7);
                *ads.rgid_rip_mut() = dgid.0;
                let m = dmac.0;
                ads.set_rmac_47_32(u16::from_be_bytes([m[0], m[1]]))
                    .set_rmac_31_0(u32::from_be_bytes([m[2], m[3], m[4], m[5]]));
            }
        }
    }

    /// Writes this path into a UD address vector, for a destination QP and Q_Key.
    pub fn write_av(&self, av: &mut Av, dqpn: u32, qkey: u32) {
        av.qkey = qkey.into();
        match *self {
            AddressHandle::Ib {
                dlid,
                sl,
                src_path_bits,
                static_rate,
                grh,
            } => {
                av.stat_rate_sl = (static_rate << 4) | (sl & 0xf);
                av.fl_mlid = src_path_bits & 0x7f;
                av.rlid = dlid.into();
                // Always the extended (48-byte) form, GRH or not, as libmlx5 and Linux
                // write it: with bit 31 clear the HCA takes the first 16 bytes as the compact
                // AV and reads the rest of this one as data segments.
                av.dqp_dct = (Av::EXTENDED_UD_AV | (dqpn & 0x00ff_ffff)).into();
                match grh {
                    Some(g) => {
                        av.tclass = g.traffic_class;
                        av.hop_limit = g.hop_limit;
                        av.grh_gid_fl = (Av::GRH_GID_FL_GRH
                            | ((g.sgid_index as u32) << Av::GRH_GID_FL_SGID_INDEX_SHIFT)
                            | (g.flow_label & FLOW_LABEL_MASK))
                            .into();
                        av.rgid = g.dgid.0;
                    }
                    None => {}
                }
            }
            AddressHandle::RoceV2 {
                sgid_index,
                dgid,
                dmac,
                udp_sport,
                traffic_class,
                hop_limit,
                flow_label,
                sl,
            } => {
                // As rdma-core's mlx5 provider encodes a RoCE address vector: priority in
                // stat_rate_sl bits 3:1, the UDP source port where InfiniBand has the LID,
                // and no GRH bit (the IP header is implied by the source GID's type).
                av.dqp_dct = (Av::EXTENDED_UD_AV | (dqpn & 0x00ff_ffff)).into();
                av.stat_rate_sl = (sl & 0x7) << 1;
                av.rlid = udp_sport.into();
                av.rmac = dmac.0;
                av.tclass = traffic_class;
                av.hop_limit = hop_limit;
                av.grh_gid_fl = (((sgid_index as u32) << Av::GRH_GID_FL_SGID_INDEX_SHIFT)
                    | (flow_label & FLOW_LABEL_MASK))
                    .into();
                av.rgid = dgid.0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uhca_fwif::zerocopy::IntoBytes;

    #[test]
    fn gid_forms() {
        let g = Gid::from_ipv4([192, 168, 1, 7]);
        assert_eq!(g.ipv4(), Some([192, 168, 1, 7]));
        extern crate std;
        use std::string::ToString;
        assert_eq!(g.to_string(), "0000:0000:0000:0000:0000:ffff:c0a8:0107");
        assert_eq!(Gid::from_parts(0xfe80 << 48, 1).ipv4(), None);
        assert_eq!(Gid::from_parts(0xfe80 << 48, 1).0[0..2], [0xfe, 0x80]);
    }

    #[test]
    fn roce_path_lands_in_the_prm_fields() {
        let ah = AddressHandle::RoceV2 {
            sgid_index: 3,
            dgid: Gid::from_ipv4([10, 0, 0, 2]),
            dmac: Mac([0x02, 0, 0, 0, 0, 0x22]),
            udp_sport: 0xc000,
            traffic_class: (26 << 2) | 1,
            hop_limit: 64,
            flow_label: 0,
            sl: 3,
        };
        let mut ads = Ads::default();
        ah.write_ads(&mut ads, 1);
        let b = ads.as_bytes();
        // ads: grh bit 40 (byte 5, 0x80, clear on RoCE); src_addr_index byte 9; hop_limit
        // byte 11;
        // rgid_rip bytes 16..32; udp_sport bytes 34..36; vhca_port_num byte 37;
        // rmac_47_32 bytes 38..40, rmac_31_0 bytes 40..44.
        assert_eq!(b[5] & 0x80, 0, "no grh bit on RoCE");
        assert_eq!(b[9], 3, "src_addr_index");
        assert_eq!(b[11], 64, "hop_limit");
        assert_eq!(&b[16..32], &Gid::from_ipv4([10, 0, 0, 2]).0);
        assert_eq!(&b[34..36], &[0xc0, 0x00]);
        assert_eq!(b[37], 1);
        assert_eq!(&b[38..44], &[0x02, 0, 0, 0, 0, 0x22]);
        assert_eq!(ads.dscp(), 26);
        assert_eq!(ads.ecn(), 0, "ECN is the HCA's");
        // RoCE carries the service level as the Ethernet priority (bits 30:28 of dword 9).
        assert_eq!((ads.eth_prio(), ads.sl()), (3, 0));

        let mut av = Av::default();
        ah.write_av(&mut av, 0x12, 0x1111_1111);
        assert_eq!(av.dqpn(), 0x12);
        assert_eq!(av.dqp_dct.get() & Av::EXTENDED_UD_AV, Av::EXTENDED_UD_AV);
        assert_eq!(av.sgid_index(), 3);
        assert_eq!(av.rlid.get(), 0xc000);
        assert_eq!(av.grh_gid_fl.get() & Av::GRH_GID_FL_GRH, 0);
        assert_eq!(av.stat_rate_sl, 3 << 1);
    }

    #[test]
    fn ib_path_without_grh() {
        let ah = AddressHandle::Ib {
            dlid: 0x11,
            sl: 5,
            src_path_bits: 0,
            static_rate: 0,
            grh: None,
        };
        let mut av = Av::default();
        ah.write_av(&mut av, 0x99, 0x8001_0000);
        assert_eq!(
            av.dqp_dct.get(),
            Av::EXTENDED_UD_AV | 0x99,
            "the extended AV even without a GRH"
        );
        assert_eq!(av.grh_gid_fl.get() & Av::GRH_GID_FL_GRH, 0, "no GRH");
        assert_eq!(av.rlid.get(), 0x11);
        assert_eq!(av.sl(), 5);
        assert_eq!(av.fl_mlid, 0);
        let mut ads = Ads::default();
        ah.write_ads(&mut ads, 2);
        assert_eq!(
            (ads.rlid(), ads.sl(), ads.grh(), ads.vhca_port_num()),
            (0x11, 5, false, 2)
        );
    }

    #[test]
    fn ib_path_with_grh_sets_the_grh_bit_and_sgid_index() {
        let grh = Grh {
            dgid: Gid::from_parts(0xfe80 << 48, 7),
            sgid_index: 2,
            flow_label: 0x12345,
            hop_limit: 9,
            traffic_class: 4,
        };
        let ah = AddressHandle::Ib {
            dlid: 3,
            sl: 1,
            src_path_bits: 1,
            static_rate: 0,
            grh: Some(grh),
        };
        let mut av = Av::default();
        ah.write_av(&mut av, 0x44, 0);
        // grh_gid_fl = 1 << 30 | 2 << 20 | 0x12345, as rdma-core's mlx5 provider builds it.
        assert_eq!(av.grh_gid_fl.get(), (1 << 30) | (2 << 20) | 0x12345);
        assert_eq!(
            (av.sgid_index(), av.flow_label(), av.fl_mlid),
            (2, 0x12345, 1)
        );
        let mut ads = Ads::default();
        ah.write_ads(&mut ads, 1);
        assert!(ads.grh());
        assert_eq!(
            (ads.src_addr_index(), ads.flow_label(), ads.hop_limit()),
            (2, 0x12345, 9)
        );
        assert_eq!(ads.rgid_rip(), &grh.dgid.0);
    }
}
