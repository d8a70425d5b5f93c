//! RoCEv2 frames built by scapy's `scapy.contrib.roce` (an independent implementation of the
//! ICRC, the IPv4 header checksum and the UDP checksum) against `uhca_mock::wire`.
//! The frames and the script that made them are in `tests/vectors/`.

use uhca_mock::wire::crc::Crc32;
use uhca_mock::wire::{AethSyndrome, Error, IbTransportRepr, IpRepr, Opcode, RoceV2Repr};

const VECTORS: &str = include_str!("vectors/roce_scapy.txt");

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn vectors() -> Vec<(String, bool, Vec<u8>)> {
    VECTORS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut it = l.split_whitespace();
            let name = it.next().unwrap().to_string();
            let reemit = it.next().unwrap() == "1";
            (name, reemit, hex(it.next().unwrap()))
        })
        .collect()
}

fn frame(name: &str) -> Vec<u8> {
    vectors().into_iter().find(|v| v.0 == name).unwrap().2
}

#[test]
fn crc32_matches_zlib_values_in_vector_file() {
    // The generator prints zlib.crc32 of fixed inputs; check the same inputs here.
    assert!(VECTORS.contains("len 9) = 0xcbf43926"));
    assert_eq!(Crc32::checksum(b"123456789"), 0xcbf4_3926);
    assert!(VECTORS.contains("len 256) = 0x29058c73"));
    let all: Vec<u8> = (0..=255u8).collect();
    assert_eq!(Crc32::checksum(&all), 0x2905_8c73);
}

#[test]
fn every_scapy_frame_parses_with_a_good_icrc_and_reemits_byte_for_byte() {
    let v = vectors();
    assert!(v.len() >= 8);
    for (name, reemit, bytes) in v {
        let repr = RoceV2Repr::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(repr.buffer_len(), bytes.len(), "{name}");
        if reemit {
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut out).unwrap();
            assert_eq!(out, bytes, "{name}: emit differs from scapy");
        }
    }
}

#[test]
fn decoded_fields() {
    let f = frame("v4_rc_send_only_pad3");
    let r = RoceV2Repr::parse(&f).unwrap();
    assert_eq!(r.transport.bth.opcode, Opcode::RcSendOnly);
    assert_eq!(
        (r.transport.bth.dest_qp, r.transport.bth.psn),
        (0x12, 0x100)
    );
    assert_eq!(r.transport.bth.pad_count, 3);
    assert_eq!(r.transport.payload, b"hello");
    assert_eq!(r.udp_src_port, 49152);

    let f = frame("v4_vlan_rc_write_only");
    let r = RoceV2Repr::parse(&f).unwrap();
    assert_eq!(r.eth.vlan.unwrap().vid, 100);
    assert_eq!(r.transport.bth.psn, 0xFF_FFFF);
    assert!(r.transport.bth.ack_req);
    let reth = r.transport.reth.unwrap();
    assert_eq!(
        (reth.va, reth.rkey, reth.dma_len),
        (0x7F00_1234_5000, 0x1234, 16)
    );

    let f = frame("v4_rc_ack");
    let r = RoceV2Repr::parse(&f).unwrap();
    let aeth = r.transport.aeth.unwrap();
    assert_eq!(
        (aeth.syndrome, aeth.msn),
        (AethSyndrome::Ack { credit_count: 31 }, 1)
    );

    let f = frame("v4_cnp");
    let r = RoceV2Repr::parse(&f).unwrap();
    assert_eq!(r.transport.bth.opcode, Opcode::Cnp);
    assert!(r.transport.bth.becn);
    // scapy's cnp(0x12) is exactly what IbTransportRepr::cnp builds.
    assert_eq!(r.transport, IbTransportRepr::cnp(0x12));

    let f = frame("v6_ud_send_imm");
    let r = RoceV2Repr::parse(&f).unwrap();
    let IpRepr::Ipv6(ip) = r.ip else {
        panic!("not IPv6")
    };
    assert_eq!(
        (ip.traffic_class, ip.flow_label, ip.hop_limit),
        (0x68, 0xABCDE, 5)
    );
    let deth = r.transport.deth.unwrap();
    assert_eq!((deth.qkey, deth.src_qp), (0x1111_1111, 0x42));
    assert_eq!(r.transport.imm_dt, Some(0xDEAD_BEEF));
    assert_eq!(r.transport.payload, b"datagram");

    let f = frame("v6_rc_cmp_swap");
    let r = RoceV2Repr::parse(&f).unwrap();
    let a = r.transport.atomic_eth.unwrap();
    assert_eq!(
        (a.va, a.rkey, a.swap_or_add, a.compare),
        (0x1000, 0xAABB_CCDD, 1, 2)
    );
}

#[test]
fn corruption_is_detected() {
    for (name, _, bytes) in vectors() {
        // The last payload/header byte before the ICRC.
        let mut f = bytes.clone();
        let n = f.len();
        f[n - 5] ^= 0x01;
        assert!(
            matches!(
                RoceV2Repr::parse(&f),
                Err(Error::BadIcrc | Error::BadChecksum)
            ),
            "{name}"
        );
        // The ICRC itself (over IPv6 the UDP checksum, which covers the ICRC, fails first).
        let mut f = bytes.clone();
        f[n - 1] ^= 0x80;
        assert!(
            matches!(
                RoceV2Repr::parse(&f),
                Err(Error::BadIcrc | Error::BadChecksum)
            ),
            "{name}"
        );
    }
    let mut f = frame("v4_rc_send_only_pad3"); // UDP checksum 0: the ICRC check decides
    let n = f.len();
    f[n - 1] ^= 0x80;
    assert_eq!(RoceV2Repr::parse(&f).unwrap_err(), Error::BadIcrc);
    // Masked fields (BTH FECN/BECN) do not change the ICRC.
    let mut f = frame("v4_rc_send_only_pad3");
    f[14 + 20 + 8 + 4] |= 0xC0;
    assert!(RoceV2Repr::parse(&f).is_ok());
    // Truncation anywhere is an error, never a panic.
    let f = frame("v6_ud_send_imm");
    for n in 0..f.len() {
        assert!(RoceV2Repr::parse(&f[..n]).is_err(), "len {n}");
    }
    // Ethernet padding after the datagram is ignored.
    let mut f = frame("v4_rc_ack");
    f.extend_from_slice(&[0; 10]);
    assert!(RoceV2Repr::parse(&f).is_ok());
}

#[test]
fn not_roce_is_unsupported() {
    let mut f = frame("v4_rc_ack");
    f[14 + 20 + 2] = 0x12; // UDP destination port 4791 -> 4790 (0x12b6)
    f[14 + 20 + 3] = 0xb6;
    assert_eq!(RoceV2Repr::parse(&f).unwrap_err(), Error::Unsupported);
    let mut f = frame("v4_rc_ack");
    f[12] = 0x08; // ARP
    f[13] = 0x06;
    assert_eq!(RoceV2Repr::parse(&f).unwrap_err(), Error::Unsupported);
}
