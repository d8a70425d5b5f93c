//! The hostile-network cases (`tests/hostile_net/cases.py`) against the mock: crafted
//! RoCEv2 packets, encoded by scapy (which computes their ICRC), sent over loopback from a
//! raw IPv4 socket to `examples/hostile_target.rs` (one mock HCA whose RoCEv2 port is a UDP
//! socket on 127.0.13.1), and the answers (ACK, NAK code, silence), the QP state, the receive
//! completions and the memory checked against the InfiniBand specification's. The VM rig's
//! `hostile` test sends the same cases to Linux Soft-RoCE (`tests/vm/`).
//!
//! Needs python3 with scapy and a raw socket (root or CAP_NET_RAW). Skipped, with a message,
//! without them; `UHCA_REQUIRE_SCAPY=1` (CI sets it) makes that a failure.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The example binaries `cargo test` built beside this test.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    dir.join("examples").join(name)
}

fn required() -> bool {
    std::env::var("UHCA_REQUIRE_SCAPY").as_deref() == Ok("1")
}

fn skip(why: &str) {
    assert!(!required(), "UHCA_REQUIRE_SCAPY=1 but {why}");
    eprintln!("SKIPPED: {why} (set UHCA_REQUIRE_SCAPY=1 to fail instead)");
}

#[test]
fn crafted_packets_get_the_specifications_answers_from_the_mock() {
    let scapy = Command::new("python3")
        .args(["-c", "import scapy.contrib.roce"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !scapy {
        return skip("python3 cannot import scapy.contrib.roce (pip install scapy)");
    }
    let bin = example("hostile_target");
    assert!(
        bin.exists(),
        "{} not built (cargo test builds the examples)",
        bin.display()
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/hostile_net/hostile.py");
    let mut child = Command::new("python3")
        .arg(&script)
        .args([
            "--local",
            "127.0.13.2",
            "--remote",
            "127.0.13.1",
            "--target-cmd",
        ])
        .arg(format!("'{}' --udp 127.0.13.1", bin.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    // Each case takes well under a second; every target command has its own time limit.
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(180) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}{stderr}");
    if out.status.code() == Some(77) {
        return skip("hostile.py may not open a raw socket (needs root or CAP_NET_RAW)");
    }
    assert!(out.status.success(), "hostile.py failed:\n{stdout}{stderr}");
    // Every case of the table ran and passed.
    let cases = std::fs::read_to_string(script.with_file_name("cases.py")).unwrap();
    let n = cases.matches("\n    case(\"").count();
    assert!(n >= 29, "the table has {n} cases");
    assert!(
        stdout.contains(&format!("\n{n} passed, 0 failed")),
        "expected {n} passed, 0 failed:\n{stdout}"
    );
    assert_eq!(stdout.lines().filter(|l| l.starts_with("PASS ")).count(), n);
}
