//! `rdma_bw` and `rdma_lat --udp` between two processes on loopback addresses: two mock
//! HCAs, each behind its own kernel UDP socket on port 4791, with the exchange of the
//! bandwidth and latency examples over TCP.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The example binaries `cargo test` built beside this test.
fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let bin = dir.join("examples").join(name);
    assert!(
        bin.exists(),
        "{} not built (cargo test builds the examples)",
        bin.display()
    );
    bin
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn(name: &str, args: &[&str]) -> Child {
    Command::new(example(name))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait(mut child: Child, limit: Duration) -> (Output, String) {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// Runs `name` as server on `server_ip` and as client on `client_ip`, both with `args`.
fn pair(name: &str, server_ip: &str, client_ip: &str, args: &[&str]) -> [(Output, String); 2] {
    let port = free_tcp_port().to_string();
    let mut s_args = vec!["--udp", server_ip, "-p", &port];
    s_args.extend_from_slice(args);
    let server = spawn(name, &s_args);
    std::thread::sleep(Duration::from_millis(300));
    let mut c_args = vec!["--udp", client_ip, "-p", &port];
    c_args.extend_from_slice(args);
    c_args.push("127.0.0.1");
    let client = spawn(name, &c_args);
    let c = wait(client, Duration::from_secs(60));
    let s = wait(server, Duration::from_secs(60));
    [c, s]
}

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
