//! The demo's capture, read by tools uhca did not write: tshark decodes every packet with
//! the opcodes, QPNs and PSNs the demo used, and scapy recomputes the ICRC of every RoCEv2
//! packet and finds the one on the wire.
//!
//! When tshark or scapy is missing the checks say so and pass, unless
//! `UHCA_REQUIRE_TSHARK=1` / `UHCA_REQUIRE_SCAPY=1` (CI sets both) make a missing tool a
//! failure.

use std::process::Command;

// The demo itself, from the example a newcomer opens (its `main` is unused here).
#[allow(dead_code)]
#[path = "../examples/demo.rs"]
mod demo;

fn required(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v == "1")
}

fn tool_missing(tool: &str, var: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            !required(var),
            "{tool} is required ({var}=1) but not installed"
        );
        eprintln!("SKIPPED: {tool} is not installed");
    }
    !found
}

fn capture(name: &str) -> (tempfile_path::TempPath, demo::DemoReport) {
    // One file per test: the tests run in parallel in one process.
    let path = tempfile_path::TempPath::new(name);
    let report = demo::run(Some(path.as_ref()), |_| {}).expect("the demo runs");
    (path, report)
}

/// A temporary file path removed on drop (no extra dependency).
mod tempfile_path {
    pub struct TempPath(std::path::PathBuf);
    impl TempPath {
        pub fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("uhca-test-{}-{}", std::process::id(), name));
            TempPath(dir)
        }
    }
    impl AsRef<std::path::Path> for TempPath {
        fn as_ref(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

#[test]
fn tshark_decodes_the_demo_with_its_opcodes_qpns_and_psns() {
    if tool_missing("tshark", "UHCA_REQUIRE_TSHARK") {
        return;
    }
    let (path, report) = capture("demo-tshark.pcap");
    let out = Command::new("tshark")
        .args(["-r"])
        .arg(path.as_ref())
        .args(["-T", "fields", "-E", "separator=,"])
        .args([
            "-e",
            "ip.src",
            "-e",
            "udp.dstport",
            "-e",
            "infiniband.bth.opcode",
        ])
        .args(["-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn"])
        .args(["-e", "udp.srcport"])
        .output()
        .expect("tshark runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Vec<String>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len() as u64, report.packets, "every packet decoded");
    // Requests from hca0 (10.0.0.1) to hca1's QP, responses and ACKs back to hca0's QP.
    // Both sides' paths carry the UDP source port Linux derives for a connection with flow
    // label 0 (rdma_get_udp_sport: the QPNs' product folded to a flow label, then to a port
    // in 0xC000-0xFFFF), the same both ways.
    let sport = uhca::driver::addr::udp_sport_from_flow_label(
        uhca::driver::addr::flow_label_from_qpns(report.qpn_a, report.qpn_b),
    );
    assert!(sport >= 0xc000);
    let mut requests = Vec::new();
    for r in &rows {
        assert_eq!(r[1], "4791", "RoCEv2 UDP port");
        assert_eq!(r[5], sport.to_string(), "UDP source port");
        let opcode: u32 = r[2].parse().unwrap();
        let qpn = u32::from_str_radix(r[3].trim_start_matches("0x"), 16).unwrap();
        let psn: u32 = r[4].parse().unwrap();
        if r[0] == "10.0.0.1" {
            assert_eq!(qpn, report.qpn_b);
            requests.push((opcode, psn));
        } else {
            assert_eq!(qpn, report.qpn_a);
        }
    }
    // SEND First/Middle/Last (3000 bytes at MTU 1024), RDMA WRITE Only, RDMA READ Request
    // (2048 bytes: two response packets, so the next PSN is two on), CAS, FAA. PSNs are
    // 24 bits and wrap.
    let p = |n: u32| (report.psn_a + n) & 0xff_ffff;
    let mut expected = vec![(0, p(0)), (1, p(1)), (2, p(2)), (10, p(3)), (12, p(4))];
    if report.atomics {
        expected.extend([(19, p(6)), (20, p(7))]);
    }
    assert_eq!(requests, expected);
}

#[test]
fn scapy_confirms_the_icrc_of_every_demo_packet() {
    if tool_missing("python3", "UHCA_REQUIRE_SCAPY") {
        return;
    }
    let probe = Command::new("python3")
        .args(["-c", "import scapy.contrib.roce"])
        .output()
        .unwrap();
    if !probe.status.success() {
        assert!(
            !required("UHCA_REQUIRE_SCAPY"),
            "scapy is required but not installed"
        );
        eprintln!("SKIPPED: scapy is not installed");
        return;
    }
    let (path, report) = capture("demo-scapy.pcap");
    let script = r#"
import sys
from scapy.all import rdpcap, Ether
from scapy.contrib.roce import BTH
n = 0
for p in rdpcap(sys.argv[1]):
    assert BTH in p, "not RoCEv2"
    wire = p[BTH].icrc
    q = Ether(bytes(p))
    q[BTH].icrc = None
    again = Ether(bytes(q))[BTH].icrc
    assert wire == again, f"packet {n}: ICRC {wire:#x} on the wire, scapy computes {again:#x}"
    n += 1
print(n)
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(path.as_ref())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert_eq!(n, report.packets);
}
