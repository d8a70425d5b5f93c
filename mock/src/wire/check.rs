//! The verdict on one captured packet: what `uhca-wirecheck` says of each record of a
//! capture, as a library function so that tests and fuzzing reach the same decoding.
//!
//! By link type: Ethernet (1) and raw IP (101) carry RoCEv2 (UDP destination port 4791;
//! anything else is [`Verdict::Other`]); DLT_USER0 (147) and LINKTYPE_INFINIBAND (247)
//! carry native IB packets, LRH to VCRC (raw and non-IBA IPv6 packets are `Other`). A
//! RoCEv2 or IB packet is decoded with this module's parsers, which check lengths,
//! versions, the IPv4 header and UDP checksums, the ICRC and (native IB) the VCRC.
//!
//! ```
//! use uhca_mock::wire::check::{Verdict, check};
//! use uhca_mock::wire::pcap::LinkType;
//! assert!(matches!(check(LinkType::Ethernet, &[0u8; 60]), Verdict::Other));
//! assert!(matches!(check(LinkType::Ethernet, &[0u8; 3]), Verdict::Bad(_)));
//! ```

use super::eth::EthernetFrame;
use super::ib::Lrh;
use super::pcap::LinkType;
use super::{
    Error, EtherType, IbPacketRepr, IbTransportRepr, IpProtocol, Ipv4Packet, Ipv6Packet,
    LinkNextHeader, ROCEV2_UDP_PORT, RoceV2Repr, UdpPacket, roce,
};

/// What one captured packet is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A good InfiniBand or RoCEv2 packet, with its BTH opcode.
    Good(u8),
    /// Not InfiniBand or RoCEv2 traffic (another ethertype, UDP port, link type or LNH).
    Other,
    /// InfiniBand or RoCEv2, well formed, but not decoded here ([`Error::Unsupported`]).
    Unsupported(Error),
    /// A malformed packet, or one whose CRC or checksum fails.
    Bad(Error),
}

/// Whether an IP datagram is UDP to port 4791 (so it must be a good RoCEv2 packet).
fn is_roce_datagram(d: &[u8]) -> bool {
    let udp = match d.first().map(|b| b >> 4) {
        Some(4) => match Ipv4Packet::new_checked(d) {
            Ok(p) if p.protocol() == IpProtocol::Udp && p.frag_offset() == 0 => {
                &d[p.header_len()..]
            }
            _ => return false,
        },
        Some(6) => match Ipv6Packet::new_checked(d) {
            Ok(p) if p.next_header() == IpProtocol::Udp => &d[40..],
            _ => return false,
        },
        _ => return false,
    };
    UdpPacket::new_checked(udp)
        .map(|u| u.dst_port() == ROCEV2_UDP_PORT)
        .unwrap_or(false)
}

fn opcode(t: &IbTransportRepr<'_>) -> u8 {
    u8::from(t.bth.opcode)
}

fn verdict<T>(r: Result<T, Error>, op: impl Fn(&T) -> u8) -> Verdict {
    match r {
        Ok(x) => Verdict::Good(op(&x)),
        Err(e @ Error::Unsupported) => Verdict::Unsupported(e),
        Err(e) => Verdict::Bad(e),
    }
}

/// The verdict on one packet captured with link type `link`. Never panics, whatever the
/// bytes.
pub fn check(link: LinkType, data: &[u8]) -> Verdict {
    match link {
        LinkType::Unknown(_) => Verdict::Other,
        LinkType::Ethernet => {
            let Ok(f) = EthernetFrame::new_checked(data) else {
                return Verdict::Bad(Error::Truncated);
            };
            match f.ethertype() {
                EtherType::Ipv4 | EtherType::Ipv6 if is_roce_datagram(f.payload()) => {
                    verdict(RoceV2Repr::parse(data), |r| opcode(&r.transport))
                }
                _ => Verdict::Other,
            }
        }
        LinkType::RawIp => {
            if !is_roce_datagram(data) {
                return Verdict::Other;
            }
            verdict(roce::parse_ip_datagram(data), |(_, _, t)| opcode(t))
        }
        _ => {
            match Lrh::new_checked(data).map(|l| l.lnh()) {
                Ok(LinkNextHeader::Raw | LinkNextHeader::IpNonIba) => return Verdict::Other,
                Err(e) => return Verdict::Bad(e),
                Ok(_) => {}
            }
            verdict(IbPacketRepr::parse(data), |p| opcode(&p.transport))
        }
    }
}
