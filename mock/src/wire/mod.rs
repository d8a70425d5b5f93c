//! Wire formats: InfiniBand and RoCEv2 packets as real bytes, with parse and emit.
//!
//! The module follows smoltcp's `wire` style:
//!
//! * a *packet view* (`Packet<T: AsRef<[u8]>>`, `Lrh<T>`, ...) wraps a byte buffer and gives
//!   field getters (and, for `T: AsMut<[u8]>`, setters). `new_unchecked` wraps any buffer;
//!   `new_checked` first verifies that every fixed field is in bounds (else
//!   [`Error::Truncated`]) and that length fields are consistent (else [`Error::Malformed`]).
//! * a *representation* (`...Repr`) is the parsed, validated, owned-or-borrowed high-level form
//!   with `parse(&Packet) -> Result<Repr>`, `buffer_len()` and `emit(&mut Packet)`.
//! * enums that map wire numbers ([`Opcode`], [`AethSyndrome`], [`EtherType`], [`LinkNextHeader`]
//!   ...) have a lossless `Unknown(x)` variant, so `u8 -> enum -> u8` is the identity.
//!
//! The layers:
//!
//! | module | holds |
//! | --- | --- |
//! | [`crc`] | CRC-32 (ICRC) and CRC-16 (VCRC) engines |
//! | [`ib`] | LRH, GRH, BTH with the opcode table, RETH, AETH, AtomicETH, AtomicAckETH, DETH, ImmDt, IETH; [`IbTransportRepr`] (BTH to end of payload); [`IbPacketRepr`] (a whole native IB packet with ICRC and VCRC) |
//! | [`icrc`] | the ICRC of native IB and RoCEv2 packets, with the IBTA masking |
//! | [`eth`], [`ip`], [`udp`] | Ethernet II with optional 802.1Q, IPv4, IPv6, UDP |
//! | [`roce`] | [`RoceV2Repr`]: a whole RoCEv2 frame, Ethernet to ICRC; the IP datagram alone; the UDP payload alone (BTH to ICRC, for a transport over UDP sockets) |
//! | [`pcap`] | a pcap writer and reader (link type 1 for RoCEv2, DLT_USER0 = 147 for native IB) |
//!
//! # Building and parsing a packet
//!
//! ```
//! use uhca_mock::wire::{
//!     BthRepr, EthernetRepr, IbTransportRepr, IpRepr, Ipv4Repr, Opcode, RoceV2Repr,
//! };
//!
//! let payload = b"hello";
//! let repr = RoceV2Repr {
//!     eth: EthernetRepr { dst: [2, 0, 0, 0, 0, 2], src: [2, 0, 0, 0, 0, 1], vlan: None },
//!     ip: IpRepr::Ipv4(Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2])),
//!     udp_src_port: 49152,
//!     transport: IbTransportRepr::new(BthRepr::new(Opcode::RcSendOnly, 0x12, 7), payload),
//! };
//! let mut frame = vec![0u8; repr.buffer_len()];
//! repr.emit(&mut frame).unwrap(); // also fills in lengths, checksums and the ICRC
//!
//! let parsed = RoceV2Repr::parse(&frame).unwrap(); // checks lengths, checksums and the ICRC
//! assert_eq!(parsed.transport.bth.dest_qp, 0x12);
//! assert_eq!(parsed.transport.payload, payload);
//! ```
//!
//! # Panic guarantees
//!
//! Nothing in this module panics on any input bytes when used through `new_checked`,
//! any `Repr::parse`, the ICRC/VCRC functions or the pcap reader: malformed input is an
//! [`Error`] for the caller to count and drop. Field accessors on a view built with
//! `new_unchecked` panic if the buffer is too short for the field accessed (as in smoltcp);
//! `emit` functions return [`Error::Truncated`] instead of panicking if the buffer is shorter
//! than `buffer_len()` (for `Repr`s whose `emit` returns a `Result`) or panic on a too-short
//! buffer when documented (header views' `emit`, which take a view already checked by the caller).
//! Parse and emit never allocate.
//!
//! # Verification
//!
//! * CRC-32 (the ICRC engine) is checked against golden values from Python's `zlib.crc32`.
//! * RoCEv2 ICRC, IPv4 header checksum and IPv6 UDP checksum are checked against frames built
//!   by scapy's `scapy.contrib.roce` (`mock/tests/vectors/`): every scapy frame parses with a
//!   good ICRC, and re-emitting the parsed representation reproduces the frame byte for byte.
//! * The VCRC's parameters (CRC-16, polynomial 0x100B, reflected, initial value 0xFFFF, final
//!   XOR 0xFFFF) are those of Endace's `dagcrc.c` (`dagcrc_infiniband_vcrc16_r`, the DAG
//!   capture library behind Wireshark's ERF InfiniBand support); the value is checked against
//!   a bit-serial MSB-first reference with polynomial 0x100B. The *byte order* of the VCRC on
//!   the wire (low byte first, like the ICRC) has not been checked against a capture.
//! * The native-IB ICRC masking (LRH:VL for a local packet, the whole LRH plus GRH traffic
//!   class, flow label and hop limit for a global packet, BTH byte 4 always) follows the IBTA
//!   specification's list of variant fields; it has not been checked against an independent
//!   implementation or a hardware capture. It reduces to exactly the RoCEv2 rule (which is
//!   verified) when the LRH is replaced by the IP header.
//! * tshark decodes the pcaps the writer produces (`mock/tests/wire_tshark.rs`).

#![forbid(unsafe_code)]

pub mod crc;
pub mod eth;
pub mod ib;
pub mod icrc;
pub mod ip;
pub mod pcap;
pub mod roce;
pub mod udp;

use core::fmt;

pub use eth::{EtherType, EthernetFrame, EthernetRepr, VlanTag};
pub use ib::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, ExtHeaders,
    GrhRepr, IbPacketRepr, IbTransportRepr, LinkNextHeader, LrhRepr, NakCode, Opcode, RethRepr,
    TransportService,
};
pub use ip::{IpProtocol, IpRepr, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr};
pub use roce::{ROCEV2_UDP_PORT, RoceV2Repr};
pub use udp::{UdpPacket, UdpRepr};

/// Why a packet could not be parsed or emitted.
///
/// Every variant means "drop the packet and count it"; none is a programming error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// The buffer is shorter than a header or than a length field says.
    Truncated,
    /// A field has a value the format does not allow (bad version, inconsistent lengths,
    /// pad count larger than the payload, ...).
    Malformed,
    /// Well-formed, but not something this module decodes (an ethertype other than IPv4,
    /// IPv6 or 802.1Q, a UDP port other than 4791, a raw IB packet, an opcode whose headers
    /// are not known: RD, XRC, reserved).
    Unsupported,
    /// The invariant CRC does not match.
    BadIcrc,
    /// The variant CRC (native InfiniBand) does not match.
    BadVcrc,
    /// The IPv4 header checksum or the UDP checksum does not match.
    BadChecksum,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated packet",
            Error::Malformed => "malformed packet",
            Error::Unsupported => "unsupported packet",
            Error::BadIcrc => "bad ICRC",
            Error::BadVcrc => "bad VCRC",
            Error::BadChecksum => "bad IP or UDP checksum",
        })
    }
}

impl std::error::Error for Error {}

/// The result type of this module.
pub type Result<T> = core::result::Result<T, Error>;

/// A byte range of a fixed-size field.
pub(crate) type Field = core::ops::Range<usize>;

/// Big-endian helpers over slices. They panic only if the range is out of bounds, which the
/// checked views rule out.
pub(crate) mod be {
    #[inline]
    pub fn u16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    #[inline]
    pub fn u24(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
    }
    #[inline]
    pub fn u32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    #[inline]
    pub fn u64(b: &[u8], at: usize) -> u64 {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[at..at + 8]);
        u64::from_be_bytes(x)
    }
    #[inline]
    pub fn set_u16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_u24(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    #[inline]
    pub fn set_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_u64(b: &mut [u8], at: usize, v: u64) {
        b[at..at + 8].copy_from_slice(&v.to_be_bytes());
    }
}
