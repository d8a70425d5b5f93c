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
use crate::wire::ib::{BTH_LEN, Bth, IbTransportRepr};
use crate::wire::icrc::{ICRC_LEN, roce_v2_icrc_parts};
use crate::wire::ip::{IpProtocol, IpRepr, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr};
use crate::wire::predict::KeptHeaders;
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
    #[inline]
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
#[inline]
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

/// The length of a RoCEv2 UDP payload (BTH to ICRC) carrying `transport`.
pub fn udp_payload_len(transport: &IbTransportRepr<'_>) -> usize {
    transport.buffer_len() + ICRC_LEN
}

/// The ICRC of a UDP payload (`transport`: BTH to the last pad byte, ICRC excluded) that
/// travels in an IP datagram described by `ip` (its lengths and protocol are filled in here)
/// from `udp_src_port` to port 4791.
///
/// This is for a transport over kernel UDP sockets, which never sees the IP and UDP headers.
/// The ICRC covers the invariant IPv4 fields, including the Identification: Linux sends a
/// datagram from an unconnected UDP socket with DF set (`IP_MTU_DISCOVER` =
/// `IP_PMTUDISC_DO`) with Identification 0, which is what [`Ipv4Repr::new`] says. A received
/// IPv4 datagram's Identification is not visible through a socket, so a receiver can verify
/// the ICRC only if the sender is known to use 0.
pub fn udp_payload_icrc(ip: &IpRepr, udp_src_port: u16, transport: &[u8]) -> Result<u32> {
    let udp_len = UDP_HEADER_LEN + transport.len() + ICRC_LEN;
    let ip = ip.with_payload(IpProtocol::Udp, udp_len);
    let mut ip_header = [0u8; 40];
    let ip_header = &mut ip_header[..ip.buffer_len()];
    ip.emit(ip_header)?;
    let mut udp_header = [0u8; UDP_HEADER_LEN];
    UdpRepr {
        src_port: udp_src_port,
        dst_port: ROCEV2_UDP_PORT,
    }
    .emit(&mut udp_header, udp_len - UDP_HEADER_LEN)?;
    roce_v2_icrc_parts(ip_header, &udp_header, transport)
}

/// Write a RoCEv2 UDP payload (BTH to ICRC) into the first [`udp_payload_len`] bytes of
/// `buf`, with the ICRC of [`udp_payload_icrc`].
pub fn emit_udp_payload(
    ip: &IpRepr,
    udp_src_port: u16,
    transport: &IbTransportRepr<'_>,
    buf: &mut [u8],
) -> Result<()> {
    let len = udp_payload_len(transport);
    if buf.len() < len {
        return Err(Error::Truncated);
    }
    let end = len - ICRC_LEN;
    transport.emit(&mut buf[..end])?;
    let icrc = udp_payload_icrc(ip, udp_src_port, &buf[..end])?;
    buf[end..len].copy_from_slice(&icrc.to_le_bytes());
    Ok(())
}

/// Parse a RoCEv2 UDP payload (BTH to ICRC) and verify its ICRC against `ip` and
/// `udp_src_port` (see [`udp_payload_icrc`]). Errors as [`IbTransportRepr::parse`], plus
/// `BadIcrc`.
pub fn parse_udp_payload<'a>(
    ip: &IpRepr,
    udp_src_port: u16,
    payload: &'a [u8],
) -> Result<IbTransportRepr<'a>> {
    let end = payload
        .len()
        .checked_sub(ICRC_LEN)
        .ok_or(Error::Truncated)?;
    let t = &payload[end..];
    let stored = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
    if udp_payload_icrc(ip, udp_src_port, &payload[..end])? != stored {
        return Err(Error::BadIcrc);
    }
    IbTransportRepr::parse(&payload[..end])
}

/// Parse a RoCEv2 UDP payload (BTH to ICRC) without checking the ICRC, for a receiver that
/// cannot know the sender's IPv4 Identification (see [`udp_payload_icrc`]).
pub fn parse_udp_payload_unverified(payload: &[u8]) -> Result<IbTransportRepr<'_>> {
    let end = payload
        .len()
        .checked_sub(ICRC_LEN)
        .ok_or(Error::Truncated)?;
    IbTransportRepr::parse(&payload[..end])
}

/// Header prediction for received frames: what [`RoceV2Repr::parse`] found in one frame,
/// kept to parse the next frames whose bytes before the payload are the same but for
/// BTH:PSN, and whose length is the same (the middle packets of one message, or SENDs of
/// one size on one QP). Every check the parser makes (lengths, EtherType, IPv4 version,
/// header checksum and fragment bits, UDP port and checksum, BTH and extension headers, pad)
/// depends only on those bytes and that length, so such a frame passes them all and parses
/// to the same values with its own PSN and payload; only its ICRC, which covers the payload,
/// is computed again. IPv4 with a zero UDP checksum only (over IPv6 the UDP checksum covers
/// the payload). The native InfiniBand form is [`crate::wire::ib::RxPrediction`].
#[derive(Clone, Debug)]
pub struct RxPrediction {
    kept: KeptHeaders,
    /// Where the IP header begins (after the Ethernet header) and its length.
    ip_at: usize,
    ip_len: usize,
    /// The IP total length (the frame may carry Ethernet padding after it).
    ip_total: usize,
    repr: RoceV2Repr<'static>,
}

impl RxPrediction {
    /// The prediction `frame`, which parsed to `r`, gives; `None` if it cannot be predicted
    /// from (not IPv4, a UDP checksum, headers longer than kept).
    pub fn of(frame: &[u8], r: &RoceV2Repr<'_>) -> Option<Self> {
        let IpRepr::Ipv4(_) = r.ip else {
            return None;
        };
        let ip_at = EthernetFrame::new_checked(frame).ok()?.header_len();
        let ip = frame.get(ip_at..)?;
        let ip_len = usize::from(ip.first()? & 0x0F) * 4;
        let ip_total = usize::from(crate::wire::be::u16(ip, 2));
        let udp = ip.get(ip_len..ip_len + UDP_HEADER_LEN)?;
        if udp[6..8] != [0, 0] {
            return None;
        }
        let bth_at = ip_at + ip_len + UDP_HEADER_LEN;
        let kept = KeptHeaders::of(frame, bth_at + r.transport.header_len(), bth_at)?;
        Some(RxPrediction {
            kept,
            ip_at,
            ip_len,
            ip_total,
            repr: RoceV2Repr {
                transport: IbTransportRepr {
                    payload: &[],
                    ..r.transport
                },
                ..*r
            },
        })
    }

    /// Parses `frame` as predicted: `None` if its length or a header byte other than
    /// BTH:PSN differs (parse it with [`RoceV2Repr::parse`]); else what that parse would
    /// return: the predicted values with the frame's PSN and payload, or `BadIcrc`.
    #[inline]
    pub fn parse<'a>(&self, frame: &'a [u8]) -> Option<Result<RoceV2Repr<'a>>> {
        let psn = self.kept.repeated_by(frame)?;
        let (ip, udp) = (self.ip_at, self.ip_at + self.ip_len);
        let bth = udp + UDP_HEADER_LEN;
        let end = ip + self.ip_total - ICRC_LEN;
        let stored =
            u32::from_le_bytes([frame[end], frame[end + 1], frame[end + 2], frame[end + 3]]);
        match roce_v2_icrc_parts(&frame[ip..udp], &frame[udp..bth], &frame[bth..end]) {
            Ok(c) if c == stored => {}
            Ok(_) => return Some(Err(Error::BadIcrc)),
            Err(e) => return Some(Err(e)),
        }
        let pad = usize::from(self.repr.transport.bth.pad_count);
        let mut r = RoceV2Repr {
            transport: IbTransportRepr {
                payload: &frame[self.kept.header_len()..end - pad],
                ..self.repr.transport
            },
            ..self.repr
        };
        r.transport.bth.psn = psn;
        Some(Ok(r))
    }

    /// Parses `frame` as `kept` predicts it, else in full; a frame with data parsed in full
    /// is kept to predict the next. (An ACK is not kept: an RDMA exchange both ways
    /// receives data and ACKs in turn, and a kept ACK would push out the data packet that
    /// comes next.)
    pub fn parse_keeping<'a>(
        kept: &mut Option<RxPrediction>,
        frame: &'a [u8],
    ) -> Result<RoceV2Repr<'a>> {
        if let Some(r) = kept.as_ref().and_then(|p| p.parse(frame)) {
            return r;
        }
        let r = RoceV2Repr::parse(frame)?;
        if !r.transport.payload.is_empty() {
            *kept = RxPrediction::of(frame, &r);
        }
        Ok(r)
    }
}

/// Re-seals a RoCEv2 frame (Ethernet header to ICRC) whose headers were copied from
/// another frame of the same length that differs only in BTH:PSN and payload, as the
/// middle packets of one message do: sets BTH:PSN to `psn` (24 bits) and computes the ICRC
/// again (and over IPv6 the UDP checksum, which covers the payload). Every other byte stays
/// as it was: the IPv4 header and its checksum hold no PSN and no payload byte.
///
/// Errors: `Truncated` if the IP, UDP and BTH headers and the ICRC do not fit in the frame;
/// `Malformed` if the IP version is neither 4 nor 6 or the IP lengths disagree with the frame.
pub fn reseal_frame(frame: &mut [u8], psn: u32) -> Result<()> {
    let eth_len = EthernetFrame::new_checked(&*frame)?.header_len();
    let d = &mut frame[eth_len..];
    let (hl, total, v6) = match d.first().map(|b| b >> 4) {
        Some(4) => {
            let hl = usize::from(d[0] & 0x0F) * 4;
            let total = usize::from(crate::wire::be::u16(d, 2));
            (hl, total, false)
        }
        Some(6) if d.len() >= 40 => (40, 40 + usize::from(crate::wire::be::u16(d, 4)), true),
        Some(6) | None => return Err(Error::Truncated),
        Some(_) => return Err(Error::Malformed),
    };
    let t = hl + UDP_HEADER_LEN;
    if hl < 20 || total > d.len() || total < t + BTH_LEN + ICRC_LEN {
        return Err(Error::Malformed);
    }
    let end = total - ICRC_LEN;
    Bth::new_unchecked(&mut d[t..t + BTH_LEN]).set_psn(psn);
    let icrc = roce_v2_icrc_parts(&d[..hl], &d[hl..t], &d[t..end])?;
    d[end..total].copy_from_slice(&icrc.to_le_bytes());
    if v6 {
        let ip = IpRepr::Ipv6(Ipv6Repr::parse(&Ipv6Packet::new_checked(&d[..total])?)?);
        UdpPacket::new_unchecked(&mut d[hl..total]).fill_checksum(&ip);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ib::{BthRepr, Opcode};

    #[test]
    fn udp_payload_matches_the_frame() {
        let t = IbTransportRepr::new(BthRepr::new(Opcode::RcSendOnly, 5, 6), b"abcdef");
        for ip in [
            IpRepr::Ipv4(Ipv4Repr::new([192, 168, 1, 1], [192, 168, 1, 2])),
            IpRepr::Ipv6(Ipv6Repr::new([7; 16], [8; 16])),
        ] {
            let r = RoceV2Repr {
                eth: EthernetRepr {
                    dst: [0; 6],
                    src: [0; 6],
                    vlan: None,
                },
                ip,
                udp_src_port: 50001,
                transport: t,
            };
            let mut frame = vec![0u8; r.buffer_len()];
            r.emit(&mut frame).unwrap();
            let mut p = vec![0u8; udp_payload_len(&t)];
            emit_udp_payload(&ip, 50001, &t, &mut p).unwrap();
            assert_eq!(&frame[frame.len() - p.len()..], &p[..]);
            let mut expect = t;
            expect.bth.pad_count = 2;
            assert_eq!(parse_udp_payload(&ip, 50001, &p).unwrap(), expect);
            assert_eq!(
                parse_udp_payload(&ip, 50002, &p).unwrap_err(),
                Error::BadIcrc
            );
            assert_eq!(parse_udp_payload_unverified(&p).unwrap(), expect);
            assert_eq!(
                parse_udp_payload(&ip, 1, &p[..3]).unwrap_err(),
                Error::Truncated
            );
        }
    }

    /// A payload written at its place before the emitter runs (`PAYLOAD_IN_PLACE`, as the
    /// engine gathers it) gives the same bytes, ICRC and VCRC included, as a payload the
    /// emitter copies, for a RoCEv2 frame and a native InfiniBand packet; odd lengths
    /// included (the pad after the payload).
    #[test]
    fn a_payload_in_place_gives_the_same_frame() {
        use crate::wire::ib::{IbPacketRepr, LinkNextHeader, LrhRepr, PAYLOAD_IN_PLACE};
        for n in [1usize, 7, 64, 4093, 4096] {
            let payload: Vec<u8> = (0..n).map(|i| (i * 13 + 5) as u8).collect();
            let mut copied =
                IbTransportRepr::new(BthRepr::new(Opcode::RcRdmaWriteFirst, 9, 3), &payload)
                    .with_reth(0x1000, 0x22, 1 << 16);
            copied.bth.pkey = 0xffff;
            let in_place = IbTransportRepr {
                payload: &PAYLOAD_IN_PLACE[..n],
                ..copied
            };
            let tail = n + usize::from(copied.pad_count()) + crate::wire::icrc::ICRC_LEN;
            let roce = |t| RoceV2Repr {
                eth: EthernetRepr {
                    dst: [2; 6],
                    src: [4; 6],
                    vlan: None,
                },
                ip: IpRepr::Ipv4(Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2])),
                udp_src_port: 0xc000,
                transport: t,
            };
            let mut want = vec![0u8; roce(copied).buffer_len()];
            roce(copied).emit(&mut want).unwrap();
            let mut got = vec![0u8; want.len()];
            let at = got.len() - tail;
            got[at..at + n].copy_from_slice(&payload);
            roce(in_place).emit(&mut got).unwrap();
            assert_eq!(got, want, "RoCEv2, {n} bytes");

            let ib = |t| IbPacketRepr {
                lrh: LrhRepr {
                    vl: 0,
                    lver: 0,
                    sl: 0,
                    lnh: LinkNextHeader::IbaLocal,
                    dlid: 2,
                    packet_length: 0,
                    slid: 1,
                },
                grh: None,
                transport: t,
            };
            let mut want = vec![0u8; ib(copied).buffer_len()];
            ib(copied).emit(&mut want).unwrap();
            let mut got = vec![0u8; want.len()];
            let at = got.len() - tail - crate::wire::icrc::VCRC_LEN;
            got[at..at + n].copy_from_slice(&payload);
            ib(in_place).emit(&mut got).unwrap();
            assert_eq!(got, want, "InfiniBand, {n} bytes");
        }
    }

    fn frame_with(psn: u32, opcode: Opcode, payload: &[u8], vlan: bool, ipv6: bool) -> Vec<u8> {
        let mut t = IbTransportRepr::new(BthRepr::new(opcode, 0x11, psn), payload);
        t.bth.pkey = 0xffff;
        let r = RoceV2Repr {
            eth: EthernetRepr {
                dst: [2; 6],
                src: [4; 6],
                vlan: vlan.then_some(crate::wire::VlanTag {
                    pcp: 3,
                    dei: false,
                    vid: 0x123,
                }),
            },
            ip: if ipv6 {
                IpRepr::Ipv6(Ipv6Repr::new([7; 16], [8; 16]))
            } else {
                IpRepr::Ipv4(Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2]))
            },
            udp_src_port: 0xc000,
            transport: t,
        };
        let mut f = vec![0u8; r.buffer_len()];
        r.emit(&mut f).unwrap();
        f
    }

    /// A frame that repeats the predicted headers but the PSN parses to what the full
    /// parser gives; one that differs anywhere else in its headers, or in length, is not
    /// predicted; a bad ICRC is reported as the parser reports it.
    #[test]
    fn a_predicted_parse_is_the_full_parse() {
        for vlan in [false, true] {
            let a: Vec<u8> = (0..256).map(|i| (i * 3) as u8).collect();
            let b: Vec<u8> = (0..256).map(|i| (i * 5 + 1) as u8).collect();
            let first = frame_with(0x00ff_fffe, Opcode::RcRdmaWriteMiddle, &a, vlan, false);
            let p = RxPrediction::of(&first, &RoceV2Repr::parse(&first).unwrap())
                .expect("an IPv4 frame is predicted");
            // The PSN wraps: all three bytes differ.
            let next = frame_with(0x00ff_ffff, Opcode::RcRdmaWriteMiddle, &b, vlan, false);
            let wrapped = frame_with(0, Opcode::RcRdmaWriteMiddle, &b, vlan, false);
            for f in [&first, &next, &wrapped] {
                assert_eq!(
                    p.parse(f).expect("predicted").unwrap(),
                    RoceV2Repr::parse(f).unwrap(),
                    "vlan {vlan}"
                );
            }
            // Another opcode (the BTH), another length: parsed in full.
            let last = frame_with(1, Opcode::RcRdmaWriteLast, &b, vlan, false);
            assert!(p.parse(&last).is_none());
            let short = frame_with(1, Opcode::RcRdmaWriteMiddle, &b[..252], vlan, false);
            assert!(p.parse(&short).is_none());
            // Any header byte changed but the PSN's: not predicted (the IPv4 checksum, the
            // TTL, a MAC byte, the UDP port, the QPN: each is the full parser's to judge).
            let psn_at = p.kept.psn_at();
            assert_eq!(psn_at, p.ip_at + p.ip_len + UDP_HEADER_LEN + 9);
            for at in (0..p.kept.header_len()).filter(|i| !(psn_at..psn_at + 3).contains(i)) {
                let mut f = next.clone();
                f[at] ^= 0x01;
                assert!(p.parse(&f).is_none(), "byte {at} changed, vlan {vlan}");
            }
            // A payload byte changed: predicted, and the ICRC does not match.
            let mut f = next.clone();
            f[p.kept.header_len() + 7] ^= 0x80;
            assert_eq!(p.parse(&f).unwrap().unwrap_err(), Error::BadIcrc);
            assert_eq!(RoceV2Repr::parse(&f).unwrap_err(), Error::BadIcrc);
        }
        // IPv6 (its UDP checksum covers the payload) is never predicted.
        let v6 = frame_with(5, Opcode::RcSendMiddle, &[1; 256], false, true);
        assert!(RxPrediction::of(&v6, &RoceV2Repr::parse(&v6).unwrap()).is_none());
    }
}
