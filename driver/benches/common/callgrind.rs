//! Instructions per operation, counted by callgrind, the same way for libmlx5's C harness and
//! for a case the benchmark runs in its own process.
//!
//! How: `valgrind --tool=callgrind --collect-atstart=no --toggle-collect=FUNCTION` counts
//! exactly the instructions executed while FUNCTION is on the stack (itself and everything it
//! calls), and nothing before, between or after. The timed region is one such function
//! (`bench_timed` in the C harness, [`timed_region`] here) that holds the loop of datapath
//! calls and nothing else: setting up, retiring posted requests and re-arming CQEs happen
//! outside it, as they happen outside the clock. The count divided by the operations run is
//! exact and the same from one run to the next (callgrind counts, it does not sample), so it
//! is not disturbed by other load on the machine. The other way, subtracting a run of N from
//! a run of 2N, counts the set-up done between chunks too (posting a lap of SENDs and writing
//! its CQEs costs more than polling them), so it is not used.
//!
//! For an in-process case the benchmark re-executes itself under valgrind with
//! [`CASE_ENV`] naming the case; [`measure`] then runs only that case, once, and exits.

use super::{Measured, RunError, median, run_with_timeout};
use std::ffi::OsString;
use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};

/// Names the one case a re-executed benchmark runs under callgrind.
pub const CASE_ENV: &str = "UHCA_BENCH_CALLGRIND_CASE";
/// The operations that case runs under callgrind.
pub const OPS_ENV: &str = "UHCA_BENCH_CALLGRIND_OPS";
/// The name callgrind is told to collect in an in-process case (a pattern: Rust's symbol
/// carries its path and the case's type).
const TIMED_REGION: &str = "*callgrind::timed_region*";
/// The longest a callgrind run may take.
const LIMIT: Duration = Duration::from_secs(600);

/// Whether `valgrind` can be run.
pub fn available() -> bool {
    run_with_timeout(
        Command::new("valgrind").arg("--version"),
        Duration::from_secs(20),
    )
    .is_ok()
}

/// Runs `program args` under callgrind collecting only inside `function`; returns the
/// instructions collected and the program's stdout.
pub fn count(
    program: impl Into<OsString>,
    args: &[OsString],
    envs: &[(&str, String)],
    function: &str,
) -> Result<(u64, String), RunError> {
    let mut cmd = Command::new("valgrind");
    cmd.arg("--tool=callgrind")
        .arg("--collect-atstart=no")
        .arg(format!("--toggle-collect={function}"))
        // `UHCA_CALLGRIND_OUT=DIR` keeps each count's profile as DIR/callgrind.out.FUNCTION.PID
        // (for `callgrind_annotate`); by default none is written.
        .arg(match std::env::var_os("UHCA_CALLGRIND_OUT") {
            Some(dir) => format!(
                "--callgrind-out-file={}/callgrind.out.{}.%p",
                dir.to_string_lossy(),
                function.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
            ),
            None => "--callgrind-out-file=/dev/null".into(),
        })
        .arg(program.into())
        .args(args);
    // The same environment whatever the caller's (its size moves the stack, and with it the
    // alignment of a copy or two: a few tenths of a percent on some rows): PATH and `envs`.
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let (out, err) = run_with_timeout(&mut cmd, LIMIT)?;
    // callgrind's summary on stderr: "==PID== Collected : 17785236".
    let collected = err
        .lines()
        .filter_map(|l| l.split_once("Collected :"))
        .find_map(|(_, n)| n.trim().parse::<u64>().ok())
        .ok_or_else(|| {
            RunError::Output(
                "callgrind".into(),
                "no \"Collected :\" line on stderr".into(),
            )
        })?;
    Ok((collected, out))
}

/// A case run in the benchmark's own process: a loop of datapath calls on objects it owns.
pub trait Case {
    /// Operations in one chunk: what fits its ring (requests posted, CQEs of one lap, empty
    /// polls).
    fn chunk(&self) -> u64;
    /// Outside the clock and the count: readies the next chunk (the "device" retires what was
    /// posted, writes the next lap of CQEs).
    fn prepare(&mut self);
    /// The timed work: one chunk of operations.
    fn run(&mut self);
}

/// The timed region: the only code callgrind collects in an in-process case.
#[inline(never)]
pub fn timed_region<C: Case>(case: &mut C) {
    case.run();
    black_box(&mut *case);
}

/// One run of at least `ops` operations in whole chunks: ns per operation and the
/// operations run.
fn run_once<C: Case>(case: &mut C, ops: u64) -> (f64, u64) {
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < ops {
        case.prepare();
        let t = Instant::now();
        timed_region(case);
        total += t.elapsed();
        done += case.chunk();
    }
    (total.as_nanos() as f64 / done as f64, done)
}

/// How [`measure`] runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Operations per timed run.
    pub ops: u64,
    /// Timed runs (the median is kept).
    pub runs: usize,
    /// Operations under callgrind; `None`: no instruction counts.
    pub callgrind_ops: Option<u64>,
}

/// Measures the in-process case `name`: the median ns per operation of `opts.runs` runs and,
/// if `opts.callgrind_ops` is set, its instructions per operation counted by re-executing
/// this benchmark under callgrind with [`CASE_ENV`] = `name`.
///
/// In that re-executed process, the call for `name` runs the case once (after a warm-up
/// chunk outside the timed region), prints the operations it ran and exits; calls for other
/// names return `None` without running anything.
pub fn measure<C: Case>(name: &str, case: &mut C, opts: &Options) -> Option<Measured> {
    if let Ok(only) = std::env::var(CASE_ENV) {
        if only != name {
            return None;
        }
        let ops = std::env::var(OPS_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000);
        case.prepare();
        case.run();
        let (_, done) = run_once(case, ops);
        println!("callgrind-ops {done}");
        std::process::exit(0);
    }
    case.prepare();
    case.run();
    let ns = median(
        (0..opts.runs.max(1))
            .map(|_| run_once(case, opts.ops).0)
            .collect(),
    );
    let instructions = opts
        .callgrind_ops
        .and_then(|ops| match count_self(name, ops) {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("{name}: no instruction count: {e}");
                None
            }
        });
    Some(Measured { ns, instructions })
}

/// Re-executes this benchmark under callgrind for the case `name`; instructions per op.
fn count_self(name: &str, ops: u64) -> Result<f64, RunError> {
    let exe = std::env::current_exe()
        .map_err(|e| RunError::Spawn("the benchmark's own executable".into(), e))?;
    // The same arguments whatever this run's (`--gate`, `--write-expected`): see `count`.
    let args: Vec<OsString> = vec!["--bench".into()];
    let (collected, out) = count(
        exe,
        &args,
        &[(CASE_ENV, name.to_string()), (OPS_ENV, ops.to_string())],
        TIMED_REGION,
    )?;
    let done: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("callgrind-ops "))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| RunError::Output(name.into(), "no \"callgrind-ops\" line".into()))?;
    Ok(collected as f64 / done as f64)
}
