//! Debian's perftest (`ib_write_bw` and the rest, perftest 4.5) on this library: each
//! program runs as server and client, two processes, each on a mock HCA whose RoCEv2 port
//! is UDP on its own loopback address (`127.0.0.101`, `.102`), and both must exit 0 with
//! their result table printed. perftest also links rdma-core's `libmlx5.so.1`,
//! `libefa.so.1` and `librdmacm.so.1`: the test builds uhca's stand-ins for them
//! (`tests/c/companions/`, each answering "not supported") into the directory where
//! `libibverbs.so.1` is this crate's cdylib.
//!
//! Skipped with a message when perftest or a C compiler is absent, unless
//! `UHCA_REQUIRE_IBVERBS_UTILS=1` (then a failure).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn require() -> bool {
    std::env::var("UHCA_REQUIRE_IBVERBS_UTILS").as_deref() == Ok("1")
}

fn skip(why: &str) {
    assert!(!require(), "UHCA_REQUIRE_IBVERBS_UTILS=1 but {why}");
    eprintln!("skipped: {why} (apt-get install perftest gcc)");
}

/// The program's path, or `None` (skip) when perftest is not installed.
fn program(name: &str) -> Option<PathBuf> {
    let p = Path::new("/usr/bin").join(name);
    if p.exists() {
        return Some(p);
    }
    skip(&format!("{} is absent", p.display()));
    None
}

/// The three companion libraries perftest links, built from `tests/c/companions/`.
const COMPANIONS: &[&str] = &["mlx5", "efa", "rdmacm"];

/// A directory with `libibverbs.so.1` → the cdylib cargo built, and the companions built
/// with `cc` (`None`: no compiler, skip).
fn lib_dir() -> Option<PathBuf> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(make_lib_dir).clone()
}

fn make_lib_dir() -> Option<PathBuf> {
    let dir = common::cdylib_dir("uhca-perftest");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/companions");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    for n in COMPANIONS {
        let name = format!("lib{n}.so.1");
        let out = match Command::new(&cc)
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror"])
            .arg("-Wno-unused-parameter")
            .arg(format!("-Wl,-soname,{name}"))
            .arg(format!(
                "-Wl,--version-script={}",
                src.join(format!("{n}.map")).display()
            ))
            .arg("-o")
            .arg(dir.join(&name))
            .arg(src.join(format!("{n}.c")))
            .output()
        {
            Ok(o) => o,
            Err(e) => {
                skip(&format!("no C compiler ({cc}: {e})"));
                return None;
            }
        };
        assert!(
            out.status.success(),
            "building {name}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Some(dir)
}

/// The perftest programs with the arguments both sides take (besides `-d`, `-p` and the
/// server's address). Iterations are few so that each run takes about a second.
/// perftest posts through `ibv_create_qp_ex` and `ibv_wr_*` on a ConnectX part id, as this
/// library reports; `--use_old_post_send` (one row) takes its `ibv_post_send` path.
/// `ib_read_bw` at its default 64 KiB: 16 outstanding READs whose 1 MiB of responses
/// arrives in one burst, which the mock's UDP uplink holds in its socket buffer while its
/// process waits for the CPU, and takes in before its clock moves (see the README).
const PROGRAMS: &[(&str, &[&str], &str)] = &[
    ("ib_write_bw", &["-n", "50"], "BW average[MB/sec]"),
    (
        "ib_write_bw",
        &["-n", "50", "--use_old_post_send"],
        "BW average[MB/sec]",
    ),
    ("ib_read_bw", &["-n", "50"], "BW average[MB/sec]"),
    ("ib_send_bw", &["-n", "50"], "BW average[MB/sec]"),
    ("ib_atomic_bw", &["-n", "100"], "BW average[MB/sec]"),
    ("ib_write_lat", &["-n", "100"], "t_typical[usec]"),
    ("ib_read_lat", &["-n", "100"], "t_typical[usec]"),
    ("ib_send_lat", &["-n", "100"], "t_typical[usec]"),
];

/// `ldd -r` finds every symbol (with its version) that the perftest programs import, from
/// this library and the companions.
#[test]
fn every_import_of_perftest_resolves() {
    let Some(dir) = lib_dir() else {
        return;
    };
    for (name, ..) in PROGRAMS {
        let Some(p) = program(name) else {
            continue;
        };
        common::assert_imports_resolve(&p, &dir, &["libibverbs", "libmlx5", "libefa", "librdmacm"]);
    }
}

fn spawn(p: &Path, dir: &Path, ip: &str, args: &[&str]) -> Child {
    Command::new(p)
        .args(args)
        .env("LD_LIBRARY_PATH", dir)
        .env("UHCA_DEVICES", format!("mock:uhca0=udp:{ip}"))
        .env("UHCA_VERBS_DEBUG", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for both, killing them at `deadline`.
fn finish(mut kids: [Child; 2], deadline: Instant) -> [Output; 2] {
    loop {
        let mut running = false;
        for c in kids.iter_mut() {
            running |= c.try_wait().unwrap().is_none();
        }
        if !running {
            break;
        }
        if Instant::now() > deadline {
            for c in kids.iter_mut() {
                let _ = c.kill();
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kids.map(|c| c.wait_with_output().unwrap())
}

/// Each perftest program between two processes: server on `127.0.0.101`, client on
/// `127.0.0.102` (one program after the other, as they bind the same UDP addresses), 60 s
/// at most each; both exit 0, the client prints the result table's header and a row, and
/// so does the server wherever it prints the header. One PASS or FAIL line per program.
#[test]
fn perftest_between_two_processes() {
    let Some(dir) = lib_dir() else {
        return;
    };
    let base = 30000 + (std::process::id() % 20000) as u16;
    let mut failed = Vec::new();
    for (i, (name, extra, header)) in PROGRAMS.iter().enumerate() {
        let Some(p) = program(name) else {
            continue;
        };
        let tcp = base + i as u16;
        let port = tcp.to_string();
        let mut args = vec!["-d", "uhca0", "-p", &port];
        args.extend_from_slice(extra);
        let start = Instant::now();
        let deadline = start + Duration::from_secs(60);
        let mut server = spawn(&p, &dir, "127.0.0.101", &args);
        while !common::listening(tcp) {
            if Instant::now() > deadline || server.try_wait().unwrap().is_some() {
                let _ = server.kill();
                let out = server.wait_with_output().unwrap();
                panic!(
                    "{name}: the server never listened on TCP {tcp}:\n{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        args.push("127.0.0.1");
        let client = spawn(&p, &dir, "127.0.0.102", &args);
        let outs = finish([server, client], deadline);
        let mut ok = true;
        for (side, out) in ["server", "client"].iter().zip(&outs) {
            let stdout = String::from_utf8_lossy(&out.stdout);
            eprintln!(
                "{name} {side} ({}):\n{stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            // The header, then a row starting with the message size: on the client always;
            // the passive side of the READ latency test prints no table.
            let row = stdout
                .lines()
                .skip_while(|l| !l.contains(header))
                .nth(1)
                .is_some_and(|l| {
                    l.split_whitespace()
                        .next()
                        .is_some_and(|w| w.parse::<u64>().is_ok())
                });
            let table_ok = row || (*side == "server" && !stdout.contains(header));
            ok &= out.status.success() && table_ok;
        }
        println!(
            "{} {name} {extra:?} ({:.1} s)",
            if ok { "PASS" } else { "FAIL" },
            start.elapsed().as_secs_f64()
        );
        if !ok {
            failed.push(*name);
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?} (output above)");
}

/// perftest's `-R` (connect through rdma_cm) meets the librdmacm stand-in, which has no
/// connection manager: the program fails at once with perftest's message, instead of
/// waiting for a peer or carrying on as if connected.
#[test]
fn perftest_over_rdma_cm_is_refused() {
    let Some(dir) = lib_dir() else {
        return;
    };
    let Some(p) = program("ib_write_bw") else {
        return;
    };
    let tcp = 30000 + (std::process::id() % 20000) as u16 + 10;
    let port = tcp.to_string();
    let child = spawn(
        &p,
        &dir,
        "127.0.0.103",
        &["-d", "uhca0", "-p", &port, "-R", "-n", "5", "127.0.0.104"],
    );
    let start = Instant::now();
    let mut c = child;
    while c.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = c.kill();
            panic!("ib_write_bw -R did not give up in 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = c.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("ib_write_bw -R ({}):\n{text}", out.status);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("rdma_create_event_channel"), "{text}");
}
