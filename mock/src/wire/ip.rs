//! IPv4 (RFC 791) and IPv6 (RFC 8200) headers, as far as RoCEv2 needs them.
//!
//! ```text
//!  IPv4: Ver(4) IHL(4) | DSCP(6) ECN(2) | TotalLength(16) | Identification(16) |
//!        Flags(3) FragOffset(13) | TTL(8) | Protocol(8) | HeaderChecksum(16) | Src(32) | Dst(32)
//!  IPv6: Ver(4) TrafficClass(8) FlowLabel(20) | PayloadLength(16) | NextHeader(8) |
//!        HopLimit(8) | Src(128) | Dst(128)
//! ```

use crate::wire::crc::inet;
use crate::wire::{Error, Result, be};

/// An IP protocol number (IPv4 Protocol, IPv6 Next Header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpProtocol {
    /// 17.
    Udp,
    /// 6.
    Tcp,
    /// 1.
    Icmp,
    /// 58.
    Icmpv6,
    /// Any other.
    Unknown(u8),
}

impl From<u8> for IpProtocol {
    fn from(v: u8) -> Self {
        match v {
            17 => IpProtocol::Udp,
            6 => IpProtocol::Tcp,
            1 => IpProtocol::Icmp,
            58 => IpProtocol::Icmpv6,
            x => IpProtocol::Unknown(x),
        }
    }
}

impl From<IpProtocol> for u8 {
    fn from(v: IpProtocol) -> u8 {
        match v {
            IpProtocol::Udp => 17,
            IpProtocol::Tcp => 6,
            IpProtocol::Icmp => 1,
            IpProtocol::Icmpv6 => 58,
            IpProtocol::Unknown(x) => x,
        }
    }
}

/// The length of an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// The length of an IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;

/// A view of an IPv4 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wrap a buffer without checks; getters panic if it is too short.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }
    /// Wrap a buffer after [`Ipv4Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// `Err(Truncated)` if the header or the total length does not fit in the buffer;
    /// `Err(Malformed)` if IHL < 5 or the total length is shorter than the header.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < IPV4_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        if hl < IPV4_HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < hl {
            return Err(Error::Truncated);
        }
        let total = usize::from(self.total_len());
        if total < hl {
            return Err(Error::Malformed);
        }
        if len < total {
            return Err(Error::Truncated);
        }
        Ok(())
    }
    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Version (4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }
    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[0] & 0x0F) * 4
    }
    /// DSCP.
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[1] >> 2
    }
    /// ECN.
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[1] & 3
    }
    /// Total length.
    pub fn total_len(&self) -> u16 {
        be::u16(self.buffer.as_ref(), 2)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be::u16(self.buffer.as_ref(), 4)
    }
    /// The don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.buffer.as_ref()[6] & 0x40 != 0
    }
    /// The more-fragments flag.
    pub fn more_frags(&self) -> bool {
        self.buffer.as_ref()[6] & 0x20 != 0
    }
    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        be::u16(self.buffer.as_ref(), 6) & 0x1FFF
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[8]
    }
    /// Protocol.
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[9])
    }
    /// Header checksum.
    pub fn checksum(&self) -> u16 {
        be::u16(self.buffer.as_ref(), 10)
    }
    /// Source address.
    pub fn src_addr(&self) -> [u8; 4] {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[12..16]);
        a
    }
    /// Destination address.
    pub fn dst_addr(&self) -> [u8; 4] {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[16..20]);
        a
    }
    /// Whether the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        inet::finish(inet::sum(0, &self.buffer.as_ref()[..self.header_len()])) == 0
    }
    /// The header (with options).
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }
    /// The payload, up to the total length (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Compute and store the header checksum.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buffer.as_mut();
        b[10] = 0;
        b[11] = 0;
        let c = inet::finish(inet::sum(0, &b[..hl]));
        be::set_u16(b, 10, c);
    }
}

/// A parsed IPv4 header (options are skipped on parse and never emitted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// DSCP, 6 bits.
    pub dscp: u8,
    /// ECN, 2 bits (RoCEv2 congestion control marks CE = 3).
    pub ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't fragment.
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
    /// Protocol. [`RoceV2Repr::emit`](crate::wire::RoceV2Repr::emit) sets UDP.
    pub protocol: IpProtocol,
    /// Payload length. [`RoceV2Repr::emit`](crate::wire::RoceV2Repr::emit) fills it in.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// A UDP header between two addresses: DF set, TTL 64, everything else zero.
    pub const fn new(src: [u8; 4], dst: [u8; 4]) -> Ipv4Repr {
        Ipv4Repr {
            src,
            dst,
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: IpProtocol::Udp,
            payload_len: 0,
        }
    }

    /// Parse; checks version, lengths and header checksum.
    ///
    /// Errors: `Truncated`/`Malformed` from [`Ipv4Packet::check_len`]; `Malformed` if the
    /// version is not 4; `BadChecksum`; `Unsupported` for a fragment.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Ipv4Repr> {
        p.check_len()?;
        if p.version() != 4 {
            return Err(Error::Malformed);
        }
        if !p.verify_checksum() {
            return Err(Error::BadChecksum);
        }
        if p.more_frags() || p.frag_offset() != 0 {
            return Err(Error::Unsupported);
        }
        Ok(Ipv4Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            dscp: p.dscp(),
            ecn: p.ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            ttl: p.ttl(),
            protocol: p.protocol(),
            payload_len: usize::from(p.total_len()) - p.header_len(),
        })
    }

    /// 20.
    pub const fn buffer_len(&self) -> usize {
        IPV4_HEADER_LEN
    }

    /// Write the 20-byte header with its checksum.
    ///
    /// Errors: `Truncated` if `buf` is shorter than 20 bytes; `Malformed` if the total length
    /// does not fit in 16 bits.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < IPV4_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let total =
            u16::try_from(IPV4_HEADER_LEN + self.payload_len).map_err(|_| Error::Malformed)?;
        let b = &mut buf[..IPV4_HEADER_LEN];
        b[0] = 0x45;
        b[1] = (self.dscp << 2) | (self.ecn & 3);
        be::set_u16(b, 2, total);
        be::set_u16(b, 4, self.ident);
        b[6] = if self.dont_frag { 0x40 } else { 0 };
        b[7] = 0;
        b[8] = self.ttl;
        b[9] = self.protocol.into();
        b[12..16].copy_from_slice(&self.src);
        b[16..20].copy_from_slice(&self.dst);
        Ipv4Packet::new_unchecked(b).fill_checksum();
        Ok(())
    }
}

/// A view of an IPv6 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wrap a buffer without checks; getters panic if it is too short.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }
    /// Wrap a buffer after [`Ipv6Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// `Err(Truncated)` if the header or the payload length does not fit.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < IPV6_HEADER_LEN || len < IPV6_HEADER_LEN + usize::from(self.payload_len()) {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Version (6).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        ((be::u32(self.buffer.as_ref(), 0) >> 20) & 0xFF) as u8
    }
    /// Flow label, 20 bits.
    pub fn flow_label(&self) -> u32 {
        be::u32(self.buffer.as_ref(), 0) & 0x000F_FFFF
    }
    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        be::u16(self.buffer.as_ref(), 4)
    }
    /// Next header.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[6])
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[7]
    }
    /// Source address.
    pub fn src_addr(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[8..24]);
        a
    }
    /// Destination address.
    pub fn dst_addr(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[24..40]);
        a
    }
    /// The header.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..IPV6_HEADER_LEN]
    }
    /// The payload, up to the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[IPV6_HEADER_LEN..IPV6_HEADER_LEN + usize::from(self.payload_len())]
    }
}

/// A parsed IPv6 header (no extension headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Flow label, 20 bits.
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Next header. [`RoceV2Repr::emit`](crate::wire::RoceV2Repr::emit) sets UDP.
    pub next_header: IpProtocol,
    /// Payload length. [`RoceV2Repr::emit`](crate::wire::RoceV2Repr::emit) fills it in.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// A UDP header between two addresses: hop limit 64, everything else zero.
    pub const fn new(src: [u8; 16], dst: [u8; 16]) -> Ipv6Repr {
        Ipv6Repr {
            src,
            dst,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
            next_header: IpProtocol::Udp,
            payload_len: 0,
        }
    }

    /// Parse; `Malformed` if the version is not 6.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Ipv6Repr> {
        p.check_len()?;
        if p.version() != 6 {
            return Err(Error::Malformed);
        }
        Ok(Ipv6Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            hop_limit: p.hop_limit(),
            next_header: p.next_header(),
            payload_len: usize::from(p.payload_len()),
        })
    }

    /// 40.
    pub const fn buffer_len(&self) -> usize {
        IPV6_HEADER_LEN
    }

    /// Write the header. Errors: `Truncated` if `buf` is shorter than 40 bytes; `Malformed`
    /// if the payload length does not fit in 16 bits.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < IPV6_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = u16::try_from(self.payload_len).map_err(|_| Error::Malformed)?;
        let w =
            (6u32 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & 0x000F_FFFF);
        be::set_u32(buf, 0, w);
        be::set_u16(buf, 4, len);
        buf[6] = self.next_header.into();
        buf[7] = self.hop_limit;
        buf[8..24].copy_from_slice(&self.src);
        buf[24..40].copy_from_slice(&self.dst);
        Ok(())
    }
}

/// An IPv4 or IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4.
    Ipv4(Ipv4Repr),
    /// IPv6.
    Ipv6(Ipv6Repr),
}

impl IpRepr {
    /// The header length.
    pub const fn buffer_len(&self) -> usize {
        match self {
            IpRepr::Ipv4(r) => r.buffer_len(),
            IpRepr::Ipv6(r) => r.buffer_len(),
        }
    }

    /// The payload length.
    pub const fn payload_len(&self) -> usize {
        match self {
            IpRepr::Ipv4(r) => r.payload_len,
            IpRepr::Ipv6(r) => r.payload_len,
        }
    }

    /// The same header with another protocol and payload length.
    pub const fn with_payload(&self, protocol: IpProtocol, payload_len: usize) -> IpRepr {
        match *self {
            IpRepr::Ipv4(r) => IpRepr::Ipv4(Ipv4Repr {
                protocol,
                payload_len,
                ..r
            }),
            IpRepr::Ipv6(r) => IpRepr::Ipv6(Ipv6Repr {
                next_header: protocol,
                payload_len,
                ..r
            }),
        }
    }

    /// Write the header (see [`Ipv4Repr::emit`], [`Ipv6Repr::emit`]).
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        match self {
            IpRepr::Ipv4(r) => r.emit(buf),
            IpRepr::Ipv6(r) => r.emit(buf),
        }
    }

    /// The running one's-complement sum of the UDP pseudo-header for `upper_len` bytes of
    /// payload of `protocol`.
    pub fn pseudo_header_sum(&self, protocol: IpProtocol, upper_len: usize) -> u32 {
        let p = u32::from(u8::from(protocol));
        match self {
            IpRepr::Ipv4(r) => {
                let acc = inet::sum(inet::sum(0, &r.src), &r.dst);
                inet::sum(acc, &[0, p as u8, (upper_len >> 8) as u8, upper_len as u8])
            }
            IpRepr::Ipv6(r) => {
                let acc = inet::sum(inet::sum(0, &r.src), &r.dst);
                inet::sum(acc, &(upper_len as u32).to_be_bytes()).wrapping_add(p)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A 20-byte header: 45 00 | len 0x0030 | id 0x0001 | flags 0 | TTL 64 | UDP | checksum |
    // 192.168.0.1 -> 192.168.0.2. Checksum worked out by hand: sum of words
    // 4500+0030+0001+0000+4011+c0a8+0001+c0a8+0002 = 0x20695 -> fold 0x0697 -> !0x0697 = 0xf968.
    static V4: [u8; 20] = [
        0x45, 0x00, 0x00, 0x30, 0x00, 0x01, 0x00, 0x00, 0x40, 0x11, 0xf9, 0x68, 192, 168, 0, 1,
        192, 168, 0, 2,
    ];

    #[test]
    fn ipv4_golden() {
        let mut b = [0u8; 48];
        b[..20].copy_from_slice(&V4);
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(r.payload_len, 28);
        assert_eq!((r.ident, r.dont_frag, r.ttl), (1, false, 64));
        let mut out = [0u8; 20];
        r.emit(&mut out).unwrap();
        assert_eq!(out, V4);
    }

    #[test]
    fn ipv4_errors() {
        let mut b = [0u8; 48];
        b[..20].copy_from_slice(&V4);
        assert_eq!(
            Ipv4Packet::new_checked(&b[..47]).unwrap_err(),
            Error::Truncated
        );
        let mut c = b;
        c[11] ^= 1;
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_unchecked(&c[..])).unwrap_err(),
            Error::BadChecksum
        );
        let mut c = b;
        c[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&c[..]).unwrap_err(),
            Error::Malformed
        );
        let mut c = b;
        c[3] = 10; // total length below the header length
        assert_eq!(
            Ipv4Packet::new_checked(&c[..]).unwrap_err(),
            Error::Malformed
        );
    }

    #[test]
    fn ipv6_golden() {
        // 6 | TC 0x02 | FL 0x12345 -> 0x6021_2345; payload 8; UDP; hop 64; ::1 -> ::2.
        let mut b = [0u8; 48];
        b[..8].copy_from_slice(&[0x60, 0x21, 0x23, 0x45, 0x00, 0x08, 0x11, 0x40]);
        b[23] = 1;
        b[39] = 2;
        let r = Ipv6Repr::parse(&Ipv6Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(
            (r.traffic_class, r.flow_label, r.payload_len),
            (2, 0x12345, 8)
        );
        let mut out = [0u8; 40];
        r.emit(&mut out).unwrap();
        assert_eq!(out, b[..40]);
        assert_eq!(
            Ipv6Packet::new_checked(&b[..47]).unwrap_err(),
            Error::Truncated
        );
    }
}
