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
//! | [`check`] | the verdict on one captured packet by link type (what `uhca-wirecheck` prints) |
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
//! * No input bytes make anything here panic through `new_checked` views and their getters,
//!   any `parse`, the ICRC and VCRC functions or the pcap reader: bad input is an [`Error`]
//!   (or an `io::Error` from the pcap reader) for the caller to count and drop.
//! * The whole-packet `emit`s ([`IbTransportRepr::emit`], [`IbPacketRepr::emit`],
//!   [`RoceV2Repr::emit`], the `roce` helpers, [`Ipv4Repr::emit`], [`Ipv6Repr::emit`],
//!   [`EthernetRepr::emit`], [`UdpRepr::emit`]) return [`Error::Truncated`] for a short buffer.
//! * As in smoltcp, getters and setters of a view made with `new_unchecked`, and the single
//!   header `emit`s that take such a view ([`LrhRepr::emit`], [`BthRepr::emit`], ...), panic if
//!   the buffer is shorter than the header. These are programmer errors.
//! * Parse and emit never allocate (the pcap reader allocates each record's buffer).
//!
//! # Verification: what was checked against what
//!
//! * CRC-32 (the ICRC engine): golden values from Python's `zlib.crc32`
//!   (`crc::tests`, `mock/tests/vectors/roce_scapy.txt`).
//! * RoCEv2 ICRC, IPv4 header checksum, IPv6 UDP checksum, CNP layout: frames built by scapy
//!   2.8.0's `scapy.contrib.roce` (`mock/tests/vectors/gen_roce_scapy.py`, over IPv4, IPv4 with
//!   802.1Q, IPv6, with masked fields set): every frame parses with a good ICRC, and
//!   re-emitting the parsed representation reproduces the frame byte for byte
//!   (`mock/tests/wire_roce_vectors.rs`).
//! * VCRC: the parameters (CRC-16, polynomial 0x100B, reflected as 0xD008, initial value
//!   0xFFFF, final XOR 0xFFFF) are those of Endace's `dagcrc.c` (`dagcrc_infiniband_vcrc16_r`,
//!   from the DAG capture library); the table engine is checked against a bit-serial MSB-first
//!   reference with polynomial 0x100B, and the golden packets' VCRCs were computed by a
//!   separate Python implementation with Endace's parameters. **Unverified:** the byte order
//!   of the VCRC on the wire (low byte first here, the convention of the ICRC and of other
//!   reflected CRCs); no capture from real InfiniBand hardware was available.
//! * Native-IB ICRC masking: LRH:VL and BTH byte 4 (Resv8a, i.e. FECN/BECN/Resv6) for a local
//!   packet; the whole LRH, GRH:TClass, FlowLabel and HopLmt and BTH byte 4 for a global packet,
//!   all replaced with ones. This is the IBTA Vol 1 list of variant fields as given in
//!   T. Shanley, *InfiniBand Network Architecture* (2002), ch. 25 "Packet CRCs"; the RoCEv2
//!   rule above is the same rule with the IP header in the GRH's place (verified). It has
//!   **not** been checked against an independent implementation or a hardware capture.
//! * tshark 4.0 decodes the pcaps the writer produces, Ethernet (RoCEv2) and DLT_USER0
//!   (native IB), with the expected opcodes, QPNs, PSNs and extension-header fields, and
//!   reports no malformed packet (`mock/tests/wire_tshark.rs`). tshark does not verify ICRC or
//!   VCRC.
//! * Header layouts: golden bytes worked out by hand from the IBTA layouts, in each header's
//!   unit tests and in `mock/tests/wire_ib.rs`.
//! * No panic on any input: a seeded loop fuzzer over random bytes, mutated valid packets and
//!   mutated transports wrapped with good CRCs (`mock/tests/wire_fuzz.rs`; set
//!   `UHCA_FUZZ_ITERS` for longer runs; 1,000,000 iterations per case were run once).

#![forbid(unsafe_code)]

pub mod check;
pub mod crc;
pub mod eth;
pub mod ib;
pub mod icrc;
pub mod ip;
pub mod pcap;
mod predict;
pub mod roce;
pub mod udp;

use core::fmt;

pub use eth::{EtherType, EthernetFrame, EthernetRepr, VlanTag};
pub use ib::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, ExtHeaders,
    GrhRepr, IbPacketRepr, IbTransportRepr, LinkNextHeader, LrhRepr, MessagePosition, NakCode,
    Opcode, RethRepr, TransportService, XrcethRepr,
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
    /// are not known: RD, reserved).
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
