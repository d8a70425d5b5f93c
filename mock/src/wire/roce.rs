//! RoCEv2: IB transport packets over UDP (destination port 4791) over IPv4 or IPv6 over
//! Ethernet (IBTA Vol 1 Annex A17).
//!
//! ```text
//!  Ethernet [802.1Q] | IPv4 or IPv6 | UDP dport 4791 | BTH | ext headers | payload | pad | ICRC
//! ```
//!
//! On emit the UDP checksum is 0 over IPv4 (allowed) and computed over IPv6; on parse a
//! non-zero UDP checksum is verified and a zero one accepted over both.

use crate::wire::eth::{EtherType, EthernetFrame, EthernetRepr};
use crate::wire::ib::IbTransportRepr;
use crate::wire::icrc::{ICRC_LEN, roce_v2_icrc_parts};
use crate::wire::ip::{IpProtocol, IpRepr, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr};
use crate::wire::udp::{UDP_HEADER_LEN, UdpPacket, UdpRepr};
use crate::wire::{Error, Result};

/// The UDP destination port of RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// A whole RoCEv2 frame, Ethernet header to ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceV2Repr<'a> {
    /// The Ethernet header.
    pub eth: EthernetRepr,
    /// The IP header. Protocol/next header and payload length are filled in by
    /// [`emit`](Self::emit).
    pub ip: IpRepr,
    /// The UDP source port (per-QP entropy for ECMP; 49152-65535 is usual).
    pub udp_src_port: u16,
    /// BTH onward.
    pub transport: IbTransportRepr<'a>,
}

impl<'a> RoceV2Repr<'a> {
    /// The frame length (no Ethernet FCS, no padding to 60 bytes).
    pub fn buffer_len(&self) -> usize {
        self.eth.buffer_len() + ip_datagram_len(&self.ip, &self.transport)
    }

    /// Parse a frame, checking lengths, the IPv4 header checksum, a non-zero UDP checksum and
    /// the ICRC. Ethernet padding after the IP datagram is ignored.
    ///
    /// Errors: `Unsupported` for an EtherType other than IPv4/IPv6 (behind an optional 802.1Q
    /// tag), a protocol other than UDP, a UDP destination port other than 4791, an IP
    /// fragment or an unknown opcode; `Truncated`, `Malformed`, `BadChecksum`, `BadIcrc`.
    pub fn parse(frame: &'a [u8]) -> Result<Self> {
        let f = EthernetFrame::new_checked(frame)?;
        let (eth, ethertype) = EthernetRepr::parse(&f)?;
        let datagram = &frame[f.header_len()..];
        let (ip, udp_src_port, transport) = match ethertype {
            EtherType::Ipv4 | EtherType::Ipv6 => parse_ip_datagram(datagram)?,
            _ => return Err(Error::Unsupported),
        };
        if !matches!(
            (ethertype, ip),
            (EtherType::Ipv4, IpRepr::Ipv4(_)) | (EtherType::Ipv6, IpRepr::Ipv6(_))
        ) {
            return Err(Error::Malformed);
        }
        Ok(RoceV2Repr {
            eth,
            ip,
            udp_src_port,
            transport,
        })
    }

    /// Write the frame into the first [`buffer_len`](Self::buffer_len) bytes of `frame`,
    /// filling in the EtherType, IP lengths and protocol, the IPv4 header checksum, the UDP
    /// header (port 4791; checksum 0 over IPv4, computed over IPv6), BTH:PadCnt and the ICRC.
    ///
    /// Errors: `Truncated` if `frame` is too short; `Malformed`/`Unsupported` from
    /// [`IbTransportRepr::emit`] or if a length does not fit in 16 bits.
    pub fn emit(&self, frame: &mut [u8]) -> Result<()> {
        if frame.len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        let ethertype = match self.ip {
            IpRepr::Ipv4(_) => EtherType::Ipv4,
            IpRepr::Ipv6(_) => EtherType::Ipv6,
        };
        self.eth.emit(frame, ethertype)?;
        let at = self.eth.buffer_len();
        emit_ip_datagram(
            &self.ip,
            self.udp_src_port,
            &self.transport,
            &mut frame[at..],
        )
    }
}

/// The length of the IP datagram carrying `transport` (IP header to ICRC).
pub fn ip_datagram_len(ip: &IpRepr, transport: &IbTransportRepr<'_>) -> usize {
    ip.buffer_len() + UDP_HEADER_LEN + transport.buffer_len() + ICRC_LEN
}

/// Parse a RoCEv2 IP datagram (IP header to ICRC, trailing bytes beyond the IP length
/// ignored): the IP header, the UDP source port and the transport. See [`RoceV2Repr::parse`].
pub fn parse_ip_datagram(datagram: &[u8]) -> Result<(IpRepr, u16, IbTransportRepr<'_>)> {
    let (ip, ip_header, ip_payload) = match datagram.first().map(|b| b >> 4) {
        None => return Err(Error::Truncated),
        Some(4) => {
            let p = Ipv4Packet::new_checked(datagram)?;
            let r = Ipv4Repr::parse(&p)?;
            if r.protocol != IpProtocol::Udp {
                return Err(Error::Unsupported);
            }
            let hl = p.header_len();
            (
                IpRepr::Ipv4(r),
                &datagram[..hl],
                &datagram[hl..usize::from(p.total_len())],
            )
        }
        Some(6) => {
            let p = Ipv6Packet::new_checked(datagram)?;
            let r = Ipv6Repr::parse(&p)?;
            if r.next_header != IpProtocol::Udp {
                return Err(Error::Unsupported);
            }
            (
                IpRepr::Ipv6(r),
                &datagram[..40],
                &datagram[40..40 + r.payload_len],
            )
        }
        Some(_) => return Err(Error::Malformed),
    };
    let u = UdpPacket::new_checked(ip_payload)?;
    if usize::from(u.len()) != ip_payload.len() {
        return Err(Error::Malformed);
    }
    let udp = UdpRepr::parse(&u, &ip)?;
    if udp.dst_port != ROCEV2_UDP_PORT {
        return Err(Error::Unsupported);
    }
    let t = &ip_payload[UDP_HEADER_LEN..];
    if t.len() < ICRC_LEN {
        return Err(Error::Truncated);
    }
    let end = t.len() - ICRC_LEN;
    let stored = u32::from_le_bytes([t[end], t[end + 1], t[end + 2], t[end + 3]]);
    if roce_v2_icrc_parts(ip_header, &ip_payload[..UDP_HEADER_LEN], &t[..end])? != stored {
        return Err(Error::BadIcrc);
    }
    let transport = IbTransportRepr::parse(&t[..end])?;
    Ok((ip, udp.src_port, transport))
}

/// Write a RoCEv2 IP datagram (IP header to ICRC) into the first [`ip_datagram_len`] bytes of
/// `buf`. See [`RoceV2Repr::emit`].
pub fn emit_ip_datagram(
    ip: &IpRepr,
    udp_src_port: u16,
    transport: &IbTransportRepr<'_>,
    buf: &mut [u8],
) -> Result<()> {
    let len = ip_datagram_len(ip, transport);
    if buf.len() < len {
        return Err(Error::Truncated);
    }
    let buf = &mut buf[..len];
    let ip_len = ip.buffer_len();
    let udp_len = len - ip_len;
    let ip = ip.with_payload(IpProtocol::Udp, udp_len);
    ip.emit(buf)?;
    let (ip_header, rest) = buf.split_at_mut(ip_len);
    let udp = UdpRepr {
        src_port: udp_src_port,
        dst_port: ROCEV2_UDP_PORT,
    };
    udp.emit(rest, udp_len - UDP_HEADER_LEN)?;
    let (udp_header, t) = rest.split_at_mut(UDP_HEADER_LEN);
    let end = t.len() - ICRC_LEN;
    transport.emit(&mut t[..end])?;
    let icrc = roce_v2_icrc_parts(ip_header, udp_header, &t[..end])?;
    t[end..].copy_from_slice(&icrc.to_le_bytes());
    if let IpRepr::Ipv6(_) = ip {
        UdpPacket::new_unchecked(rest).fill_checksum(&ip);
    }
    Ok(())
}
