//! What the root integration tests share: the example programs that `cargo test` built
//! beside them, run as a user runs them (their own processes, their real command lines),
//! each within a deadline.
//!
//! Each test file takes what it needs (`mod common;`), so not every item is used by every
//! file.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The example `name`, built by the same `cargo test` run (this test is
/// `target/<profile>/deps/<test>-<hash>`, the examples `target/<profile>/examples/`).
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is not built: `cargo test` builds the examples; alone, run `cargo build --examples` first",
        path.display()
    );
    path
}

/// A TCP port nobody listens on now, for an example's out-of-band exchange (`-p`).
pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts example `name` with `args`, its standard output and error captured.
pub fn spawn(name: &str, args: &[&str]) -> Child {
    Command::new(example(name))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child`, killing it after `limit`; returns its output and its standard output
/// and error as one text (which says so when the child was killed).
pub fn wait(mut child: Child, limit: Duration) -> (Output, String) {
    let start = Instant::now();
    let mut killed = false;
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            killed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let mut text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if killed {
        text.push_str(&format!("\n(killed: still running after {limit:?})"));
    }
    (out, text)
}

/// Runs example `name` with `args` to its end (killed after `limit`).
pub fn run(name: &str, args: &[&str], limit: Duration) -> (Output, String) {
    wait(spawn(name, args), limit)
}

/// Runs example `name` with `args` within a minute, asserts that it succeeded, and returns
/// its output as text.
pub fn run_ok(name: &str, args: &[&str]) -> String {
    let (out, text) = run(name, args, Duration::from_secs(60));
    assert!(out.status.success(), "{name} {args:?} failed:\n{text}");
    text
}

/// Runs example `name` as a server on `server_ip` and as its client on `client_ip` (each
/// `--udp`, one mock HCA behind a kernel UDP socket), both with `args` and a free `-p`;
/// returns the client's and then the server's output, each within a minute.
pub fn pair(name: &str, server_ip: &str, client_ip: &str, args: &[&str]) -> [(Output, String); 2] {
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
