//! The mock's hot path (issue 14): what one message costs the model from the send doorbell
//! to the receiver's CQE (and the sender's, after the ACK), in nanoseconds and in
//! instructions, beside a plain copy of the same bytes measured in the same run.
//!
//! Run: `cargo bench -p uhca-mock --bench fabric` (a few seconds once built, valgrind
//! included). `UHCA_BENCH_RUNS` sets the timed runs (default 5, the median is printed),
//! `UHCA_BENCH_CALLGRIND=0` skips the instruction counts. Without `--bench`
//! (`cargo test --benches`) a quick pass runs: one short run, no callgrind.
//!
//! Two mock HCAs on one fabric (RoCEv2; native InfiniBand for the last case; virtual
//! clock, no faults), one RC QP each, driven with raw PRM bytes by the mock's own test
//! driver (`tests/common`), never the HAL or the driver. Outside the clock: receive WQEs posted, send WQEs written with their doorbell
//! record, CQEs polled afterwards. Timed: one send doorbell for a batch of WQEs and
//! `Fabric::run_until_idle`, during which the sender builds the packets (headers, payload
//! read through the IOMMU, ICRC), the fabric routes them, the receiver parses and checks
//! them (ICRC included), places the data, writes its CQEs and ACKs, and the sender
//! completes its WQEs. Instructions are counted by callgrind inside that region only
//! (`--toggle-collect` on [`timed_region`]), so they do not depend on the machine's load.

#[path = "../tests/common/mod.rs"]
mod common;

use common::verbs::{Conn, Pair, wr};
use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};
use uhca_fwif::consts::{CqeOpcode, IbMtu, QpServiceType, WqeOpcode};
use uhca_mock::LinkLayer;

/// Names the case a re-executed benchmark runs under callgrind.
const CASE_ENV: &str = "UHCA_MOCK_BENCH_CALLGRIND_CASE";

/// One case: messages of `size` bytes, `batch` per doorbell.
struct Case {
    name: &'static str,
    what: &'static str,
    op: WqeOpcode,
    size: u32,
    /// The path MTU.
    mtu: IbMtu,
    /// The fabric: RoCEv2 (Ethernet) or native InfiniBand.
    link: LinkLayer,
    batch: usize,
    /// Messages per timed run.
    messages: usize,
    /// Messages counted under callgrind (after a warm-up batch, which is not).
    callgrind_messages: usize,
}

const CASES: &[Case] = &[
    Case {
        name: "send64",
        what: "RC SEND 64 B, 32 per doorbell",
        op: WqeOpcode::Send,
        size: 64,
        mtu: IbMtu::Mtu4096,
        link: LinkLayer::Ethernet,
        batch: 32,
        messages: 32_000,
        callgrind_messages: 3_200,
    },
    Case {
        name: "write64k",
        what: "RC WRITE 64 KiB (MTU 4096), 4 per doorbell",
        op: WqeOpcode::RdmaWrite,
        size: 65536,
        mtu: IbMtu::Mtu4096,
        link: LinkLayer::Ethernet,
        batch: 4,
        messages: 400,
        callgrind_messages: 32,
    },
    Case {
        name: "write64k-mtu1024",
        what: "RC WRITE 64 KiB (MTU 1024), 4 per doorbell",
        op: WqeOpcode::RdmaWrite,
        size: 65536,
        mtu: IbMtu::Mtu1024,
        link: LinkLayer::Ethernet,
        batch: 4,
        messages: 400,
        callgrind_messages: 32,
    },
    Case {
        name: "write64k-ib",
        what: "RC WRITE 64 KiB (MTU 4096, IB), 4 per doorbell",
        op: WqeOpcode::RdmaWrite,
        size: 65536,
        mtu: IbMtu::Mtu4096,
        link: LinkLayer::InfiniBand,
        batch: 4,
        messages: 400,
        callgrind_messages: 32,
    },
];

/// A connected pair with its buffers, ready to run batches of one case.
struct Bench {
    p: Pair,
    src: common::verbs::Mr,
    dst: common::verbs::Mr,
    op: WqeOpcode,
    size: u32,
    batch: usize,
}

impl Bench {
    fn new(c: &Case) -> Bench {
        let conn = Conn {
            mtu: c.mtu,
            ..Conn::default()
        };
        let mut p = Pair::new(c.link, QpServiceType::Rc, conn, conn);
        let len = c.size as usize * c.batch;
        let src = p.a.mr(len);
        let dst = p.b.mr(len);
        let pattern: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        p.a.write(&src, 0, &pattern);
        Bench {
            p,
            src,
            dst,
            op: c.op,
            size: c.size,
            batch: c.batch,
        }
    }

    /// Outside the clock: receives posted (SEND), the batch's WQEs and doorbell record
    /// written. Returns the first 8 bytes of the last WQE, for the doorbell.
    fn prepare(&mut self) -> u64 {
        let mut first8 = 0;
        for i in 0..self.batch {
            let off = i * self.size as usize;
            let mut w = wr(self.op, &self.src, off, self.size);
            if self.op == WqeOpcode::RdmaWrite {
                w.raddr = Some((self.dst.iova + off as u64, self.dst.key));
            } else {
                let (key, iova) = (self.dst.key, self.dst.iova);
                self.p
                    .b
                    .post_recv(&mut self.p.bqp, &[(key, iova + off as u64, self.size)]);
            }
            first8 = self.p.a.write_send(&mut self.p.aqp, &w).1;
        }
        first8
    }

    /// Outside the clock: every CQE of the batch polled and checked.
    fn finish(&mut self) {
        let want_b = if self.op == WqeOpcode::Send {
            self.batch
        } else {
            0
        };
        let (mut got_a, mut got_b) = (0, 0);
        while let Some(wc) = self.p.a.poll(&mut self.p.acq) {
            assert_eq!(wc.opcode, CqeOpcode::Req, "sender CQE");
            got_a += 1;
        }
        while let Some(wc) = self.p.b.poll(&mut self.p.bcq) {
            assert_eq!(wc.opcode, CqeOpcode::RespSend, "receiver CQE");
            assert_eq!(wc.byte_cnt(), self.size, "receiver CQE byte count");
            got_b += 1;
        }
        assert_eq!((got_a, got_b), (self.batch, want_b), "CQEs of a batch");
    }

    /// Checks that the data arrived (once, after the runs).
    fn check_data(&self) {
        let len = self.size as usize * self.batch;
        let want: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        assert_eq!(
            self.p.b.read(&self.dst, 0, len),
            want,
            "data at the receiver"
        );
    }
}

/// The timed region, and the only code callgrind collects: the doorbell and the fabric
/// until idle.
#[inline(never)]
fn timed_region(b: &Bench, first8: u64) {
    b.p.a.ring_send(first8);
    assert!(b.p.fabric.run_until_idle(), "fabric did not go idle");
    black_box(b);
}

/// The same work as [`timed_region`] under another name, which callgrind does not collect:
/// the warm-up batch.
#[inline(never)]
fn warm_up(b: &Bench, first8: u64) {
    b.p.a.ring_send(first8);
    assert!(b.p.fabric.run_until_idle(), "fabric did not go idle");
    black_box(b);
}

/// Runs `messages` messages in batches; ns per message.
fn run(b: &mut Bench, messages: usize) -> f64 {
    run_in(b, messages, timed_region)
}

/// Runs `messages` messages in batches through `region`; ns per message.
fn run_in(b: &mut Bench, messages: usize, region: fn(&Bench, u64)) -> f64 {
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < messages {
        let first8 = b.prepare();
        let t = Instant::now();
        region(b, first8);
        total += t.elapsed();
        b.finish();
        done += b.batch;
    }
    total.as_nanos() as f64 / done as f64
}

/// A plain copy of `size` bytes, ns per copy (the reference).
fn copy_ns(size: usize, copies: usize) -> f64 {
    let src: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut dst = vec![0u8; size];
    let t = Instant::now();
    for _ in 0..copies {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    }
    t.elapsed().as_nanos() as f64 / copies as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Re-executes this benchmark under callgrind for `case`: instructions per message.
fn instructions(case: &Case) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--collect-atstart=no")
        .arg("--toggle-collect=*timed_region*")
        .arg("--callgrind-out-file=/dev/null")
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(CASE_ENV, case.name)
        .output()
        .map_err(|e| format!("valgrind: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "valgrind failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let collected: u64 = err
        .lines()
        .filter_map(|l| l.split_once("Collected :"))
        .find_map(|(_, n)| n.trim().parse().ok())
        .ok_or("no \"Collected :\" line from callgrind")?;
    Ok(collected as f64 / case.callgrind_messages as f64)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    if let Ok(name) = std::env::var(CASE_ENV) {
        // Under callgrind: one warm-up batch, then the counted messages.
        let case = CASES.iter().find(|c| c.name == name).expect("known case");
        let mut b = Bench::new(case);
        run_in(&mut b, case.batch, warm_up);
        run(&mut b, case.callgrind_messages);
        return;
    }
    let runs: usize = std::env::var("UHCA_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench { 5 } else { 1 });
    let callgrind = bench
        && std::env::var("UHCA_BENCH_CALLGRIND").as_deref() != Ok("0")
        && Command::new("valgrind").arg("--version").output().is_ok();
    println!(
        "{:<44} {:>12} {:>12} {:>14} {:>12} {:>14}",
        "case", "ns/message", "MB/s", "instr/message", "copy ns", "copy MB/s"
    );
    for case in CASES {
        let mut b = Bench::new(case);
        let messages = if bench { case.messages } else { case.batch * 4 };
        run_in(&mut b, case.batch, warm_up);
        let ns = median((0..runs).map(|_| run(&mut b, messages)).collect());
        b.check_data();
        let copy = median(
            (0..runs)
                .map(|_| copy_ns(case.size as usize, 20_000))
                .collect(),
        );
        let instr = if callgrind {
            match instructions(case) {
                Ok(v) => format!("{v:.0}"),
                Err(e) => {
                    eprintln!("{}: no instruction count: {e}", case.name);
                    "-".into()
                }
            }
        } else {
            "-".into()
        };
        let mbs = |ns: f64| case.size as f64 / ns * 1e9 / (1 << 20) as f64;
        println!(
            "{:<44} {:>12.0} {:>12.0} {:>14} {:>12.1} {:>14.0}",
            case.what,
            ns,
            mbs(ns),
            instr,
            copy,
            mbs(copy)
        );
    }
}
