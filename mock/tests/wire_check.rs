//! The `uhca-wirecheck` binary over good and corrupted pcaps.

use std::path::PathBuf;
use std::process::Command;

use uhca_mock::wire::pcap::{LinkType, PcapWriter};
use uhca_mock::wire::{
    AethSyndrome, BthRepr, EthernetRepr, IbPacketRepr, IbTransportRepr, IpRepr, Ipv4Repr,
    LinkNextHeader, LrhRepr, Opcode, RoceV2Repr,
};

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("uhca-wirecheck-{}-{name}", std::process::id()))
}

fn roce(t: IbTransportRepr<'_>) -> Vec<u8> {
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
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b).unwrap();
    b
}

fn ib(t: IbTransportRepr<'_>) -> Vec<u8> {
    let lrh = LrhRepr {
        vl: 0,
        lver: 0,
        sl: 0,
        lnh: LinkNextHeader::IbaLocal,
        dlid: 2,
        packet_length: 0,
        slid: 1,
    };
    let p = IbPacketRepr {
        lrh,
        grh: None,
        transport: t,
    };
    let mut b = vec![0u8; p.buffer_len()];
    p.emit(&mut b).unwrap();
    b
}

fn write(name: &str, link: LinkType, packets: &[Vec<u8>]) -> PathBuf {
    let path = tmp(name);
    let mut w = PcapWriter::new(std::fs::File::create(&path).unwrap(), link).unwrap();
    for (i, p) in packets.iter().enumerate() {
        w.write_packet(i as u64, p).unwrap();
    }
    path
}

fn wirecheck(path: &PathBuf) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_uhca-wirecheck"))
        .arg("-q")
        .arg(path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(path);
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn send(psn: u32) -> IbTransportRepr<'static> {
    IbTransportRepr::new(BthRepr::new(Opcode::RcSendOnly, 0x12, psn), b"hello")
}

fn ack() -> IbTransportRepr<'static> {
    IbTransportRepr::new(BthRepr::new(Opcode::RcAcknowledge, 0x11, 1), &[])
        .with_aeth(AethSyndrome::Ack { credit_count: 31 }, 1)
}

#[test]
fn good_roce_pcap_passes_with_a_summary() {
    let mut arp = vec![0xFFu8; 42];
    arp[12] = 0x08;
    arp[13] = 0x06;
    let p = write(
        "good.pcap",
        LinkType::Ethernet,
        &[roce(send(1)), roce(send(2)), roce(ack()), arp],
    );
    let (code, out) = wirecheck(&p);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("4 packets: 3 good, 0 bad, 0 not decoded, 1 other traffic"),
        "{out}"
    );
    assert!(
        out.contains("0x04 RC SEND Only") && out.contains("0x11 RC Acknowledge"),
        "{out}"
    );
}

#[test]
fn bad_icrc_fails() {
    let mut bad = roce(send(2));
    let n = bad.len();
    bad[n - 6] ^= 0x20; // a payload byte
    let p = write("badicrc.pcap", LinkType::Ethernet, &[roce(send(1)), bad]);
    let (code, out) = wirecheck(&p);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("packet 2: BAD: bad ICRC"), "{out}");
}

#[test]
fn native_ib_pcap_and_bad_vcrc() {
    let p = write("ib.pcap", LinkType::User0, &[ib(send(1)), ib(ack())]);
    let (code, out) = wirecheck(&p);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("2 packets: 2 good"), "{out}");
    let mut bad = ib(send(1));
    let n = bad.len();
    bad[n - 1] ^= 1;
    let mut short = ib(ack());
    short.truncate(10);
    let p = write("ibbad.pcap", LinkType::User0, &[bad, short]);
    let (code, out) = wirecheck(&p);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("packet 1: BAD: bad VCRC") && out.contains("packet 2: BAD: truncated"),
        "{out}"
    );
}

#[test]
fn not_a_pcap_is_a_usage_error() {
    let path = tmp("garbage.pcap");
    std::fs::write(&path, b"this is not a pcap file at all").unwrap();
    assert_eq!(wirecheck(&path).0, 2);
}

#[test]
fn scapy_frames_pass() {
    let frames: Vec<Vec<u8>> = include_str!("vectors/roce_scapy.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let h = l.split_whitespace().nth(2).unwrap();
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                .collect()
        })
        .collect();
    let p = write("scapy.pcap", LinkType::Ethernet, &frames);
    let (code, out) = wirecheck(&p);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("{n} packets: {n} good", n = frames.len())),
        "{out}"
    );
}

/// Runs the binary on `path` with its standard output (and error, as `2>&1 | head` does) a
/// pipe whose reader is already gone: every write fails with `EPIPE`.
fn wirecheck_into_closed_pipe(path: &PathBuf) -> i32 {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = Command::new(env!("CARGO_BIN_EXE_uhca-wirecheck"))
        .arg(path)
        .stderr(writer.try_clone().unwrap())
        .stdout(writer)
        .status()
        .unwrap();
    // A panic (std's `println!` on EPIPE) would be status 101.
    status.code().unwrap()
}

/// Runs the binary on a file holding `bytes`: (exit status, standard error).
fn wirecheck_bytes(name: &str, bytes: &[u8]) -> (i32, String) {
    let path = tmp(name);
    std::fs::write(&path, bytes).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_uhca-wirecheck"))
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_closed_stdout_ends_the_report_quietly_and_keeps_the_verdict() {
    // `uhca-wirecheck FILE 2>&1 | head`: no panic, and the status still says whether
    // a packet was bad.
    let p = write(
        "pipe-good.pcap",
        LinkType::Ethernet,
        &[roce(send(1)), roce(ack())],
    );
    let code = wirecheck_into_closed_pipe(&p);
    let _ = std::fs::remove_file(&p);
    assert_eq!(code, 0);

    let mut bad = roce(send(2));
    let n = bad.len();
    bad[n - 6] ^= 0x20;
    let p = write("pipe-bad.pcap", LinkType::Ethernet, &[roce(send(1)), bad]);
    let code = wirecheck_into_closed_pipe(&p);
    let _ = std::fs::remove_file(&p);
    assert_eq!(code, 1);
}

#[test]
fn an_empty_capture_says_it_is_empty() {
    let (code, stderr) = wirecheck_bytes("empty.pcap", &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("the file is empty"), "{stderr}");
}

#[test]
fn a_cut_capture_says_it_is_truncated() {
    let whole = std::fs::read(write(
        "cut.pcap",
        LinkType::Ethernet,
        &[roce(send(1)), roce(send(2))],
    ))
    .unwrap();
    let _ = std::fs::remove_file(tmp("cut.pcap"));
    // Inside the 24-byte file header.
    let (code, stderr) = wirecheck_bytes("cut-header.pcap", &whole[..10]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("ends inside the capture header (10 bytes") && stderr.contains("truncated"),
        "{stderr}"
    );
    // Inside the second packet's record.
    let (code, stderr) = wirecheck_bytes("cut-record.pcap", &whole[..whole.len() - 3]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("packet 2: the file ends inside this record")
            && stderr.contains("(1 whole packets before it)"),
        "{stderr}"
    );
}
