//! The driver's datapath benchmark (issue 10): ns and instructions per operation of
//! post_send, post_recv and poll, printed beside libmlx5's figures and a plain copy of the
//! same bytes, all measured in the same run.
//!
//! Run: `cargo bench -p uhca-driver --bench datapath` (about 25 s with valgrind; the
//! libmlx5 harness is built first if `target/parity/bin/harness_bench` is missing).
//! `UHCA_BENCH_N` sets the operations per timed run (default 10 M), `UHCA_BENCH_RUNS` the
//! runs (default 5, the median is printed), `UHCA_BENCH_CASE` keeps the cases whose name
//! contains it, `UHCA_BENCH_CALLGRIND_N` the operations counted under callgrind (default
//! 100 000; 0: no instruction counts), `UHCA_LIBMLX5_HARNESS_DIR` where the libmlx5 harness
//! is, `UHCA_CALLGRIND_OUT=DIR` keeps callgrind's profiles there for `callgrind_annotate`.
//! Without `--bench` (`cargo test --benches`) a quick pass runs: few operations, one run,
//! no callgrind, libmlx5 only if its harness is already built.
//!
//! Everything runs single-threaded on rings in plain memory whose doorbell register is a
//! word of memory: only the driver's (or libmlx5's) own work is timed. Instructions are
//! counted by callgrind inside the timed region only (see `common/callgrind.rs`).

mod common;

use common::callgrind::{self, Case};
use common::{Measured, libmlx5};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The benchmark's rows: case name (the libmlx5 harness's), what one operation is, the issue's
/// instruction target for uhca if it sets one.
const ROWS: &[(&str, &str, Option<f64>)] = &[
    ("send_sge_1", "SEND 1 SGE, 1 per call (per request)", None),
    (
        "send_sge_32",
        "SEND 1 SGE, 32 per call (per request)",
        Some(88.0),
    ),
    (
        "send_inline64_32",
        "SEND 64 B inline, 32 per call (per request)",
        Some(105.0),
    ),
    (
        "write_sge_32",
        "RDMA WRITE 1 SGE, 32 per call (per request)",
        None,
    ),
    (
        "recv_sge_32",
        "post_recv 1 SGE, 32 per call (per request)",
        Some(60.0),
    ),
    (
        "poll_16_v1",
        "poll 16 SEND CQEs per call (per CQE)",
        Some(55.0),
    ),
    ("poll_empty_v1", "poll an empty CQ (per call)", None),
    (
        "srq_recv_sge_32",
        "SRQ post_recv 1 SGE, 32 per call (per request)",
        None,
    ),
    (
        "poll_recv_16_rq_send",
        "poll 16 receive CQEs of SENDs, RQ (per CQE)",
        None,
    ),
    (
        "poll_recv_16_rq_send_imm",
        "poll 16 recv CQEs of SENDs with imm, RQ",
        None,
    ),
    (
        "poll_recv_16_rq_write_imm",
        "poll 16 recv CQEs of WRITEs with imm, RQ",
        None,
    ),
    (
        "poll_recv_16_srq_send",
        "poll 16 receive CQEs of SENDs, SRQ (per CQE)",
        None,
    ),
    (
        "poll_recv_16_srq_send_imm",
        "poll 16 recv CQEs of SENDs with imm, SRQ",
        None,
    ),
    (
        "poll_recv_16_srq_write_imm",
        "poll 16 recv CQEs of WRITEs with imm, SRQ",
        None,
    ),
];

/// Bytes of a send WQE slot (a WQEBB) and of the rings, as the libmlx5 harness has them.
const WQEBB: usize = 64;
const SQ_WQEBBS: usize = 1024;
const SQ_CHUNK: u64 = 512;
const RQ_WQES: usize = 1024;
const CQES: usize = 4096;

/// Reference: a plain copy of the `LEN` WQE bytes a request makes into a ring of `STRIDE`-byte
/// slots, and per call the 4-byte doorbell record and the 8-byte doorbell (a store to a word
/// of memory).
struct CopyPost<const LEN: usize, const STRIDE: usize> {
    ring: Vec<u8>,
    wqe: [u8; LEN],
    per_call: u64,
    pi: usize,
    dbrec: AtomicU32,
    doorbell: AtomicU64,
}

impl<const LEN: usize, const STRIDE: usize> CopyPost<LEN, STRIDE> {
    /// A ring of `slots` slots (a power of two), a doorbell per `per_call` requests.
    fn new(slots: usize, per_call: u64) -> Self {
        assert!(slots.is_power_of_two() && LEN >= 8);
        CopyPost {
            ring: vec![0; STRIDE * slots],
            wqe: std::array::from_fn(|i| i as u8),
            per_call,
            pi: 0,
            dbrec: AtomicU32::new(0),
            doorbell: AtomicU64::new(0),
        }
    }
}

impl<const LEN: usize, const STRIDE: usize> Case for CopyPost<LEN, STRIDE> {
    fn chunk(&self) -> u64 {
        SQ_CHUNK.min((self.ring.len() / STRIDE) as u64)
    }
    fn prepare(&mut self) {}
    fn run(&mut self) {
        let mask = self.ring.len() / STRIDE - 1;
        let per_wqe = LEN.div_ceil(STRIDE);
        for _ in 0..self.chunk() / self.per_call {
            let mut at = 0;
            for _ in 0..self.per_call {
                at = (self.pi & mask) * STRIDE;
                self.ring[at..at + LEN].copy_from_slice(black_box(&self.wqe));
                self.pi += per_wqe;
            }
            self.dbrec.store(self.pi as u32 & 0xffff, Ordering::Relaxed);
            let first: [u8; 8] = self.ring[at..at + 8].try_into().expect("8 bytes");
            self.doorbell
                .store(u64::from_ne_bytes(first), Ordering::Relaxed);
        }
    }
}

/// Reference: a plain copy of 64 bytes out of a ring per CQE, and per 16 the 4-byte
/// consumer-index record.
struct CopyPoll {
    ring: Vec<u8>,
    out: [[u8; 64]; 16],
    ci: usize,
    dbrec: AtomicU32,
}

impl Case for CopyPoll {
    fn chunk(&self) -> u64 {
        CQES as u64
    }
    fn prepare(&mut self) {}
    fn run(&mut self) {
        for _ in 0..CQES / 16 {
            for k in 0..16 {
                let at = (self.ci % CQES) * 64;
                self.out[k].copy_from_slice(&black_box(&self.ring)[at..at + 64]);
                self.ci += 1;
            }
            self.dbrec
                .store(self.ci as u32 & 0xff_ffff, Ordering::Relaxed);
            black_box(&self.out);
        }
    }
}

/// Reference for an empty poll: reading the one byte (`op_own`) that says the CQE is not
/// software's yet.
struct CopyPollEmpty {
    ring: Vec<u8>,
    ci: usize,
}

impl Case for CopyPollEmpty {
    fn chunk(&self) -> u64 {
        CQES as u64
    }
    fn prepare(&mut self) {}
    fn run(&mut self) {
        for _ in 0..CQES {
            let at = (self.ci % CQES) * 64 + 63;
            if black_box(&self.ring)[at] & 1 == 1 {
                self.ci += 1;
            }
        }
    }
}

/// The plain-copy reference of a row.
fn copy_case(name: &str, opts: &callgrind::Options) -> Option<Measured> {
    let id = format!("copy_{name}");
    match name {
        // A SEND with one gather entry: control and data segments, 32 bytes.
        "send_sge_1" => {
            callgrind::measure(&id, &mut CopyPost::<32, WQEBB>::new(SQ_WQEBBS, 1), opts)
        }
        "send_sge_32" => {
            callgrind::measure(&id, &mut CopyPost::<32, WQEBB>::new(SQ_WQEBBS, 32), opts)
        }
        // Control segment, 4-byte inline header and 64 bytes, padded to 96.
        "send_inline64_32" => {
            callgrind::measure(&id, &mut CopyPost::<96, WQEBB>::new(SQ_WQEBBS, 32), opts)
        }
        // Control, remote-address and data segments: 48 bytes.
        "write_sge_32" => {
            callgrind::measure(&id, &mut CopyPost::<48, WQEBB>::new(SQ_WQEBBS, 32), opts)
        }
        // One 16-byte scatter entry in a 16-byte receive WQE.
        "recv_sge_32" => callgrind::measure(&id, &mut CopyPost::<16, 16>::new(RQ_WQES, 32), opts),
        "poll_16_v1" => {
            let mut c = CopyPoll {
                ring: (0..CQES * 64).map(|i| i as u8).collect(),
                out: [[0; 64]; 16],
                ci: 0,
                dbrec: AtomicU32::new(0),
            };
            callgrind::measure(&id, &mut c, opts)
        }
        "poll_empty_v1" => {
            let mut c = CopyPollEmpty {
                ring: vec![0; CQES * 64],
                ci: 0,
            };
            callgrind::measure(&id, &mut c, opts)
        }
        _ => None,
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn cell(v: Option<f64>, width: usize) -> String {
    match v {
        Some(v) => format!("{v:>width$.1}"),
        None => format!("{:>width$}", "-"),
    }
}

/// The two-thread figures: per round, the ratio of two threads on one HCA (and on two
/// HCAs) to one thread measured in the same round, then the median of each.
fn print_threads(ops: u64) {
    let rounds = common::uhca::two_threads(ops, 5);
    println!();
    println!(
        "two threads, SEND 1 SGE 32 per call, M requests/s (ratios to one thread in the same round):"
    );
    let mut same: Vec<f64> = Vec::new();
    let mut apart: Vec<f64> = Vec::new();
    for (i, r) in rounds.iter().enumerate() {
        same.push(r.same_hca / r.one);
        apart.push(r.two_hcas / r.one);
        println!(
            "  round {i}: one thread {:.1}; two pairs of one HCA {:.1} ({:.2}x); pairs of two HCAs {:.1} ({:.2}x)",
            r.one / 1e6,
            r.same_hca / 1e6,
            r.same_hca / r.one,
            r.two_hcas / 1e6,
            r.two_hcas / r.one
        );
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "two threads on two QP/CQ pairs of one HCA: {:.2}x one thread (median of {} rounds; \
         target at least 1.8x); on two HCAs: {:.2}x",
        median(&mut same),
        rounds.len(),
        median(&mut apart)
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs a quick smoke pass.
    let quick = !std::env::args().any(|a| a == "--bench");
    // `-- --threads`: only the two-thread figures.
    if std::env::args().any(|a| a == "--threads") {
        print_threads(env_u64("UHCA_BENCH_N").unwrap_or(20_000_000));
        return;
    }
    // `-- --gate`: uhca's instruction counts only, checked against datapath.expected (CI).
    let gate_only = std::env::args().any(|a| a == "--gate");
    // `-- --write-expected`: a full run that also rewrites datapath.expected.
    let write_expected = std::env::args().any(|a| a == "--write-expected");
    let child = std::env::var_os(callgrind::CASE_ENV).is_some();
    let filter = std::env::var("UHCA_BENCH_CASE").unwrap_or_default();
    let callgrind_n = match env_u64("UHCA_BENCH_CALLGRIND_N") {
        Some(0) => None,
        Some(n) => Some(n),
        None if quick => None,
        None => Some(100_000),
    };
    let opts = callgrind::Options {
        ops: env_u64("UHCA_BENCH_N").unwrap_or(if quick || gate_only {
            20_000
        } else {
            10_000_000
        }),
        runs: if quick || gate_only {
            1
        } else {
            env_u64("UHCA_BENCH_RUNS").unwrap_or(5) as usize
        },
        // (A re-executed child counts nothing itself.)
        callgrind_ops: callgrind_n.filter(|_| !child && callgrind::available()),
    };
    if gate_only && !child && opts.callgrind_ops.is_none() {
        eprintln!("--gate needs instruction counts: valgrind (callgrind), and not --bench-less");
        std::process::exit(2);
    }

    // libmlx5, default locks and MLX5_SINGLE_THREADED=1 (not in a re-executed child).
    let mut mlx5: [Option<libmlx5::Table>; 2] = [None, None];
    if !child && !gate_only {
        let dir = if quick {
            let d = common::workspace_root().join("target/parity/bin");
            d.join(libmlx5::HARNESS).is_file().then_some(d)
        } else {
            match libmlx5::harness_dir() {
                Ok(d) => Some(d),
                Err(e) => {
                    eprintln!("libmlx5 rows unavailable: {e}");
                    None
                }
            }
        };
        for (i, single_threaded) in [(0, false), (1, true)] {
            let Some(dir) = &dir else { break };
            let o = libmlx5::Options {
                ops: opts.ops,
                callgrind_ops: opts.callgrind_ops,
                single_threaded,
                filter: filter.clone(),
            };
            match libmlx5::measure(dir, &o) {
                Ok(t) => mlx5[i] = Some(t),
                Err(e) => eprintln!("libmlx5 rows unavailable: {e}"),
            }
        }
    }

    // uhca: the same cases through the public API (see `common/uhca.rs`).
    let names: Vec<&'static str> = ROWS.iter().map(|r| r.0).collect();
    let uhca: BTreeMap<&str, Measured> = common::uhca::measure(&names, &filter, &opts);

    let mut copy: BTreeMap<&str, Measured> = BTreeMap::new();
    for (name, _, _) in ROWS.iter().filter(|_| !gate_only) {
        if name.contains(filter.as_str())
            && let Some(m) = copy_case(name, &opts)
        {
            copy.insert(name, m);
        }
    }
    if child {
        // The case named by callgrind::CASE_ENV exits from callgrind::measure; reaching this
        // means no case has that name.
        eprintln!("no in-process case named by {}", callgrind::CASE_ENV);
        std::process::exit(2);
    }

    let ml = |i: usize, name: &str| mlx5[i].as_ref().and_then(|t| t.rows.get(name)).copied();
    println!(
        "uhca-driver datapath benchmark ({}, {})",
        std::env::consts::ARCH,
        if quick {
            "quick pass".to_string()
        } else {
            format!("median of {} runs of {} operations", opts.runs, opts.ops)
        }
    );
    match &mlx5[0] {
        Some(t) => println!("{}", t.config),
        None => println!("libmlx5: not run"),
    }
    println!(
        "libmlx5 ST: the same with MLX5_SINGLE_THREADED=1 (no provider locks, as uhca takes none)"
    );
    println!(
        "{}",
        if opts.callgrind_ops.is_some() {
            "instructions: callgrind, inside the timed region only"
        } else {
            "instructions: not counted (no valgrind, quick pass or UHCA_BENCH_CALLGRIND_N=0)"
        }
    );
    println!();
    let fast = |name: &str| format!("fast_{name}");
    println!(
        "{:<46} {:>9} {:>9} {:>10} {:>9} {:>9}",
        "ns per op", "uhca", "libmlx5", "libmlx5 ST", "fast path", "copy"
    );
    for (name, what, _) in ROWS.iter().filter(|r| r.0.contains(filter.as_str())) {
        println!(
            "{what:<46} {} {} {} {} {}",
            cell(uhca.get(name).map(|m| m.ns), 9),
            cell(ml(0, name).map(|m| m.ns), 9),
            cell(ml(1, name).map(|m| m.ns), 10),
            cell(ml(0, &fast(name)).map(|m| m.ns), 9),
            cell(copy.get(name).map(|m| m.ns), 9),
        );
    }
    println!();
    println!(
        "{:<46} {:>9} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "instructions per op",
        "uhca",
        "libmlx5",
        "libmlx5 ST",
        "fast path",
        "copy",
        "target",
        "½ libmlx5"
    );
    for (name, what, target) in ROWS.iter().filter(|r| r.0.contains(filter.as_str())) {
        let lib = ml(0, name).and_then(|m| m.instructions);
        println!(
            "{what:<46} {} {} {} {} {} {} {}",
            cell(uhca.get(name).and_then(|m| m.instructions), 9),
            cell(lib, 9),
            cell(ml(1, name).and_then(|m| m.instructions), 10),
            cell(ml(0, &fast(name)).and_then(|m| m.instructions), 9),
            cell(copy.get(name).and_then(|m| m.instructions), 9),
            cell(*target, 9),
            cell(lib.map(|v| v / 2.0), 9),
        );
    }
    // libmlx5's CQE version 0 path (mlx5_poll_cq, QP found by QPN), for reference.
    for name in ["poll_16_v0", "poll_empty_v0"] {
        if let Some(m) = ml(0, name) {
            println!(
                "libmlx5 {name} (CQE version 0, mlx5_poll_cq): {:.1} ns, {} instructions",
                m.ns,
                cell(m.instructions, 0)
            );
        }
    }
    // Two threads, two QP/CQ pairs of one HCA, no lock between them (not in a quick pass:
    // it needs the machine's cores to itself to mean anything).
    if !quick && !gate_only && filter.is_empty() {
        print_threads(opts.ops.min(20_000_000));
    }

    let counted: BTreeMap<&str, f64> = uhca
        .iter()
        .filter_map(|(k, m)| m.instructions.map(|v| (*k, v)))
        .collect();
    if !gate_only && opts.callgrind_ops.is_some() {
        print_markdown(&uhca, &|i, n| ml(i, n), &copy);
    }
    if counted.is_empty() {
        return;
    }
    if write_expected {
        if !filter.is_empty() {
            eprintln!("--write-expected needs every row: unset UHCA_BENCH_CASE");
            std::process::exit(2);
        }
        gate::write(&counted);
    }
    if !gate::check(&counted) {
        std::process::exit(1);
    }
}

/// The commit the tree is at (`git rev-parse --short HEAD`), with "+ changes" if the work
/// tree differs from it.
fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(common::workspace_root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(s) if s.is_empty() => head,
        _ => format!("{head} + uncommitted changes"),
    }
}

/// The instruction table as BENCHMARKS.md shows it (paste it over the old one).
fn print_markdown(
    uhca: &BTreeMap<&str, Measured>,
    ml: &dyn Fn(usize, &str) -> Option<Measured>,
    copy: &BTreeMap<&str, Measured>,
) {
    let md = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    println!();
    println!(
        "BENCHMARKS.md table (instructions per operation, callgrind), measured at {}:",
        commit()
    );
    println!();
    println!(
        "| Operation | uhca | libmlx5 | libmlx5 ST | libmlx5 fast path | copy | uhca / libmlx5 |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|");
    for (name, what, _) in ROWS {
        let u = uhca.get(name).and_then(|m| m.instructions);
        let lib = ml(0, name).and_then(|m| m.instructions);
        let ratio = match (u, lib) {
            (Some(u), Some(l)) if l > 0.0 => format!("{:.2}", u / l),
            _ => "-".into(),
        };
        println!(
            "| {what} | {} | {} | {} | {} | {} | {ratio} |",
            md(u),
            md(lib),
            md(ml(1, name).and_then(|m| m.instructions)),
            md(ml(0, &format!("fast_{name}")).and_then(|m| m.instructions)),
            md(copy.get(name).and_then(|m| m.instructions)),
        );
    }
}

/// The regression gate: uhca's instructions per operation against the figures committed in
/// `driver/benches/datapath.expected`.
mod gate {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    /// How much worse than its committed figure a row may be.
    const TOLERANCE: f64 = 0.02;

    fn path() -> PathBuf {
        super::common::workspace_root().join("driver/benches/datapath.expected")
    }

    const HEADER: &str = "\
# uhca's instructions per operation in the datapath benchmark (driver/benches/datapath.rs),
# counted by callgrind (exact: the same from one run to the next). The benchmark fails when a
# row is more than 2% above its figure here, and says so when one is more than 2% below.
# One row a line: case name, instructions per operation.
# Refresh (after an intended change, from the workspace root):
#   cargo bench -p uhca-driver --bench datapath -- --write-expected
# Check only (what CI runs, about a minute):
#   cargo bench -p uhca-driver --bench datapath -- --gate
";

    fn read() -> Result<BTreeMap<String, f64>, String> {
        let text = std::fs::read_to_string(path())
            .map_err(|e| format!("cannot read {}: {e}", path().display()))?;
        let mut out = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut w = line.split_whitespace();
            match (
                w.next(),
                w.next().and_then(|v| v.parse::<f64>().ok()),
                w.next(),
            ) {
                (Some(name), Some(v), None) => {
                    out.insert(name.to_string(), v);
                }
                _ => {
                    return Err(format!(
                        "{}:{}: not \"NAME COUNT\"",
                        path().display(),
                        i + 1
                    ));
                }
            }
        }
        Ok(out)
    }

    /// Writes `counted` as the committed figures.
    pub fn write(counted: &BTreeMap<&str, f64>) {
        let mut text = HEADER.to_string();
        for (name, _, _) in super::ROWS {
            if let Some(v) = counted.get(name) {
                text.push_str(&format!("{name} {v:.2}\n"));
            }
        }
        match std::fs::write(path(), text) {
            Ok(()) => println!("wrote {}", path().display()),
            Err(e) => {
                eprintln!("cannot write {}: {e}", path().display());
                std::process::exit(2);
            }
        }
    }

    /// Compares `counted` with the committed figures; false if a row regressed by more than
    /// [`TOLERANCE`] or the file is unusable.
    pub fn check(counted: &BTreeMap<&str, f64>) -> bool {
        let expected = match read() {
            Ok(e) => e,
            Err(e) => {
                eprintln!("gate: {e}");
                return false;
            }
        };
        println!();
        println!(
            "gate: uhca's instructions per operation against driver/benches/datapath.expected (2% tolerance)"
        );
        let mut ok = true;
        let mut stale = false;
        for (name, &new) in counted {
            let Some(&old) = expected.get(*name) else {
                println!(
                    "  note: {name} has no committed figure ({new:.1} now): add it to datapath.expected"
                );
                stale = true;
                continue;
            };
            let change = (new - old) / old * 100.0;
            if new > old * (1.0 + TOLERANCE) {
                println!("  REGRESSION {name}: {old:.1} committed, {new:.1} now ({change:+.1}%)");
                ok = false;
            } else if new < old * (1.0 - TOLERANCE) {
                println!(
                    "  improved {name}: {old:.1} committed, {new:.1} now ({change:+.1}%): update datapath.expected"
                );
                stale = true;
            }
        }
        if stale {
            println!(
                "  to update: cargo bench -p uhca-driver --bench datapath -- --write-expected"
            );
        }
        println!(
            "gate: {}",
            if ok {
                "passed"
            } else {
                "FAILED: a row is more than 2% worse than its committed figure"
            }
        );
        ok
    }
}
