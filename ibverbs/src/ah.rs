//! Address handles (`ibv_create_ah`, `ibv_create_ah_from_wc`) and the extended GID query
//! (`ibv_query_gid_ex`), on the driver's software [`Ah`] (mlx5 address handles need no
//! command, so the handle lives with the C object and no table is kept).

use uhca_driver::addr::{AhAttr, Gid, Mac};
use uhca_driver::verbs::{Ah, GidType};

use crate::abi::{IbvAhAttr, IbvGlobalRoute, IbvGrh};
use crate::device::{Device, VResult, VerbsError};

/// `IBV_WC_GRH` in `ibv_wc.wc_flags`: a GRH (or, for RoCEv2 over IPv4, an IPv4 header)
/// precedes the received data.
pub const WC_GRH: u32 = 1 << 1;

/// `enum ibv_gid_type` of `ibv_gid_entry.gid_type`.
pub const GID_TYPE_IB: u32 = 0;
/// `IBV_GID_TYPE_ROCE_V1`.
pub const GID_TYPE_ROCE_V1: u32 = 1;
/// `IBV_GID_TYPE_ROCE_V2`.
pub const GID_TYPE_ROCE_V2: u32 = 2;

/// The UDP source port of every RoCEv2 datagram sent through an address handle (the
/// bottom of the range the RoCEv2 annex reserves for source ports).
const AH_UDP_SPORT: u16 = 0xc000;

fn einval(what: &str) -> VerbsError {
    VerbsError::new(libc::EINVAL, what.to_string())
}

/// `struct ibv_ah_attr` as the driver's path: a RoCEv2 destination (the devices here are
/// RoCE; an InfiniBand path is `EOPNOTSUPP`, a RoCE path without a GRH `EINVAL`).
pub fn address_handle(a: &IbvAhAttr, ethernet: bool) -> VResult<AhAttr> {
    if !ethernet {
        return Err(VerbsError::new(
            libc::EOPNOTSUPP,
            "InfiniBand paths (the devices here are RoCE)",
        ));
    }
    if a.is_global == 0 {
        return Err(einval("a RoCE address handle is global (is_global, a GID)"));
    }
    Ok(AhAttr::RoceV2 {
        sgid_index: a.grh.sgid_index,
        dgid: Gid(a.grh.dgid),
        // No neighbour table: the mock's fabric and its UDP uplink route by IP.
        dmac: Mac([0xff; 6]),
        udp_sport: AH_UDP_SPORT,
        traffic_class: a.grh.traffic_class,
        hop_limit: if a.grh.hop_limit == 0 {
            64
        } else {
            a.grh.hop_limit
        },
        flow_label: a.grh.flow_label & 0xf_ffff,
        sl: a.sl,
    })
}

/// The IPv4-mapped GID of an IPv4 address (network-order bytes).
fn v4_mapped(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

/// The path back to the sender of a received datagram (`ibv_init_ah_from_wc`): the GRH's
/// source becomes the destination, the local GID its destination named becomes the
/// source. For RoCEv2 over IPv4 the 40 bytes hold the IPv4 header in their last 20
/// (`lookup` maps a local GID to its index).
pub fn ah_attr_from_grh(
    wc_flags: u32,
    sl: u8,
    grh: &IbvGrh,
    port: u8,
    lookup: impl Fn(&[u8; 16]) -> Option<u8>,
) -> VResult<IbvAhAttr> {
    if wc_flags & WC_GRH == 0 {
        return Err(einval(
            "a completion without a GRH has no path back on a RoCE port",
        ));
    }
    // The 40 bytes in the order they arrived.
    let mut raw = [0u8; 40];
    raw[0..4].copy_from_slice(&grh.version_tclass_flow.to_ne_bytes());
    raw[4..6].copy_from_slice(&grh.paylen.to_ne_bytes());
    raw[6] = grh.next_hdr;
    raw[7] = grh.hop_limit;
    raw[8..24].copy_from_slice(&grh.sgid);
    raw[24..40].copy_from_slice(&grh.dgid);
    let ipv4 = &raw[20..40];
    let (sgid, dgid, tclass, flow, hops) = if raw[20] >> 4 == 4 && raw[0] >> 4 != 6 {
        (
            v4_mapped([ipv4[12], ipv4[13], ipv4[14], ipv4[15]]),
            v4_mapped([ipv4[16], ipv4[17], ipv4[18], ipv4[19]]),
            ipv4[1],
            0,
            ipv4[8],
        )
    } else {
        let vtf = u32::from_be(grh.version_tclass_flow);
        (
            grh.sgid,
            grh.dgid,
            (vtf >> 20) as u8,
            vtf & 0xf_ffff,
            grh.hop_limit,
        )
    };
    let sgid_index = lookup(&dgid).ok_or_else(|| {
        VerbsError::new(
            libc::ENOENT,
            "the GRH's destination is none of the port's GIDs",
        )
    })?;
    Ok(IbvAhAttr {
        grh: IbvGlobalRoute {
            dgid: sgid,
            flow_label: flow,
            sgid_index,
            hop_limit: hops,
            traffic_class: tclass,
        },
        dlid: 0,
        sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: port,
    })
}

/// `ibv_gid_entry.gid_type` of a GID table entry (`None` for an empty one, `ENODATA` in
/// rdma-core).
pub fn gid_type(kind: GidType) -> Option<u32> {
    match kind {
        GidType::Ib => Some(GID_TYPE_IB),
        GidType::RoceV1 => Some(GID_TYPE_ROCE_V1),
        GidType::RoceV2Ipv4 | GidType::RoceV2Ipv6 => Some(GID_TYPE_ROCE_V2),
        GidType::Empty => None,
    }
}

impl Device {
    /// `ibv_create_ah` on PD `pd`: the path checked against the port and encoded by the
    /// driver.
    ///
    /// # Errors
    ///
    /// Not open, an unknown PD (`EINVAL`), a path the driver refuses (`EINVAL`), an
    /// InfiniBand path (`EOPNOTSUPP`).
    pub fn create_ah(&self, pd: u32, attr: &IbvAhAttr) -> VResult<Ah> {
        self.with_open(|o| {
            if !o.pds.contains_key(&pd) {
                return Err(einval("a PD this device did not allocate"));
            }
            let ethernet = o.hw.hca.caps().link_layer == uhca_driver::caps::LinkLayer::Ethernet;
            let path = address_handle(attr, ethernet)?;
            o.hw.hca.create_ah(attr.port_num, path).map_err(|e| {
                let errno = match e {
                    uhca_driver::error::Error::InvalidArgument(_) => libc::EINVAL,
                    _ => libc::EIO,
                };
                VerbsError::new(errno, format!("create AH: {e:?}"))
            })
        })?
    }

    /// The index of `gid` in port `port`'s GID table, if it is there.
    pub fn find_gid(&self, port: u8, gid: &[u8; 16]) -> Option<u8> {
        let len = self.query_port(port).ok()?.gid_table_len.min(256);
        (0..len)
            .find(|&i| {
                self.query_gid(port, i)
                    .is_ok_and(|g| g.kind != GidType::Empty && g.gid.0 == *gid)
            })
            .map(|i| i as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grh_v4(src: [u8; 4], dst: [u8; 4]) -> IbvGrh {
        let mut raw = [0u8; 40];
        raw[20] = 0x45;
        raw[21] = 0x08; // DSCP/ECN
        raw[28] = 17; // TTL
        raw[32..36].copy_from_slice(&src);
        raw[36..40].copy_from_slice(&dst);
        IbvGrh {
            version_tclass_flow: u32::from_ne_bytes(raw[0..4].try_into().unwrap()),
            paylen: 0,
            next_hdr: 0,
            hop_limit: 0,
            sgid: raw[8..24].try_into().unwrap(),
            dgid: raw[24..40].try_into().unwrap(),
        }
    }

    #[test]
    fn the_path_back_from_an_ipv4_header_swaps_the_addresses() {
        let local = v4_mapped([127, 0, 0, 101]);
        let g = grh_v4([127, 0, 0, 102], [127, 0, 0, 101]);
        let a = ah_attr_from_grh(WC_GRH, 3, &g, 1, |x| (*x == local).then_some(0)).unwrap();
        assert_eq!(a.grh.dgid, v4_mapped([127, 0, 0, 102]));
        assert_eq!(a.grh.sgid_index, 0);
        assert_eq!(a.grh.traffic_class, 0x08);
        assert_eq!(a.grh.hop_limit, 17);
        assert_eq!((a.is_global, a.port_num, a.sl), (1, 1, 3));
    }

    #[test]
    fn the_path_back_from_an_ipv6_grh_keeps_class_and_flow() {
        let src = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let dst = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let g = IbvGrh {
            version_tclass_flow: (6u32 << 28 | 0x2a << 20 | 0x12345).to_be(),
            paylen: 0,
            next_hdr: 0x1b,
            hop_limit: 9,
            sgid: src,
            dgid: dst,
        };
        let a = ah_attr_from_grh(WC_GRH, 0, &g, 1, |x| (*x == dst).then_some(2)).unwrap();
        assert_eq!(a.grh.dgid, src);
        assert_eq!(a.grh.sgid_index, 2);
        assert_eq!((a.grh.traffic_class, a.grh.flow_label), (0x2a, 0x12345));
        assert_eq!(a.grh.hop_limit, 9);
    }

    #[test]
    fn no_grh_or_a_foreign_destination_is_refused() {
        let g = grh_v4([127, 0, 0, 102], [127, 0, 0, 101]);
        let e = ah_attr_from_grh(0, 0, &g, 1, |_| Some(0)).err().unwrap();
        assert_eq!(e.errno, libc::EINVAL);
        let e = ah_attr_from_grh(WC_GRH, 0, &g, 1, |_| None).err().unwrap();
        assert_eq!(e.errno, libc::ENOENT);
    }
}
