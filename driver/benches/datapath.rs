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
//! is. Without `--bench` (`cargo test --benches`) a quick pass runs: few operations, one run,
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

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs a quick smoke pass.
    let quick = !std::env::args().any(|a| a == "--bench");
    let child = std::env::var_os(callgrind::CASE_ENV).is_some();
    let filter = std::env::var("UHCA_BENCH_CASE").unwrap_or_default();
    let callgrind_n = match env_u64("UHCA_BENCH_CALLGRIND_N") {
        Some(0) => None,
        Some(n) => Some(n),
        None if quick => None,
        None => Some(100_000),
    };
    let opts = callgrind::Options {
        ops: env_u64("UHCA_BENCH_N").unwrap_or(if quick { 20_000 } else { 10_000_000 }),
        runs: if quick {
            1
        } else {
            env_u64("UHCA_BENCH_RUNS").unwrap_or(5) as usize
        },
        // (A re-executed child counts nothing itself.)
        callgrind_ops: callgrind_n.filter(|_| !child && callgrind::available()),
    };

    // libmlx5, default locks and MLX5_SINGLE_THREADED=1 (not in a re-executed child).
    let mut mlx5: [Option<libmlx5::Table>; 2] = [None, None];
    if !child {
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
    for (name, _, _) in ROWS {
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
    println!(
        "{:<46} {:>9} {:>9} {:>10} {:>9}",
        "ns per op", "uhca", "libmlx5", "libmlx5 ST", "copy"
    );
    for (name, what, _) in ROWS.iter().filter(|r| r.0.contains(filter.as_str())) {
        println!(
            "{what:<46} {} {} {} {}",
            cell(uhca.get(name).map(|m| m.ns), 9),
            cell(ml(0, name).map(|m| m.ns), 9),
            cell(ml(1, name).map(|m| m.ns), 10),
            cell(copy.get(name).map(|m| m.ns), 9),
        );
    }
    println!();
    println!(
        "{:<46} {:>9} {:>9} {:>10} {:>9} {:>9} {:>9}",
        "instructions per op", "uhca", "libmlx5", "libmlx5 ST", "copy", "target", "½ libmlx5"
    );
    for (name, what, target) in ROWS.iter().filter(|r| r.0.contains(filter.as_str())) {
        let lib = ml(0, name).and_then(|m| m.instructions);
        println!(
            "{what:<46} {} {} {} {} {} {}",
            cell(uhca.get(name).and_then(|m| m.instructions), 9),
            cell(lib, 9),
            cell(ml(1, name).and_then(|m| m.instructions), 10),
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
    if !quick && filter.is_empty() {
        let (one, two) = common::uhca::two_threads(opts.ops.min(20_000_000));
        println!();
        println!(
            "two threads, SEND 1 SGE 32 per call on two QP/CQ pairs of one HCA: {:.1} M requests/s \
             in aggregate, {:.1} M/s on one thread alone: {:.2}x (target at least 1.8x)",
            two / 1e6,
            one / 1e6,
            two / one
        );
    }
}
