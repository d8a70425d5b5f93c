//! rdma-core's own programs (Debian's `ibverbs-utils`) on this library: `ibv_devices` and
//! `ibv_devinfo` run with `LD_LIBRARY_PATH` on a directory where `libibverbs.so.1` is this
//! crate's cdylib, and list the devices of `UHCA_DEVICES`.
//!
//! Skipped with a message when the programs are absent, unless
//! `UHCA_REQUIRE_IBVERBS_UTILS=1` (then a failure). This test does not link the crate: it
//! only loads the shared library cargo built beside it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn require() -> bool {
    std::env::var("UHCA_REQUIRE_IBVERBS_UTILS").as_deref() == Ok("1")
}

/// The program's path, or `None` (skip) when it is not installed.
fn program(name: &str) -> Option<PathBuf> {
    let p = Path::new("/usr/bin").join(name);
    if p.exists() {
        return Some(p);
    }
    assert!(
        !require(),
        "UHCA_REQUIRE_IBVERBS_UTILS=1 but {} is absent",
        p.display()
    );
    eprintln!(
        "skipped: {} is absent (apt-get install ibverbs-utils)",
        p.display()
    );
    None
}

/// A directory holding `libibverbs.so.1` → the cdylib cargo built for this test run (made
/// once for the tests of this process).
fn lib_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(make_lib_dir).clone()
}

fn make_lib_dir() -> PathBuf {
    common::cdylib_dir("uhca-ibverbs")
}

/// Runs `prog args` on this library with `devices` as `UHCA_DEVICES` (unset if `None`),
/// killed after 30 s.
fn run(prog: &Path, args: &[&str], devices: Option<&str>) -> Output {
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match devices {
        Some(d) => cmd.env("UHCA_DEVICES", d),
        None => cmd.env_remove("UHCA_DEVICES"),
    };
    let mut child = cmd.spawn().unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("{} {args:?} did not finish in 30 s", prog.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    eprintln!(
        "$ UHCA_DEVICES={devices:?} {} {}\n{}{}",
        prog.display(),
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn ibv_devices_lists_nothing_without_configuration() {
    let Some(p) = program("ibv_devices") else {
        return;
    };
    let out = run(&p, &[], None);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 2, "only the heading: {stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "one hint line: {stderr}");
    assert!(stderr.contains("UHCA_DEVICES"));
}

#[test]
fn ibv_devices_lists_the_configured_devices() {
    let Some(p) = program("ibv_devices") else {
        return;
    };
    let out = run(
        &p,
        &[],
        Some("mock:uhca0=udp:127.0.0.81;vfio:uhca1=0000:3b:00.0"),
    );
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    // The mock's GUID is its MAC 02:00:127.0.0.81 as a modified EUI-64.
    assert_eq!(
        rows,
        vec![
            vec!["uhca0", "00007ffffe000051"],
            vec!["uhca1", "0000000000000000"]
        ]
    );
}

#[test]
fn ibv_devinfo_describes_a_mock_device() {
    let Some(p) = program("ibv_devinfo") else {
        return;
    };
    let out = run(&p, &["-v"], Some("mock:uhca0=udp:127.0.0.82"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for want in [
        "hca_id:\tuhca0",
        "vendor_id:\t\t\t0x15b3",
        "node_guid:\t\t\t0000:7fff:fe00:0052",
        "phys_port_cnt:\t\t\t1",
        "state:\t\t\tPORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "GID[  0]:\t\t::ffff:127.0.0.82, RoCE v2",
    ] {
        assert!(stdout.contains(want), "no {want:?} in:\n{stdout}");
    }
}

#[test]
fn ibv_devinfo_reports_a_vfio_device_it_cannot_open() {
    let Some(p) = program("ibv_devinfo") else {
        return;
    };
    // No PCI function in domain ffff: the VFIO platform's message, naming the address and
    // saying how to list the functions.
    let out = run(
        &p,
        &["-d", "uhca1"],
        Some("vfio:uhca1=ffff:3b:00.0,ip=10.0.0.1"),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("uhca1: vfio ffff:3b:00.0: no PCI device ffff:3b:00.0")
            && stderr.contains("lspci -D"),
        "{stderr}"
    );
}

/// `ldd -r` finds every symbol (with its version) that the three programs import.
#[test]
fn every_import_of_the_programs_resolves() {
    for name in [
        "ibv_devices",
        "ibv_devinfo",
        "ibv_rc_pingpong",
        "ibv_srq_pingpong",
        "ibv_ud_pingpong",
        "ibv_uc_pingpong",
    ] {
        let Some(p) = program(name) else {
            continue;
        };
        common::assert_imports_resolve(&p, &lib_dir(), &["libibverbs"]);
    }
}

/// Debian's `ibv_rc_pingpong --chk`, server and client as two processes, each on a mock HCA
/// of this library whose RoCEv2 port is UDP on 127.0.0.1 and 127.0.0.2; 60 s at most each
/// run. Polling, then with completion events (`-e`), one after the other (both bind the
/// same UDP addresses).
#[test]
fn ibv_rc_pingpong_between_two_processes() {
    let Some(p) = program("ibv_rc_pingpong") else {
        return;
    };
    let tcp = 20000 + (std::process::id() % 20000) as u16;
    pingpong(&p, tcp, ("127.0.0.1", "127.0.0.2"), &[]);
    pingpong(&p, tcp + 1, ("127.0.0.1", "127.0.0.2"), &["-e"]);
}

/// rdma-core's `ibv_srq_pingpong` (16 RC QPs a side receiving from one SRQ), `--chk`,
/// polling and with completion events, on addresses of its own (the tests run at once).
#[test]
fn ibv_srq_pingpong_between_two_processes() {
    let Some(p) = program("ibv_srq_pingpong") else {
        return;
    };
    let tcp = 20000 + (std::process::id() % 20000) as u16 + 2;
    pingpong(&p, tcp, ("127.0.0.3", "127.0.0.4"), &[]);
    pingpong(&p, tcp + 1, ("127.0.0.3", "127.0.0.4"), &["-e"]);
}

/// rdma-core's `ibv_ud_pingpong` (a UD QP a side: sends through an address handle with the
/// peer's QPN and Q_Key, receives with the 40-byte GRH before the data, which `--chk`
/// checks after it), polling and with completion events, on 127.0.0.111 and .112.
#[test]
fn ibv_ud_pingpong_between_two_processes() {
    let Some(p) = program("ibv_ud_pingpong") else {
        return;
    };
    let tcp = 20000 + (std::process::id() % 20000) as u16 + 4;
    pingpong(&p, tcp, ("127.0.0.111", "127.0.0.112"), &[]);
    pingpong(&p, tcp + 1, ("127.0.0.111", "127.0.0.112"), &["-e"]);
}

/// rdma-core's `ibv_uc_pingpong` (UC QPs: no acknowledgements), `--chk`, polling and with
/// completion events, on 127.0.0.113 and .114.
#[test]
fn ibv_uc_pingpong_between_two_processes() {
    let Some(p) = program("ibv_uc_pingpong") else {
        return;
    };
    let tcp = 20000 + (std::process::id() % 20000) as u16 + 6;
    pingpong(&p, tcp, ("127.0.0.113", "127.0.0.114"), &[]);
    pingpong(&p, tcp + 1, ("127.0.0.113", "127.0.0.114"), &["-e"]);
}

/// `p` as server on `ips.0` and client on `ips.1` (mock devices `uhca0` there), TCP port
/// `tcp`, 200 iterations with `--chk` and `extra`; both must report their iterations, and
/// neither a buffer `--chk` found wrong ("invalid data in page", which the programs print
/// without failing).
fn pingpong(p: &Path, tcp: u16, ips: (&str, &str), extra: &[&str]) {
    let port = tcp.to_string();
    let spawn = |ip: &str, server: Option<&str>| {
        let mut cmd = Command::new(p);
        cmd.args(["-d", "uhca0", "-g", "0", "-p", &port, "-n", "200", "--chk"]);
        cmd.args(extra);
        if let Some(s) = server {
            cmd.arg(s);
        }
        cmd.env("LD_LIBRARY_PATH", lib_dir())
            .env("UHCA_DEVICES", format!("mock:uhca0=udp:{ip}"))
            .env("UHCA_VERBS_DEBUG", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut server = spawn(ips.0, None);
    while !common::listening(tcp) {
        if Instant::now() > deadline || server.try_wait().unwrap().is_some() {
            let _ = server.kill();
            let out = server.wait_with_output().unwrap();
            panic!(
                "the server never listened on TCP {tcp}:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client = spawn(ips.1, Some(ips.0));
    let mut done = [None, None];
    while done.iter().any(Option::is_none) {
        for (d, c) in done.iter_mut().zip([&mut server, &mut client]) {
            if d.is_none() {
                *d = c.try_wait().unwrap();
            }
        }
        if Instant::now() > deadline {
            let _ = server.kill();
            let _ = client.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut ok = true;
    for (name, c) in [("server", server), ("client", client)] {
        let out = c.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("{name} ({}):\n{stdout}{stderr}", out.status);
        ok &= out.status.success()
            && stdout.contains("200 iters in")
            && !stderr.contains("invalid data");
    }
    let name = p.file_name().unwrap_or_default().to_string_lossy();
    println!(
        "{} {name} --chk {extra:?}",
        if ok { "PASS" } else { "FAIL" }
    );
    assert!(ok, "{name} {extra:?} failed (output above)");
}

/// `tests/c/opcodes.c`, compiled against the installed `verbs.h` and linked to this
/// library: every `ibv_post_send` opcode between two devices of one process, checked in
/// memory and in the completions (opcode, `byte_len`, `imm_data` in network order,
/// `wc_flags`), unsignalled requests, `ibv_reg_mr_iova2` at a chosen iova, and the
/// refusals (an lkey not covering the buffer, an opcode not offered, bad registrations,
/// a WRITE to a key without remote write). One PASS line per check.
#[test]
fn every_send_opcode_through_the_c_abi() {
    let Some(exe) = build_c("opcodes") else {
        return;
    };
    let out = run(
        &exe,
        &[],
        Some("mock:uhca0=udp:127.0.0.83;mock:uhca1=udp:127.0.0.84"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(out.status.success(), "{stdout}");
    assert_eq!(lines.len(), 54, "every check ran: {stdout}");
    assert!(lines.iter().all(|l| l.starts_with("PASS ")), "{stdout}");
}

/// `tests/c/async_events.c`, built as `opcodes.c` is, on one mock device (`127.0.0.116`):
/// the context's `async_fd` (`EAGAIN` with `O_NONBLOCK` and not readable while no event is
/// waiting, readable after one), `IBV_EVENT_QP_LAST_WQE_REACHED` for a QP of an SRQ moved
/// to ERR naming that QP, `ibv_destroy_qp` waiting until another thread acknowledges it,
/// `IBV_EVENT_SRQ_LIMIT_REACHED` naming the SRQ once a UD datagram to itself takes one
/// of its receives below the armed limit, and a blocking `ibv_get_async_event`. One PASS
/// line per check (28), all must pass.
#[test]
fn asynchronous_events_through_the_c_abi() {
    let Some(exe) = build_c("async_events") else {
        return;
    };
    let out = run(&exe, &[], Some("mock:uhca0=udp:127.0.0.116"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(out.status.success(), "{stdout}");
    assert_eq!(lines.len(), 28, "every check ran: {stdout}");
    assert!(lines.iter().all(|l| l.starts_with("PASS ")), "{stdout}");
}

/// `tests/c/wr_api.c`, built as `opcodes.c` is, between two devices of one process
/// (`127.0.0.85`, `.86`): `ibv_create_qp_ex` with `send_ops_flags` and `ibv_qp_to_qp_ex`
/// (NULL for a QP of `ibv_create_qp`), one `ibv_wr_start`…`ibv_wr_complete` batch of WRITE,
/// READ, compare-and-swap, fetch-and-add, SEND with immediate from inline data (copied when
/// set) and WRITE with immediate of two SGEs, checked in memory and in the completions;
/// unsignalled requests; `ibv_wr_abort`; and the refusals (an operation the QP was not
/// created for, more requests than the queue holds, an SGE outside its MR) that drop the
/// whole batch. One PASS line per check (25), all must pass.
#[test]
fn the_ibv_wr_api_through_the_c_abi() {
    let Some(exe) = build_c("wr_api") else {
        return;
    };
    let out = run(
        &exe,
        &[],
        Some("mock:uhca0=udp:127.0.0.85;mock:uhca1=udp:127.0.0.86"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(lines.len(), 25, "every check ran: {stdout}");
    assert!(lines.iter().all(|l| l.starts_with("PASS ")), "{stdout}");
}

/// `tests/c/cq_ex.c`, built as `opcodes.c` is, between two devices of one process
/// (`127.0.0.88`, `.89`): `ibv_create_cq_ex` for the standard completion fields (and
/// refused for timestamps or `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`), `ibv_start_poll` on an
/// empty CQ (`ENOENT`), then a WRITE, a SEND with immediate and a READ read back with
/// `ibv_start_poll`/`ibv_next_poll` and `ibv_wc_read_*` (status, `wr_id`, opcode, QP number,
/// byte count, immediate data in network order, `wc_flags`) on both sides, and
/// `ibv_poll_cq` on the same CQ. One PASS line per check (15), all must pass.
#[test]
fn the_extended_cq_through_the_c_abi() {
    let Some(exe) = build_c("cq_ex") else {
        return;
    };
    let out = run(
        &exe,
        &[],
        Some("mock:uhca0=udp:127.0.0.88;mock:uhca1=udp:127.0.0.89"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(out.status.success(), "{stdout}");
    assert_eq!(lines.len(), 15, "every check ran: {stdout}");
    assert!(lines.iter().all(|l| l.starts_with("PASS ")), "{stdout}");
}

/// `tests/c/channel_wakeups.c`, built as `opcodes.c` is, on one mock device
/// (`127.0.0.117`): two completion channels, a UD QP sending to itself with its send CQ on
/// one and its (armed) receive CQ on the other. Twice: the armed CQ's channel becomes
/// readable and stays readable while its event waits, the other channel and `async_fd` are
/// not woken, `ibv_get_cq_event` names the CQ, and once it is taken the channel is not
/// readable. What UCX relies on (it calls the verbs on every wake-up and asserts the event
/// was there). One PASS line per check (20), all must pass.
#[test]
fn channels_are_readable_exactly_while_an_event_waits() {
    let Some(exe) = build_c("channel_wakeups") else {
        return;
    };
    let out = run(&exe, &[], Some("mock:uhca0=udp:127.0.0.117"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(out.status.success(), "{stdout}");
    assert_eq!(lines.len(), 20, "every check ran: {stdout}");
    assert!(lines.iter().all(|l| l.starts_with("PASS ")), "{stdout}");
}

/// `tests/c/NAME.c` compiled against the installed `verbs.h` and linked to this library
/// (and pthreads); `None` (skipped, saying why) without the header or a compiler, unless
/// `UHCA_REQUIRE_IBVERBS_UTILS=1`.
fn build_c(name: &str) -> Option<PathBuf> {
    let header = Path::new("/usr/include/infiniband/verbs.h");
    if !header.exists() {
        assert!(
            !require(),
            "UHCA_REQUIRE_IBVERBS_UTILS=1 but {} is absent",
            header.display()
        );
        eprintln!(
            "skipped: {} is absent (apt-get install libibverbs-dev)",
            header.display()
        );
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let exe = lib_dir().join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = match Command::new(&cc)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(lib_dir())
        .arg("-l:libibverbs.so.1")
        .arg("-lpthread")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            assert!(
                !require(),
                "UHCA_REQUIRE_IBVERBS_UTILS=1 but no C compiler: {e}"
            );
            eprintln!("skipped: no C compiler ({cc}: {e})");
            return None;
        }
    };
    assert!(
        built.status.success(),
        "{cc} failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    Some(exe)
}
