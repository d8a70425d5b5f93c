//! `all_reduce_perf`: nccl-tests' collective benchmark on uhca (`uhca-collective`), with
//! nccl-tests' table: size, count, type, redop, root, time, algbw, busbw, #wrong.
//!
//! ```sh
//! cargo run --release --example all_reduce_perf -- --mock -n 8
//! cargo run --release --example all_reduce_perf -- --mock -n 4 -b 8 -e 128M -f 2 -d half -o max
//! cargo run --release --example all_reduce_perf -- --mock -n 8 -t all_gather
//! # four processes, one rank each, RoCEv2 over real UDP sockets on 127.0.0.1-4:
//! for r in 1 2 3; do
//!   cargo run --release --example all_reduce_perf -- --udp 127.0.0.$((r+1)) --rank $r -n 4 &
//! done
//! cargo run --release --example all_reduce_perf -- --udp 127.0.0.1 --rank 0 -n 4
//! ```
//!
//! `--mock`: N ranks (`-n`, default 8) as threads, each with its own mock HCA, on one mock
//! fabric (RoCEv2; `--ib` for InfiniBand), connected all to all by RC QPs.
//!
//! `--udp IP --rank R -n N`: this process is rank R of N, on one mock HCA whose RoCEv2
//! port is a UDP socket on IP:4791 (each rank needs its own address). The ranks exchange
//! their endpoints (QPN, PSN, GID, MAC, inbox address and rkey, one per peer) over TCP
//! through rank 0 (`--coord`, default 127.0.0.1:18520), connect, and run the sweep; rank
//! 0 prints the table. Running on ConnectX devices (`--device`) is not there yet.
//!
//! Flags as nccl-tests' where they exist: `-b` smallest size (8), `-e` largest (8M), `-f`
//! factor between sizes (2), `-t` collective (`all_reduce`, `all_gather`,
//! `reduce_scatter`, `broadcast`; the binary's name in nccl-tests), `-d` type (`float`,
//! `half`, `bfloat16`, `int32`, `uint8`), `-o` op (`sum`, `max`, `min`), `-r` broadcast
//! root (0), `-w` warm-up iterations (1), `--iters` timed iterations (5; nccl-tests'
//! `-n`, which here is the number of ranks as in the issue that asked for this tool), `-c
//! 0` to skip the check, `--chunk` bytes per chunk (128K), `--window` chunks in flight per
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

#[path = "common/print.rs"]
#[macro_use] // println!/eprintln! that stay quiet on a closed pipe (`| head`)
mod print;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use uhca::driver::addr::Mac;
use uhca::driver::{Hca, HcaConfig};
use uhca::mock::fabric::PumpHandle;
use uhca::mock::{ClockMode, Fabric, MockConfig, MockHca};
use uhca::mock::{FaultConfig, LinkLayer};
use uhca_collective::line::{endpoint_line, parse_endpoint_line};
use uhca_collective::mock::{MockCluster, MockComm, share_cpu};
use uhca_collective::{Bf16, Collective, Config, DataType, Element, Error, F16, ReduceOp};
use uhca_collective::{Endpoint, PortAddr};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Set in every process but rank 0's with `--udp`: only rank 0 prints the table.
static QUIET: AtomicBool = AtomicBool::new(false);

/// `println!` unless [`QUIET`].
macro_rules! out {
    ($($t:tt)*) => {
        if !QUIET.load(Ordering::Relaxed) {
            println!($($t)*);
        }
    };
}

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
    /// `--udp IP`: this process is one rank, its mock HCA's port a UDP socket on IP.
    udp: Option<Ipv4Addr>,
    /// `--rank`: this process's rank (with `--udp`).
    rank: usize,
    /// `--coord`: rank 0's TCP address for the exchange of endpoints (with `--udp`).
    coord: String,
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
        udp: None,
        rank: 0,
        coord: "127.0.0.1:18520".to_string(),
    };
    let mut mock = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--mock" => mock = true,
            "--udp" => a.udp = Some(val()?.parse()?),
            "--rank" => a.rank = val()?.parse()?,
            "--coord" => a.coord = val()?,
            "--device" => {
                return Err(format!(
                    "{flag}: not implemented yet (--mock or --udp); see the example's documentation"
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
                    "all_reduce_perf --mock | --udp IP --rank R [--coord HOST:PORT] [-n RANKS] [-b MIN] [-e MAX] [-f FACTOR] [-t OP] \
                     [-d TYPE] [-o REDOP] [-r ROOT] [-w WARMUP] [--iters N] [-c 0|1] \
                     [--chunk BYTES] [--window N] [--faults PER_MILLE] [--seed S] [--ib]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if mock == a.udp.is_some() {
        return Err(
            "give --mock (N ranks on mock HCAs of one fabric) or --udp IP --rank R (one rank \
             per process)"
                .into(),
        );
    }
    if a.udp.is_some() && a.rank >= a.ranks {
        return Err("--rank must be below -n".into());
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
    let mut g = Rng((seed ^ (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
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

/// Runs one size on every local rank: returns (time per iteration in µs averaged over
/// all ranks, #wrong summed over all ranks). The start barrier and the sums over ranks
/// are collectives themselves (one-element all-reduces), so they work the same whether
/// the ranks are threads or processes.
fn one_size<T: Element>(c: &mut impl Ranks, a: &Args, sh: &Shape, seed: u64) -> Res<(f64, usize)> {
    let n = a.ranks;
    let (inputs, want) = if a.check {
        expected::<T>(a, sh, seed)
    } else {
        ((0..n).map(|r| data(seed, r, sh.buf)).collect(), vec![])
    };
    let out = c.run(|comm| -> Result<(f64, usize), Error> {
        let r = comm.rank();
        let mut buf = inputs[r].clone();
        for _ in 0..a.warmup {
            run_op(comm, a, &mut buf)?;
        }
        comm.all_reduce(&mut [0i32], ReduceOp::Sum)?;
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
        let mut time = [us as f32];
        comm.all_reduce(&mut time, ReduceOp::Sum)?;
        let mut wrong = [wrong as i32];
        comm.all_reduce(&mut wrong, ReduceOp::Sum)?;
        Ok((time[0] as f64 / n as f64, wrong[0] as usize))
    });
    let mut first = None;
    for r in out {
        let r = r?;
        first.get_or_insert(r);
    }
    Ok(first.expect("at least one local rank"))
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

fn sweep<T: Element>(c: &mut impl Ranks, a: &Args) -> Res<(usize, f64)> {
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
    out!("#");
    out!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
        "",
        "",
        "",
        "",
        "",
        "",
        "in-place",
        "",
        ""
    );
    out!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong"
    );
    out!(
        "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        ""
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
        out!(
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

/// The ranks this process runs: all of them as threads (`--mock`), or its own (`--udp`).
trait Ranks {
    /// Runs `f` on every local rank (each on its own thread) and returns the results.
    fn run<R: Send>(&mut self, f: impl Fn(&mut MockComm) -> R + Sync) -> Vec<R>;
}

impl Ranks for MockCluster {
    fn run<R: Send>(&mut self, f: impl Fn(&mut MockComm) -> R + Sync) -> Vec<R> {
        MockCluster::run(self, f)
    }
}

/// One rank in this process: a mock HCA whose RoCEv2 port is a UDP socket.
struct UdpRank {
    _fabric: Fabric,
    pump: Option<PumpHandle>,
    _dev: MockHca,
    hca: Hca<uhca::mock::MockPlatform>,
    comm: Option<MockComm>,
}

impl Ranks for UdpRank {
    fn run<R: Send>(&mut self, f: impl Fn(&mut MockComm) -> R + Sync) -> Vec<R> {
        vec![f(self.comm.as_mut().expect("connected"))]
    }
}

impl UdpRank {
    fn close(mut self) -> Res<()> {
        if let Some(comm) = self.comm.take() {
            comm.destroy(&mut self.hca)?;
        }
        if let Some(p) = self.pump.take() {
            p.stop();
        }
        Ok(())
    }
}

/// The longest line of the exchange of endpoints (one is about 120 bytes).
const MAX_LINE: u64 = 1024;

/// How long the exchange of endpoints may take.
const OOB_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Brings this process's rank up on a UDP port and connects it to the others: every rank
/// sends its endpoints (one per peer) to rank 0 over TCP, rank 0 sends the whole table
/// back, each rank connects its QPs and says `ready`, and rank 0 answers `go` once all
/// are.
fn udp_rank(a: &Args, ip: Ipv4Addr) -> Res<UdpRank> {
    let n = a.ranks;
    let fabric = Fabric::ethernet();
    let mac = Mac([0x02, 0xc0, 0x11, 0xec, 0x01, a.rank as u8]);
    let dev = MockHca::new(MockConfig {
        clock: ClockMode::Virtual,
        mac: mac.0,
        ..MockConfig::ethernet()
    });
    let hcfg = HcaConfig {
        fw_pre_init_timeout_ns: 5_000_000_000,
        cmd_timeout_ns: 5_000_000_000,
        ..HcaConfig::default()
    };
    let mut hca = Hca::open_with(dev.platform(), hcfg)?;
    fabric.attach(&dev);
    let gid = hca.add_roce_gid(1, 0, IpAddr::V4(ip), mac, None)?;
    fabric.attach_udp(&dev, ip)?;
    let pump = fabric.start_pump(20);
    let mut cfg = a.cfg;
    cfg.idle = Some(share_cpu);
    let pending = uhca_collective::Communicator::create(
        &mut hca,
        a.rank,
        n,
        PortAddr { gid, mac, lid: 0 },
        cfg,
    )?;
    let mine: String = (0..n)
        .filter(|&p| p != a.rank)
        .map(|p| endpoint_line(a.rank, p, &pending.endpoint(p)))
        .collect();
    let dummy = pending.endpoint((a.rank + 1) % n);
    let mut table = vec![vec![dummy; n]; n];
    let mut put = |line: &str| -> Res<()> {
        let (from, to, e) = parse_endpoint_line(line)?;
        if from >= n || to >= n {
            return Err(format!("endpoint for rank {from} -> {to} outside 0..{n}").into());
        }
        table[from][to] = e;
        Ok(())
    };
    let read_lines = |r: &mut BufReader<TcpStream>, k: usize| -> Res<Vec<String>> {
        let mut v = Vec::with_capacity(k);
        for _ in 0..k {
            let mut l = String::new();
            // At most MAX_LINE bytes: a peer that never sends a newline gets an error, not
            // all of this process's memory.
            if r.by_ref().take(MAX_LINE).read_line(&mut l)? == 0 {
                return Err("the exchange connection closed early".into());
            }
            if !l.ends_with('\n') {
                return Err(format!("a line longer than {MAX_LINE} bytes, or cut short").into());
            }
            v.push(l);
        }
        Ok(v)
    };
    let comm;
    if a.rank == 0 {
        let listener = TcpListener::bind(&a.coord)?;
        let mut peers = Vec::new();
        for l in mine.lines() {
            put(l)?;
        }
        listener.set_nonblocking(true)?;
        let start = Instant::now();
        for _ in 1..n {
            let s = loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if start.elapsed() > OOB_TIMEOUT {
                            return Err(format!(
                                "only {} of {} ranks joined within {OOB_TIMEOUT:?}",
                                peers.len() + 1,
                                n
                            )
                            .into());
                        }
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            s.set_nonblocking(false)?;
            s.set_read_timeout(Some(OOB_TIMEOUT))?;
            let mut r = BufReader::new(s);
            for l in read_lines(&mut r, n - 1)? {
                put(&l)?;
            }
            peers.push(r);
        }
        let all: String = (0..n)
            .flat_map(|f| (0..n).filter(move |&t| t != f).map(move |t| (f, t)))
            .map(|(f, t)| endpoint_line(f, t, &table[f][t]))
            .collect();
        for r in &mut peers {
            r.get_mut().write_all(all.as_bytes())?;
        }
        let remote: Vec<Endpoint> = (0..n).map(|p| table[p][0]).collect();
        comm = pending.connect(&mut hca, &remote)?;
        for r in &mut peers {
            let l = read_lines(r, 1)?;
            if l[0].trim() != "ready" {
                return Err(format!("a rank said {:?}", l[0]).into());
            }
        }
        for r in &mut peers {
            r.get_mut().write_all(b"go\n")?;
        }
    } else {
        let start = Instant::now();
        let s = loop {
            match TcpStream::connect(&a.coord) {
                Ok(s) => break s,
                Err(_) if start.elapsed() < OOB_TIMEOUT => {
                    std::thread::sleep(std::time::Duration::from_millis(50))
                }
                Err(e) => return Err(format!("rank 0 at {}: {e}", a.coord).into()),
            }
        };
        s.set_read_timeout(Some(OOB_TIMEOUT))?;
        let mut r = BufReader::new(s);
        r.get_mut().write_all(mine.as_bytes())?;
        for l in read_lines(&mut r, n * (n - 1))? {
            put(&l)?;
        }
        let remote: Vec<Endpoint> = (0..n).map(|p| table[p][a.rank]).collect();
        comm = pending.connect(&mut hca, &remote)?;
        r.get_mut().write_all(b"ready\n")?;
        let l = read_lines(&mut r, 1)?;
        if l[0].trim() != "go" {
            return Err(format!("rank 0 said {:?}", l[0]).into());
        }
    }
    Ok(UdpRank {
        _fabric: fabric,
        pump: Some(pump),
        _dev: dev,
        hca,
        comm: Some(comm),
    })
}

fn sweep_type(c: &mut impl Ranks, a: &Args) -> Res<(usize, f64)> {
    match a.dtype {
        DataType::Float => sweep::<f32>(c, a),
        DataType::Half => sweep::<F16>(c, a),
        DataType::Bfloat16 => sweep::<Bf16>(c, a),
        DataType::Int32 => sweep::<i32>(c, a),
        DataType::Uint8 => sweep::<u8>(c, a),
    }
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
    QUIET.store(a.udp.is_some() && a.rank != 0, Ordering::Relaxed);
    out!(
        "# {}_perf on uhca-collective: {} ranks, {}, minBytes {} \
         maxBytes {} step: {}(factor) warmup iters: {} iters: {} validation: {}",
        a.op.name(),
        a.ranks,
        match (a.udp, a.link) {
            (Some(_), _) => "a process each, mock HCAs with RoCEv2 over real UDP",
            (None, LinkLayer::Ethernet) => "mock HCAs on one RoCEv2 fabric",
            (None, LinkLayer::InfiniBand) => "mock HCAs on one InfiniBand fabric",
        },
        a.min_bytes,
        a.max_bytes,
        a.factor,
        a.warmup,
        a.iters,
        a.check as u8
    );
    out!(
        "# chunk {} B, window {} chunks per peer, recursive doubling up to {} B; faults {}‰",
        a.cfg.chunk_bytes,
        a.cfg.window,
        a.cfg.small_bytes,
        a.faults
    );
    let (wrong, avg) = if let Some(ip) = a.udp {
        let mut r = udp_rank(&a, ip)?;
        let res = sweep_type(&mut r, &a)?;
        r.close()?;
        res
    } else {
        let mut c = MockCluster::new(a.ranks, a.link, a.cfg)?;
        if a.faults > 0 {
            c.set_faults(FaultConfig::lossy(a.seed, a.faults));
        }
        let res = sweep_type(&mut c, &a)?;
        if a.faults > 0 {
            let k = c.fabric.counters();
            out!(
                "# fabric: {} frames sent, {} dropped, {} duplicated, {} held back",
                k.sent,
                k.dropped,
                k.duplicated,
                k.delayed
            );
            c.set_faults(FaultConfig::default());
        }
        c.close()?;
        res
    };
    out!(
        "# {:<20} : {} {}",
        "Out of bounds values",
        wrong,
        if wrong == 0 { "OK" } else { "FAILED" }
    );
    out!("# {:<20} : {:.4}", "Avg bus bandwidth", avg);
    out!("#");
    Ok(wrong == 0)
}
