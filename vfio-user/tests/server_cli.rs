//! `uhca-vfio-user-server` is a command-line program: with its output going to a pipe whose
//! reader has gone (`uhca-vfio-user-server --socket A --socket B | head -1`) it goes on
//! serving every function, instead of panicking with "failed printing to stdout: Broken
//! pipe" before it announced them all.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_server_keeps_serving_with_its_output_a_closed_pipe() {
    let dir = std::env::temp_dir().join(format!("uhca-vfio-user-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sockets: Vec<PathBuf> = ["a.sock", "b.sock"].iter().map(|n| dir.join(n)).collect();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut server = Command::new(env!("CARGO_BIN_EXE_uhca-vfio-user-server"))
        .arg("--socket")
        .arg(&sockets[0])
        .arg("--socket")
        .arg(&sockets[1])
        .env("RUST_BACKTRACE", "0")
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Both functions come up and take a client, and the server is still running after.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut connected = [false, false];
    while connected != [true, true] {
        if let Some(status) = server.try_wait().unwrap() {
            let out = server.wait_with_output().unwrap();
            panic!(
                "the server exited ({status}) with its output a closed pipe:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            Instant::now() < deadline,
            "the functions did not come up in 20 s"
        );
        for (i, s) in sockets.iter().enumerate() {
            connected[i] |= UnixStream::connect(s).is_ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let still_running = server.try_wait().unwrap().is_none();
    let _ = server.kill();
    let out = server.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        still_running,
        "the server stopped:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
