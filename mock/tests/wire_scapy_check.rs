//! scapy (an independent ICRC implementation) confirms the ICRC of RoCEv2 frames emitted by
//! `uhca_mock::wire`, for every opcode, over IPv4, IPv4 with 802.1Q and IPv6.
//!
//! Skipped, with a message, when python3 with scapy is not installed; set
//! `UHCA_REQUIRE_SCAPY=1` (CI does) to make that a failure. Install: `pip install scapy`.

use std::process::Command;

use uhca_mock::wire::pcap::{LinkType, PcapWriter};
use uhca_mock::wire::{
    AethSyndrome, BthRepr, EthernetRepr, IbTransportRepr, IpRepr, Ipv4Repr, Ipv6Repr, Opcode,
    RoceV2Repr, VlanTag,
};

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/vectors/check_icrc_scapy.py"
);

fn scapy_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import scapy.contrib.roce"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        if std::env::var("UHCA_REQUIRE_SCAPY").as_deref() == Ok("1") {
            panic!(
                "UHCA_REQUIRE_SCAPY=1 but python3 cannot import scapy.contrib.roce: pip install scapy"
            );
        }
        eprintln!(
            "SKIPPED: python3 with scapy is not installed (set UHCA_REQUIRE_SCAPY=1 to fail instead)"
        );
    }
    ok
}

#[test]
fn scapy_confirms_the_icrc_of_every_opcode() {
    if !scapy_available() {
        return;
    }
    let path = std::env::temp_dir().join(format!("uhca-wire-scapy-{}.pcap", std::process::id()));
    let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap(), LinkType::Ethernet).unwrap();
    let payload: Vec<u8> = (0..37u8).collect();
    let mut n = 0u64;
    for &op in Opcode::ALL {
        let h = op.headers().unwrap();
        let mut bth = BthRepr::new(op, 0x00AB_CDEF, 0x00FF_FFFF);
        bth.solicited = true;
        bth.fecn = true; // masked in the ICRC
        let mut t = IbTransportRepr::new(bth, if h.payload { &payload[..] } else { &[] });
        if h.deth {
            t = t.with_deth(0x8000_0000, 3);
        }
        if h.xrceth {
            t = t.with_xrceth(0x12_3456);
        }
        if h.reth {
            t = t.with_reth(0xFFFF_0000_1234_5678, 0xDEAD, 37);
        }
        if h.atomic_eth {
            t = t.with_atomic_eth(0x10, 0xBEEF, 5, 6);
        }
        if h.aeth {
            t = t.with_aeth(AethSyndrome::RnrNak { timer: 12 }, 0x123456);
        }
        if h.atomic_ack_eth {
            t = t.with_atomic_ack_eth(u64::MAX);
        }
        if h.imm_dt {
            t = t.with_imm_dt(0x0102_0304);
        }
        if h.ieth {
            t = t.with_ieth(0x0506_0708);
        }
        let mut v4 = Ipv4Repr::new([192, 168, 7, 1], [192, 168, 7, 2]);
        v4.ecn = 3; // masked
        v4.ident = 0x4242;
        let mut v6 = Ipv6Repr::new([0x20; 16], [0x30; 16]);
        v6.flow_label = 0xFEDCB; // masked
        v6.traffic_class = 0x8A;
        for (ip, vlan) in [
            (IpRepr::Ipv4(v4), None),
            (
                IpRepr::Ipv4(v4),
                Some(VlanTag {
                    pcp: 5,
                    dei: false,
                    vid: 42,
                }),
            ),
            (IpRepr::Ipv6(v6), None),
        ] {
            let r = RoceV2Repr {
                eth: EthernetRepr {
                    dst: [2, 0, 0, 0, 0, 2],
                    src: [2, 0, 0, 0, 0, 1],
                    vlan,
                },
                ip,
                udp_src_port: 0xD000,
                transport: t,
            };
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut buf).unwrap();
            w.write_packet(n, &buf).unwrap();
            n += 1;
        }
    }
    drop(w);
    let out = Command::new("python3")
        .arg(SCRIPT)
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scapy rejects ICRCs:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("{n} RoCEv2 packets, 0 with a bad ICRC")),
        "{text}"
    );
}
