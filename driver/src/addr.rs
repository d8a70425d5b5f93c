//! Addressing: GIDs, MAC addresses and address handles for InfiniBand and RoCEv2, and their
//! encoding into the two places the PRM carries a path: the QP context's address path
//! (`ads`, for RC and UC) and the UD address vector (`mlx5_av`, per send WQE).

use uhca_fwif::ctx::Ads;
use uhca_fwif::wqe::Av;

use crate::caps::LinkLayer;

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

/// The static rate of a path (`ibv_rate`; the InfiniBand specification's rate
/// enumeration): how fast the HCA may inject packets towards this destination.
///
/// The HCA takes its own encoding (the PRM's `stat_rate`: 0 unlimited, 7–15 for 2.5 to
/// 120 Gb/s, 1–6 for the later 56, 25, 100, 200, 50 and 400 Gb/s) and supports a subset,
/// listed in the capability `stat_rate_support`. [`StaticRate::to_prm`] maps a rate to the
/// fastest supported rate not above it, as Linux's `mlx5_ib` clamps it (Linux walks down
/// the enumeration's numbers; this walks down the speeds, so it never picks a faster rate
/// than asked).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StaticRate {
    /// No limit: the port's rate (`IBV_RATE_MAX`).
    #[default]
    PortCurrent,
    /// 2.5 Gb/s.
    Gbps2_5,
    /// 5 Gb/s.
    Gbps5,
    /// 10 Gb/s.
    Gbps10,
    /// 14 Gb/s.
    Gbps14,
    /// 20 Gb/s.
    Gbps20,
    /// 25 Gb/s.
    Gbps25,
    /// 28 Gb/s.
    Gbps28,
    /// 30 Gb/s.
    Gbps30,
    /// 40 Gb/s.
    Gbps40,
    /// 50 Gb/s.
    Gbps50,
    /// 56 Gb/s.
    Gbps56,
    /// 60 Gb/s.
    Gbps60,
    /// 80 Gb/s.
    Gbps80,
    /// 100 Gb/s.
    Gbps100,
    /// 112 Gb/s.
    Gbps112,
    /// 120 Gb/s.
    Gbps120,
    /// 168 Gb/s.
    Gbps168,
    /// 200 Gb/s.
    Gbps200,
    /// 300 Gb/s.
    Gbps300,
    /// 400 Gb/s.
    Gbps400,
    /// 600 Gb/s.
    Gbps600,
    /// 800 Gb/s.
    Gbps800,
    /// 1200 Gb/s.
    Gbps1200,
}

/// Each PRM `stat_rate` code (1–15) with its rate in Mb/s.
const PRM_STAT_RATES: [(u8, u32); 15] = [
    (7, 2_500),
    (10, 5_000),
    (8, 10_000),
    (11, 20_000),
    (2, 25_000),
    (9, 30_000),
    (12, 40_000),
    (5, 50_000),
    (1, 56_000),
    (13, 60_000),
    (14, 80_000),
    (3, 100_000),
    (15, 120_000),
    (4, 200_000),
    (6, 400_000),
];

impl StaticRate {
    /// Every rate, slowest first (after [`StaticRate::PortCurrent`]).
    pub const ALL: [StaticRate; 24] = [
        StaticRate::PortCurrent,
        StaticRate::Gbps2_5,
        StaticRate::Gbps5,
        StaticRate::Gbps10,
        StaticRate::Gbps14,
        StaticRate::Gbps20,
        StaticRate::Gbps25,
        StaticRate::Gbps28,
        StaticRate::Gbps30,
        StaticRate::Gbps40,
        StaticRate::Gbps50,
        StaticRate::Gbps56,
        StaticRate::Gbps60,
        StaticRate::Gbps80,
        StaticRate::Gbps100,
        StaticRate::Gbps112,
        StaticRate::Gbps120,
        StaticRate::Gbps168,
        StaticRate::Gbps200,
        StaticRate::Gbps300,
        StaticRate::Gbps400,
        StaticRate::Gbps600,
        StaticRate::Gbps800,
        StaticRate::Gbps1200,
    ];

    /// The rate in Mb/s; `None` for [`StaticRate::PortCurrent`].
    pub const fn mbps(self) -> Option<u32> {
        Some(match self {
            StaticRate::PortCurrent => return None,
            StaticRate::Gbps2_5 => 2_500,
            StaticRate::Gbps5 => 5_000,
            StaticRate::Gbps10 => 10_000,
            StaticRate::Gbps14 => 14_000,
            StaticRate::Gbps20 => 20_000,
            StaticRate::Gbps25 => 25_000,
            StaticRate::Gbps28 => 28_000,
            StaticRate::Gbps30 => 30_000,
            StaticRate::Gbps40 => 40_000,
            StaticRate::Gbps50 => 50_000,
            StaticRate::Gbps56 => 56_000,
            StaticRate::Gbps60 => 60_000,
            StaticRate::Gbps80 => 80_000,
            StaticRate::Gbps100 => 100_000,
            StaticRate::Gbps112 => 112_000,
            StaticRate::Gbps120 => 120_000,
            StaticRate::Gbps168 => 168_000,
            StaticRate::Gbps200 => 200_000,
            StaticRate::Gbps300 => 300_000,
            StaticRate::Gbps400 => 400_000,
            StaticRate::Gbps600 => 600_000,
            StaticRate::Gbps800 => 800_000,
            StaticRate::Gbps1200 => 1_200_000,
        })
    }

    /// The rate of a verbs/InfiniBand rate value (`ibv_rate`: 0 port rate, 2 = 2.5 Gb/s,
    /// 3 = 10 Gb/s, …, 24 = 1200 Gb/s); `None` for a value that names no rate (1, > 24).
    pub const fn from_ibv(v: u8) -> Option<StaticRate> {
        Some(match v {
            0 => StaticRate::PortCurrent,
            2 => StaticRate::Gbps2_5,
            3 => StaticRate::Gbps10,
            4 => StaticRate::Gbps30,
            5 => StaticRate::Gbps5,
            6 => StaticRate::Gbps20,
            7 => StaticRate::Gbps40,
            8 => StaticRate::Gbps60,
            9 => StaticRate::Gbps80,
            10 => StaticRate::Gbps120,
            11 => StaticRate::Gbps14,
            12 => StaticRate::Gbps56,
            13 => StaticRate::Gbps112,
            14 => StaticRate::Gbps168,
            15 => StaticRate::Gbps25,
            16 => StaticRate::Gbps100,
            17 => StaticRate::Gbps200,
            18 => StaticRate::Gbps300,
            19 => StaticRate::Gbps28,
            20 => StaticRate::Gbps50,
            21 => StaticRate::Gbps400,
            22 => StaticRate::Gbps600,
            23 => StaticRate::Gbps800,
            24 => StaticRate::Gbps1200,
            _ => return None,
        })
    }

    /// The PRM `stat_rate` code for this rate on a device whose `stat_rate_support` is
    /// `support` (bit n set: code n supported): the fastest supported code whose rate is
    /// not above this one, 0 (unlimited) for [`StaticRate::PortCurrent`] or when none is.
    pub fn to_prm(self, support: u16) -> u8 {
        let Some(limit) = self.mbps() else {
            return 0;
        };
        PRM_STAT_RATES
            .iter()
            .rev()
            .find(|&&(code, mbps)| mbps <= limit && support & (1 << code) != 0)
            .map_or(0, |&(code, _)| code)
    }
}

/// Where a packet goes (`ibv_ah_attr`), for InfiniBand or RoCEv2: the attributes of an
/// address handle ([`Ah`](crate::verbs::Ah) is the handle made of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AhAttr {
    /// A native InfiniBand destination.
    Ib {
        /// Destination LID.
        dlid: u16,
        /// Service level (4 bits).
        sl: u8,
        /// Source path bits (the low LMC bits of the source LID, 7 bits).
        src_path_bits: u8,
        /// Static rate (mapped to the device's encoding and its supported rates when the
        /// path is written).
        static_rate: StaticRate,
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

impl AhAttr {
    /// Writes this path into a QP context's address path (`ads`), as INIT2RTR wants it.
    /// `port` is the HCA port number (from 1); `stat_rate_support` the device's capability
    /// of that name (see [`StaticRate::to_prm`]).
    pub fn write_ads(&self, ads: &mut Ads, port: u8, stat_rate_support: u16) {
        ads.set_vhca_port_num(port);
        match *self {
            AhAttr::Ib {
                dlid,
                sl,
                src_path_bits,
                static_rate,
                grh,
            } => {
                ads.set_rlid(dlid)
                    .set_sl(sl)
                    .set_mlid(src_path_bits)
                    .set_stat_rate(static_rate.to_prm(stat_rate_support));
                if let Some(g) = grh {
                    ads.set_grh(true)
                        .set_src_addr_index(g.sgid_index)
                        .set_hop_limit(g.hop_limit)
                        .set_tclass(g.traffic_class)
                        .set_flow_label(g.flow_label & FLOW_LABEL_MASK);
                    *ads.rgid_rip_mut() = g.dgid.0;
                }
            }
            AhAttr::RoceV2 {
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

    /// Writes this path into a UD address vector, for a destination QP and Q_Key, on a
    /// device whose capability `stat_rate_support` is given (see [`StaticRate::to_prm`]).
    pub fn write_av(&self, av: &mut Av, dqpn: u32, qkey: u32, stat_rate_support: u16) {
        av.qkey = qkey.into();
        match *self {
            AhAttr::Ib {
                dlid,
                sl,
                src_path_bits,
                static_rate,
                grh,
            } => {
                av.stat_rate_sl = (static_rate.to_prm(stat_rate_support) << 4) | (sl & 0xf);
                av.fl_mlid = src_path_bits & 0x7f;
                av.rlid = dlid.into();
                // Always the extended (48-byte) form, GRH or not, as libmlx5 and Linux
                // write it: with bit 31 clear the HCA takes the first 16 bytes as the compact
                // AV and reads the rest of this one as data segments.
                av.dqp_dct = (Av::EXTENDED_UD_AV | (dqpn & 0x00ff_ffff)).into();
                if let Some(g) = grh {
                    av.tclass = g.traffic_class;
                    av.hop_limit = g.hop_limit;
                    av.grh_gid_fl = (Av::GRH_GID_FL_GRH
                        | ((g.sgid_index as u32) << Av::GRH_GID_FL_SGID_INDEX_SHIFT)
                        | (g.flow_label & FLOW_LABEL_MASK))
                        .into();
                    av.rgid = g.dgid.0;
                }
            }
            AhAttr::RoceV2 {
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

/// The lowest UDP source port of a RoCEv2 packet that carries flow entropy (the IB
/// specification's annex A17 range 0xC000-0xFFFF; rdma-core's
/// `IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`, `libibverbs/verbs.h:3797`).
pub const ROCE_UDP_SPORT_MIN: u16 = 0xc000;

/// The UDP source port of a RoCEv2 path whose flow label is `flow_label` (20 bits): the
/// label's low 14 bits, XORed with its high 6 bits, in the range 0xC000-0xFFFF. This is
/// rdma-core's `ibv_flow_label_to_udp_sport` (`libibverbs/verbs.h:3801`), which libmlx5's
/// `mlx5_ah_set_udp_sport` uses for an address handle with a flow label
/// (`providers/mlx5/verbs.c:3479-3481`), and Linux's `rdma_flow_label_to_udp_sport`
/// (`include/rdma/ib_verbs.h`).
pub const fn udp_sport_from_flow_label(flow_label: u32) -> u16 {
    let fl = flow_label & FLOW_LABEL_MASK;
    let low = (fl & 0x3fff) ^ (fl >> 14);
    (low as u16) | ROCE_UDP_SPORT_MIN
}

/// The flow label Linux gives a connection whose flow label is zero, from its two QP
/// numbers: their product folded to 20 bits (`rdma_calc_flow_label`,
/// `include/rdma/ib_verbs.h`). The product is symmetric, so both ends of a connection
/// compute the same label, and so the same UDP source port.
pub const fn flow_label_from_qpns(local_qpn: u32, remote_qpn: u32) -> u32 {
    let mut v = local_qpn as u64 * remote_qpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v as u32) & FLOW_LABEL_MASK
}

impl AhAttr {
    /// The hop limit of [`AhAttr::roce_v2`]: 64, the IP default TTL (Linux's
    /// `sysctl_ip_default_ttl` and `IPV6_DEFAULT_HOPLIMIT`).
    pub const DEFAULT_HOP_LIMIT: u8 = 64;

    /// A RoCEv2 path from the local GID at `sgid_index` to `dgid` through the next hop
    /// `dmac`, for a connection between `local_qpn` and `remote_qpn` (RC or UC): traffic
    /// class 0, hop limit 64, service level 0, flow label 0, and the UDP source port derived
    /// as Linux's `mlx5_ib` derives it for a connected QP whose flow label is zero
    /// (`mlx5_set_path_udp_sport` in `drivers/infiniband/hw/mlx5/qp.c`, which calls
    /// `rdma_get_udp_sport(fl, lqpn, rqpn)`): the flow label of the two QP numbers
    /// ([`flow_label_from_qpns`]) turned into a port ([`udp_sport_from_flow_label`]). Both
    /// ends get the same port, so both directions of the connection hash alike in ECMP.
    ///
    /// For an address handle of a UD QP, libmlx5 picks a random port in 0xC000-0xFFFF when
    /// the flow label is zero (`mlx5_ah_set_udp_sport`, `providers/mlx5/verbs.c:3482-3485`);
    /// this constructor stays deterministic: pass the two QP numbers of the exchange, or
    /// set a flow label with [`AhAttr::with_flow_label`].
    ///
    /// ```
    /// use uhca_driver::addr::{AhAttr, Gid, Mac};
    /// let ah = AhAttr::roce_v2(0, Gid::from_ipv4([10, 0, 0, 2]), Mac([2, 0, 0, 0, 0, 2]), 0x104, 0x105);
    /// assert_eq!(ah.udp_sport(), Some(0xc910)); // flow label 0x104 * 0x105 = 0x10914
    /// ```
    pub const fn roce_v2(
        sgid_index: u8,
        dgid: Gid,
        dmac: Mac,
        local_qpn: u32,
        remote_qpn: u32,
    ) -> AhAttr {
        AhAttr::RoceV2 {
            sgid_index,
            dgid,
            dmac,
            udp_sport: udp_sport_from_flow_label(flow_label_from_qpns(local_qpn, remote_qpn)),
            traffic_class: 0,
            hop_limit: Self::DEFAULT_HOP_LIMIT,
            flow_label: 0,
            sl: 0,
        }
    }

    /// A native InfiniBand path to `dlid` inside the subnet: service level 0, source path
    /// bits 0, the port's rate, no GRH (what `ibv_rc_pingpong` builds without `-g`). Add a
    /// service level with [`AhAttr::with_sl`].
    pub const fn ib(dlid: u16) -> AhAttr {
        AhAttr::Ib {
            dlid,
            sl: 0,
            src_path_bits: 0,
            static_rate: StaticRate::PortCurrent,
            grh: None,
        }
    }

    /// The same path with service level `sl` (4 bits on InfiniBand; on RoCE the Ethernet
    /// priority, 3 bits: the higher bits are dropped when the path is written, as libmlx5
    /// and Linux drop them).
    pub const fn with_sl(mut self, sl: u8) -> AhAttr {
        match &mut self {
            AhAttr::Ib { sl: s, .. } | AhAttr::RoceV2 { sl: s, .. } => *s = sl,
        }
        self
    }

    /// The same path with the flow label `flow_label` (20 bits; higher bits are dropped).
    /// On RoCEv2 a non-zero label also sets the UDP source port from it, as libmlx5 does
    /// (`providers/mlx5/verbs.c:3479-3481`, [`udp_sport_from_flow_label`]); a zero label
    /// keeps the port. On InfiniBand it sets the GRH's label, if the path has a GRH.
    pub const fn with_flow_label(mut self, flow_label: u32) -> AhAttr {
        let fl = flow_label & FLOW_LABEL_MASK;
        match &mut self {
            AhAttr::RoceV2 {
                flow_label: f,
                udp_sport,
                ..
            } => {
                *f = fl;
                if fl != 0 {
                    *udp_sport = udp_sport_from_flow_label(fl);
                }
            }
            AhAttr::Ib { grh: Some(g), .. } => g.flow_label = fl,
            AhAttr::Ib { grh: None, .. } => {}
        }
        self
    }

    /// The UDP source port of a RoCEv2 path; `None` on InfiniBand.
    pub const fn udp_sport(&self) -> Option<u16> {
        match self {
            AhAttr::RoceV2 { udp_sport, .. } => Some(*udp_sport),
            AhAttr::Ib { .. } => None,
        }
    }
}

/// How a peer reaches one HCA port: what the two sides of a connection tell each other out
/// of band (with their QP numbers and PSNs) before each builds its path to the other with
/// [`Endpoint::path_to`]. [`Hca::endpoint`](crate::Hca::endpoint) reads it from the port.
///
/// [`Endpoint::to_bytes`] and [`Endpoint::from_bytes`] give it a fixed wire form of
/// [`Endpoint::LEN`] bytes, for an exchange over a socket.
///
/// ```
/// use uhca_driver::addr::{Endpoint, Gid, Mac};
/// use uhca_driver::caps::LinkLayer;
///
/// let me = Endpoint {
///     link_layer: LinkLayer::Ethernet,
///     lid: 0,
///     gid: Gid::from_ipv4([10, 0, 0, 1]),
///     mac: Mac([2, 0, 10, 0, 0, 1]),
///     gid_index: 0,
/// };
/// let peer = Endpoint { gid: Gid::from_ipv4([10, 0, 0, 2]), mac: Mac([2, 0, 10, 0, 0, 2]), ..me };
/// // What the peer receives is what was sent.
/// assert_eq!(Endpoint::from_bytes(&peer.to_bytes()), Some(peer));
/// // RoCEv2: from local GID 0 to the peer's GID, through the peer's MAC.
/// let ah = me.path_to(&peer, 0x104, 0x105);
/// assert!(matches!(ah, uhca_driver::addr::AhAttr::RoceV2 { dgid, dmac, .. }
///     if dgid == peer.gid && dmac == peer.mac));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The port's link layer: InfiniBand paths go by LID, Ethernet ones by GID and MAC.
    pub link_layer: LinkLayer,
    /// The port's LID (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// The GID at [`Endpoint::gid_index`]: on Ethernet the RoCEv2 GID of the port's IP
    /// address, on InfiniBand the port GID (unused by a path without a GRH).
    pub gid: Gid,
    /// The port's MAC address (Ethernet; all zero on InfiniBand). Without a kernel to
    /// resolve addresses, it is the next hop a peer on the same link sends to.
    pub mac: Mac,
    /// The index of [`Endpoint::gid`] in the port's GID table: the source GID of the paths
    /// this side builds.
    pub gid_index: u8,
}

impl Endpoint {
    /// The length of the wire form ([`Endpoint::to_bytes`]).
    pub const LEN: usize = 26;

    /// The path from this port to `peer` for a connection of `local_qpn` (on this side)
    /// with `remote_qpn` (on the peer): on Ethernet [`AhAttr::roce_v2`] from this side's
    /// GID index to the peer's GID and MAC, on InfiniBand [`AhAttr::ib`] to the peer's
    /// LID. The link layer is this side's: both ends of a connection share one.
    pub const fn path_to(&self, peer: &Endpoint, local_qpn: u32, remote_qpn: u32) -> AhAttr {
        match self.link_layer {
            LinkLayer::Ethernet => {
                AhAttr::roce_v2(self.gid_index, peer.gid, peer.mac, local_qpn, remote_qpn)
            }
            LinkLayer::InfiniBand => AhAttr::ib(peer.lid),
        }
    }

    /// The wire form: the link layer (0 InfiniBand, 1 Ethernet), the LID (big-endian), the
    /// GID, the MAC and the GID index.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = match self.link_layer {
            LinkLayer::InfiniBand => 0,
            LinkLayer::Ethernet => 1,
        };
        b[1..3].copy_from_slice(&self.lid.to_be_bytes());
        b[3..19].copy_from_slice(&self.gid.0);
        b[19..25].copy_from_slice(&self.mac.0);
        b[25] = self.gid_index;
        b
    }

    /// Reads the wire form of [`Endpoint::to_bytes`]; `None` if the link-layer byte is
    /// neither 0 nor 1.
    pub fn from_bytes(b: &[u8; Self::LEN]) -> Option<Endpoint> {
        let link_layer = match b[0] {
            0 => LinkLayer::InfiniBand,
            1 => LinkLayer::Ethernet,
            _ => return None,
        };
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[3..19]);
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&b[19..25]);
        Some(Endpoint {
            link_layer,
            lid: u16::from_be_bytes([b[1], b[2]]),
            gid: Gid(gid),
            mac: Mac(mac),
            gid_index: b[25],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uhca_fwif::zerocopy::IntoBytes;

    #[test]
    fn static_rates_map_to_the_prm_codes() {
        // Every code supported: the PRM's own code for each rate it names.
        let all = 0xffff;
        let named = [
            (StaticRate::PortCurrent, 0),
            (StaticRate::Gbps2_5, 7),
            (StaticRate::Gbps5, 10),
            (StaticRate::Gbps10, 8),
            (StaticRate::Gbps20, 11),
            (StaticRate::Gbps25, 2),
            (StaticRate::Gbps30, 9),
            (StaticRate::Gbps40, 12),
            (StaticRate::Gbps50, 5),
            (StaticRate::Gbps56, 1),
            (StaticRate::Gbps60, 13),
            (StaticRate::Gbps80, 14),
            (StaticRate::Gbps100, 3),
            (StaticRate::Gbps120, 15),
            (StaticRate::Gbps200, 4),
            (StaticRate::Gbps400, 6),
        ];
        for (r, code) in named {
            assert_eq!(r.to_prm(all), code, "{r:?}");
        }
        // Rates without a code of their own take the next one down.
        assert_eq!(StaticRate::Gbps14.to_prm(all), 8);
        assert_eq!(StaticRate::Gbps28.to_prm(all), 2);
        assert_eq!(StaticRate::Gbps168.to_prm(all), 15);
        assert_eq!(StaticRate::Gbps1200.to_prm(all), 6);
        // Clamped to what the device supports; nothing at or below: unlimited.
        assert_eq!(StaticRate::Gbps400.to_prm(all & !(1 << 6)), 4);
        assert_eq!(StaticRate::Gbps2_5.to_prm(1 << 8), 0);
        assert_eq!(StaticRate::Gbps100.to_prm(0), 0);
        // The verbs values, both ways, and the speeds in order.
        for r in StaticRate::ALL {
            let v = (0..=24).find(|&v| StaticRate::from_ibv(v) == Some(r));
            assert!(v.is_some(), "{r:?} has a verbs value");
        }
        assert_eq!(StaticRate::from_ibv(1), None);
        assert_eq!(StaticRate::from_ibv(25), None);
        assert!(
            StaticRate::ALL
                .windows(2)
                .all(|w| w[0].mbps() < w[1].mbps())
        );
    }

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
        let ah = AhAttr::RoceV2 {
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
        ah.write_ads(&mut ads, 1, 0);
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
        ah.write_av(&mut av, 0x12, 0x1111_1111, 0);
        assert_eq!(av.dqpn(), 0x12);
        assert_eq!(av.dqp_dct.get() & Av::EXTENDED_UD_AV, Av::EXTENDED_UD_AV);
        assert_eq!(av.sgid_index(), 3);
        assert_eq!(av.rlid.get(), 0xc000);
        assert_eq!(av.grh_gid_fl.get() & Av::GRH_GID_FL_GRH, 0);
        assert_eq!(av.stat_rate_sl, 3 << 1);
    }

    #[test]
    fn ib_path_without_grh() {
        let ah = AhAttr::Ib {
            dlid: 0x11,
            sl: 5,
            src_path_bits: 0,
            static_rate: StaticRate::PortCurrent,
            grh: None,
        };
        let mut av = Av::default();
        ah.write_av(&mut av, 0x99, 0x8001_0000, 0);
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
        ah.write_ads(&mut ads, 2, 0);
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
        let ah = AhAttr::Ib {
            dlid: 3,
            sl: 1,
            src_path_bits: 1,
            static_rate: StaticRate::PortCurrent,
            grh: Some(grh),
        };
        let mut av = Av::default();
        ah.write_av(&mut av, 0x44, 0, 0);
        // grh_gid_fl = 1 << 30 | 2 << 20 | 0x12345, as rdma-core's mlx5 provider builds it.
        assert_eq!(av.grh_gid_fl.get(), (1 << 30) | (2 << 20) | 0x12345);
        assert_eq!(
            (av.sgid_index(), av.flow_label(), av.fl_mlid),
            (2, 0x12345, 1)
        );
        let mut ads = Ads::default();
        ah.write_ads(&mut ads, 1, 0);
        assert!(ads.grh());
        assert_eq!(
            (ads.src_addr_index(), ads.flow_label(), ads.hop_limit()),
            (2, 0x12345, 9)
        );
        assert_eq!(ads.rgid_rip(), &grh.dgid.0);
    }
}

#[cfg(test)]
mod constructor_tests {
    use super::*;

    /// The numbers below are those of rdma-core's `ibv_flow_label_to_udp_sport` and
    /// Linux's `rdma_calc_flow_label`, worked by hand from their C:
    /// fl = 0x12345: low 14 bits 0x2345, high bits 0x12345 >> 14 = 0x4, 0x2345 ^ 0x4 =
    /// 0x2341, | 0xC000 = 0xE341.
    #[test]
    fn udp_source_ports_are_the_vendor_codes() {
        assert_eq!(udp_sport_from_flow_label(0x12345), 0xe341);
        assert_eq!(udp_sport_from_flow_label(0), 0xc000);
        assert_eq!(udp_sport_from_flow_label(0xfffff), 0xc000 | (0x3fff ^ 0x3f));
        // Bits above the 20-bit label are ignored, as the C masks them.
        assert_eq!(udp_sport_from_flow_label(0xfff1_2345), 0xe341);
        // rdma_calc_flow_label: 0x104 * 0x105 = 0x10914 (below 2^20: no fold).
        assert_eq!(flow_label_from_qpns(0x104, 0x105), 0x10914);
        // 0xabcdef * 0x123456 = 0xc379a59ba4a; the folds XOR bits 20..39 (0x379a5) and
        // bits 40.. (0xc) into the low 20 bits (0x9ba4a): 0xac3e3.
        assert_eq!(flow_label_from_qpns(0xabcdef, 0x123456), 0xac3e3);
        // Symmetric: both ends of a connection derive the same port.
        assert_eq!(
            flow_label_from_qpns(0x123456, 0xabcdef),
            flow_label_from_qpns(0xabcdef, 0x123456)
        );
    }

    #[test]
    fn roce_v2_constructor_derives_the_port_from_the_qpns() {
        let dgid = Gid::from_ipv4([10, 0, 0, 2]);
        let dmac = Mac([2, 0, 0, 0, 0, 2]);
        let ah = AhAttr::roce_v2(1, dgid, dmac, 0x104, 0x105);
        // 0x10914: low 14 bits 0x0914, high 0x10914 >> 14 = 0x4: 0x0910 | 0xc000.
        assert_eq!(ah.udp_sport(), Some(0xc910));
        assert_eq!(
            ah,
            AhAttr::RoceV2 {
                sgid_index: 1,
                dgid,
                dmac,
                udp_sport: 0xc910,
                traffic_class: 0,
                hop_limit: 64,
                flow_label: 0,
                sl: 0,
            }
        );
        // The peer's handle names the same port.
        let back = AhAttr::roce_v2(1, dgid, dmac, 0x105, 0x104);
        assert_eq!(back.udp_sport(), ah.udp_sport());
        // A flow label takes over the port, as in libmlx5; zero keeps it.
        let fl = ah.with_flow_label(0x12345);
        assert_eq!(fl.udp_sport(), Some(0xe341));
        assert_eq!(ah.with_flow_label(0).udp_sport(), Some(0xc910));
        assert!(matches!(
            fl.with_sl(5),
            AhAttr::RoceV2 {
                sl: 5,
                flow_label: 0x12345,
                ..
            }
        ));
    }

    #[test]
    fn ib_constructor_is_lid_routed_with_sl_0() {
        let ah = AhAttr::ib(7);
        assert_eq!(
            ah,
            AhAttr::Ib {
                dlid: 7,
                sl: 0,
                src_path_bits: 0,
                static_rate: StaticRate::PortCurrent,
                grh: None,
            }
        );
        assert_eq!(ah.udp_sport(), None);
        let mut ads = Ads::default();
        ah.with_sl(3).write_ads(&mut ads, 1, 0);
        assert_eq!((ads.rlid(), ads.sl(), ads.grh()), (7, 3, false));
    }
}
