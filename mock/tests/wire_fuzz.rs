//! A loop-based fuzz test: random bytes and mutated valid packets through every parser.
//! The property: no input panics, and whatever parses re-emits to something that parses to
//! the same representation. Seeded, so a failure reproduces; `UHCA_FUZZ_ITERS` scales it.

use uhca_mock::wire::crc::{Crc16, Crc32};
use uhca_mock::wire::eth::EthernetFrame;
use uhca_mock::wire::ib::{Aeth, AtomicEth, Bth, Deth, Grh, Lrh, Reth};
use uhca_mock::wire::icrc::{ib_icrc, roce_v2_icrc, vcrc};
use uhca_mock::wire::pcap::PcapReader;
use uhca_mock::wire::{
    AethSyndrome, IpRepr, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, LinkNextHeader, Opcode,
    RoceV2Repr, UdpPacket,
};

#[path = "support/packets.rs"]
mod packets;
use packets::HeaderValues;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn iters() -> usize {
    std::env::var("UHCA_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000)
}

/// Touch every getter of every view over `b` (checked constructors only).
fn views(b: &[u8]) {
    if let Ok(p) = Lrh::new_checked(b) {
        let _ = (
            p.vl(),
            p.lver(),
            p.sl(),
            p.lnh(),
            p.dlid(),
            p.packet_length(),
            p.slid(),
        );
    }
    if let Ok(p) = Grh::new_checked(b) {
        let _ = (
            p.ip_version(),
            p.traffic_class(),
            p.flow_label(),
            p.payload_length(),
            p.sgid(),
            p.dgid(),
        );
    }
    if let Ok(p) = Bth::new_checked(b) {
        let _ = (
            p.opcode(),
            p.pad_count(),
            p.pkey(),
            p.fecn(),
            p.dest_qp(),
            p.psn(),
            p.ack_req(),
        );
    }
    if let Ok(p) = Reth::new_checked(b) {
        let _ = (p.va(), p.rkey(), p.dma_len());
    }
    if let Ok(p) = Aeth::new_checked(b) {
        let _ = (p.syndrome(), p.msn());
    }
    if let Ok(p) = AtomicEth::new_checked(b) {
        let _ = (p.va(), p.rkey(), p.swap_or_add(), p.compare());
    }
    if let Ok(p) = Deth::new_checked(b) {
        let _ = (p.qkey(), p.src_qp());
    }
    if let Ok(p) = EthernetFrame::new_checked(b) {
        let _ = (p.dst_addr(), p.ethertype(), p.vlan_tag(), p.payload().len());
    }
    if let Ok(p) = Ipv4Packet::new_checked(b) {
        let _ = (
            p.total_len(),
            p.verify_checksum(),
            p.payload().len(),
            p.header().len(),
        );
    }
    if let Ok(p) = Ipv6Packet::new_checked(b) {
        let _ = (p.flow_label(), p.payload().len());
    }
    if let Ok(p) = UdpPacket::new_checked(b) {
        let ip = IpRepr::Ipv4(Ipv4Repr::new([1; 4], [2; 4]));
        let _ = (p.payload().len(), p.verify_checksum(&ip));
    }
}

/// Run every parser over `b`; check the re-emit property for what parses.
fn all_parsers(b: &[u8]) {
    views(b);
    let _ = ib_icrc(b);
    let _ = roce_v2_icrc(b);
    let _ = vcrc(b);
    packets::assert_ib_reemits(b);
    if let Ok(r) = RoceV2Repr::parse(b) {
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut out).expect("a parsed RoCEv2 frame emits");
        let q = RoceV2Repr::parse(&out).unwrap();
        assert_eq!(q.transport, r.transport);
    }
    if let Ok(mut rd) = PcapReader::new(b) {
        while let Ok(Some(_)) = rd.next_packet() {}
    }
}

/// Every opcode's transport, as a native IB packet and as RoCEv2 frames over IPv4 and IPv6.
fn valid_packets() -> Vec<Vec<u8>> {
    let payload = b"0123456789abcdefXYZ";
    let values = HeaderValues {
        dest_qp: 0x10,
        psn: 0x20,
        deth: (1, 2),
        xrc_srq: 0x77,
        reth: (3, 4, 5),
        atomic_eth: (6, 7, 8, 9),
        aeth: (AethSyndrome::RnrNak { timer: 3 }, 10),
        atomic_ack_eth: 11,
        imm_dt: 12,
        ieth: 13,
    };
    let mut out = Vec::new();
    for &op in Opcode::ALL {
        let t = packets::transport(op, &values, payload);
        out.push(packets::ib_packet(
            packets::lrh(LinkNextHeader::IbaLocal, 1, 2),
            None,
            t,
        ));
        for ip in [
            IpRepr::Ipv4(Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2])),
            IpRepr::Ipv6(Ipv6Repr::new([1; 16], [2; 16])),
        ] {
            out.push(packets::roce_frame([1; 6], [2; 6], ip, 1, t));
        }
    }
    out
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x5EED_0001);
    for _ in 0..iters() {
        let n = rng.below(200);
        let mut b = rng.bytes(n);
        // Bias the first bytes toward plausible headers so parsers get past the first check.
        match rng.below(4) {
            0 if n > 14 => {
                b[12] = 0x08;
                b[13] = 0x00;
                b[14] = 0x45;
            }
            1 if n > 1 => b[1] = (b[1] & !3) | 2,
            2 if n > 0 => b[0] = 0x45,
            _ => {}
        }
        all_parsers(&b);
    }
}

#[test]
fn mutated_valid_packets_never_panic() {
    let mut rng = Rng(0x5EED_0002);
    let valid = valid_packets();
    for v in &valid {
        all_parsers(v);
    }
    for _ in 0..iters() {
        let mut b = valid[rng.below(valid.len())].clone();
        let rounds = rng.below(4);
        for _ in 0..=rounds {
            match rng.below(4) {
                0 => {
                    let i = rng.below(b.len());
                    b[i] ^= 1 << rng.below(8);
                }
                1 => {
                    let i = rng.below(b.len());
                    b[i] = rng.next() as u8;
                }
                2 => b.truncate(rng.below(b.len() + 1)),
                _ => {
                    let k = rng.below(8);
                    b.extend(rng.bytes(k));
                }
            }
            if b.is_empty() {
                break;
            }
        }
        all_parsers(&b);
    }
}

/// Mutate the transport bytes, then wrap them in a native IB packet with a correct ICRC and
/// VCRC, so the parser gets past the CRC checks into the header logic.
#[test]
fn mutated_transports_with_good_crcs_never_panic() {
    let mut rng = Rng(0x5EED_0003);
    for _ in 0..iters() {
        let n = 4 * (3 + rng.below(16));
        let mut t = rng.bytes(n);
        t[0] = u8::from(Opcode::ALL[rng.below(Opcode::ALL.len())]);
        t[1] &= 0xF0; // TVer 0
        let mut p = vec![0x00, 0x02, 0, 1, 0, 0, 0, 2];
        let words = (8 + n + 4) / 4;
        p[4..6].copy_from_slice(&(words as u16).to_be_bytes());
        p.extend_from_slice(&t);
        let icrc = ib_icrc(&p).unwrap();
        p.extend_from_slice(&icrc.to_le_bytes());
        let v = Crc16::checksum(&p);
        p.extend_from_slice(&v.to_le_bytes());
        all_parsers(&p);
        all_parsers(&t);
    }
    let _ = Crc32::checksum(&[]);
}
