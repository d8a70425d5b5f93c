//! The switch: which attached port a frame goes to. Ethernet: by destination MAC, else by
//! destination IP (an address in a port's RoCE GID table); InfiniBand: by DLID.

use super::LinkLayer;
use crate::MockHca;
use crate::wire::eth::{EtherType, EthernetFrame};
use crate::wire::ib::Lrh;
use crate::wire::ip::{Ipv4Packet, Ipv6Packet};

/// The port a frame is for, if any. `macs` are the ports' MAC addresses, in port order (a
/// port's MAC is part of its configuration and never changes).
pub(crate) fn route(
    link: LinkLayer,
    ports: &[MockHca],
    macs: &[[u8; 6]],
    frame: &[u8],
) -> Option<usize> {
    match link {
        LinkLayer::Ethernet => {
            let f = EthernetFrame::new_checked(frame).ok()?;
            let dst = f.dst_addr();
            if let Some(i) = macs.iter().position(|&m| m == dst) {
                return Some(i);
            }
            let ip: [u8; 16] = match f.ethertype() {
                EtherType::Ipv4 => {
                    let p = Ipv4Packet::new_checked(f.payload()).ok()?;
                    let a = p.dst_addr();
                    let mut g = [0u8; 16];
                    g[10] = 0xff;
                    g[11] = 0xff;
                    g[12..].copy_from_slice(&a);
                    g
                }
                EtherType::Ipv6 => Ipv6Packet::new_checked(f.payload()).ok()?.dst_addr(),
                _ => return None,
            };
            ports.iter().position(|p| p.has_roce_gid(&ip))
        }
        LinkLayer::InfiniBand => {
            let l = Lrh::new_checked(frame).ok()?;
            let dlid = l.dlid();
            ports.iter().position(|p| p.lid() == dlid)
        }
    }
}
