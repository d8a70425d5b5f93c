//! `rc_pingpong --udp` between two processes on loopback addresses: two mock HCAs, each
//! behind its own kernel UDP socket on port 4791, doing the rdma-core ping-pong with the
//! rdma-core out-of-band exchange.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The example binaries `cargo test` built beside this test.
fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    dir.join("examples").join(name)
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "timed out; output:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn rc_pingpong_between_two_processes_over_real_udp() {
    let bin = example("rc_pingpong");
    assert!(
        bin.exists(),
        "{} not built (cargo test builds the examples)",
        bin.display()
    );
    let port = free_tcp_port().to_string();
    let server = Command::new(&bin)
        .args([
            "--udp",
            "127.0.0.61",
            "-p",
            &port,
            "-n",
            "200",
            "-s",
            "2048",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let client = Command::new(&bin)
        .args([
            "--udp",
            "127.0.0.62",
            "-p",
            &port,
            "-n",
            "200",
            "-s",
            "2048",
            "127.0.0.1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let c = wait(client, Duration::from_secs(60));
    let s = wait(server, Duration::from_secs(60));
    for (who, out) in [("client", &c), ("server", &s)] {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{who} failed:\n{text}");
        assert!(text.contains("200 iters in"), "{who}:\n{text}");
        assert!(text.contains("819200 bytes in"), "{who}:\n{text}");
    }
    // Each side saw the other's GID: the IPv4-mapped address of the other process.
    let c_out = String::from_utf8_lossy(&c.stdout);
    assert!(
        c_out.contains("remote address: LID 0x0000") && c_out.contains("ffff:7f00:003d"),
        "{c_out}"
    );
}

fn run_example(name: &str, args: &[&str]) -> String {
    let bin = example(name);
    let child = Command::new(&bin)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait(child, Duration::from_secs(60));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} {args:?} failed:\n{text}");
    text
}

#[test]
fn ud_pingpong_between_two_processes_over_real_udp() {
    let port = free_tcp_port().to_string();
    let bin = example("ud_pingpong");
    let server = Command::new(&bin)
        .args([
            "--udp",
            "127.0.0.63",
            "-p",
            &port,
            "-n",
            "100",
            "-s",
            "1024",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let c = run_example(
        "ud_pingpong",
        &[
            "--udp",
            "127.0.0.64",
            "-p",
            &port,
            "-n",
            "100",
            "-s",
            "1024",
            "127.0.0.1",
        ],
    );
    let s = wait(server, Duration::from_secs(60));
    assert!(
        s.status.success(),
        "server: {}",
        String::from_utf8_lossy(&s.stderr)
    );
    assert!(
        c.contains("100 iters in") && c.contains("204800 bytes in"),
        "{c}"
    );
}

#[test]
fn pingpongs_on_two_mock_hcas_in_one_process() {
    let rc = run_example("rc_pingpong", &["--mock", "-n", "50", "-s", "3000"]);
    assert_eq!(
        rc.matches("50 iters in").count(),
        2,
        "both sides report:\n{rc}"
    );
    let ud = run_example("ud_pingpong", &["--mock", "-n", "50", "-s", "512"]);
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
