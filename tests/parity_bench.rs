//! The libmlx5 side of the driver benchmark (`harness_bench`, built by `tests/parity/build.sh`
//! from rdma-core's unmodified `providers/mlx5`): every case runs libmlx5's datapath to the
//! end on its plain-memory objects and reports a figure, the harness refuses what it does not
//! know, and (where valgrind is installed) its instruction counts per operation are the same
//! for a run of N and of 2N operations, as `driver/benches/datapath.rs` relies on.
//!
//! Like the parity tests, it skips unless `UHCA_LIBMLX5_HARNESS_DIR` names the harnesses'
//! folder (and fails then under `UHCA_REQUIRE_LIBMLX5=1`).

// Only the harness look-up is used here; the pipes and the generator serve the other two.
#[allow(dead_code)]
#[path = "parity/common.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The cases the benchmark prints, as the harness names them.
const CASES: &[&str] = &[
    "send_sge_1",
    "send_sge_32",
    "send_inline64_32",
    "write_sge_32",
    "recv_sge_32",
    "poll_16_v1",
    "poll_empty_v1",
    "poll_16_v0",
    "poll_empty_v0",
    "srq_recv_sge_32",
    "poll_recv_16_rq_send",
    "poll_recv_16_rq_send_imm",
    "poll_recv_16_rq_write_imm",
    "poll_recv_16_srq_send",
    "poll_recv_16_srq_send_imm",
    "poll_recv_16_srq_write_imm",
    "fast_send_sge_32",
    "fast_send_inline64_32",
    "fast_write_sge_32",
    "fast_poll_16_v1",
    "fast_poll_recv_16_rq_send",
    "fast_poll_recv_16_rq_send_imm",
    "fast_poll_recv_16_rq_write_imm",
    "fast_poll_recv_16_srq_send",
    "fast_poll_recv_16_srq_send_imm",
    "fast_poll_recv_16_srq_write_imm",
];

/// Runs `cmd` to its end, failing the test after `limit`.
fn run(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let start = Instant::now();
    while child.try_wait().expect("waiting for the harness").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("the harness's output")
}

/// The `case NAME ns NS ops OPS` lines: name to (ns per op, ops).
fn cases(out: &Output) -> BTreeMap<String, (f64, u64)> {
    let text = String::from_utf8_lossy(&out.stdout);
    let mut m = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("case ")) {
        let w: Vec<&str> = line.split_whitespace().collect();
        assert!(
            w.len() == 6 && w[2] == "ns" && w[4] == "ops",
            "not a case line: {line}"
        );
        let ns: f64 = w[3].parse().expect("ns");
        let ops: u64 = w[5].parse().expect("ops");
        assert!(
            m.insert(w[1].to_string(), (ns, ops)).is_none(),
            "{line} twice"
        );
    }
    m
}

#[test]
fn every_case_runs_to_the_end_and_reports_a_figure() {
    let Some(bin) = common::harness_path("harness_bench") else {
        return;
    };
    let list = run(Command::new(&bin).arg("list"), Duration::from_secs(30));
    assert!(list.status.success());
    let names: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(names, CASES);

    // One operation asks for one chunk of each case: a lap of 4096 CQEs for the polls, 512
    // requests, 1024 receives on an RQ (512 on the SRQ). A poll that did not find every CQE it was given, or found one
    // on the empty CQ, or an error from a post, ends the harness with a failure.
    let out = run(Command::new(&bin).arg("1"), Duration::from_secs(120));
    assert!(
        out.status.success(),
        "harness_bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("# ") && stdout.contains("pthread spinlocks (libmlx5's default)"),
        "the configuration line: {stdout}"
    );
    let got = cases(&out);
    let mut want: Vec<&str> = CASES.to_vec();
    want.sort();
    assert_eq!(got.keys().map(String::as_str).collect::<Vec<_>>(), want);
    for (name, (ns, ops)) in &got {
        assert!(ns.is_finite() && *ns > 0.0, "{name}: {ns} ns per op");
        let chunk = if name.starts_with("poll") || name.starts_with("fast_poll") {
            4096
        } else if name.starts_with("recv") {
            1024
        } else {
            512
        };
        assert_eq!(*ops, chunk, "{name}: one run of one chunk");
    }

    // One case alone, rounded up to whole chunks, and the lock configuration read as
    // libmlx5 reads MLX5_SINGLE_THREADED.
    let one = run(
        Command::new(&bin)
            .args(["poll_16_v1", "5000"])
            .env("MLX5_SINGLE_THREADED", "1"),
        Duration::from_secs(60),
    );
    assert!(one.status.success());
    assert!(String::from_utf8_lossy(&one.stdout).contains("single-threaded"));
    let got = cases(&one);
    assert_eq!(got.len(), 1);
    assert_eq!(got["poll_16_v1"].1, 8192);
}

#[test]
fn unknown_cases_and_bad_counts_are_refused() {
    let Some(bin) = common::harness_path("harness_bench") else {
        return;
    };
    for args in [&["no_such_case", "10"][..], &["send_sge_32", "0"], &["ten"]] {
        let out = run(Command::new(&bin).args(args), Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(cases(&out).is_empty(), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?} says why");
    }
}

/// Instructions per operation inside `bench_timed` for `ops` operations.
fn instructions(bin: &Path, case: &str, ops: u64) -> f64 {
    let out = run(
        Command::new("valgrind")
            .args([
                "--tool=callgrind",
                "--collect-atstart=no",
                "--toggle-collect=bench_timed",
                "--callgrind-out-file=/dev/null",
            ])
            .arg(bin)
            .args([case, &ops.to_string()]),
        Duration::from_secs(300),
    );
    assert!(out.status.success(), "{case} under callgrind");
    let err = String::from_utf8_lossy(&out.stderr);
    let collected: u64 = err
        .lines()
        .find_map(|l| l.split_once("Collected :"))
        .and_then(|(_, n)| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no callgrind summary: {err}"));
    let done = cases(&out)[case].1;
    collected as f64 / done as f64
}

#[test]
fn instruction_counts_do_not_depend_on_the_run_length() {
    let Some(bin) = common::harness_path("harness_bench") else {
        return;
    };
    let valgrind = Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .status();
    if !valgrind.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: no valgrind");
        return;
    }
    // The set-up between chunks (a lap of SENDs posted and its CQEs written for the polls)
    // grows with the run; counted inside bench_timed only, it does not show.
    for case in ["send_sge_32", "poll_16_v1", "poll_empty_v1"] {
        let (a, b) = (
            instructions(&bin, case, 20_000),
            instructions(&bin, case, 40_000),
        );
        eprintln!("{case}: {a:.2} and {b:.2} instructions per op");
        assert!((a - b).abs() <= 1.0, "{case}: {a} vs {b}");
        assert!(
            a > 10.0,
            "{case}: {a} instructions per op is not libmlx5 running"
        );
    }
}
