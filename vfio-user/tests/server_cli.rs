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

/// `--command-dump FILE`: the file is created empty at start, and when a client goes the
/// server appends that function's commands (none here: the client sent nothing) and says
/// so; a dump it cannot create stops it at once with an error.
#[test]
fn the_command_dump_is_written_when_a_client_goes() {
    use std::io::{BufRead, BufReader};
    let dir = std::env::temp_dir().join(format!("uhca-vfio-user-dump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("fn0.sock");
    let dump = dir.join("cmds");
    std::fs::write(&dump, "stale\n").unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_uhca-vfio-user-server"))
        .arg("--command-dump")
        .arg(&dump)
        .arg("--socket")
        .arg(&socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let client = loop {
        if let Ok(c) = UnixStream::connect(&socket) {
            break c;
        }
        assert!(Instant::now() < deadline, "the function did not come up");
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(client);
    let said = loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            break None;
        }
        if line.contains("command dump:") {
            break Some(line.clone());
        }
    };
    let _ = server.kill();
    let _ = server.wait();
    let content = std::fs::read_to_string(&dump).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let said = said.expect("the server said it wrote the dump");
    assert!(
        said.contains("fn0.sock: command dump: 0 commands written"),
        "{said}"
    );
    assert_eq!(
        content, "",
        "created empty, nothing appended for a client that sent nothing"
    );

    let status = Command::new(env!("CARGO_BIN_EXE_uhca-vfio-user-server"))
        .args([
            "--command-dump",
            "/nonexistent-dir/cmds",
            "--socket",
            "/tmp/unused.sock",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(
        !status.success(),
        "a dump that cannot be created is an error"
    );
}

/// `--hang-opcode` takes a number (hexadecimal with `0x`, or decimal); anything else is a
/// usage error that names the argument, before any socket is created.
#[test]
fn hang_opcode_must_be_a_number() {
    let out = Command::new(env!("CARGO_BIN_EXE_uhca-vfio-user-server"))
        .args([
            "--hang-opcode",
            "CREATE_CQ",
            "--socket",
            "/tmp/unused-hang.sock",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!out.status.success(), "a non-numeric opcode is refused");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--hang-opcode CREATE_CQ: not a number"),
        "{err}"
    );
    assert!(
        !std::path::Path::new("/tmp/unused-hang.sock").exists(),
        "no socket for a refused command line"
    );
}
