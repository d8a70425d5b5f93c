//! `rdma_lat`: RDMA latency, like perftest's `ib_send_lat`, `ib_write_lat` and
//! `ib_read_lat`, on uhca: `-n` round trips of `-s` bytes on one RC QP, one at a time, and
//! perftest's table of the times.
//!
//! ```sh
//! cargo run --example rdma_lat -- --mock                           # SEND, both sides here
//! cargo run --example rdma_lat -- --mock -t write -s 64 -n 500
//! cargo run --example rdma_lat -- --udp 10.0.0.1 -t read           # server, RoCEv2 over UDP
//! cargo run --example rdma_lat -- --udp 10.0.0.2 -t read 10.0.0.1  # client
//! cargo run --features vfio --example rdma_lat -- --device 0000:3b:00.0 -g 3 [SERVER]
//! ```
//!
//! Flags: `-t send|write|read` (default send), `-s` size (2), `-n` iterations (1000), `-p`
//! TCP port (18515), `-g` GID index, `-m` path MTU, `-i` port, `-l` SL, `--dmac` the peer's
//! MAC on real RoCE. Both sides must be given the same `-t`, `-s` and `-n` (they check).
//!
//! What is timed, as in perftest:
//! * `send`: the client SENDs, the server answers each message with a SEND of its own;
//!   a sample is half the round trip, from the post to the receive completion of the
//!   answer.
//! * `write`: the client RDMA WRITEs into the server's buffer, the server watches the
//!   buffer's last byte (a marker that changes every iteration) and WRITEs back the same
//!   way; a sample is half the round trip.
//! * `read`: the client RDMA READs the server's buffer (the server is passive); a sample
//!   is the whole READ, from the post to its completion.
//!
//! The data is checked after the run: every side that received data compares its
//! buffer with the pattern the peer sent; the server reports its verdict to the client.
//!
//! The out-of-band exchange is the one of `rdma_bw` ([`uhca::oob::RdmaDest`] over TCP,
//! then lines of text: the test, `start`, `end`, the server's verdict).

#[path = "common/mod.rs"]
#[macro_use] // println!/eprintln! that stay quiet on a closed pipe (common/print.rs)
mod common;

use std::time::{Duration, Instant};

use common::{Mode, Op, Res, Side};
use uhca::driver::Hca;
use uhca::driver::verbs::{
    Cq, Mr, Qp, Rc, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
use uhca::fwif::consts::AccessFlags;
use uhca::hal::{DmaMem, Platform};

/// Send queue depth (requests are signalled and polled as they complete).
const SQ_DEPTH: u32 = 16;
/// Receives kept posted (SEND test).
const RX_DEPTH: u32 = 16;
/// How long the passive server waits for the client to finish.
const RUN_TIMEOUT: Duration = Duration::from_secs(3600);

fn main() {
    let args = common::parse_args("rdma_lat", 2, 1000);
    if let Err(e) = Op::parse(&args, Op::Send) {
        eprintln!("rdma_lat: {e}");
        std::process::exit(2);
    }
    if args.size > u32::MAX as usize / 2 {
        eprintln!("rdma_lat: -s {}: too large", args.size);
        std::process::exit(2);
    }
    common::run_modes!("rdma_lat", args, side);
}

/// The marker in the last byte of iteration `i`'s WRITE: never 0 (the buffer's initial
/// value), never the previous iteration's.
fn marker(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// A side's QP, CQ and buffer: `[receive region | send region]`, `size` bytes each.
struct Ends<P: Platform> {
    qp: Qp<P, Rc>,
    cq: Cq<P>,
    mr: Mr<P>,
    size: usize,
    spin: bool,
    /// Signalled sends not yet completed.
    sends: u32,
    /// Receive completions not yet consumed by the loop.
    recvs: u64,
    wc: [WorkCompletion; 16],
}

impl<P: Platform> Ends<P> {
    fn recv_sge(&self) -> [Sge; 1] {
        [Sge {
            addr: self.mr.iova(),
            len: self.size as u32,
            lkey: self.mr.lkey(),
        }]
    }

    fn send_sge(&self) -> [Sge; 1] {
        [Sge {
            addr: self.mr.iova() + self.size as u64,
            len: self.size as u32,
            lkey: self.mr.lkey(),
        }]
    }

    /// Polls once (or until something completes, with `block`); counts completions and
    /// reposts receives.
    fn poll(&mut self, block: bool) -> Res<()> {
        let n = if block {
            common::poll_some(&mut self.cq, &mut self.wc, self.spin)?
        } else {
            self.cq.poll(&mut self.wc)?
        };
        let sge = self.recv_sge();
        for c in &self.wc[..n] {
            if c.status != WcStatus::Success {
                return Err(format!("{:?} {} failed: {:?}", c.opcode, c.wr_id, c.status).into());
            }
            if c.opcode == WcOpcode::Recv {
                if c.byte_len as usize != self.size {
                    return Err(
                        format!("received {} bytes, {} expected", c.byte_len, self.size).into(),
                    );
                }
                self.recvs += 1;
                let recv = RecvWr {
                    wr_id: 0,
                    sg_list: &sge,
                };
                self.qp
                    .post_recv(&[recv])
                    .map_err(|e| format!("couldn't post receive: {e}"))?;
            } else {
                self.sends -= 1;
            }
        }
        Ok(())
    }

    /// Posts one signalled request after making room: from the send region, or for a
    /// READ into the receive region.
    fn post(&mut self, op: SendOp) -> Res<()> {
        while self.sends + 1 >= SQ_DEPTH {
            self.poll(true)?;
        }
        let sge = match op {
            SendOp::RdmaRead { .. } => self.recv_sge(),
            _ => self.send_sge(),
        };
        self.qp
            .post_send(&[SendWr::new(0, op, &sge)])
            .map_err(|e| format!("couldn't post send: {e}"))?;
        self.sends += 1;
        Ok(())
    }

    /// Waits for the next receive completion.
    fn wait_recv(&mut self) -> Res<()> {
        while self.recvs == 0 {
            self.poll(true)?;
        }
        self.recvs -= 1;
        Ok(())
    }

    /// Waits until the receive region's last byte is `m`, completing sends meanwhile.
    fn wait_marker(&mut self, m: u8) -> Res<()> {
        let start = Instant::now();
        let mut turns = 0u32;
        while self.mr.mem().read_u8(self.size - 1) != m {
            turns = turns.wrapping_add(1);
            if turns.is_multiple_of(64) {
                self.poll(false)?;
                if start.elapsed() > common::OOB_TIMEOUT {
                    return Err(format!(
                        "the peer's WRITE did not arrive in {:?}",
                        common::OOB_TIMEOUT
                    )
                    .into());
                }
            }
            common::relax(self.spin);
        }
        Ok(())
    }

    /// Compares the receive region with what the peer sent last: `ok: ...` or
    /// `corrupt: ...`.
    fn verify(&self, last_marker: Option<u8>) -> String {
        let mut got = vec![0u8; self.size];
        self.mr.mem().read_bytes(0, &mut got);
        let mut expected = common::pattern_buf(0, self.size);
        if let (Some(m), Some(last)) = (last_marker, expected.last_mut()) {
            *last = m;
        }
        match got.iter().zip(&expected).position(|(g, e)| g != e) {
            None => format!("ok: the last buffer of {} bytes arrived intact", self.size),
            Some(off) => format!(
                "corrupt: byte {off}: expected {:#04x}, found {:#04x}",
                expected[off], got[off]
            ),
        }
    }
}

/// One side of the test on an HCA that is up (`side`: client or server).
fn side<P: Platform>(hca: &mut Hca<P>, mut side: Side<'_>) -> Res<()> {
    let args = side.args;
    let op = Op::parse(args, Op::Send)?;
    let client = side.is_client();
    let quiet = !client && args.mode == Mode::Mock;
    let spin = matches!(args.mode, Mode::Device(_));
    let size = args.size;

    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let spec = common::Spec {
        cq_depth: SQ_DEPTH + RX_DEPTH + 1,
        mr_len: 2 * size,
        access,
        send_wr: SQ_DEPTH,
        recv_wr: RX_DEPTH,
        qkey: 0,
    };
    let (pd, cq, mut mr, mut qp) = common::open_objects::<_, Rc>(hca, args, &spec)?;
    mr.mem_mut()
        .write_bytes(size, &common::pattern_buf(0, size));
    if op == Op::Send {
        let sge = [mr.sge(0, size)?];
        let recv = RecvWr {
            wr_id: 0,
            sg_list: &sge,
        };
        qp.post_recv(std::iter::repeat_n(&recv, RX_DEPTH as usize))
            .map_err(|e| format!("couldn't post receives: {e}"))?;
    }

    let rd_atomic = common::rd_atomic_depth(hca);
    let me = common::my_rdma_dest(hca, args, qp.qpn(), common::random_psn(), &mr, 2 * size)?;
    let (peer, mut session, qp) = common::exchange_rc(hca, &mut side, &me, qp, rd_atomic)?;
    common::agree(
        &mut session,
        &format!("rdma_lat {} {size} {}", op.name(), args.iters),
    )?;
    if (peer.len as usize) < 2 * size {
        return Err(format!(
            "the peer's buffer is {} bytes, {} needed",
            peer.len,
            2 * size
        )
        .into());
    }
    if !quiet {
        let settings = [("TX depth", "1".to_string())];
        common::perftest_header(hca, args, &op.title("Latency"), &settings, &me, &peer);
    }
    let mut e = Ends {
        qp,
        cq,
        mr,
        size,
        spin,
        sends: 0,
        recvs: 0,
        wc: [WorkCompletion::default(); 16],
    };
    common::agree(&mut session, "start")?;

    // Where the peer's receive region is (WRITE), or its send region (READ).
    let write_to = SendOp::RdmaWrite {
        remote_addr: peer.addr,
        rkey: peer.rkey,
    };
    let read_from = SendOp::RdmaRead {
        remote_addr: peer.addr + size as u64,
        rkey: peer.rkey,
    };
    let mut samples = Vec::with_capacity(args.iters as usize);
    let last = marker(args.iters - 1);
    match (op, client) {
        (Op::Send, true) => {
            for _ in 0..args.iters {
                let t = Instant::now();
                e.post(SendOp::Send)?;
                e.wait_recv()?;
                samples.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        (Op::Send, false) => {
            for _ in 0..args.iters {
                e.wait_recv()?;
                e.post(SendOp::Send)?;
            }
        }
        (Op::Write, true) => {
            for i in 0..args.iters {
                let t = Instant::now();
                e.mr.mem_mut().write_u8(2 * size - 1, marker(i));
                e.post(write_to)?;
                e.wait_marker(marker(i))?;
                samples.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        (Op::Write, false) => {
            for i in 0..args.iters {
                e.wait_marker(marker(i))?;
                e.mr.mem_mut().write_u8(2 * size - 1, marker(i));
                e.post(write_to)?;
            }
        }
        (Op::Read, true) => {
            for _ in 0..args.iters {
                let t = Instant::now();
                e.post(read_from)?;
                while e.sends > 0 {
                    e.poll(true)?;
                }
                samples.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        (Op::Read, false) => {}
    }
    // Let the last sends complete before the QP goes down.
    while e.sends > 0 {
        e.poll(true)?;
    }
    if client {
        report(size, args.iters, &mut samples);
    }
    if !client {
        session.set_timeout(RUN_TIMEOUT)?;
    }
    common::agree(&mut session, "end")?;

    // Check what arrived: both sides for SEND and WRITE, the client for READ.
    let mine = match op {
        Op::Send => Some(e.verify(None)),
        Op::Write => Some(e.verify(Some(last))),
        Op::Read => client.then(|| e.verify(None)),
    };
    if client {
        let theirs = match op {
            Op::Read => None,
            _ => Some(session.recv_line()?),
        };
        for (who, v) in [("client", mine), ("server", theirs)] {
            match v.as_deref().map(|v| (v, v.strip_prefix("ok: "))) {
                None => {}
                Some((_, Some(what))) => println!(" data checked at the {who}: {what}"),
                Some((v, None)) => return Err(format!("data check at the {who}: {v}").into()),
            }
        }
    } else if let Some(v) = mine {
        session.send_line(&v)?;
        if !quiet {
            println!(" data check: {v}");
        }
        if !v.starts_with("ok: ") {
            return Err(format!("data check: {v}").into());
        }
    }

    let Ends { qp, cq, mr, .. } = e;
    common::take_down(hca, qp, cq, mr, pd)
}

/// perftest's latency table, from samples in microseconds.
fn report(size: usize, iters: u64, samples: &mut [f64]) {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let pct = |p: f64| samples[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
    let avg = samples.iter().sum::<f64>() / n as f64;
    let var = samples.iter().map(|s| (s - avg) * (s - avg)).sum::<f64>() / n as f64;
    println!(
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    \
         t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
    );
    println!(
        " {:<7}{:<15}{:<15.2}{:<13.2}{:<19.2}{:<15.2}{:<16.2}{:<23.2}{:.2}",
        size,
        iters,
        samples[0],
        samples[n - 1],
        samples[n / 2],
        avg,
        var.sqrt(),
        pct(0.99),
        pct(0.999)
    );
    println!("{}", "-".repeat(87));
}
