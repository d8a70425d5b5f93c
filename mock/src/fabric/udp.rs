//! A UDP transport: an uplink from the fabric to real RoCEv2 peers over kernel UDP sockets.
//!
//! [`crate::Fabric::attach_udp`] binds `LOCAL_IP:4791`. Frames an HCA sends from
//! `LOCAL_IP` (its GID is the IPv4-mapped `::ffff:LOCAL_IP`) to another address leave as UDP
//! datagrams carrying BTH to ICRC (the ICRC computed as over an IPv4 header with
//! Identification 0 and DF, which is what Linux sends); datagrams that arrive are wrapped
//! into a RoCEv2 frame for the HCA's MAC, so the HCA's own parser checks the ICRC.

use crate::MockHca;
use crate::wire::eth::{EtherType, EthernetFrame, EthernetRepr};
use crate::wire::ip::{IpRepr, Ipv4Packet, Ipv4Repr};
use crate::wire::roce::{ROCEV2_UDP_PORT, emit_ip_datagram, parse_ip_datagram, udp_payload_icrc};
use crate::wire::udp::UDP_HEADER_LEN;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};

/// A UDP uplink of one HCA.
#[derive(Debug)]
pub(crate) struct UdpPort {
    sock: UdpSocket,
    local: Ipv4Addr,
    hca: MockHca,
    /// Datagrams that did not parse.
    pub(crate) malformed: u64,
}

/// The MAC the fabric puts as the source of frames that came in over UDP.
pub const UDP_GATEWAY_MAC: [u8; 6] = [0x02, 0x55, 0x44, 0x50, 0x00, 0x01];

impl UdpPort {
    pub(crate) fn bind(hca: &MockHca, local: Ipv4Addr) -> io::Result<Self> {
        let sock = UdpSocket::bind(SocketAddrV4::new(local, ROCEV2_UDP_PORT))?;
        sock.set_nonblocking(true)?;
        Ok(UdpPort {
            sock,
            local,
            hca: hca.clone(),
            malformed: 0,
        })
    }

    /// Whether a frame from the fabric leaves through this uplink: IPv4 from our address to
    /// another one.
    pub(crate) fn wants(&self, f: &[u8]) -> bool {
        let Ok(e) = EthernetFrame::new_checked(f) else {
            return false;
        };
        if e.ethertype() != EtherType::Ipv4 {
            return false;
        }
        let Ok(ip) = Ipv4Packet::new_checked(e.payload()) else {
            return false;
        };
        ip.src_addr() == self.local.octets() && ip.dst_addr() != self.local.octets()
    }

    /// Sends a frame's UDP payload (BTH to ICRC) to its destination IP, port 4791.
    pub(crate) fn send(&mut self, f: &[u8]) {
        let Ok(e) = EthernetFrame::new_checked(f) else {
            return;
        };
        let Ok(ip) = Ipv4Packet::new_checked(e.payload()) else {
            return;
        };
        let dst = Ipv4Addr::from(ip.dst_addr());
        let Some(payload) = ip.payload().get(UDP_HEADER_LEN..) else {
            return;
        };
        let Some(end) = payload.len().checked_sub(4) else {
            return;
        };
        // The kernel sends from our port 4791, whatever the frame's source port was: the
        // ICRC covers the UDP header, so compute it again for the datagram that leaves.
        let ipr = IpRepr::Ipv4(Ipv4Repr::new(self.local.octets(), dst.octets()));
        let Ok(icrc) = udp_payload_icrc(&ipr, ROCEV2_UDP_PORT, &payload[..end]) else {
            return;
        };
        let mut out = payload.to_vec();
        out[end..].copy_from_slice(&icrc.to_le_bytes());
        let _ = self
            .sock
            .send_to(&out, SocketAddrV4::new(dst, ROCEV2_UDP_PORT));
    }

    /// Datagrams that arrived, as RoCEv2 frames for the HCA.
    pub(crate) fn poll(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65_536];
        while let Ok((n, from)) = self.sock.recv_from(&mut buf) {
            let std::net::SocketAddr::V4(from) = from else {
                continue;
            };
            match self.wrap(&buf[..n], *from.ip(), from.port()) {
                Some(f) => out.push(f),
                None => self.malformed += 1,
            }
        }
        out
    }

    fn wrap(&self, payload: &[u8], src: Ipv4Addr, sport: u16) -> Option<Vec<u8>> {
        // Rebuild the IP datagram the peer sent, then check it parses.
        let ip = IpRepr::Ipv4(Ipv4Repr::new(src.octets(), self.local.octets()));
        let t = crate::wire::roce::parse_udp_payload_unverified(payload).ok()?;
        let eth = EthernetRepr {
            dst: self.hca.mac(),
            src: UDP_GATEWAY_MAC,
            vlan: None,
        };
        let dlen = crate::wire::roce::ip_datagram_len(&ip, &t);
        let mut frame = vec![0u8; eth.buffer_len() + dlen];
        eth.emit(&mut frame, EtherType::Ipv4).ok()?;
        let at = eth.buffer_len();
        emit_ip_datagram(&ip, sport, &t, &mut frame[at..]).ok()?;
        // Keep the peer's ICRC (the HCA verifies it).
        let icrc_at = frame.len() - 4;
        frame[icrc_at..].copy_from_slice(payload.get(payload.len() - 4..)?);
        parse_ip_datagram(&frame[at..]).ok()?;
        Some(frame)
    }
}

impl crate::Fabric {
    /// Binds `local:4791` as a UDP uplink for `hca` (which should be attached to this
    /// fabric and use the IPv4-mapped GID `::ffff:local`): its RoCEv2 packets to other
    /// addresses go out as UDP datagrams, and datagrams that arrive are delivered to it.
    /// The fabric must be pumped ([`crate::Fabric::start_pump`] or steps) for traffic to
    /// flow.
    pub fn attach_udp(&self, hca: &MockHca, local: Ipv4Addr) -> io::Result<()> {
        let port = UdpPort::bind(hca, local)?;
        self.with_inner(|u| u.push(port));
        Ok(())
    }
}
