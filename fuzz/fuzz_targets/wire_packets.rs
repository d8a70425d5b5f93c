//! Whole packets: native InfiniBand (LRH to VCRC), RoCEv2 frames (Ethernet to ICRC), RoCEv2
//! IP datagrams and UDP payloads, the ICRC and VCRC functions, and `uhca-wirecheck`'s
//! verdict on a captured packet of every link type. Whatever parses must emit and parse back
//! to the same representation, parse the same through a header prediction made from it, and
//! re-seal (PSN, ICRC, VCRC or UDP checksum) to the same bytes; nothing may panic.
//!
//! The first byte is a mode: with bit 0 set, the packet's CRCs (and IPv4 header checksum)
//! are made good before parsing, so that the fuzzer reaches the header logic behind them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uhca_mock::wire::check::check;
use uhca_mock::wire::crc::Crc16;
use uhca_mock::wire::icrc::{ib_icrc, roce_v2_icrc, vcrc};
use uhca_mock::wire::pcap::LinkType;
use uhca_mock::wire::{
    EthernetFrame, IbPacketRepr, IpRepr, Ipv4Packet, Ipv4Repr, RoceV2Repr, ib, roce,
};

#[path = "../../mock/tests/support/packets.rs"]
mod packets;

/// Native IB: the last six bytes are ICRC (little-endian) and VCRC.
fn fix_ib(p: &mut [u8]) {
    let n = p.len();
    if n < 6 {
        return;
    }
    if let Ok(icrc) = ib_icrc(&p[..n - 6]) {
        p[n - 6..n - 2].copy_from_slice(&icrc.to_le_bytes());
    }
    let v = Crc16::checksum(&p[..n - 2]);
    p[n - 2..].copy_from_slice(&v.to_le_bytes());
}

/// RoCEv2 over IPv4 in an untagged Ethernet frame: IPv4 header checksum, then the ICRC.
fn fix_roce(f: &mut [u8]) {
    if f.len() < 14 + 20 + 8 + 4 {
        return;
    }
    if let Ok(mut ip) = Ipv4Packet::new_checked(&mut f[14..]) {
        ip.fill_checksum();
    }
    let d = &mut f[14..];
    let n = d.len();
    if let Ok(icrc) = roce_v2_icrc(&d[..n]) {
        d[n - 4..].copy_from_slice(&icrc.to_le_bytes());
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, b)) = data.split_first() else {
        return;
    };
    let mut b = b.to_vec();
    if mode & 1 != 0 {
        if mode & 2 != 0 {
            fix_roce(&mut b);
        } else {
            fix_ib(&mut b);
        }
    }
    let b = &b[..];

    let _ = (ib_icrc(b), roce_v2_icrc(b), vcrc(b));
    for link in [
        LinkType::Ethernet,
        LinkType::RawIp,
        LinkType::User0,
        LinkType::Infiniband,
    ] {
        let _ = check(link, b);
    }

    packets::assert_ib_reemits(b);
    if let Ok(r) = IbPacketRepr::parse(b) {
        // The receiver's header prediction, made from this packet, parses it as the parser
        // did; re-sealing it with its own PSN (the sender's header template) changes nothing.
        if let Some(p) = ib::RxPrediction::of(b, &r) {
            assert_eq!(p.parse(b).expect("predicted").expect("parses"), r);
        }
        let mut again = b.to_vec();
        ib::reseal_packet(&mut again, r.transport.bth.psn).expect("a parsed packet re-seals");
        assert_eq!(again, b);
    }
    if let Ok(r) = RoceV2Repr::parse(b) {
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut out).expect("a parsed RoCEv2 frame emits");
        let q = RoceV2Repr::parse(&out).expect("an emitted frame parses");
        assert_eq!(
            (q.eth, q.udp_src_port, q.transport),
            (r.eth, r.udp_src_port, r.transport)
        );
        // As for InfiniBand above: the prediction, and re-sealing with the same PSN.
        if let Some(p) = roce::RxPrediction::of(b, &r) {
            assert_eq!(p.parse(b).expect("predicted").expect("parses"), r);
        }
        let mut again = b.to_vec();
        roce::reseal_frame(&mut again, r.transport.bth.psn).expect("a parsed frame re-seals");
        // Over IPv6 a zero UDP checksum ("none") parses, and re-sealing computes one: the
        // engine's own frames always carry one.
        let eth = EthernetFrame::new_checked(b).expect("parsed").header_len();
        let no_v6_checksum =
            matches!(r.ip, IpRepr::Ipv6(_)) && b[eth + 40 + 6..eth + 40 + 8] == [0, 0];
        if !no_v6_checksum {
            assert_eq!(again, b);
        }
    }
    if let Ok((ip, port, t)) = roce::parse_ip_datagram(b) {
        let mut out = vec![0u8; roce::ip_datagram_len(&ip, &t)];
        roce::emit_ip_datagram(&ip, port, &t, &mut out).expect("a parsed datagram emits");
        let (_, port2, t2) = roce::parse_ip_datagram(&out).expect("an emitted datagram parses");
        assert_eq!((port2, t2), (port, t));
    }
    let _ = roce::parse_udp_payload_unverified(b);
    let ip = IpRepr::Ipv4(Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2]));
    let _ = roce::parse_udp_payload(&ip, 49152, b);
});
