//! Datapath benchmark: ns per posted WQE and per polled CQE on memory-backed rings, each
//! beside a plain copy of the same bytes measured in the same run.
//!
//! Run: `cargo bench -p uhca-hal` (about 10 s). `UHCA_BENCH_N` sets the WQEs per run,
//! `UHCA_BENCH_RUNS` the runs, `UHCA_BENCH_CASE` picks cases by a substring of their name
//! (for instruction counts under callgrind). Single thread; the SQ and CQ are real
//! `DmaBuf`s (volatile accesses, bounds checks, the real barriers); the UAR doorbell
//! register is one word of ordinary memory. Median of 5 runs per case.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use uhca_fwif::consts::{CqeOpcode, WqeCtrlFlags, WqeOpcode};
use uhca_fwif::cqe::{Cqe64, op_own_of};
use uhca_hal::cq::{CqLayout, CqRing};
use uhca_hal::testing::FakePlatform;
use uhca_hal::wq::{QpLayout, QpRings, SqDoorbell};
use uhca_hal::{Bar, DmaBuf, DmaMem};
use zerocopy::{FromZeros, IntoBytes};

const RUNS: usize = 5;
const LOG_SQ: u8 = 10;
const LOG_CQ: u8 = 12;

/// WQEs per run: 10 M, 100 k in the quick pass of `cargo test --benches`;
/// `UHCA_BENCH_N` overrides (e.g. for callgrind).
static POSTS: AtomicU64 = AtomicU64::new(10_000_000);

fn posts() -> u64 {
    POSTS.load(Ordering::Relaxed)
}

/// CQ laps per run (a lap is 4096 CQEs).
fn cq_laps() -> u64 {
    (posts() / 40_000).max(1)
}

/// The UAR doorbell as one word of memory.
struct RegBar(AtomicU64);

// SAFETY: touches nothing but its own atomic.
unsafe impl Bar for RegBar {
    fn bar_len(&self) -> usize {
        0x10000
    }
    fn read32(&self, _: usize) -> u32 {
        0
    }
    fn write32(&self, _: usize, v: u32) {
        self.0.store(v as u64, Ordering::Relaxed)
    }
    fn read64(&self, _: usize) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    fn write64(&self, _: usize, v: u64) {
        self.0.store(v, Ordering::Relaxed)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// ns per WQE posting `posts()` WQEs with a doorbell every `batch`.
#[inline(never)]
fn post(p: &FakePlatform, inline: bool, batch: u64) -> f64 {
    let bar = RegBar(AtomicU64::new(0));
    let l = QpLayout::new(0x99, None, Some(LOG_SQ));
    let mut qp = QpRings::new(
        DmaBuf::alloc(p, l.buffer_len(), 4096).unwrap(),
        l,
        SqDoorbell::new(0x4000),
    )
    .unwrap();
    let data = [0xa5u8; 64];
    let t = Instant::now();
    let mut last;
    for i in 0..posts() {
        let mut w = qp.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::CQ_UPDATE).unwrap();
        if inline {
            w.inline(black_box(&data)).unwrap();
        } else {
            w.data(black_box(0x1000 + i), 64, 0x42).unwrap();
        }
        last = Some(w.finish());
        if (i + 1) % batch == 0 {
            qp.ring_sq_doorbell(&bar);
        }
        // The device completes everything every 64 WQEs.
        if (i + 1) % 64 == 0 {
            let w = last.unwrap();
            qp.sq_complete(w.wqe_index, w.wqebbs).unwrap();
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / posts() as f64;
    black_box(bar.read64(0));
    ns
}

/// ns per WQE for a plain copy of the same WQE bytes into a ring, plus the 4-byte
/// doorbell record and the 8-byte doorbell store every `batch`.
#[inline(never)]
fn post_copy(wqe: &[u8], batch: u64) -> f64 {
    let mut ring = vec![0u8; 64 << LOG_SQ];
    let bbs = wqe.len().div_ceil(64);
    let mask = (1usize << LOG_SQ) - 1;
    let mut dbr = 0u32;
    let reg = AtomicU64::new(0);
    let t = Instant::now();
    let mut pi = 0usize;
    for i in 0..posts() {
        let off = (pi & mask) * 64;
        ring[off..off + wqe.len()].copy_from_slice(black_box(wqe));
        pi += bbs;
        if (i + 1) % batch == 0 {
            dbr = black_box(pi as u32 & 0xffff);
            reg.store(
                u64::from_ne_bytes(ring[off..off + 8].try_into().unwrap()),
                Ordering::Relaxed,
            );
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / posts() as f64;
    black_box((&ring, dbr, reg.load(Ordering::Relaxed)));
    ns
}

/// An image of a whole CQ lap as the device would leave it.
fn lap_image(lap: u64) -> Vec<u8> {
    let n = 1usize << LOG_CQ;
    let mut img = vec![0u8; n * 64];
    for i in 0..n {
        let mut c = Cqe64::new_zeroed();
        c.byte_cnt.set(i as u32);
        c.wqe_counter.set(i as u16);
        c.sop_drop_qpn.set(0x99);
        c.op_own = op_own_of(CqeOpcode::Req, (lap & 1) as u8);
        img[i * 64..i * 64 + 64].copy_from_slice(c.as_bytes());
    }
    img
}

/// ns per CQE polling in batches of 16, consumer index published per batch: each CQE read
/// through the view the driver's poller reads ([`CqRing::poll_next`]), the fields a
/// requester completion needs (opcode, QPN, WQE counter, WQE opcode, byte count).
#[inline(never)]
fn poll(p: &FakePlatform, images: &[Vec<u8>; 2]) -> f64 {
    let l = CqLayout::new(3, LOG_CQ);
    let mut cq = CqRing::new(DmaBuf::alloc(p, l.buffer_len(), 4096).unwrap(), l).unwrap();
    let base = cq.mem().iova();
    let n = 1u64 << LOG_CQ;
    let mut total = 0u128;
    let mut sum = 0u64;
    for lap in 0..cq_laps() {
        // The device fills the whole ring (not timed).
        p.dma.device_write(base, &images[(lap & 1) as usize]);
        let t = Instant::now();
        let mut got = 0;
        while got < n {
            for _ in 0..16 {
                let Some(cqe) = cq.poll_next() else { break };
                if cqe.opcode_raw() == CqeOpcode::Req.raw() {
                    sum += (cqe.qpn() ^ u32::from(cqe.sop())) as u64
                        + cqe.wqe_counter() as u64
                        + cqe.byte_cnt() as u64;
                }
                got += 1;
            }
            cq.update_consumer_index();
        }
        total += t.elapsed().as_nanos();
    }
    black_box(sum);
    total as f64 / (cq_laps() * n) as f64
}

/// ns per CQE for a plain copy of 64 bytes out of a ring.
#[inline(never)]
fn poll_copy(img: &[u8]) -> f64 {
    let n = 1usize << LOG_CQ;
    let mut total = 0u128;
    let mut sum = 0u64;
    for _ in 0..cq_laps() {
        let t = Instant::now();
        for i in 0..n {
            let mut c = [0u8; 64];
            c.copy_from_slice(&black_box(img)[i * 64..i * 64 + 64]);
            sum += black_box(c)[60] as u64;
        }
        total += t.elapsed().as_nanos();
    }
    black_box(sum);
    total as f64 / (cq_laps() * n as u64) as f64
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs a quick smoke pass.
    let quick = !std::env::args().any(|a| a == "--bench");
    let runs = if quick {
        1
    } else {
        std::env::var("UHCA_BENCH_RUNS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(RUNS)
    };
    let only = std::env::var("UHCA_BENCH_CASE").unwrap_or_default();
    let n = std::env::var("UHCA_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok());
    POSTS.store(
        n.unwrap_or(if quick { 100_000 } else { 10_000_000 }),
        Ordering::Relaxed,
    );
    let p = FakePlatform::new();

    // The WQE bytes each case posts, for the plain-copy reference.
    let wqe_sge = {
        let l = QpLayout::new(0x99, None, Some(2));
        let mut qp = QpRings::new(
            DmaBuf::alloc(&p, l.buffer_len(), 4096).unwrap(),
            l,
            SqDoorbell::new(0),
        )
        .unwrap();
        let mut w = qp.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::CQ_UPDATE).unwrap();
        w.data(0x1000, 64, 0x42).unwrap();
        w.finish();
        let mut b = vec![0u8; 32];
        qp.mem().read_bytes(0, &mut b);
        b
    };
    let wqe_inline = {
        let l = QpLayout::new(0x99, None, Some(2));
        let mut qp = QpRings::new(
            DmaBuf::alloc(&p, l.buffer_len(), 4096).unwrap(),
            l,
            SqDoorbell::new(0),
        )
        .unwrap();
        let mut w = qp.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::CQ_UPDATE).unwrap();
        w.inline(&[0xa5; 64]).unwrap();
        w.finish();
        let mut b = vec![0u8; 96];
        qp.mem().read_bytes(0, &mut b);
        b
    };
    let images = [lap_image(0), lap_image(1)];

    println!(
        "uhca-hal datapath benchmark: {} ({})",
        std::env::consts::ARCH,
        if quick { "quick" } else { "median of 5" }
    );
    println!(
        "single thread, 8-byte doorbell to a memory word, barriers as in uhca_hal::barriers\n"
    );
    println!(
        "{:<40} {:>12} {:>16} {:>7}",
        "case", "uhca ns/op", "plain copy ns/op", "ratio"
    );
    let row = |name: &str, ours: &mut dyn FnMut() -> f64, copy: &mut dyn FnMut() -> f64| {
        if !name.contains(only.as_str()) {
            return;
        }
        let mut a = Vec::new();
        let mut b = Vec::new();
        for _ in 0..runs {
            a.push(ours());
            b.push(copy());
        }
        let (a, b) = (median(a), median(b));
        println!("{name:<40} {a:>12.2} {b:>16.2} {:>7.2}", a / b);
    };
    row(
        "SEND 1 SGE (32 B), doorbell per WQE",
        &mut || post(&p, false, 1),
        &mut || post_copy(&wqe_sge, 1),
    );
    row(
        "SEND 1 SGE (32 B), doorbell per 32",
        &mut || post(&p, false, 32),
        &mut || post_copy(&wqe_sge, 32),
    );
    row(
        "SEND 64 B inline (96 B), doorbell per WQE",
        &mut || post(&p, true, 1),
        &mut || post_copy(&wqe_inline, 1),
    );
    row(
        "SEND 64 B inline (96 B), doorbell per 32",
        &mut || post(&p, true, 32),
        &mut || post_copy(&wqe_inline, 32),
    );
    row(
        "poll CQE, 16 per call",
        &mut || poll(&p, &images),
        &mut || poll_copy(&images[0]),
    );
}
