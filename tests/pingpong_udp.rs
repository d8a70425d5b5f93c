//! `rc_pingpong --udp` between two processes on loopback addresses: two mock HCAs, each
//! behind its own kernel UDP socket on port 4791, doing the rdma-core ping-pong with the
//! rdma-core out-of-band exchange.

mod common;

use std::process::Command;

use common::{example, pair, run_ok};

#[test]
fn rc_pingpong_between_two_processes_over_real_udp() {
    let [c, s] = pair(
        "rc_pingpong",
        "127.0.0.61",
        "127.0.0.62",
        &["-n", "200", "-s", "2048"],
    );
    for (who, (out, text)) in [("client", &c), ("server", &s)] {
        assert!(out.status.success(), "{who} failed:\n{text}");
        assert!(text.contains("200 iters in"), "{who}:\n{text}");
        assert!(text.contains("819200 bytes in"), "{who}:\n{text}");
    }
    // Each side saw the other's GID: the IPv4-mapped address of the other process.
    let c_text = &c.1;
    assert!(
        c_text.contains("remote address: LID 0x0000") && c_text.contains("ffff:7f00:003d"),
        "{c_text}"
    );
}

#[test]
fn ud_pingpong_between_two_processes_over_real_udp() {
    let [(c, c_text), (s, s_text)] = pair(
        "ud_pingpong",
        "127.0.0.63",
        "127.0.0.64",
        &["-n", "100", "-s", "1024"],
    );
    assert!(c.status.success(), "client:\n{c_text}\nserver:\n{s_text}");
    assert!(s.status.success(), "server:\n{s_text}\nclient:\n{c_text}");
    assert!(
        c_text.contains("100 iters in") && c_text.contains("204800 bytes in"),
        "{c_text}"
    );
}

#[test]
fn pingpongs_on_two_mock_hcas_in_one_process() {
    let rc = run_ok("rc_pingpong", &["--mock", "-n", "50", "-s", "3000"]);
    assert_eq!(
        rc.matches("50 iters in").count(),
        2,
        "both sides report:\n{rc}"
    );
    let ud = run_ok("ud_pingpong", &["--mock", "-n", "50", "-s", "512"]);
    assert_eq!(
        ud.matches("50 iters in").count(),
        2,
        "both sides report:\n{ud}"
    );
    // A datagram larger than the path MTU is refused, as rdma-core refuses it.
    let bin = example("ud_pingpong");
    let out = Command::new(&bin)
        .args(["--mock", "-n", "1", "-s", "4000"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("larger than the port MTU"));
}
