//! Native InfiniBand packets: golden bytes and round trips of every opcode.
//!
//! The golden packets were assembled by hand from the IBTA layouts. Their ICRC is Python's
//! `zlib.crc32` over the packet with the variant fields set to ones, worked out separately
//! from this crate; their VCRC is a bit-serial Python CRC-16 with Endace `dagcrc.c`'s
//! parameters (reflected polynomial 0xD008, initial value 0xFFFF, final XOR 0xFFFF), both
//! stored low byte first.

use uhca_mock::wire::crc::Crc16;
use uhca_mock::wire::{
    AethSyndrome, BthRepr, Error, EthernetRepr, GrhRepr, IbPacketRepr, IbTransportRepr, IpRepr,
    Ipv4Repr, Ipv6Repr, LinkNextHeader, LrhRepr, NakCode, Opcode, RoceV2Repr,
};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// LRH: VL 0 LVer 0 | SL 0 LNH 0b10 (local) | DLID 2 | PktLen 7 words (28 bytes) | SLID 1;
/// BTH: RC SEND Only (0x04) | SE 0 M 0 PadCnt 0 TVer 0 | P_Key 0xFFFF | 0 | DestQP 0x12 |
/// A 0 | PSN 1; payload "ping"; ICRC 0xd65a2e97 (LE: 97 2e 5a d6); VCRC 0x2081 (LE: 81 20).
const LOCAL: &str = "00020002000700010400ffff000000120000000170696e67972e5ad68120";

/// LRH: VL 3 | SL 2 LNH 0b11 (global) | DLID 2 | PktLen 19 words | SLID 1;
/// GRH: IPVer 6 TClass 0xA5 FlowLabel 0x12345 | PayLen 28 | NxtHdr 0x1B | HopLmt 64 |
/// SGID fe80::1 | DGID fe80::2;
/// BTH: UD SEND Only (0x64) | PadCnt 1 | P_Key 0xFFFF | DestQP 1 | PSN 5;
/// DETH: Q_Key 0x00010000 | SrcQP 2; payload "abc" + 1 pad byte;
/// ICRC 0x3b328072; VCRC 0x84a1.
const GLOBAL: &str = "30230002001300016a512345001c1b40fe800000000000000000000000000001fe8000000000000000000000000000026410ffff00000001000000050001000000000002616263007280323ba184";

#[test]
fn vcrc_matches_endace_parameters() {
    // Python: the bit-serial CRC-16 with dagcrc.c's parameters over b"123456789" = 0x0a3d.
    assert_eq!(Crc16::checksum(b"123456789"), 0x0a3d);
}

#[test]
fn golden_local_packet() {
    let bytes = hex(LOCAL);
    let p = IbPacketRepr::parse(&bytes).unwrap();
    assert_eq!(p.lrh.lnh, LinkNextHeader::IbaLocal);
    assert_eq!((p.lrh.dlid, p.lrh.slid, p.lrh.packet_length), (2, 1, 7));
    assert!(p.grh.is_none());
    assert_eq!(p.transport.bth.opcode, Opcode::RcSendOnly);
    assert_eq!((p.transport.bth.dest_qp, p.transport.bth.psn), (0x12, 1));
    assert_eq!(p.transport.payload, b"ping");

    let built = IbPacketRepr {
        lrh: LrhRepr {
            vl: 0,
            lver: 0,
            sl: 0,
            lnh: LinkNextHeader::Raw, // filled in by emit
            dlid: 2,
            packet_length: 0, // filled in by emit
            slid: 1,
        },
        grh: None,
        transport: IbTransportRepr::new(BthRepr::new(Opcode::RcSendOnly, 0x12, 1), b"ping"),
    };
    let mut out = vec![0u8; built.buffer_len()];
    built.emit(&mut out).unwrap();
    assert_eq!(out, bytes);
}

#[test]
fn golden_global_packet() {
    let bytes = hex(GLOBAL);
    let p = IbPacketRepr::parse(&bytes).unwrap();
    let g = p.grh.unwrap();
    assert_eq!(
        (g.traffic_class, g.flow_label, g.payload_length, g.hop_limit),
        (0xA5, 0x12345, 28, 64)
    );
    assert_eq!(p.transport.bth.pad_count, 1);
    assert_eq!(p.transport.payload, b"abc");
    assert_eq!(p.transport.deth.unwrap().src_qp, 2);
    let mut out = vec![0u8; p.buffer_len()];
    p.emit(&mut out).unwrap();
    assert_eq!(out, bytes);

    // Variant fields: VL, SL, DLID... (a router rewrites the LRH), TClass, FlowLabel, HopLmt
    // leave the ICRC alone; only the VCRC changes, so recompute it.
    let mut q = bytes.clone();
    q[0] = 0xF0; // VL 15
    q[8 + 1] = 0x00; // TClass low nibble, FlowLabel high nibble
    q[8 + 7] = 1; // HopLmt
    let n = q.len() - 2;
    let v = Crc16::checksum(&q[..n]).to_le_bytes();
    q[n..].copy_from_slice(&v);
    assert!(IbPacketRepr::parse(&q).is_ok());
}

#[test]
fn crc_and_length_errors() {
    let bytes = hex(LOCAL);
    let n = bytes.len();
    let mut q = bytes.clone();
    q[n - 1] ^= 1;
    assert_eq!(IbPacketRepr::parse(&q).unwrap_err(), Error::BadVcrc);
    // Corrupt the payload and fix the VCRC: the ICRC catches it.
    let mut q = bytes.clone();
    q[20] ^= 1;
    let v = Crc16::checksum(&q[..n - 2]).to_le_bytes();
    q[n - 2..].copy_from_slice(&v);
    assert_eq!(IbPacketRepr::parse(&q).unwrap_err(), Error::BadIcrc);
    for len in 0..n {
        assert!(IbPacketRepr::parse(&bytes[..len]).is_err());
    }
    let mut long = bytes.clone();
    long.push(0);
    assert_eq!(IbPacketRepr::parse(&long).unwrap_err(), Error::Malformed);
    let mut raw = bytes.clone();
    raw[1] = 0x00; // LNH raw
    assert_eq!(IbPacketRepr::parse(&raw).unwrap_err(), Error::Unsupported);
}

/// One transport packet per known opcode, with the headers the opcode calls for.
fn all_transports(payload: &[u8]) -> Vec<IbTransportRepr<'_>> {
    Opcode::ALL
        .iter()
        .map(|&op| {
            let h = op.headers().unwrap();
            let mut bth = BthRepr::new(op, 0xABCDEF, 0xFFFFFE);
            bth.solicited = true;
            bth.ack_req = true;
            bth.pkey = 0x8001;
            let mut t = IbTransportRepr::new(bth, if h.payload { payload } else { &[] });
            if h.deth {
                t = t.with_deth(0x8000_0001, 0x123456);
            }
            if h.xrceth {
                t = t.with_xrceth(0x00AB_CDEF);
            }
            if h.reth {
                t = t.with_reth(0x1122_3344_5566_7788, 0x99AA_BBCC, 4096);
            }
            if h.atomic_eth {
                t = t.with_atomic_eth(0x8, 0x77, 0x1234, 0x5678);
            }
            if h.aeth {
                t = t.with_aeth(AethSyndrome::Nak(NakCode::RemoteAccessError), 0xFFFFFF);
            }
            if h.atomic_ack_eth {
                t = t.with_atomic_ack_eth(0xFEDC_BA98_7654_3210);
            }
            if h.imm_dt {
                t = t.with_imm_dt(0x0102_0304);
            }
            if h.ieth {
                t = t.with_ieth(0x0A0B_0C0D);
            }
            t
        })
        .collect()
}

#[test]
fn every_opcode_round_trips_over_native_ib_and_roce() {
    for len in [0usize, 1, 2, 3, 4, 5, 255, 256, 4093] {
        let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
        for t in all_transports(&payload) {
            let mut expect = t;
            expect.bth.pad_count = t.pad_count();

            let lrh = LrhRepr {
                vl: 1,
                lver: 0,
                sl: 5,
                lnh: LinkNextHeader::IbaLocal,
                dlid: 0xC000,
                packet_length: 0,
                slid: 7,
            };
            for grh in [None, Some(GrhRepr::new([1; 16], [2; 16]))] {
                let p = IbPacketRepr {
                    lrh,
                    grh,
                    transport: t,
                };
                let mut buf = vec![0u8; p.buffer_len()];
                match p.emit(&mut buf) {
                    Ok(()) => {}
                    Err(Error::Malformed) => {
                        assert!(p.buffer_len() > 8190, "{:?}", t.bth.opcode);
                        continue;
                    }
                    Err(e) => panic!("{:?}: {e}", t.bth.opcode),
                }
                let q = IbPacketRepr::parse(&buf).unwrap();
                assert_eq!(q.transport, expect, "{:?} len {len}", t.bth.opcode);
                assert_eq!(buf.len() % 4, 2);
            }

            let ips = [
                IpRepr::Ipv4(Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2])),
                IpRepr::Ipv6(Ipv6Repr::new([0xfe; 16], [0xfd; 16])),
            ];
            for ip in ips {
                let r = RoceV2Repr {
                    eth: EthernetRepr {
                        dst: [2, 0, 0, 0, 0, 2],
                        src: [2, 0, 0, 0, 0, 1],
                        vlan: None,
                    },
                    ip,
                    udp_src_port: 0xC000,
                    transport: t,
                };
                let mut buf = vec![0u8; r.buffer_len()];
                r.emit(&mut buf).unwrap();
                let q = RoceV2Repr::parse(&buf).unwrap();
                assert_eq!(q.transport, expect, "{:?} len {len}", t.bth.opcode);
                assert_eq!(q.udp_src_port, 0xC000);
            }
        }
    }
}

#[test]
fn emit_rejects_headers_that_do_not_match_the_opcode() {
    let bth = BthRepr::new(Opcode::RcRdmaWriteOnly, 1, 1);
    let mut buf = [0u8; 64];
    // Missing RETH.
    assert_eq!(
        IbTransportRepr::new(bth, b"x").emit(&mut buf).unwrap_err(),
        Error::Malformed
    );
    // Payload on an Acknowledge.
    let ack = IbTransportRepr::new(BthRepr::new(Opcode::RcAcknowledge, 1, 1), b"x")
        .with_aeth(AethSyndrome::Ack { credit_count: 0 }, 0);
    assert_eq!(ack.emit(&mut buf).unwrap_err(), Error::Malformed);
    // Unknown opcode.
    let u = IbTransportRepr::new(BthRepr::new(Opcode::Unknown(0x15), 1, 1), &[]);
    assert_eq!(u.emit(&mut buf).unwrap_err(), Error::Unsupported);
    // Short buffer.
    let ok = IbTransportRepr::new(BthRepr::new(Opcode::RcSendOnly, 1, 1), b"hello");
    assert_eq!(ok.emit(&mut buf[..15]).unwrap_err(), Error::Truncated);
    assert!(ok.emit(&mut buf[..20]).is_ok());
}

#[test]
fn transport_parse_errors() {
    // An unknown opcode (RD SEND Only, 0x44) is unsupported.
    let mut b = [0u8; 16];
    b[0] = 0x44;
    assert_eq!(IbTransportRepr::parse(&b).unwrap_err(), Error::Unsupported);
    // PadCnt 3 with no payload bytes at all is malformed.
    let mut b = [0u8; 12];
    b[0] = 0x04;
    b[1] = 0x30;
    assert_eq!(IbTransportRepr::parse(&b).unwrap_err(), Error::Malformed);
    // Length not a multiple of 4.
    let b = [0x04u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    assert_eq!(IbTransportRepr::parse(&b).unwrap_err(), Error::Malformed);
    // RDMA READ Request cut inside the RETH.
    let mut b = [0u8; 24];
    b[0] = 0x0C;
    assert_eq!(IbTransportRepr::parse(&b).unwrap_err(), Error::Truncated);
}
