//! `rdma_bw` and `rdma_lat --udp` between two processes on loopback addresses: two mock
//! HCAs, each behind its own kernel UDP socket on port 4791, with the exchange of the
//! bandwidth and latency examples over TCP.

mod common;

use std::time::Duration;

use common::{free_tcp_port, pair, spawn, wait};

#[test]
fn rdma_bw_write_between_two_processes_over_real_udp() {
    let [(c, c_text), (s, s_text)] = pair(
        "rdma_bw",
        "127.0.0.71",
        "127.0.0.72",
        &[
            "-t",
            "write",
            "-s",
            "8192",
            "-n",
            "400",
            "--tx-depth",
            "32",
            "--cq-mod",
            "8",
        ],
    );
    assert!(
        c.status.success(),
        "client failed:\n{c_text}\nserver:\n{s_text}"
    );
    assert!(
        s.status.success(),
        "server failed:\n{s_text}\nclient:\n{c_text}"
    );
    // Both print perftest's banner with the other's address: its IPv4-mapped GID.
    for text in [&c_text, &s_text] {
        assert!(text.contains("RDMA_Write BW Test"), "{text}");
    }
    assert!(
        c_text.contains("GID: 0000:0000:0000:0000:0000:ffff:7f00:0047"),
        "{c_text}"
    );
    assert!(
        s_text.contains("GID: 0000:0000:0000:0000:0000:ffff:7f00:0048"),
        "{s_text}"
    );
    let row = c_text
        .lines()
        .skip_while(|l| !l.contains("BW average[MB/sec]"))
        .nth(1)
        .unwrap_or_else(|| panic!("no table:\n{c_text}"));
    let nums: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&nums[..2], &["8192", "400"], "{row}");
    assert_eq!(nums.len(), 5, "{row}");
    // The server checked the WRITEs' data and told the client.
    assert!(
        s_text.contains("data check: ok: the last 16 buffer(s) of 8192 bytes"),
        "{s_text}"
    );
    assert!(
        c_text.contains("data checked at the target: the last 16 buffer(s)"),
        "{c_text}"
    );
}

#[test]
fn rdma_bw_read_and_send_between_two_processes_over_real_udp() {
    for (op, title) in [("read", "RDMA_Read BW Test"), ("send", "Send BW Test")] {
        let [(c, c_text), (s, s_text)] = pair(
            "rdma_bw",
            "127.0.0.73",
            "127.0.0.74",
            &[
                "-t",
                op,
                "-s",
                "2048",
                "-n",
                "200",
                "--tx-depth",
                "16",
                "--cq-mod",
                "4",
            ],
        );
        assert!(
            c.status.success(),
            "{op} client:\n{c_text}\nserver:\n{s_text}"
        );
        assert!(
            s.status.success(),
            "{op} server:\n{s_text}\nclient:\n{c_text}"
        );
        assert!(c_text.contains(title), "{c_text}");
        assert!(c_text.contains("data checked at the target"), "{c_text}");
    }
}

#[test]
fn rdma_lat_write_between_two_processes_over_real_udp() {
    let [(c, c_text), (s, s_text)] = pair(
        "rdma_lat",
        "127.0.0.75",
        "127.0.0.76",
        &["-t", "write", "-s", "64", "-n", "100"],
    );
    assert!(c.status.success(), "client:\n{c_text}\nserver:\n{s_text}");
    assert!(s.status.success(), "server:\n{s_text}\nclient:\n{c_text}");
    assert!(c_text.contains("t_typical[usec]"), "{c_text}");
    assert!(
        c_text.contains("data checked at the server: the last buffer of 64 bytes"),
        "{c_text}"
    );
}

#[test]
fn sides_with_different_tests_refuse_to_run() {
    let port = free_tcp_port().to_string();
    let server = spawn(
        "rdma_bw",
        &[
            "--udp",
            "127.0.0.77",
            "-p",
            &port,
            "-t",
            "write",
            "-n",
            "10",
        ],
    );
    std::thread::sleep(Duration::from_millis(300));
    let client = spawn(
        "rdma_bw",
        &[
            "--udp",
            "127.0.0.78",
            "-p",
            &port,
            "-t",
            "read",
            "-n",
            "10",
            "127.0.0.1",
        ],
    );
    let (c, c_text) = wait(client, Duration::from_secs(30));
    let (s, s_text) = wait(server, Duration::from_secs(30));
    assert_eq!(c.status.code(), Some(1), "{c_text}");
    assert_eq!(s.status.code(), Some(1), "{s_text}");
    assert!(
        c_text.contains("give both sides the same -t, -s and -n"),
        "{c_text}"
    );
}
