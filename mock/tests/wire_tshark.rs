//! tshark (an independent decoder) reads the pcaps the wire module writes.
//!
//! Skipped, with a message, when tshark is not installed; set `UHCA_REQUIRE_TSHARK=1` (CI
//! does) to make a missing tshark a failure. Install: `apt-get install -y tshark`.

use std::path::PathBuf;
use std::process::Command;

use uhca_mock::wire::pcap::{LinkType, PcapWriter, TSHARK_USER0_INFINIBAND};
use uhca_mock::wire::{
    AethSyndrome, BthRepr, EthernetRepr, GrhRepr, IbPacketRepr, IbTransportRepr, IpRepr, Ipv4Repr,
    Ipv6Repr, LinkNextHeader, LrhRepr, NakCode, Opcode, RoceV2Repr, VlanTag,
};

fn tshark_available() -> bool {
    match Command::new("tshark").arg("--version").output() {
        Ok(o) if o.status.success() => true,
        _ => {
            if std::env::var("UHCA_REQUIRE_TSHARK").as_deref() == Ok("1") {
                panic!(
                    "UHCA_REQUIRE_TSHARK=1 but tshark is not installed: \
                     apt-get install -y tshark (the wire tests check the mock's packets against its decoders)"
                );
            }
            eprintln!(
                "SKIPPED: tshark is not installed (set UHCA_REQUIRE_TSHARK=1 to fail instead)"
            );
            false
        }
    }
}

/// `tshark -V` must not flag any packet as malformed. The RPC-over-RDMA heuristic dissector
/// is turned off: it claims any SEND payload and calls our "hello" a malformed RPC message.
fn assert_not_malformed(file: &PathBuf, extra: &[&str]) {
    let out = Command::new("tshark")
        .args(extra)
        .args(["--disable-protocol", "rpcordma", "-r"])
        .arg(file)
        .arg("-V")
        .output()
        .expect("run tshark");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains("Malformed"),
        "tshark reports a malformed packet:\n{text}"
    );
    assert!(
        text.contains("InfiniBand"),
        "tshark did not decode InfiniBand:\n{text}"
    );
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("uhca-wire-{}-{name}", std::process::id()))
}

/// `tshark -r file -T fields -e ...`, one Vec of fields per packet.
fn tshark_fields(file: &PathBuf, extra: &[&str], fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.args(extra)
        .arg("-r")
        .arg(file)
        .args(["-T", "fields", "-E", "separator=|"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect()
}

fn transports<'a>() -> Vec<IbTransportRepr<'a>> {
    vec![
        IbTransportRepr::new(BthRepr::new(Opcode::RcSendOnly, 0x12, 100), b"hello"),
        IbTransportRepr::new(
            BthRepr::new(Opcode::RcRdmaWriteOnly, 0x13, 0xFF_FFFF),
            &[0xAB; 64],
        )
        .with_reth(0x7F00_0000_1000, 0x4321, 64),
        IbTransportRepr::new(BthRepr::new(Opcode::RcRdmaReadRequest, 0x14, 7), &[])
            .with_reth(0x2000, 0x55, 4096),
        IbTransportRepr::new(BthRepr::new(Opcode::RcAcknowledge, 0x15, 8), &[])
            .with_aeth(AethSyndrome::Nak(NakCode::PsnSequenceError), 3),
        IbTransportRepr::new(BthRepr::new(Opcode::RcFetchAdd, 0x16, 9), &[])
            .with_atomic_eth(0x3000, 0x66, 1, 0),
        IbTransportRepr::new(BthRepr::new(Opcode::RcAtomicAcknowledge, 0x17, 9), &[])
            .with_aeth(AethSyndrome::Ack { credit_count: 31 }, 4)
            .with_atomic_ack_eth(41),
        IbTransportRepr::new(
            BthRepr::new(Opcode::UdSendOnlyWithImmediate, 0x18, 10),
            b"ud!",
        )
        .with_deth(0x1111_1111, 0x99)
        .with_imm_dt(0xCAFE),
    ]
}

/// A tshark number: decimal, or hex with `0x`.
fn num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap_or_else(|_| panic!("not a number: {s:?}")),
    }
}

fn nums(rows: Vec<Vec<String>>) -> Vec<Vec<u64>> {
    rows.iter()
        .map(|r| r.iter().map(|s| num(s)).collect())
        .collect()
}

fn expected() -> Vec<Vec<u64>> {
    transports()
        .iter()
        .map(|t| {
            vec![
                u64::from(u8::from(t.bth.opcode)),
                u64::from(t.bth.dest_qp),
                u64::from(t.bth.psn),
            ]
        })
        .collect()
}

const FIELDS: [&str; 3] = [
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
];

#[test]
fn tshark_decodes_roce_v2_pcap() {
    if !tshark_available() {
        return;
    }
    let path = tmp("roce.pcap");
    let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap(), LinkType::Ethernet).unwrap();
    for (i, t) in transports().into_iter().enumerate() {
        let ip = if i % 2 == 0 {
            IpRepr::Ipv4(Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2]))
        } else {
            IpRepr::Ipv6(Ipv6Repr::new([0xfe; 16], [0xfd; 16]))
        };
        let vlan = (i == 3).then_some(VlanTag {
            pcp: 3,
            dei: false,
            vid: 7,
        });
        let r = RoceV2Repr {
            eth: EthernetRepr {
                dst: [2, 0, 0, 0, 0, 2],
                src: [2, 0, 0, 0, 0, 1],
                vlan,
            },
            ip,
            udp_src_port: 49152 + i as u16,
            transport: t,
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf).unwrap();
        w.write_packet(i as u64 * 1000, &buf).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    assert_not_malformed(&path, &[]);
    let got = nums(tshark_fields(&path, &[], &FIELDS));
    assert_eq!(got, expected());
    // Extension headers as tshark reads them.
    let ext = nums(
        tshark_fields(
            &path,
            &[],
            &[
                "infiniband.reth.dmalen",
                "infiniband.aeth.msn",
                "infiniband.deth.srcqp",
                "infiniband.atomicacketh.origremdt",
            ],
        )
        .into_iter()
        .map(|r| {
            r.into_iter()
                .map(|s| if s.is_empty() { "0".into() } else { s })
                .collect()
        })
        .collect(),
    );
    assert_eq!(ext[1][0], 64);
    assert_eq!(ext[2][0], 4096);
    assert_eq!(ext[3][1], 3);
    assert_eq!(ext[6][2], 0x99);
    assert_eq!(ext[5][3], 41);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn tshark_decodes_native_ib_pcap_as_dlt_user0() {
    if !tshark_available() {
        return;
    }
    let path = tmp("ib.pcap");
    let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap(), LinkType::User0).unwrap();
    for (i, t) in transports().into_iter().enumerate() {
        let lrh = LrhRepr {
            vl: 0,
            lver: 0,
            sl: 0,
            lnh: LinkNextHeader::IbaLocal,
            dlid: 2,
            packet_length: 0,
            slid: 1,
        };
        let grh = (i % 2 == 1).then(|| GrhRepr::new([0xfe; 16], [0xfd; 16]));
        let p = IbPacketRepr {
            lrh,
            grh,
            transport: t,
        };
        let mut buf = vec![0u8; p.buffer_len()];
        p.emit(&mut buf).unwrap();
        w.write_packet(i as u64 * 1000, &buf).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let prefs = ["-o", TSHARK_USER0_INFINIBAND];
    assert_not_malformed(&path, &prefs);
    assert_eq!(nums(tshark_fields(&path, &prefs, &FIELDS)), expected());
    let lrh = tshark_fields(
        &path,
        &prefs,
        &[
            "infiniband.lrh.dlid",
            "infiniband.lrh.lnh",
            "infiniband.grh.nxthdr",
        ],
    );
    assert_eq!((num(&lrh[0][0]), num(&lrh[0][1])), (2, 2));
    assert_eq!((num(&lrh[1][1]), num(&lrh[1][2])), (3, 0x1b));
    let _ = std::fs::remove_file(&path);
}

/// editcap (from the same Wireshark package) rewrites our pcap as pcapng; the reader gets the
/// same packets back, and uhca-wirecheck accepts the pcapng.
#[test]
fn reader_takes_editcap_pcapng() {
    use uhca_mock::wire::pcap::PcapReader;
    if !tshark_available() {
        return;
    }
    let pcap = tmp("conv.pcap");
    let ng = tmp("conv.pcapng");
    let mut frames = Vec::new();
    let mut w = PcapWriter::new(std::fs::File::create(&pcap).unwrap(), LinkType::Ethernet).unwrap();
    for (i, t) in transports().into_iter().enumerate() {
        let r = RoceV2Repr {
            eth: EthernetRepr {
                dst: [2, 0, 0, 0, 0, 2],
                src: [2, 0, 0, 0, 0, 1],
                vlan: None,
            },
            ip: IpRepr::Ipv4(Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2])),
            udp_src_port: 49152,
            transport: t,
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf).unwrap();
        w.write_packet(1_000_000_007 * (i as u64 + 1), &buf)
            .unwrap();
        frames.push(buf);
    }
    drop(w);
    let st = Command::new("editcap")
        .args(["-F", "pcapng"])
        .arg(&pcap)
        .arg(&ng)
        .status()
        .expect("run editcap");
    assert!(st.success());
    let mut r = PcapReader::new(std::fs::File::open(&ng).unwrap()).unwrap();
    assert_eq!(r.link_type(), LinkType::Ethernet);
    for (i, f) in frames.iter().enumerate() {
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(&p.data, f);
        assert_eq!(p.timestamp_ns, 1_000_000_007 * (i as u64 + 1));
    }
    assert!(r.next_packet().unwrap().is_none());
    let out = Command::new(env!("CARGO_BIN_EXE_uhca-wirecheck"))
        .arg(&ng)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let _ = std::fs::remove_file(&pcap);
    let _ = std::fs::remove_file(&ng);
}
