//! libmlx5's datapath timed on plain memory, for printing beside uhca's figures in the same
//! run: runs `harness_bench` (tests/parity/harness_bench.c, built by tests/parity/build.sh
//! from rdma-core's unmodified `providers/mlx5` sources) for nanoseconds per operation and,
//! under callgrind, for instructions per operation.
//!
//! The harness calls `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` (libmlx5's
//! `mlx5_post_send`, `mlx5_post_recv`, `mlx5_poll_cq_v1` and `mlx5_poll_cq`) on objects laid
//! out in plain memory: 8-byte doorbell (BlueFlame copies off), doorbell register and records
//! ordinary memory, one QP and CQ, single thread. Its cases are listed in [`CASES`].

use super::{Measured, RunError, callgrind, run_with_timeout, workspace_root};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The folder of the harnesses: `UHCA_LIBMLX5_HARNESS_DIR` (relative to the workspace root
/// if relative), by default `target/parity/bin`.
pub const DIR_ENV: &str = "UHCA_LIBMLX5_HARNESS_DIR";
/// The harness's name in that folder.
pub const HARNESS: &str = "harness_bench";
/// The cases `harness_bench` runs, with what one operation is.
pub const CASES: &[(&str, &str)] = &[
    (
        "send_sge_1",
        "SEND, 1 SGE of 64 B, 1 per call (doorbell per request)",
    ),
    (
        "send_sge_32",
        "SEND, 1 SGE of 64 B, 32 per call (doorbell per 32)",
    ),
    ("send_inline64_32", "SEND, 64 B inline, 32 per call"),
    ("write_sge_32", "RDMA WRITE, 1 SGE of 64 B, 32 per call"),
    ("recv_sge_32", "post_recv, 1 SGE, 32 per call"),
    (
        "poll_16_v1",
        "poll 16 SEND CQEs per call, per CQE (CQE v1: mlx5_poll_cq_v1)",
    ),
    (
        "poll_empty_v1",
        "poll an empty CQ, per call (mlx5_poll_cq_v1)",
    ),
    (
        "poll_16_v0",
        "poll 16 SEND CQEs per call, per CQE (CQE v0: mlx5_poll_cq)",
    ),
    ("poll_empty_v0", "poll an empty CQ, per call (mlx5_poll_cq)"),
    ("srq_recv_sge_32", "ibv_post_srq_recv, 1 SGE, 32 per call"),
    (
        "poll_recv_16_rq_send",
        "poll 16 receive CQEs of SENDs (RQ), per CQE",
    ),
    (
        "poll_recv_16_rq_send_imm",
        "poll 16 receive CQEs of SENDs with immediate (RQ), per CQE",
    ),
    (
        "poll_recv_16_rq_write_imm",
        "poll 16 receive CQEs of RDMA WRITEs with immediate (RQ), per CQE",
    ),
    (
        "poll_recv_16_srq_send",
        "as poll_recv_16_rq_send from an SRQ",
    ),
    (
        "poll_recv_16_srq_send_imm",
        "as poll_recv_16_rq_send_imm from an SRQ",
    ),
    (
        "poll_recv_16_srq_write_imm",
        "as poll_recv_16_rq_write_imm from an SRQ",
    ),
    (
        "fast_send_sge_32",
        "ibv_wr_start, 32 x (ibv_wr_send, ibv_wr_set_sge), ibv_wr_complete",
    ),
    (
        "fast_send_inline64_32",
        "as fast_send_sge_32 with ibv_wr_set_inline_data of 64 B",
    ),
    (
        "fast_write_sge_32",
        "as fast_send_sge_32 with ibv_wr_rdma_write",
    ),
    (
        "fast_poll_16_v1",
        "ibv_start_poll, 15 ibv_next_poll, ibv_end_poll on 16 SEND CQEs, per CQE",
    ),
    (
        "fast_poll_recv_16_rq_send",
        "as poll_recv_16_rq_send with ibv_start_poll",
    ),
    (
        "fast_poll_recv_16_rq_send_imm",
        "as poll_recv_16_rq_send_imm with ibv_start_poll",
    ),
    (
        "fast_poll_recv_16_rq_write_imm",
        "as poll_recv_16_rq_write_imm with ibv_start_poll",
    ),
    (
        "fast_poll_recv_16_srq_send",
        "as poll_recv_16_srq_send with ibv_start_poll",
    ),
    (
        "fast_poll_recv_16_srq_send_imm",
        "as poll_recv_16_srq_send_imm with ibv_start_poll",
    ),
    (
        "fast_poll_recv_16_srq_write_imm",
        "as poll_recv_16_srq_write_imm with ibv_start_poll",
    ),
];
/// The longest the timed run of every case may take.
const LIMIT: Duration = Duration::from_secs(600);

/// How libmlx5 is run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Operations per timed run (the harness takes the median of 5 runs).
    pub ops: u64,
    /// Operations under callgrind; `None`: no instruction counts.
    pub callgrind_ops: Option<u64>,
    /// `MLX5_SINGLE_THREADED=1`: the provider's locks off, as libmlx5 does when the variable
    /// is set. Otherwise libmlx5's default: a pthread spinlock taken per call on the QP's
    /// queue and on the CQ.
    pub single_threaded: bool,
    /// Only the cases whose name contains this.
    pub filter: String,
}

/// libmlx5's figures of one run.
#[derive(Clone, Debug)]
pub struct Table {
    /// The harness's description of its configuration (its first line).
    pub config: String,
    /// Case name (see [`CASES`]) to its figures.
    pub rows: BTreeMap<String, Measured>,
}

/// The folder that holds `harness_bench`, built by `bash tests/parity/build.sh` if it is
/// missing (which needs gcc, python3 and apt: it fetches Debian's rdma-core source).
pub fn harness_dir() -> Result<PathBuf, RunError> {
    let root = workspace_root();
    let dir = match std::env::var_os(DIR_ENV).filter(|d| !d.is_empty()) {
        Some(d) => root.join(d),
        None => root.join("target/parity/bin"),
    };
    if dir.join(HARNESS).is_file() {
        return Ok(dir);
    }
    // build.sh puts the harnesses in SCRATCH/bin.
    let scratch = match dir.file_name() {
        Some(n) if n == "bin" => dir.parent().map(Path::to_path_buf),
        _ => None,
    }
    .ok_or_else(|| {
        RunError::Output(
            dir.display().to_string(),
            format!("has no {HARNESS}, and is not a build.sh output folder (SCRATCH/bin)"),
        )
    })?;
    eprintln!(
        "libmlx5: no {HARNESS} in {}: running tests/parity/build.sh",
        dir.display()
    );
    let (out, _) = run_with_timeout(
        Command::new("bash")
            .arg(root.join("tests/parity/build.sh"))
            .arg(&scratch),
        LIMIT,
    )?;
    let built = PathBuf::from(out.lines().last().unwrap_or_default().trim());
    if built.join(HARNESS).is_file() {
        Ok(built)
    } else {
        Err(RunError::Output(
            "tests/parity/build.sh".into(),
            format!("built no {HARNESS} (it printed {})", built.display()),
        ))
    }
}

/// One `case NAME ns NS ops OPS` line of the harness.
fn parse_case(line: &str) -> Option<(String, f64, u64)> {
    let w: Vec<&str> = line.split_whitespace().collect();
    match w.as_slice() {
        ["case", name, "ns", ns, "ops", ops] => {
            Some((name.to_string(), ns.parse().ok()?, ops.parse().ok()?))
        }
        _ => None,
    }
}

/// Runs libmlx5's cases from the harness in `dir`: ns per operation (median of 5 runs, the
/// cases interleaved) and, if `opts.callgrind_ops` is set, instructions per operation
/// (`--toggle-collect=bench_timed`, see [`callgrind`]).
pub fn measure(dir: &Path, opts: &Options) -> Result<Table, RunError> {
    let bin = dir.join(HARNESS);
    // Set either way, so the caller's environment does not decide (libmlx5 reads "1" as
    // single-threaded and anything else as not).
    let envs = [(
        "MLX5_SINGLE_THREADED",
        if opts.single_threaded { "1" } else { "0" }.to_string(),
    )];
    let mut cmd = Command::new(&bin);
    cmd.arg(opts.ops.to_string());
    for (k, v) in &envs {
        cmd.env(k, v);
    }
    let (out, _) = run_with_timeout(&mut cmd, LIMIT)?;
    let config = out
        .lines()
        .find_map(|l| l.strip_prefix("# "))
        .unwrap_or("")
        .to_string();
    let mut rows = BTreeMap::new();
    for (name, ns, _) in out.lines().filter_map(parse_case) {
        if !name.contains(opts.filter.as_str()) {
            continue;
        }
        let instructions = match opts.callgrind_ops {
            None => None,
            Some(ops) => {
                let args: Vec<OsString> = vec![name.clone().into(), ops.to_string().into()];
                let (collected, out) = callgrind::count(&bin, &args, &envs, "bench_timed")?;
                let done = out
                    .lines()
                    .filter_map(parse_case)
                    .map(|(_, _, done)| done)
                    .next()
                    .ok_or_else(|| {
                        RunError::Output(name.clone(), "no case line under callgrind".into())
                    })?;
                Some(collected as f64 / done as f64)
            }
        };
        rows.insert(name, Measured { ns, instructions });
    }
    for (name, _) in CASES {
        if name.contains(opts.filter.as_str()) && !rows.contains_key(*name) {
            return Err(RunError::Output(
                bin.display().to_string(),
                format!("printed no figure for {name}"),
            ));
        }
    }
    Ok(Table { config, rows })
}
