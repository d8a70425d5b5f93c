//! `all_reduce_perf`: nccl-tests' collective benchmark on uhca (`uhca-collective`), with
//! nccl-tests' table: size, count, type, redop, root, time, algbw, busbw, #wrong.
//!
//! ```sh
//! cargo run --release --example all_reduce_perf -- --mock -n 8
//! cargo run --release --example all_reduce_perf -- --mock -n 4 -b 8 -e 128M -f 2 -d half -o max
//! cargo run --release --example all_reduce_perf -- --mock -n 8 -t all_gather
//! ```
//!
//! `--mock`: N ranks (`-n`, default 8) as threads, each with its own mock HCA, on one mock
//! fabric (RoCEv2; `--ib` for InfiniBand), connected all to all by RC QPs. Running over
//! real UDP between processes (`--udp`) and on ConnectX devices (`--device`) is not
//! there yet.
//!
//! Flags as nccl-tests' where they exist: `-b` smallest size (8), `-e` largest (8M), `-f`
//! factor between sizes (2), `-t` collective (`all_reduce`, `all_gather`,
//! `reduce_scatter`, `broadcast`; the binary's name in nccl-tests), `-d` type (`float`,
//! `half`, `bfloat16`, `int32`, `uint8`), `-o` op (`sum`, `max`, `min`), `-r` broadcast
//! root (0), `-w` warm-up iterations (1), `--iters` timed iterations (5; nccl-tests'
//! `-n`, which here is the number of ranks as in the issue that asked for this tool), `-c
//! 0` to skip the check, `--chunk` bytes per chunk (32K), `--window` chunks in flight per
//! peer (4), `--seed`/`--faults PER_MILLE` for the fabric's seeded drop, duplication and
//! reordering. Sizes take K, M, G suffixes (powers of 1024).
//!
//! The figures are nccl-tests' (its `src/common.cu`, `src/all_reduce.cu`,
//! `src/all_gather.cu`, `src/reduce_scatter.cu`, `src/broadcast.cu`): time is the
//! average time of one iteration, averaged over the ranks; algbw = size / time (GB/s,
//! 10^9 bytes); busbw = algbw × 2(n−1)/n for all-reduce, × (n−1)/n for all-gather and
//! reduce-scatter (whose size is the whole n-block buffer and whose count is per rank), ×
//! 1 for broadcast. #wrong counts the elements, over all ranks, that differ from a
//! reference computed on the host after one more run on fresh data: integers, max and min
//! must match exactly, float sums within n × EPSILON × Σ|xᵢ| (the reduction-order
//! tolerance: 2⁻²³ for float, 2⁻¹⁰ for half, 2⁻⁷ for bfloat16). Only in-place operation
//! is measured (uhca-collective's collectives work in place). Any #wrong makes the
//! program exit with status 1.

use std::process::ExitCode;
use std::sync::Barrier;
use std::time::Instant;

use uhca::mock::{FaultConfig, LinkLayer};
use uhca_collective::mock::{MockCluster, MockComm};
use uhca_collective::{Bf16, Collective, Config, DataType, Element, Error, F16, ReduceOp};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
}

impl Op {
    fn collective(self) -> Collective {
        match self {
            Op::AllReduce => Collective::AllReduceRing,
            Op::AllGather => Collective::AllGather,
            Op::ReduceScatter => Collective::ReduceScatter,
            Op::Broadcast => Collective::Broadcast,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Op::AllReduce => "all_reduce",
            Op::AllGather => "all_gather",
            Op::ReduceScatter => "reduce_scatter",
            Op::Broadcast => "broadcast",
        }
    }
}

#[derive(Clone, Debug)]
struct Args {
    ranks: usize,
    min_bytes: usize,
    max_bytes: usize,
    factor: usize,
    op: Op,
    dtype: DataType,
    redop: ReduceOp,
    root: usize,
    warmup: usize,
    iters: usize,
    check: bool,
    link: LinkLayer,
    cfg: Config,
    faults: u16,
    seed: u64,
}

fn size_arg(s: &str) -> Res<usize> {
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    Ok(num.parse::<usize>()? * mul)
}

fn parse() -> Res<Args> {
    let mut a = Args {
        ranks: 8,
        min_bytes: 8,
        max_bytes: 8 << 20,
        factor: 2,
        op: Op::AllReduce,
        dtype: DataType::Float,
        redop: ReduceOp::Sum,
        root: 0,
        warmup: 1,
        iters: 5,
        check: true,
        link: LinkLayer::Ethernet,
        cfg: Config::default(),
        faults: 0,
        seed: 1,
    };
    let mut mock = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--mock" => mock = true,
            "--udp" | "--device" => {
                return Err(format!(
                    "{flag}: not implemented yet (only --mock); see the example's documentation"
                )
                .into());
            }
            "--ib" => a.link = LinkLayer::InfiniBand,
            "-n" | "--nranks" => a.ranks = val()?.parse()?,
            "-b" | "--minbytes" => a.min_bytes = size_arg(&val()?)?,
            "-e" | "--maxbytes" => a.max_bytes = size_arg(&val()?)?,
            "-f" | "--stepfactor" => a.factor = val()?.parse()?,
            "-t" | "--op" => {
                a.op = match val()?.as_str() {
                    "all_reduce" => Op::AllReduce,
                    "all_gather" => Op::AllGather,
                    "reduce_scatter" => Op::ReduceScatter,
                    "broadcast" => Op::Broadcast,
                    o => return Err(format!("unknown collective {o}").into()),
                }
            }
            "-d" | "--datatype" => {
                a.dtype = match val()?.as_str() {
                    "float" => DataType::Float,
                    "half" => DataType::Half,
                    "bfloat16" => DataType::Bfloat16,
                    "int32" => DataType::Int32,
                    "uint8" => DataType::Uint8,
                    t => return Err(format!("unknown type {t}").into()),
                }
            }
            "-o" | "--redop" => {
                a.redop = match val()?.as_str() {
                    "sum" => ReduceOp::Sum,
                    "max" => ReduceOp::Max,
                    "min" => ReduceOp::Min,
                    o => return Err(format!("unknown op {o}").into()),
                }
            }
            "-r" | "--root" => a.root = val()?.parse()?,
            "-w" | "--warmup_iters" => a.warmup = val()?.parse()?,
            "--iters" => a.iters = val()?.parse()?,
            "-c" | "--check" => a.check = val()? != "0",
            "--chunk" => a.cfg.chunk_bytes = size_arg(&val()?)?,
            "--window" => a.cfg.window = val()?.parse()?,
            "--faults" => a.faults = val()?.parse()?,
            "--seed" => a.seed = val()?.parse()?,
            "-h" | "--help" => {
                println!(
                    "all_reduce_perf --mock [-n RANKS] [-b MIN] [-e MAX] [-f FACTOR] [-t OP] \
                     [-d TYPE] [-o REDOP] [-r ROOT] [-w WARMUP] [--iters N] [-c 0|1] \
                     [--chunk BYTES] [--window N] [--faults PER_MILLE] [--seed S] [--ib]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if !mock {
        return Err("give --mock (N ranks on mock HCAs of one fabric)".into());
    }
    if a.ranks == 0 || a.factor < 2 || a.min_bytes > a.max_bytes || a.iters == 0 {
        return Err("need -n ≥ 1, -f ≥ 2, -b ≤ -e, --iters ≥ 1".into());
    }
    if a.root >= a.ranks {
        return Err("the root must be a rank".into());
    }
    Ok(a)
}

/// A small generator (xorshift64*) for reproducible data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Rank `rank`'s data: floats in [-4, 4), integers across the type's range.
fn data<T: Element>(seed: u64, rank: usize, count: usize) -> Vec<T> {
    let mut g = Rng((seed ^ ((rank as u64 + 1) * 0x9e37_79b9_7f4a_7c15)) | 1);
    (0..count)
        .map(|_| {
            let x = g.next();
            if T::EPSILON > 0.0 {
                T::from_f64((x >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0)
            } else {
                T::from_f64((x >> 32) as u32 as i32 as f64)
            }
        })
        .collect()
}

/// One size's parameters, as nccl-tests derives them from the size.
struct Shape {
    /// Elements of each rank's buffer.
    buf: usize,
    /// The size and count columns.
    size: usize,
    count: usize,
}

fn shape(op: Op, bytes: usize, n: usize, esize: usize) -> Shape {
    let count = bytes / esize;
    match op {
        Op::AllReduce | Op::Broadcast => Shape {
            buf: count,
            size: count * esize,
            count,
        },
        Op::AllGather | Op::ReduceScatter => {
            let per = count / n;
            Shape {
                buf: per * n,
                size: per * n * esize,
                count: per,
            }
        }
    }
}

fn run_op<T: Element>(comm: &mut MockComm, a: &Args, buf: &mut [T]) -> Result<(), Error> {
    match a.op {
        Op::AllReduce => comm.all_reduce(buf, a.redop),
        Op::AllGather => comm.all_gather(buf),
        Op::ReduceScatter => comm.reduce_scatter(buf, a.redop),
        Op::Broadcast => comm.broadcast(buf, a.root),
    }
}

/// What one rank must hold after the check run: each element with its tolerance.
type Want<T> = Vec<(T, f64)>;

/// Every rank's input for the check run and what it must hold afterwards, on the host.
fn expected<T: Element>(a: &Args, sh: &Shape, seed: u64) -> (Vec<Vec<T>>, Vec<Want<T>>) {
    let n = a.ranks;
    let inputs: Vec<Vec<T>> = (0..n).map(|r| data(seed, r, sh.buf)).collect();
    let reduce = |i: usize| {
        let v = inputs
            .iter()
            .map(|x| x[i])
            .reduce(|p, q| T::reduce(a.redop, p, q))
            .expect("a rank");
        let tol = if T::EPSILON > 0.0 && a.redop == ReduceOp::Sum {
            n as f64 * T::EPSILON * inputs.iter().map(|x| x[i].to_f64().abs()).sum::<f64>()
        } else {
            0.0
        };
        // For float sums the reference is the sum in f64, rounded at the end.
        let v = if tol > 0.0 {
            T::from_f64(inputs.iter().map(|x| x[i].to_f64()).sum())
        } else {
            v
        };
        (v, tol)
    };
    let want: Vec<Want<T>> = match a.op {
        Op::AllReduce => {
            let all: Vec<_> = (0..sh.buf).map(reduce).collect();
            vec![all; n]
        }
        Op::ReduceScatter => {
            let per = sh.count;
            (0..n)
                .map(|r| (r * per..(r + 1) * per).map(reduce).collect())
                .collect()
        }
        Op::AllGather => {
            let per = sh.count;
            let all: Vec<_> = (0..n)
                .flat_map(|r| inputs[r][r * per..(r + 1) * per].iter().map(|&v| (v, 0.0)))
                .collect();
            vec![all; n]
        }
        Op::Broadcast => {
            let all: Vec<_> = inputs[a.root].iter().map(|&v| (v, 0.0)).collect();
            vec![all; n]
        }
    };
    (inputs, want)
}

/// Elements of `got` that miss `want`: ranks' own block only for reduce-scatter.
fn count_wrong<T: Element>(
    a: &Args,
    sh: &Shape,
    rank: usize,
    got: &[T],
    want: &[(T, f64)],
) -> usize {
    let got = match a.op {
        Op::ReduceScatter => &got[rank * sh.count..(rank + 1) * sh.count],
        _ => got,
    };
    got.iter()
        .zip(want)
        .filter(|(g, (w, tol))| {
            if *tol > 0.0 {
                (g.to_f64() - w.to_f64()).abs() > *tol
            } else {
                **g != *w && !(g.to_f64().is_nan() && w.to_f64().is_nan())
            }
        })
        .count()
}

/// Runs one size: returns (time per iteration in µs averaged over ranks, #wrong).
fn one_size<T: Element>(c: &mut MockCluster, a: &Args, sh: &Shape, seed: u64) -> Res<(f64, usize)> {
    let n = a.ranks;
    let (inputs, want) = if a.check {
        expected::<T>(a, sh, seed)
    } else {
        ((0..n).map(|r| data(seed, r, sh.buf)).collect(), vec![])
    };
    let barrier = Barrier::new(n);
    let out = c.run(|comm| -> Result<(f64, usize), Error> {
        let r = comm.rank();
        let mut buf = inputs[r].clone();
        for _ in 0..a.warmup {
            run_op(comm, a, &mut buf)?;
        }
        barrier.wait();
        let start = Instant::now();
        for _ in 0..a.iters {
            run_op(comm, a, &mut buf)?;
        }
        let us = start.elapsed().as_secs_f64() * 1e6 / a.iters as f64;
        let mut wrong = 0;
        if a.check {
            buf.copy_from_slice(&inputs[r]);
            run_op(comm, a, &mut buf)?;
            wrong = count_wrong(a, sh, r, &buf, &want[r]);
        }
        Ok((us, wrong))
    });
    let mut time = 0.0;
    let mut wrong = 0;
    for r in out {
        let (t, w) = r?;
        time += t;
        wrong += w;
    }
    Ok((time / n as f64, wrong))
}

fn float_str(v: f64, width: usize) -> String {
    for prec in [2, 1, 0] {
        let s = format!("{v:>width$.prec$}");
        if s.len() <= width {
            return s;
        }
    }
    format!("{v:>width$.0e}")
}

fn sweep<T: Element>(c: &mut MockCluster, a: &Args) -> Res<(usize, f64)> {
    let n = a.ranks;
    let root = if a.op == Op::Broadcast {
        a.root as i64
    } else {
        -1
    };
    let redop = match a.op {
        Op::AllReduce | Op::ReduceScatter => a.redop.name(),
        _ => "none",
    };
    println!("#");
    println!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
        "", "", "", "", "", "", "in-place", "", ""
    );
    println!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"
    );
    println!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""
    );
    let (mut wrong_total, mut bw_sum, mut lines) = (0usize, 0.0, 0usize);
    let mut bytes = a.min_bytes;
    let mut seed = a.seed;
    loop {
        let sh = shape(a.op, bytes, n, T::SIZE);
        let (us, wrong) = one_size::<T>(c, a, &sh, seed)?;
        let algbw = if us > 0.0 {
            sh.size as f64 / 1e3 / us
        } else {
            0.0
        };
        let busbw = algbw * a.op.collective().bus_factor(n);
        println!(
            "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}  {}  {}  {}  {:>6}",
            sh.size,
            sh.count,
            T::DATATYPE.name(),
            redop,
            root,
            float_str(us, 7),
            float_str(algbw, 6),
            float_str(busbw, 6),
            if a.check {
                wrong.to_string()
            } else {
                "N/A".to_string()
            }
        );
        wrong_total += wrong;
        bw_sum += busbw;
        lines += 1;
        seed += 1;
        if bytes >= a.max_bytes {
            break;
        }
        bytes = (bytes * a.factor).min(a.max_bytes);
    }
    Ok((wrong_total, bw_sum / lines as f64))
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("all_reduce_perf: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Res<bool> {
    let a = parse()?;
    println!(
        "# {}_perf on uhca-collective: {} ranks, mock HCAs on one {} fabric, minBytes {} \
         maxBytes {} step: {}(factor) warmup iters: {} iters: {} validation: {}",
        a.op.name(),
        a.ranks,
        match a.link {
            LinkLayer::Ethernet => "RoCEv2",
            LinkLayer::InfiniBand => "InfiniBand",
        },
        a.min_bytes,
        a.max_bytes,
        a.factor,
        a.warmup,
        a.iters,
        a.check as u8
    );
    println!(
        "# chunk {} B, window {} chunks per peer, recursive doubling up to {} B; faults {}‰",
        a.cfg.chunk_bytes, a.cfg.window, a.cfg.small_bytes, a.faults
    );
    let mut c = MockCluster::new(a.ranks, a.link, a.cfg)?;
    if a.faults > 0 {
        c.set_faults(FaultConfig::lossy(a.seed, a.faults));
    }
    let (wrong, avg) = match a.dtype {
        DataType::Float => sweep::<f32>(&mut c, &a)?,
        DataType::Half => sweep::<F16>(&mut c, &a)?,
        DataType::Bfloat16 => sweep::<Bf16>(&mut c, &a)?,
        DataType::Int32 => sweep::<i32>(&mut c, &a)?,
        DataType::Uint8 => sweep::<u8>(&mut c, &a)?,
    };
    if a.faults > 0 {
        let k = c.fabric.counters();
        println!(
            "# fabric: {} frames sent, {} dropped, {} duplicated, {} held back",
            k.sent, k.dropped, k.duplicated, k.delayed
        );
        c.set_faults(FaultConfig::default());
    }
    c.close()?;
    println!(
        "# {:<20} : {} {}",
        "Out of bounds values",
        wrong,
        if wrong == 0 { "OK" } else { "FAILED" }
    );
    println!("# {:<20} : {:.4}", "Avg bus bandwidth", avg);
    println!("#");
    Ok(wrong == 0)
}
