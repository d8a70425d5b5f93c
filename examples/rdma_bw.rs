//! `rdma_bw`: RDMA bandwidth, like perftest's `ib_write_bw`, `ib_read_bw` and `ib_send_bw`,
//! on uhca. The client streams `-n` messages of `-s` bytes on one RC QP, keeping up to
//! `--tx-depth` of them outstanding, posting as many as there is room for with one
//! doorbell and asking for a completion every `--cq-mod`-th; it prints perftest's table.
//!
//! ```sh
//! cargo run --example rdma_bw -- --mock                          # WRITE, both sides here
//! cargo run --example rdma_bw -- --mock -t read -s 4096 -n 1000
//! cargo run --example rdma_bw -- --udp 10.0.0.1 -t send          # server, RoCEv2 over UDP
//! cargo run --example rdma_bw -- --udp 10.0.0.2 -t send 10.0.0.1 # client
//! cargo run --features vfio --example rdma_bw -- --device 0000:3b:00.0 -g 3 [SERVER]
//! ```
//!
//! Flags: `-t write|read|send` (default write), `-s` size (65536), `-n` iterations (5000),
//! `--tx-depth` outstanding requests (128), `--cq-mod` requests per completion (100),
//! `-r` receives the SEND server keeps posted (500), `-p` TCP port (18515), `-g` GID
//! index, `-m` path MTU, `-i` port, `-l` SL, `--dmac` the peer's MAC on real RoCE. Both
//! sides must be given the same `-t`, `-s` and `-n` (they check).
//!
//! Roles as in perftest: with WRITE and READ the server is passive (its CPU does nothing
//! until the client is done); with SEND the server posts receives and, when it runs in a
//! process of its own, prints the table of what it received. Each side registers
//! up to 16 buffers of `-s` bytes; message `i` uses buffer `i % buffers` on both sides.
//! The data is checked: the sender's buffers hold a known pattern, and after the run the
//! target of the data (the server for WRITE and SEND, the client for READ) compares every
//! buffer with it; the server reports its verdict to the client, and a mismatch fails
//! both.
//!
//! BW average is the bytes moved over the time from the first post to the last
//! completion; BW peak is the best rate over any stretch of `--tx-depth` messages (from
//! one completion to a later one); MB is 2^20 bytes, as in perftest; MsgRate is messages
//! per second in millions.
//!
//! The out-of-band exchange is uhca's own ([`uhca::oob::RdmaDest`]): over TCP, each side
//! sends `LID:QPN:PSN:GID:RKEY:VADDR:LEN` in 87 bytes, then the two sides exchange lines
//! on the same connection: the test each runs (`rdma_bw write 65536 5000 16`), `start`
//! once both QPs are ready, `end` when the client is done, and the server's data verdict
//! (`ok: ...` or `corrupt: ...`).

#[path = "common/mod.rs"]
#[macro_use] // println!/eprintln! that stay quiet on a closed pipe (common/print.rs)
mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{Args, Mode, Op, Res, Side};
use uhca::driver::Hca;
use uhca::driver::verbs::{
    Qp, Rc, RecvWr, SendFlags, SendOp, SendWr, Sge, WcStatus, WorkCompletion,
};
use uhca::fwif::consts::AccessFlags;
use uhca::hal::{DmaMem, Platform};
use uhca::oob::RdmaDest;

/// Most buffers a side registers (each `-s` bytes).
const MAX_BUFFERS: u64 = 16;
/// How long the passive server waits for the client to finish.
const RUN_TIMEOUT: Duration = Duration::from_secs(3600);

/// The flags `common::Args` does not have.
#[derive(Clone, Copy, Debug)]
struct Opts {
    op: Op,
    tx_depth: u32,
    cq_mod: u32,
}

static OPTS: OnceLock<Opts> = OnceLock::new();

fn opts() -> Opts {
    *OPTS.get().expect("options parsed in main")
}

fn main() {
    let (args, extra) = common::parse_args_with(
        "rdma_bw",
        65536,
        5000,
        &[("--tx-depth", "N"), ("--cq-mod", "N")],
    );
    let bad = |msg: String| -> ! {
        eprintln!("rdma_bw: {msg}");
        std::process::exit(2);
    };
    let op = Op::parse(&args, Op::Write).unwrap_or_else(|e| bad(e));
    let num = |v: &Option<String>, flag: &str, default: u32| -> u32 {
        match v {
            None => default,
            Some(s) => match s.parse::<u32>() {
                Ok(n) if n > 0 => n,
                _ => bad(format!("{flag} {s}: a positive number")),
            },
        }
    };
    let tx_depth = num(&extra[0], "--tx-depth", 128);
    let cq_mod = num(&extra[1], "--cq-mod", 100).min(tx_depth);
    if args.size > u32::MAX as usize / MAX_BUFFERS as usize {
        bad(format!("-s {}: too large", args.size));
    }
    let _ = OPTS.set(Opts {
        op,
        tx_depth,
        cq_mod,
    });
    common::run_modes!("rdma_bw", args, side);
}

/// One side of the test on an HCA that is up (`side`: client or server).
fn side<P: Platform>(hca: &mut Hca<P>, mut side: Side<'_>) -> Res<()> {
    let args = side.args;
    let o = opts();
    let client = side.is_client();
    // With both sides in one process only the client prints; the server's verdict on
    // the data reaches it over the exchange.
    let quiet = !client && args.mode == Mode::Mock;
    let spin = matches!(args.mode, Mode::Device(_));
    let size = args.size;
    let buffers = args.iters.min(MAX_BUFFERS) as usize;
    let len = buffers * size;
    let receiver = !client && o.op == Op::Send;

    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let spec = common::Spec {
        cq_depth: o.tx_depth + args.rx_depth + 1,
        mr_len: len,
        access,
        send_wr: if client { o.tx_depth } else { 1 },
        recv_wr: if receiver { args.rx_depth } else { 1 },
        qkey: 0,
    };
    let (pd, mut cq, mut mr, mut qp) = common::open_objects::<_, Rc>(hca, args, &spec)?;
    // The source of the data holds the pattern; the target starts zeroed.
    let source = (o.op == Op::Read) != client;
    if source {
        for b in 0..buffers {
            mr.mem_mut()
                .write_bytes(b * size, &common::pattern_buf(b, size));
        }
    }
    let sges = (0..buffers)
        .map(|b| Ok([mr.sge(b * size, size)?]))
        .collect::<Res<Vec<[Sge; 1]>>>()?;

    // The SEND server's receives go in before the client can send.
    let mut recv_posted = 0u64;
    if receiver {
        post_recvs(&mut qp, &sges, 0, args.rx_depth as u64)?;
        recv_posted = args.rx_depth as u64;
    }

    let rd_atomic = common::rd_atomic_depth(hca);
    let me = common::my_rdma_dest(hca, args, qp.qpn(), common::random_psn(), &mr, len)?;
    let (peer, mut session, mut qp) = common::exchange_rc(hca, &mut side, &me, qp, rd_atomic)?;
    common::agree(
        &mut session,
        &format!("rdma_bw {} {size} {} {buffers}", o.op.name(), args.iters),
    )?;
    if client && o.op != Op::Send && (peer.len as usize) < len {
        return Err(format!("the server's buffer is {} bytes, {len} needed", peer.len).into());
    }
    if !quiet {
        let settings = [
            ("TX depth", o.tx_depth.to_string()),
            ("CQ Moderation", o.cq_mod.to_string()),
        ];
        common::perftest_header(hca, args, &o.op.title("BW"), &settings, &me, &peer);
    }
    common::agree(&mut session, "start")?;

    let mut wc = [WorkCompletion::default(); 32];
    if client {
        let (secs, peak) = stream(&mut qp, &mut cq, args, &o, &sges, &peer, spin)?;
        report(size, args.iters, secs, peak);
        if args.mode == Mode::Mock {
            // The model moves bytes in memory: the same bytes copied plainly are its ceiling.
            let avg = (size as u64 * args.iters) as f64 / secs;
            let copy = plain_copy_bytes_per_sec(size, args.iters);
            println!(
                " plain copy of the same bytes in this process: {:.2} MB/sec; the mock moved them at {:.3}x that",
                copy / (1 << 20) as f64,
                avg / copy
            );
        }
        common::agree(&mut session, "end")?;
        // The target of the data checks it: the client itself for READ, else the server.
        let verdict = if o.op == Op::Read {
            verify(&mr, buffers, size)
        } else {
            session.recv_line()?
        };
        match verdict.strip_prefix("ok: ") {
            Some(what) => println!(" data checked at the target: {what}"),
            None => return Err(format!("data check at the target: {verdict}").into()),
        }
    } else {
        if receiver {
            // Count the client's messages, keeping up to `rx_depth` receives posted.
            let start = Instant::now();
            let mut got = 0u64;
            let mut stamps = vec![(0u64, 0.0f64)];
            while got < args.iters {
                let n = common::poll_some(&mut cq, &mut wc, spin)?;
                for c in &wc[..n] {
                    if c.status != WcStatus::Success {
                        return Err(format!("receive {} failed: {:?}", c.wr_id, c.status).into());
                    }
                    if c.byte_len as usize != size {
                        return Err(format!(
                            "receive {} got {} bytes, {size} expected",
                            c.wr_id, c.byte_len
                        )
                        .into());
                    }
                    got += 1;
                }
                stamps.push((got, start.elapsed().as_secs_f64()));
                // Refill as soon as a batch of receives (a poll's worth, at most half the
                // queue) has completed, so that the queue stays nearly full: a sender
                // that finds it empty waits out an RNR NAK's timer.
                let outstanding = recv_posted - got;
                let batch = (wc.len() as u64).min(args.rx_depth as u64 / 2).max(1);
                if args.rx_depth as u64 - outstanding >= batch && recv_posted < args.iters {
                    let n = args.rx_depth as u64 - outstanding;
                    post_recvs(&mut qp, &sges, recv_posted, n)?;
                    recv_posted += n;
                }
            }
            if !quiet {
                let secs = start.elapsed().as_secs_f64();
                let peak = peak_rate(&stamps, o.tx_depth as u64, size as u64);
                report(size, args.iters, secs, peak);
            }
        }
        session.set_timeout(RUN_TIMEOUT)?;
        common::agree(&mut session, "end")?;
        if o.op != Op::Read {
            let verdict = verify(&mr, buffers, size);
            session.send_line(&verdict)?;
            if !quiet {
                println!(" data check: {verdict}");
            }
            if !verdict.starts_with("ok: ") {
                return Err(format!("data check: {verdict}").into());
            }
        }
    }

    // Take the QP down in order; the SEND server's spare receives are flushed.
    common::take_down(hca, qp, cq, mr, pd)
}

/// Posts receives `from..from + n`, receive `j` into buffer `j % buffers`, with one
/// doorbell-record update.
fn post_recvs<P: Platform>(qp: &mut Qp<P, Rc>, sges: &[[Sge; 1]], from: u64, n: u64) -> Res<()> {
    let wrs: Vec<RecvWr<'_>> = (from..from + n)
        .map(|j| RecvWr {
            wr_id: j,
            sg_list: &sges[(j % sges.len() as u64) as usize],
        })
        .collect();
    qp.post_recv(&wrs)
        .map_err(|e| format!("couldn't post receives: {e}"))?;
    Ok(())
}

/// The client's run: posts `iters` requests keeping up to `tx_depth` outstanding, one
/// doorbell per batch, a completion every `cq_mod`-th. Returns the seconds from the first
/// post to the last completion and the peak rate in bytes per second.
#[allow(clippy::too_many_arguments)]
fn stream<P: Platform>(
    qp: &mut Qp<P, Rc>,
    cq: &mut uhca::driver::verbs::Cq<P>,
    args: &Args,
    o: &Opts,
    sges: &[[Sge; 1]],
    peer: &RdmaDest,
    spin: bool,
) -> Res<(f64, f64)> {
    let iters = args.iters;
    let size = args.size as u64;
    let buffers = sges.len() as u64;
    let (depth, cq_mod) = (o.tx_depth as u64, o.cq_mod as u64);
    let mut wrs: Vec<SendWr<'_>> = Vec::with_capacity(depth as usize);
    let mut wc = [WorkCompletion::default(); 32];
    // (messages completed, seconds) at each completion, for the peak.
    let mut stamps: Vec<(u64, f64)> = Vec::with_capacity((iters / cq_mod + 2) as usize);
    stamps.push((0, 0.0));
    let (mut posted, mut done) = (0u64, 0u64);
    let start = Instant::now();
    while done < iters {
        let n = (depth - (posted - done)).min(iters - posted);
        if n > 0 {
            wrs.clear();
            for i in posted..posted + n {
                let b = i % buffers;
                let remote_addr = peer.addr + b * size;
                let op = match o.op {
                    Op::Write => SendOp::RdmaWrite {
                        remote_addr,
                        rkey: peer.rkey,
                    },
                    Op::Read => SendOp::RdmaRead {
                        remote_addr,
                        rkey: peer.rkey,
                    },
                    Op::Send => SendOp::Send,
                };
                let flags = if (i + 1) % cq_mod == 0 || i + 1 == iters {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::empty()
                };
                wrs.push(SendWr::new(i, op, &sges[b as usize]).with_flags(flags));
            }
            qp.post_send(&wrs)
                .map_err(|e| format!("couldn't post send: {e}"))?;
            posted += n;
        }
        let got = common::poll_some(cq, &mut wc, spin)?;
        for c in &wc[..got] {
            if c.status != WcStatus::Success {
                return Err(format!(
                    "request {} failed: {:?} (vendor syndrome {:#x})",
                    c.wr_id, c.status, c.vendor_err
                )
                .into());
            }
            // A completion retires its request and the unsignalled ones before it.
            done = c.wr_id + 1;
            stamps.push((done, start.elapsed().as_secs_f64()));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let peak = peak_rate(&stamps, depth, size);
    Ok((secs, peak))
}

/// The best rate, in bytes per second, between two of the `(messages done, seconds)`
/// stamps at least `window` messages apart (the shortest such stretch ending at each
/// stamp); 0 if the run is shorter than `window`.
fn peak_rate(stamps: &[(u64, f64)], window: u64, size: u64) -> f64 {
    let mut peak = 0.0f64;
    let mut j = 0;
    for k in 1..stamps.len() {
        while j + 1 < k && stamps[k].0 - stamps[j + 1].0 >= window {
            j += 1;
        }
        let (msgs, dt) = (stamps[k].0 - stamps[j].0, stamps[k].1 - stamps[j].1);
        if msgs >= window && dt > 0.0 {
            peak = peak.max((msgs * size) as f64 / dt);
        }
    }
    peak
}

/// Compares each buffer with the pattern it was sent with: `ok: ...` or `corrupt: ...`.
fn verify<P: Platform>(mr: &uhca::driver::verbs::Mr<P>, buffers: usize, size: usize) -> String {
    let mut got = vec![0u8; size];
    for b in 0..buffers {
        mr.mem().read_bytes(b * size, &mut got);
        if let Err(e) = common::check_pattern(b, &got) {
            return format!("corrupt: {e}");
        }
    }
    format!("ok: the last {buffers} buffer(s) of {size} bytes arrived intact")
}

/// How fast this process copies `iters` messages of `size` bytes from one buffer to
/// another (the reference printed beside the mock's bandwidth).
fn plain_copy_bytes_per_sec(size: usize, iters: u64) -> f64 {
    let src = vec![0x5au8; size.max(1)];
    let mut dst = vec![0u8; size.max(1)];
    let start = Instant::now();
    for i in 0..iters {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst)[0] = i as u8;
    }
    (size as u64 * iters) as f64 / start.elapsed().as_secs_f64().max(1e-9)
}

/// perftest's result table.
fn report(size: usize, iters: u64, secs: f64, peak: f64) {
    const MB: f64 = (1 << 20) as f64;
    let avg = (size as u64 * iters) as f64 / secs;
    let peak = peak.max(avg);
    println!(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]");
    println!(
        " {:<11}{:<15}{:<19.2}{:<21.2}{:.6}",
        size,
        iters,
        peak / MB,
        avg / MB,
        iters as f64 / secs / 1e6
    );
    println!("{}", "-".repeat(87));
}
